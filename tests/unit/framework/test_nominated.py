"""Nominated pods: the snapshot's index (upstream's PodNominator),
framework.go RunFilterPluginsWithNominatedPods and the PreFilter extensions
it drives, schedule_one.go evaluateNominatedNode, and a whole cycle with
DefaultPreemption at PostFilter (schedulingCycle's FitError text)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
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
from berth.framework.profile import PluginRef, ProfileConfig
from berth.framework.runtime import Framework
from berth.framework.schedule_one import NominatingMode, schedule_pod
from berth.framework.snapshot import NodeBatch, Snapshot
from berth.framework.status import SUCCESS, Code, Status
from berth.framework.testing import make_node, make_pod, snapshot_of
from berth.plugins.noderesources import Fit
from berth.plugins.registry import REGISTRY


def pod(
    name: str,
    node: str = "",
    prio: int = 0,
    cpu: str = "",
    nominated: str = "",
    **labels: str,
) -> pb.Pod:
    w = make_pod(name).uid(name).priority(prio).labels(**labels)
    if node:
        w.node(node)
    if cpu:
        w.req(cpu=cpu)
    p = w.obj()
    p.nominated_node_name = nominated
    return p


def friendly(name: str) -> pb.Pod:
    """A pod NeedsFriend applies to."""
    p = pod(name)
    p.labels["wants-friend"] = "yes"
    return p


def node(name: str, cpu: str = "1", **labels: str) -> pb.Node:
    return make_node(name).capacity(cpu=cpu, memory="8Gi").labels(**labels).obj()


def apply(snap: Snapshot, upsert: Sequence[pb.Pod] = (), delete: Sequence[str] = ()) -> None:
    delta = pb.ClusterDelta()
    delta.upsert_pods.extend(upsert)
    delta.delete_pods.extend(delete)
    snap.apply(delta)


# -- the snapshot's nominated index ------------------------------------------------


def test_nominated_pods_are_indexed_by_node_and_in_no_nodeinfo() -> None:
    snap = snapshot_of([node("a"), node("b")], [pod("bound", "a", cpu="500m")])
    assert not snap.has_nominated_pods
    apply(snap, [pod("n1", nominated="a", cpu="500m"), pod("n2", nominated="a"), pod("queued")])
    assert snap.has_nominated_pods
    assert list(snap.nominated_pods_for_node("a")) == ["n1", "n2"]
    assert not snap.nominated_pods_for_node("b")
    assert set(snap.nodes["a"].pods) == {"bound"}
    assert snap.nodes["a"].requested.milli_cpu == 500
    assert snap.nominated_node_names() == ["a"]


def test_a_nominated_pod_leaves_the_index_when_bound_deleted_or_renominated() -> None:
    snap = snapshot_of([node("a"), node("b")])
    apply(snap, [pod("n1", nominated="a"), pod("n2", nominated="a"), pod("n3", nominated="b")])
    # Bound: it counts on its node now, and is no longer nominated.
    apply(snap, [pod("n1", "a", nominated="a")])
    assert list(snap.nominated_pods_for_node("a")) == ["n2"]
    assert "n1" in snap.nodes["a"].pods
    # Nominated elsewhere.
    apply(snap, [pod("n2", nominated="b")])
    assert not snap.nominated_pods_for_node("a")
    assert list(snap.nominated_pods_for_node("b")) == ["n3", "n2"]
    # Its nomination cleared.
    apply(snap, [pod("n3")])
    # Deleted.
    apply(snap, delete=["n2"])
    assert not snap.has_nominated_pods
    assert snap.nominated_node_names() == []


def test_a_pod_nominated_to_a_node_the_snapshot_lacks_is_still_indexed() -> None:
    snap = snapshot_of([node("a")], [pod("n", nominated="gone")])
    assert list(snap.nominated_pods_for_node("gone")) == ["n"]


# -- RunFilterPluginsWithNominatedPods -------------------------------------------------


class CountingFit(FilterPlugin):
    """NodeResourcesFit's verdicts, counting batch and per-node calls."""

    name: ClassVar[str] = "CountingFit"
    batch_nodes: ClassVar[list[str]] = []
    node_calls: ClassVar[list[str]] = []

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        super().__init__(args, handle)
        self.fit = Fit()

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        self.node_calls.append(node.name)
        return self.fit.filter(state, pod, node)

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        self.batch_nodes.extend(nodes.names)
        return self.fit.filter_nodes(state, pod, nodes)


