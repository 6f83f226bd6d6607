"""The runner of each extension point as upstream defines it
(pkg/scheduler/framework/runtime/framework.go)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.framework import Code, CycleState, PostFilterResult, Status
from berth.framework.config import default_config
from berth.framework.goquote import go_quote
from berth.framework.runtime import CycleError, DeadlineExceeded, Framework, ProfileError
from berth.framework.schedule_one import (
    NominatingMode,
    schedule_pod,
)
from berth.framework.testing import make_node, make_pod, snapshot_of
from berth.plugins.registry import REGISTRY as SHIPPED
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
    """updatePluginList: the plugin named as Go's %q prints it."""
    with pytest.raises(ProfileError, match='plugin "LabelScore" does not extend filter plugin'):
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
    r = schedule_pod(f, snap, CycleState(), pod)
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
    """RunScorePlugins: upstream's message names the plugin and the score, not
    the node (this test used to expect Berth's node name in it)."""
    snap = snapshot_of(nodes(("a", {"score": "10"}), ("b", {"score": "51"})))
    f = fw(score=(("DoubleNormalize", 1),))
    with pytest.raises(CycleError) as err:
        f.run_score(CycleState(), make_pod().info(), snap.all_nodes())
    assert err.value.status.code is Code.ERROR
    assert err.value.status.message == (
        'applying score defaultWeights on Score plugins: plugin "DoubleNormalize" returns an '
        "invalid score 102, it should in the range of [0, 100] after normalizing"
    )


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


def test_cycle_state_written_in_prefilter_is_returned() -> None:
    snap = snapshot_of(nodes(("a", {}), ("b", {})))
    state = CycleState()
    r = schedule_pod(fw(pre_filter=("SkipPreFilter",)), snap, state, make_pod().info())
    assert r.status.is_success
    again = CycleState.decode(state.encode())
    assert again.read(COUNTER).value == 2


def test_reserve_failure_runs_unreserve() -> None:
    snap = snapshot_of(nodes(("a", {})))
    f = fw(reserve=("Reserver",))
    ok = make_pod("ok").info()
    r = schedule_pod(f, snap, CycleState(), ok, reserve_and_permit=True)
    assert r.reserve_status is not None and r.reserve_status.is_success
    assert ok.uid in Reserver.reserved
    bad = make_pod("bad").labels(reserve="fail").info()
    r = schedule_pod(f, snap, CycleState(), bad, reserve_and_permit=True)
    assert r.reserve_status is not None and r.reserve_status.code is Code.ERROR
    assert bad.uid not in Reserver.reserved


def test_permit_wait_is_capped_at_fifteen_minutes() -> None:
    """RunPermitPlugins: maxTimeout 15 minutes."""
    snap = snapshot_of(nodes(("a", {})))
    f = fw(permit=("WaitPermit",))
    r = schedule_pod(
        f, snap, CycleState(), make_pod().labels(permit="wait").info(), reserve_and_permit=True
    )
    assert r.permit_status is not None and r.permit_status.code is Code.WAIT
    assert r.permit_timeouts == {"WaitPermit": 900.0}


def test_a_plugin_that_raises_fails_the_cycle_with_an_error_naming_it() -> None:
    """A Python exception in a plugin is the plugin's Error status (upstream:
    a plugin returning an error), not a crash of the server. Worded as
    RunScorePlugins wraps a Score error (this test used to expect Berth's own
    "running Score plugin 'X'" wording)."""
    snap = snapshot_of(nodes(("a", {}), ("b", {})))
    r = schedule_pod(fw(score=(("RaisingScore", 1),)), snap, CycleState(), make_pod().info())
    assert r.node == ""
    assert r.status.code is Code.ERROR
    assert r.status.plugin == "RaisingScore"
    assert r.message == (
        "running Score plugins: plugin \"RaisingScore\" failed with: RuntimeError('kaput')"
    )


# -- upstream v1.36 semantics: the RunXPlugins loops -------------------------


def test_run_pre_filter_plugins_unschedulable_lets_the_remaining_plugins_run() -> None:
    """RunPreFilterPlugins: Unschedulable does not stop the loop; the status
    returned is the last Unschedulable one, as the plugin returned it."""
    CallLog.reset()
    snap = snapshot_of(nodes(("a", {})))
    f = fw(pre_filter=("CodePreFilter", "CodePreFilter2", "CodePreFilter3"))
    pod = make_pod().labels(CodePreFilter="UNSCHEDULABLE", CodePreFilter3="UNSCHEDULABLE").info()
    _, st = f.run_pre_filter(CycleState(), pod, snap.all_nodes())
    assert [c[1] for c in CallLog.calls] == ["CodePreFilter", "CodePreFilter2", "CodePreFilter3"]
    assert st == Status(
        Code.UNSCHEDULABLE, ("CodePreFilter3 says UNSCHEDULABLE",), "CodePreFilter3"
    )


