"""The binding cycle while a PreBind plugin waits (shim/binding.py): PreBind
answers Wait with StatusResponse.recheck_after_ms (DynamicResources waiting
for devices' binding conditions, where upstream's PreBind polls every 5 s):

- the answer's writes are performed once, PreBind is called again after the
  delay with the cycle the last answer returned, and the pod is bound when it
  answers Success;
- an Error after a wait unreserves (with the latest cycle) and requeues;
- the pod deleted while it waits: no further PreBind, Unreserve, not retried;
- the leader's fence closed while it waits: no further PreBind, no write;
- a pod waiting never holds up another pod's binding cycle;
- Wait without a delay is a failure, as from a server that predates the field.

Fake plugin service and API server (tests/unit/shim/test_pre_bind_skip.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.framework.testing import make_node
from berth.kube.rest import KubeApi
from berth.shim.events import EventRecorder
from berth.shim.fence import LeaderFence
from berth.shim.informer import DELETED, MODIFIED, Event
from berth.shim.scheduler import Scheduler
from berth.shim.service import PluginService, ProfileInfo
from tests.unit.shim.test_pre_bind_skip import (
    DEFAULT_POINTS,
    PROFILE,
    FakeApi,
    FakeRecorder,
    FakeService,
    done,
    handle,
    placed,
    popped,
    until,
)

POINTS = {**DEFAULT_POINTS, "preBind": ("DynamicResources",), "reserve": ("DynamicResources",)}


def wait(ms: int = 10, key: str = "") -> pb.StatusResponse:
    """PreBind's Wait: recheck in ``ms``; the cycle it returns names ``key``."""
    resp = pb.StatusResponse(
        status=pb.Status(
            code=pb.CODE_WAIT,
            reasons=["waiting for binding conditions of claim c"],
            plugin="DynamicResources",
        ),
        recheck_after_ms=ms,
    )
    if key:
        resp.cycle.data[key] = b"x"
    return resp


def error(message: str) -> pb.StatusResponse:
    return pb.StatusResponse(
        status=pb.Status(code=pb.CODE_ERROR, reasons=[message], plugin="DynamicResources")
    )


class ScriptedService(FakeService):
    """PreBind answers from ``script`` in turn (then Success); every node
    call is logged with the cycle's data keys."""

    def __init__(self, log: list[tuple[str, ...]]) -> None:
        super().__init__(log)
        self.script: dict[str, list[pb.StatusResponse]] = {}
        self.cycles: list[tuple[str, str, tuple[str, ...]]] = []
        self.declared_writes: dict[str, Any] = {}

    async def node_call(
        self, method: str, profile: str, pod: cpb.Pod, node: str, cycle: pb.CycleState
    ) -> Any:
        self.cycles.append((method, pod.name, tuple(sorted(cycle.data))))
        if method == "PreBind":
            self.log.append((method, pod.name))
            answers = self.script.get(pod.name)
            if answers:
                return answers.pop(0)
            return pb.StatusResponse()
        return await super().node_call(method, profile, pod, node, cycle)


class WritingApi(FakeApi):
    # KubeApi.fence: None without leader election.
    fence: LeaderFence | None = None

    def merge_patch(self, path: str, patch: Any) -> Any:
        self.log.append(("write", path.split("/")[-1]))
        return {}


Harness = tuple[Scheduler, list[tuple[str, ...]], WritingApi, ScriptedService]


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    log: list[tuple[str, ...]] = []
    service = ScriptedService(log)
    service.profiles = {PROFILE: ProfileInfo(PROFILE, dict(POINTS))}
    api = WritingApi(log)
    s = Scheduler(
        cast(KubeApi, api),
        cast(PluginService, service),
        [PROFILE],
        recorder=cast(EventRecorder, FakeRecorder()),
        initial_backoff=60.0,
        max_backoff=60.0,
    )
    s.cache.upsert_node(make_node("n1").capacity(cpu="8").obj())
    try:
        yield s, log, api, service
    finally:
        await s.stop()


def pre_binds(log: Sequence[tuple[str, ...]], name: str) -> int:
    return sum(1 for e in log if e == ("PreBind", name))


def annotate(name: str) -> pb.ObjectWrite:
    """A write to the pod itself (needs no declaration: shim/guard.py)."""
    return pb.ObjectWrite(
        ref=cpb.ObjectRef(resource="pods", namespace="default", name=name),
        version="v1",
        merge_patch=json.dumps({"metadata": {"annotations": {"a": "b"}}}).encode(),
        plugin="DynamicResources",
    )


