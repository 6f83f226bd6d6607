"""InterPodAffinity as a plugin: the objects it reads (namespaces), the
snapshot bookkeeping it relies on, and its args (plugin.go New;
validation_pluginargs.go ValidateInterPodAffinityArgs)."""

from __future__ import annotations

import msgspec
import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.testing import apply_objects, fresh_state
from berth.plugins.interpodaffinity import NAMESPACES, InterPodAffinity, InterPodAffinityArgs
from tests.plugins.interpodaffinity.testutil import (
    AFF,
    OK,
    S1,
    info,
    namespace,
    node,
    pod,
    selector,
    setup,
    term,
    term_exists,
    term_in,
)

# -- namespaces -------------------------------------------------------------------


def test_reads_core_v1_namespaces() -> None:
    assert InterPodAffinity.reads(None) == (NAMESPACES,)
    assert NAMESPACES.group == "" and NAMESPACES.resource == "namespaces"
    assert not NAMESPACES.namespaced


def test_namespace_selector_follows_namespace_label_changes() -> None:
    # A namespace relabelled in a later delta changes which pods count.
    nodes = [node("a", zone="z1"), node("b", zone="z2")]
    existing = [pod("e", namespace="other", node="a", labels=S1)]
    snap, plugin = setup(nodes, existing, [namespace("other", team="x")])
    incoming = info(
        pod(affinity=[term("zone", selector(S1), namespace_selector=selector({"team": "y"}))])
    )
    state = fresh_state()
    plugin.pre_filter(state, incoming, snap.all_nodes())
    assert plugin.filter(state, incoming, snap.nodes["a"]) == AFF
    apply_objects(snap, [namespace("other", team="y")])
    state = fresh_state()
    plugin.pre_filter(state, incoming, snap.all_nodes())
    assert plugin.filter(state, incoming, snap.nodes["a"]) == OK
    assert plugin.filter(state, incoming, snap.nodes["b"]) == AFF


# -- snapshot bookkeeping -----------------------------------------------------------


def test_node_info_lists_pods_with_affinity_and_required_anti_affinity() -> None:
    snap, _ = setup(
        [node("a")],
        [
            pod("plain", node="a"),
            pod("pref", node="a", preferred=[(5, term_in("security", "region", "S1"))]),
            pod("anti", node="a", anti=[term_exists("x", "zone")]),
        ],
    )
    ni = snap.nodes["a"]
    assert {p.name for p in ni.pods_with_affinity.values()} == {"pref", "anti"}
    assert {p.name for p in ni.pods_with_required_anti_affinity.values()} == {"anti"}
    delta = pb.ClusterDelta(delete_pods=["default/anti"])
    snap.apply(delta)
    assert {p.name for p in ni.pods_with_affinity.values()} == {"pref"}
    assert not ni.pods_with_required_anti_affinity


# -- args ---------------------------------------------------------------------------


def test_args_defaults_are_upstreams() -> None:
    args = msgspec.convert({}, InterPodAffinityArgs)
    assert args.hard_pod_affinity_weight == 1
    assert args.ignore_preferred_terms_of_existing_pods is False


@pytest.mark.parametrize("weight", [0, 1, 100])
def test_args_accept_weights_in_range(weight: int) -> None:
    InterPodAffinity(InterPodAffinityArgs(hard_pod_affinity_weight=weight))


@pytest.mark.parametrize("weight", [-1, 101])
def test_args_refuse_weights_out_of_range(weight: int) -> None:
    # validation_pluginargs.go, validateHardPodAffinityWeight.
    with pytest.raises(ValueError) as exc:
        InterPodAffinity(InterPodAffinityArgs(hard_pod_affinity_weight=weight))
    assert str(exc.value) == (
        f"hardPodAffinityWeight: Invalid value: {weight}: not in valid range [0, 100]"
    )


def test_args_refuse_unknown_fields() -> None:
    with pytest.raises(msgspec.ValidationError, match="hardPodAffinityWeigth"):
        msgspec.convert({"hardPodAffinityWeigth": 2}, InterPodAffinityArgs)
