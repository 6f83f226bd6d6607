"""GPUCardFit: whole-card fit from the node's card annotation and the cards the
node's pods took, best-fit choice at Reserve, accounting for pods in flight
(assumed with Reserve's annotation), the PreBind write, args and config."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.config import ConfigError, load_config, parse_config
from berth.framework.cycle_state import CycleState
from berth.framework.gpus import RESOURCE_CLAIMS, RESOURCE_SLICES, Card, CardUse
from berth.framework.handle import Handle
from berth.framework.model import PodInfo
from berth.framework.objects import ObjectWrite
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.snapshot import Snapshot
from berth.framework.status import Code, Status
from berth.framework.testing import batch_of, fresh_state, make_node, make_pod, snapshot_of
from berth.plugins.gpucard import (
    CHOSEN_CARD,
    POD_NEED,
    REASON_NO_CARD,
    ChosenCard,
    GPUCardFit,
    GPUCardFitArgs,
    GPUNeed,
    parse_cards,
    parse_memory,
)
from berth.plugins.registry import REGISTRY

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "examples" / "gpucard"
CARDS = "berth.dev/gpu-cards"
MEMORY = "berth.dev/gpu-memory"
CARD = "berth.dev/gpu-card"
# Filter's reason on a node described by berth.dev/gpu-cards.
NO_CARD = f"{REASON_NO_CARD} (Berth annotation)"
GI = 2**30
G = 10**9


def gpu_node(name: str, cards: list[Any] | None = None, raw: str | None = None) -> pb.Node:
    node = make_node(name).capacity(cpu="32", memory="128Gi").obj()
    if cards is not None:
        node.annotations[CARDS] = json.dumps(cards)
    if raw is not None:
        node.annotations[CARDS] = raw
    return node


def gpu_pod(name: str, need: str | None = None, node: str = "", card: str | None = None) -> pb.Pod:
    pod = make_pod(name).req(cpu="100m").node(node).obj()
    if need is not None:
        pod.annotations[MEMORY] = need
    if card is not None:
        pod.annotations[CARD] = card
    return pod


def plugin_on(snap: Snapshot, args: GPUCardFitArgs | None = None) -> GPUCardFit:
    handle = Handle("test")
    handle.bind_snapshot(snap)
    return GPUCardFit(args, handle)


# -- parsing --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param('["80Gi", "40Gi"]', [80 * GI, 40 * GI], id="binary units"),
        pytest.param('["40G", "30G"]', [40 * G, 30 * G], id="decimal units"),
        pytest.param("[1024, 0]", [1024, 0], id="bytes as integers"),
        pytest.param("[]", [], id="no cards"),
        pytest.param('["0.5Gi"]', [GI // 2], id="fractions"),
    ],
)
def test_parse_cards(text: str, want: list[int]) -> None:
    assert parse_cards(text) == want


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param("80Gi", "not JSON", id="not json"),
        pytest.param('{"0": "80Gi"}', "want a JSON list", id="an object"),
        pytest.param('["80Gi", "lots"]', "card 1: quantity 'lots' is not a Kubernetes", id="bad"),
        pytest.param('["-1Gi"]', "card 0: '-1Gi' is negative", id="negative"),
        pytest.param("[true]", "card 0: True is not a quantity", id="bool"),
        pytest.param("[1.5]", "card 0: 1.5 is not a quantity", id="float"),
        pytest.param(json.dumps(["1Gi"] * 65), "65 cards, at most 64", id="too many cards"),
        pytest.param(" " * 9000 + "[]", "9002 characters, at most 8192", id="too long"),
        pytest.param("[" * 3000 + "]" * 3000, "not JSON", id="nested too deep"),
        pytest.param("[2e400]", "card 0: inf is not a quantity", id="huge float"),
        pytest.param(
            f"[{10**30}]", "card 0: 1000000000000000000000000000000 is out of range", id="huge int"
        ),
    ],
)
def test_parse_cards_errors(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match="^" + reason.replace("(", r"\(")):
        parse_cards(text)


def test_parse_memory_rounds_up_to_bytes() -> None:
    assert parse_memory("1500m") == 2
    assert parse_memory(7) == 7


@pytest.mark.parametrize(
    ("free", "need", "card"),
    [
        pytest.param([40, 30], 40, 0, id="the one that fits"),
        pytest.param([40, 30], 41, None, id="none fits, though the sum would"),
        pytest.param([80, 45, 40], 40, 2, id="the tightest"),
        pytest.param([50, 45, 45], 45, 1, id="lowest index among equals"),
        pytest.param([], 1, None, id="no cards"),
        pytest.param([-10, 5], 5, 1, id="overcommitted card skipped"),
    ],
)
def test_best_fit(free: list[int], need: int, card: int | None) -> None:
    cards = [Card(str(i), max(f, 0)) for i, f in enumerate(free)]
    assert CardUse(free, [0] * len(free)).best_fit(cards, need) == card


# -- Filter ---------------------------------------------------------------------------

# (id, node cards, pods on the node as (need, card), the pod's need, Filter reason)
FILTER_CASES: list[tuple[str, list[Any] | None, list[tuple[str | None, str | None]], str, str]] = [
    ("free 40G card", ["40G", "30G"], [], "40G", ""),
    ("only 30G cards", ["30G", "30G"], [], "40G", NO_CARD),
    ("70G free in total is not one card", ["35G", "35G"], [], "40G", NO_CARD),
    ("no annotation: no cards", None, [], "1G", REASON_NO_CARD),
    ("empty list", [], [], "1G", NO_CARD),
    ("80G card half taken", ["80G", "30G"], [("40G", "0")], "40G", ""),
    ("80G card half taken, 41G", ["80G", "30G"], [("40G", "0")], "41G", NO_CARD),
    ("both cards taken", ["40G", "40G"], [("40G", "0"), ("40G", "1")], "1", NO_CARD),
    ("pods without a card take nothing", ["40G"], [("40G", None), (None, None)], "40G", ""),
    ("a card without memory takes nothing", ["40G"], [(None, "0")], "40G", ""),
    ("a card index beyond the list is ignored", ["40G"], [("40G", "3")], "40G", ""),
    ("a card that is not an index is ignored", ["40G"], [("40G", "first")], "40G", ""),
    ("a bad memory annotation is ignored", ["40G"], [("much", "0")], "40G", ""),
    ("binary and decimal units", ["40Gi"], [("2Gi", "0")], "38Gi", ""),
    ("a byte too many", ["40Gi"], [("2Gi", "0")], str(38 * GI + 1), NO_CARD),
]


@pytest.mark.parametrize(
    ("cards", "others", "need", "reason"),
    [pytest.param(c, o, n, r, id=name) for name, c, o, n, r in FILTER_CASES],
)
def test_filter(
    cards: list[Any] | None, others: list[tuple[str | None, str | None]], need: str, reason: str
) -> None:
    pods = [gpu_pod(f"other-{i}", n, "n1", c) for i, (n, c) in enumerate(others)]
    snap = snapshot_of([gpu_node("n1", cards)], pods)
    plugin = plugin_on(snap)
    pod = make_pod("train").obj()
    pod.annotations[MEMORY] = need
    state = fresh_state()
    _, st = plugin.pre_filter(state, PodInfo(pod), batch_of(snap))
    assert st.is_success, st
    got = plugin.filter(state, PodInfo(pod), snap.nodes["n1"])
    if reason:
        assert got == Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (reason,))
    else:
        assert got.is_success, got
    # Without PreFilter (a profile enabling only filter), the same answer.
    assert plugin.filter(fresh_state(), PodInfo(pod), snap.nodes["n1"]) == got


def test_filter_invalid_node_annotation_names_it() -> None:
    snap = snapshot_of([gpu_node("n1", raw='["80Gi", "x"]')])
    st = plugin_on(snap).filter(fresh_state(), PodInfo(gpu_pod("p", "1Gi")), snap.nodes["n1"])
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message.startswith("node annotation berth.dev/gpu-cards: card 1: quantity 'x'")


def test_the_pod_itself_on_the_node_does_not_count() -> None:
    # The caller assumes the pod before Reserve (upstream's assume, then Reserve): a
    # stale card annotation from an earlier attempt must not take its own memory.
    me = gpu_pod("me", "40G", "n1", "0")
    snap = snapshot_of([gpu_node("n1", ["40G"])], [me])
    plugin = plugin_on(snap)
    st = plugin.filter(fresh_state(), PodInfo(me), snap.nodes["n1"])
    assert st.is_success
    assert plugin.free_memory(snap.nodes["n1"]) == [0]
    assert plugin.free_memory(snap.nodes["n1"], me.uid) == [40 * G]


# -- PreFilter ------------------------------------------------------------------------


def test_pre_filter_skips_pods_without_the_annotation() -> None:
    snap = snapshot_of([gpu_node("n1", ["40G"])])
    state = fresh_state()
    _, st = plugin_on(snap).pre_filter(state, PodInfo(gpu_pod("web")), batch_of(snap))
    assert st.is_skip
    assert POD_NEED not in state


def test_pre_filter_saves_the_need() -> None:
    snap = snapshot_of([gpu_node("n1", ["40G"])])
    state = fresh_state()
    _, st = plugin_on(snap).pre_filter(state, PodInfo(gpu_pod("p", "40Gi")), batch_of(snap))
    assert st.is_success
    assert state.read(POD_NEED) == GPUNeed(40 * GI)


@pytest.mark.parametrize(
    ("need", "message"),
    [
        pytest.param(
            "forty",
            "pod annotation berth.dev/gpu-memory: quantity 'forty' is not a Kubernetes quantity "
            "(e.g. 500m, 2, 1Gi, 1e3)",
            id="not a quantity",
        ),
        pytest.param("0", "pod annotation berth.dev/gpu-memory: '0' must be more than 0", id="0"),
        pytest.param(
            "-4Gi", "pod annotation berth.dev/gpu-memory: '-4Gi' is negative", id="negative"
        ),
    ],
)
def test_pre_filter_rejects_a_bad_need(need: str, message: str) -> None:
    snap = snapshot_of([gpu_node("n1", ["40G"])])
    _, st = plugin_on(snap).pre_filter(fresh_state(), PodInfo(gpu_pod("p", need)), batch_of(snap))
    assert st == Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (message,))


# -- Reserve, Unreserve, PreBind --------------------------------------------------------


def test_reserve_takes_the_tightest_card_and_annotates_the_assumed_pod() -> None:
    snap = snapshot_of([gpu_node("n1", ["80G", "48G", "45G"])], [gpu_pod("old", "40G", "n1", "0")])
    plugin = plugin_on(snap)
    state = fresh_state()
    pod = PodInfo(gpu_pod("p", "40G"))
    assert plugin.reserve(state, pod, "n1").is_success
    # Free: 40G, 48G, 45G: card 0 is the tightest that holds 40G.
    assert state.read(CHOSEN_CARD) == ChosenCard("n1", "0")
    assert state.assume_annotations == {CARD: "0"}


def test_reserve_fails_when_the_memory_went_since_filter() -> None:
    snap = snapshot_of([gpu_node("n1", ["40G"])], [gpu_pod("fast", "10G", "n1", "0")])
    state = fresh_state()
    st = plugin_on(snap).reserve(state, PodInfo(gpu_pod("p", "40G")), "n1")
    assert st == Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (NO_CARD,))
    assert CHOSEN_CARD not in state
    assert state.assume_annotations == {}


def test_reserve_prebind_unreserve_do_nothing_for_pods_without_a_need() -> None:
    snap = snapshot_of([gpu_node("n1", ["40G"])])
    plugin = plugin_on(snap)
    state = fresh_state()
    pod = PodInfo(gpu_pod("web"))
    assert plugin.reserve(state, pod, "n1").is_success
    assert plugin.pre_bind(state, pod, "n1").is_success
    plugin.unreserve(state, pod, "n1")
    assert (state.assume_annotations, state.writes, state.encode()) == ({}, [], {})


def test_unreserve_forgets_the_card() -> None:
    snap = snapshot_of([gpu_node("n1", ["40G"])])
    plugin = plugin_on(snap)
    state = fresh_state()
    pod = PodInfo(gpu_pod("p", "40G"))
    assert plugin.reserve(state, pod, "n1").is_success
    plugin.unreserve(state, pod, "n1")
    assert CHOSEN_CARD not in state
    plugin.unreserve(state, pod, "n1")  # idempotent


def card_patch(pod: pb.Pod, card: str) -> ObjectWrite:
    return ObjectWrite(
        "", "v1", "pods", pod.namespace, pod.name, {"metadata": {"annotations": {CARD: card}}}
    )


def test_pre_bind_writes_the_reserved_card_on_the_pod() -> None:
    snap = snapshot_of([gpu_node("n1", ["30G", "40G"])])
    plugin = plugin_on(snap)
    pod = gpu_pod("p", "40G")
    state = fresh_state()
    assert plugin.reserve(state, PodInfo(pod), "n1").is_success
    # The CycleState travels to the caller and back between Reserve and PreBind.
    state = fresh_state(state.encode())
    assert plugin.pre_bind(state, PodInfo(pod), "n1").is_success
    assert state.writes == [card_patch(pod, "1")]


def test_pre_bind_falls_back_to_the_assumed_pod_in_the_snapshot() -> None:
    pod = gpu_pod("p", "40G")
    assumed = gpu_pod("p", "40G", "n1", "1")
    assumed.uid = pod.uid
    assumed.assumed = True
    snap = snapshot_of([gpu_node("n1", ["30G", "40G"])], [assumed])
    state = fresh_state()
    assert plugin_on(snap).pre_bind(state, PodInfo(pod), "n1").is_success
    assert state.writes == [card_patch(pod, "1")]


def test_pre_bind_does_not_trust_a_card_annotation_on_a_record_not_assumed() -> None:
    pod = gpu_pod("p", "40G")
    bound = gpu_pod("p", "40G", "n1", "1")
    bound.uid = pod.uid
    snap = snapshot_of([gpu_node("n1", ["30G", "40G"])], [bound])
    st = plugin_on(snap).pre_bind(fresh_state(), PodInfo(pod), "n1")
    assert st.code is Code.ERROR


def test_pre_bind_without_a_reserved_card_is_an_error() -> None:
    snap = snapshot_of([gpu_node("n1", ["40G"])])
    state = fresh_state()
    state.write(CHOSEN_CARD, ChosenCard("other-node", "0"))
    pod = gpu_pod("p", "40G")
    st = plugin_on(snap).pre_bind(state, PodInfo(pod), "n1")
    assert st.code is Code.ERROR
    assert st.message == (
        "pod default/p has no GPU card reserved on node n1 (Reserve did not run for this node)"
    )
    assert state.writes == []


# -- pods in flight ---------------------------------------------------------------------


def assume(snap: Snapshot, pod: pb.Pod, node: str, annotations: dict[str, str]) -> None:
    """What the caller does after Reserve: its assumed copy of the pod, on the node,
    with Reserve's annotations, goes into the next cluster state."""
    copy = pb.Pod()
    copy.CopyFrom(pod)
    copy.node_name = node
    copy.annotations.update(annotations)
    snap.apply(pb.ClusterDelta(upsert_pods=[copy]))


