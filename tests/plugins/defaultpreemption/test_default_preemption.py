"""DefaultPreemption against the cases of upstream's
pkg/scheduler/framework/plugins/defaultpreemption/default_preemption_test.go
(TestPostFilter, TestDryRunPreemption, TestSelectBestCandidate,
TestPodEligibleToPreemptOthers, TestPreempt) and
pkg/scheduler/apis/config/validation/validation_pluginargs_test.go
(TestValidateDefaultPreemptionArgs). Pod-group cases are left out (Berth
does not port them); extender cases are the caller's: here the plugin
answers every candidate when asked, and tests/unit/shim/test_extenders.py
selects among those the extenders keep."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgspec
import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import (
    FilterPlugin,
    NodeVerdicts,
    Plugin,
    PreFilterPlugin,
    PreFilterResult,
)
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.objects import ClusterObject
from berth.framework.profile import PluginRef, ProfileConfig
from berth.framework.runtime import Framework
from berth.framework.snapshot import NodeBatch, Snapshot
from berth.framework.status import SUCCESS, Code, Status
from berth.framework.testing import make_node, make_object, make_pod, snapshot_of
from berth.plugins.defaultpreemption import (
    PDB_KIND,
    Candidate,
    DefaultPreemption,
    DefaultPreemptionArgs,
    PodDisruptionBudget,
    filter_pods_with_pdb_violation,
    pdb_from_object,
    pick_one_node_for_preemption,
)
from berth.plugins.defaultpreemption.default_preemption import ERR_NO_VICTIMS, aggregate_errors
from berth.plugins.noderesources import Fit
from berth.plugins.registry import REGISTRY

# default_preemption_test.go: the priorities and resource sizes.
NEG, LOW, MID, HIGH, VERY_HIGH = -100, 0, 100, 1000, 10000
SMALL = {"cpu": "100m", "memory": "100"}
MEDIUM = {"cpu": "200m", "memory": "200"}
LARGE = {"cpu": "300m", "memory": "300"}
VERY_LARGE = {"cpu": "500m", "memory": "500"}
ONE_POD = {"pods": "1"}
NODE_RES = {"cpu": "200m", "memory": "400"}


def P(
    name: str,
    node: str = "",
    prio: int = 0,
    req: Mapping[str, str] | None = None,
    *,
    start: int = 0,
    labels: Mapping[str, str] | None = None,
    namespace: str = "default",
    nominated: str = "",
    terminating: bool = False,
    preempted: bool = False,
    never: bool = False,
) -> pb.Pod:
    """A pod as upstream's st.MakePod().Name(name).UID(name)...: ``start``
    is StartTime in microseconds (0: not started); ``terminating`` is a
    deletionTimestamp, ``preempted`` the DisruptionTarget condition with
    reason PreemptionByScheduler (st.MakePod()...Condition(...))."""
    w = make_pod(name, namespace).uid(name).priority(prio)
    if node:
        w.node(node)
    if req:
        w.req(**req)
    if labels:
        w.labels(**labels)
    p = w.obj()
    p.start_unix_micros = start
    p.nominated_node_name = nominated
    p.terminating = terminating
    p.preempted_by_scheduler = preempted
    if never:
        p.preemption_policy = "Never"
    return p


def N(spec: str, res: Mapping[str, str] | None = None, **labels: str) -> pb.Node:
    """A node named by the first part of ``spec``; "name/zone/region" sets
    the hostname, zone and region labels, as upstream's DryRun test does."""
    parts = spec.split("/")
    w = make_node(parts[0]).capacity(**{"pods": "32", **(res or VERY_LARGE)})
    for key, value in zip(("hostname", "zone", "region"), parts, strict=False):
        w.label(key, value)
    w.labels(**labels)
    return w.obj()


# -- test plugins (tf.FakeFilterPlugin, FalseFilter, TrueFilter, MatchFilter, TestPlugin) --


class TestPlugin(PreFilterPlugin, FilterPlugin):
    """default_preemption_test.go, TestPlugin: AddPod/RemovePod fail on nodes
    labelled error=true."""

    __test__ = False
    name: ClassVar[str] = "test-plugin"

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        return None, SUCCESS

    def add_pod(
        self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo
    ) -> Status:
        if node.node.labels.get("error") == "true":
            return Status.error(f"failed to add pod: {pod.name}")
        return SUCCESS

    def remove_pod(
        self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo
    ) -> Status:
        if node.node.labels.get("error") == "true":
            return Status.error(f"failed to remove pod: {pod.name}")
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return SUCCESS


class FakeFilter(FilterPlugin):
    """tf.FakeFilterPlugin: counts its calls; a node in ``codes`` gets that
    code."""

    name: ClassVar[str] = "FakeFilter"

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        super().__init__(args, handle)
        self.calls = 0
        self.codes: dict[str, Code] = {}

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        self.calls += 1
        code = self.codes.get(node.name, Code.SUCCESS)
        if code is Code.SUCCESS:
            return SUCCESS
        return Status(code, (f"injecting failure for pod {pod.name}",))


class FalseFilter(FilterPlugin):
    name: ClassVar[str] = "FalseFilter"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.unschedulable("injecting failure for pod " + pod.name)


class TrueFilter(FilterPlugin):
    name: ClassVar[str] = "TrueFilter"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return SUCCESS


class MatchFilter(FilterPlugin):
    """Passes only the node named like the pod."""

    name: ClassVar[str] = "MatchFilter"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if node.name == pod.name:
            return SUCCESS
        return Status.unschedulable("node name does not match the pod's")


class BatchOnlyFit(FilterPlugin):
    """A plugin with only the batch form: NodeResourcesFit's filter_nodes
    (reads snapshot columns), to check a clone is filtered through a scratch
    snapshot."""

    name: ClassVar[str] = "BatchOnlyFit"

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        return Fit().filter_nodes(state, pod, nodes)


TEST_REGISTRY: dict[str, type[Plugin]] = {
    **REGISTRY,
    "test-plugin": TestPlugin,
    "FakeFilter": FakeFilter,
    "FalseFilter": FalseFilter,
    "TrueFilter": TrueFilter,
    "MatchFilter": MatchFilter,
    "BatchOnlyFit": BatchOnlyFit,
}


@dataclass
class Env:
    fw: Framework
    snap: Snapshot
    pl: DefaultPreemption
    fake: FakeFilter | None = None
    offsets: list[int] = field(default_factory=list)

    def pre_filter(self, pod: PodInfo) -> CycleState:
        state = CycleState()
        _, st = self.fw.run_pre_filter(state, pod, self.snap.all_nodes())
        assert st.is_success, st
        return state


