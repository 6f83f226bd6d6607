"""Node selector semantics, ported from component-helpers'
scheduling/corev1/nodeaffinity/nodeaffinity_test.go (TestNodeSelectorMatch,
TestPreferredSchedulingTermsScore, TestNodeSelectorRequirementsAsSelector,
TestPodMatchesNodeSelectorAndAffinityTerms) and from the apimachinery label
rules behind them (labels.NewRequirement, Requirement.Matches,
content.IsLabelKey, content.IsLabelValue, strconv.ParseInt: their own
tests are in tests/unit/framework/test_labels.py)."""

from __future__ import annotations

import msgspec
import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.labels import Requirement
from berth.framework.model import PodInfo
from berth.framework.nodeaffinity import (
    RequiredNodeAffinity,
    SelectorTerm,
    aggregate_message,
    compile_node_selector,
    compile_preferred_terms,
    compile_term,
    preferred_score,
    required_node_affinity,
    selector_matches,
)
from tests.plugins.nodeaffinity.testutil import affinity_pod, match, name_in, term

# The detail upstream gives for a label key whose name part is malformed.
BAD_NAME = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


# -- TestNodeSelectorMatch --------------------------------------------------------


def test_node_selector_match_invalid_field_selector_and_label_selector() -> None:
    """TestNodeSelectorMatch "invalid field selector and label selector":
    NewNodeSelector reports both errors with their paths."""
    _, errors = compile_node_selector(
        [
            term(fields=[name_in("host_1", "host_2")]),
            term(match("label_1", "In", "label_1_val"), fields=[name_in("host_1")]),
            term(match("invalid key", "In", "label_value")),
        ]
    )
    assert [str(e) for e in errors] == [
        'nodeSelectorTerms[0].matchFields[0].values: Invalid value: ["host_1","host_2"]: '
        "must have one element",
        f'nodeSelectorTerms[2].matchExpressions[0].key: Invalid value: "invalid key": {BAD_NAME}',
    ]


@pytest.mark.parametrize(
    ("terms", "name", "labels", "want"),
    [
        pytest.param(
            [term(match("label_1", "In", "label_1_val"), fields=[name_in("host_1")])],
            "host_1",
            {},
            False,
            id="node matches field selector, but not labels",
        ),
        pytest.param(
            [term(match("label_1", "In", "label_1_val"), fields=[name_in("host_1")])],
            "host_1",
            {"label_1": "label_1_val"},
            True,
            id="node matches field selector and label selector",
        ),
        pytest.param(
            [term(match("label_1", "In", "label_1_val")), term(fields=[name_in("host_1")])],
            "host_1",
            {},
            True,
            id="second term matches",
        ),
        pytest.param([], "host_1", {}, False, id="no terms match nothing"),
        pytest.param([term()], "host_1", {}, False, id="an empty term matches nothing"),
        pytest.param(
            [term(match("invalid key", "In", "x")), term(match("a", "Exists"))],
            "host_1",
            {"a": "1"},
            True,
            id="a term that does not parse is skipped, the next one still matches",
        ),
        pytest.param(
            [term(fields=[name_in("host_1")])],
            "",
            {},
            True,
            id="a node without a name has no fields: field requirements are not checked",
        ),
        pytest.param(
            [term(fields=[match("metadata.name", "NotIn", "host_1")])],
            "host_2",
            {},
            True,
            id="NotIn on metadata.name",
        ),
        pytest.param(
            [term(fields=[match("metadata.name", "NotIn", "host_1")])],
            "host_1",
            {},
            False,
            id="NotIn on metadata.name excludes that node",
        ),
        pytest.param(
            [term(fields=[match("metadata.uid", "In", "x")])],
            "host_1",
            {},
            False,
            id="a field other than metadata.name reads as empty",
        ),
        pytest.param(
            [term(fields=[match("metadata.uid", "NotIn", "x")])],
            "host_1",
            {},
            True,
            id="NotIn on an unknown field matches",
        ),
    ],
)
def test_node_selector_match(
    terms: list[pb.NodeSelectorTerm], name: str, labels: dict[str, str], want: bool
) -> None:
    """TestNodeSelectorMatch: terms ORed, expressions and fields ANDed."""
    parsed, _ = compile_node_selector(terms)
    assert selector_matches(parsed, labels, name) is want


# -- TestPreferredSchedulingTermsScore --------------------------------------------