def example_framework() -> Framework:
    return Framework(load_config(EXAMPLE / "scheduler-config.yaml", REGISTRY).profiles[0], REGISTRY)


def schedule(fw: Framework, snap: Snapshot, pod: pb.Pod) -> tuple[str, str, dict[str, str]]:
    state = CycleState()
    result = schedule_pod(
        fw, snap, state, PodInfo(pod), reserve_and_permit=True, rng=random.Random(0)
    )
    return result.node, result.message, dict(state.assume_annotations)


def test_two_pods_in_flight_never_take_the_same_card() -> None:
    # The seed's verification: one free 40G card and one 30G card; two pods of 40G.
    fw = example_framework()
    snap = snapshot_of([gpu_node("n1", ["40G", "30G"])])
    first, second = gpu_pod("a", "40G"), gpu_pod("b", "40G")
    node, _, annotations = schedule(fw, snap, first)
    assert (node, annotations) == ("n1", {CARD: "0"})
    assume(snap, first, node, annotations)
    node, message, annotations = schedule(fw, snap, second)
    assert (node, annotations) == ("", {})
    assert message == (
        "0/1 nodes are available: 1 no free GPU card (Berth annotation). "
        "no new claims to deallocate, preemption: 0/1 nodes are available: "
        "1 Preemption is not helpful for scheduling."
    )
    # The first pod goes away (unreserved, or deleted): the card is free again.
    snap.apply(pb.ClusterDelta(delete_pods=[first.uid]))
    assert schedule(fw, snap, second)[::2] == ("n1", {CARD: "0"})


