"""The shim's side of preemption (shim/preemption.py, shim/schedule_one.py,
shim/eventhandlers.py), with a fake plugin service and a fake API server. Each test
names the upstream function whose behaviour it pins down:

- pkg/scheduler/framework/preemption/executor.go: prepareCandidateAsync (the victims'
  calls run in a task of their own; victims already terminating get none; a failure
  activates the preemptor), PreemptPod (a victim waiting at Permit is rejected in memory;
  any other gets the DisruptionTarget condition, is deleted with its uid as precondition,
  and gets the Preempted event), clearNominatedNodeName, IsPodRunningPreemption (the
  preemptor is held at PreEnqueue meanwhile);
- pkg/scheduler/schedule_one.go: handleSchedulingFailure and updatePod (the nominated node
  is patched with the PodScheduled condition; clearNominatedNode on errors),
  handleBindingCycleError (forgetting an assumed pod moves the pods its deletion may help);
- pkg/scheduler/backend/queue/nominator.go: nominated pods in the cluster state, from the
  moment PostFilter nominates them (addNominatedPod, UpdateNominatedPod,
  DeleteNominatedPodIfExists), and eventhandlers.go: a nomination that leaves a node moves
  pods of lower or equal priority.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import orjson
import pytest
from opentelemetry import trace
from prometheus_client import REGISTRY

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog
from berth.framework.testing import make_node, make_pod
from berth.kube.errors import ApiError
from berth.kube.rest import KubeApi
from berth.shim.binding import WaitingPod
from berth.shim.events import EventRecorder, ObjectRef
from berth.shim.informer import ADDED, DELETED, MODIFIED, Event
from berth.shim.queue import ACTIVE, BACKOFF, GATED, UNSCHEDULABLE, QueuedPod
from berth.shim.scheduler import Scheduler, ShimOptions
from berth.shim.service import PluginService, ProfileInfo, SortKey

PROFILE = "preempting"
TIMEOUT = 5.0
GATE = "waiting for the preemption for this pod to be finished"


class FakeService:
    """What the Scheduler uses of PluginService."""

    def __init__(self) -> None:
        self.state = ClusterStateLog()
        self.profiles: dict[str, Any] = {}
        self.address = "fake"
        self.calls: list[tuple[str, str]] = []
        self.scheduled: list[cpb.Pod] = []

    async def schedule(
        self,
        profile: str,
        pod: cpb.Pod,
        start_index: int,
        cycle: int = 0,
        *,
        explain: bool = False,
        seed: int = 0,
        preemption_candidates: bool = False,
    ) -> pb.ScheduleResponse:
        self.scheduled.append(pod)
        return no_fit()

    async def sort_keys(self, profile: str, pods: Sequence[pb.QueuedPod]) -> list[SortKey]:
        return [(-qp.pod.priority, qp.enqueued_unix_micros) for qp in pods]

    async def pre_enqueue(self, profile: str, pod: cpb.Pod) -> pb.Status:
        return pb.Status()

    async def node_call(
        self, method: str, profile: str, pod: cpb.Pod, node: str, cycle: pb.CycleState
    ) -> Any:
        self.calls.append((method, pod.name))
        if method == "Bind":
            return pb.BindResponse(bound_by="DefaultBinder", caller_binds=True, node=node)
        return pb.StatusResponse()


class FakeApi:
    """Records the writes; ``fail`` maps (verb, pod name) to the HTTP status to answer;
    ``hold`` blocks every write until it is set; ``delay`` slows down every write that
    does not fail."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, Any]] = []
        self.fail: dict[tuple[str, str], int] = {}
        self.hold = threading.Event()
        self.hold.set()
        self.delay = 0.0
        self._lock = threading.Lock()

    def _write(self, verb: str, path: str, body: Any) -> dict[str, Any]:
        assert self.hold.wait(TIMEOUT), "held write never released"
        name = path.split("/pods/")[1].split("/")[0]
        status = self.fail.get((verb, name))
        if not status and self.delay:
            time.sleep(self.delay)
        with self._lock:
            self.writes.append((verb, path, body))
        if status == 422:
            # What the API server answers a patch whose metadata.uid is another pod's.
            raise ApiError(
                verb.upper(),
                path,
                status,
                b'{"reason": "Invalid", "message": "metadata.uid: field is immutable",'
                b' "details": {"causes": [{"field": "metadata.uid"}]}}',
            )
        if status:
            raise ApiError(verb.upper(), path, status, b'{"reason": "Test", "message": "no"}')
        return {}

    def strategic_patch(self, path: str, patch: Any) -> dict[str, Any]:
        return self._write("patch", path, patch)

    def delete(self, path: str, *, uid: str = "") -> dict[str, Any]:
        return self._write("delete", path, {"uid": uid})

    def wait_for_token(self) -> None:
        return None

    def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        return self._write(method.lower(), path, None)

    def get(self, path: str, **_: Any) -> dict[str, Any]:
        """The pod, unbound (a failed binding is checked with a GET): uid = name."""
        name = path.split("/")[-1]
        return {"metadata": {"name": name, "namespace": "default", "uid": name}, "spec": {}}

    def of(self, verb: str, name: str) -> list[Any]:
        with self._lock:
            return [b for v, p, b in self.writes if v == verb and f"/pods/{name}" in p]


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str, str | None]] = []

    def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def record(
        self,
        regarding: ObjectRef,
        type_: str,
        reason: str,
        action: str,
        note: str,
        *,
        related: ObjectRef | None = None,
    ) -> None:
        self.events.append(
            (regarding.name, reason, action, note, related.uid if related is not None else None)
        )