def test_preferred_terms_invalid_field_selector_and_label_selector() -> None:
    """TestPreferredSchedulingTermsScore "invalid field selector and label
    selector": every error, paths from the term index."""
    _, errors = compile_preferred_terms(
        [
            pb.PreferredSchedulingTerm(
                weight=1, preference=term(fields=[name_in("host_1", "host_2")])
            ),
            pb.PreferredSchedulingTerm(
                weight=1,
                preference=term(match("label_1", "In", "label_1_val"), fields=[name_in("host_1")]),
            ),
            pb.PreferredSchedulingTerm(
                weight=1, preference=term(match("invalid key", "In", "label_value"))
            ),
        ]
    )
    assert [str(e) for e in errors] == [
        '[0].matchFields[0].values: Invalid value: ["host_1","host_2"]: must have one element',
        f'[2].matchExpressions[0].key: Invalid value: "invalid key": {BAD_NAME}',
    ]


def test_preferred_terms_invalid_but_weight_zero_is_not_reported() -> None:
    """TestPreferredSchedulingTermsScore "invalid field selector but no
    weight, error not reported"."""
    terms, errors = compile_preferred_terms(
        [
            pb.PreferredSchedulingTerm(
                weight=0, preference=term(fields=[name_in("host_1", "host_2")])
            )
        ]
    )
    assert errors == []
    assert preferred_score(terms, {}, "host_1") == 0


def test_preferred_terms_first_and_third_term_match() -> None:
    """TestPreferredSchedulingTermsScore "first and third term match"."""
    terms, errors = compile_preferred_terms(
        [
            pb.PreferredSchedulingTerm(weight=5, preference=term(fields=[name_in("host_1")])),
            pb.PreferredSchedulingTerm(
                weight=7, preference=term(match("unknown_label", "In", "unknown_label_val"))
            ),
            pb.PreferredSchedulingTerm(
                weight=11, preference=term(match("label_1", "In", "label_1_val"))
            ),
        ]
    )
    assert errors == []
    assert preferred_score(terms, {"label_1": "label_1_val"}, "host_1") == 16


# -- TestNodeSelectorRequirementsAsSelector -------------------------------------------


@pytest.mark.parametrize(
    ("requirement", "want"),
    [
        pytest.param(
            match("foo", "In", "bar", "baz"),
            Requirement("foo", "In", frozenset({"bar", "baz"})),
            id="foo in (baz,bar)",
        ),
        pytest.param(
            match("foo", "Gt", "1"), Requirement("foo", "Gt", frozenset({"1"}), 1), id="foo>1"
        ),
        pytest.param(
            match("bar", "Lt", "7"), Requirement("bar", "Lt", frozenset({"7"}), 7), id="bar<7"
        ),
    ],
)
def test_requirements_as_selector_parse(
    requirement: pb.NodeSelectorRequirement, want: Requirement
) -> None:
    """TestNodeSelectorRequirementsAsSelector: what parses."""
    parsed, errors = compile_term(term(requirement), "root")
    assert errors == []
    assert parsed.expressions == (want,)


@pytest.mark.parametrize(
    ("requirement", "want"),
    [
        pytest.param(
            match("foo", "Exists", "bar", "baz"),
            'root.matchExpressions[0].values: Invalid value: ["bar","baz"]: values set must be '
            "empty for exists and does not exist",
            id="Exists with values",
        ),
        pytest.param(
            match("baz", "invalid", "5"),
            'root.matchExpressions[0].operator: Unsupported value: "invalid": supported values: '
            '"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"',
            id="unknown operator",
        ),
        pytest.param(
            match("foo", "In"),
            "root.matchExpressions[0].values: Invalid value: null: for 'in', 'notin' operators, "
            "values set can't be empty",
            id="In without values",
        ),
        pytest.param(
            match("foo", "Gt", "1", "2"),
            "root.matchExpressions[0].values: Invalid value: [\"1\",\"2\"]: for 'Gt', 'Lt' "
            "operators, exactly one value is required",
            id="Gt with two values",
        ),
        pytest.param(
            match("foo", "Lt", "x"),
            "root.matchExpressions[0].values[0]: Invalid value: \"x\": for 'Gt', 'Lt' "
            "operators, the value must be an integer",
            id="Lt with a non-integer",
        ),
        pytest.param(
            match("foo", "In", "bad value"),
            'root.matchExpressions[0].values[0][foo]: Invalid value: "bad value": a valid label '
            "must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  "
            "or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
            id="In with a value that is no label value",
        ),
        pytest.param(
            match("metadata.name", "Exists"),
            None,
            id="a label key that looks like a field is a valid label key",
        ),
    ],
)
def test_requirements_as_selector_errors(
    requirement: pb.NodeSelectorRequirement, want: str | None
) -> None:
    """TestNodeSelectorRequirementsAsSelector: what does not parse, and the
    message (labels.NewRequirement's checks)."""
    _, errors = compile_term(term(requirement), "root")
    assert [str(e) for e in errors] == ([] if want is None else [want])