def test_two_pods_in_flight_share_a_big_card_by_memory() -> None:
    fw = example_framework()
    snap = snapshot_of([gpu_node("n1", ["80G", "30G"])])
    pods = [gpu_pod(f"p{i}", "40G") for i in range(3)]
    got = []
    for pod in pods[:2]:
        node, _, annotations = schedule(fw, snap, pod)
        got.append(annotations)
        assume(snap, pod, node, annotations)
    assert got == [{CARD: "0"}, {CARD: "0"}]
    assert schedule(fw, snap, pods[2])[1] == (
        "0/1 nodes are available: 1 no free GPU card (Berth annotation). "
        "no new claims to deallocate, preemption: 0/1 nodes are available: "
        "1 Preemption is not helpful for scheduling."
    )


def test_cycle_picks_the_node_whose_card_fits_not_the_most_total() -> None:
    fw = example_framework()
    # "many" has 4 x 30G = 120G free in total, "one" a single 40G card.
    snap = snapshot_of([gpu_node("many", ["30G"] * 4), gpu_node("one", ["40G"]), gpu_node("cpu")])
    node, _, annotations = schedule(fw, snap, gpu_pod("p", "40G"))
    assert (node, annotations) == ("one", {CARD: "0"})


def test_cycle_with_prebind_through_the_framework() -> None:
    fw = example_framework()
    snap = snapshot_of([gpu_node("n1", ["30G", "40G"])])
    pod = gpu_pod("p", "40G")
    state = CycleState()
    result = schedule_pod(
        fw, snap, state, PodInfo(pod), reserve_and_permit=True, rng=random.Random(0)
    )
    assert result.node == "n1"
    state = CycleState.decode(state.encode())
    assume(snap, pod, "n1", {CARD: "1"})
    fw.handle.bind_snapshot(snap)
    try:
        st = fw.run_pre_bind(state, PodInfo(pod), "n1")
    finally:
        fw.handle.bind_snapshot(None)
    assert st.is_success
    assert state.plugin_writes == [("GPUCardFit", card_patch(pod, "1"))]


