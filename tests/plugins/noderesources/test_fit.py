"""NodeResourcesFit PreFilter/Filter, ported in spirit from upstream's fit_test.go
(TestEnoughRequests, TestNotEnoughRequests, TestStorageRequests,
TestPreFilterDisabled), plus the batch form checked against the per-node form
on random clusters."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.cycle_state import CycleState
from berth.framework.model import PodInfo
from berth.framework.snapshot import Snapshot
from berth.framework.status import Code, Status
from berth.framework.testing import (
    PodWrapper,
    batch_of,
    fresh_state,
    make_node,
    make_pod,
    snapshot_of,
)
from berth.plugins.noderesources import Fit, NodeResourcesFitArgs
from berth.plugins.noderesources.args import (
    RequestedToCapacityRatioParam,
    ResourceSpec,
    ScoringStrategy,
    UtilizationShapePoint,
)
from berth.plugins.noderesources.fit import (
    PRE_FILTER_STATE_KEY,
    InsufficientResource,
    compute_pod_resource_request,
    fits,
)

EXT_A = "example.com/aaa"
EXT_B = "example.com/bbb"
K8S_IO_A = "kubernetes.io/something"
K8S_IO_B = "subdomain.kubernetes.io/something"
HUGE_A = "hugepages-2Mi"


# Any: the builders take quantities as **kwargs next to other keywords.
Requests = dict[str, Any]


def req(cpu: int = 0, mem: int = 0, eph: int = 0, **scalar: int) -> Requests:
    """A container request in upstream's newResourcePod units: milli-CPU,
    bytes. CPU and memory are always set (0 included), as upstream's are."""
    out: Requests = {"cpu": f"{cpu}m", "memory": mem}
    if eph:
        out["ephemeral-storage"] = eph
    out.update(scalar)
    return out


def x(**scalar: int) -> dict[str, int]:
    """Scalar requests by short name: a=EXT_A, b=EXT_B, k=K8S_IO_A, kb=K8S_IO_B, h=HUGE_A."""
    names = {"a": EXT_A, "b": EXT_B, "k": K8S_IO_A, "kb": K8S_IO_B, "h": HUGE_A}
    return {names[k]: v for k, v in scalar.items()}


def pod_of(*containers: Requests, init: tuple[Requests, ...] = ()) -> PodWrapper:
    w = make_pod()
    for c in containers:
        w.req(**c)
    for c in init:
        w.init_req(**c)
    return w


def upstream_node(pods: int = 32) -> pb.Node:
    """fit_test.go's node: makeAllocatableResources(10, 20, 32, 5, 20, 5)."""
    return (
        make_node("node")
        .capacity(cpu="10m", memory=20, pods=pods, **{EXT_A: 5, "ephemeral-storage": 20, HUGE_A: 5})
        .obj()
    )


def snapshot_with(node: pb.Node, used: Requests | None) -> Snapshot:
    bound = [] if used is None else [make_pod("existing").node(node.name).req(**used).obj()]
    return snapshot_of([node], bound)


def run_filter(plugin: Fit, pod: PodInfo, snap: Snapshot) -> tuple[Status, Status]:
    """(per-node Filter, batch Filter) for the one node of ``snap``."""
    state = fresh_state()
    _, st = plugin.pre_filter(state, pod, snap.all_nodes())
    assert st.is_success
    node = next(iter(snap.nodes.values()))
    per_node = plugin.filter(state, pod, node)
    batch = plugin.filter_nodes(state, pod, snap.all_nodes()).status_of(0)
    return per_node, batch


def unsched(*reasons: str) -> Status:
    return Status(Code.UNSCHEDULABLE, reasons)


def unresolvable(*reasons: str) -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons)


def insufficient(name: str) -> str:
    return f"Insufficient {name}"


CPU, MEM, EPH = insufficient("cpu"), insufficient("memory"), insufficient("ephemeral-storage")
OK = Status()


@dataclass
class Case:
    pod: PodWrapper
    used: Requests | None
    want: Status
    args: NodeResourcesFitArgs = field(default_factory=NodeResourcesFitArgs)


