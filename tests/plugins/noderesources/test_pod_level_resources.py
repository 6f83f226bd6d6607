"""NodeResourcesFit and NodeResourcesBalancedAllocation with pod-level
resources (PodLevelResources) and in-place resize (InPlacePodVerticalScaling),
as kube-scheduler v1.36.3 runs them with its default feature gates.

What each computation counts (framework/model.py):

* the node's side, for both plugins: each pod as PodInfo.CalculateResource
  counts it (pod-level requests and resize status included);
* Fit's PreFilter/Filter, for the pod being scheduled: computePodResourceRequest,
  pod-level requests included, no status;
* Fit's Score, for the pod being scheduled: calculatePodResourceRequest with the
  flags NewFit leaves false, so containers only (non-zero defaults, overhead);
* BalancedAllocation's PreScore/Score: calculatePodResourceRequest with the
  flags from the gates, so pod-level requests and status included.

Cases follow upstream's fit_test.go (TestEnoughRequests' pod-level cases,
TestIsFit) and resource_allocation_test.go
(TestResourceAllocationScorerCalculateRequests); the scores marked "upstream"
are what v1.36.3's NewFit/NewBalancedAllocation return for the same cluster
(run with the default feature gates). Whole scheduling cycles with these
pods are in tests/unit/framework/test_pod_level_cycle.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.model import DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST, PodInfo
from berth.framework.snapshot import Snapshot
from berth.framework.status import Code, Status
from berth.framework.testing import (
    fresh_state,
    make_node,
    make_pod,
    resources,
    snapshot_of,
)
from berth.plugins.noderesources import BalancedAllocation, Fit
from berth.plugins.noderesources.fit import compute_pod_resource_request, fits

HUGE_A = "hugepages-2Mi"
Q = dict[str, Any]


def with_pod_level(pod: pb.Pod, **requests: str | int) -> pb.Pod:
    """newPodLevelResourcesPod: spec.resources.requests on the record."""
    pod.pod_level_requests.CopyFrom(resources(**requests))
    return pod


def resource_pod(**requests: str | int) -> pb.Pod:
    """newResourcePod: one container requesting ``requests`` (none: a
    container without requests)."""
    w = make_pod()
    if requests:
        w.req(**requests)
    else:
        w.container()
    return w.obj()


def upstream_node() -> pb.Node:
    """fit_test.go's node: makeAllocatableResources(10, 20, 32, 5, 20, 5)."""
    return (
        make_node("node")
        .capacity(
            cpu="10m",
            memory=20,
            pods=32,
            **{"example.com/aaa": 5, "ephemeral-storage": 20, HUGE_A: 5},
        )
        .obj()
    )


def snapshot_with(used: Q | None) -> Snapshot:
    bound = [] if used is None else [make_pod("existing").node("node").req(**used).obj()]
    return snapshot_of([upstream_node()], bound)


def run_filter(pod: PodInfo, snap: Snapshot) -> Status:
    """Fit's PreFilter then Filter, per node and batch (which must agree)."""
    plugin = Fit()
    state = fresh_state()
    _, st = plugin.pre_filter(state, pod, snap.all_nodes())
    assert st.is_success
    per_node = plugin.filter(state, pod, snap.nodes["node"])
    batch = plugin.filter_nodes(state, pod, snap.all_nodes()).status_of(0)
    assert (per_node.code, per_node.reasons) == (batch.code, batch.reasons)
    return per_node


OK = Status(Code.SUCCESS)


def unsched(*reasons: str) -> Status:
    return Status(Code.UNSCHEDULABLE, reasons)


def unresolvable(*reasons: str) -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons)