Env = tuple[Scheduler, FakeService, FakeApi, FakeRecorder]


def two_node_scheduler(service: FakeService, api: FakeApi, recorder: FakeRecorder) -> Scheduler:
    """A Scheduler on the fakes with nodes n1 and n2 (2 cpu each)."""
    s = Scheduler(
        cast(KubeApi, api),
        cast(PluginService, service),
        [PROFILE],
        recorder=cast(EventRecorder, recorder),
        # Bindings through FakeApi.request, from the worker threads.
        options=ShimOptions(bind_connections=0),
        # Long: no pod leaves the backoff queue by itself during a test.
        initial_backoff=60.0,
        max_backoff=60.0,
    )
    s.cache.upsert_node(make_node("n1").capacity(cpu="2").obj())
    s.cache.upsert_node(make_node("n2").capacity(cpu="2").obj())
    s.cache.state.commit()
    return s


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    service = FakeService()
    api = FakeApi()
    recorder = FakeRecorder()
    s = two_node_scheduler(service, api, recorder)
    try:
        yield s, service, api, recorder
    finally:
        api.hold.set()
        await s.stop()


def pending(name: str, priority: int = 0, nominated: str = "") -> cpb.Pod:
    pod = make_pod(name).uid(name).priority(priority).req(cpu="1").obj()
    pod.scheduler_name = PROFILE
    pod.nominated_node_name = nominated
    return pod


def running(name: str, node: str, priority: int = 0, terminating: bool = False) -> cpb.Pod:
    pod = make_pod(name).uid(name).priority(priority).req(cpu="1").node(node).obj()
    pod.scheduler_name = "someone-else"
    pod.phase = "Running"
    pod.terminating = terminating
    return pod


def event(kind: str, pod: cpb.Pod) -> Event[cpb.Pod]:
    return Event(kind, pod.uid, pod, "1")


async def popped(s: Scheduler, *pods: cpb.Pod) -> list[QueuedPod]:
    """The pods, added (as the informer reports them), admitted and popped (in flight), in
    order."""
    s.event_handlers.on_pod_events([event(ADDED, pod) for pod in pods])
    await s.queue.admit_incoming()
    batch = await asyncio.wait_for(s.queue.pop_batch(len(pods)), TIMEOUT)
    assert [qp.uid for qp in batch] == [p.uid for p in pods]
    return batch


async def unschedulable(s: Scheduler, pod: cpb.Pod) -> QueuedPod:
    (qp,) = await popped(s, pod)
    s.queue.done_unschedulable(qp, frozenset({"NodeResourcesFit"}))
    assert where(s, pod.uid) == UNSCHEDULABLE
    return qp


def where(s: Scheduler, uid: str) -> str:
    qp = s.queue.get(uid)
    return "gone" if qp is None else qp.where


def handle(s: Scheduler, qp: QueuedPod, resp: pb.ScheduleResponse) -> None:
    s.scheduling_cycle.handle_result(
        qp, PROFILE, resp, trace.get_tracer("test").start_span("t"), time.perf_counter()
    )


