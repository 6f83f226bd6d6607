"""A pod bound while its cycle or its binding ran (shim/schedule_one.py, shim/binding.py,
shim/cache.py).

A binding whose answer was lost may still have been made; another scheduler (or a
second leader) may bind the pod first. Upstream's answers: cache.go AssumePod
refuses a pod already in the cache, ForgetPod removes only an assumed pod, and
schedule_one.go handleSchedulingFailure does not queue a pod whose informer copy
is assigned. The shim must never move or drop the usage of a pod that is bound,
or the node it is on is overcommitted by the next cycle.

A fake API server with a pod table (bindings set ``spec.nodeName``, a second one
answers 409 as the real one does), a fake plugin service; the informer's events
are handed to the scheduler as the informer would.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import orjson
import pytest
from opentelemetry import trace

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog
from berth.framework.testing import make_node
from berth.kube.errors import ApiError
from berth.kube.records import pod_record
from berth.kube.rest import KubeApi
from berth.shim.events import EventRecorder, ObjectRef
from berth.shim.informer import DELETED, MODIFIED, Event
from berth.shim.queue import QueuedPod
from berth.shim.scheduler import Scheduler
from berth.shim.service import PluginService, ProfileInfo, SortKey

PROFILE = "p"
NS = "default"
TIMEOUT = 5.0


class FakeService:
    """What the Scheduler uses of PluginService: no Reserve, PreBind or
    PostBind plugins; DefaultBinder binds (the shim POSTs the binding)."""

    def __init__(self) -> None:
        self.state = ClusterStateLog()
        self.profiles = {PROFILE: ProfileInfo(PROFILE, {"bind": ("DefaultBinder",)})}
        self.address = "fake"
        self.calls: list[str] = []

    async def sort_keys(self, profile: str, pods: Sequence[pb.QueuedPod]) -> list[SortKey]:
        return [(0, qp.enqueued_unix_micros) for qp in pods]

    async def pre_enqueue(self, profile: str, pod: cpb.Pod) -> pb.Status:
        return pb.Status()

    async def node_call(
        self, method: str, profile: str, pod: cpb.Pod, node: str, cycle: pb.CycleState
    ) -> Any:
        self.calls.append(method)
        return pb.StatusResponse()


@dataclass
class FakeApi:
    """Pods by name as the API server has them. A binding sets the pod's node
    (409 when it has one, as registry/core/pod's assignPod answers); ``answer``
    replaces the answer to the next binding POST: (status, lands) sends
    ``status`` after making the binding when ``lands``, instead of it otherwise."""

    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    answer: tuple[int, bool] | None = None
    bindings: list[tuple[str, str]] = field(default_factory=list)
    gets: list[str] = field(default_factory=list)
    patches: list[tuple[str, Any]] = field(default_factory=list)

    def wait_for_token(self) -> None:
        return None

    def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> dict[str, Any]:
        assert method == "POST" and path.endswith("/binding"), (method, path)
        name = path.split("/")[-2]
        answer, self.answer = self.answer, None
        if answer is not None and not answer[1]:
            raise ApiError(method, path, answer[0], b'{"message": "injected"}')
        pod = self.pods.get(name)
        if pod is None:
            raise ApiError(method, path, 404, b'{"reason": "NotFound"}')
        if pod["metadata"]["uid"] != body["metadata"]["uid"]:
            raise ApiError(method, path, 409, b'{"message": "Precondition failed: UID"}')
        if pod["spec"].get("nodeName"):
            msg = f"pod {name} is already assigned to node {pod['spec']['nodeName']}"
            raise ApiError(method, path, 409, orjson.dumps({"message": msg}))
        pod["spec"]["nodeName"] = body["target"]["name"]
        self.bindings.append((name, body["target"]["name"]))
        if answer is not None:
            raise ApiError(method, path, answer[0], b'{"message": "injected after the write"}')
        return {}

    def get(self, path: str, **_: Any) -> dict[str, Any]:
        name = path.split("/")[-1]
        self.gets.append(name)
        pod = self.pods.get(name)
        if pod is None:
            raise ApiError("GET", path, 404, b'{"reason": "NotFound"}')
        return pod

    def strategic_patch(self, path: str, patch: Any) -> dict[str, Any]:
        self.patches.append((path, patch))
        return {}


class FakeRecorder:
    def __init__(self) -> None:
        self.reasons: list[tuple[str, str]] = []

    def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def record(
        self, regarding: ObjectRef, type_: str, reason: str, action: str, note: str, **_: Any
    ) -> None:
        self.reasons.append((regarding.name, reason))


@dataclass
class World:
    s: Scheduler
    api: FakeApi
    service: FakeService
    events: FakeRecorder

    def create(self, name: str, cpu: str = "1") -> dict[str, Any]:
        """A pending pod of the profile, in the API server and (as the
        informer's ADDED) in the shim's queue."""
        obj: dict[str, Any] = {
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
            "spec": {
                "schedulerName": PROFILE,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
            },
            "status": {"phase": "Pending"},
        }
        self.api.pods[name] = obj
        self.informer(name)
        return obj

    def bind_out_of_band(self, name: str, node: str) -> None:
        """Another scheduler (or a binding of ours whose answer was lost) binds the pod."""
        self.api.pods[name]["spec"]["nodeName"] = node

    def informer(self, name: str) -> None:
        """The informer delivers the pod as the API server has it now."""
        pod = pod_record(self.api.pods[name])
        self.s.event_handlers.on_pod_events([Event(MODIFIED, pod.uid, pod, "1")])

    async def pop(self, name: str) -> QueuedPod:
        await self.s.queue.admit_incoming()
        (qp,) = await asyncio.wait_for(self.s.queue.pop_batch(1), TIMEOUT)
        assert qp.pod.name == name
        return qp

    def result(self, qp: QueuedPod, resp: pb.ScheduleResponse) -> None:
        span = trace.get_tracer("test").start_span("t")
        self.s.scheduling_cycle.handle_result(qp, PROFILE, resp, span, time.perf_counter())

    async def settled(self) -> None:
        """Every binding cycle and status patch started so far has finished."""
        deadline = time.monotonic() + TIMEOUT
        while self.s.tasks:
            assert time.monotonic() < deadline, "tasks still running"
            await asyncio.gather(*list(self.s.tasks))

    def where(self, name: str) -> str:
        qp = self.s.queue.get(f"uid-{name}")
        return "gone" if qp is None else qp.where

    def node_of(self, name: str) -> str:
        """Where the cluster state (what the plugin service sees) counts the pod."""
        pod = self.s.cache.state.pods.get(f"uid-{name}")
        return pod.node_name if pod is not None else ""


def placed(node: str) -> pb.ScheduleResponse:
    return pb.ScheduleResponse(
        status=pb.Status(),
        node=node,
        reserve_status=pb.Status(),
        permit=pb.PermitResponse(status=pb.Status()),
        pre_bind_skip=True,
    )


def unschedulable() -> pb.ScheduleResponse:
    return pb.ScheduleResponse(
        status=pb.Status(code=pb.CODE_UNSCHEDULABLE, reasons=["Insufficient cpu"]),
        diagnosis=pb.Diagnosis(
            message="0/2 nodes are available: 2 Insufficient cpu.",
            unschedulable_plugins=["NodeResourcesFit"],
        ),
    )


@pytest.fixture
async def world() -> AsyncIterator[World]:
    service = FakeService()
    api = FakeApi()
    events = FakeRecorder()
    s = Scheduler(
        cast(KubeApi, api),
        cast(PluginService, service),
        [PROFILE],
        recorder=cast(EventRecorder, events),
        initial_backoff=60.0,
        max_backoff=60.0,
    )
    for name in ("n1", "n2"):
        s.cache.upsert_node(make_node(name).capacity(cpu="4", pods=110).obj())
    try:
        yield World(s, api, service, events)
    finally:
        await s.stop()


async def test_AssumePod_refuses_a_pod_bound_elsewhere_while_its_cycle_ran(world: World) -> None:
    """The cycle placed the pod on n1, but meanwhile it was bound to n2 and the
    informer said so. Assuming it anyway would move its usage to n1; the binding's
    409 would then forget it, leaving n2's usage short by the pod until its next
    watch event. The cycle ends instead: no binding, the pod stays counted on n2
    and leaves the queue (the pod is scheduled: no FailedScheduling, no condition)."""
    world.create("web")
    qp = await world.pop("web")
    world.bind_out_of_band("web", "n2")
    world.informer("web")

    world.result(qp, placed("n1"))
    await world.settled()

    assert world.api.bindings == []
    assert world.node_of("web") == "n2"
    assert not world.s.cache.is_assumed("uid-web")
    assert world.where("web") == "gone"
    assert world.api.patches == []
    assert world.events.reasons == []


@pytest.mark.parametrize("status", [0, 500, 503, 504])
async def test_a_binding_made_although_its_call_failed_counts_as_bound(
    world: World, status: int
) -> None:
    """No answer (a timeout, a dropped connection) or a 5xx after the write: the
    binding may have been made. The API server says it was, before any watch
    event does: the pod stays on its node and its binding cycle ends as bound,
    instead of being forgotten (its node's usage gone) and queued again."""
    world.create("web")
    qp = await world.pop("web")
    world.api.answer = (status, True)

    world.result(qp, placed("n1"))
    await world.settled()

    assert world.api.bindings == [("web", "n1")]
    assert world.api.gets == ["web"]
    assert world.node_of("web") == "n1"
    assert not world.s.cache.is_assumed("uid-web"), "the API server's copy replaced it"
    assert world.where("web") == "gone"
    assert world.s.counters.bound == 1
    assert world.events.reasons == [("web", "Scheduled")]
    assert world.api.patches == []


async def test_a_409_for_a_pod_bound_elsewhere_keeps_it_on_that_node(world: World) -> None:
    """The pod was bound to n2 by someone else just before our binding (the
    informer has not said so yet): 409 already assigned. The node it is on counts
    it from now on, and it is not retried."""
    world.create("web")
    qp = await world.pop("web")
    world.bind_out_of_band("web", "n2")

    world.result(qp, placed("n1"))
    await world.settled()

    assert world.api.bindings == []
    assert world.node_of("web") == "n2"
    assert world.where("web") == "gone"
    assert world.s.counters.bound == 0
    assert world.api.patches == []


@pytest.mark.parametrize(
    ("status", "looked_up"),
    [(409, True), (503, True), (0, True), (429, False)],
    ids=["409-spurious", "503-before-the-write", "no-answer-before-the-write", "429"],
)
async def test_a_binding_that_was_not_made_is_retried(
    world: World, status: int, looked_up: bool
) -> None:
    """A refused binding of a pod still unbound: the node gets its resources
    back and the pod backs off and is retried; a 409 is no proof that the pod is
    bound, so it is not dropped as if it were (it would never be scheduled)."""
    world.create("web")
    qp = await world.pop("web")
    world.api.answer = (status, False)

    world.result(qp, placed("n1"))
    await world.settled()

    assert world.api.bindings == []
    assert world.api.gets == (["web"] if looked_up else [])
    assert world.node_of("web") == ""
    assert world.where("web") == "backoff"
    assert world.s.counters.bind_failures == 1
    assert ("web", "FailedScheduling") in world.events.reasons


async def test_a_failed_attempt_of_a_pod_bound_meanwhile_is_not_queued_again(
    world: World,
) -> None:
    """handleSchedulingFailure: a pod whose informer copy is assigned is not put
    back in the queue (it would sit in the unschedulable pool and be scheduled
    again after the flush). Nothing is written to a scheduled pod's status."""
    world.create("web")
    qp = await world.pop("web")
    world.bind_out_of_band("web", "n2")
    world.informer("web")

    world.result(qp, unschedulable())
    await world.settled()

    assert world.where("web") == "gone"
    assert world.node_of("web") == "n2"
    assert world.api.patches == []
    assert world.events.reasons == []


async def test_the_informer_confirming_a_binding_then_a_lost_answer_keeps_the_pod(
    world: World,
) -> None:
    """The binding was made and the informer confirmed it before the call's
    failure came back: the pod is bound, counted on its node, and not retried."""
    world.create("web")
    qp = await world.pop("web")
    real_request = world.api.request
    loop = asyncio.get_running_loop()

    async def watch_event() -> None:
        world.informer("web")

    def request_then_watch(method: str, path: str, **kw: Any) -> dict[str, Any]:
        try:
            return real_request(method, path, **kw)
        finally:
            # The watch event is handled on the loop before the call's failure returns.
            asyncio.run_coroutine_threadsafe(watch_event(), loop).result(TIMEOUT)

    world.api.answer = (0, True)
    world.api.request = request_then_watch  # type: ignore[method-assign]
    world.result(qp, placed("n1"))
    await world.settled()

    assert world.node_of("web") == "n1"
    assert world.where("web") == "gone"
    assert world.api.patches == []


def delete_while_reading(world: World) -> None:
    """The pod is deleted while the shim's GET of it is under way: the GET answers
    the pod as it was (bound), and the informer's DELETED is handled on the loop
    before that answer is."""
    real_get = world.api.get
    loop = asyncio.get_running_loop()

    async def deleted(name: str) -> None:
        pod = pod_record(world.api.pods.pop(name))
        world.s.event_handlers.on_pod_events([Event(DELETED, pod.uid, pod, "2")])

    def get_then_delete(path: str, **kw: Any) -> dict[str, Any]:
        obj: dict[str, Any] = orjson.loads(orjson.dumps(real_get(path, **kw)))
        asyncio.run_coroutine_threadsafe(deleted(obj["metadata"]["name"]), loop).result(TIMEOUT)
        return obj

    world.api.get = get_then_delete  # type: ignore[method-assign]


async def test_a_pod_deleted_while_its_binding_in_doubt_is_checked_is_not_brought_back(
    world: World,
) -> None:
    """The binding's answer was lost (it landed); the GET that settles it reads the
    pod bound, but the pod is deleted before that answer is handled. The informer's
    deletion is the later news: the GET's copy must not put the pod back in the
    cache, where no event would ever remove it and its node would keep its
    resources for good."""
    world.create("web")
    qp = await world.pop("web")
    world.api.answer = (0, True)
    delete_while_reading(world)

    world.result(qp, placed("n1"))
    await world.settled()

    assert world.api.gets == ["web"]
    assert "uid-web" not in world.s.cache.state.pods
    assert not world.s.cache.is_assumed("uid-web")
    assert world.where("web") == "gone"
    assert world.s.counters.bound == 0
    assert ("web", "Scheduled") not in world.events.reasons


async def test_an_expired_assumed_pod_deleted_while_it_is_checked_is_not_brought_back(
    world: World,
) -> None:
    """The expiry of an assumed pod asks the API server; a pod deleted while that
    GET is under way stays deleted (the GET's older copy is not applied)."""
    world.create("web")
    qp = await world.pop("web")
    world.result(qp, placed("n1"))
    await world.settled()
    (entry,) = world.s.cache.assumed.values()  # bound; its watch event never came
    delete_while_reading(world)

    await world.s._check_expired(entry)

    assert "uid-web" not in world.s.cache.state.pods
    assert world.where("web") == "gone"


async def test_an_expired_assumed_pod_confirmed_while_it_is_checked_keeps_the_informer_copy(
    world: World,
) -> None:
    """The informer confirms the pod while the expiry's GET is under way: its copy
    is the truth and stays; the GET's answer changes nothing and queues nothing."""
    world.create("web")
    qp = await world.pop("web")
    world.result(qp, placed("n1"))
    await world.settled()
    (entry,) = world.s.cache.assumed.values()
    real_get = world.api.get
    loop = asyncio.get_running_loop()

    async def confirmed() -> None:
        world.informer("web")

    def stale_get(path: str, **kw: Any) -> dict[str, Any]:
        obj: dict[str, Any] = orjson.loads(orjson.dumps(real_get(path, **kw)))
        obj["spec"].pop("nodeName")  # the GET read an older copy
        asyncio.run_coroutine_threadsafe(confirmed(), loop).result(TIMEOUT)
        return obj

    world.api.get = stale_get  # type: ignore[method-assign]
    await world.s._check_expired(entry)

    assert world.node_of("web") == "n1"
    assert world.where("web") == "gone"
