"""PreBindPreFlight as upstream runs it (pkg/scheduler/framework/runtime/
framework.go RunPreBindPreFlights and RunPreBindPlugins with the skip set;
schedule_one.go bindingCycle), with the skip set carried in the CycleState
across the caller's round trip between the scheduling cycle and PreBind."""

from __future__ import annotations

import random
from typing import ClassVar

import msgspec
import pytest

from berth.api.v1 import scheduling_pb2 as spb
from berth.framework import Code, CycleState, StateKey, Status
from berth.framework.cycle_state import (
    PRE_BIND_PRE_FLIGHT_KEY,
    StateDecodeError,
)
from berth.framework.interfaces import PermitPlugin, PreBindPlugin
from berth.framework.model import PodInfo
from berth.framework.profile import PluginRef, ProfileConfig
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.testing import make_node, make_pod, snapshot_of
from berth.server.convert import schedule_response
from tests.unit.framework.fakes import REGISTRY as FAKES


class FlightA(PreBindPlugin):
    """PreBindPreFlight answers the code the pod's label ``<name>-flight``
    names (Success without it; ``RAISE`` raises); PreBind logs its call."""

    name = "FlightA"
    calls: ClassVar[list[tuple[str, str]]] = []

    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        FlightA.calls.append(("PreBindPreFlight", self.name))
        value = pod.proto.labels.get(f"{self.name}-flight")
        if value is None:
            return Status.success()
        if value == "RAISE":
            raise RuntimeError("boom")
        return Status(Code[value], (f"{self.name} says {value}",))

    def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        FlightA.calls.append(("PreBind", self.name))
        return Status.success()


class FlightB(FlightA):
    name = "FlightB"


class PlainPreBind(PreBindPlugin):
    """Does not override pre_bind_pre_flight: the default, Success."""

    name = "PlainPreBind"

    def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        FlightA.calls.append(("PreBind", self.name))
        return Status.success()


class RejectingPermit(PermitPlugin):
    name = "RejectingPermit"

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        if pod.proto.labels.get("permit") == "reject":
            return Status.unschedulable("rejected"), 0.0
        return Status.success(), 0.0


REGISTRY = {
    **FAKES,
    "FlightA": FlightA,
    "FlightB": FlightB,
    "PlainPreBind": PlainPreBind,
    "RejectingPermit": RejectingPermit,
}


def framework(*pre_bind: str, permit: tuple[str, ...] = ()) -> Framework:
    profile = ProfileConfig(
        scheduler_name="test",
        plugins={
            "queueSort": (PluginRef("Sort"),),
            "permit": tuple(PluginRef(n) for n in permit),
            "preBind": tuple(PluginRef(n) for n in pre_bind),
            "bind": (PluginRef("Binder"),),
        },
    )
    return Framework(profile, REGISTRY)


@pytest.fixture(autouse=True)
def _reset() -> None:
    FlightA.calls.clear()


def pod(**flight: str) -> PodInfo:
    return make_pod("p").labels(**{f"{k}-flight": v for k, v in flight.items()}).info()


def round_trip(state: CycleState) -> CycleState:
    """What the caller sends back: the encoded state of the response."""
    return CycleState.decode(state.encode())


def test_all_skip_is_skip_and_pre_bind_runs_no_plugin_after_a_round_trip() -> None:
    """RunPreBindPreFlights: Skip when every plugin skips; RunPreBindPlugins
    then leaves every skipped plugin out (getPreBindPluginGroups)."""
    fw = framework("FlightA", "FlightB")
    p = pod(FlightA="SKIP", FlightB="SKIP")
    state = CycleState()
    assert fw.run_pre_bind_pre_flights(state, p, "n1") == Status(Code.SKIP)
    assert state.skip_pre_bind_plugins == {"FlightA", "FlightB"}
    back = round_trip(state)
    assert back.skip_pre_bind_plugins == {"FlightA", "FlightB"}
    FlightA.calls.clear()
    assert fw.run_pre_bind(back, p, "n1").is_success
    assert FlightA.calls == []


def test_mixed_is_success_and_only_the_skipped_plugin_is_left_out() -> None:
    """Success when one or more plugins answer Success; the others' PreBind
    is skipped, the succeeding one's runs."""
    fw = framework("FlightA", "FlightB")
    p = pod(FlightA="SKIP")
    state = CycleState()
    assert fw.run_pre_bind_pre_flights(state, p, "n1").is_success
    assert FlightA.calls == [("PreBindPreFlight", "FlightA"), ("PreBindPreFlight", "FlightB")]
    FlightA.calls.clear()
    assert fw.run_pre_bind(round_trip(state), p, "n1").is_success
    assert FlightA.calls == [("PreBind", "FlightB")]