class NeedsFriend(FilterPlugin):
    """Rejects a node where no pod has the label friend=yes (a stand-in for
    required pod affinity: it passes with nominated pods, fails without)."""

    name: ClassVar[str] = "NeedsFriend"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if pod.proto.labels.get("wants-friend") != "yes":
            return SUCCESS
        if any(p.proto.labels.get("friend") == "yes" for p in node.pods.values()):
            return SUCCESS
        return Status.unschedulable("no friend here")


class FailingExtensions(PreFilterPlugin):
    """PreFilter extensions that fail on nodes labelled error=true."""

    name: ClassVar[str] = "FailingExtensions"

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


class NoExtensions(PreFilterPlugin):
    name: ClassVar[str] = "NoExtensions"

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        return None, SUCCESS


TEST_REGISTRY: dict[str, type[Plugin]] = {
    **REGISTRY,
    "CountingFit": CountingFit,
    "NeedsFriend": NeedsFriend,
    "FailingExtensions": FailingExtensions,
    "NoExtensions": NoExtensions,
}


def framework(
    pre_filter: Sequence[str] = ("NodeResourcesFit",),
    filter: Sequence[str] = ("CountingFit",),
    post_filter: Sequence[str] = (),
    score: Sequence[str] = (),
) -> Framework:
    def refs(names: Sequence[str], weight: int = 0) -> tuple[PluginRef, ...]:
        return tuple(PluginRef(n, weight) for n in names)

    CountingFit.batch_nodes.clear()
    CountingFit.node_calls.clear()
    return Framework(
        ProfileConfig(
            "test",
            {
                "queueSort": refs(["PrioritySort"]),
                "preFilter": refs(pre_filter),
                "filter": refs(filter),
                "postFilter": refs(post_filter),
                "preScore": refs(score),
                "score": refs(score, 1),
                "bind": refs(["DefaultBinder"]),
            },
        ),
        TEST_REGISTRY,
    )


def verdicts(fw: Framework, snap: Snapshot, p: pb.Pod) -> dict[str, Status]:
    info = PodInfo(p)
    state = CycleState()
    fw.handle.bind_snapshot(snap)
    fw.run_pre_filter(state, info, snap.all_nodes())
    nodes = snap.all_nodes()
    v, first_error = fw.filter_verdicts(state, info, nodes)
    assert first_error == -1 or v.status_of(first_error).code is Code.ERROR
    return {name: v.status_of(k) for k, name in enumerate(nodes.names)}


def test_nominated_pods_of_equal_or_higher_priority_take_their_room() -> None:
    """addGENominatedPods: priority >= the pod's, the pod itself excluded;
    lower-priority nominees do not count (the pod may take their room)."""
    snap = snapshot_of(
        [node("a"), node("b"), node("c"), node("d")],
        [
            pod("high", prio=10, cpu="800m", nominated="a"),
            pod("equal", prio=5, cpu="800m", nominated="b"),
            pod("low", prio=1, cpu="800m", nominated="c"),
            pod("p", prio=5, cpu="800m", nominated="d"),
        ],
    )
    got = verdicts(framework(), snap, pod("p", prio=5, cpu="500m", nominated="d"))
    assert {n: st.code for n, st in got.items()} == {
        "a": Code.UNSCHEDULABLE,
        "b": Code.UNSCHEDULABLE,
        "c": Code.SUCCESS,
        "d": Code.SUCCESS,
    }
    assert got["a"] == Status.unschedulable("Insufficient cpu", plugin="CountingFit")


