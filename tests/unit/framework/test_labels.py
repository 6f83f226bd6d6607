"""Label selectors (berth.framework.labels), ported from apimachinery's
labels/selector_test.go (TestRequirementConstructor, TestSelectorMatches,
TestAdd), apis/meta/v1/helpers_test.go (TestLabelSelectorAsSelector) and the
label key, label value and integer rules NewRequirement checks
(content.IsLabelKey, content.IsLabelValue, strconv.ParseInt)."""

from __future__ import annotations

import msgspec
import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.labels import (
    EVERYTHING,
    NOTHING,
    Requirement,
    RequirementError,
    Selector,
    SelectorError,
    label_key_errors,
    label_selector_as_selector,
    label_value_errors,
    new_requirement,
    parse_int64,
    requirement_errors,
    selector_from_json,
    selector_from_set,
)

# The detail upstream gives for a label key whose name part is malformed.
BAD_NAME = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def label_selector(
    match_labels: dict[str, str] | None = None,
    exprs: list[tuple[str, str, list[str]]] | None = None,
) -> pb.LabelSelector:
    sel = pb.LabelSelector(match_labels=match_labels or {})
    for key, op, values in exprs or []:
        sel.match_expressions.add(key=key, operator=op, values=values)
    return sel


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("0", 0),
        ("0204", 204),
        ("-12", -12),
        ("+12", 12),
        ("9223372036854775807", 2**63 - 1),
        ("9223372036854775808", None),
        ("-9223372036854775808", -(2**63)),
        ("", None),
        ("-", None),
        (" 1", None),
        ("1_000", None),
        ("0x10", None),
        ("١٢", None),
        ("0" * 5000 + "7", 7),
        ("9" * 5000, None),
    ],
)
def test_parse_int64_reads_like_strconv_parse_int(text: str, want: int | None) -> None:
    assert parse_int64(text) == want


@pytest.mark.parametrize(
    ("key", "want"),
    [
        ("foo", []),
        ("example.com/foo", []),
        ("a" * 63, []),
        ("a" * 64, ["name part must be no more than 63 bytes"]),
        ("/foo", ["prefix part must be non-empty"]),
        (
            "Example.com/foo",
            [
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case "
                "alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character (e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ],
        ),
        ("example.com/", ["name part must be non-empty", BAD_NAME]),
        ("invalid key", [BAD_NAME]),
    ],
)
def test_label_key_errors(key: str, want: list[str]) -> None:
    """content.IsLabelKey."""
    assert label_key_errors(key) == want


def test_label_key_with_two_slashes() -> None:
    (err,) = label_key_errors("invalid/label/key")
    assert err.startswith("a valid label key must consist of alphanumeric characters")
    assert err.endswith("with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')")


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("", True),
        ("a", True),
        ("a-b_c.d", True),
        ("-a", False),
        ("a" * 63, True),
        ("a" * 64, False),
    ],
)
def test_label_value_errors(value: str, valid: bool) -> None:
    """content.IsLabelValue: empty is valid, at most 63 bytes."""
    assert (label_value_errors(value) == []) is valid


# -- requirements ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "op", "values", "want"),
    [
        pytest.param("k", "In", ["a"], [], id="In"),
        pytest.param(
            "k",
            "In",
            [],
            [
                RequirementError(
                    "values", (), ("for 'in', 'notin' operators, values set can't be empty",)
                )
            ],
            id="In without values",
        ),
        pytest.param(
            "k",
            "Exists",
            ["a"],
            [
                RequirementError(
                    "values",
                    ("a",),
                    ("values set must be empty for exists and does not exist",),
                )
            ],
            id="Exists with a value",
        ),
        pytest.param(
            "k",
            "Gt",
            ["1", "x"],
            [
                RequirementError(
                    "values",
                    ("1", "x"),
                    ("for 'Gt', 'Lt' operators, exactly one value is required",),
                ),
                RequirementError(
                    "integer", "x", ("for 'Gt', 'Lt' operators, the value must be an integer",), 1
                ),
            ],
            id="Gt with two values, one not an integer",
        ),
        pytest.param(
            "invalid key",
            "NotIn",
            ["-a"],
            [
                RequirementError("key", "invalid key", (BAD_NAME,)),
                RequirementError("value", "-a", tuple(label_value_errors("-a")), 0),
            ],
            id="bad key and bad value, in NewRequirement's order",
        ),
    ],
)
def test_requirement_errors(
    key: str, op: str, values: list[str], want: list[RequirementError]
) -> None:
    """labels.NewRequirement's checks, as data for the caller to word."""
    assert requirement_errors(key, op, values) == want


