"""A cycle in two halves with the caller's HTTP extenders between them
(schedule_one.go findNodesThatFitPod: findNodesThatPassExtenders after
Filter; schedulePod: one node left needs no scoring; prioritizeNodes: the
extenders' scores added to the plugins' totals)."""

from __future__ import annotations

from typing import Any

from berth.api.v1 import cluster_pb2 as cpb
from berth.framework import Code, CycleState
from berth.framework.runtime import Framework
from berth.framework.schedule_one import Resume, schedule_pod
from berth.framework.testing import make_node, make_pod, snapshot_of
from tests.unit.framework.fakes import REGISTRY, profile


def nodes(*specs: tuple[str, dict[str, str]]) -> list[cpb.Node]:
    return [
        make_node(name).capacity(cpu="4", memory="8Gi").labels(**labels).obj()
        for name, labels in specs
    ]


def fw(**kw: Any) -> Framework:
    return Framework(profile(**kw), REGISTRY)


def test_stop_after_filter_answers_the_feasible_nodes_and_the_rejected_ones() -> None:
    snap = snapshot_of(nodes(("a", {}), ("b", {"reject": "RejectLabel"}), ("c", {})))
    r = schedule_pod(
        fw(filter=("RejectLabel",)), snap, CycleState(), make_pod().info(), stop_after_filter=True
    )
    assert r.status.is_success and r.node == ""
    assert r.stopped_feasible == ("a", "c")
    assert set(r.rejected) == {"b"} and r.unschedulable_plugins == {"RejectLabel"}
    assert r.num_all_nodes == 3 and r.absent_status is None


def test_stop_after_filter_sizes_the_search_as_with_extender_filters() -> None:
    """findNodesThatPassFilters: numNodesToFind is 1 only with neither
    scoring nor extender filters; a cycle stopped for extenders has them."""
    snap = snapshot_of(nodes(*[(f"n{i:03d}", {}) for i in range(150)]))
    f = fw(filter=("RejectLabel",))
    plain = schedule_pod(f, snap, CycleState(), make_pod().info())
    assert plain.evaluated == 1
    stopped = schedule_pod(f, snap, CycleState(), make_pod().info(), stop_after_filter=True)
    assert stopped.stopped_feasible is not None and len(stopped.stopped_feasible) == 100


def test_no_feasible_node_ends_as_a_fit_error_without_stopping() -> None:
    snap = snapshot_of(nodes(("a", {"reject": "RejectLabel"})))
    r = schedule_pod(
        fw(filter=("RejectLabel",)), snap, CycleState(), make_pod().info(), stop_after_filter=True
    )
    assert r.status.code is Code.UNSCHEDULABLE and r.stopped_feasible is None
    assert r.message.startswith("0/1 nodes are available: 1 ")


def test_resume_adds_the_extenders_scores_to_the_plugins_totals() -> None:
    """prioritizeNodes: score * weight * 10 (the caller's sum) on top of the
    plugins' weighted total decides the host."""
    snap = snapshot_of(nodes(("a", {"score": "60"}), ("b", {"score": "50"}), ("c", {})))
    f = fw(score=(("LabelScore", 1),))
    base = schedule_pod(f, snap, CycleState(), make_pod().info(), resume=Resume(("a", "b")))
    assert base.node == "a"
    r = schedule_pod(
        f,
        snap,
        CycleState(),
        make_pod().info(),
        resume=Resume(("a", "b"), {"b": 20}, evaluated=3),
    )
    assert r.node == "b" and r.evaluated == 3 and r.feasible == 2
    assert r.scores is not None and r.scores.totals.tolist() == [60, 70]


def test_resume_with_one_node_takes_it_without_scoring() -> None:
    snap = snapshot_of(nodes(("a", {"score": "90"}), ("b", {})))
    r = schedule_pod(
        fw(score=(("LabelScore", 1),)), snap, CycleState(), make_pod().info(), resume=Resume(("b",))
    )
    assert r.node == "b" and r.scores is None


def test_resume_without_score_plugins_uses_the_extenders_scores_alone() -> None:
    snap = snapshot_of(nodes(("a", {}), ("b", {}), ("c", {})))
    r = schedule_pod(
        fw(), snap, CycleState(), make_pod().info(), resume=Resume(("a", "b", "c"), {"c": 10})
    )
    assert r.node == "c"