def test_field_requirement_operators() -> None:
    """nodeSelectorRequirementsAsFieldSelector: In and NotIn only."""
    _, errors = compile_term(term(fields=[match("metadata.name", "Exists")]), "root")
    assert [str(e) for e in errors] == [
        'root.matchFields[0].operator: Unsupported value: "Exists": supported values: "In", "NotIn"'
    ]


# -- TestPodMatchesNodeSelectorAndAffinityTerms ----------------------------------------


@pytest.mark.parametrize(
    ("pod", "labels", "want"),
    [
        pytest.param(affinity_pod(), {}, True, id="no selector"),
        pytest.param(affinity_pod(node_selector={"foo": "bar"}), {}, False, id="missing labels"),
        pytest.param(
            affinity_pod(node_selector={"foo": "bar"}), {"foo": "bar"}, True, id="same labels"
        ),
        pytest.param(
            affinity_pod(node_selector={"foo": "bar"}),
            {"foo": "bar", "baz": "blah"},
            True,
            id="node labels are superset",
        ),
        pytest.param(
            affinity_pod(node_selector={"foo": "bar", "baz": "blah"}),
            {"foo": "bar"},
            False,
            id="node labels are subset",
        ),
        pytest.param(
            affinity_pod(node_selector={"foo": ""}),
            {},
            False,
            id="a selector on an empty value needs the label",
        ),
        pytest.param(
            affinity_pod(required=[term(match("foo", "In", "bar", "value2"))]),
            {"foo": "bar"},
            True,
            id="matchExpressions In matches",
        ),
        pytest.param(
            affinity_pod(required=[term(match("kernel-version", "Gt", "0204"))]),
            {"kernel-version": "0206"},
            True,
            id="matchExpressions Gt matches, leading zeros read as decimal",
        ),
        pytest.param(
            affinity_pod(required=[term(match("mem-type", "NotIn", "DDR", "DDR2"))]),
            {"mem-type": "DDR3"},
            True,
            id="matchExpressions NotIn matches",
        ),
        pytest.param(
            affinity_pod(required=[term(match("GPU", "Exists"))]),
            {"GPU": "NVIDIA-GRID-K1"},
            True,
            id="matchExpressions Exists matches",
        ),
        pytest.param(
            affinity_pod(required=[term(match("foo", "In", "value1", "value2"))]),
            {"foo": "bar"},
            False,
            id="affinity that does not match the node's labels",
        ),
        pytest.param(
            affinity_pod(required=[]),
            {"foo": "bar"},
            False,
            id="an empty NodeSelectorTerms list matches nothing",
        ),
        pytest.param(
            affinity_pod(required=[term()]),
            {"foo": "bar"},
            False,
            id="empty MatchExpressions match nothing",
        ),
        pytest.param(
            affinity_pod(node_affinity=True),
            {"foo": "bar"},
            True,
            id="affinity but nil required NodeSelector",
        ),
        pytest.param(
            affinity_pod(
                required=[term(match("GPU", "Exists"), match("GPU", "NotIn", "AMD", "INTER"))]
            ),
            {"GPU": "NVIDIA-GRID-K1"},
            True,
            id="multiple matchExpressions ANDed that match",
        ),
        pytest.param(
            affinity_pod(
                required=[term(match("GPU", "Exists"), match("GPU", "In", "AMD", "INTER"))]
            ),
            {"GPU": "NVIDIA-GRID-K1"},
            False,
            id="multiple matchExpressions ANDed that don't match",
        ),
        pytest.param(
            affinity_pod(
                required=[
                    term(match("foo", "In", "bar", "value2")),
                    term(match("diffkey", "In", "wrong", "value2")),
                ]
            ),
            {"foo": "bar"},
            True,
            id="multiple NodeSelectorTerms ORed",
        ),
        pytest.param(
            affinity_pod(node_selector={"foo": "bar"}, required=[term(match("foo", "Exists"))]),
            {"foo": "bar"},
            True,
            id="affinity and nodeSelector both satisfied",
        ),
        pytest.param(
            affinity_pod(node_selector={"foo": "bar"}, required=[term(match("foo", "Exists"))]),
            {"foo": "barrrrrr"},
            False,
            id="affinity matches but nodeSelector does not",
        ),
        pytest.param(
            affinity_pod(required=[term(match("foo", "NotIn", "invalid value: ___@#$%^"))]),
            {"foo": "bar"},
            False,
            id="an invalid value in an affinity term matches nothing",
        ),
    ],
)
def test_pod_matches_node_selector_and_affinity_terms(
    pod: PodInfo, labels: dict[str, str], want: bool
) -> None:
    """TestPodMatchesNodeSelectorAndAffinityTerms (GetRequiredNodeAffinity
    then Match)."""
    assert required_node_affinity(pod.proto).matches(labels, "node") is want