def test_requirement_errors_without_syntax_checks_only_counts_and_integers() -> None:
    assert requirement_errors("invalid key", "In", ["-a"], check_syntax=False) == []
    (err,) = requirement_errors("invalid key", "Lt", ["x"], check_syntax=False)
    assert err.field == "integer"


def test_new_requirement_reads_the_bound_of_gt_and_lt() -> None:
    assert new_requirement("k", "Gt", ["007"]) == Requirement("k", "Gt", frozenset({"007"}), 7)
    assert new_requirement("k", "In", ["a", "b", "a"]) == Requirement(
        "k", "In", frozenset({"a", "b"})
    )


@pytest.mark.parametrize(
    ("requirement", "labels", "want"),
    [
        (Requirement("k", "In", frozenset({"a", "b"})), {"k": "b"}, True),
        (Requirement("k", "In", frozenset({"a"})), {}, False),
        (Requirement("k", "NotIn", frozenset({"a"})), {}, True),
        (Requirement("k", "NotIn", frozenset({"a"})), {"k": "a"}, False),
        (Requirement("k", "Exists"), {"k": ""}, True),
        (Requirement("k", "Exists"), {"j": ""}, False),
        (Requirement("k", "DoesNotExist"), {"j": ""}, True),
        (Requirement("k", "DoesNotExist"), {"k": "a"}, False),
        (Requirement("k", "Gt", frozenset({"5"}), 5), {"k": "6"}, True),
        (Requirement("k", "Gt", frozenset({"5"}), 5), {"k": "5"}, False),
        (Requirement("k", "Gt", frozenset({"5"}), 5), {"k": "x"}, False),
        (Requirement("k", "Gt", frozenset({"5"}), 5), {}, False),
        (Requirement("k", "Lt", frozenset({"5"}), 5), {"k": "-1"}, True),
        (Requirement("k", "Lt", frozenset({"5"}), 5), {"k": "5"}, False),
    ],
    ids=repr,
)
def test_requirement_and_selector_match_alike(
    requirement: Requirement, labels: dict[str, str], want: bool
) -> None:
    """Requirement.Matches, and Selector.Matches with it as the one requirement."""
    assert requirement.matches(labels) is want
    assert Selector((requirement,)).matches(labels) is want


# -- selectors -----------------------------------------------------------------------


def test_nothing_matches_nothing_and_everything_everything() -> None:
    assert not NOTHING.matches({}) and not NOTHING.empty
    assert EVERYTHING.matches({}) and EVERYTHING.matches({"a": "b"}) and EVERYTHING.empty
    assert NOTHING.add(Requirement("a", "Exists")) is NOTHING
    assert EVERYTHING.add(Requirement("a", "Exists")) == Selector((Requirement("a", "Exists"),))


def test_selector_from_set_is_key_equals_value_by_key() -> None:
    sel = selector_from_set({"b": "2", "a": "1"})
    assert sel.requirements == (
        Requirement("a", "In", frozenset({"1"})),
        Requirement("b", "In", frozenset({"2"})),
    )
    assert sel.matches({"a": "1", "b": "2", "c": "3"})
    assert not sel.matches({"a": "1"})
    assert selector_from_set({}) == EVERYTHING


def test_label_selector_as_selector_unset_is_nothing_and_empty_is_everything() -> None:
    assert label_selector_as_selector(None) is NOTHING
    assert label_selector_as_selector(pb.LabelSelector()) is EVERYTHING


def test_label_selector_as_selector_ands_its_entries_in_sorted_order() -> None:
    sel = label_selector_as_selector(
        label_selector({"b": "1"}, [("c", "NotIn", ["x", "y"]), ("a", "Exists", [])])
    )
    assert [r.key for r in sel.requirements] == ["a", "b", "c"]
    assert sel.matches({"a": "", "b": "1", "c": "z"})
    assert not sel.matches({"a": "", "b": "1", "c": "x"})
    assert not sel.matches({"b": "1"})
    # The order of the entries does not make selectors differ.
    again = label_selector_as_selector(
        label_selector({"b": "1"}, [("a", "Exists", []), ("c", "NotIn", ["y", "x"])])
    )
    assert again == sel and hash(again) == hash(sel)