def test_pre_bind_pre_flight_skips_only_pods_without_a_need() -> None:
    """PreBind writes the card only for a pod with the memory annotation: its
    PreBindPreFlight answers Skip exactly when PreBind would write nothing."""
    snap = snapshot_of([gpu_node("n1", ["40G"])])
    plugin = plugin_on(snap)
    state = fresh_state()
    assert plugin.pre_bind_pre_flight(state, PodInfo(gpu_pod("web")), "n1").is_skip
    assert plugin.pre_bind_pre_flight(state, PodInfo(gpu_pod("p", "40G")), "n1").is_success
    # A need that does not parse: Success, so PreBind runs and reports it.
    bad = PodInfo(gpu_pod("bad", "lots"))
    assert plugin.pre_bind_pre_flight(state, bad, "n1").is_success
    assert plugin.pre_bind(state, bad, "n1").code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_cycle_says_pre_bind_skip_for_pods_without_a_need() -> None:
    """framework.go RunPreBindPreFlights through a whole cycle: a pod without the
    annotation needs no PreBind; a pod with one does."""
    fw = example_framework()
    snap = snapshot_of([gpu_node("n1", ["40G"])])
    for pod, skip in ((gpu_pod("web"), True), (gpu_pod("p", "40G"), False)):
        state = CycleState()
        result = schedule_pod(
            fw, snap, state, PodInfo(pod), reserve_and_permit=True, rng=random.Random(0)
        )
        assert result.node == "n1"
        assert result.pre_bind_skip is skip, pod.name
        # The default plugins' VolumeBinding and DynamicResources skip both (no
        # volumes, no resource claims).
        skipped = CycleState.decode(state.encode()).skip_pre_bind_plugins
        defaults = {"VolumeBinding", "DynamicResources"}
        assert skipped == ({"GPUCardFit", *defaults} if skip else defaults)