ENOUGH_REQUESTS: dict[str, tuple[pb.Pod, Q | None, Status]] = {
    "both-pod-level-and-container-level-resources-fit": (
        with_pod_level(resource_pod(cpu="1m", memory=1), cpu="1m", memory=2),
        {"cpu": "5m", "memory": 5},
        OK,
    ),
    "pod-level-cpu-resource-not-fit": (
        with_pod_level(resource_pod(cpu="1m", memory=1), cpu="7m", memory=2),
        {"cpu": "5m", "memory": 5},
        unsched("Insufficient cpu"),
    ),
    "pod-level-memory-resource-not-fit": (
        with_pod_level(resource_pod(cpu="1m", memory=1), cpu="3m", memory=2),
        {"cpu": "5m", "memory": 19},
        unsched("Insufficient memory"),
    ),
    "pod-level-hugepages-resource-fit": (
        with_pod_level(resource_pod(), cpu="3m", memory=2, **{HUGE_A: 5}),
        None,
        OK,
    ),
    "both-pod-level-and-container-level-hugepages-resource-fit": (
        with_pod_level(
            resource_pod(cpu="1m", memory=1, **{HUGE_A: 3}), cpu="3m", memory=2, **{HUGE_A: 5}
        ),
        None,
        OK,
    ),
    "pod-level-hugepages-resource-not-fit": (
        with_pod_level(resource_pod(), cpu="3m", memory=2, **{HUGE_A: 10}),
        None,
        unresolvable("Insufficient hugepages-2Mi"),
    ),
    "one-pod-level-cpu-resource-fits-and-all-init-and-non-init-containers-resources-fit": (
        with_pod_level(
            make_pod().req(cpu="1m", memory=1).init_req(cpu="1m", memory=1).obj(),
            cpu="3m",
            memory=2,
        ),
        {"cpu": "5m", "memory": 19},
        unsched("Insufficient memory"),
    ),
    # Pod-level requests replace the containers' sum even when it is larger.
    "pod-level-below-container-sum-fits": (
        with_pod_level(resource_pod(cpu="8m", memory=1), cpu="2m"),
        {"cpu": "5m", "memory": 5},
        OK,
    ),
}


@pytest.mark.parametrize(
    ("pod", "used", "want"), ENOUGH_REQUESTS.values(), ids=ENOUGH_REQUESTS.keys()
)
def test_fit_filter_enough_requests_pod_level_resources(
    pod: pb.Pod, used: Q | None, want: Status
) -> None:
    """fit.go, Filter with PodLevelResources on (TestEnoughRequests)."""
    got = run_filter(PodInfo(pod), snapshot_with(used))
    assert (got.code, got.reasons) == (want.code, want.reasons)


@pytest.mark.parametrize(
    ("pod", "capacity", "fit"),
    [
        (make_pod().req(cpu="2").obj(), {"cpu": "1"}, False),
        (make_pod().req(cpu="1").obj(), {"cpu": "2"}, True),
        (with_pod_level(make_pod().obj(), cpu="2"), {"cpu": "1"}, False),
        (with_pod_level(make_pod().obj(), cpu="2"), {"cpu": "2"}, True),
        (with_pod_level(make_pod().obj(), **{HUGE_A: "2Mi"}), {HUGE_A: "2Mi"}, True),
        (with_pod_level(make_pod().obj(), **{HUGE_A: "4Mi"}), {HUGE_A: "2Mi"}, False),
    ],
    ids=[
        "insufficient-resource",
        "sufficient-resource",
        "insufficient-pod-level-resource",
        "sufficient-pod-level-resource",
        "sufficient-pod-level-resource-hugepages",
        "insufficient-pod-level-resource-hugepages",
    ],
)
def test_is_fit_pod_level_resources(pod: pb.Pod, capacity: Q, fit: bool) -> None:
    """fit.go, isFit / Fits (TestIsFit)."""
    node = snapshot_of([make_node("n").capacity(**capacity).obj()]).nodes["n"]
    assert (not fits(PodInfo(pod), node)) is fit


def test_compute_pod_resource_request_pod_level_and_no_status() -> None:
    """fit.go, computePodResourceRequest: pod-level requests count, resize
    status does not (the pod has not been scheduled)."""
    pod = with_pod_level(make_pod().req(cpu="1").req(memory="1Gi").obj(), cpu="3")
    pod.containers[0].actuated_requests.CopyFrom(resources(cpu="5"))
    state = compute_pod_resource_request(PodInfo(pod))
    assert (state.milli_cpu, state.memory) == (3000, 2**30)


# -- calculatePodResourceRequest --------------------------------------------------------

DEF_CPU, DEF_MEM = DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST
ONE_MI = 2**20


def overhead(pod: pb.Pod, **q: str | int) -> pb.Pod:
    pod.overhead.CopyFrom(resources(**q))
    return pod