def test_without_nominated_pods_filter_stays_one_batch_call() -> None:
    """The common case: no per-node Filter at all; with nominees, only
    their nodes are filtered one by one."""
    nodes = [node(f"n{i}") for i in range(50)]
    fw = framework()
    snap = snapshot_of(nodes)
    verdicts(fw, snap, pod("p", cpu="100m"))
    assert len(CountingFit.batch_nodes) == 50
    assert CountingFit.node_calls == []
    apply(snap, [pod("nominee", prio=1, cpu="100m", nominated="n7")])
    CountingFit.batch_nodes.clear()
    verdicts(fw, snap, pod("p", cpu="100m"))
    assert CountingFit.node_calls == ["n7"]
    # A lower-priority nominee needs no second look.
    CountingFit.node_calls.clear()
    verdicts(fw, snap, pod("p", prio=2, cpu="100m"))
    assert CountingFit.node_calls == []


def test_filter_runs_twice_and_both_passes_must_pass() -> None:
    """RunFilterPluginsWithNominatedPods: with a nominee the first pass adds
    it, the second runs without it; a node passes only if both do."""
    snap = snapshot_of([node("a"), node("b")], [pod("friend", prio=9, nominated="a", friend="yes")])
    fw = framework(filter=("NeedsFriend",))
    got = verdicts(fw, snap, friendly("p"))
    # The friend is only nominated: the second pass (without it) fails on a.
    assert got["a"] == Status.unschedulable("no friend here", plugin="NeedsFriend")
    assert got["b"].code is Code.UNSCHEDULABLE
    # A bound friend passes both.
    apply(snap, [pod("friend", "a", prio=9, friend="yes")])
    assert verdicts(fw, snap, friendly("p"))["a"].is_success


def test_the_first_pass_status_wins_when_it_fails() -> None:
    """A rejection with the nominees added is the node's status, even where
    the batch (without them) passed."""
    snap = snapshot_of([node("a", cpu="1")], [pod("nominee", prio=3, cpu="900m", nominated="a")])
    got = verdicts(framework(), snap, pod("p", cpu="200m"))
    assert got["a"] == Status.unschedulable("Insufficient cpu", plugin="CountingFit")


def test_add_pod_failure_is_the_nodes_error() -> None:
    """addGENominatedPods: a failing AddPod is an Error for the node
    ("running AddPod on PreFilter plugin ...")."""
    snap = snapshot_of(
        [node("a", error="true"), node("b")],
        [pod("n1", prio=3, nominated="a"), pod("n2", prio=3, nominated="b")],
    )
    fw = framework(pre_filter=("NodeResourcesFit", "FailingExtensions", "NoExtensions"))
    info = PodInfo(pod("p"))
    state = CycleState()
    fw.handle.bind_snapshot(snap)
    fw.run_pre_filter(state, info, snap.all_nodes())
    v, first_error = fw.filter_verdicts(state, info, snap.all_nodes())
    names = snap.all_nodes().names
    assert names[first_error] == "a"
    assert v.status_of(first_error) == Status.error(
        'running AddPod on PreFilter plugin "FailingExtensions": failed to add pod: p'
    )
    assert v.status_of(names.index("b")).is_success


