"""Term parsing and matching (kube-scheduler framework types.go: newAffinityTerm,
getNamespacesFromPodAffinityTerm, AffinityTerm.Matches; metav1.LabelSelectorAsSelector)."""

from __future__ import annotations

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.labels import EVERYTHING, NOTHING
from berth.plugins.interpodaffinity.terms import (
    ParsedTerms,
    TermError,
    compile_selector,
    parsed_terms,
    pod_matches_all,
    signature,
)
from tests.plugins.interpodaffinity.testutil import info, pod, selector, term, term_in


def test_an_unset_selector_matches_nothing_and_an_empty_one_everything() -> None:
    assert compile_selector(None) is NOTHING
    assert compile_selector(pb.LabelSelector()) == EVERYTHING
    assert not NOTHING.matches({})
    assert EVERYTHING.matches({}) and EVERYTHING.matches({"a": "b"})
    assert EVERYTHING.empty and not NOTHING.empty


@pytest.mark.parametrize(
    ("exprs", "labels", "want"),
    [
        ([("a", "In", ["x", "y"])], {"a": "y"}, True),
        ([("a", "In", ["x"])], {}, False),
        ([("a", "NotIn", ["x"])], {}, True),
        ([("a", "NotIn", ["x"])], {"a": "x"}, False),
        ([("a", "Exists", [])], {"a": ""}, True),
        ([("a", "Exists", [])], {"b": ""}, False),
        ([("a", "DoesNotExist", [])], {"b": ""}, True),
        ([("a", "DoesNotExist", [])], {"a": "x"}, False),
        ([("a", "Exists", []), ("b", "In", ["1"])], {"a": "", "b": "2"}, False),
    ],
)
def test_requirements_are_anded(
    exprs: list[tuple[str, str, list[str]]], labels: dict[str, str], want: bool
) -> None:
    assert compile_selector(selector(exprs=exprs)).matches(labels) is want


def test_match_labels_and_expressions_are_anded() -> None:
    sel = compile_selector(selector({"app": "web"}, [("tier", "NotIn", ["db"])]))
    assert sel.matches({"app": "web", "tier": "fe"})
    assert not sel.matches({"app": "web", "tier": "db"})
    assert not sel.matches({"tier": "fe"})


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        (("a", "Near", ["x"]), "'Near' is not a valid label selector operator"),
        (("a", "In", []), "values set can't be empty"),
        (("a", "Exists", ["x"]), "values set must be empty"),
    ],
)
def test_selectors_that_do_not_parse(expr: tuple[str, str, list[str]], message: str) -> None:
    with pytest.raises(TermError, match=message):
        compile_selector(selector(exprs=[expr]))


def test_a_term_without_namespaces_counts_the_pods_own_namespace() -> None:
    (t,) = parsed_terms(
        info(pod(namespace="ns1", affinity=[term_in("a", "zone", "x")]))
    ).required_affinity
    assert t.namespaces == frozenset({"ns1"})
    assert t.namespace_selector is NOTHING
    assert t.matches(pod("o", namespace="ns1", labels={"a": "x"}), None)
    assert not t.matches(pod("o", namespace="ns2", labels={"a": "x"}), None)


def test_listed_namespaces_or_a_namespace_selector_replace_the_pods_own() -> None:
    terms = parsed_terms(
        info(
            pod(
                namespace="ns1",
                affinity=[
                    term("zone", selector({"a": "x"}), namespaces=["ns2"]),
                    term("zone", selector({"a": "x"}), namespace_selector=selector({"t": "1"})),
                    term("zone", selector({"a": "x"}), namespace_selector=selector()),
                ],
            )
        )
    ).required_affinity
    listed, by_labels, everywhere = terms
    assert listed.namespaces == frozenset({"ns2"})
    assert by_labels.namespaces == frozenset()
    other = pod("o", namespace="ns3", labels={"a": "x"})
    assert not by_labels.matches(other, {"t": "2"})
    assert by_labels.matches(other, {"t": "1"})
    # An empty namespace selector selects every namespace, labels or not.
    assert everywhere.matches(other, None)


def test_a_group_that_does_not_parse_is_empty_and_reported() -> None:
    terms = parsed_terms(
        info(
            pod(
                affinity=[term("zone", selector(exprs=[("a", "Bad", [])]))],
                anti=[term_in("a", "zone", "x")],
            )
        )
    )
    assert terms.required_affinity == ()
    assert len(terms.required_anti_affinity) == 1
    assert terms.errors == ("requiredAffinityTerms: 'Bad' is not a valid label selector operator",)


def test_pod_matches_all_needs_at_least_one_term() -> None:
    p = pod(labels={"a": "x"})
    assert not pod_matches_all((), p)
    (t,) = parsed_terms(info(pod(affinity=[term_in("a", "zone", "x")]))).required_affinity
    assert pod_matches_all((t,), p)
    assert not pod_matches_all((t,), pod(labels={"a": "y"}))


def test_terms_are_parsed_once_per_pod_info() -> None:
    pi = info(pod(labels={"a": "x"}, affinity=[term_in("a", "zone", "x")]))
    assert parsed_terms(pi) is parsed_terms(pi)


def test_pods_with_the_same_terms_in_one_namespace_share_their_parse() -> None:
    # A workload's replicas: parsed once. What the parse depends on (the
    # namespace, a term's default; the terms; which group holds them) tells
    # pods apart.
    anti = [term_in("a", "zone", "x")]
    first = parsed_terms(info(pod("a", labels={"a": "x"}, anti=anti)))
    assert parsed_terms(info(pod("b", labels={"b": "y"}, anti=anti))) is first
    (t,) = first.required_anti_affinity
    assert t.namespaces == frozenset({"default"})
    elsewhere = parsed_terms(info(pod("c", namespace="ns1", anti=anti)))
    assert elsewhere is not first
    assert elsewhere.required_anti_affinity[0].namespaces == frozenset({"ns1"})
    as_affinity = parsed_terms(info(pod("d", affinity=anti)))
    assert as_affinity.required_affinity == first.required_anti_affinity
    assert as_affinity.required_anti_affinity == ()
    other_key = parsed_terms(info(pod("e", anti=[term_in("a", "rack", "x")])))
    assert other_key.required_anti_affinity[0].topology_key == "rack"
    # A pod with affinity set but no pod (anti-)affinity has no terms.
    bare = pod("f")
    bare.affinity.node_affinity.SetInParent()
    assert parsed_terms(info(bare)) == ParsedTerms()
    # A group that does not parse is reported for every pod carrying it.
    bad = [term("zone", selector(exprs=[("a", "Bad", [])]))]
    for name in ("g", "h"):
        assert parsed_terms(info(pod(name, affinity=bad))).errors == (
            "requiredAffinityTerms: 'Bad' is not a valid label selector operator",
        )


def test_pods_of_one_workload_share_a_signature() -> None:
    a = info(pod("a", labels={"app": "x", "tier": "web"}))
    b = info(pod("b", labels={"tier": "web", "app": "x"}))
    assert signature(a) == signature(b) == ("default", frozenset({("app", "x"), ("tier", "web")}))
    assert signature(a) != signature(
        info(pod("c", namespace="other", labels={"app": "x", "tier": "web"}))
    )