def test_pods_without_a_need_schedule_anywhere() -> None:
    fw = example_framework()
    snap = snapshot_of([gpu_node("cpu")])
    assert schedule(fw, snap, gpu_pod("web")) == ("cpu", "", {})


# -- args and configuration ------------------------------------------------------------

ARGS = "profiles[0].pluginConfig[0].args"


def test_other_annotation_keys() -> None:
    args = GPUCardFitArgs(
        node_cards_annotation="example.com/cards",
        pod_memory_annotation="example.com/mem",
        pod_card_annotation="card",
    )
    node = make_node("n1").capacity(cpu="4").obj()
    node.annotations["example.com/cards"] = '["40G", "30G"]'
    other = make_pod("o").node("n1").obj()
    other.annotations.update({"example.com/mem": "20G", "card": "0"})
    snap = snapshot_of([node], [other])
    pod = make_pod("p").obj()
    pod.annotations["example.com/mem"] = "25G"
    plugin = plugin_on(snap, args)
    state = fresh_state()
    assert plugin.filter(state, PodInfo(pod), snap.nodes["n1"]).is_success
    assert plugin.reserve(state, PodInfo(pod), "n1").is_success
    assert state.assume_annotations == {"card": "1"}
    # The default keys mean nothing now.
    pod.annotations[MEMORY] = "1T"
    assert plugin.filter(fresh_state(), PodInfo(pod), snap.nodes["n1"]).is_success


