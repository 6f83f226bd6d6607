"""What a cycle's plugins ask of other pods, collected by the runtime and sorted
by the point that asked (protos/README.md, "Signals to waiting pods" and "Pods
to activate"):

- waiting-pod signals from PostFilter (framework.go RunPostFilterPlugins; e.g.
  scheduler-plugins' Coscheduling.PostFilter rejecting the waiting members of a
  gang), from Reserve/Permit, and from the Unreserve that follows a failed
  Reserve or a Permit rejection, each attributed to its plugin;
- pods to activate (upstream's PodsToActivate under framework.PodsToActivateKey):
  asked for anywhere from PreFilter to Permit, carried in the cycle state between
  calls, handed over when Permit answers Success or Wait (schedule_one.go,
  prepareForBindingCycle) and dropped when the cycle fails; PreBind's and
  PostBind's for the end of the binding cycle.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
import pytest

from berth.framework import CycleState, PodInfo, PostFilterPlugin, Status
from berth.framework.cycle_state import (
    PODS_TO_ACTIVATE_KEY,
    StateDecodeError,
    StateKey,
)
from berth.framework.interfaces import PostFilterResult
from berth.framework.profile import PluginRef, ProfileConfig
from berth.framework.runtime import Framework
from berth.framework.schedule_one import ScheduleResult, schedule_pod
from berth.framework.status import Code
from berth.framework.testing import make_node, make_pod, snapshot_of
from tests.asker import Asker
from tests.unit.framework.fakes import Binder, Sort


class Quiet(PostFilterPlugin):
    """A second PostFilter plugin, so attribution per plugin shows."""

    name = "Quiet"

    def post_filter(
        self, state: CycleState, pod: PodInfo, rejected: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        state.signal_waiting_pod("waiting-q", False, "quiet")
        return None, Status(Code.UNSCHEDULABLE)


REGISTRY = {c.name: c for c in (Asker, Quiet, Sort, Binder)}
ASKER = (PluginRef(Asker.name),)


def framework() -> Framework:
    return Framework(
        ProfileConfig(
            scheduler_name="gang",
            plugins={
                "queueSort": (PluginRef("Sort"),),
                "preFilter": ASKER,
                "filter": ASKER,
                "postFilter": (PluginRef(Asker.name), PluginRef("Quiet")),
                "reserve": ASKER,
                "permit": ASKER,
                "preBind": ASKER,
                "bind": (PluginRef("Binder"),),
                "postBind": ASKER,
            },
        ),
        REGISTRY,
    )


def schedule(
    labels: Mapping[str, str], reserve_and_permit: bool = True
) -> tuple[Framework, CycleState, ScheduleResult]:
    fw = framework()
    snap = snapshot_of([make_node("n1").capacity(cpu="4").obj()])
    pod = make_pod("p")
    for k, v in labels.items():
        pod.label(k, v)
    state = CycleState()
    result = schedule_pod(fw, snap, state, pod.info(), reserve_and_permit=reserve_and_permit)
    return fw, state, result


# -- signals by point -------------------------------------------------------------------


def test_post_filter_signals_are_attributed_to_each_plugin_and_kept_apart() -> None:
    _, state, result = schedule({"fit": "no"})
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.post_filter_signals == [
        ("waiting-1", Asker.name, False, "p fits no node"),
        ("waiting-q", "Quiet", False, "quiet"),
    ]
    assert result.permit_signals == []
    assert result.unreserve_signals == []
    # A failed cycle activates nothing.
    assert result.activate_pod_uids == []
    assert state.current_plugin == ""


def test_run_post_filter_names_the_plugin_on_the_state() -> None:
    fw = framework()
    fw.handle.bind_snapshot(snapshot_of([make_node("n1").obj()]))
    state = CycleState()
    _, st = fw.run_post_filter(state, make_pod("p").info(), {"n1": Status.unschedulable("x")})
    assert st.code is Code.UNSCHEDULABLE
    assert [(uid, plugin) for uid, plugin, _, _ in state.permit_signals] == [
        ("waiting-1", Asker.name),
        ("waiting-q", "Quiet"),
    ]
    assert state.current_plugin == ""


@pytest.mark.parametrize("how", ["fail", "raise"])
def test_failed_reserve_reports_unreserve_signals_only(how: str) -> None:
    """RunReservePluginsReserve fails (a status, or a plugin that raised: an Error
    status): Unreserve runs, its signals are the Unreserve's; Permit never ran."""
    _, state, result = schedule({"reserve": how})
    rs = result.reserve_status
    assert rs is not None
    assert rs.code is (Code.UNSCHEDULABLE if how == "fail" else Code.ERROR)
    if how == "raise":
        assert "reserve broke" in rs.message
    assert result.permit_status is None
    assert result.permit_signals == []
    assert result.unreserve_signals == [("waiting-2", Asker.name, False, "p unreserved")]
    assert result.activate_pod_uids == []
    assert state.pods_to_activate == []
    assert PODS_TO_ACTIVATE_KEY not in state.encode()