def env(
    nodes: Sequence[pb.Node],
    pods: Sequence[pb.Pod] = (),
    *,
    pre_filter: Sequence[str] = ("NodeResourcesFit",),
    filter: Sequence[str] = ("NodeResourcesFit",),
    fake: bool = False,
    args: DefaultPreemptionArgs | None = None,
    pdbs: Sequence[pb.ClusterObject] = (),
    offsets: Sequence[int] = (0,),
) -> Env:
    """A framework like upstream's tf.NewFramework with the plugins named,
    DefaultPreemption at PostFilter, the handle bound to a snapshot of
    ``nodes`` and ``pods``. The dry run starts at ``offsets`` in turn
    (upstream's getOffsetRand)."""

    def refs(*names: str) -> tuple[PluginRef, ...]:
        return tuple(PluginRef(n) for n in names)

    filters = ("FakeFilter", *filter) if fake else tuple(filter)
    profile = ProfileConfig(
        "test",
        {
            "queueSort": refs("PrioritySort"),
            "preFilter": refs(*pre_filter),
            "filter": refs(*filters),
            "postFilter": refs("DefaultPreemption"),
            "bind": refs("DefaultBinder"),
        },
        {"DefaultPreemption": args} if args is not None else {},
    )
    fw = Framework(profile, TEST_REGISTRY)
    snap = snapshot_of(nodes, pods, pdbs)
    fw.handle.bind_snapshot(snap)
    pl = fw.instances["DefaultPreemption"]
    assert isinstance(pl, DefaultPreemption)
    e = Env(fw, snap, pl, offsets=list(offsets))

    def next_offset(n: int) -> int:
        return e.offsets.pop(0) % n if e.offsets else 0

    pl.offset_rand = next_offset
    if fake:
        f = fw.instances["FakeFilter"]
        assert isinstance(f, FakeFilter)
        e.fake = f
    return e


def pdb(
    name: str,
    labels: Mapping[str, str],
    allowed: int | None = None,
    disrupted: Sequence[str] = (),
    namespace: str = "default",
) -> pb.ClusterObject:
    """A policy/v1 PodDisruptionBudget object as the caller ships it."""
    status: dict[str, Any] = {}
    if allowed is not None:
        status["disruptionsAllowed"] = allowed
    if disrupted:
        status["disruptedPods"] = {n: "2024-01-01T00:00:00Z" for n in disrupted}
    return make_object(
        PDB_KIND,
        name,
        namespace,
        spec={"selector": {"matchLabels": dict(labels)}},
        status=status,
    )


def decoded(*objs: pb.ClusterObject) -> list[PodDisruptionBudget]:
    return [pdb_from_object(ClusterObject.from_proto(o)) for o in objs]


U = Status(Code.UNSCHEDULABLE)
UU = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE)


# -- TestPostFilter ---------------------------------------------------------------


@dataclass(frozen=True)
class PostFilterCase:
    name: str
    pod: pb.Pod
    pods: tuple[pb.Pod, ...]
    nodes: tuple[pb.Node, ...]
    statuses: Mapping[str, Status]
    want_node: str | None  # None: no result
    want_status: Status
    want_victims: tuple[str, ...] = ()
    pdbs: tuple[pb.ClusterObject, ...] = ()