def test_the_default_pre_flight_is_success() -> None:
    """A plugin that has no PreBindPreFlight of its own is assumed to have
    work: the conservative answer."""
    fw = framework("PlainPreBind", "FlightA")
    p = pod(FlightA="SKIP")
    state = CycleState()
    assert fw.run_pre_bind_pre_flights(state, p, "n1").is_success
    FlightA.calls.clear()
    assert fw.run_pre_bind(round_trip(state), p, "n1").is_success
    assert FlightA.calls == [("PreBind", "PlainPreBind")]


def test_no_pre_bind_plugin_is_skip() -> None:
    """returningStatus starts as Skip: no PreBind plugin, nothing to do."""
    state = CycleState()
    assert framework().run_pre_bind_pre_flights(state, pod(), "n1").is_skip
    assert state.skip_pre_bind_plugins == set()
    assert state.encode() == {}


def test_error_stops_the_pre_flights_and_fails_pre_bind_after_a_round_trip() -> None:
    """An Error: `running PreBindPreFlight "<plugin>": <err>`, at once (the
    next plugin is not asked); bindingCycle returns it before PreBind, so the
    PreBind call answers it and runs no plugin."""
    fw = framework("FlightA", "FlightB")
    p = pod(FlightA="ERROR")
    state = CycleState()
    st = fw.run_pre_bind_pre_flights(state, p, "n1")
    want = Status(
        Code.ERROR, ('running PreBindPreFlight "FlightA": FlightA says ERROR',), "FlightA"
    )
    assert st == want
    assert FlightA.calls == [("PreBindPreFlight", "FlightA")]
    back = round_trip(state)
    assert back.skip_pre_bind_plugins == set()
    FlightA.calls.clear()
    assert fw.run_pre_bind(back, p, "n1") == want
    assert FlightA.calls == []


def test_an_error_after_a_skip_records_no_skip() -> None:
    """SetSkipPreBindPlugins is not reached on an Error."""
    fw = framework("FlightA", "FlightB")
    state = CycleState()
    assert fw.run_pre_bind_pre_flights(state, pod(FlightA="SKIP", FlightB="ERROR"), "n1").code is (
        Code.ERROR
    )
    assert state.skip_pre_bind_plugins == set()


@pytest.mark.parametrize(
    ("code", "label"),
    [
        ("UNSCHEDULABLE", "Unschedulable"),
        ("UNSCHEDULABLE_AND_UNRESOLVABLE", "UnschedulableAndUnresolvable"),
        ("WAIT", "Wait"),
        ("PENDING", "Pending"),
    ],
)
def test_codes_other_than_success_skip_error_are_errors(code: str, label: str) -> None:
    """Unschedulable and the rest are unsupported in PreBindPreFlight and
    treated as an Error, worded as upstream words it."""
    fw = framework("FlightA")
    state = CycleState()
    st = fw.run_pre_bind_pre_flights(state, pod(FlightA=code), "n1")
    assert st == Status(
        Code.ERROR,
        (
            f'PreBindPreFlight FlightA returned "{label}", which is unsupported. '
            "It is supposed to return Success, Skip, or Error status",
        ),
        "FlightA",
    )
    assert fw.run_pre_bind(round_trip(state), pod(), "n1") == st


def test_a_plugin_that_raises_is_an_error_naming_it() -> None:
    fw = framework("FlightA")
    st = fw.run_pre_bind_pre_flights(CycleState(), pod(FlightA="RAISE"), "n1")
    assert st == Status(
        Code.ERROR, ("running PreBindPreFlight \"FlightA\": RuntimeError('boom')",), "FlightA"
    )


def test_a_new_pre_flight_replaces_the_old_outcome() -> None:
    fw = framework("FlightA")
    state = CycleState()
    fw.run_pre_bind_pre_flights(state, pod(FlightA="ERROR"), "n1")
    assert fw.run_pre_bind_pre_flights(state, pod(FlightA="SKIP"), "n1").is_skip
    assert state.pre_bind_pre_flight_error is None
    assert round_trip(state).skip_pre_bind_plugins == {"FlightA"}


# -- in the scheduling cycle (schedule_one.go bindingCycle) ------------------------------


def schedule(fw: Framework, p: PodInfo) -> tuple[CycleState, bool, Status | None]:
    snap = snapshot_of([make_node("n1").capacity(cpu="4", memory="8Gi").obj()])
    state = CycleState()
    result = schedule_pod(fw, snap, state, p, reserve_and_permit=True, rng=random.Random(0))
    assert result.node == "n1"
    return state, result.pre_bind_skip, result.pre_bind_pre_flight_status


