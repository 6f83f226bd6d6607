"""The shim's binding cycle after PreBindPreFlight (shim/binding.py):

- ScheduleResponse.pre_bind_skip: no PreBind call (framework.go
  RunPreBindPlugins would skip every plugin); without it (or from a server
  that predates it) PreBind is called as before when the profile has PreBind
  plugins;
- DefaultBinder as the only Bind plugin: the shim POSTs the binding itself,
  also when the profile has PreBind or PostBind plugins (which run around it);
- schedule_one.go bindingCycle, NominatedNodeNameForExpectation: when PreBind
  has work or the pod waits at Permit, status.nominatedNodeName is set to the
  node first (non-fatal), and a failed binding cycle clears it; otherwise
  nothing is written.

Fake plugin service and API server, then the real in-process plugin server
with the default profile to count the RPCs a pod costs.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import pytest
from opentelemetry import trace

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog, SchedulingClient
from berth.framework.config import default_config
from berth.framework.storage import PERSISTENT_VOLUME_CLAIMS, STORAGE_CLASSES
from berth.framework.testing import make_node, make_object, make_pod
from berth.framework.writes import config_writes
from berth.kube.errors import ApiError
from berth.kube.rest import KubeApi
from berth.plugins.registry import load_registry
from berth.server.app import build_frameworks
from berth.server.service import SchedulingService
from berth.shim.events import EventRecorder, ObjectRef
from berth.shim.informer import ADDED, MODIFIED, Event
from berth.shim.queue import UNSCHEDULABLE, QueuedPod
from berth.shim.scheduler import Scheduler
from berth.shim.service import InProcessStub, PluginService, ProfileInfo, SortKey

PROFILE = "p"
TIMEOUT = 5.0
DEFAULT_POINTS = {"preBind": ("VolumeBinding",), "bind": ("DefaultBinder",)}


class FakeService:
    """What the Scheduler uses of PluginService; node calls go to ``log``."""

    def __init__(self, log: list[tuple[str, ...]]) -> None:
        self.state = ClusterStateLog()
        self.profiles: dict[str, ProfileInfo] = {}
        self.address = "fake"
        self.log = log

    async def sort_keys(self, profile: str, pods: Sequence[pb.QueuedPod]) -> list[SortKey]:
        return [(-qp.pod.priority, qp.enqueued_unix_micros) for qp in pods]

    async def pre_enqueue(self, profile: str, pod: cpb.Pod) -> pb.Status:
        return pb.Status()

    async def node_call(
        self, method: str, profile: str, pod: cpb.Pod, node: str, cycle: pb.CycleState
    ) -> Any:
        self.log.append((method, pod.name))
        if method == "Bind":
            return pb.BindResponse(bound_by="DefaultBinder", caller_binds=True, node=node)
        return pb.StatusResponse()


class FakeApi:
    """Status patches and bindings, in one log with the node calls.
    ``fail``: paths whose requests fail with a 500."""

    def __init__(self, log: list[tuple[str, ...]]) -> None:
        self.log = log
        self.patches: list[tuple[str, Any]] = []
        self.fail: set[str] = set()

    def _maybe_fail(self, method: str, path: str) -> None:
        if any(path.endswith(f) for f in self.fail):
            raise ApiError(method, path, 500, b'{"message": "injected"}')

    def strategic_patch(self, path: str, patch: Any) -> None:
        self._maybe_fail("PATCH", path)
        self.patches.append((path, patch))
        nominated = patch.get("status", {}).get("nominatedNodeName", "absent")
        if nominated != "absent":
            self.log.append(("nominate", path.split("/")[-2], str(nominated)))

    def merge_patch(self, path: str, patch: Any) -> None:
        self.log.append(("write", path))

    def wait_for_token(self) -> None:
        return None

    def request(self, method: str, path: str, **_: Any) -> None:
        self._maybe_fail(method, path)
        self.log.append(("binding", path.split("/")[-2]))

    def get(self, path: str, **_: Any) -> dict[str, Any]:
        """The pod, unbound (a failed binding is checked with a GET): uid = name."""
        name = path.split("/")[-1]
        return {"metadata": {"name": name, "namespace": "default", "uid": name}, "spec": {}}


class FakeRecorder:
    def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def record(self, regarding: ObjectRef, type_: str, reason: str, action: str, note: str) -> None:
        return None


Harness = tuple[Scheduler, list[tuple[str, ...]], FakeApi, FakeService]


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    log: list[tuple[str, ...]] = []
    service = FakeService(log)
    service.profiles = {PROFILE: ProfileInfo(PROFILE, dict(DEFAULT_POINTS))}
    api = FakeApi(log)
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


async def popped(s: Scheduler, name: str, nominated: str = "") -> QueuedPod:
    pod = make_pod(name).uid(name).obj()
    pod.scheduler_name = PROFILE
    pod.nominated_node_name = nominated
    s.queue.add(pod, PROFILE)
    await s.queue.admit_incoming()
    (qp,) = await asyncio.wait_for(s.queue.pop_batch(1), TIMEOUT)
    assert qp.uid == name
    return qp


def placed(*, skip: bool, wait: bool = False) -> pb.ScheduleResponse:
    permit = pb.PermitResponse(status=pb.Status(code=pb.CODE_WAIT if wait else pb.CODE_SUCCESS))
    if wait:
        permit.wait_timeout_millis["Gang"] = 60_000
    return pb.ScheduleResponse(
        status=pb.Status(),
        node="n1",
        reserve_status=pb.Status(),
        permit=permit,
        pre_bind_skip=skip,
    )


def where(s: Scheduler, uid: str) -> str:
    qp = s.queue.get(uid)
    return "gone" if qp is None else qp.where


def handle(s: Scheduler, qp: QueuedPod, resp: pb.ScheduleResponse) -> None:
    s.scheduling_cycle.handle_result(
        qp, PROFILE, resp, trace.get_tracer("test").start_span("t"), time.perf_counter()
    )


async def until(check: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


async def done(s: Scheduler, bound: int = 0, failed: int = 0) -> None:
    await until(
        lambda: s.counters.bound == bound and s.counters.bind_failures == failed,
        f"{bound} bound, {failed} failed",
    )
    # Spawned status patches (the failure's condition) finish too.
    await asyncio.gather(*list(s.tasks))


async def test_pre_bind_skip_means_no_pre_bind_and_the_shim_binds(harness: Harness) -> None:
    s, log, api, _ = harness
    handle(s, await popped(s, "web"), placed(skip=True))
    await done(s, bound=1)
    # Neither PreBind nor Bind is asked, and no nomination is written.
    assert log == [("binding", "web")]
    assert api.patches == []


async def test_pre_bind_with_work_nominates_first_then_binds_from_the_shim(
    harness: Harness,
) -> None:
    """pre_bind_skip false (work to do, or a server that predates the field):
    nominatedNodeName, PreBind, then the binding POST without asking Bind."""
    s, log, _, _ = harness
    handle(s, await popped(s, "db"), placed(skip=False))
    await done(s, bound=1)
    assert log == [("nominate", "db", "n1"), ("PreBind", "db"), ("binding", "db")]


async def test_a_profile_without_pre_bind_plugins_never_asks_pre_bind(harness: Harness) -> None:
    s, log, _, service = harness
    service.profiles[PROFILE] = ProfileInfo(PROFILE, {"bind": ("DefaultBinder",)})
    handle(s, await popped(s, "web"), placed(skip=False))
    await done(s, bound=1)
    assert log == [("binding", "web")]


async def test_another_bind_plugin_is_asked_and_post_bind_still_runs(harness: Harness) -> None:
    s, log, _, service = harness
    service.profiles[PROFILE] = ProfileInfo(
        PROFILE, {"preBind": ("VolumeBinding",), "bind": ("Other",), "postBind": ("Audit",)}
    )
    handle(s, await popped(s, "web"), placed(skip=True))
    await done(s, bound=1)
    assert log == [("Bind", "web"), ("binding", "web"), ("PostBind", "web")]


async def test_post_bind_runs_after_the_shim_binds(harness: Harness) -> None:
    s, log, _, service = harness
    service.profiles[PROFILE] = ProfileInfo(PROFILE, {**DEFAULT_POINTS, "postBind": ("Audit",)})
    handle(s, await popped(s, "web"), placed(skip=True))
    await done(s, bound=1)
    assert log == [("binding", "web"), ("PostBind", "web")]


async def test_a_pod_waiting_at_permit_is_nominated_before_it_waits(harness: Harness) -> None:
    s, log, _, _ = harness
    handle(s, await popped(s, "member"), placed(skip=True, wait=True))
    await until(lambda: ("nominate", "member", "n1") in log, "nominated while waiting")
    assert s.counters.bound == 0
    s.waiting["member"].allow("Gang")
    await done(s, bound=1)
    assert log == [("nominate", "member", "n1"), ("binding", "member")]


async def test_a_pod_already_nominated_to_the_node_is_not_patched(harness: Harness) -> None:
    """updatePod writes nominatedNodeName only when it changes."""
    s, log, api, _ = harness
    handle(s, await popped(s, "db", nominated="n1"), placed(skip=False))
    await done(s, bound=1)
    assert log == [("PreBind", "db"), ("binding", "db")]
    assert api.patches == []


async def test_a_failed_nomination_does_not_stop_the_binding(harness: Harness) -> None:
    s, log, api, _ = harness
    api.fail = {"/db/status"}
    handle(s, await popped(s, "db"), placed(skip=False))
    await done(s, bound=1)
    assert log == [("PreBind", "db"), ("binding", "db")]


async def test_a_failed_binding_clears_the_nomination_it_wrote(harness: Harness) -> None:
    """handleBindingCycleError: FailureHandler with clearNominatedNode."""
    s, log, api, _ = harness
    api.fail = {"/db/binding"}
    handle(s, await popped(s, "db"), placed(skip=False))
    await done(s, failed=1)
    # (No Unreserve: the profile has no Reserve plugin.)
    assert log == [("nominate", "db", "n1"), ("PreBind", "db"), ("nominate", "db", "None")]
    (_, condition) = api.patches[-1]
    assert condition["status"]["conditions"][0]["reason"] == "SchedulerError"


def pre_flight_failed(*, wait: bool = False) -> pb.ScheduleResponse:
    resp = placed(skip=False, wait=wait)
    resp.pre_bind_pre_flight_error.CopyFrom(
        pb.Status(
            code=pb.CODE_ERROR,
            reasons=['running PreBindPreFlight "VolumeBinding": claim lookup failed'],
            plugin="VolumeBinding",
        )
    )
    return resp


@pytest.mark.parametrize("wait", [False, True], ids=["permitted", "waiting-at-permit"])
async def test_a_failed_pre_flight_ends_the_binding_cycle_before_anything_else(
    harness: Harness, wait: bool
) -> None:
    """schedule_one.go bindingCycle returns RunPreBindPreFlights' error before writing
    nominatedNodeName, before WaitOnPermit and before PreBind: nothing but Unreserve runs,
    and the pod goes back with the error, backing off."""
    s, log, api, service = harness
    service.profiles[PROFILE] = ProfileInfo(PROFILE, {**DEFAULT_POINTS, "reserve": ("R",)})
    handle(s, await popped(s, "db"), pre_flight_failed(wait=wait))
    await done(s, failed=1)
    assert log == [("Unreserve", "db")]
    assert "db" not in s.waiting
    (_, condition) = api.patches[-1]
    cond = condition["status"]["conditions"][0]
    assert cond["reason"] == "SchedulerError"
    assert cond["message"] == 'running PreBindPreFlight "VolumeBinding": claim lookup failed'
    assert where(s, "db") == "backoff"
    assert "db" not in s.cache.assumed


# -- the real plugin server, default profile ------------------------------------------


class CountingStub(InProcessStub):
    def __init__(self, service: Any) -> None:
        super().__init__(service)
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        call = super().__getattr__(name)

        async def counted(request: Any, **options: Any) -> Any:
            self.calls.append(name)
            return await call(request, **options)

        return counted


async def test_default_profile_pod_without_volumes_costs_one_rpc() -> None:
    """The default profile (VolumeBinding at PreBind, DefaultBinder): a pod
    without volumes is placed by Schedule and bound by the shim's POST, with
    no PreBind and no Bind RPC; a pod whose claim is to be provisioned gets
    PreBind (and its write) before the same POST."""
    registry = load_registry()
    config = default_config(registry)
    server = SchedulingService(config, build_frameworks(config, registry))
    stub = CountingStub(server)
    state = ClusterStateLog()
    service = PluginService(SchedulingClient(None, state, stub=stub), remote=False)
    # VolumeBinding's claim write: a kind it declares (Plugin.writes).
    service.declared_writes = config_writes(config, registry)
    await service.describe()
    log: list[tuple[str, ...]] = []
    api = FakeApi(log)
    s = Scheduler(
        cast(KubeApi, api),
        service,
        ["default-scheduler"],
        recorder=cast(EventRecorder, FakeRecorder()),
    )
    try:
        s.cache.upsert_node(make_node("n1").capacity(cpu="8", memory="8Gi").obj())
        state.upsert_object(
            make_object(
                STORAGE_CLASSES,
                "wait-sc",
                provisioner="example.com/csi",
                volumeBindingMode="WaitForFirstConsumer",
            )
        )
        claim = make_object(
            PERSISTENT_VOLUME_CLAIMS,
            "data",
            "default",
            spec={"storageClassName": "wait-sc", "resources": {"requests": {"storage": "1Gi"}}},
        )
        body = json.loads(claim.json)
        body["metadata"].update(uid="claim-uid", resourceVersion="3")
        claim.json = json.dumps(body).encode()
        state.upsert_object(claim)
        web = make_pod("web").uid("web").req(cpu="100m").obj()
        db = make_pod("db").uid("db").req(cpu="100m").obj()
        db.volumes.add(name="data", claim_name="data")
        db.pvc_names.append("data")
        for pod, want_calls, want_log in (
            (web, ["Schedule"], [("binding", "web")]),
            (
                db,
                ["Schedule", "PreBind"],
                [
                    ("nominate", "db", "n1"),
                    ("write", "/api/v1/namespaces/default/persistentvolumeclaims/data"),
                    ("binding", "db"),
                ],
            ),
        ):
            stub.calls.clear()
            log.clear()
            pod.scheduler_name = "default-scheduler"
            s.queue.add(pod, "default-scheduler")
            await s.queue.admit_incoming()
            batch = await asyncio.wait_for(s.queue.pop_batch(1), TIMEOUT)
            bound = s.counters.bound
            await s.scheduling_cycle.schedule(batch)
            await until(lambda b=bound: s.counters.bound == b + 1, f"{pod.name} bound")
            assert stub.calls == want_calls, pod.name
            assert log == want_log, pod.name
    finally:
        await s.stop()


async def test_the_cleared_binding_nomination_moves_no_pending_pod(harness: Harness) -> None:
    """A nomination the binding cycle wrote and its failure cleared moves no pod
    of lower or equal priority (its forgotten assumption moves none either, only
    after a preemption); a nomination PostFilter made does (hasNominatedNodeNameChanged)."""
    s, _, api, _ = harness
    api.fail = {"/db/binding"}
    db = await popped(s, "db")
    handle(s, db, placed(skip=False))
    await done(s, failed=1)
    other = await popped(s, "other")
    s.queue.done_unschedulable(other, frozenset({"NodeResourcesFit"}))
    assert where(s, "other") == UNSCHEDULABLE
    cleared = cpb.Pod()
    cleared.CopyFrom(db.pod)
    cleared.nominated_node_name = ""
    s.event_handlers.on_pod_events([Event(MODIFIED, "db", cleared, "2")])
    assert where(s, "other") == UNSCHEDULABLE
    # A preemption's nomination leaving its node (here: given up) does move it.
    nominee = make_pod("nominee").uid("nominee").obj()
    nominee.scheduler_name = PROFILE
    nominee.nominated_node_name = "n1"
    s.event_handlers.on_pod_events([Event(ADDED, "nominee", nominee, "3")])
    gone = cpb.Pod()
    gone.CopyFrom(nominee)
    gone.nominated_node_name = ""
    s.event_handlers.on_pod_events([Event(MODIFIED, "nominee", gone, "4")])
    assert where(s, "other") != UNSCHEDULABLE