POST_FILTER_CASES = [
    PostFilterCase(
        "pod with higher priority can be made schedulable",
        P("p", prio=HIGH),
        (P("p1", "node1"),),
        (N("node1", ONE_POD),),
        {"node1": U},
        "node1",
        SUCCESS,
        ("p1",),
    ),
    PostFilterCase(
        "pod with tied priority is still unschedulable",
        P("p"),
        (P("p1", "node1"),),
        (N("node1", ONE_POD),),
        {"node1": U},
        "",
        Status.unschedulable(
            "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        ),
    ),
    PostFilterCase(
        "preemption should respect filteredNodesStatuses",
        P("p", prio=HIGH),
        (P("p1", "node1"),),
        (N("node1", ONE_POD),),
        {"node1": UU},
        "",
        Status.unschedulable(
            "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        ),
    ),
    PostFilterCase(
        "preemption should respect absent NodeToStatusReader entry meaning "
        "UnschedulableAndUnresolvable",
        P("p", prio=HIGH),
        (P("p1", "node1"),),
        (N("node1", ONE_POD),),
        {},
        "",
        Status.unschedulable(
            "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        ),
    ),
    PostFilterCase(
        "pod can be made schedulable on one node",
        P("p", prio=MID),
        (P("p1", "node1", HIGH), P("p2", "node2", LOW)),
        (N("node1", ONE_POD), N("node2", ONE_POD)),
        {"node1": U, "node2": U},
        "node2",
        SUCCESS,
        ("p2",),
    ),
    PostFilterCase(
        "pod can be made schedulable on minHighestPriority node",
        P("p", prio=VERY_HIGH),
        (
            P("p1", "node1", HIGH, labels={"pdb": "non-violating"}),
            P("p2", "node1", LOW, labels={"pdb": "violating"}),
            P("p3", "node2", MID, labels={"pdb": "violating"}),
        ),
        (N("node1", ONE_POD), N("node2", ONE_POD)),
        {"node1": U, "node2": U},
        "node2",
        SUCCESS,
        ("p3",),
        (
            pdb("violating-pdb", {"pdb": "violating"}),
            pdb("non-violating-pdb", {"pdb": "non-violating"}, allowed=2**31 - 1),
        ),
    ),
    PostFilterCase(
        "no candidate nodes found, no enough resource after removing low priority pods",
        P("p", prio=HIGH, req=LARGE),
        (P("p1", "node1"), P("p2", "node2")),
        (N("node1", NODE_RES), N("node2", NODE_RES)),
        {"node1": U, "node2": U},
        "",
        Status.unschedulable("preemption: 0/2 nodes are available: 2 Insufficient cpu."),
    ),
    PostFilterCase(
        "no candidate nodes found with mixed reasons, no lower priority pod and no enough CPU "
        "resource",
        P("p", prio=HIGH, req=LARGE),
        (P("p1", "node1", HIGH), P("p2", "node2"), P("p3", "node3", HIGH)),
        (N("node1", ONE_POD), N("node2", NODE_RES), N("node3", ONE_POD)),
        {"node1": U, "node2": U, "node3": U},
        "",
        Status.unschedulable(
            "preemption: 0/3 nodes are available: 1 Insufficient cpu, "
            "2 No preemption victims found for incoming pod."
        ),
    ),
    PostFilterCase(
        "no candidate nodes found with mixed reason, 2 UnschedulableAndUnresolvable nodes and "
        "2 nodes don't have enough CPU resource",
        P("p", prio=HIGH, req=LARGE),
        (P("p1", "node1"), P("p2", "node2")),
        tuple(N(f"node{i}", NODE_RES) for i in range(1, 5)),
        {"node1": U, "node2": U, "node4": UU},
        "",
        Status.unschedulable(
            "preemption: 0/4 nodes are available: 2 Insufficient cpu, "
            "2 Preemption is not helpful for scheduling."
        ),
    ),
    PostFilterCase(
        "only one node but failed with TestPlugin",
        P("p", prio=HIGH, req=LARGE),
        (P("p1", "node1"),),
        (N("node1", LARGE, error="true"),),
        {"node1": U},
        None,
        Status.error(
            'preemption: running RemovePod on PreFilter plugin "test-plugin": '
            "failed to remove pod: p"
        ),
    ),
    PostFilterCase(
        "one failed with TestPlugin and the other pass",
        P("p", prio=HIGH, req=LARGE),
        (P("p1", "node1"), P("p2", "node2", req=MEDIUM)),
        (N("node1", LARGE, error="true"), N("node2", LARGE)),
        {"node1": U, "node2": U},
        "node2",
        SUCCESS,
        ("p2",),
    ),
]


@pytest.mark.parametrize("case", POST_FILTER_CASES, ids=lambda c: c.name)
def test_post_filter(case: PostFilterCase) -> None:
    """TestPostFilter: NodeResourcesFit at PreFilter and Filter, test-plugin
    at PreFilter; the Filter statuses are given."""
    e = env(
        case.nodes,
        case.pods,
        pre_filter=("NodeResourcesFit", "test-plugin"),
        pdbs=case.pdbs,
    )
    pod = PodInfo(case.pod)
    state = e.pre_filter(pod)
    result, st = e.pl.post_filter(state, pod, case.statuses)
    assert st == case.want_status
    if case.want_node is None:
        assert result is None
    else:
        assert result is not None
        assert result.nominated_node_name == case.want_node
        assert tuple(v.name for v in result.victims) == case.want_victims


# -- TestDryRunPreemption ----------------------------------------------------------


@dataclass(frozen=True)
class DryRunCase:
    name: str
    nodes: tuple[str, ...]
    pods: tuple[pb.Pod, ...]
    init: tuple[pb.Pod, ...]
    plugins: tuple[str, ...]
    # Per preemptor: (node, victims sorted by name, PDB violations), by node.
    expected: tuple[tuple[tuple[str, tuple[str, ...], int], ...], ...]
    filter_calls: tuple[int, ...]
    fake_code: Code = Code.SUCCESS
    pdbs: tuple[pb.ClusterObject, ...] = ()
    args: DefaultPreemptionArgs | None = None
    offsets: tuple[int, ...] = (0,)
    pre_filter: tuple[str, ...] = ()


FIT = ("NodeResourcesFit",)
TWO = ("node1", "node2")
FIVE = ("node1", "node2", "node3", "node4", "node5")
ARGS_40_1 = DefaultPreemptionArgs(min_candidate_nodes_percentage=40, min_candidate_nodes_absolute=1)
ARGS_40_2 = DefaultPreemptionArgs(min_candidate_nodes_percentage=40, min_candidate_nodes_absolute=2)
FOO = {"foo": ""}


def _five(prio: Sequence[int], labels: Sequence[bool] = (False,) * 5) -> tuple[pb.Pod, ...]:
    return tuple(
        P(f"p{i}", f"node{i}", pr, LARGE, labels={"app": "foo"} if lab else None)
        for i, (pr, lab) in enumerate(zip(prio, labels, strict=True), start=1)
    )


DRY_RUN_CASES = [
    DryRunCase(
        "a pod that does not fit on any node",
        TWO,
        (P("p", prio=HIGH),),
        (P("p1", "node1", MID), P("p2", "node2", MID)),
        ("FalseFilter",),
        ((),),
        (2,),
    ),
    DryRunCase(
        "a pod that fits with no preemption",
        TWO,
        (P("p", prio=HIGH),),
        (P("p1", "node1", MID), P("p2", "node2", MID)),
        ("TrueFilter",),
        ((),),
        (2,),
        fake_code=Code.UNSCHEDULABLE,
    ),
    DryRunCase(
        "a pod that fits on one node with no preemption",
        TWO,
        (P("node1", prio=HIGH),),
        (P("p1", "node1", MID), P("p2", "node2", MID)),
        ("MatchFilter",),
        ((),),
        (2,),
        fake_code=Code.UNSCHEDULABLE,
    ),
    DryRunCase(
        "a pod that fits on both nodes when lower priority pods are preempted",
        TWO,
        (P("p", prio=HIGH, req=LARGE),),
        (P("p1", "node1", MID, LARGE), P("p2", "node2", MID, LARGE)),
        FIT,
        ((("node1", ("p1",), 0), ("node2", ("p2",), 0)),),
        (4,),
    ),
    DryRunCase(
        "a pod that would fit on the nodes, but other pods running are higher priority, "
        "no preemption would happen",
        TWO,
        (P("p", prio=LOW, req=LARGE),),
        (P("p1", "node1", MID, LARGE), P("p2", "node2", MID, LARGE)),
        FIT,
        ((),),
        (0,),
    ),
    DryRunCase(
        "medium priority pod is preempted, but lower priority one stays as it is small",
        TWO,
        (P("p", prio=HIGH, req=LARGE),),
        (
            P("p1.1", "node1", LOW, SMALL),
            P("p1.2", "node1", MID, LARGE),
            P("p2", "node2", MID, LARGE),
        ),
        FIT,
        ((("node1", ("p1.2",), 0), ("node2", ("p2",), 0)),),
        (5,),
    ),
    DryRunCase(
        "mixed priority pods are preempted",
        TWO,
        (P("p", prio=HIGH, req=LARGE),),
        (
            P("p1.1", "node1", MID, SMALL),
            P("p1.2", "node1", LOW, SMALL),
            P("p1.3", "node1", MID, MEDIUM),
            P("p1.4", "node1", HIGH, SMALL),
            P("p2", "node2", HIGH, LARGE),
        ),
        FIT,
        ((("node1", ("p1.2", "p1.3"), 0),),),
        (4,),
    ),
    DryRunCase(
        "mixed priority pods are preempted, pick later StartTime one when priorities are equal",
        TWO,
        (P("p", prio=HIGH, req=LARGE),),
        (
            P("p1.1", "node1", LOW, SMALL, start=5),
            P("p1.2", "node1", LOW, SMALL, start=4),
            P("p1.3", "node1", MID, MEDIUM, start=3),
            P("p1.4", "node1", HIGH, SMALL, start=2),
            P("p2", "node2", HIGH, LARGE, start=1),
        ),
        FIT,
        ((("node1", ("p1.1", "p1.3"), 0),),),
        (4,),
    ),
    DryRunCase(
        "pod with anti-affinity is preempted",
        TWO,
        (P("p", prio=HIGH, req=SMALL, labels=FOO),),
        (
            P("p1.1", "node1", LOW, SMALL, labels=FOO),  # anti-affinity: set below
            P("p1.2", "node1", MID, SMALL),
            P("p1.3", "node1", HIGH, SMALL),
            P("p2", "node2", HIGH, SMALL),
        ),
        ("NodeResourcesFit", "InterPodAffinity"),
        ((("node1", ("p1.1",), 0),),),
        (3,),  # no preemption on node2: no filter call counted
        pre_filter=("NodeResourcesFit", "InterPodAffinity"),
    ),
    DryRunCase(
        "preemption to resolve pod topology spread filter failure",
        ("node-a/zone1", "node-b/zone1", "node-x/zone2"),
        (
            P("p", prio=HIGH, labels=FOO),
            # The constraints are set below (spread_constraints).
        ),
        (
            P("pod-a1", "node-a", MID, labels=FOO),
            P("pod-a2", "node-a", LOW, labels=FOO),
            P("pod-b1", "node-b", LOW, labels=FOO),
            P("pod-x1", "node-x", HIGH, labels=FOO),
            P("pod-x2", "node-x", HIGH, labels=FOO),
        ),
        ("PodTopologySpread",),
        ((("node-a", ("pod-a2",), 0), ("node-b", ("pod-b1",), 0)),),
        (5,),  # node-a (3), node-b (2), node-x (0)
        pre_filter=("PodTopologySpread",),
    ),
    DryRunCase(
        "get Unschedulable in the preemption phase when the filter plugins filtering the nodes",
        TWO,
        (P("p", prio=HIGH, req=LARGE),),
        (P("p1", "node1", MID, LARGE), P("p2", "node2", MID, LARGE)),
        FIT,
        ((),),
        (2,),
        fake_code=Code.UNSCHEDULABLE,
    ),
    DryRunCase(
        "preemption with violation of same pdb",
        ("node1",),
        (P("p", prio=HIGH, req=VERY_LARGE),),
        (
            P("p1.1", "node1", MID, MEDIUM, labels={"app": "foo"}),
            P("p1.2", "node1", MID, MEDIUM, labels={"app": "foo"}),
        ),
        FIT,
        ((("node1", ("p1.1", "p1.2"), 1),),),
        (3,),
        pdbs=(pdb("pdb", {"app": "foo"}, allowed=1),),
    ),
    DryRunCase(
        "preemption with violation of the pdb with pod whose eviction was processed, the "
        "victim doesn't belong to DisruptedPods",
        ("node1",),
        (P("p", prio=HIGH, req=VERY_LARGE),),
        (
            P("p1.1", "node1", MID, MEDIUM, labels={"app": "foo"}),
            P("p1.2", "node1", MID, MEDIUM, labels={"app": "foo"}),
        ),
        FIT,
        ((("node1", ("p1.1", "p1.2"), 1),),),
        (3,),
        pdbs=(pdb("pdb", {"app": "foo"}, allowed=1, disrupted=("p2",)),),
    ),
    DryRunCase(
        "preemption with violation of the pdb with pod whose eviction was processed, the "
        "victim belongs to DisruptedPods",
        ("node1",),
        (P("p", prio=HIGH, req=VERY_LARGE),),
        (
            P("p1.1", "node1", MID, MEDIUM, labels={"app": "foo"}),
            P("p1.2", "node1", MID, MEDIUM, labels={"app": "foo"}),
        ),
        FIT,
        ((("node1", ("p1.1", "p1.2"), 0),),),
        (3,),
        pdbs=(pdb("pdb", {"app": "foo"}, allowed=1, disrupted=("p1.2",)),),
    ),
    DryRunCase(
        "preemption with violation of the pdb with pod whose eviction was processed, the "
        "victim which belongs to DisruptedPods is treated as 'nonViolating'",
        ("node1",),
        (P("p", prio=HIGH, req=VERY_LARGE),),
        (
            P("p1.1", "node1", MID, MEDIUM, labels={"app": "foo"}),
            P("p1.2", "node1", MID, MEDIUM, labels={"app": "foo"}),
            P("p1.3", "node1", MID, MEDIUM, labels={"app": "foo"}),
        ),
        FIT,
        ((("node1", ("p1.1", "p1.2", "p1.3"), 1),),),
        (4,),
        pdbs=(pdb("pdb", {"app": "foo"}, allowed=1, disrupted=("p1.3",)),),
    ),
    DryRunCase(
        "all nodes are possible candidates, but DefaultPreemptionArgs limits to 2",
        FIVE,
        (P("p", prio=HIGH, req=LARGE),),
        _five([MID] * 5),
        FIT,
        # offset 4: node5 (yes), node1 (yes)
        ((("node1", ("p1",), 0), ("node5", ("p5",), 0)),),
        (4,),
        args=ARGS_40_1,
        offsets=(4,),
    ),
    DryRunCase(
        "some nodes are not possible candidates, DefaultPreemptionArgs limits to 2",
        FIVE,
        (P("p", prio=HIGH, req=LARGE),),
        _five([MID, VERY_HIGH, MID, MID, VERY_HIGH]),
        FIT,
        # offset 4: node5 (no), node1 (yes), node2 (no), node3 (yes)
        ((("node1", ("p1",), 0), ("node3", ("p3",), 0)),),
        (4,),
        args=ARGS_40_1,
        offsets=(4,),
    ),
    DryRunCase(
        "preemption offset across multiple scheduling cycles and wrap around",
        FIVE,
        tuple(P(f"tp{i}", prio=HIGH, req=LARGE) for i in (1, 2, 3)),
        _five([MID] * 5),
        FIT,
        (
            (("node1", ("p1",), 0), ("node5", ("p5",), 0)),
            (("node2", ("p2",), 0), ("node3", ("p3",), 0)),
            (("node4", ("p4",), 0), ("node5", ("p5",), 0)),
        ),
        (4, 4, 4),
        args=ARGS_40_1,
        # upstream's rand.New(rand.NewSource(4)).Int31n(5): 4, 1, 3.
        offsets=(4, 1, 3),
    ),
    DryRunCase(
        "preemption looks past numCandidates until a non-PDB violating node is found",
        FIVE,
        (P("p", prio=HIGH, req=LARGE),),
        _five([MID] * 5, [True, True, False, False, True]),
        FIT,
        # offset 4: node5 (yes, pdb), node1 (yes, pdb), node2 (no, pdb), node3 (yes)
        ((("node1", ("p1",), 1), ("node3", ("p3",), 0), ("node5", ("p5",), 1)),),
        (8,),
        pdbs=(pdb("pdb", {"app": "foo"}, allowed=0),),
        args=ARGS_40_2,
        offsets=(4,),
    ),
]


def _spread(pod: pb.Pod) -> None:
    """The preemptor of the topology spread case: maxSkew 1 on zone and on
    hostname, both DoNotSchedule, selector Exists(foo)."""
    for key in ("zone", "hostname"):
        c = pod.topology_spread_constraints.add(
            max_skew=1, topology_key=key, when_unsatisfiable="DoNotSchedule"
        )
        c.label_selector.match_expressions.add(key="foo", operator="Exists")


def _anti_affinity(pod: pb.Pod) -> None:
    """st.PodAntiAffinityExists("foo", "hostname", required)."""
    term = pod.affinity.pod_anti_affinity.required.add(topology_key="hostname")
    term.label_selector.match_expressions.add(key="foo", operator="Exists")


@pytest.mark.parametrize("case", DRY_RUN_CASES, ids=lambda c: c.name)
def test_dry_run_preemption(case: DryRunCase) -> None:
    """TestDryRunPreemption: FakeFilter first (counting calls, returning
    fake_code), then the case's plugins; every node is a potential node, in
    name order; candidates compared sorted by node, victims by name."""
    nodes = tuple(N(n) for n in case.nodes)
    init = case.init
    if "InterPodAffinity" in case.plugins:
        init = tuple(pb.Pod() for _ in case.init)
        for copy, original in zip(init, case.init, strict=True):
            copy.CopyFrom(original)
        _anti_affinity(init[0])
    e = env(
        nodes,
        init,
        pre_filter=case.pre_filter or FIT,
        filter=case.plugins,
        fake=True,
        args=case.args,
        offsets=case.offsets,
    )
    assert e.fake is not None
    e.fake.codes = {n.name: case.fake_code for n in nodes}
    infos = [e.snap.nodes[n] for n in sorted(e.snap.nodes)]
    pdbs = decoded(*case.pdbs)
    for cycle, proto in enumerate(case.pods):
        if case.plugins == ("PodTopologySpread",):
            _spread(proto)
        pod = PodInfo(proto)
        state = e.pre_filter(pod)
        before = e.fake.calls
        offset, num = e.pl.get_offset_and_num_candidates(len(infos))
        got, _, _ = e.pl.dry_run_preemption(state, pod, infos, pdbs, offset, num)
        seen = sorted(
            (c.name, tuple(sorted(v.name for v in c.victims)), c.num_pdb_violations) for c in got
        )
        assert seen == list(case.expected[cycle]), f"cycle {cycle}"
        assert e.fake.calls - before == case.filter_calls[cycle], f"cycle {cycle}"


def test_dry_run_leaves_the_snapshot_and_the_state_as_they_were() -> None:
    """DryRunPreemption works on copies (NodeInfo.Snapshot, state.Clone)."""
    e = env((N("node1"),), (P("p1", "node1", MID, LARGE), P("p2", "node1", MID, SMALL)))
    pod = PodInfo(P("p", prio=HIGH, req=LARGE))
    state = e.pre_filter(pod)
    ni = e.snap.nodes["node1"]
    requested = ni.requested.milli_cpu
    got, _, _ = e.pl.dry_run_preemption(state, pod, [ni], [], 0, 1)
    assert [v.name for c in got for v in c.victims] == ["p1"]
    assert set(ni.pods) == {"p1", "p2"}
    assert ni.requested.milli_cpu == requested == 400


class _PreemptsEqualPriority(DefaultPreemption):
    """A preemption rule of its own (upstream's PodEligibleToPreemptOthers
    hook, IsEligiblePod): equal priority may be preempted too."""

    def is_preemption_allowed(self, node: NodeInfo, victim: PodInfo, preemptor: PodInfo) -> bool:
        return victim.priority <= preemptor.priority


class _SelectsEveryPod(DefaultPreemption):
    """Victims selected its own way: every pod on the node, whatever its priority."""

    def select_victims_on_node(
        self, state: CycleState, pod: PodInfo, node: NodeInfo, pdbs: Sequence[PodDisruptionBudget]
    ) -> tuple[list[PodInfo], int, Status]:
        return list(node.pods.values()), 0, SUCCESS


def test_dry_run_finds_no_victims_by_the_plugins_own_rule() -> None:
    """A node whose pods the rule protects is ErrNoVictims without a dry run
    on it; a plugin with its own is_preemption_allowed is asked for each pod."""
    e = env((N("node1"),), (P("p1", "node1", HIGH, LARGE),))
    pod = PodInfo(P("p", prio=HIGH, req=LARGE))
    state = e.pre_filter(pod)
    ni = e.snap.nodes["node1"]
    got, statuses, err = e.pl.dry_run_preemption(state, pod, [ni], [], 0, 1)
    assert (got, statuses, err) == ([], {"node1": Status.unresolvable(ERR_NO_VICTIMS)}, "")
    e.pl.__class__ = _PreemptsEqualPriority
    got, statuses, err = e.pl.dry_run_preemption(state, pod, [ni], [], 0, 1)
    assert [(c.name, [v.name for v in c.victims]) for c in got] == [("node1", ["p1"])]
    assert (statuses, err) == ({}, "")
    # A plugin that selects victims its own way is asked on every node.
    e.pl.__class__ = _SelectsEveryPod
    got, statuses, err = e.pl.dry_run_preemption(state, pod, [ni], [], 0, 1)
    assert [(c.name, [v.name for v in c.victims]) for c in got] == [("node1", ["p1"])]


def test_dry_run_sees_the_node_lose_and_gain_its_lower_priority_pods() -> None:
    """The "no pod here may be preempted" test follows the node's pods: a node
    whose only lower-priority pod leaves is ErrNoVictims, and one that gains a
    lower-priority pod has it as the victim."""
    e = env((N("node1"),), (P("p1", "node1", HIGH, SMALL), P("p2", "node1", MID, LARGE)))
    pod = PodInfo(P("p", prio=HIGH, req=LARGE))
    state = e.pre_filter(pod)
    ni = e.snap.nodes["node1"]
    got, _, _ = e.pl.dry_run_preemption(state, pod, [ni], [], 0, 1)
    assert [v.name for c in got for v in c.victims] == ["p2"]
    e.snap.apply(pb.ClusterDelta(delete_pods=["p2"]))
    got, statuses, _ = e.pl.dry_run_preemption(state, pod, [ni], [], 0, 1)
    assert (got, statuses) == ([], {"node1": Status.unresolvable(ERR_NO_VICTIMS)})
    e.snap.apply(pb.ClusterDelta(upsert_pods=[P("p3", "node1", LOW, LARGE)]))
    got, _, _ = e.pl.dry_run_preemption(state, pod, [ni], [], 0, 1)
    assert [v.name for c in got for v in c.victims] == ["p3"]


def test_dry_run_filters_a_clone_with_a_batch_only_plugin_through_a_scratch_snapshot() -> None:
    """A Filter plugin with only filter_nodes still sees the clone's pods."""
    e = env(
        (N("node1"), N("node2")),
        (P("p1", "node1", MID, LARGE), P("p2", "node2", HIGH, LARGE)),
        filter=("BatchOnlyFit",),
    )
    pod = PodInfo(P("p", prio=HIGH, req=LARGE))
    state = e.pre_filter(pod)
    infos = [e.snap.nodes["node1"], e.snap.nodes["node2"]]
    got, statuses, err = e.pl.dry_run_preemption(state, pod, infos, [], 0, 2)
    assert [(c.name, [v.name for v in c.victims]) for c in got] == [("node1", ["p1"])]
    assert statuses["node2"].code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert err == ""
    assert infos[0].owner is e.snap and infos[0].index >= 0


# -- TestSelectBestCandidate -------------------------------------------------------


@dataclass(frozen=True)
class BestCase:
    name: str
    nodes: tuple[str, ...]
    pod: pb.Pod
    pods: tuple[pb.Pod, ...]
    expected: tuple[str, ...]  # any of them


def _pods(spec: str, start: int = 0) -> tuple[pb.Pod, ...]:
    """ "name@node:prio:size ..." with size s/m/l/vl."""
    sizes = {"s": SMALL, "m": MEDIUM, "l": LARGE, "vl": VERY_LARGE}
    prios = {"neg": NEG, "low": LOW, "mid": MID, "high": HIGH}
    out = []
    for item in spec.split():
        head, prio, size, *rest = item.split(":")
        name, node = head.split("@")
        t = int(rest[0]) if rest else start
        out.append(P(name, node, prios[prio], sizes[size], start=t))
    return tuple(out)


THREE = ("node1", "node2", "node3")
BEST_CASES = [
    BestCase(
        "a pod that fits on both nodes when lower priority pods are preempted",
        TWO,
        P("p", prio=HIGH, req=LARGE),
        _pods("p1@node1:mid:l p2@node2:mid:l"),
        ("node1", "node2"),
    ),
    BestCase(
        "node with min highest priority pod is picked",
        THREE,
        P("p", prio=HIGH, req=VERY_LARGE),
        _pods(
            "p1.1@node1:mid:m p1.2@node1:mid:l p2.1@node2:mid:m p2.2@node2:low:m "
            "p3.1@node3:low:m p3.2@node3:low:m"
        ),
        ("node3",),
    ),
    BestCase(
        "when highest priorities are the same, minimum sum of priorities is picked",
        THREE,
        P("p", prio=HIGH, req=VERY_LARGE),
        _pods(
            "p1.1@node1:mid:m p1.2@node1:mid:l p2.1@node2:mid:l p2.2@node2:low:m "
            "p3.1@node3:mid:m p3.2@node3:mid:m"
        ),
        ("node2",),
    ),
    BestCase(
        "when highest priority and sum are the same, minimum number of pods is picked",
        THREE,
        P("p", prio=HIGH, req=VERY_LARGE),
        _pods(
            "p1.1@node1:mid:s p1.2@node1:neg:s p1.3@node1:mid:s p1.4@node1:neg:s "
            "p2.1@node2:mid:l p2.2@node2:neg:m p3.1@node3:mid:m p3.2@node3:neg:s "
            "p3.3@node3:low:s"
        ),
        ("node2",),
    ),
    BestCase(
        "sum of adjusted priorities is considered",
        THREE,
        P("p", prio=HIGH, req=VERY_LARGE),
        _pods(
            "p1.1@node1:mid:s p1.2@node1:neg:s p1.3@node1:neg:s p2.1@node2:mid:l "
            "p2.2@node2:neg:m p3.1@node3:mid:m p3.2@node3:neg:s p3.3@node3:low:s"
        ),
        ("node2",),
    ),
    BestCase(
        "non-overlapping lowest high priority, sum priorities, and number of pods",
        ("node1", "node2", "node3", "node4"),
        P("p", prio=VERY_HIGH, req=VERY_LARGE),
        _pods(
            "p1.1@node1:mid:s p1.2@node1:low:s p1.3@node1:low:s p2.1@node2:high:l "
            "p3.1@node3:mid:m p3.2@node3:low:s p3.3@node3:low:s p3.4@node3:low:m "
            "p4.1@node4:mid:m p4.2@node4:mid:s p4.3@node4:mid:s p4.4@node4:neg:s"
        ),
        ("node1",),
    ),
    BestCase(
        "same priority, same number of victims, different start time for each node's pod",
        THREE,
        P("p", prio=HIGH, req=VERY_LARGE),
        _pods(
            "p1.1@node1:mid:m:2 p1.2@node1:mid:m:2 p2.1@node2:mid:m:3 p2.2@node2:mid:m:3 "
            "p3.1@node3:mid:m:1 p3.2@node3:mid:m:1"
        ),
        ("node2",),
    ),
    BestCase(
        "same priority, same number of victims, different start time for all pods",
        THREE,
        P("p", prio=HIGH, req=VERY_LARGE),
        _pods(
            "p1.1@node1:mid:m:4 p1.2@node1:mid:m:2 p2.1@node2:mid:m:5 p2.2@node2:mid:m:1 "
            "p3.1@node3:mid:m:3 p3.2@node3:mid:m:6"
        ),
        ("node3",),
    ),
    BestCase(
        "different priority, same number of victims, different start time for all pods",
        THREE,
        P("p", prio=HIGH, req=VERY_LARGE),
        _pods(
            "p1.1@node1:low:m:4 p1.2@node1:mid:m:2 p2.1@node2:mid:m:6 p2.2@node2:low:m:1 "
            "p3.1@node3:low:m:3 p3.2@node3:mid:m:5"
        ),
        ("node2",),
    ),
]


@pytest.mark.parametrize("case", BEST_CASES, ids=lambda c: c.name)
def test_select_best_candidate(case: BestCase) -> None:
    """TestSelectBestCandidate: DryRunPreemption over every node, then
    SelectCandidate."""
    e = env(tuple(N(n) for n in case.nodes), case.pods)
    pod = PodInfo(case.pod)
    state = e.pre_filter(pod)
    infos = [e.snap.nodes[n] for n in case.nodes]
    offset, num = e.pl.get_offset_and_num_candidates(len(infos))
    candidates, _, _ = e.pl.dry_run_preemption(state, pod, infos, [], offset, num)
    best = e.pl.select_candidate(candidates)
    assert best is not None and best.name in case.expected


def test_pick_one_node_breaks_the_last_tie_by_candidate_order() -> None:
    """pickOneNodeForPreemption: all criteria tied, the first node."""
    v = PodInfo(P("v", "x", MID, start=7))
    w = PodInfo(P("w", "y", MID, start=7))
    assert pick_one_node_for_preemption([Candidate("b", (v,)), Candidate("a", (w,))]) == "b"
    assert pick_one_node_for_preemption([]) == ""
    # Fewest PDB violations comes first of all.
    assert pick_one_node_for_preemption([Candidate("b", (v,), 1), Candidate("a", (w,), 0)]) == "a"


def test_an_unknown_start_time_counts_as_now() -> None:
    """util.GetPodStartTime: a pod without a start time started now, so a
    node whose highest-priority victim has one recorded loses the
    latest-start criterion to it."""
    known = PodInfo(P("k", "x", MID, start=5))
    unknown = PodInfo(P("u", "y", MID))
    assert pick_one_node_for_preemption([Candidate("x", (known,)), Candidate("y", (unknown,))]) == (
        "y"
    )


# -- TestPodEligibleToPreemptOthers -------------------------------------------------


@pytest.mark.parametrize(
    ("name", "pod", "pods", "nodes", "nominated_status", "expected"),
    [
        (
            "Pod with nominated node",
            P("p_with_nominated_node", prio=HIGH, nominated="node1"),
            (P("p1", "node1", LOW, terminating=True),),
            ("node1",),
            Status.unresolvable("node(s) had untolerated taint(s)"),
            True,
        ),
        (
            "Pod without nominated node",
            P("p_without_nominated_node", prio=HIGH),
            (),
            (),
            UU,
            True,
        ),
        (
            "Pod with 'PreemptNever' preemption policy",
            P("p_with_preempt_never_policy", prio=HIGH, never=True),
            (),
            (),
            UU,
            False,
        ),
        (
            "preemption victim pod terminating",
            P("p_with_nominated_node", prio=HIGH, nominated="node1"),
            (P("p1", "node1", LOW, terminating=True, preempted=True),),
            ("node1",),
            U,
            False,
        ),
        (
            "non-victim Pods terminating",
            P("p_with_nominated_node", prio=HIGH, nominated="node1"),
            (P("p1", "node1", LOW, terminating=True),),
            ("node1",),
            U,
            True,
        ),
        (
            "a preemption victim's condition without a deletion does not block",
            P("p_with_nominated_node", prio=HIGH, nominated="node1"),
            (P("p1", "node1", LOW, preempted=True),),
            ("node1",),
            U,
            True,
        ),
        (
            "a terminating pod of equal priority does not block",
            P("p_with_nominated_node", prio=HIGH, nominated="node1"),
            (P("p1", "node1", HIGH, terminating=True),),
            ("node1",),
            U,
            True,
        ),
    ],
)
def test_pod_eligible_to_preempt_others(
    name: str,
    pod: pb.Pod,
    pods: tuple[pb.Pod, ...],
    nodes: tuple[str, ...],
    nominated_status: Status,
    expected: bool,
) -> None:
    """TestPodEligibleToPreemptOthers."""
    e = env(tuple(N(n) for n in nodes), pods)
    got, _ = e.pl.pod_eligible_to_preempt_others(PodInfo(pod), nominated_status)
    assert got is expected


def test_not_eligible_reasons_read_like_upstream() -> None:
    e = env((N("node1"),), (P("p1", "node1", LOW, terminating=True, preempted=True),))
    never = PodInfo(P("p", prio=HIGH, never=True))
    assert e.pl.post_filter(CycleState(), never, {"node1": U}) == (
        None,
        Status.unschedulable("preemption: not eligible due to preemptionPolicy=Never."),
    )
    waiting = PodInfo(P("p", prio=HIGH, nominated="node1"))
    assert e.pl.post_filter(CycleState(), waiting, {"node1": U}) == (
        None,
        Status.unschedulable(
            "preemption: not eligible due to a terminating pod on the nominated node."
        ),
    )


# -- TestPreempt --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "pod", "pods", "nodes", "plugins", "want_node", "want_victims"),
    [
        (
            "basic preemption logic",
            P("p", prio=HIGH, req=VERY_LARGE),
            _pods("p1.1@node1:low:s p1.2@node1:low:s p2.1@node2:high:l p3.1@node3:mid:m"),
            THREE,
            FIT,
            "node1",
            ("p1.1", "p1.2"),
        ),
        (
            "preemption for topology spread constraints",
            P("p", prio=HIGH, labels=FOO),
            (
                P("p-a1", "node-a", HIGH, labels=FOO),
                P("p-a2", "node-a", HIGH, labels=FOO),
                P("p-b1", "node-b", LOW, labels=FOO),
                P("p-x1", "node-x", HIGH, labels=FOO),
                P("p-x2", "node-x", HIGH, labels=FOO),
            ),
            ("node-a/zone1", "node-b/zone1", "node-x/zone2"),
            ("PodTopologySpread",),
            "node-b",
            ("p-b1",),
        ),
        (
            "no preempting in pod",
            P("p", prio=HIGH, req=VERY_LARGE, never=True),
            _pods("p1.1@node1:low:s p1.2@node1:low:s p2.1@node2:high:l p3.1@node3:mid:m"),
            THREE,
            FIT,
            None,
            (),
        ),
        (
            "PreemptionPolicy is nil",
            P("p", prio=HIGH, req=VERY_LARGE),
            _pods("p1.1@node1:low:s p1.2@node1:low:s p2.1@node2:high:l p3.1@node3:mid:m"),
            THREE,
            FIT,
            "node1",
            ("p1.1", "p1.2"),
        ),
    ],
)
def test_preempt(
    name: str,
    pod: pb.Pod,
    pods: tuple[pb.Pod, ...],
    nodes: tuple[str, ...],
    plugins: tuple[str, ...],
    want_node: str | None,
    want_victims: tuple[str, ...],
) -> None:
    """TestPreempt: every node Unschedulable; then, with the victims
    terminating and the pod nominated, a second attempt preempts nothing."""
    if plugins == ("PodTopologySpread",):
        _spread(pod)
    e = env(tuple(N(n) for n in nodes), pods, pre_filter=plugins, filter=plugins)
    info = PodInfo(pod)
    state = e.pre_filter(info)
    statuses = {n: U for n in e.snap.nodes}
    result, st = e.pl.preempt(state, info, statuses)
    if want_node is None:
        assert result is None and st.code is Code.UNSCHEDULABLE
        return
    assert st.is_success
    assert result is not None and result.nominated_node_name == want_node
    assert sorted(v.name for v in result.victims) == list(want_victims)
    # The victims are terminating now; the pod is nominated.
    delta = pb.ClusterDelta()
    for v in result.victims:
        gone = delta.upsert_pods.add()
        gone.CopyFrom(v.proto)
        gone.terminating = True
        gone.preempted_by_scheduler = True
    e.snap.apply(delta)
    again = pb.Pod()
    again.CopyFrom(pod)
    again.nominated_node_name = want_node
    # As upstream's second call (no Filter statuses): nothing to preempt.
    result2, st2 = e.pl.preempt(state, PodInfo(again), {})
    assert result2 is not None and not result2.victims
    assert st2.code is Code.UNSCHEDULABLE
    # With the nominated node Unschedulable, the terminating victims make the
    # pod wait instead (PodEligibleToPreemptOthers).
    result3, st3 = e.pl.preempt(state, PodInfo(again), statuses)
    assert result3 is None
    assert st3 == Status.unschedulable(
        "not eligible due to a terminating pod on the nominated node."
    )


def test_preempt_clears_lower_priority_nominations_on_the_chosen_node() -> None:
    """executor.go, getLowerPriorityNominatedPods: pods nominated to the
    chosen node with a lower priority than the preemptor lose their
    nomination; equal or higher ones keep it."""
    e = env(
        (N("node1"),),
        (
            P("victim", "node1", LOW, LARGE),
            P("nominated-low", prio=MID, req=SMALL, nominated="node1"),
            P("nominated-high", prio=VERY_HIGH, req=LARGE, nominated="node1"),
        ),
    )
    # 500m: the victim's 300m and the higher nominee's 300m leave no room
    # for 100m; without the victim there is.
    pod = PodInfo(P("p", prio=HIGH, req=SMALL))
    state = e.pre_filter(pod)
    result, st = e.pl.post_filter(state, pod, {"node1": U})
    assert st.is_success
    assert result is not None
    assert [v.name for v in result.victims] == ["victim"]
    assert result.clear_nomination_pod_uids == ("nominated-low",)


def test_preempt_with_only_terminating_victims_clears_nothing() -> None:
    """prepareCandidateAsync: with every victim already terminating there
    is nothing to delete, and it returns before clearing nominations."""
    e = env(
        (N("node1"),),
        (
            P("victim", "node1", LOW, LARGE, terminating=True),
            P("nominated-low", prio=MID, nominated="node1"),
        ),
    )
    pod = PodInfo(P("p", prio=HIGH, req=LARGE))
    state = e.pre_filter(pod)
    result, st = e.pl.post_filter(state, pod, {"node1": U})
    assert st.is_success and result is not None
    assert [v.name for v in result.victims] == ["victim"]
    assert result.clear_nomination_pod_uids == ()


def _two_candidates() -> tuple[Env, PodInfo, CycleState]:
    """node1 holds a low-priority pod, node2 a mid-priority one; the pod fits
    either once its victim goes, and a low pod nominated to node2 waits."""
    e = env(
        (N("node1"), N("node2")),
        (
            P("low", "node1", LOW, LARGE),
            P("mid", "node2", MID, LARGE),
            P("nominated-low", prio=LOW, req=SMALL, nominated="node2"),
        ),
    )
    pod = PodInfo(P("p", prio=HIGH, req=LARGE))
    return e, pod, e.pre_filter(pod)


def test_preempt_answers_every_candidate_when_the_callers_extenders_select() -> None:
    """preemption.go Preempt runs callExtenders over every candidate before
    SelectCandidate. The extenders are the caller's: asked for candidates
    (CycleState.preemption_candidates), the plugin answers them all in the
    dry run's order, none selected, each with the nominations the caller
    clears if it selects it."""
    e, pod, state = _two_candidates()
    state.preemption_candidates = True
    result, st = e.pl.post_filter(state, pod, {"node1": U, "node2": U})
    assert st == SUCCESS
    assert result is not None
    assert (result.nominated_node_name, result.victims, result.clear_nomination_pod_uids) == (
        "",
        (),
        (),
    )
    assert [(c.name, [v.name for v in c.victims]) for c in result.candidates] == [
        ("node1", ["low"]),
        ("node2", ["mid"]),
    ]
    assert [c.clear_nomination_pod_uids for c in result.candidates] == [(), ("nominated-low",)]
    # Without the flag the plugin selects node1 (the lower-priority victim).
    state.preemption_candidates = False
    selected, st = e.pl.post_filter(state, pod, {"node1": U, "node2": U})
    assert st == SUCCESS and selected is not None
    assert (selected.nominated_node_name, selected.candidates) == ("node1", ())
    assert pick_one_node_for_preemption(result.candidates) == "node1"


def test_a_plugin_that_selects_its_own_way_keeps_selecting() -> None:
    """A DefaultPreemption subclass with its own SelectCandidate answers its
    choice even when asked for candidates: the caller's default criteria
    would not be its own."""

    class LastCandidate(DefaultPreemption):
        def select_candidate(self, candidates: Sequence[Candidate]) -> Candidate | None:
            return candidates[-1] if candidates else None

    e, pod, state = _two_candidates()
    state.preemption_candidates = True
    pl = LastCandidate(handle=e.fw.handle)
    pl.offset_rand = lambda n: 0  # the dry run in node order
    result, st = pl.post_filter(state, pod, {"node1": U, "node2": U})
    assert st == SUCCESS and result is not None
    assert (result.nominated_node_name, result.candidates) == ("node2", ())


def test_nominated_pods_of_higher_priority_stay_in_the_dry_run() -> None:
    """SelectVictimsOnNode filters with RunFilterPluginsWithNominatedPods: a
    higher-priority pod nominated to the node keeps its room, so evicting
    the one lower-priority pod is not enough there."""
    nodes = (N("node1"), N("node2"))
    pods = (
        P("low1", "node1", LOW, LARGE),
        P("low2", "node2", LOW, LARGE),
        P("big-nominee", prio=VERY_HIGH, req=LARGE, nominated="node1"),
    )
    e = env(nodes, pods)
    pod = PodInfo(P("p", prio=HIGH, req=LARGE))
    state = e.pre_filter(pod)
    result, st = e.pl.post_filter(state, pod, {"node1": U, "node2": U})
    assert st.is_success and result is not None
    assert result.nominated_node_name == "node2"
    assert [v.name for v in result.victims] == ["low2"]


def test_no_nodes_is_an_error() -> None:
    e = env((), ())
    pod = PodInfo(P("p", prio=HIGH))
    assert e.pl.post_filter(CycleState(), pod, {}) == (
        None,
        Status.error("preemption: no nodes available"),
    )


# -- PDBs ------------------------------------------------------------------------------


def test_filter_pods_with_pdb_violation_spends_each_budget_in_order() -> None:
    """filterPodsWithPDBViolation: a budget of 1 lets the first matching
    pod go; the second violates it. Other namespaces, pods without labels,
    nil and empty selectors match nothing."""
    pods = [
        PodInfo(P("a", "n", labels={"app": "foo"})),
        PodInfo(P("b", "n", labels={"app": "foo"})),
        PodInfo(P("c", "n", labels={"app": "foo"}, namespace="other")),
        PodInfo(P("d", "n")),
    ]
    budgets = decoded(pdb("foo", {"app": "foo"}, allowed=1))
    violating, ok = filter_pods_with_pdb_violation(pods, budgets)
    assert [p.name for p in violating] == ["b"]
    assert [p.name for p in ok] == ["a", "c", "d"]
    empty = make_object(PDB_KIND, "empty", spec={"selector": {}}, status={})
    nil = make_object(PDB_KIND, "nil", spec={}, status={})
    violating, ok = filter_pods_with_pdb_violation(pods, decoded(empty, nil))
    assert violating == []


def test_pdb_decoding_reads_selector_budget_and_disrupted_pods() -> None:
    obj = make_object(
        PDB_KIND,
        "web",
        "ns1",
        spec={
            "minAvailable": 2,
            "selector": {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}],
            },
        },
        status={"disruptionsAllowed": 3, "disruptedPods": {"web-1": "2024-01-01T00:00:00Z"}},
    )
    (b,) = decoded(obj)
    assert (b.namespace, b.name, b.disruptions_allowed) == ("ns1", "web", 3)
    assert b.disrupted_pods == frozenset({"web-1"})
    assert b.selects("ns1", {"app": "web", "tier": "b"})
    assert not b.selects("ns1", {"app": "web", "tier": "c"})
    assert not b.selects("default", {"app": "web", "tier": "a"})
    bad = make_object(
        PDB_KIND,
        "bad",
        spec={"selector": {"matchExpressions": [{"key": "x", "operator": "Sideways"}]}},
        status={"disruptionsAllowed": "lots"},
    )
    (b,) = decoded(bad)
    assert b.selector is None and b.disruptions_allowed == 0
    assert not b.selects("default", {"x": "1"})