# fit_test.go, TestEnoughRequests: node allocatable 10m CPU, 20 bytes, 5 EXT_A,
# 20 bytes ephemeral, 5 hugepages; "used" is one pod already on it.
ENOUGH_REQUESTS = {
    "no resources requested always fits": Case(make_pod(), req(10, 20), OK),
    "too many resources fails": Case(pod_of(req(1, 1)), req(10, 20), unsched(CPU, MEM)),
    "too many resources fails due to init container cpu": Case(
        pod_of(req(1, 1), init=(req(3, 1),)), req(8, 19), unsched(CPU)
    ),
    "too many resources fails due to highest init container cpu": Case(
        pod_of(req(1, 1), init=(req(3, 1), req(2, 1))), req(8, 19), unsched(CPU)
    ),
    "too many resources fails due to init container memory": Case(
        pod_of(req(1, 1), init=(req(1, 3),)), req(9, 19), unsched(MEM)
    ),
    "too many resources fails due to highest init container memory": Case(
        pod_of(req(1, 1), init=(req(1, 3), req(1, 2))), req(9, 19), unsched(MEM)
    ),
    "init container fits because it's the max, not sum, of containers and init containers": Case(
        pod_of(req(1, 1), init=(req(1, 1),)), req(9, 19), OK
    ),
    "multiple init containers fit because it's the max, not sum": Case(
        pod_of(req(1, 1), init=(req(1, 1), req(1, 1))), req(9, 19), OK
    ),
    "both resources fit": Case(pod_of(req(1, 1)), req(5, 5), OK),
    "one resource memory fits": Case(pod_of(req(2, 1)), req(9, 5), unsched(CPU)),
    "one resource cpu fits": Case(pod_of(req(1, 2)), req(5, 19), unsched(MEM)),
    "equal edge case": Case(pod_of(req(5, 1)), req(5, 19), OK),
    "equal edge case for init container": Case(
        pod_of(req(4, 1), init=(req(5, 1),)), req(5, 19), OK
    ),
    "extended resource fits": Case(pod_of(req(**x(a=1))), req(), OK),
    "extended resource fits for init container": Case(
        pod_of(req(), init=(req(**x(a=1)),)), req(), OK
    ),
    # Newer upstream: a request above the node's whole allocatable is
    # UnschedulableAndUnresolvable (InsufficientResource.Unresolvable).
    "extended resource capacity enforced": Case(
        pod_of(req(1, 1, **x(a=10))), req(**x(a=0)), unresolvable(insufficient(EXT_A))
    ),
    "extended resource capacity enforced for init container": Case(
        pod_of(req(), init=(req(1, 1, **x(a=10)),)),
        req(**x(a=0)),
        unresolvable(insufficient(EXT_A)),
    ),
    "extended resource allocatable enforced": Case(
        pod_of(req(1, 1, **x(a=1))), req(**x(a=5)), unsched(insufficient(EXT_A))
    ),
    "extended resource allocatable enforced for multiple containers": Case(
        pod_of(req(1, 1, **x(a=3)), req(1, 1, **x(a=3))),
        req(**x(a=2)),
        unresolvable(insufficient(EXT_A)),
    ),
    "extended resource allocatable admits multiple init containers": Case(
        pod_of(req(), init=(req(1, 1, **x(a=3)), req(1, 1, **x(a=3)))), req(**x(a=2)), OK
    ),
    "extended resource allocatable enforced for multiple init containers": Case(
        pod_of(req(), init=(req(1, 1, **x(a=6)), req(1, 1, **x(a=3)))),
        req(**x(a=2)),
        unresolvable(insufficient(EXT_A)),
    ),
    "extended resource allocatable enforced for unknown resource": Case(
        pod_of(req(1, 1, **x(b=1))), req(), unresolvable(insufficient(EXT_B))
    ),
    "kubernetes.io resource capacity enforced": Case(
        pod_of(req(1, 1, **x(k=10))), req(), unresolvable(insufficient(K8S_IO_A))
    ),
    "kubernetes.io resource capacity enforced for init container": Case(
        pod_of(req(), init=(req(1, 1, **x(kb=10)),)), req(), unresolvable(insufficient(K8S_IO_B))
    ),
    "hugepages resource capacity enforced": Case(
        pod_of(req(1, 1, **x(h=10))), req(**x(h=0)), unresolvable(insufficient(HUGE_A))
    ),
    "hugepages resource allocatable enforced for multiple containers": Case(
        pod_of(req(1, 1, **x(h=3)), req(1, 1, **x(h=3))),
        req(**x(h=2)),
        unresolvable(insufficient(HUGE_A)),
    ),
    "skip checking ignored extended resource": Case(
        pod_of(req(1, 1, **x(b=1))), req(), OK, NodeResourcesFitArgs(ignored_resources=[EXT_B])
    ),
    "resources + pod overhead fits": Case(
        pod_of(req(1, 1)).overhead(cpu="3m", memory=13), req(5, 5), OK
    ),
    "requests + overhead does not fit for memory": Case(
        pod_of(req(1, 1)).overhead(cpu="1m", memory=15), req(5, 5), unsched(MEM)
    ),
    "skip checking ignored extended resource via resource groups": Case(
        pod_of(req(1, 1, **x(b=1, k=1))),
        req(),
        unresolvable(insufficient(K8S_IO_A)),
        NodeResourcesFitArgs(ignored_resource_groups=["example.com"]),
    ),
    "ignored resources never skip a kubernetes.io resource": Case(
        pod_of(req(1, 1, **x(k=1))),
        req(),
        unresolvable(insufficient(K8S_IO_A)),
        NodeResourcesFitArgs(ignored_resources=[K8S_IO_A]),
    ),
    "ignored resources never skip hugepages": Case(
        pod_of(req(1, 1, **x(h=6))),
        req(),
        unresolvable(insufficient(HUGE_A)),
        NodeResourcesFitArgs(ignored_resources=[HUGE_A]),
    ),
    "skip checking extended resource request with quantity zero via resource groups": Case(
        pod_of(req(1, 1, **x(a=0))), req(**x(a=6)), OK
    ),
    "skip checking resource request with quantity zero": Case(
        pod_of(req(**x(a=1))), req(20, 30, **x(a=1)), OK
    ),
    # Restartable init containers (sidecars) run beside the containers, so
    # they add up; a plain init container only needs to fit by itself.
    "sidecar requests add to the containers": Case(
        pod_of(req(5, 1)).init_req(restartable=True, **req(4, 1)), req(2, 1), unsched(CPU)
    ),
    "plain init container with the same request fits": Case(
        pod_of(req(5, 1), init=(req(4, 1),)), req(2, 1), OK
    ),
    "init container after a sidecar needs room beside it": Case(
        pod_of(req(1, 1)).init_req(restartable=True, **req(3, 1)).init_req(**req(7, 1)),
        req(1, 1),
        unsched(CPU),
    ),
    # fit_test.go, TestStorageRequests.
    "empty storage requested, and pod fits": Case(pod_of(req(1, 1)), req(2, 10), OK),
    "storage ephemeral local storage request exceeds allocatable": Case(
        pod_of(req(eph=25)), req(2, 2), unresolvable(EPH)
    ),
    "ephemeral local storage is sufficient": Case(pod_of(req(eph=5)), req(2, 2, eph=10), OK),
    "ephemeral local storage is insufficient": Case(
        pod_of(req(eph=11)), req(2, 2, eph=10), unsched(EPH)
    ),
    "pod fits": Case(pod_of(req(eph=10)), req(2, 2), OK),
    # Unresolvable when any request exceeds the whole allocatable.
    "cpu beyond allocatable is unresolvable, memory short is reported too": Case(
        pod_of(req(11, 2)), req(0, 19), unresolvable(CPU, MEM)
    ),
}