def test_permit_rejection_reports_permit_then_unreserve_signals() -> None:
    _, state, result = schedule({"permit": "reject"})
    assert result.permit_status is not None
    assert result.permit_status.code is Code.UNSCHEDULABLE
    assert result.permit_signals == [("waiting-3", Asker.name, True, "")]
    assert result.unreserve_signals == [("waiting-2", Asker.name, False, "p unreserved")]
    assert result.activate_pod_uids == []
    assert state.pods_to_activate == []


# -- pods to activate -------------------------------------------------------------------


@pytest.mark.parametrize("permit", ["wait", "allow"])
def test_permit_success_or_wait_hands_over_what_the_whole_cycle_asked_to_activate(
    permit: str,
) -> None:
    """prepareForBindingCycle: after RunPermitPlugins (Wait or Success) the queue
    activates podsToActivate, filled since PreFilter, then clears the map."""
    _, state, result = schedule({"permit": permit})
    assert result.permit_status is not None
    assert result.permit_status.code is (Code.WAIT if permit == "wait" else Code.SUCCESS)
    assert result.activate_pod_uids == [
        "from-prefilter",
        "from-reserve",
        "from-permit",
    ]
    assert result.unreserve_signals == []
    assert state.pods_to_activate == []
    assert PODS_TO_ACTIVATE_KEY not in state.encode()


def test_pods_to_activate_travel_in_the_cycle_state_between_calls() -> None:
    """Without reserve_and_permit the cycle's requests stay in the state the caller
    sends to Reserve and Permit, under upstream's reserved key."""
    fw, state, result = schedule({}, reserve_and_permit=False)
    assert result.activate_pod_uids == []
    wire = state.encode()
    assert msgspec.msgpack.decode(wire[PODS_TO_ACTIVATE_KEY]) == ["from-prefilter"]

    # The caller's Reserve call, then its Permit call, each from the wire form.
    fw.handle.bind_snapshot(snapshot_of([make_node("n1").capacity(cpu="4").obj()]))
    pod = make_pod("p").info()
    reserve_state = CycleState.decode(wire)
    assert reserve_state.pods_to_activate == ["from-prefilter"]
    assert fw.run_reserve(reserve_state, pod, "n1").is_success
    permit_state = CycleState.decode(reserve_state.encode())
    st, _ = fw.run_permit(permit_state, pod, "n1")
    assert st.is_success
    assert permit_state.take_activations() == ["from-prefilter", "from-reserve", "from-permit"]
    assert PODS_TO_ACTIVATE_KEY not in permit_state.encode()


def test_pre_bind_and_post_bind_ask_for_activations_of_their_own() -> None:
    fw = framework()
    fw.handle.bind_snapshot(snapshot_of([make_node("n1").obj()]))
    pod = make_pod("p").info()
    state = CycleState()
    assert fw.run_pre_bind(state, pod, "n1").is_success
    assert state.take_activations() == ["from-prebind"]
    fw.run_post_bind(state, pod, "n1")
    assert state.take_activations() == ["from-postbind"]


# -- CycleState.activate_pods -------------------------------------------------------------


def test_activate_pods_keeps_order_and_names_each_pod_once() -> None:
    state = CycleState()
    state.activate_pods(["b", "a"])
    state.activate_pods(("a", "c"))
    assert state.pods_to_activate == ["b", "a", "c"]
    assert state.take_activations() == ["b", "a", "c"]
    assert state.take_activations() == []


def test_activate_pods_refuses_one_string_and_empty_uids() -> None:
    state = CycleState()
    with pytest.raises(TypeError, match="iterable of pod uids, not one string"):
        state.activate_pods("uid-1")
    with pytest.raises(ValueError, match="a pod uid must be a non-empty string, got ''"):
        state.activate_pods(["ok", ""])
    with pytest.raises(ValueError, match="got 7"):
        state.activate_pods([7])  # type: ignore[list-item]


def test_the_reserved_key_is_not_a_plugin_key_and_bad_wire_data_is_refused() -> None:
    with pytest.raises(ValueError, match="reserved for the pods to activate"):
        StateKey(PODS_TO_ACTIVATE_KEY, list)
    with pytest.raises(StateDecodeError, match="not a msgpack list of pod uids"):
        CycleState.decode({PODS_TO_ACTIVATE_KEY: msgspec.msgpack.encode({"a": 1})})


def test_clone_shares_the_pods_to_activate_as_upstream() -> None:
    """PodsToActivate.Clone returns itself: what a what-if copy asks for counts."""
    state = CycleState()
    state.activate_pods(["a"])
    other = state.clone()
    other.activate_pods(["b"])
    assert state.pods_to_activate == ["a", "b"]