@pytest.mark.parametrize(
    ("raw", "errors"),
    [
        pytest.param(
            {"nodeCardsAnnotation": ""},
            [
                (
                    "nodeCardsAnnotation",
                    "required value: an annotation key, or leave the field out for "
                    "'berth.dev/gpu-cards'",
                )
            ],
            id="empty",
        ),
        pytest.param(
            {"podMemoryAnnotation": "Example.com/mem"},
            [
                (
                    "podMemoryAnnotation",
                    "invalid value 'Example.com/mem': the prefix must be a lowercase DNS "
                    "subdomain: alphanumerics, '-' and '.', starting and ending with an "
                    "alphanumeric (e.g. 'example.com')",
                )
            ],
            id="uppercase prefix",
        ),
        pytest.param(
            {"podCardAnnotation": "a/b/c"},
            [("podCardAnnotation", "invalid value 'a/b/c': an annotation key has at most one '/'")],
            id="two slashes",
        ),
        pytest.param(
            {"podCardAnnotation": "example.com/"},
            [
                (
                    "podCardAnnotation",
                    "invalid value 'example.com/': the name part must be non-empty",
                )
            ],
            id="no name",
        ),
        pytest.param(
            {"podCardAnnotation": "/card"},
            [
                (
                    "podCardAnnotation",
                    "invalid value '/card': the prefix before the '/' must be non-empty",
                )
            ],
            id="no prefix",
        ),
        pytest.param(
            {"nodeCardsAnnotation": "x" * 64},
            [
                (
                    "nodeCardsAnnotation",
                    f"invalid value '{'x' * 64}': the name part must be no more than 63 characters",
                )
            ],
            id="name too long",
        ),
        pytest.param(
            {"nodeCardsAnnotation": "gpu cards"},
            [
                (
                    "nodeCardsAnnotation",
                    "invalid value 'gpu cards': the name part must consist of alphanumerics, "
                    "'-', '_' or '.', starting and ending with an alphanumeric (e.g. 'gpu-card')",
                )
            ],
            id="space",
        ),
        pytest.param(
            {"podCardAnnotation": "berth.dev/gpu-memory"},
            [
                (
                    "podCardAnnotation",
                    "must differ from podMemoryAnnotation ('berth.dev/gpu-memory'): the plugin "
                    "writes the card there",
                )
            ],
            id="card key is the memory key",
        ),
        pytest.param(
            {"podCardAnnotation": 0},
            [("podCardAnnotation", "expected str, got int")],
            id="not a string",
        ),
        pytest.param(
            {"cardsAnnotation": "x"},
            [("cardsAnnotation", 'unknown field "cardsAnnotation"')],
            id="unknown field",
        ),
        pytest.param(
            {"nodeCardsAnnotation": "", "podCardAnnotation": "-x"},
            [
                (
                    "nodeCardsAnnotation",
                    "required value: an annotation key, or leave the field out for "
                    "'berth.dev/gpu-cards'",
                ),
                (
                    "podCardAnnotation",
                    "invalid value '-x': the name part must consist of alphanumerics, '-', '_' "
                    "or '.', starting and ending with an alphanumeric (e.g. 'gpu-card')",
                ),
            ],
            id="every problem reported",
        ),
    ],
)
def test_bad_args_are_config_errors(raw: dict[str, Any], errors: list[tuple[str, str]]) -> None:
    doc = yaml.safe_load((EXAMPLE / "scheduler-config.yaml").read_text())
    doc["profiles"][0]["pluginConfig"] = [{"name": "GPUCardFit", "args": raw}]
    with pytest.raises(ConfigError) as info:
        parse_config(doc, "<test>", REGISTRY)
    got = [(e.field, e.reason) for e in info.value.errors]
    assert got == [(f"{ARGS}.{field}", reason) for field, reason in errors]