@pytest.mark.parametrize("case", list(ENOUGH_REQUESTS.values()), ids=list(ENOUGH_REQUESTS))
def test_filter_matches_upstream_enough_requests(case: Case) -> None:
    snap = snapshot_with(upstream_node(), case.used)
    per_node, batch = run_filter(Fit(case.args), case.pod.info(), snap)
    assert per_node == case.want
    assert batch == case.want


# fit_test.go, TestNotEnoughRequests: a node that allows one pod and has one.
NOT_ENOUGH_REQUESTS = {
    "even without specified resources, predicate fails when there's no space for additional pod": (
        make_pod(),
        req(10, 20),
    ),
    "even if both resources fit, predicate fails when there's no space for additional pod": (
        pod_of(req(1, 1)),
        req(5, 5),
    ),
    "even for equal edge case, predicate fails when there's no space for additional pod": (
        pod_of(req(5, 1)),
        req(5, 19),
    ),
    "even for equal edge case, predicate fails due to init container": (
        pod_of(req(5, 1), init=(req(5, 1),)),
        req(5, 19),
    ),
}


@pytest.mark.parametrize(
    ("pod", "used"), list(NOT_ENOUGH_REQUESTS.values()), ids=list(NOT_ENOUGH_REQUESTS)
)
def test_filter_reports_too_many_pods_as_resolvable(pod: PodWrapper, used: Requests) -> None:
    snap = snapshot_with(upstream_node(pods=1), used)
    per_node, batch = run_filter(Fit(), pod.info(), snap)
    assert per_node == batch == unsched("Too many pods")