def test_post_filter_reads_pdbs_from_the_snapshot() -> None:
    """The PDBs come from the cluster state (Plugin.reads): both nodes need
    one eviction of equal priority, and the budget covering node1's victim
    allows none, so node2 (no PDB violation) is chosen."""
    e = env(
        (N("node1", ONE_POD), N("node2", ONE_POD)),
        (P("a", "node1", MID, labels={"app": "db"}), P("b", "node2", MID)),
        pdbs=(pdb("db", {"app": "db"}, allowed=0),),
    )
    pod = PodInfo(P("p", prio=HIGH))
    state = e.pre_filter(pod)
    result, st = e.pl.post_filter(state, pod, {"node1": U, "node2": U})
    assert st.is_success and result is not None
    assert result.nominated_node_name == "node2"
    assert DefaultPreemption.reads(None) == (PDB_KIND,)


# -- args ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pct", "absolute", "errors"),
    [
        (10, 100, ""),
        (
            -1,
            100,
            "minCandidateNodesPercentage: Invalid value: -1: not in valid range [0, 100]",
        ),
        (
            900,
            100,
            "minCandidateNodesPercentage: Invalid value: 900: not in valid range [0, 100]",
        ),
        (20, -1, "minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)"),
        (
            0,
            0,
            "minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time as "
            "minCandidateNodesAbsolute; minCandidateNodesAbsolute: Invalid value: 0: cannot be "
            "zero at the same time as minCandidateNodesPercentage",
        ),
        (
            -1,
            -1,
            "minCandidateNodesPercentage: Invalid value: -1: not in valid range [0, 100]; "
            "minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)",
        ),
    ],
)
def test_validate_default_preemption_args(pct: int, absolute: int, errors: str) -> None:
    """TestValidateDefaultPreemptionArgs."""
    args = DefaultPreemptionArgs(pct, absolute)
    if not errors:
        args.validate()
        DefaultPreemption(args)
        return
    with pytest.raises(ValueError) as err:
        DefaultPreemption(args)
    assert str(err.value) == errors


