"""GPUCardFit over each card source (DRA ResourceSlices, GFD labels, HAMi's
annotation, berth.dev/gpu-cards): Filter's verdict and the source it names,
Reserve's choice and the card id it writes, the precedence of the sources,
and malformed input rejected with a reason."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.events import ActionType, QueueingHint
from berth.framework.gpus import HAMI_ANNOTATION, RESOURCE_CLAIMS
from berth.framework.handle import Handle
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.objects import ClusterObject
from berth.framework.snapshot import Snapshot
from berth.framework.status import Code, Status
from berth.framework.testing import (
    batch_of,
    fresh_state,
    make_node,
    make_object,
    make_pod,
    snapshot_of,
)
from berth.plugins.gpucard import CHOSEN_CARD, REASON_NO_CARD, ChosenCard, GPUCardFit
from berth.plugins.gpucard.args import GPUCardFitArgs
from tests.gpu_objects import claim, device, resource_slice

MEMORY = "berth.dev/gpu-memory"
CARD = "berth.dev/gpu-card"
GFD_80G = {
    "nvidia.com/gpu.count": "2",
    "nvidia.com/gpu.memory": "81920",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
}
HAMI_2X32 = json.dumps(
    [
        {"id": "GPU-a", "index": 0, "count": 2, "devmem": 32768, "type": "V100", "health": True},
        {"id": "GPU-b", "index": 1, "count": 2, "devmem": 32768, "type": "V100", "health": True},
    ]
)


def node(
    name: str = "n1",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> pb.Node:
    obj = make_node(name).capacity(cpu="32", memory="128Gi").obj()
    obj.labels.update(labels or {})
    obj.annotations.update(annotations or {})
    return obj


def pod(name: str, need: str | None, on: str = "", card: str | None = None) -> pb.Pod:
    obj = make_pod(name).req(cpu="100m").node(on).obj()
    if need is not None:
        obj.annotations[MEMORY] = need
    if card is not None:
        obj.annotations[CARD] = card
    return obj


def plugin_on(snap: Snapshot, args: GPUCardFitArgs | None = None) -> GPUCardFit:
    handle = Handle("test")
    handle.bind_snapshot(snap)
    return GPUCardFit(args, handle)


def filter_one(snap: Snapshot, need: str, args: GPUCardFitArgs | None = None) -> Status:
    plugin = plugin_on(snap, args)
    p = PodInfo(pod("train", need))
    state = fresh_state()
    _, st = plugin.pre_filter(state, p, batch_of(snap))
    assert st.is_success, st
    got = plugin.filter(state, p, snap.nodes["n1"])
    # The batch form answers the same.
    batch = plugin.filter_nodes(state, p, batch_of(snap, ["n1"]))
    assert batch.status_of(0) == got
    return got


def no_card(source: str) -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (f"{REASON_NO_CARD} ({source})",))


DRA_NODE: list[Any] = [
    resource_slice("s", "n1", [device("gpu-0", "80Gi"), device("gpu-1", "40Gi")])
]
SHARED_NODE: list[Any] = [
    resource_slice(
        "s",
        "n1",
        [
            device(
                "gpu-0",
                "80Gi",
                shared=True,
                policy={"default": "1Gi", "validRange": {"min": "1Gi", "step": "8Gi"}},
            )
        ],
    )
]

# (id, node labels, node annotations, objects, pods on the node, the need, reason source or "")
CASES: list[tuple[str, dict[str, str], dict[str, str], list[Any], list[pb.Pod], str, str]] = [
    ("DRA: a free 80Gi device", {}, {}, DRA_NODE, [], "60Gi", ""),
    ("DRA: no device that large", {}, {}, DRA_NODE, [], "90Gi", "ResourceSlices"),
    (
        "DRA: the 80Gi device allocated in a claim",
        {},
        {},
        [*DRA_NODE, claim("c", "n1", "gpu-0")],
        [],
        "60Gi",
        "ResourceSlices",
    ),
    (
        "DRA: a 40Gi need still fits the other device",
        {},
        {},
        [*DRA_NODE, claim("c", "n1", "gpu-0")],
        [],
        "40Gi",
        "",
    ),
    (
        "DRA: a pod given the device takes it whole",
        {},
        {},
        DRA_NODE,
        [pod("o", "1Gi", "n1", "gpu.nvidia.com/n1/gpu-0")],
        "60Gi",
        "ResourceSlices",
    ),
    (
        "DRA: a pod whose claim allocates the device is counted once",
        {},
        {},
        [*DRA_NODE, claim("c", "n1", "gpu-1", pod_uid="uid-o")],
        [pod("o", "1Gi", "n1", "gpu.nvidia.com/n1/gpu-1")],
        "60Gi",
        "",
    ),
    (
        "DRA consumable capacity: 70Gi consumed, 10Gi left, 9Gi rounds to 9Gi",
        {},
        {},
        [*SHARED_NODE, claim("c", "n1", "gpu-0", consumed="70Gi")],
        [],
        "9Gi",
        "",
    ),
    (
        "DRA consumable capacity: 10Gi rounds up to 17Gi, more than is left",
        {},
        {},
        [*SHARED_NODE, claim("c", "n1", "gpu-0", consumed="70Gi")],
        [],
        "10Gi",
        "ResourceSlices",
    ),
    (
        "DRA consumable capacity: berth pods share it by memory",
        {},
        {},
        SHARED_NODE,
        [pod("o", "33Gi", "n1", "gpu.nvidia.com/n1/gpu-0")],
        "40Gi",
        "",
    ),
    ("GFD: 80Gi cards", GFD_80G, {}, [], [], "80Gi", ""),
    ("GFD: 81Gi is more than a card", GFD_80G, {}, [], [], "81Gi", "GFD labels"),
    (
        "GFD: both cards partly used by pods",
        GFD_80G,
        {},
        [],
        [pod("a", "50Gi", "n1", "0"), pod("b", "50Gi", "n1", "1")],
        "40Gi",
        "GFD labels",
    ),
    (
        "GFD: memory unknown fits nothing",
        {"nvidia.com/gpu.count": "2"},
        {},
        [],
        [],
        "1Gi",
        "GFD labels; no nvidia.com/gpu.memory label: memory unknown",
    ),
    ("HAMi: a 32Gi card", {}, {HAMI_ANNOTATION: HAMI_2X32}, [], [], "32Gi", ""),
    (
        "HAMi: 33Gi is more than a card",
        {},
        {HAMI_ANNOTATION: HAMI_2X32},
        [],
        [],
        "33Gi",
        "HAMi annotation",
    ),
    (
        "HAMi: split count reached on both cards",
        {},
        {HAMI_ANNOTATION: HAMI_2X32},
        [],
        [
            pod(f"o{i}", "1Gi", "n1", card)
            for i, card in enumerate(["GPU-a", "GPU-a", "GPU-b", "GPU-b"])
        ],
        "1Gi",
        "HAMi annotation",
    ),
    (
        "HAMi: an unhealthy card is not given",
        {},
        {HAMI_ANNOTATION: '[{"id": "GPU-a", "count": 4, "devmem": 32768}]'},
        [],
        [],
        "1Gi",
        "HAMi annotation",
    ),
    ("Berth: a 40Gi card", {}, {"berth.dev/gpu-cards": '["40Gi"]'}, [], [], "40Gi", ""),
    # Precedence: the first source decides even when a lower one would fit.
    (
        "DRA before GFD",
        {"nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "204800"},
        {},
        DRA_NODE,
        [],
        "100Gi",
        "ResourceSlices",
    ),
    (
        "GFD before HAMi",
        GFD_80G,
        {HAMI_ANNOTATION: json.dumps([{"id": "g", "count": 1, "devmem": 204800, "health": True}])},
        [],
        [],
        "100Gi",
        "GFD labels",
    ),
    (
        "HAMi before Berth",
        {},
        {HAMI_ANNOTATION: HAMI_2X32, "berth.dev/gpu-cards": '["200Gi"]'},
        [],
        [],
        "100Gi",
        "HAMi annotation",
    ),
    (
        "a slice of another driver is no source",
        GFD_80G,
        {},
        [resource_slice("s", "n1", [device("nic-0", "200Gi")], driver="net.example.com")],
        [],
        "80Gi",
        "",
    ),
]


@pytest.mark.parametrize(
    ("labels", "annotations", "objects", "pods", "need", "source"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_filter_by_source(
    labels: dict[str, str],
    annotations: dict[str, str],
    objects: list[Any],
    pods: list[pb.Pod],
    need: str,
    source: str,
) -> None:
    snap = snapshot_of([node("n1", labels, annotations)], pods, objects)
    got = filter_one(snap, need)
    if source:
        assert got == no_card(source)
    else:
        assert got.is_success, got


@pytest.mark.parametrize(
    ("labels", "annotations", "objects", "message"),
    [
        pytest.param(
            {"nvidia.com/gpu.count": "eight"},
            {},
            [],
            "label nvidia.com/gpu.count 'eight' is not a non-negative integer",
            id="GFD count",
        ),
        pytest.param(
            {"nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "80G"},
            {},
            [],
            "label nvidia.com/gpu.memory '80G' is not a non-negative integer",
            id="GFD memory with a unit",
        ),
        pytest.param(
            {},
            {HAMI_ANNOTATION: "GPU-a,10,32768"},
            [],
            "annotation hami.io/node-nvidia-register: neither a JSON list nor ':'-separated "
            "devices",
            id="HAMi truncated",
        ),
        pytest.param(
            {},
            {HAMI_ANNOTATION: "x" * 100_000},
            [],
            "annotation hami.io/node-nvidia-register: 100000 characters, at most 8192 are read",
            id="HAMi too long",
        ),
        pytest.param(
            {},
            {"berth.dev/gpu-cards": "[1"},
            [],
            "node annotation berth.dev/gpu-cards: not JSON",
            id="Berth not JSON",
        ),
        pytest.param(
            {},
            {},
            [resource_slice("s", "n1", [device("gpu-0")], count=3)],
            "ResourceSlices: incomplete pool gpu.nvidia.com/n1 (1 of 3 slices)",
            id="DRA incomplete pool",
        ),
    ],
)
def test_malformed_sources_reject_the_node_with_the_reason(
    labels: dict[str, str], annotations: dict[str, str], objects: list[Any], message: str
) -> None:
    snap = snapshot_of([node("n1", labels, annotations)], (), objects)
    got = filter_one(snap, "1Gi")
    assert got.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert got.message.startswith(message), got.message


def test_a_node_without_any_source_has_no_card() -> None:
    snap = snapshot_of([node("n1")])
    assert filter_one(snap, "1Gi") == Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (REASON_NO_CARD,))


@pytest.mark.parametrize(
    ("labels", "annotations", "objects", "pods", "card"),
    [
        pytest.param({}, {}, DRA_NODE, [], "gpu.nvidia.com/n1/gpu-1", id="DRA: the tighter device"),
        pytest.param(
            {}, {}, [*DRA_NODE, claim("c", "n1", "gpu-1")], [], "gpu.nvidia.com/n1/gpu-0", id="DRA"
        ),
        pytest.param(GFD_80G, {}, [], [pod("o", "30Gi", "n1", "1")], "1", id="GFD: best fit"),
        pytest.param(
            {},
            {HAMI_ANNOTATION: HAMI_2X32.replace("32768", "49152")},
            [],
            [],
            "GPU-a",
            id="HAMi: the device id",
        ),
        pytest.param({}, {"berth.dev/gpu-cards": '["80Gi", "40Gi"]'}, [], [], "1", id="Berth"),
    ],
)
def test_reserve_writes_the_card_id_of_the_source(
    labels: dict[str, str],
    annotations: dict[str, str],
    objects: list[Any],
    pods: list[pb.Pod],
    card: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    snap = snapshot_of([node("n1", labels, annotations)], pods, objects)
    plugin = plugin_on(snap)
    state = fresh_state()
    with caplog.at_level(logging.INFO, logger="berth.plugins.gpucard.gpu_card"):
        assert plugin.reserve(state, PodInfo(pod("p", "40Gi")), "n1").is_success
    assert state.read(CHOSEN_CARD) == ChosenCard("n1", card)
    assert state.assume_annotations == {CARD: card}
    # The log line names the card and the source.
    assert f"reserved GPU card {card}" in caplog.text
    assert "cards from " in caplog.text


def test_two_pods_in_flight_never_get_one_dra_device() -> None:
    snap = snapshot_of([node("n1")], (), [resource_slice("s", "n1", [device("gpu-0")])])
    plugin = plugin_on(snap)
    first = pod("a", "10Gi")
    state = fresh_state()
    assert plugin.reserve(state, PodInfo(first), "n1").is_success
    # The caller assumes the first pod with Reserve's annotation.
    first.node_name = "n1"
    first.annotations[CARD] = "gpu.nvidia.com/n1/gpu-0"
    delta = pb.ClusterDelta()
    delta.upsert_pods.append(first)
    snap.apply(delta)
    assert plugin.reserve(fresh_state(), PodInfo(pod("b", "10Gi")), "n1") == no_card(
        "ResourceSlices"
    )


def test_without_dra_drivers_nothing_is_read_and_slices_are_no_source() -> None:
    args = GPUCardFitArgs(dra_drivers=[])
    assert GPUCardFit.reads(args) == ()
    big = {"nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "204800"}
    snap = snapshot_of([node("n1", big)], (), DRA_NODE)
    assert filter_one(snap, "100Gi", args).is_success
    assert filter_one(snap, "100Gi") == no_card("ResourceSlices")


def test_bad_dra_drivers_are_refused() -> None:
    with pytest.raises(ValueError, match=r"^draDrivers\[1\]: invalid value 'NVIDIA'"):
        GPUCardFit(GPUCardFitArgs(dra_drivers=["gpu.nvidia.com", "NVIDIA"]))


# -- queueing hints -----------------------------------------------------------------------


def hints_of(plugin: GPUCardFit) -> dict[str, Any]:
    return {e.event.resource: e for e in plugin.events_to_register()}


def test_events_registered() -> None:
    events = hints_of(GPUCardFit())
    assert sorted(events) == [
        "AssignedPod",
        "Node",
        "resource.k8s.io/ResourceClaim",
        "resource.k8s.io/ResourceSlice",
    ]
    assert events["Node"].event.action_type == (
        ActionType.ADD | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_ANNOTATION
    )
    assert sorted(hints_of(GPUCardFit(GPUCardFitArgs(dra_drivers=[])))) == ["AssignedPod", "Node"]


def ni(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> NodeInfo:
    return NodeInfo(node("n1", labels, annotations))


P = PodInfo(pod("rejected", "40Gi"))
Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP


@pytest.mark.parametrize(
    ("old", "new", "want"),
    [
        pytest.param(None, ni(GFD_80G), Q, id="node added with GFD labels"),
        pytest.param(None, ni({}, {HAMI_ANNOTATION: HAMI_2X32}), Q, id="node added with HAMi"),
        pytest.param(None, ni(), SKIP, id="node added without cards"),
        pytest.param(ni(), ni({"zone": "a"}), SKIP, id="an unrelated label"),
        pytest.param(
            ni({}, {"berth.dev/gpu-cards": '["40Gi"]'}),
            ni({}, {"berth.dev/gpu-cards": '["80Gi"]'}),
            Q,
            id="card annotation changed",
        ),
        pytest.param(ni(GFD_80G), ni({**GFD_80G, "nvidia.com/gpu.count": "4"}), Q, id="count"),
    ],
)
def test_node_hint(old: NodeInfo | None, new: NodeInfo, want: QueueingHint) -> None:
    assert hints_of(GPUCardFit())["Node"].hint(P, old, new) is want


def test_pod_hint_queues_for_a_deleted_pod_that_had_a_card() -> None:
    hint = hints_of(GPUCardFit())["AssignedPod"].hint
    assert hint(P, PodInfo(pod("o", "1Gi", "n1", "0")), None) is Q
    assert hint(P, PodInfo(pod("o", None, "n1")), None) is SKIP


def test_slice_hint_queues_for_a_gpu_driver_s_slice() -> None:
    hint = hints_of(GPUCardFit())["resource.k8s.io/ResourceSlice"].hint
    gpu = ClusterObject.from_proto(resource_slice("s", "n1", [device("gpu-0")]))
    nic = ClusterObject.from_proto(resource_slice("s", "n1", [], driver="net.example.com"))
    assert hint(P, None, gpu) is Q
    assert hint(P, None, nic) is SKIP


def test_claim_hint_queues_when_an_allocation_is_released() -> None:
    hint = hints_of(GPUCardFit())["resource.k8s.io/ResourceClaim"].hint
    allocated = ClusterObject.from_proto(claim("c", "n1", "gpu-0"))
    released = ClusterObject.from_proto(make_object(RESOURCE_CLAIMS, "c", status={}))
    assert hint(P, allocated, released) is Q
    assert hint(P, allocated, None) is Q
    assert hint(P, released, allocated) is SKIP
    assert hint(P, allocated, allocated) is SKIP