def test_fit_insufficient_cpu_and_memory_reports_both() -> None:
    snap = snapshot_with(upstream_node(), req(10, 20))
    per_node, batch = run_filter(Fit(), pod_of(req(1, 1)).info(), snap)
    assert per_node.reasons == batch.reasons == ("Insufficient cpu", "Insufficient memory")
    assert per_node.code is Code.UNSCHEDULABLE


def test_fit_too_many_pods_comes_first_then_resources_in_upstream_order() -> None:
    snap = snapshot_with(upstream_node(pods=1), req(10, 20, eph=20, **x(a=5, h=5)))
    pod = pod_of(req(1, 1, eph=1, **x(h=1, a=1)))
    per_node, batch = run_filter(Fit(), pod.info(), snap)
    want = ("Too many pods", CPU, MEM, EPH, insufficient(EXT_A), insufficient(HUGE_A))
    assert per_node.reasons == batch.reasons == want


def test_filter_without_pre_filter_is_an_error_like_upstream_pre_filter_disabled() -> None:
    # fit_test.go, TestPreFilterDisabled.
    snap = snapshot_with(upstream_node(), None)
    plugin = Fit()
    pod = make_pod().info()
    st = plugin.filter(fresh_state(), pod, snap.nodes["node"])
    assert st.code is Code.ERROR
    assert st.reasons == ('error reading "PreFilterNodeResourcesFit" from cycleState: not found',)
    verdicts = plugin.filter_nodes(fresh_state(), pod, snap.all_nodes())
    assert verdicts.status_of(0) == st


def test_pre_filter_state_survives_the_wire() -> None:
    snap = snapshot_with(upstream_node(), req(9, 5))
    plugin = Fit()
    pod = pod_of(req(2, 1, eph=3, **x(a=1)), init=(req(1, 7),)).overhead(cpu="1m").info()
    state = CycleState()
    plugin.pre_filter(state, pod, snap.all_nodes())
    remote = CycleState.decode(state.encode())
    assert remote.read(PRE_FILTER_STATE_KEY) == compute_pod_resource_request(pod)
    assert plugin.filter(remote, pod, snap.nodes["node"]) == unsched(CPU)


def test_pre_filter_never_skips_even_for_a_pod_without_requests() -> None:
    snap = snapshot_with(upstream_node(), None)
    result, st = Fit().pre_filter(fresh_state(), make_pod().info(), snap.all_nodes())
    assert result is None and st.is_success and not st.is_skip


def test_fits_returns_upstream_insufficient_resource_details() -> None:
    # fit_test.go, TestEnoughRequests "extended resource allocatable enforced
    # for multiple containers": Requested 6, Used 2, Capacity 5.
    snap = snapshot_with(upstream_node(), req(**x(a=2)))
    pod = pod_of(req(1, 1, **x(a=3)), req(1, 1, **x(a=3))).info()
    assert fits(pod, snap.nodes["node"]) == [
        InsufficientResource(EXT_A, insufficient(EXT_A), 6, 2, 5, unresolvable=True)
    ]