def test_args_default_to_upstream_values_and_refuse_unknown_fields() -> None:
    """SetDefaults_DefaultPreemptionArgs: 10 and 100."""
    args = msgspec.convert({}, DefaultPreemptionArgs)
    assert (args.min_candidate_nodes_percentage, args.min_candidate_nodes_absolute) == (10, 100)
    args = msgspec.convert({"minCandidateNodesPercentage": 40}, DefaultPreemptionArgs)
    assert args.min_candidate_nodes_percentage == 40
    with pytest.raises(msgspec.ValidationError, match="minCandidates"):
        msgspec.convert({"minCandidates": 1}, DefaultPreemptionArgs)


@pytest.mark.parametrize(
    ("pct", "absolute", "nodes", "want"),
    [(10, 100, 5000, 500), (10, 100, 200, 100), (10, 100, 50, 50), (40, 1, 5, 2), (0, 3, 10, 3)],
)
def test_calculate_num_candidates(pct: int, absolute: int, nodes: int, want: int) -> None:
    """calculateNumCandidates: max(nodes * pct / 100, absolute), at most
    the nodes."""
    pl = DefaultPreemption(DefaultPreemptionArgs(pct, absolute))
    assert pl.calculate_num_candidates(nodes) == want


def test_aggregate_errors_reads_like_utilerrors() -> None:
    assert aggregate_errors([]) == ""
    assert aggregate_errors(["a"]) == "a"
    assert aggregate_errors(["a", "a"]) == "a"
    assert aggregate_errors(["a", "b", "a"]) == "[a, b]"