def test_the_cycle_runs_the_pre_flights_once_permit_lets_the_pod_on() -> None:
    fw = framework("FlightA", "FlightB", permit=("WaitPermit",))
    state, skip, st = schedule(fw, pod(FlightA="SKIP", FlightB="SKIP"))
    assert (skip, st) == (True, Status(Code.SKIP))
    assert round_trip(state).skip_pre_bind_plugins == {"FlightA", "FlightB"}
    _, skip, st = schedule(fw, pod(FlightA="SKIP"))
    assert (skip, st) == (False, Status())
    # A pod that waits at Permit: bindingCycle runs them before WaitOnPermit.
    waiting = make_pod("w").labels(permit="wait", **{"FlightA-flight": "SKIP"}).info()
    _, skip, st = schedule(fw, waiting)
    assert (skip, st) == (False, Status())


def test_the_cycle_without_reserve_and_permit_runs_no_pre_flight() -> None:
    fw = framework("FlightA")
    snap = snapshot_of([make_node("n1").capacity(cpu="4", memory="8Gi").obj()])
    result = schedule_pod(fw, snap, CycleState(), pod(FlightA="SKIP"))
    assert (result.node, result.pre_bind_skip, result.pre_bind_pre_flight_status) == (
        "n1",
        False,
        None,
    )
    assert FlightA.calls == []


@pytest.mark.parametrize("label", [{"reserve": "fail"}, {"permit": "reject"}], ids=str)
def test_a_reserve_failure_or_permit_rejection_runs_no_pre_flight(label: dict[str, str]) -> None:
    """No binding cycle follows: nothing to pre-flight."""
    profile = ProfileConfig(
        scheduler_name="test",
        plugins={
            "queueSort": (PluginRef("Sort"),),
            "reserve": (PluginRef("Reserver"),),
            "permit": (PluginRef("RejectingPermit"),),
            "preBind": (PluginRef("FlightA"),),
            "bind": (PluginRef("Binder"),),
        },
    )
    fw = Framework(profile, REGISTRY)
    snap = snapshot_of([make_node("n1").capacity(cpu="4", memory="8Gi").obj()])
    result = schedule_pod(
        fw, snap, CycleState(), make_pod("p").labels(**label).info(), reserve_and_permit=True
    )
    turned_away = result.permit_status or result.reserve_status
    assert turned_away is not None and not turned_away.is_success
    assert (result.pre_bind_skip, result.pre_bind_pre_flight_status) == (False, None)
    assert FlightA.calls == []


# -- the state's wire form -------------------------------------------------------------


def test_the_reserved_key_is_not_a_plugin_key() -> None:
    with pytest.raises(ValueError, match="reserved"):
        StateKey(PRE_BIND_PRE_FLIGHT_KEY, list)


def test_a_record_that_does_not_decode_is_bad_input_naming_the_key() -> None:
    with pytest.raises(StateDecodeError, match=PRE_BIND_PRE_FLIGHT_KEY):
        CycleState.decode({PRE_BIND_PRE_FLIGHT_KEY: msgspec.msgpack.encode([1, 2])})


def test_clone_keeps_the_pre_flight_outcome() -> None:
    state = CycleState()
    state.skip_pre_bind_plugins = {"FlightA"}
    other = state.clone()
    assert other.skip_pre_bind_plugins == {"FlightA"}
    other.skip_pre_bind_plugins.add("FlightB")
    assert state.skip_pre_bind_plugins == {"FlightA"}


@pytest.mark.parametrize(
    ("flight", "wanted"),
    [
        ({"FlightA": "SKIP", "FlightB": "SKIP"}, None),
        ({"FlightA": "SKIP"}, None),
        ({"FlightB": "ERROR"}, 'running PreBindPreFlight "FlightB": FlightB says ERROR'),
        ({"FlightA": "UNSCHEDULABLE"}, "which is unsupported"),
    ],
    ids=["all-skip", "some-work", "error", "unsupported-code"],
)
def test_the_answer_carries_a_failed_pre_flight(flight: dict[str, str], wanted: str | None) -> None:
    """server/convert.py schedule_response: ScheduleResponse.pre_bind_pre_flight_error is set
    exactly when RunPreBindPreFlights failed, with its message and plugin, so the caller can
    end the binding cycle where schedule_one.go bindingCycle does."""
    fw = framework("FlightA", "FlightB")
    snap = snapshot_of([make_node("n1").capacity(cpu="4", memory="8Gi").obj()])
    state = CycleState()
    result = schedule_pod(
        fw, snap, state, pod(**flight), reserve_and_permit=True, rng=random.Random(0)
    )
    out = schedule_response(result, state, 0, False)
    if wanted is None:
        assert not out.HasField("pre_bind_pre_flight_error")
        return
    err = out.pre_bind_pre_flight_error
    assert err.code == spb.CODE_ERROR
    assert wanted in "; ".join(err.reasons)
    assert err.plugin == next(iter(flight))
    assert not out.pre_bind_skip