# -- requirement matching, one operator at a time -----------------------------------------


@pytest.mark.parametrize(
    ("requirement", "labels", "want"),
    [
        pytest.param(match("k", "In", "a", "b"), {"k": "b"}, True, id="In, listed"),
        pytest.param(match("k", "In", "a"), {"k": "c"}, False, id="In, not listed"),
        pytest.param(match("k", "In", "a"), {}, False, id="In, absent"),
        pytest.param(match("k", "NotIn", "a"), {}, True, id="NotIn, absent"),
        pytest.param(match("k", "NotIn", "a"), {"k": "a"}, False, id="NotIn, listed"),
        pytest.param(match("k", "Exists"), {"k": ""}, True, id="Exists, empty value"),
        pytest.param(match("k", "DoesNotExist"), {"k": ""}, False, id="DoesNotExist, present"),
        pytest.param(match("k", "DoesNotExist"), {"j": "1"}, True, id="DoesNotExist, absent"),
        pytest.param(match("k", "Gt", "5"), {"k": "6"}, True, id="Gt, greater"),
        pytest.param(match("k", "Gt", "5"), {"k": "5"}, False, id="Gt, equal"),
        pytest.param(match("k", "Gt", "5"), {}, False, id="Gt, absent"),
        pytest.param(match("k", "Gt", "5"), {"k": "v6"}, False, id="Gt, label not an integer"),
        pytest.param(match("k", "Gt", "5"), {"k": "-7"}, False, id="Gt, negative label"),
        pytest.param(match("k", "Lt", "5"), {"k": "-7"}, True, id="Lt, negative label"),
        pytest.param(match("k", "Lt", "5"), {"k": "+4"}, True, id="Lt, label with a plus sign"),
        pytest.param(match("k", "Lt", "5"), {"k": "4.0"}, False, id="Lt, decimal label"),
        pytest.param(match("k", "Lt", "5"), {"k": "1_0"}, False, id="Lt, underscore in label"),
        pytest.param(
            match("k", "Lt", "5"), {"k": "-9223372036854775809"}, False, id="Lt, below int64"
        ),
    ],
)
def test_requirement_matches(
    requirement: pb.NodeSelectorRequirement, labels: dict[str, str], want: bool
) -> None:
    """labels.Requirement.Matches."""
    parsed, errors = compile_term(term(requirement))
    assert errors == []
    assert parsed.matches(labels, "node") is want


def test_aggregate_message_drops_duplicates_and_brackets_several() -> None:
    """errors.aggregate.Error."""
    assert aggregate_message(["a"]) == "a"
    assert aggregate_message(["a", "a"]) == "a"
    assert aggregate_message(["a", "b", "a"]) == "[a, b]"


def test_parsed_selectors_survive_the_wire() -> None:
    """CycleState carries parsed selectors as msgpack: they decode equal."""
    pod = affinity_pod(
        node_selector={"zone": "a"},
        required=[
            term(match("k", "In", "x", "y"), match("n", "Gt", "3"), fields=[name_in("n1")]),
            term(match("k", "DoesNotExist")),
        ],
    )
    parsed = required_node_affinity(pod.proto)
    data = msgspec.msgpack.encode(parsed)
    assert msgspec.msgpack.decode(data, type=RequiredNodeAffinity) == parsed
    terms, _ = compile_preferred_terms(
        [pb.PreferredSchedulingTerm(weight=3, preference=term(match("k", "Exists")))]
    )
    again = msgspec.msgpack.decode(msgspec.msgpack.encode(terms), type=tuple[SelectorTerm, ...])
    assert again == terms