SCORER_REQUESTS: dict[str, tuple[pb.Pod, tuple[int, int], tuple[int, int]]] = {
    # name: pod, (cpu, memory) for Fit's scorer, (cpu, memory) for BalancedAllocation's
    "overhead-only": (
        overhead(pb.Pod(uid="u"), cpu="1", memory="1Mi"),
        (1000, ONE_MI),
        (1000, ONE_MI),
    ),
    "1x-requestless-container": (make_pod().container().obj(), (DEF_CPU, DEF_MEM), (0, 0)),
    "2x-requestless-container": (
        make_pod().container().container().obj(),
        (2 * DEF_CPU, 2 * DEF_MEM),
        (0, 0),
    ),
    "request-container-and-requestless-container": (
        make_pod().req(cpu="1", memory="1Mi").container().obj(),
        (1000 + DEF_CPU, ONE_MI + DEF_MEM),
        (1000, ONE_MI),
    ),
    "container-requestless-container-and-overhead": (
        overhead(make_pod().req(cpu="1", memory="1Mi").container().obj(), cpu="1", memory="1Mi"),
        (2000 + DEF_CPU, 2 * ONE_MI + DEF_MEM),
        (2000, 2 * ONE_MI),
    ),
    "init-container-container-requestless-container-and-overhead": (
        overhead(
            make_pod().req(cpu="1", memory="1Mi").container().init_req(cpu="3").obj(),
            cpu="1",
            memory="1Mi",
        ),
        (4000, 2 * ONE_MI + DEF_MEM),
        (4000, 2 * ONE_MI),
    ),
    "requestless-init-container-small-init-container-small-container": (
        make_pod().req(cpu="3m", memory=3).init_req().init_req(cpu="1m", memory=1).obj(),
        (DEF_CPU, DEF_MEM),
        (3, 3),
    ),
    # Pod-level requests: BalancedAllocation counts them, Fit's scorer does not.
    "pod-level-requests-with-requestless-containers": (
        with_pod_level(make_pod().container().container().obj(), cpu="4", memory="1Gi"),
        (2 * DEF_CPU, 2 * DEF_MEM),
        (4000, 2**30),
    ),
    "pod-level-cpu-and-a-container-memory": (
        with_pod_level(make_pod().container().req(memory="1Gi").obj(), cpu="4"),
        (2 * DEF_CPU, 2**30 + DEF_MEM),
        (4000, 2**30),
    ),
}


@pytest.mark.parametrize(
    ("pod", "fit_want", "ba_want"), SCORER_REQUESTS.values(), ids=SCORER_REQUESTS.keys()
)
def test_resource_allocation_scorer_calculate_requests(
    pod: pb.Pod, fit_want: tuple[int, int], ba_want: tuple[int, int]
) -> None:
    """resource_allocation.go, calculatePodResourceRequest
    (TestResourceAllocationScorerCalculateRequests), for the two scorers as
    v1.36 builds them: NewFit's (no feature flags, non-zero defaults) and
    NewBalancedAllocation's (flags from the gates, useRequested)."""
    info = PodInfo(pod)
    assert tuple(Fit().scorer.pod_requests(info)) == fit_want
    assert tuple(BalancedAllocation().scorer.pod_requests(info)) == ba_want


def test_resource_allocation_scorer_calculate_requests_resize_status() -> None:
    """UseStatusResources follows the scorer's flag: BalancedAllocation counts
    what a resize applied, NodeResourcesFit's scorer does not."""
    pod = make_pod().req(cpu="500m", memory="1Gi").obj()
    pod.containers[0].actuated_requests.CopyFrom(resources(cpu="2", memory="1Gi"))
    info = PodInfo(pod)
    assert Fit().scorer.pod_requests(info) == [500, 2**30]
    assert BalancedAllocation().scorer.pod_requests(info) == [2000, 2**30]


def test_balanced_allocation_pre_score_pod_level_requests_are_not_best_effort() -> None:
    """isBestEffortPod reads the same requests: a pod whose containers request
    nothing but whose pod level does is scored."""
    pod = PodInfo(with_pod_level(make_pod().container().obj(), cpu="1"))
    snap = snapshot_of([make_node("n").capacity(cpu="4", memory="8Gi").obj()])
    assert BalancedAllocation().pre_score(fresh_state(), pod, snap.all_nodes()).is_success
    bare = PodInfo(make_pod().container().obj())
    assert BalancedAllocation().pre_score(fresh_state(), bare, snap.all_nodes()).code == Code.SKIP