def test_run_pre_filter_plugins_unresolvable_stops_the_loop() -> None:
    CallLog.reset()
    snap = snapshot_of(nodes(("a", {})))
    f = fw(pre_filter=("CodePreFilter", "CodePreFilter2", "CodePreFilter3"))
    pod = make_pod().labels(
        CodePreFilter="UNSCHEDULABLE", CodePreFilter2="UNSCHEDULABLE_AND_UNRESOLVABLE"
    )
    _, st = f.run_pre_filter(CycleState(), pod.info(), snap.all_nodes())
    assert [c[1] for c in CallLog.calls] == ["CodePreFilter", "CodePreFilter2"]
    assert (st.code, st.plugin) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "CodePreFilter2")


def test_run_pre_filter_plugins_pending_is_an_error() -> None:
    """RunPreFilterPlugins: any code but Success, Skip, Unschedulable and
    UnschedulableAndUnresolvable (Pending included) is an Error naming the
    plugin as Go's %q prints it."""
    CallLog.reset()
    snap = snapshot_of(nodes(("a", {})))
    f = fw(pre_filter=("CodePreFilter2", "CodePreFilter3"))
    pod = make_pod().labels(CodePreFilter2="PENDING", CodePreFilter3="UNSCHEDULABLE").info()
    _, st = f.run_pre_filter(CycleState(), pod, snap.all_nodes())
    assert [c[1] for c in CallLog.calls] == ["CodePreFilter2"]
    assert st == Status(
        Code.ERROR,
        ('running PreFilter plugin "CodePreFilter2": CodePreFilter2 says PENDING',),
        "CodePreFilter2",
    )
    r = schedule_pod(f, snap, CycleState(), pod)
    assert r.status.code is Code.ERROR and r.pre_filter_status is None


@pytest.mark.parametrize("code", ["UNSCHEDULABLE_AND_UNRESOLVABLE", "PENDING", "UNSCHEDULABLE"])
def test_run_pre_filter_plugins_saves_the_skip_set_whatever_the_outcome(code: str) -> None:
    snap = snapshot_of(nodes(("a", {})))
    f = fw(pre_filter=("SkipPreFilter", "CodePreFilter"))
    pod = make_pod().labels(skip="yes", CodePreFilter=code).info()
    state = CycleState()
    _, st = f.run_pre_filter(state, pod, snap.all_nodes())
    assert not st.is_success
    assert state.skip_filter_plugins == {"SkipPreFilter"}


def test_run_pre_filter_plugins_names_conflicting_result_plugins_sorted() -> None:
    """RunPreFilterPlugins: sets.List(pluginsWithNodes) is sorted."""
    snap = snapshot_of(nodes(("a", {}), ("b", {})))
    f = fw(pre_filter=("OnlyNodes2", "OnlyNodes"))
    pod = make_pod().label("OnlyNodes", "a").label("OnlyNodes2", "b").info()
    _, st = f.run_pre_filter(CycleState(), pod, snap.all_nodes())
    assert st.message == "node(s) didn't satisfy plugin(s) [OnlyNodes OnlyNodes2] simultaneously"


def test_run_filter_plugins_error_names_the_plugin_as_go_quotes_it() -> None:
    """RunFilterPlugins: `running %q filter plugin: %w`."""
    snap = snapshot_of(nodes(("a", {})))
    with pytest.raises(CycleError) as err:
        fw(filter=("ErrorFilter",)).run_filter(CycleState(), make_pod().info(), snap.all_nodes())
    assert err.value.status.message == 'running "ErrorFilter" filter plugin: boom'


def test_run_post_filter_plugins_keeps_the_nomination_of_an_unschedulable_result() -> None:
    """RunPostFilterPlugins: the last non-noop result is returned even with
    the final Unschedulable status; reasons combine under the first plugin."""
    snap = snapshot_of(nodes(("a", {"reject": "RejectLabel"}), ("b", {"reject": "RejectLabel"})))
    f = fw(filter=("RejectLabel",), post_filter=("NominatingPostFilter", "QuietPostFilter"))
    pod = make_pod().labels(nominate="b").info()
    res, st = f.run_post_filter(CycleState(), pod, {})
    assert res == PostFilterResult("b")
    assert st == Status(
        Code.UNSCHEDULABLE,
        ("NominatingPostFilter could not help", "preemption would not help"),
        "NominatingPostFilter",
    )
    r = schedule_pod(f, snap, CycleState(), pod)
    assert (r.nominated_node, r.nominating_mode) == ("b", NominatingMode.OVERRIDE)
    assert r.message == (
        "0/2 nodes are available: 2 rejected by RejectLabel. "
        "NominatingPostFilter could not help, preemption would not help"
    )
    # An Error ends the loop without a result, its message unwrapped.
    error_pod = make_pod().labels(nominate="b", NominatingPostFilter="ERROR").info()
    res, st = f.run_post_filter(CycleState(), error_pod, {})
    assert res is None
    assert st == Status(
        Code.ERROR, ("NominatingPostFilter could not help",), "NominatingPostFilter"
    )