async def test_pre_bind_is_called_again_until_it_succeeds_then_the_pod_is_bound(
    harness: Harness,
) -> None:
    s, log, _, service = harness
    first = wait(key="DynamicResources/state")
    first.writes.append(annotate("gpu"))
    service.script["gpu"] = [first, wait(key="second")]
    handle(s, await popped(s, "gpu"), placed(skip=False))
    await done(s, bound=1)
    assert log == [
        ("nominate", "gpu", "n1"),
        ("PreBind", "gpu"),
        # The first answer's writes, once.
        ("write", "gpu"),
        ("PreBind", "gpu"),
        ("PreBind", "gpu"),
        ("binding", "gpu"),
    ]
    # Each call sends the cycle the previous answer returned.
    assert [c for c in service.cycles if c[0] == "PreBind"] == [
        ("PreBind", "gpu", ()),
        ("PreBind", "gpu", ("DynamicResources/state",)),
        ("PreBind", "gpu", ("second",)),
    ]
    assert "gpu" not in s.waiting.pre_bind


async def test_an_error_after_waiting_unreserves_with_the_latest_cycle_and_requeues(
    harness: Harness,
) -> None:
    s, log, _, service = harness
    service.script["gpu"] = [
        wait(key="waited"),
        error('running PreBind plugin "DynamicResources": device binding timeout: claim=c'),
    ]
    handle(s, await popped(s, "gpu"), placed(skip=False))
    await done(s, failed=1)
    assert pre_binds(log, "gpu") == 2
    assert ("binding", "gpu") not in log
    assert service.cycles[-1] == ("Unreserve", "gpu", ("waited",))
    assert s.queue.get("gpu") is not None
    assert not s.cache.is_assumed("gpu")


async def test_a_pod_deleted_while_pre_bind_waits_is_unreserved_and_not_retried(
    harness: Harness,
) -> None:
    s, log, _, service = harness
    # A recheck far away: only the deletion ends the wait soon.
    service.script["gpu"] = [wait(ms=30_000)]
    qp = await popped(s, "gpu")
    handle(s, qp, placed(skip=False))
    await until(lambda: "gpu" in s.waiting.pre_bind and pre_binds(log, "gpu") == 1, "waiting")
    assert s.cache.is_assumed("gpu")
    s.event_handlers.on_pod_events([Event(DELETED, "gpu", qp.pod, "9")])
    await until(lambda: ("Unreserve", "gpu", ()) in service.cycles, "unreserved")
    await asyncio.gather(*list(s.tasks))
    assert pre_binds(log, "gpu") == 1
    assert ("binding", "gpu") not in log
    assert s.counters.bound == 0 and s.counters.bind_failures == 0
    assert s.queue.get("gpu") is None


async def test_a_pod_being_deleted_ends_the_wait_too(harness: Harness) -> None:
    s, log, _, service = harness
    service.script["gpu"] = [wait(ms=30_000)]
    qp = await popped(s, "gpu")
    handle(s, qp, placed(skip=False))
    await until(lambda: "gpu" in s.waiting.pre_bind and pre_binds(log, "gpu") == 1, "waiting")
    terminating = cpb.Pod()
    terminating.CopyFrom(qp.pod)
    terminating.terminating = True
    s.event_handlers.on_pod_events([Event(MODIFIED, "gpu", terminating, "9")])
    await until(lambda: ("Unreserve", "gpu", ()) in service.cycles, "unreserved")
    await asyncio.gather(*list(s.tasks))
    assert pre_binds(log, "gpu") == 1 and ("binding", "gpu") not in log


async def test_a_closed_leader_fence_ends_the_wait_without_another_call(
    harness: Harness,
) -> None:
    s, log, api, service = harness
    fence = LeaderFence(10.0, lease="kube-system/berth")
    fence.renewed(time.monotonic())
    api.fence = fence
    service.script["gpu"] = [wait(ms=50)]
    qp = await popped(s, "gpu")
    handle(s, qp, placed(skip=False))
    await until(lambda: pre_binds(log, "gpu") == 1, "first PreBind")
    fence.lost("lost the lease")
    await done(s, failed=1)
    assert pre_binds(log, "gpu") == 1
    assert ("binding", "gpu") not in log
    # A deposed leader asks nothing more of the plugins and writes nothing.
    assert [c[0] for c in service.cycles] == ["PreBind"]


async def test_a_waiting_pod_does_not_hold_up_other_binding_cycles(harness: Harness) -> None:
    s, log, _, service = harness
    service.script["gpu"] = [wait(ms=30_000)]
    gpu = await popped(s, "gpu")
    handle(s, gpu, placed(skip=False))
    await until(lambda: "gpu" in s.waiting.pre_bind, "gpu waits")
    handle(s, await popped(s, "web"), placed(skip=True))
    await until(lambda: s.counters.bound == 1, "web bound while gpu waits")
    assert ("binding", "web") in log and ("binding", "gpu") not in log
    assert s.cache.is_assumed("gpu")
    s.event_handlers.on_pod_events([Event(DELETED, "gpu", gpu.pod, "9")])
    await until(lambda: ("Unreserve", "gpu", ()) in service.cycles, "gpu unreserved")


async def test_wait_without_a_recheck_delay_fails_the_binding_cycle(harness: Harness) -> None:
    s, log, _, service = harness
    service.script["gpu"] = [wait(ms=0)]
    handle(s, await popped(s, "gpu"), placed(skip=False))
    await done(s, failed=1)
    assert pre_binds(log, "gpu") == 1
    assert ("binding", "gpu") not in log
