"""One scheduling cycle as upstream runs it (pkg/scheduler/schedule_one.go:
schedulePod, findNodesThatFitPod, findNodesThatPassFilters,
numFeasibleNodesToFind, prioritizeNodes, selectHost; FitError.Error of
pkg/scheduler/framework/types.go)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.framework import Code, CycleState, Status
from berth.framework.runtime import Framework
from berth.framework.schedule_one import (
    NominatingMode,
    fit_error_message,
    num_feasible_nodes_to_find,
    schedule_pod,
    select_host,
)
from berth.framework.status import count_statuses
from berth.framework.testing import make_node, make_pod, snapshot_of
from tests.unit.framework.fakes import REGISTRY, CallLog, profile


def nodes(*specs: tuple[str, dict[str, str]]) -> list[cpb.Node]:
    return [
        make_node(name).capacity(cpu="4", memory="8Gi").labels(**labels).obj()
        for name, labels in specs
    ]


def fw(**kw: Any) -> Framework:
    return Framework(profile(**kw), REGISTRY)


# -- host selection and the cycle --------------------------------------------


def test_highest_total_wins_and_ties_are_broken_at_random() -> None:
    """selectHost: the top score; among equal tops each may be chosen."""
    snap = snapshot_of(nodes(("a", {"score": "9"}), ("b", {"score": "9"}), ("c", {"score": "1"})))
    batch = snap.all_nodes()
    totals = np.array([9, 9, 1], dtype=np.int64)
    picks = {select_host(batch, totals, random.Random(seed)) for seed in range(40)}
    assert picks == {"a", "b"}


@pytest.mark.parametrize(
    ("percentage", "num_nodes", "want"),
    [
        (0, 50, 50),  # fewer than minFeasibleNodesToFind (100): all
        (0, 100, 100),  # adaptive 50% -> 50, raised to the minimum 100
        (0, 200, 100),  # 49% -> 98, raised to 100
        (0, 1000, 420),  # 50 - 1000/125 = 42%
        (0, 5000, 500),  # 50 - 40 = 10%
        (0, 6000, 300),  # 50 - 48 = 2%, floored at 5%
        (30, 1000, 300),
        (100, 5000, 5000),
    ],
    ids=lambda v: str(v),
)
def test_num_feasible_nodes_to_find(percentage: int, num_nodes: int, want: int) -> None:
    """schedule_one.go, numFeasibleNodesToFind."""
    assert num_feasible_nodes_to_find(percentage, num_nodes) == want


def test_cycle_stops_after_enough_feasible_nodes_and_rotates_start() -> None:
    """findNodesThatPassFilters evaluates from nextStartNodeIndex and stops at
    numFeasibleNodesToFind; the next cycle starts after the last processed node."""
    snap = snapshot_of(nodes(*[(f"n{i:03d}", {"score": str(i % 7)}) for i in range(200)]))
    f = fw(filter=("RejectLabel",), score=(("LabelScore", 1),), percentage=50)
    r = schedule_pod(f, snap, CycleState(), make_pod().info(), start_index=150)
    assert r.feasible == 100 and r.evaluated == 100
    assert r.next_start_index == 50


def test_fit_error_message_reads_like_upstream() -> None:
    """FitError.Error: sorted histogram of reasons."""
    rejected = {
        "a": Status.unresolvable("node(s) were unschedulable"),
        "b": Status.unschedulable("Insufficient cpu"),
        "c": Status.unschedulable("Insufficient cpu", "Insufficient memory"),
    }
    assert fit_error_message(3, rejected) == (
        "0/3 nodes are available: 1 Insufficient memory, 1 node(s) were unschedulable, "
        "2 Insufficient cpu."
    )


def test_fit_error_message_counts_shared_and_equal_statuses_alike() -> None:
    """A batch Filter's verdicts share one Status object among the nodes it
    rejects for one reason; other nodes may hold equal but distinct objects.
    Both count once per node in the histogram."""
    shared = Status.unschedulable("Insufficient cpu")
    rejected = {f"n{i}": shared for i in range(1000)}
    rejected.update({f"m{i}": Status.unschedulable("Insufficient cpu") for i in range(5)})
    rejected["x"] = Status.unresolvable("node(s) were unschedulable")
    assert fit_error_message(1010, rejected) == (
        "0/1010 nodes are available: 1 node(s) were unschedulable, 1005 Insufficient cpu."
    )
    counted = count_statuses(list(rejected.values()))
    assert counted[0] == (shared, 1000)
    assert sum(n for _, n in counted) == len(rejected)
    assert len(counted) == 7


def test_cycle_with_no_feasible_node_reports_fit_error() -> None:
    snap = snapshot_of(nodes(("a", {"reject": "RejectLabel"}), ("b", {"reject": "RejectLabel"})))
    r = schedule_pod(fw(filter=("RejectLabel",)), snap, CycleState(), make_pod().info())
    assert r.node == ""
    assert r.status.code is Code.UNSCHEDULABLE
    assert r.message == "0/2 nodes are available: 2 rejected by RejectLabel."
    assert r.unschedulable_plugins == {"RejectLabel"}


def test_nodes_excluded_by_prefilter_result_count_in_the_fit_error() -> None:
    """findNodesThatFitPod: nodes outside PreFilterResult get an absent-node
    status naming the restricting plugins; FitError counts them."""
    snap = snapshot_of(nodes(("a", {"reject": "RejectLabel"}), ("b", {}), ("c", {})))
    f = fw(pre_filter=("OnlyNodes",), filter=("RejectLabel",))
    r = schedule_pod(f, snap, CycleState(), make_pod().label("OnlyNodes", "a").info())
    assert r.status.code is Code.UNSCHEDULABLE
    assert r.message == (
        "0/3 nodes are available: 1 rejected by RejectLabel, "
        "2 node(s) didn't satisfy plugin(s) [OnlyNodes]."
    )


def test_no_nodes_is_unresolvable_and_a_fit_error_is_unschedulable() -> None:
    """schedulingCycle: ErrNoNodesAvailable -> UnschedulableAndUnresolvable;
    a FitError -> Unschedulable, even when every node was unresolvable."""
    empty = schedule_pod(fw(), snapshot_of([]), CycleState(), make_pod().info())
    assert empty.status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert empty.message == "no nodes available to schedule pods"
    snap = snapshot_of(nodes(("a", {"reject": "SkipPreFilter"})))
    r = schedule_pod(fw(filter=("SkipPreFilter",)), snap, CycleState(), make_pod().info())
    assert r.status.code is Code.UNSCHEDULABLE


def test_find_nodes_that_pass_filters_stops_at_the_first_feasible_node_without_scoring() -> None:
    """findNodesThatPassFilters: with no score plugins (and no extenders)
    numNodesToFind is 1, so the walk stops at the first feasible node."""
    specs = [
        (f"n{i:03d}", {"reject": "RejectLabel"} if i in (10, 11, 12) else {}) for i in range(200)
    ]
    snap = snapshot_of(nodes(*specs))
    r = schedule_pod(
        fw(filter=("RejectLabel",)), snap, CycleState(), make_pod().info(), start_index=10
    )
    assert (r.node, r.feasible, r.evaluated, r.next_start_index) == ("n013", 1, 4, 14)
    # With a score plugin the same cycle looks for numFeasibleNodesToFind nodes.
    scored = fw(filter=("RejectLabel",), score=(("LabelScore", 1),))
    r = schedule_pod(scored, snap, CycleState(), make_pod().info(), start_index=10)
    assert (r.feasible, r.evaluated) == (100, 103)


def test_prioritize_nodes_without_score_plugins_runs_no_pre_score() -> None:
    """prioritizeNodes: without score plugins neither PreScore nor Score runs;
    every node scores 1 and the first of the walk is chosen."""
    CallLog.reset()
    snap = snapshot_of(nodes(("a", {}), ("b", {}), ("c", {})))
    f = fw(pre_score=("RecordingPreScore",))
    r = schedule_pod(f, snap, CycleState(), make_pod().info(), start_index=1, explain=True)
    assert (r.node, r.feasible, r.scores) == ("b", 3, None)
    r = schedule_pod(f, snap, CycleState(), make_pod().info(), start_index=2)
    assert (r.node, r.evaluated) == ("c", 1)
    assert not [c for c in CallLog.calls if c[0] == "PreScore"]
    # With a score plugin PreScore runs.
    with_score = fw(pre_score=("RecordingPreScore",), score=(("LabelScore", 1),))
    schedule_pod(with_score, snap, CycleState(), make_pod().info())
    assert ("PreScore", "RecordingPreScore", "") in CallLog.calls


def test_find_nodes_that_fit_pod_walks_the_node_tree_order() -> None:
    """findNodesThatFitPod walks the snapshot's node list, which is
    nodeTree.list(): zones interleaved round-robin."""
    zone = "topology.kubernetes.io/zone"
    snap = snapshot_of(
        [
            make_node(name).capacity(cpu="4").label(zone, z).obj()
            for name, z in (("a1", "z1"), ("a2", "z1"), ("b1", "z2"), ("b2", "z2"), ("c1", "z3"))
        ]
    )
    assert snap.all_nodes().names == ["a1", "b1", "c1", "a2", "b2"]
    f = fw()
    picks = [
        schedule_pod(f, snap, CycleState(), make_pod().info(), start_index=i).node for i in range(5)
    ]
    assert picks == ["a1", "b1", "c1", "a2", "b2"]


def test_find_nodes_that_fit_pod_prefilter_rejection_is_a_fit_error() -> None:
    """findNodesThatFitPod: a rejecting PreFilter status becomes every node's
    status and the PreFilterMsg; UnschedulablePlugins holds the plugins whose
    PreFilterResult narrowed the nodes and the rejecting plugin."""
    snap = snapshot_of(nodes(("a", {}), ("b", {})))
    f = fw(pre_filter=("OnlyNodes", "CodePreFilter"))
    pod = make_pod().label("OnlyNodes", "a").labels(CodePreFilter="UNSCHEDULABLE").info()
    r = schedule_pod(f, snap, CycleState(), pod)
    assert r.status.code is Code.UNSCHEDULABLE
    assert r.message == "0/2 nodes are available: CodePreFilter says UNSCHEDULABLE."
    assert r.unschedulable_plugins == {"OnlyNodes", "CodePreFilter"}
    # An empty intersection names its plugins too (the status has none).
    f = fw(pre_filter=("OnlyNodes", "OnlyNodes2"))
    pod = make_pod().label("OnlyNodes", "a").label("OnlyNodes2", "b").info()
    r = schedule_pod(f, snap, CycleState(), pod)
    assert r.unschedulable_plugins == {"OnlyNodes", "OnlyNodes2"}


def test_find_nodes_that_fit_pod_unschedulable_plugins_include_prefilter_result_plugins() -> None:
    """Diagnosis.UnschedulablePlugins starts from RunPreFilterPlugins' plugins
    with a PreFilterResult, then every plugin that rejected a node; Pending
    rejections also go to PendingPlugins."""
    snap = snapshot_of(
        nodes(("a", {"reject": "RejectLabel"}), ("b", {"pending": "yes"}), ("c", {}))
    )
    f = fw(pre_filter=("OnlyNodes",), filter=("RejectLabel", "PendingFilter"))
    r = schedule_pod(f, snap, CycleState(), make_pod().label("OnlyNodes", "a.b").info())
    assert r.unschedulable_plugins == {"OnlyNodes", "RejectLabel", "PendingFilter"}
    assert r.pending_plugins == {"PendingFilter"}


def test_find_nodes_that_fit_pod_filter_error_still_advances_the_next_start_index() -> None:
    """findNodesThatFitPod advances nextStartNodeIndex by the nodes processed
    (feasible or rejected) before a Filter Error stopped the walk."""
    specs: list[tuple[str, dict[str, str]]] = [(f"n{i}", {}) for i in range(10)]
    specs[2] = ("n2", {"reject": "RejectLabel"})
    specs[4] = ("n4", {"error": "yes"})
    snap = snapshot_of(nodes(*specs))
    f = fw(filter=("RejectLabel", "LabelErrorFilter"), score=(("LabelScore", 1),))
    r = schedule_pod(f, snap, CycleState(), make_pod().info(), start_index=1)
    assert r.status == Status(
        Code.ERROR, ('running "LabelErrorFilter" filter plugin: disk on fire',), "LabelErrorFilter"
    )
    # n1 (feasible), n2 (rejected), n3 (feasible) were processed; n4 failed.
    assert r.next_start_index == 4
    assert r.nominating_mode is NominatingMode.OVERRIDE
    # A walk that has found enough nodes before the failing one never meets it.
    r = schedule_pod(fw(filter=("LabelErrorFilter",)), snap, CycleState(), make_pod().info())
    assert (r.status.code, r.node, r.next_start_index) == (Code.SUCCESS, "n0", 1)


def test_scheduling_algorithm_clears_the_nomination_without_a_post_filter_result() -> None:
    """schedulingAlgorithm: a FitError without PostFilter plugins clears the
    nominated node (clearNominatedNode); PostFilter plugins that return no
    result leave it alone (ModeNoop)."""
    snap = snapshot_of(nodes(("a", {"reject": "RejectLabel"})))
    r = schedule_pod(fw(filter=("RejectLabel",)), snap, CycleState(), make_pod().info())
    assert (r.nominated_node, r.nominating_mode) == ("", NominatingMode.OVERRIDE)
    f = fw(filter=("RejectLabel",), post_filter=("QuietPostFilter",))
    r = schedule_pod(f, snap, CycleState(), make_pod().info())
    assert (r.nominated_node, r.nominating_mode) == ("", NominatingMode.NOOP)


def test_the_filter_walk_names_rejected_nodes_in_walk_order_when_read() -> None:
    """find_nodes_that_pass_filters keeps each chunk's rejections unnamed; read,
    ``rejected`` names every rejected node the walk reached, in walk order and
    across chunks, and a cycle that fails reports them all."""
    from berth.framework.schedule_one import find_nodes_that_pass_filters

    specs = [(f"n{i:03d}", {"reject": "RejectLabel"} if i % 3 else {}) for i in range(300)]
    snap = snapshot_of(nodes(*specs))
    f = fw(filter=("RejectLabel",), score=(("LabelScore", 1),))
    pod = make_pod().info()
    state = CycleState()
    f.run_pre_filter(state, pod, snap.all_nodes())
    out = find_nodes_that_pass_filters(f, state, pod, snap.all_nodes(), 250, 100)
    walk = [f"n{(250 + k) % 300:03d}" for k in range(out.processed)]
    assert list(out.rejected) == [n for n in walk if int(n[1:]) % 3]
    assert len(out.feasible) == 100 and out.processed > 64  # more than one chunk
    assert {st.plugin for st in out.rejected.values()} == {"RejectLabel"}
    assert out.rejected is out.rejected
    all_rejected = snapshot_of(nodes(*[(f"m{i}", {"reject": "RejectLabel"}) for i in range(150)]))
    r = schedule_pod(f, all_rejected, CycleState(), make_pod().info())
    assert sorted(r.rejected) == sorted(f"m{i}" for i in range(150))


def test_the_filter_walk_counts_its_rejections_without_naming_them() -> None:
    """FilterOutcome.rejected_counts, read before ``rejected``, counts each
    Status from the walk's parts as count_statuses counts the named nodes'
    (the FitError histogram and the diagnosis read the counts), across
    chunks and two plugins."""
    from berth.framework.schedule_one import find_nodes_that_pass_filters

    def label(i: int) -> dict[str, str]:
        return {"reject": "RejectLabel" if i % 3 == 1 else "RejectLabel2"} if i % 3 else {}

    snap = snapshot_of(nodes(*[(f"n{i:03d}", label(i)) for i in range(300)]))
    f = fw(filter=("RejectLabel", "RejectLabel2"), score=(("LabelScore", 1),))
    pod = make_pod().info()
    state = CycleState()
    f.run_pre_filter(state, pod, snap.all_nodes())
    out = find_nodes_that_pass_filters(f, state, pod, snap.all_nodes(), 250, 100)
    assert out.processed > 64  # more than one chunk

    def by_value(counted: list[tuple[Status, int]]) -> dict[tuple[str, ...], int]:
        totals: dict[tuple[str, ...], int] = {}
        for st, n in counted:
            key = (st.plugin, *st.reasons)
            totals[key] = totals.get(key, 0) + n
        return totals

    early = out.rejected_counts()
    named = out.rejected
    assert by_value(early) == by_value(count_statuses(list(named.values())))
    assert sum(n for _, n in early) == len(named) > 0
    assert set(by_value(early)) == {
        ("RejectLabel", "rejected by RejectLabel"),
        ("RejectLabel2", "rejected by RejectLabel2"),
    }
    # Once named, the counts come from the names.
    assert by_value(out.rejected_counts()) == by_value(early)


@pytest.mark.parametrize("ratio", [1.0, 0.5, 0.25, 0.01])
def test_the_filter_walks_first_chunk_changes_its_cost_not_its_outcome(ratio: float) -> None:
    """The walk's first chunk is sized by the pass ratio of recent walks
    (Framework.filter_pass_ratio): whatever its size, the feasible nodes, the
    nodes processed and the rejections are findNodesThatPassFilters' (stop
    at the node that completes the set), and a Filter Error on a node past
    that one is never met."""
    from berth.framework.schedule_one import find_nodes_that_pass_filters

    specs: list[tuple[str, dict[str, str]]] = [
        (f"n{i:03d}", {"reject": "RejectLabel"} if i % 4 else {}) for i in range(400)
    ]
    # Right after the node that completes the set (the 60th feasible, n248).
    specs[249] = ("n249", {"error": "yes"})
    snap = snapshot_of(nodes(*specs))
    f = fw(filter=("RejectLabel", "LabelErrorFilter"), score=(("LabelScore", 1),))
    f.filter_pass_ratio = ratio
    pod = make_pod().info()
    state = CycleState()
    f.run_pre_filter(state, pod, snap.all_nodes())
    out = find_nodes_that_pass_filters(f, state, pod, snap.all_nodes(), 10, 60)
    walk = [f"n{10 + k:03d}" for k in range(out.processed)]
    assert out.error is None
    assert list(out.feasible.names) == [n for n in walk if int(n[1:]) % 4 == 0]
    assert len(out.feasible) == 60
    assert walk[-1] == out.feasible.names[-1] == "n248"  # stopped at the 60th feasible node
    assert list(out.rejected) == [n for n in walk if int(n[1:]) % 4]
    assert 0 < f.filter_pass_ratio <= 1