def test_batch_filter_shares_one_status_per_distinct_reason_set() -> None:
    nodes = [make_node(f"n{i}").capacity(cpu="1", memory="1Gi").obj() for i in range(100)]
    bound = [make_pod(f"b{i}").node(f"n{i}").req(cpu="900m").obj() for i in range(0, 100, 2)]
    snap = snapshot_of(nodes, bound)
    plugin = Fit()
    state = fresh_state()
    pod = make_pod().req(cpu="500m", memory="100Mi").info()
    plugin.pre_filter(state, pod, snap.all_nodes())
    verdicts = plugin.filter_nodes(state, pod, snap.all_nodes())
    assert verdicts.statuses == [unsched(CPU)]
    assert int((~verdicts.passed()).sum()) == 50


@pytest.mark.parametrize(
    ("crowded", "want"),
    [
        ("", []),  # every node has room: the quick all-pass answer
        ("pods", [Status(Code.UNSCHEDULABLE, ("Too many pods",))]),
        ("cpu", [unsched(CPU)]),
        ("memory", [unsched(MEM)]),
    ],
)
def test_batch_filter_all_pass_only_when_every_node_has_room(
    crowded: str, want: list[Status]
) -> None:
    """filter_nodes answers "every node passes" before building per-node
    reasons; one node short of pods, CPU or memory (exactly at the limit)
    still gets its reason, as the per-node form gives it."""
    nodes = [make_node(f"n{i}").capacity(cpu="2", memory="2Gi", pods="3").obj() for i in range(8)]
    bound = [make_pod(f"b{i}").node(f"n{i}").req(cpu="1", memory="1Gi").obj() for i in range(8)]
    extra = {
        "": [],
        "pods": [make_pod(f"x{i}").node("n5").obj() for i in range(2)],
        "cpu": [make_pod("x").node("n5").req(cpu="501m").obj()],
        "memory": [make_pod("x").node("n5").req(memory="513Mi").obj()],
    }[crowded]
    snap = snapshot_of(nodes, bound + extra)
    plugin = Fit()
    state = fresh_state()
    pod = make_pod().req(cpu="500m", memory="512Mi").info()
    plugin.pre_filter(state, pod, snap.all_nodes())
    verdicts = plugin.filter_nodes(state, pod, snap.all_nodes())
    assert verdicts.statuses == want
    for k, ni in enumerate(snap.all_nodes()):
        assert verdicts.status_of(k) == plugin.filter(state, pod, ni), ni.name
    assert int((~verdicts.passed()).sum()) == (1 if crowded else 0)


# -- the batch form agrees with the per-node form ------------------------------

SCALARS = [EXT_A, EXT_B, "nvidia.com/gpu", HUGE_A, K8S_IO_A]


def random_requests(rng: random.Random, scale: int) -> Requests:
    out: Requests = {}
    # Leaving CPU or memory out exercises the non-zero defaults of scoring.
    if rng.random() < 0.8:
        out["cpu"] = f"{rng.choice([0, rng.randrange(1, 4000)]) // scale}m"
    if rng.random() < 0.8:
        out["memory"] = rng.choice([0, rng.randrange(1, 8 << 30)]) // scale
    if rng.random() < 0.3:
        out["ephemeral-storage"] = rng.randrange(0, 20 << 30) // scale
    for name in SCALARS:
        if rng.random() < 0.15:
            out[name] = rng.randrange(0, 4)
    return out


def random_pod(rng: random.Random, name: str, scale: int = 1) -> PodWrapper:
    w = make_pod(name)
    for _ in range(rng.randrange(0, 3)):
        reqs = random_requests(rng, scale)
        if reqs:
            w.req(**reqs)
        else:
            w.container()
    for _ in range(rng.choice([0, 0, 1, 2])):
        w.init_req(restartable=rng.random() < 0.4, **random_requests(rng, scale))
    if rng.random() < 0.2:
        w.overhead(cpu=f"{rng.randrange(0, 200)}m", memory=rng.randrange(0, 1 << 28))
    return w