def test_prefilter_extensions_see_the_nominee_on_a_cloned_state() -> None:
    """PodTopologySpread's AddPod counts the nominee in its domain on a
    clone of the state; the cycle's own state is left as it was."""
    zone = "topology.kubernetes.io/zone"
    snap = snapshot_of(
        [node("a", **{zone: "z1"}), node("b", **{zone: "z2"})],
        [pod("nominee", prio=5, nominated="a", app="web")],
    )
    p = pod("p", app="web")
    c = p.topology_spread_constraints.add(
        max_skew=1, topology_key=zone, when_unsatisfiable="DoNotSchedule"
    )
    c.label_selector.match_labels["app"] = "web"
    fw = framework(pre_filter=("PodTopologySpread",), filter=("PodTopologySpread",))
    info = PodInfo(p)
    state = CycleState()
    fw.handle.bind_snapshot(snap)
    fw.run_pre_filter(state, info, snap.all_nodes())
    before = state.encode()
    v, _ = fw.filter_verdicts(state, info, snap.all_nodes())
    names = snap.all_nodes().names
    # z1 holds the nominee: 1 + 1 - 0 > 1.
    assert v.status_of(names.index("a")).code is Code.UNSCHEDULABLE
    assert v.status_of(names.index("b")).is_success
    assert state.encode() == before


def test_run_filter_with_nominated_pods_on_a_clone() -> None:
    """The per-node form preemption calls, on a NodeInfo outside the
    snapshot: the nominees of the node's name are added."""
    snap = snapshot_of([node("a")], [pod("x", "a", cpu="300m")])
    apply(snap, [pod("nominee", prio=9, cpu="600m", nominated="a")])
    fw = framework()
    info = PodInfo(pod("p", cpu="300m"))
    state = CycleState()
    fw.handle.bind_snapshot(snap)
    fw.run_pre_filter(state, info, snap.all_nodes())
    clone = snap.nodes["a"].clone()
    assert fw.run_filter_with_nominated_pods(state, info, clone).code is Code.UNSCHEDULABLE
    clone.remove_pod("x")
    assert fw.run_filter_with_nominated_pods(state, info, clone).is_success
    # The snapshot's node is untouched.
    assert set(snap.nodes["a"].pods) == {"x"}
    assert snap.nodes["a"].requested.milli_cpu == 300


# -- evaluateNominatedNode -------------------------------------------------------------------


def test_a_pod_is_tried_on_its_nominated_node_first() -> None:
    """evaluateNominatedNode: the nominated node passes Filter, so it is the
    host without scoring; one node evaluated; the start index stays."""
    snap = snapshot_of([node("a", cpu="4"), node("b", cpu="1")])
    fw = framework(score=("NodeResourcesFit",))
    p = PodInfo(pod("p", cpu="500m", nominated="b"))
    r = schedule_pod(fw, snap, CycleState(), p, start_index=1)
    assert (r.node, r.evaluated, r.feasible, r.next_start_index) == ("b", 1, 1, 1)
    # Without the nomination the emptier node wins the score.
    assert schedule_pod(fw, snap, CycleState(), PodInfo(pod("q", cpu="500m"))).node == "a"


def test_a_nominated_node_that_does_not_fit_falls_back_to_every_node() -> None:
    snap = snapshot_of([node("a", cpu="4"), node("b", cpu="1")], [pod("x", "b", cpu="900m")])
    fw = framework(score=("NodeResourcesFit",))
    r = schedule_pod(fw, snap, CycleState(), PodInfo(pod("p", cpu="500m", nominated="b")))
    assert r.node == "a"
    assert r.evaluated == 2


def test_a_nominated_node_missing_from_the_snapshot_is_skipped() -> None:
    snap = snapshot_of([node("a")])
    r = schedule_pod(framework(), snap, CycleState(), PodInfo(pod("p", nominated="gone")))
    assert r.node == "a"


def test_nominated_node_rejection_stays_in_the_diagnosis() -> None:
    """The nominated node's status is in NodeToStatus even when the walk
    does not reach it again (PreFilterResult excluded it)."""
    snap = snapshot_of(
        [node("a", cpu="1"), node("b", cpu="1")],
        [pod("x", "b", cpu="900m"), pod("y", "a", cpu="900m")],
    )
    fw = framework(pre_filter=("NodeResourcesFit", "NodeAffinity"))
    p = pod("p", cpu="500m", nominated="b")
    # NodeAffinity's PreFilterResult keeps only node a.
    term = p.affinity.node_affinity.required.terms.add()
    term.match_fields.add(key="metadata.name", operator="In", values=["a"])
    r = schedule_pod(fw, snap, CycleState(), PodInfo(p))
    assert r.status.code is Code.UNSCHEDULABLE
    assert set(r.rejected) == {"a", "b"}
    assert r.evaluated == 2
    assert r.message == "0/2 nodes are available: 2 Insufficient cpu."


