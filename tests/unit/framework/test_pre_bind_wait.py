"""A PreBind plugin that waits (framework/runtime.py run_pre_bind, the server's
PreBind handler): where upstream's PreBind blocks polling (DynamicResources'
binding conditions), the plugin answers Wait after
``CycleState.recheck_pre_bind_after``; the call answers Wait with the writes so
far and ``recheck_after_ms``; the plugins that succeeded before it are
recorded in the cycle state and not run again on the next call; Wait without
a recheck delay is an Error."""

from __future__ import annotations

import json
from typing import ClassVar

import pytest

from berth.api.v1 import scheduling_pb2 as spb
from berth.framework import Code, CycleState, Status
from berth.framework.interfaces import PreBindPlugin
from berth.framework.model import PodInfo
from berth.framework.objects import ObjectWrite
from berth.framework.profile import PluginRef, ProfileConfig
from berth.framework.runtime import Framework
from berth.framework.snapshot import Snapshot
from berth.framework.testing import make_node, make_pod, snapshot_of
from berth.server import handlers
from berth.server.convert import cycle_from_pb
from tests.unit.framework.fakes import REGISTRY as FAKES

CALLS: list[str] = []


class Annotates(PreBindPlugin):
    """Writes an annotation on the pod, once per call."""

    name = "Annotates"

    def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        CALLS.append(self.name)
        state.add_write(
            ObjectWrite("", "v1", "pods", pod.namespace, pod.name, {"metadata": {"x": "y"}})
        )
        return Status.success()


class Waits(PreBindPlugin):
    """Waits while its pod's ``ready`` label is not "true"; ``delay`` 0 asks
    for no recheck."""

    name = "Waits"
    delay: ClassVar[float] = 2.5

    def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        CALLS.append(self.name)
        if pod.proto.labels.get("ready") == "true":
            return Status.success()
        if Waits.delay:
            state.recheck_pre_bind_after(Waits.delay)
        return Status.wait("waiting for the device")


class After(Annotates):
    name = "After"


REGISTRY = {**FAKES, "Annotates": Annotates, "Waits": Waits, "After": After}


def framework() -> Framework:
    profile = ProfileConfig(
        scheduler_name="test",
        plugins={
            "queueSort": (PluginRef("Sort"),),
            "preBind": (PluginRef("Annotates"), PluginRef("Waits"), PluginRef("After")),
            "bind": (PluginRef("Binder"),),
        },
    )
    return Framework(profile, REGISTRY)


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()
    Waits.delay = 2.5


def test_a_waiting_plugin_keeps_the_writes_so_far_and_the_next_call_resumes_at_it() -> None:
    fw = framework()
    waiting = make_pod("p").info()
    state = CycleState()
    st = fw.run_pre_bind(state, waiting, "n1")
    assert st == Status(Code.WAIT, ("waiting for the device",), "Waits")
    assert state.pre_bind_recheck_after == 2.5
    assert [w.resource for w in state.writes] == ["pods"]
    assert CALLS == ["Annotates", "Waits"]
    # The caller sends the cycle back: Annotates does not run again.
    again = CycleState.decode(state.encode())
    assert again.pre_bind_done == {"Annotates"}
    CALLS.clear()
    assert fw.run_pre_bind(again, waiting, "n1").code is Code.WAIT
    assert CALLS == ["Waits"] and again.writes == []
    ready = make_pod("p").labels(ready="true").info()
    last = CycleState.decode(again.encode())
    CALLS.clear()
    assert fw.run_pre_bind(last, ready, "n1") == Status.success()
    assert CALLS == ["Waits", "After"]
    assert [w.resource for w in last.writes] == ["pods"]
    assert last.pre_bind_recheck_after == 0.0


def test_wait_without_a_recheck_is_an_error_and_drops_the_writes() -> None:
    Waits.delay = 0.0
    state = CycleState()
    st = framework().run_pre_bind(state, make_pod("p").info(), "n1")
    assert st.code is Code.ERROR and st.plugin == "Waits"
    assert st.message == (
        'running PreBind plugin "Waits": answered Wait without asking for a recheck: '
        "waiting for the device"
    )
    assert state.writes == []


def test_recheck_delay_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        CycleState().recheck_pre_bind_after(0)


class FakeCall:
    """What the server's PreBind handler asks of its call: the profile's
    Framework and the cluster state (a snapshot with the node)."""

    def __init__(self, fw: Framework) -> None:
        self.fw = fw
        self.snap = snapshot_of([make_node("n1").obj()])

    def framework(self, name: str) -> Framework:
        return self.fw

    def cluster(self, has_state: bool, state: object) -> tuple[Snapshot, int]:
        return self.snap, 7


def test_the_server_answers_wait_with_the_writes_and_recheck_after_ms() -> None:
    """server/handlers.py pre_bind."""
    fw = framework()
    request = spb.NodeRequest(profile="test", pod=make_pod("p").uid("u1").obj(), node="n1")
    out = handlers.pre_bind(FakeCall(fw), request)  # type: ignore[arg-type]
    assert out.status.code == spb.CODE_WAIT
    assert out.recheck_after_ms == 2500
    assert [json.loads(w.merge_patch) for w in out.writes] == [{"metadata": {"x": "y"}}]
    assert out.generation == 7
    back = cycle_from_pb(out.cycle)
    assert back.pre_bind_done == {"Annotates"}
    # The next call resumes at the waiting plugin.
    request.cycle.CopyFrom(out.cycle)
    request.pod.labels["ready"] = "true"
    CALLS.clear()
    out = handlers.pre_bind(FakeCall(fw), request)  # type: ignore[arg-type]
    assert out.status.code == spb.CODE_SUCCESS and out.recheck_after_ms == 0
    assert CALLS == ["Waits", "After"]
    assert len(out.writes) == 1