def random_cluster(rng: random.Random, n_nodes: int) -> Snapshot:
    nodes = []
    for i in range(n_nodes):
        extra: Requests = {name: rng.randrange(0, 8) for name in SCALARS if rng.random() < 0.4}
        if rng.random() < 0.5:
            extra["ephemeral-storage"] = rng.randrange(0, 100 << 30)
        cpu = rng.choice([0, 500, 2000, 4000, 16000, 64000]) if rng.random() < 0.97 else 0
        nodes.append(
            make_node(f"node-{i}")
            .capacity(
                cpu=f"{cpu}m", memory=rng.randrange(0, 64 << 30), pods=rng.randrange(0, 12), **extra
            )
            .obj()
        )
    bound = [
        random_pod(rng, f"bound-{i}", scale=4).node(f"node-{rng.randrange(n_nodes)}").obj()
        for i in range(n_nodes * 3)
    ]
    snap = snapshot_of(nodes, bound)
    # Deleted nodes leave rows the batch must never read; new nodes reuse them.
    gone = pb.ClusterDelta(delete_nodes=[f"node-{i}" for i in range(0, n_nodes, 7)])
    snap.apply(gone)
    snap.apply(
        pb.ClusterDelta(upsert_nodes=[make_node("late").capacity(cpu="3", memory="3Gi").obj()])
    )
    return snap


SHAPE = [UtilizationShapePoint(0, 10), UtilizationShapePoint(40, 3), UtilizationShapePoint(100, 7)]
ARG_VARIANTS = {
    "defaults (LeastAllocated cpu, memory)": NodeResourcesFitArgs(),
    "ignored resources and groups": NodeResourcesFitArgs(
        ignored_resources=[EXT_B, HUGE_A], ignored_resource_groups=["nvidia.com"]
    ),
    "MostAllocated over every kind of resource": NodeResourcesFitArgs(
        scoring_strategy=ScoringStrategy(
            "MostAllocated",
            [
                ResourceSpec("cpu", 3),
                ResourceSpec("memory", 1),
                ResourceSpec("ephemeral-storage", 2),
                ResourceSpec("nvidia.com/gpu", 5),
                ResourceSpec(HUGE_A, 1),
                ResourceSpec("example.com/none-has-it", 4),
            ],
        )
    ),
    "LeastAllocated with extended resources": NodeResourcesFitArgs(
        scoring_strategy=ScoringStrategy(
            "LeastAllocated",
            [ResourceSpec("cpu", 1), ResourceSpec(EXT_A, 7), ResourceSpec("ephemeral-storage", 2)],
        )
    ),
    "RequestedToCapacityRatio": NodeResourcesFitArgs(
        scoring_strategy=ScoringStrategy(
            "RequestedToCapacityRatio",
            [ResourceSpec("cpu", 2), ResourceSpec("memory", 1), ResourceSpec(EXT_A, 3)],
            RequestedToCapacityRatioParam(SHAPE),
        )
    ),
}


@pytest.mark.parametrize("args", list(ARG_VARIANTS.values()), ids=list(ARG_VARIANTS))
def test_batch_filter_and_score_agree_with_per_node_forms_on_random_clusters(
    args: NodeResourcesFitArgs,
) -> None:
    rng = random.Random(20240611)
    snap = random_cluster(rng, 240)
    plugin = Fit(args)
    everyone = batch_of(snap)
    shuffled = list(range(len(everyone)))
    rng.shuffle(shuffled)
    some = everyone.take(shuffled[: len(shuffled) // 3])
    rejected_seen = 0
    for p in range(60):
        pod = random_pod(rng, f"pending-{p}").info()
        state = fresh_state()
        plugin.pre_filter(state, pod, everyone)
        plugin.pre_score(state, pod, everyone)
        for nodes in (everyone, some):
            verdicts = plugin.filter_nodes(state, pod, nodes)
            scores = plugin.score_nodes(state, pod, nodes)
            assert scores.dtype == np.int64
            for k, ni in enumerate(nodes):
                assert verdicts.status_of(k) == plugin.filter(state, pod, ni), ni.name
                assert int(scores[k]) == plugin.score(state, pod, ni), ni.name
            assert len(set(verdicts.statuses)) == len(verdicts.statuses)
            rejected_seen += int((~verdicts.passed()).sum())
            assert ((scores >= 0) & (scores <= 100)).all()
    assert rejected_seen > 0  # the random clusters do reject some nodes