def test_explain_evaluates_every_node_even_with_a_nomination() -> None:
    snap = snapshot_of([node("a", cpu="4"), node("b", cpu="1")])
    fw = framework(score=("NodeResourcesFit",))
    r = schedule_pod(
        fw, snap, CycleState(), PodInfo(pod("p", cpu="500m", nominated="b")), explain=True
    )
    assert r.evaluated == 2 and r.scores is not None


# -- a whole cycle with DefaultPreemption -------------------------------------------------


def test_schedule_with_preemption_nominates_and_names_the_victims() -> None:
    """schedulingCycle: the FitError stays (Unschedulable) with the
    nomination; PostFilter succeeded, so its message adds nothing."""
    snap = snapshot_of(
        [node("a", cpu="1"), node("b", cpu="1")],
        [pod("low", "a", prio=1, cpu="800m"), pod("high", "b", prio=100, cpu="800m")],
    )
    fw = framework(filter=("NodeResourcesFit",), post_filter=("DefaultPreemption",))
    r = schedule_pod(fw, snap, CycleState(), PodInfo(pod("p", prio=10, cpu="500m")))
    assert r.status.code is Code.UNSCHEDULABLE
    assert r.message == "0/2 nodes are available: 2 Insufficient cpu."
    assert (r.nominating_mode, r.nominated_node) == (NominatingMode.OVERRIDE, "a")
    assert [v.name for v in r.victims] == ["low"]
    assert r.post_filter_plugin == "DefaultPreemption"
    assert r.post_filter_status is not None and r.post_filter_status.is_success


@pytest.mark.parametrize(
    ("pods", "message"),
    [
        (
            [pod("x", "a", prio=100, cpu="800m"), pod("y", "b", prio=100, cpu="800m")],
            "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are "
            "available: 2 No preemption victims found for incoming pod.",
        ),
        (
            [],
            "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are "
            "available: 2 Preemption is not helpful for scheduling.",
        ),
    ],
)
def test_fit_error_text_gains_the_preemption_message(pods: list[pb.Pod], message: str) -> None:
    """FitError.Error: "0/N nodes are available: <histogram>. <PostFilterMsg>",
    the PostFilter message being DefaultPreemption's "preemption: " + the
    dry run's own FitError."""
    snap = snapshot_of([node("a", cpu="1"), node("b", cpu="1")], pods)
    fw = framework(filter=("NodeResourcesFit",), post_filter=("DefaultPreemption",))
    cpu = "500m" if pods else "2"
    r = schedule_pod(fw, snap, CycleState(), PodInfo(pod("p", prio=10, cpu=cpu)))
    assert r.message == message
    assert r.status == Status(Code.UNSCHEDULABLE, (message,), "")
    assert r.victims == ()
    assert (r.nominating_mode, r.nominated_node) == (NominatingMode.OVERRIDE, "")


def test_clone_copies_sums_and_pod_sets() -> None:
    """NodeInfo.clone (upstream's NodeInfo.Snapshot): changes to the copy do
    not reach the original."""
    snap = snapshot_of([node("a")], [pod("x", "a", cpu="300m")])
    ni = snap.nodes["a"]
    c = ni.clone()
    c.add_pod(PodInfo(pod("y", "a", cpu="200m")))
    c.remove_pod("x")
    assert (set(ni.pods), ni.requested.milli_cpu) == ({"x"}, 300)
    assert (set(c.pods), c.requested.milli_cpu) == ({"y"}, 200)
    assert c.owner is None and c.index == -1
    assert np.int64(snap.columns.req_cpu[ni.index]) == 300
