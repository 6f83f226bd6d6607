"""GPUPriorityPlugin over each card source: the free GPUs it counts from DRA
ResourceSlices and ResourceClaims, GFD labels, HAMi's annotation, Berth's
annotation, or the allocatable resource; the precedence; malformed sources
counting no free GPU; the batch and per-node forms agreeing."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.gpus import HAMI_ANNOTATION, DraInventory
from berth.framework.handle import Handle
from berth.framework.model import PodInfo
from berth.framework.testing import batch_of, fresh_state, make_node, make_pod, snapshot_of
from berth.plugins.gpupriority import GPUPriority, GPUPriorityPluginArgs
from berth.plugins.gpupriority.gpu_priority import free_gpus
from tests.gpu_objects import claim, device, resource_slice

GPU = "nvidia.com/gpu"
CARD = "berth.dev/gpu-card"


def node(
    name: str,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    gpus: int | None = None,
) -> pb.Node:
    extra = {} if gpus is None else {GPU: gpus}
    obj = make_node(name).capacity(cpu="64", memory="256Gi", **extra).obj()
    obj.labels.update(labels or {})
    obj.annotations.update(annotations or {})
    return obj


def pod_on(name: str, on: str, gpus: int = 0, card: str | None = None) -> pb.Pod:
    wrapper = make_pod(name).node(on)
    obj = (wrapper.req(cpu="100m", **{GPU: gpus}) if gpus else wrapper.req(cpu="100m")).obj()
    if card is not None:
        obj.annotations[CARD] = card
    return obj


FOUR_DEVICES = [resource_slice("s", "n1", [device(f"gpu-{i}") for i in range(4)])]
HAMI = json.dumps(
    [
        {"id": "GPU-a", "count": 4, "devmem": 32768, "health": True},
        {"id": "GPU-b", "count": 4, "devmem": 32768, "health": True},
        {"id": "GPU-c", "count": 4, "devmem": 32768},
    ]
)

# (id, labels, annotations, allocatable GPUs, objects, pods on n1, free GPUs, source)
CASES: list[
    tuple[str, dict[str, str], dict[str, str], int | None, list[Any], list[pb.Pod], int, str]
] = [
    ("DRA: four free devices", {}, {}, None, FOUR_DEVICES, [], 4, "ResourceSlices"),
    (
        "DRA: one allocated in a claim",
        {},
        {},
        None,
        [*FOUR_DEVICES, claim("c", "n1", "gpu-2")],
        [],
        3,
        "ResourceSlices",
    ),
    (
        "DRA: one given to a pod by GPUCardFit",
        {},
        {},
        None,
        FOUR_DEVICES,
        [pod_on("o", "n1", card="gpu.nvidia.com/n1/gpu-0")],
        3,
        "ResourceSlices",
    ),
    (
        "DRA: a shared device partly consumed is not free",
        {},
        {},
        None,
        [
            resource_slice("s", "n1", [device("gpu-0", shared=True), device("gpu-1", shared=True)]),
            claim("c", "n1", "gpu-0", consumed="1Gi"),
        ],
        [],
        1,
        "ResourceSlices",
    ),
    (
        "GFD: count less the requests",
        {"nvidia.com/gpu.count": "8"},
        {},
        8,
        [],
        [pod_on("a", "n1", 3)],
        5,
        "GFD labels",
    ),
    (
        "GFD: replicas multiply the count",
        {"nvidia.com/gpu.count": "2", "nvidia.com/gpu.replicas": "4"},
        {},
        8,
        [],
        [pod_on("a", "n1", 3)],
        5,
        "GFD labels",
    ),
    (
        "HAMi: healthy cards' split counts less the requests",
        {},
        {HAMI_ANNOTATION: HAMI},
        12,
        [],
        [pod_on("a", "n1", 2)],
        6,
        "HAMi annotation",
    ),
    (
        "Berth: cards no pod was given",
        {},
        {"berth.dev/gpu-cards": '["80Gi", "40Gi", "40Gi"]'},
        None,
        [],
        [pod_on("a", "n1", card="1")],
        2,
        "Berth annotation",
    ),
    (
        "no source: allocatable less requests",
        {},
        {},
        4,
        [],
        [pod_on("a", "n1", 1)],
        3,
        "allocatable",
    ),
    # Precedence.
    (
        "DRA before GFD",
        {"nvidia.com/gpu.count": "8"},
        {},
        8,
        FOUR_DEVICES,
        [],
        4,
        "ResourceSlices",
    ),
    (
        "GFD before HAMi and allocatable",
        {"nvidia.com/gpu.count": "2"},
        {HAMI_ANNOTATION: HAMI},
        8,
        [],
        [],
        2,
        "GFD labels",
    ),
    # Malformed: no free GPU, whatever the lower sources say.
    (
        "GFD count malformed",
        {"nvidia.com/gpu.count": "lots"},
        {},
        8,
        [],
        [],
        0,
        "GFD labels",
    ),
    (
        "HAMi malformed",
        {},
        {HAMI_ANNOTATION: "[{"},
        8,
        [],
        [],
        0,
        "HAMi annotation",
    ),
]


@pytest.mark.parametrize(
    ("labels", "annotations", "allocatable", "objects", "pods", "free", "source"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_free_gpus_by_source(
    labels: dict[str, str],
    annotations: dict[str, str],
    allocatable: int | None,
    objects: list[Any],
    pods: list[pb.Pod],
    free: int,
    source: str,
) -> None:
    other = node("n2", gpus=1)
    snap = snapshot_of([node("n1", labels, annotations, allocatable), other], pods, objects)
    handle = Handle("test")
    handle.bind_snapshot(snap)
    plugin = GPUPriority(None, handle)
    dra = DraInventory(snap, GPUPriorityPluginArgs().dra_drivers)
    assert free_gpus(snap.nodes["n1"], GPU, dra) == (free, source)
    p = PodInfo(make_pod("p").obj())
    assert plugin.score(fresh_state(), p, snap.nodes["n1"]) == free
    # The batch form, with the scalar column of nvidia.com/gpu present (n2 has it).
    assert plugin.score_nodes(fresh_state(), p, batch_of(snap)).tolist() == [free, 1]


def test_scores_name_the_source_in_the_debug_log(caplog: pytest.LogCaptureFixture) -> None:
    snap = snapshot_of([node("n1", {"nvidia.com/gpu.count": "2"})])
    handle = Handle("test")
    handle.bind_snapshot(snap)
    with caplog.at_level(logging.DEBUG, logger="berth.plugins.gpupriority.gpu_priority"):
        GPUPriority(None, handle).score(
            fresh_state(), PodInfo(make_pod("p").obj()), snap.nodes["n1"]
        )
    assert "node n1 has 2 free GPUs (GFD labels)" in caplog.text


def test_reads_resource_slices_and_claims_unless_no_drivers() -> None:
    assert [k.resource for k in GPUPriority.reads(GPUPriorityPluginArgs())] == [
        "resourceslices",
        "resourceclaims",
    ]
    assert GPUPriority.reads(GPUPriorityPluginArgs(dra_drivers=[])) == ()


def test_bad_dra_drivers_are_refused() -> None:
    with pytest.raises(ValueError, match=r"^draDrivers\[0\]: invalid value ''"):
        GPUPriority(GPUPriorityPluginArgs(dra_drivers=[""]))


def test_the_batch_form_follows_nodes_that_gain_or_lose_a_source() -> None:
    snap = snapshot_of([node("n1", gpus=4), node("n2", gpus=1)])
    handle = Handle("test")
    handle.bind_snapshot(snap)
    plugin = GPUPriority(None, handle)
    p = PodInfo(make_pod("p").obj())
    assert plugin.score_nodes(fresh_state(), p, batch_of(snap)).tolist() == [4, 1]
    # n1 gets GFD labels saying 8 cards: counted from them now.
    delta = pb.ClusterDelta()
    delta.upsert_nodes.append(node("n1", {"nvidia.com/gpu.count": "8"}, gpus=4))
    snap.apply(delta)
    assert plugin.score_nodes(fresh_state(), p, batch_of(snap)).tolist() == [8, 1]
    # And loses them again.
    delta = pb.ClusterDelta()
    delta.upsert_nodes.append(node("n1", gpus=4))
    snap.apply(delta)
    assert plugin.score_nodes(fresh_state(), p, batch_of(snap)).tolist() == [4, 1]
