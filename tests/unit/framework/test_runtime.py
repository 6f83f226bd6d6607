"""Framework semantics as upstream defines them
(pkg/scheduler/framework/runtime/framework.go, pkg/scheduler/schedule_one.go)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from berth.v1 import cluster_pb2 as cpb
from berth.v1 import scheduling_pb2 as pb
from plugins.framework import Code, CycleState, Status
from plugins.framework.runtime import (
    CycleError,
    Framework,
    ProfileError,
    fit_error_message,
    num_feasible_nodes_to_find,
    select_host,
)
from plugins.framework.testing import make_node, make_pod, snapshot_of
from tests.unit.framework.fakes import COUNTER, REGISTRY, CallLog, Reserver, profile


def nodes(*specs: tuple[str, dict[str, str]]) -> list[cpb.Node]:
    return [
        make_node(name).capacity(cpu="4", memory="8Gi").labels(**labels).obj()
        for name, labels in specs
    ]


def fw(**kw: Any) -> Framework:
    return Framework(profile(**kw), REGISTRY)


# -- status codes -----------------------------------------------------------


@pytest.mark.parametrize("code", list(Code), ids=lambda c: c.name)
def test_status_code_maps_one_to_one_to_proto_enum(code: Code) -> None:
    """framework.Code values equal berth.v1.Code values, name for name."""
    assert pb.Code.Value(f"CODE_{code.name}") == int(code)


def test_proto_enum_has_no_code_python_lacks() -> None:
    assert sorted(pb.Code.values()) == sorted(int(c) for c in Code)


# -- profile checks (NewFramework) -------------------------------------------


def test_profile_without_bind_plugin_is_refused() -> None:
    p = profile()
    plugins = dict(p.plugins)
    plugins["bind"] = ()
    with pytest.raises(ProfileError, match="at least one bind plugin"):
        Framework(type(p)(p.scheduler_name, plugins), REGISTRY)


def test_plugin_at_point_it_does_not_implement_is_refused() -> None:
    with pytest.raises(ProfileError, match="LabelScore does not extend filter plugin"):
        fw(filter=("LabelScore",))


# -- Filter -------------------------------------------------------------------


def test_filter_stops_at_first_rejection_per_node() -> None:
    """RunFilterPlugins: a node rejected by one plugin is not shown to the next."""
    CallLog.reset()
    snap = snapshot_of(nodes(("a", {"reject": "RejectLabel"}), ("b", {})))
    f = fw(filter=("RejectLabel", "RejectLabel2"))
    verdicts = f.run_filter(CycleState(), make_pod().info(), snap.all_nodes())
    assert verdicts.passed().tolist() == [False, True]
    assert verdicts.status_of(0).plugin == "RejectLabel"
    assert ("Filter", "RejectLabel2", "a") not in CallLog.calls
    assert ("Filter", "RejectLabel2", "b") in CallLog.calls


def test_filter_error_fails_the_cycle() -> None:
    snap = snapshot_of(nodes(("a", {})))
    with pytest.raises(CycleError) as err:
        fw(filter=("ErrorFilter",)).run_filter(CycleState(), make_pod().info(), snap.all_nodes())
    assert err.value.status.code is Code.ERROR
    assert err.value.status.plugin == "ErrorFilter"


def test_prefilter_skip_skips_that_plugins_filter() -> None:
    """RunPreFilterPlugins records Skip in SkipFilterPlugins; RunFilterPlugins honours it."""
    snap = snapshot_of(nodes(("a", {}), ("b", {})))
    f = fw(pre_filter=("SkipPreFilter",), filter=("SkipPreFilter",))
    pod = make_pod().labels(skip="yes").info()
    state = CycleState()
    _, st = f.run_pre_filter(state, pod, snap.all_nodes())
    assert st.is_success
    assert state.skip_filter_plugins == {"SkipPreFilter"}
    assert f.run_filter(state, pod, snap.all_nodes()).passed().all()
    # Without Skip the same plugin's Filter runs and rejects.
    state2 = CycleState()
    f.run_pre_filter(state2, make_pod().info(), snap.all_nodes())
    assert not f.run_filter(state2, make_pod().info(), snap.all_nodes()).passed().any()


def test_prefilter_results_intersect() -> None:
    """PreFilterResult.Merge: the node sets of all plugins intersect."""
    snap = snapshot_of(nodes(("a", {}), ("b", {}), ("c", {})))
    f = fw(pre_filter=("OnlyNodes", "OnlyNodes2"))
    pod = make_pod().label("OnlyNodes", "a.b").label("OnlyNodes2", "b.c").info()
    res, st = f.run_pre_filter(CycleState(), pod, snap.all_nodes())
    assert st.is_success
    assert res is not None and res.node_names == frozenset({"b"})
    r = f.schedule(snap, CycleState(), pod)
    assert r.node == "b"


def test_prefilter_results_with_empty_intersection_are_unresolvable() -> None:
    snap = snapshot_of(nodes(("a", {}), ("b", {})))
    f = fw(pre_filter=("OnlyNodes", "OnlyNodes2"))
    pod = make_pod().label("OnlyNodes", "a").label("OnlyNodes2", "b").info()
    _, st = f.run_pre_filter(CycleState(), pod, snap.all_nodes())
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message == "node(s) didn't satisfy plugin(s) [OnlyNodes OnlyNodes2] simultaneously"


# -- Score --------------------------------------------------------------------


def test_normalize_then_range_check_then_weight() -> None:
    """RunScorePlugins: NormalizeScore first, the 0..100 check on its output,
    then the weight (so a weighted total may exceed 100)."""
    snap = snapshot_of(nodes(("a", {"score": "10"}), ("b", {"score": "50"})))
    f = fw(score=(("DoubleNormalize", 3),))
    out = f.run_score(CycleState(), make_pod().info(), snap.all_nodes())
    assert out.weighted["DoubleNormalize"].tolist() == [60, 300]
    assert out.totals.tolist() == [60, 300]


def test_score_out_of_range_after_normalize_is_an_error() -> None:
    snap = snapshot_of(nodes(("a", {"score": "10"}), ("b", {"score": "51"})))
    f = fw(score=(("DoubleNormalize", 1),))
    with pytest.raises(CycleError) as err:
        f.run_score(CycleState(), make_pod().info(), snap.all_nodes())
    assert err.value.status.code is Code.ERROR
    assert "invalid score 102" in err.value.status.message
    assert "'b'" in err.value.status.message


def test_negative_score_is_an_error() -> None:
    snap = snapshot_of(nodes(("a", {"score": "-1"})))
    with pytest.raises(CycleError, match="invalid score -1"):
        fw(score=(("LabelScore", 1),)).run_score(CycleState(), make_pod().info(), snap.all_nodes())


def test_weight_zero_means_one() -> None:
    """NewFramework: a score plugin configured with weight 0 gets weight 1."""
    assert fw(score=(("LabelScore", 0),)).score_weights == {"LabelScore": 1}


def test_prescore_skip_skips_that_plugins_score() -> None:
    snap = snapshot_of(nodes(("a", {"score": "10"}), ("b", {"score": "20"})))
    f = fw(pre_score=("SkipPreScore",), score=(("SkipPreScore", 1), ("LabelScore", 1)))
    state = CycleState()
    assert f.run_pre_score(state, make_pod().info(), snap.all_nodes()).is_success
    out = f.run_score(state, make_pod().info(), snap.all_nodes())
    assert set(out.weighted) == {"LabelScore"}


def test_highest_total_wins_and_ties_are_broken_at_random() -> None:
    """selectHost: the top score; among equal tops each may be chosen."""
    snap = snapshot_of(nodes(("a", {"score": "9"}), ("b", {"score": "9"}), ("c", {"score": "1"})))
    batch = snap.all_nodes()
    totals = np.array([9, 9, 1], dtype=np.int64)
    picks = {select_host(batch, totals, random.Random(seed)) for seed in range(40)}
    assert picks == {"a", "b"}


# -- host selection and the cycle --------------------------------------------


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
    r = f.schedule(snap, CycleState(), make_pod().info(), start_index=150)
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


def test_cycle_with_no_feasible_node_reports_fit_error() -> None:
    snap = snapshot_of(nodes(("a", {"reject": "RejectLabel"}), ("b", {"reject": "RejectLabel"})))
    r = fw(filter=("RejectLabel",)).schedule(snap, CycleState(), make_pod().info())
    assert r.node == ""
    assert r.status.code is Code.UNSCHEDULABLE
    assert r.message == "0/2 nodes are available: 2 rejected by RejectLabel."
    assert r.unschedulable_plugins == {"RejectLabel"}


def test_cycle_state_written_in_prefilter_is_returned() -> None:
    snap = snapshot_of(nodes(("a", {}), ("b", {})))
    state = CycleState()
    r = fw(pre_filter=("SkipPreFilter",)).schedule(snap, state, make_pod().info())
    assert r.status.is_success
    again = CycleState.decode(state.encode())
    assert again.read(COUNTER).value == 2


def test_reserve_failure_runs_unreserve() -> None:
    snap = snapshot_of(nodes(("a", {})))
    f = fw(reserve=("Reserver",))
    ok = make_pod("ok").info()
    r = f.schedule(snap, CycleState(), ok, reserve_and_permit=True)
    assert r.reserve_status is not None and r.reserve_status.is_success
    assert ok.uid in Reserver.reserved
    bad = make_pod("bad").labels(reserve="fail").info()
    r = f.schedule(snap, CycleState(), bad, reserve_and_permit=True)
    assert r.reserve_status is not None and r.reserve_status.code is Code.ERROR
    assert bad.uid not in Reserver.reserved


def test_permit_wait_is_capped_at_fifteen_minutes() -> None:
    """RunPermitPlugins: maxTimeout 15 minutes."""
    snap = snapshot_of(nodes(("a", {})))
    f = fw(permit=("WaitPermit",))
    r = f.schedule(
        snap, CycleState(), make_pod().labels(permit="wait").info(), reserve_and_permit=True
    )
    assert r.permit_status is not None and r.permit_status.code is Code.WAIT
    assert r.permit_timeouts == {"WaitPermit": 900.0}


def test_nodes_excluded_by_prefilter_result_count_in_the_fit_error() -> None:
    """findNodesThatFitPod: nodes outside PreFilterResult get an absent-node
    status naming the restricting plugins; FitError counts them."""
    snap = snapshot_of(nodes(("a", {"reject": "RejectLabel"}), ("b", {}), ("c", {})))
    f = fw(pre_filter=("OnlyNodes",), filter=("RejectLabel",))
    r = f.schedule(snap, CycleState(), make_pod().label("OnlyNodes", "a").info())
    assert r.status.code is Code.UNSCHEDULABLE
    assert r.message == (
        "0/3 nodes are available: 1 rejected by RejectLabel, "
        "2 node(s) didn't satisfy plugin(s) [OnlyNodes]."
    )


def test_no_nodes_is_unresolvable_and_a_fit_error_is_unschedulable() -> None:
    """schedulingCycle: ErrNoNodesAvailable -> UnschedulableAndUnresolvable;
    a FitError -> Unschedulable, even when every node was unresolvable."""
    empty = fw().schedule(snapshot_of([]), CycleState(), make_pod().info())
    assert empty.status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert empty.message == "no nodes available to schedule pods"
    snap = snapshot_of(nodes(("a", {"reject": "SkipPreFilter"})))
    r = fw(filter=("SkipPreFilter",)).schedule(snap, CycleState(), make_pod().info())
    assert r.status.code is Code.UNSCHEDULABLE


def test_a_plugin_that_raises_fails_the_cycle_with_an_error_naming_it() -> None:
    """A Python exception in a plugin is the plugin's Error status (upstream:
    a plugin returning an error), not a crash of the server."""
    snap = snapshot_of(nodes(("a", {}), ("b", {})))
    r = fw(score=(("RaisingScore", 1),)).schedule(snap, CycleState(), make_pod().info())
    assert r.node == ""
    assert r.status.code is Code.ERROR
    assert r.status.plugin == "RaisingScore"
    assert r.message == "running Score plugin 'RaisingScore': RuntimeError('kaput')"