def test_run_pre_bind_plugins_skip_is_an_error() -> None:
    """RunPreBindPlugins: only plugins PreBindPreFlight skipped are passed
    over; a Skip from PreBind itself is neither Success nor a rejection."""
    f = fw(pre_bind=("CodePreBind",))
    st = f.run_pre_bind(CycleState(), make_pod().labels(CodePreBind="SKIP").info(), "a")
    assert st == Status(
        Code.ERROR, ('running PreBind plugin "CodePreBind": CodePreBind says SKIP',), "CodePreBind"
    )
    st = f.run_pre_bind(CycleState(), make_pod().labels(CodePreBind="UNSCHEDULABLE").info(), "a")
    assert st == Status(Code.UNSCHEDULABLE, ("CodePreBind says UNSCHEDULABLE",), "CodePreBind")
    assert f.run_pre_bind(CycleState(), make_pod().info(), "a").is_success


def test_run_permit_plugins_wait_status_keeps_the_plugin_reasons() -> None:
    """RunPermitPlugins: the returned Wait status is the last waiting
    plugin's, with upstream's sentence appended."""
    snap = snapshot_of(nodes(("a", {})))
    f = fw(permit=("WaitPermit", "WaitPermit2"))
    r = schedule_pod(
        f, snap, CycleState(), make_pod().labels(permit="wait").info(), reserve_and_permit=True
    )
    assert r.permit_status == Status(
        Code.WAIT,
        ("waiting for the gang", "one or more plugins asked to wait and no plugin rejected pod"),
    )
    assert r.permit_timeouts == {"WaitPermit": 900.0, "WaitPermit2": 30.0}


def test_run_pre_score_plugins_error_and_skip_set() -> None:
    """RunPreScorePlugins: `running PreScore plugin %q: %w`; the Skip set is
    saved even when a later plugin fails."""
    snap = snapshot_of(nodes(("a", {})))
    f = fw(pre_score=("SkipPreScore", "ErrorPreScore"), score=(("SkipPreScore", 1),))
    state = CycleState()
    st = f.run_pre_score(state, make_pod().info(), snap.all_nodes())
    assert st.message == 'running PreScore plugin "ErrorPreScore": no data'
    assert state.skip_score_plugins == {"SkipPreScore"}


def test_run_score_plugins_normalize_error_is_wrapped_as_upstream() -> None:
    """RunScorePlugins: `running Normalize on Score plugins: plugin %q failed
    with: %w`."""
    snap = snapshot_of(nodes(("a", {}), ("b", {})))
    with pytest.raises(CycleError) as err:
        fw(score=(("FailingNormalize", 1),)).run_score(
            CycleState(), make_pod().info(), snap.all_nodes()
        )
    assert err.value.status.message == (
        'running Normalize on Score plugins: plugin "FailingNormalize" failed with: '
        "cannot normalise"
    )


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("NodeResourcesFit", '"NodeResourcesFit"'),
        ('a"b\\c', '"a\\"b\\\\c"'),
        ("tab\tnew\nbell\a", '"tab\\tnew\\nbell\\a"'),
        ("\x01\x7f", '"\\x01\\x7f"'),
        ("é\u200b", '"é\\u200b"'),
    ],
)
def test_go_quote_prints_like_strconv_quote(text: str, want: str) -> None:
    assert go_quote(text) == want


def test_no_plugin_runs_after_the_requests_deadline() -> None:
    """Framework.begin_request(deadline): the cycle stops before the next
    plugin call with DeadlineExceeded (never an Error status a plugin
    returned), so the server can answer DEADLINE_EXCEEDED."""
    config = default_config(SHIPPED)
    fw = Framework(config.profiles[0], SHIPPED)
    snap = snapshot_of([make_node("n1").capacity(cpu="4", pods=10).obj()])
    pod = make_pod("p").req(cpu="1").info()
    fw.begin_request(time.perf_counter() - 0.01)
    with pytest.raises(DeadlineExceeded, match="before PreFilter plugin"):
        schedule_pod(fw, snap, CycleState(), pod)
    fw.begin_request(time.perf_counter() + 60)
    assert schedule_pod(fw, snap, CycleState(), pod).node == "n1"


def test_a_plugin_call_made_inside_another_of_the_same_plugin_gets_its_own_context() -> None:
    """The reused per-(point, plugin) context of Framework._plugin: a nested
    call of the same plugin at the same point (a plugin driving the
    framework again) neither shares its box nor ends the outer call's, and
    an exception in it still becomes an Error."""
    (profile_,) = default_config(SHIPPED).profiles
    f = Framework(profile_, SHIPPED)
    f.begin_request(None)
    pl = f.pre_filter[0]
    with f._plugin("PreFilter", pl) as outer:
        outer.append(Status.unschedulable("outer"))
        with f._plugin("PreFilter", pl) as inner:
            assert inner is not outer and inner == []
            inner.append(Status.unschedulable("inner"))
        assert [st.message for st in outer] == ["outer"]
    with f._plugin("PreFilter", pl) as again:
        assert again is outer and again == []
    with pytest.raises(CycleError, match="boom"), f._plugin("PreFilter", pl):
        raise ValueError("boom")
    with f._plugin("PreFilter", pl) as after:
        assert after == []