def test_building_in_code_validates_too() -> None:
    with pytest.raises(ValueError, match="podCardAnnotation: must differ"):
        GPUCardFit(GPUCardFitArgs(pod_card_annotation=MEMORY))


def test_default_args() -> None:
    args = msgspec.convert({}, GPUCardFitArgs)
    args.validate()
    assert (args.node_cards_annotation, args.pod_memory_annotation, args.pod_card_annotation) == (
        CARDS,
        MEMORY,
        CARD,
    )


def test_example_config_enables_every_point_it_serves() -> None:
    profile = load_config(EXAMPLE / "scheduler-config.yaml", REGISTRY).profiles[0]
    assert profile.scheduler_name == "my-scheduler"
    for point in ("preFilter", "filter", "reserve", "preBind"):
        assert "GPUCardFit" in [r.name for r in profile.enabled(point)], point
    assert "GPUCardFit" not in [r.name for r in profile.enabled("score")]
    assert profile.plugin_args["GPUCardFit"] == GPUCardFitArgs()
    # The DRA source: ResourceSlices, and ResourceClaims for what is allocated.
    reads = [r.kind for r in example_framework().reads if "GPUCardFit" in r.plugins]
    # In the profile's order: DynamicResources (default profile) reads claims first.
    assert sorted(reads, key=lambda k: k.resource) == [RESOURCE_CLAIMS, RESOURCE_SLICES]