@pytest.mark.parametrize(
    ("sel", "message"),
    [
        pytest.param(
            label_selector(exprs=[("a", "Gt", ["1"])]),
            'labelSelector.matchExpressions[0].operator: "Gt" is not a valid label selector '
            "operator",
            id="Gt is for node selectors",
        ),
        pytest.param(
            label_selector(exprs=[("a", "In", [])]),
            "labelSelector.matchExpressions[0].values: for 'in', 'notin' operators, values set "
            "can't be empty",
            id="In without values",
        ),
        pytest.param(
            label_selector({"invalid key": "-v"}),
            f"labelSelector.matchLabels[invalid key].key: {BAD_NAME}; "
            "labelSelector.matchLabels[invalid key].values[0]: "
            + "; ".join(label_value_errors("-v")),
            id="bad key and value in matchLabels",
        ),
        pytest.param(
            label_selector(exprs=[("/a", "Exists", ["-x"])]),
            "labelSelector.matchExpressions[0].key: prefix part must be non-empty; "
            "labelSelector.matchExpressions[0].values: values set must be empty for exists and "
            "does not exist; labelSelector.matchExpressions[0].values[0]: "
            + "; ".join(label_value_errors("-x")),
            id="every complaint of the first bad entry",
        ),
    ],
)
def test_label_selector_as_selector_errors(sel: pb.LabelSelector, message: str) -> None:
    with pytest.raises(SelectorError) as exc:
        label_selector_as_selector(sel)
    assert str(exc.value) == message


def test_label_selector_as_selector_errors_carry_the_entry() -> None:
    with pytest.raises(SelectorError) as exc:
        label_selector_as_selector(label_selector(exprs=[("k", "Near", [])]), "sel")
    assert (exc.value.path, exc.value.key, exc.value.operator, exc.value.errors) == (
        "sel.matchExpressions[0]",
        "k",
        "Near",
        (),
    )


def test_label_selector_as_selector_without_syntax_checks() -> None:
    sel = label_selector({"invalid key": "-v"})
    assert label_selector_as_selector(sel, check_syntax=False).matches({"invalid key": "-v"})
    with pytest.raises(SelectorError):
        label_selector_as_selector(label_selector(exprs=[("k", "In", [])]), check_syntax=False)


def test_selector_from_json() -> None:
    sel = selector_from_json(
        {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]},
        "spec.selector",
    )
    assert sel.matches({"a": "1", "b": ""}) and not sel.matches({"a": "1"})
    assert selector_from_json(None, "spec.selector") is NOTHING
    assert selector_from_json({}, "spec.selector") is EVERYTHING
    for bad, message in [
        ([], "spec.selector: not an object"),
        ({"matchLabels": ["a"]}, "spec.selector.matchLabels: not an object"),
        ({"matchExpressions": {"a": 1}}, "spec.selector.matchExpressions: not a list"),
        ({"matchExpressions": [1]}, "spec.selector.matchExpressions: an entry is not an object"),
        (
            {"matchExpressions": [{"key": "a", "operator": "Near"}]},
            'spec.selector.matchExpressions[0].operator: "Near" is not a valid label selector '
            "operator",
        ),
    ]:
        with pytest.raises(SelectorError) as exc:
            selector_from_json(bad, "spec.selector")
        assert str(exc.value) == message


# -- CycleState wire form ------------------------------------------------------------


class _ThreeFieldRequirement(msgspec.Struct, frozen=True, array_like=True):
    # A requirement encoded without Gt/Lt's bound: [key, operator, values].
    key: str
    operator: str
    values: tuple[str, ...] = ()


def test_selectors_survive_the_wire() -> None:
    sel = label_selector_as_selector(
        label_selector({"a": "1"}, [("b", "NotIn", ["x", "y"]), ("c", "DoesNotExist", [])])
    )
    for s in (sel, NOTHING, EVERYTHING):
        assert msgspec.msgpack.decode(msgspec.msgpack.encode(s), type=Selector) == s
    gt = Requirement("n", "Gt", frozenset({"3"}), 3)
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(gt), type=Requirement) == gt


def test_requirements_decode_with_or_without_a_bound() -> None:
    """A requirement is the array [key, operator, values, bound]; a decoder
    that knows only the first three reads it, and one encoded without the
    bound reads as bound 0."""
    req = Requirement("a", "In", frozenset({"x"}))
    short = msgspec.msgpack.decode(msgspec.msgpack.encode(req), type=_ThreeFieldRequirement)
    assert short == _ThreeFieldRequirement("a", "In", ("x",))
    back = msgspec.msgpack.decode(msgspec.msgpack.encode(short), type=Requirement)
    assert back == req