def no_fit(
    nominated: str = "",
    victims: Sequence[cpb.Pod] = (),
    clear: Sequence[str] = (),
    post_filter: bool = True,
    plugin: str = "DefaultPreemption",
) -> pb.ScheduleResponse:
    resp = pb.ScheduleResponse(
        status=pb.Status(code=pb.CODE_UNSCHEDULABLE),
        diagnosis=pb.Diagnosis(
            message="0/2 nodes are available: 2 Insufficient cpu.",
            unschedulable_plugins=["NodeResourcesFit"],
        ),
    )
    if post_filter:
        resp.post_filter.CopyFrom(
            pb.PostFilterResponse(
                status=pb.Status(code=pb.CODE_SUCCESS if nominated else pb.CODE_UNSCHEDULABLE),
                nominated_node_name=nominated,
                victims=[pb.Victim(uid=v.uid, namespace=v.namespace, name=v.name) for v in victims],
                clear_nomination_pod_uids=list(clear),
                plugin=plugin if nominated else "",
            )
        )
    return resp


async def until(check: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


async def settled(s: Scheduler) -> None:
    """Every preemption and status patch started so far has finished."""
    await until(lambda: not s.preemption.preempting, "preemptions finished")
    for _ in range(50):
        await asyncio.sleep(0)
    busy = [t for t in s.tasks if not t.done() and "patch_condition" in repr(t.get_coro())]
    await asyncio.gather(*busy)


def metric(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


def victims_on(s: Scheduler, node: str, *names: str, priority: int = 0) -> list[cpb.Pod]:
    out = [running(n, node, priority) for n in names]
    s.event_handlers.on_pod_events([event(ADDED, p) for p in out])
    return out


# -- prepareCandidateAsync and PreemptPod ---------------------------------------------------


async def test_prepareCandidateAsync_evicts_victims_without_blocking_the_cycle(env: Env) -> None:
    s, _, api, recorder = env
    v1, v2 = victims_on(s, "n1", "v1", "v2")
    (qp,) = await popped(s, pending("high", priority=100))
    attempts = metric("scheduler_preemption_attempts_total")
    observed = metric("scheduler_preemption_victims_count")
    api.hold.clear()
    handle(s, qp, no_fit("n1", [v1, v2]))
    # The cycle is over; the API calls wait in the background, the pod is held.
    assert s.preemption.preempting == {"high": "DefaultPreemption"}
    assert where(s, "high") == UNSCHEDULABLE
    assert api.writes == []
    # Nominated in memory before any API call lands (nominator.go addNominatedPod).
    assert s.cache.nominated == {"high": "n1"}
    assert s.cache.state.pods["high"].nominated_node_name == "n1"
    assert s.cache.state.pods["high"].node_name == ""
    api.hold.set()
    await settled(s)
    for name in ("v1", "v2"):
        (patch,) = api.of("patch", name)
        (cond,) = patch["status"]["conditions"]
        assert patch["metadata"] == {"uid": name}
        assert (cond["type"], cond["status"], cond["reason"]) == (
            "DisruptionTarget",
            "True",
            "PreemptionByScheduler",
        )
        assert cond["message"] == f"{PROFILE}: preempting to accommodate a higher priority pod"
        assert api.of("delete", name) == [{"uid": name}]
    preempted = sorted(e for e in recorder.events if e[1] == "Preempted")
    assert preempted == [
        (name, "Preempted", "Preempting", "Preempted by pod high on node n1", "high")
        for name in ("v1", "v2")
    ]
    # handleSchedulingFailure's status patch carries the nomination.
    (status,) = api.of("patch", "high")
    assert status["status"]["nominatedNodeName"] == "n1"
    assert status["status"]["conditions"][0]["reason"] == "Unschedulable"
    assert metric("scheduler_preemption_attempts_total") == attempts + 1
    assert metric("scheduler_preemption_victims_count") == observed + 1
    # Finished: no longer held, and left where it was (the deletions will move it).
    assert where(s, "high") == UNSCHEDULABLE


async def test_PreemptPod_rejects_a_victim_waiting_at_Permit_without_an_api_call(
    env: Env,
) -> None:
    s, service, api, recorder = env
    (waiter,) = await popped(s, pending("waiter"))
    handle(
        s,
        waiter,
        pb.ScheduleResponse(
            status=pb.Status(),
            node="n1",
            reserve_status=pb.Status(),
            permit=pb.PermitResponse(
                status=pb.Status(code=pb.CODE_WAIT), wait_timeout_millis={"Gang": 60_000}
            ),
        ),
    )
    assert isinstance(s.waiting.get("waiter"), WaitingPod)
    (qp,) = await popped(s, pending("high", priority=100))
    handle(s, qp, no_fit("n1", [s.cache.state.pods["waiter"]]))
    await settled(s)
    await until(lambda: "waiter" not in s.waiting, "the waiting victim released")
    await settled(s)
    assert api.of("delete", "waiter") == [] and api.of("patch", "waiter") != []
    # The patches of the waiter are its nominatedNodeName (bindingCycle sets it for a
    # pod that waits at Permit, NominatedNodeNameForExpectation) and its own
    # FailedScheduling status, not DisruptionTarget.
    patches = api.of("patch", "waiter")
    assert patches[0]["status"] == {"nominatedNodeName": "n1"}
    assert all(
        c["type"] == "PodScheduled"
        for body in patches
        for c in body["status"].get("conditions", [])
    )
    assert ("Unreserve", "waiter") in service.calls
    assert not s.cache.is_assumed("waiter")
    notes = {(e[0], e[1]): e[3] for e in recorder.events}
    assert notes[("waiter", "Preempted")] == (
        "Preempted by pod high on node n1 (in kube-scheduler memory)."
    )
    assert notes[("waiter", "FailedScheduling")] == "preempted (plugin DefaultPreemption)"
    # WaitingPod.Preempt is an Error: the victim waits out an error backoff.
    assert where(s, "waiter") == BACKOFF
    # Forgetting it freed room (handleBindingCycleError): the preemptor is moved.
    assert where(s, "high") in (BACKOFF, "", ACTIVE)


async def test_prepareCandidateAsync_skips_victims_already_terminating(env: Env) -> None:
    s, _, api, _ = env
    gone = running("gone", "n1", terminating=True)
    live = running("live", "n1")
    s.event_handlers.on_pod_events([event(ADDED, gone), event(ADDED, live)])
    (qp,) = await popped(s, pending("high", priority=100))
    handle(s, qp, no_fit("n1", [gone, live]))
    await settled(s)
    assert api.of("delete", "gone") == [] and api.of("patch", "gone") == []
    assert api.of("delete", "live") == [{"uid": "live"}]


async def test_prepareCandidateAsync_with_every_victim_terminating_starts_nothing(
    env: Env,
) -> None:
    s, _, api, _ = env
    gone = running("gone", "n1", terminating=True)
    s.event_handlers.on_pod_events([event(ADDED, gone)])
    s.event_handlers.on_pod_events([event(ADDED, pending("low", nominated="n1"))])
    (qp,) = await popped(s, pending("high", priority=100))
    handle(s, qp, no_fit("n1", [gone], clear=["low"]))
    assert s.preemption.preempting == {}
    await settled(s)
    # Not even the lower-priority nominations are cleared (the goroutine never starts).
    assert api.of("patch", "low") == [] and api.of("delete", "gone") == []
    assert s.cache.nominated["high"] == "n1"


async def test_PreemptPod_victim_already_gone_is_no_failure(env: Env) -> None:
    s, _, api, recorder = env
    v404, v409, v422 = victims_on(s, "n1", "v404", "v409", "v422")
    api.fail[("delete", "v404")] = 404
    # Another pod of that name: the uid differs (delete precondition, patch).
    api.fail[("delete", "v409")] = 409
    api.fail[("patch", "v422")] = 422
    (qp,) = await popped(s, pending("high", priority=100))
    handle(s, qp, no_fit("n1", [v404, v409, v422]))
    await settled(s)
    assert api.of("delete", "v422") == []
    assert [e for e in recorder.events if e[1] == "Preempted"] == []
    # A success: not activated.
    assert where(s, "high") == UNSCHEDULABLE


async def test_prepareCandidateAsync_failure_activates_the_preemptor(env: Env) -> None:
    s, _, api, _ = env
    (v1,) = victims_on(s, "n1", "v1")
    api.fail[("patch", "v1")] = 500
    errors = metric("scheduler_preemption_goroutines_execution_total", {"result": "error"})
    (qp,) = await popped(s, pending("high", priority=100))
    handle(s, qp, no_fit("n1", [v1]))
    await settled(s)
    assert api.of("delete", "v1") == []
    # Out of the unschedulable pool at once, through admission.
    assert where(s, "high") == ""
    await s.queue.admit_incoming()
    assert where(s, "high") == ACTIVE
    assert metric("scheduler_preemption_goroutines_execution_total", {"result": "error"}) == (
        errors + 1
    )


async def test_prepareCandidateAsync_first_failure_cancels_the_victims_not_yet_done(
    env: Env,
) -> None:
    s, _, api, _ = env
    victims = victims_on(s, "n1", *[f"v{i}" for i in range(40)])
    (qp,) = await popped(s, pending("high", priority=100))
    # The first victim's patch fails at once, every other call is slow: the ones
    # already running finish their patch, none goes on to delete, none queued starts.
    api.fail[("patch", "v0")] = 500
    api.delay = 0.3
    handle(s, qp, no_fit("n1", victims))
    await settled(s)
    assert [v.name for v in victims if api.of("delete", v.name)] == []
    assert len([v.name for v in victims if api.of("patch", v.name)]) <= s.options.bind_workers


# -- IsPodRunningPreemption -------------------------------------------------------------


async def test_IsPodRunningPreemption_holds_the_preemptor_at_PreEnqueue(env: Env) -> None:
    s, _, api, _ = env
    (v1,) = victims_on(s, "n1", "v1")
    (qp,) = await popped(s, pending("high", priority=100))
    api.hold.clear()
    handle(s, qp, no_fit("n1", [v1]))
    # An event moves it while the preemption runs: admission turns it away.
    s.queue.activate(["high"])
    await s.queue.admit_incoming()
    assert where(s, "high") == GATED
    st = await s._pre_enqueue(PROFILE, qp.pod)
    assert (st.code, list(st.reasons), st.plugin) == (
        pb.CODE_UNSCHEDULABLE_AND_UNRESOLVABLE,
        [GATE],
        "DefaultPreemption",
    )
    # When it ends the pod carries on where the event sent it, after its backoff.
    api.hold.set()
    await settled(s)
    assert where(s, "high") == BACKOFF
    assert (await s._pre_enqueue(PROFILE, qp.pod)).code == pb.CODE_SUCCESS


async def test_a_deletion_before_the_preemption_ends_is_not_lost(env: Env) -> None:
    """The last-victim check of IsPodRunningPreemption: the victim's deletion reaches
    the queue while the preemption still runs; the pod it moves is gated, and goes on
    to the activeQ once the preemption is over."""
    s, _, api, _ = env
    s.queue.initial_backoff = s.queue.max_backoff = 0.0
    (v1,) = victims_on(s, "n1", "v1")
    (qp,) = await popped(s, pending("high", priority=100))
    api.hold.clear()
    handle(s, qp, no_fit("n1", [v1]))
    assert where(s, "high") == UNSCHEDULABLE
    # The victim's deletion arrives before the preemption task ends.
    s.event_handlers.on_pod_events([event(DELETED, v1)])
    await s.queue.admit_incoming()
    assert where(s, "high") == GATED
    api.hold.set()
    await settled(s)
    await s.queue.admit_incoming()
    assert where(s, "high") == ACTIVE


# -- clearNominatedNodeName -------------------------------------------------------------------


async def test_clearNominatedNodeName_patches_the_lower_priority_nominations(env: Env) -> None:
    s, _, api, _ = env
    (v1,) = victims_on(s, "n1", "v1")
    s.event_handlers.on_pod_events([event(ADDED, pending("low", priority=1, nominated="n1"))])
    (qp,) = await popped(s, pending("high", priority=100))
    handle(s, qp, no_fit("n1", [v1], clear=["low", "unknown"]))
    await settled(s)
    assert api.of("patch", "low") == [
        {"metadata": {"uid": "low"}, "status": {"nominatedNodeName": None}}
    ]
    # The nominator follows the informer, as upstream's: the update clears it.
    assert s.cache.nominated["low"] == "n1"
    s.event_handlers.on_pod_events([event(MODIFIED, pending("low", priority=1))])
    assert "low" not in s.cache.nominated and "low" not in s.cache.state.pods


# -- handleSchedulingFailure: the nomination after a failed cycle ----------------------------


async def test_updatePod_keeps_the_nomination_while_the_victims_terminate(env: Env) -> None:
    """DefaultPreemption declines a pod whose nominated node holds a terminating victim
    (PodEligibleToPreemptOthers: NominatingMode Noop): the nomination stands."""
    s, _, api, _ = env
    s.event_handlers.on_pod_events([event(ADDED, running("v1", "n1", terminating=True))])
    qp = await unschedulable(s, pending("high", priority=100, nominated="n1"))
    assert s.cache.nominated == {"high": "n1"}
    s.queue.activate(["high"])
    await s.queue.admit_incoming()
    (qp,) = await s.queue.pop_batch(1)
    handle(s, qp, no_fit())
    await settled(s)
    (status,) = api.of("patch", "high")
    assert "nominatedNodeName" not in status["status"]
    assert s.cache.nominated == {"high": "n1"}


async def test_the_next_cycle_sees_the_nomination_before_the_patch_lands(env: Env) -> None:
    """api_calls/pod_status_patch.go PodStatusPatchCall.Sync: upstream's queue holds the
    pod with the nomination applied, so evaluateNominatedNode (schedule_one.go
    findNodesThatFitPod) tries the node first even when the victim's deletion is seen
    before the pod's own status update."""
    s, service, _, _ = env
    (v1,) = victims_on(s, "n1", "v1")
    (qp,) = await popped(s, pending("high", priority=100))
    handle(s, qp, no_fit("n1", [v1]))
    await settled(s)
    # The victim's deletion arrives; the pod's update carrying nominatedNodeName has not.
    s.event_handlers.on_pod_events([event(DELETED, v1)])
    assert where(s, "high") == BACKOFF
    s.queue.activate(["high"])
    await s.queue.admit_incoming()
    (again,) = await asyncio.wait_for(s.queue.pop_batch(1), TIMEOUT)
    assert again.pod.nominated_node_name == ""
    await s.scheduling_cycle.schedule([again])
    (sent,) = service.scheduled
    assert sent.uid == "high" and sent.nominated_node_name == "n1"
    # The queued pod itself is left as the informer reported it.
    assert again.pod.nominated_node_name == ""


async def test_a_pod_nominated_elsewhere_by_its_status_is_sent_as_it_is(env: Env) -> None:
    s, service, _, _ = env
    (qp,) = await popped(s, pending("p", priority=5, nominated="n2"))
    await s.scheduling_cycle.schedule([qp])
    (sent,) = service.scheduled
    assert sent is qp.pod and sent.nominated_node_name == "n2"


async def test_each_scheduling_call_observes_its_pod_count(env: Env) -> None:
    """berth_shim_schedule_batch_pods: how many pods each call to the plugin service
    carried (docs/benchmarks.md reads it to see how far --batch-size is used)."""
    s, _, _, _ = env
    calls = metric("berth_shim_schedule_batch_pods_count")
    pods = metric("berth_shim_schedule_batch_pods_sum")
    (qp,) = await popped(s, pending("p"))
    await s.scheduling_cycle.schedule([qp])
    assert metric("berth_shim_schedule_batch_pods_count") == calls + 1
    assert metric("berth_shim_schedule_batch_pods_sum") == pods + 1


async def test_updatePod_clears_the_nomination_when_preemption_finds_nothing(env: Env) -> None:
    s, _, api, _ = env
    (qp,) = await popped(s, pending("high", priority=100, nominated="n1"))
    handle(s, qp, no_fit())
    await settled(s)
    (status,) = api.of("patch", "high")
    assert status["status"]["nominatedNodeName"] is None
    assert s.cache.nominated == {}


@pytest.mark.parametrize(
    "resp",
    [
        pb.ScheduleResponse(status=pb.Status(code=pb.CODE_ERROR, reasons=["boom"])),
        no_fit(post_filter=False),
    ],
    ids=["error", "no-post-filter"],
)
async def test_schedulingAlgorithm_clearNominatedNode(env: Env, resp: pb.ScheduleResponse) -> None:
    s, _, api, _ = env
    (qp,) = await popped(s, pending("p", priority=5, nominated="n2"))
    handle(s, qp, resp)
    await settled(s)
    (status,) = api.of("patch", "p")
    assert status["status"]["nominatedNodeName"] is None
    assert "p" not in s.cache.nominated


async def test_preemptionPolicy_Never_keeps_what_it_has(env: Env) -> None:
    s, _, api, _ = env
    pod = pending("never", priority=100, nominated="n1")
    pod.preemption_policy = "Never"
    (qp,) = await popped(s, pod)
    handle(s, qp, no_fit())
    await settled(s)
    (status,) = api.of("patch", "never")
    assert "nominatedNodeName" not in status["status"]
    assert s.cache.nominated == {"never": "n1"}
    assert s.preemption.preempting == {}


@pytest.mark.parametrize(
    ("mode", "policy", "want"),
    [
        # The server's word decides over the shim's own reading of the pod.
        (pb.NOMINATING_MODE_NOOP, "PreemptLowerPriority", "n1"),
        (pb.NOMINATING_MODE_OVERRIDE, "Never", None),
    ],
    ids=["noop-keeps", "override-clears"],
)
async def test_nominating_mode_from_the_server_decides(
    env: Env, mode: pb.NominatingMode.ValueType, policy: str, want: str | None
) -> None:
    """schedule_one.go handleSchedulingFailure: NominatingInfo.Mode() Noop leaves the
    nomination, Override with an empty name clears it."""
    s, _, api, _ = env
    pod = pending("p", priority=100, nominated="n1")
    pod.preemption_policy = policy
    (qp,) = await popped(s, pod)
    resp = no_fit()
    resp.post_filter.nominating_mode = mode
    handle(s, qp, resp)
    await settled(s)
    (status,) = api.of("patch", "p")
    if want is None:
        assert status["status"]["nominatedNodeName"] is None
        assert s.cache.nominated == {}
    else:
        assert "nominatedNodeName" not in status["status"]
        assert s.cache.nominated == {"p": want}


async def test_attempts_count_only_profiles_that_preempt(env: Env) -> None:
    s, service, _, _ = env
    before = metric("scheduler_preemption_attempts_total")
    service.profiles[PROFILE] = ProfileInfo(PROFILE, {"postFilter": ("Coscheduling",)})
    (qp,) = await popped(s, pending("a"))
    handle(s, qp, no_fit())
    assert metric("scheduler_preemption_attempts_total") == before
    service.profiles[PROFILE] = ProfileInfo(PROFILE, {"postFilter": ("DefaultPreemption",)})
    (qp,) = await popped(s, pending("b"))
    handle(s, qp, no_fit())
    assert metric("scheduler_preemption_attempts_total") == before + 1


# -- the nominator -----------------------------------------------------------------------------


def delta(s: Scheduler) -> cpb.ClusterDelta:
    base = s.cache.state.generation
    s.cache.state.commit()
    st = s.cache.state.state_since(base)
    assert not st.full
    return st.delta


async def test_nominated_pods_from_the_informer_join_the_cluster_state(env: Env) -> None:
    s, _, _, _ = env
    delta(s)
    s.event_handlers.on_pod_events([event(ADDED, pending("nom", priority=3, nominated="n2"))])
    d = delta(s)
    (up,) = d.upsert_pods
    assert (up.uid, up.node_name, up.nominated_node_name) == ("nom", "", "n2")
    assert not s.cache.holds("nom")
    # An update that changes nothing the plugins read sends nothing again.
    s.event_handlers.on_pod_events([event(MODIFIED, pending("nom", priority=3, nominated="n2"))])
    assert list(delta(s).upsert_pods) == []
    # Bound: it counts on its node, as an assigned pod, not as a nominated one.
    bound = pending("nom", priority=3)
    bound.node_name = "n1"
    s.event_handlers.on_pod_events([event(MODIFIED, bound)])
    assert s.cache.nominated == {} and s.cache.holds("nom")
    assert s.cache.state.pods["nom"].node_name == "n1"


async def test_pods_without_nominations_cost_nothing(env: Env) -> None:
    s, _, _, _ = env
    delta(s)
    assert not s.cache.state.has_pending
    s.event_handlers.on_pod_events([event(ADDED, pending(f"p{i}")) for i in range(20)])
    s.event_handlers.on_pod_events([event(MODIFIED, pending(f"p{i}")) for i in range(20)])
    assert not s.cache.state.has_pending
    assert s.cache.nominated == {}


async def test_UpdateNominatedPod_keeps_an_in_memory_nomination_until_the_patch_lands(
    env: Env,
) -> None:
    s, _, api, _ = env
    (v1,) = victims_on(s, "n1", "v1")
    api.hold.clear()
    (qp,) = await popped(s, pending("high", priority=100))
    handle(s, qp, no_fit("n1", [v1]))
    # An update from before the patch (no nomination on either side) keeps it.
    s.event_handlers.on_pod_events([event(MODIFIED, pending("high", priority=100))])
    assert s.cache.nominated == {"high": "n1"}
    # The patch lands.
    s.event_handlers.on_pod_events([event(MODIFIED, pending("high", priority=100, nominated="n1"))])
    assert s.cache.nominated == {"high": "n1"}
    api.hold.set()
    await settled(s)


async def test_nomination_leaving_a_node_moves_lower_or_equal_priority_pods(env: Env) -> None:
    s, _, _, _ = env
    await unschedulable(s, pending("lower", priority=1))
    await unschedulable(s, pending("equal", priority=5))
    await unschedulable(s, pending("higher", priority=9))
    await unschedulable(s, pending("nom", priority=5, nominated="n1"))
    s.event_handlers.on_pod_events([event(MODIFIED, pending("nom", priority=5, nominated="n2"))])
    assert s.cache.nominated["nom"] == "n2"
    assert where(s, "lower") in (BACKOFF, "") and where(s, "equal") in (BACKOFF, "")
    assert where(s, "higher") == UNSCHEDULABLE


async def test_deleting_a_nominated_pod_moves_lower_or_equal_priority_pods(env: Env) -> None:
    s, _, _, _ = env
    nom = pending("nom", priority=5, nominated="n1")
    await unschedulable(s, pending("lower", priority=1))
    await unschedulable(s, pending("higher", priority=9))
    await unschedulable(s, nom)
    s.event_handlers.on_pod_events([event(DELETED, nom)])
    assert "nom" not in s.cache.state.pods and s.cache.nominated == {}
    assert where(s, "lower") in (BACKOFF, "")
    assert where(s, "higher") == UNSCHEDULABLE


async def test_assume_drops_the_nomination(env: Env) -> None:
    s, _, _, _ = env
    (qp,) = await popped(s, pending("nom", priority=5, nominated="n1"))
    assert s.cache.nominated == {"nom": "n1"}
    handle(
        s,
        qp,
        pb.ScheduleResponse(
            status=pb.Status(),
            node="n1",
            reserve_status=pb.Status(),
            permit=pb.PermitResponse(status=pb.Status()),
        ),
    )
    assert s.cache.nominated == {}
    assert s.cache.state.pods["nom"].node_name == "n1"
    await until(lambda: s.counters.bound == 1, "bound")


async def test_handleBindingCycleError_moves_pods_the_forgotten_pod_blocked(
    env: Env,
) -> None:
    """handleBindingCycleError: a forgotten assumed pod frees its node like an
    assigned pod's deletion (EventAssignedPodDelete with the assumed pod), after
    a failed bind as after a victim preempted while waiting at Permit; the
    forgotten pod itself is left to its own failure."""
    s, _, api, _ = env
    await unschedulable(s, pending("blocked"))
    (qp,) = await popped(s, pending("binder"))
    api.fail[("post", "binder")] = 500
    placed = pb.ScheduleResponse(
        status=pb.Status(),
        node="n1",
        reserve_status=pb.Status(),
        permit=pb.PermitResponse(status=pb.Status()),
    )
    handle(s, qp, placed)
    await until(lambda: s.counters.bind_failures == 1, "the bind failed")
    assert where(s, "binder") == BACKOFF
    assert where(s, "blocked") in (BACKOFF, "")
    await unschedulable(s, pending("blocked-again"))
    (waiter,) = await popped(s, pending("waiter"))
    placed.permit.CopyFrom(
        pb.PermitResponse(status=pb.Status(code=pb.CODE_WAIT), wait_timeout_millis={"G": 60_000})
    )
    handle(s, waiter, placed)
    (high,) = await popped(s, pending("high", priority=100))
    handle(s, high, no_fit("n1", [s.cache.state.pods["waiter"]]))
    await until(lambda: s.counters.bind_failures == 2, "the waiter rejected")
    assert where(s, "blocked-again") in (BACKOFF, "")


def test_DefaultPreemption_PreEnqueue_is_answered_in_the_shim() -> None:
    """The shim holds the preemption gate, so a profile whose PreEnqueue plugins are
    SchedulingGates and DefaultPreemption needs no PreEnqueue call to the service."""
    info = ProfileInfo(PROFILE, {"preEnqueue": ("SchedulingGates", "DefaultPreemption")})
    local = info.local_pre_enqueue
    assert local is not None
    assert [p.name for p in local] == ["SchedulingGates", "DefaultPreemption"]
    assert ProfileInfo(PROFILE, {"preEnqueue": ("Other",)}).local_pre_enqueue is None


def test_delete_sends_the_uid_as_a_precondition() -> None:
    """util.DeletePod, with the uid precondition Berth adds: the DELETE carries
    DeleteOptions.preconditions.uid, so a pod recreated under the same name is refused."""
    sent: list[tuple[str, str, Any]] = []

    class Pool:
        def request(self, method: str, url: str, *, body: Any = None, **_: Any) -> Any:
            sent.append((method, url, None if body is None else orjson.loads(body)))
            return type("Resp", (), {"status": 200, "data": b"{}"})()

    api = KubeApi("https://k", cast(Any, Pool()), lambda: None, qps=0)
    api.delete("/api/v1/namespaces/ns/pods/v1", uid="u-1")
    api.delete("/api/v1/namespaces/ns/pods/v2")
    assert sent == [
        (
            "DELETE",
            "https://k/api/v1/namespaces/ns/pods/v1",
            {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "u-1"}},
        ),
        ("DELETE", "https://k/api/v1/namespaces/ns/pods/v2", None),
    ]
