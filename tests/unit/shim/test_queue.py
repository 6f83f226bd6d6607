"""shim/queue.py SchedulingQueue, after upstream's PriorityQueue
(pkg/scheduler/backend/queue/scheduling_queue.go, backoff_queue.go).

Each test names the upstream function whose behaviour it pins down. QueueSort
and PreEnqueue are async fakes standing in for the plugin service; the clock
is a fake the tests move. Every test ends with ``h.check()``: each live pod is
in exactly one place (counts() and the queue's own structures agree) and the
``scheduler_pending_pods`` gauge moved by exactly what the queue holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest
from prometheus_client import REGISTRY

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.framework.events import (
    EVENT_ASSIGNED_POD_DELETE,
    EVENT_NODE_ADD,
    EVENT_UNSCHEDULED_POD_ADD,
    ActionType,
    ClusterEvent,
    EventResource,
)
from berth.framework.testing import make_pod
from berth.shim.hints import HintMap, Registered
from berth.shim.queue import (
    ACTIVE,
    BACKOFF,
    DEFAULT_MAX_IN_UNSCHEDULABLE,
    GATED,
    IN_FLIGHT,
    UNSCHEDULABLE,
    QueuedPod,
    SchedulingQueue,
)
from berth.shim.service import ServiceUnavailable, SortKey
from tests.unit.shim.fakes import FakeClock

T0 = 1_760_000_000.0
PROFILE = "default-scheduler"
TIMEOUT = 5.0  # bound on every wait; none should come close
# Where a pod waits between a move towards the activeQ and its admission
# (PreEnqueue and QueueSort run again, as moveToActiveQ does).
INCOMING = ""
GONE = "gone"
FIT = frozenset({"NodeResourcesFit"})
PLACES = ("active", "backoff", "unschedulable", "gated")


# -- fakes -------------------------------------------------------------------------------


class FakePlugins:
    """The plugin service's QueueSort (PrioritySort) and PreEnqueue (SchedulingGates)."""

    def __init__(self) -> None:
        self.sort_calls: list[tuple[str, list[str]]] = []
        self.pre_enqueue_calls: list[str] = []
        # Raised once by the next call: "sort:<profile>" or "pre_enqueue:<uid>".
        self.fail: dict[str, Exception] = {}
        # Runs inside PreEnqueue while the call is "on the wire", given the pod's uid
        # (what the informer may do on the loop meanwhile).
        self.during_pre_enqueue: Callable[[str], None] | None = None

    async def sort_keys(self, profile: str, pods: Sequence[pb.QueuedPod]) -> list[SortKey]:
        await asyncio.sleep(0)  # a real call yields to the loop
        self.sort_calls.append((profile, [qp.pod.uid for qp in pods]))
        exc = self.fail.pop(f"sort:{profile}", None)
        if exc is not None:
            raise exc
        # PrioritySort.Less: higher priority first, then the earlier timestamp.
        return [(-qp.pod.priority, qp.enqueued_unix_micros) for qp in pods]

    async def pre_enqueue(self, profile: str, pod: cpb.Pod) -> pb.Status:
        del profile
        await asyncio.sleep(0)
        self.pre_enqueue_calls.append(pod.uid)
        if self.during_pre_enqueue is not None:
            self.during_pre_enqueue(pod.uid)
        exc = self.fail.pop(f"pre_enqueue:{pod.uid}", None)
        if exc is not None:
            raise exc
        if pod.scheduling_gates:
            return pb.Status(
                code=pb.CODE_UNSCHEDULABLE_AND_UNRESOLVABLE,
                plugin="SchedulingGates",
                reasons=[f"waiting for scheduling gates: {list(pod.scheduling_gates)}"],
            )
        return pb.Status()


def pending_gauges() -> dict[str, float]:
    return {
        place: REGISTRY.get_sample_value("scheduler_pending_pods", {"queue": place}) or 0.0
        for place in PLACES
    }


@dataclass
class Harness:
    q: SchedulingQueue
    clock: FakeClock
    plugins: FakePlugins
    # The gauge is process-global: compare with its value when the queue was new.
    gauge_base: dict[str, float] = field(default_factory=pending_gauges)

    def add(
        self,
        name: str,
        priority: int = 0,
        profile: str = PROFILE,
        gates: Sequence[str] = (),
    ) -> cpb.Pod:
        pod = make_pod(name).uid(name).priority(priority).req(cpu="100m").obj()
        pod.scheduling_gates.extend(gates)
        self.q.add(pod, profile)
        return pod

    def where(self, uid: str) -> str:
        qp = self.q.get(uid)
        return GONE if qp is None else qp.where

    def gauge_delta(self) -> dict[str, float]:
        now = pending_gauges()
        return {place: now[place] - self.gauge_base[place] for place in PLACES}

    def check(self) -> dict[str, int]:
        """A pod is never in two places, and the gauge agrees with the places."""
        q = self.q
        counts = q.counts()
        live = set(q._pods)
        assert sum(counts.values()) == len(live)
        # White-box: the structures behind each place hold each pod once, and
        # exactly the pods whose place they are.
        held = {
            ACTIVE: [e[2].uid for e in q._active],
            BACKOFF: [e[2].uid for e in q._backoff],
            INCOMING: [qp.uid for qp in q._incoming],
            UNSCHEDULABLE: list(q._unschedulable),
        }
        everywhere = [uid for uids in held.values() for uid in uids]
        assert len(everywhere) == len(set(everywhere)), held
        for place, uids in held.items():
            assert sorted(uids) == sorted(u for u in live if q._pods[u].where == place), place
        # scheduler_pending_pods: pods on their way to the activeQ count as active,
        # pods in a cycle count nowhere.
        assert self.gauge_delta() == {
            "active": counts[ACTIVE] + counts["incoming"],
            "backoff": counts[BACKOFF],
            "unschedulable": counts[UNSCHEDULABLE],
            "gated": counts[GATED],
        }
        return counts


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def plugins() -> FakePlugins:
    return FakePlugins()


@pytest.fixture
def h(clock: FakeClock, plugins: FakePlugins) -> Harness:
    return Harness(
        SchedulingQueue(plugins.sort_keys, plugins.pre_enqueue, clock=clock), clock, plugins
    )


# -- driving the queue the way shim/scheduler.py and shim/schedule_one.py do ------------------


async def admit(h: Harness) -> int:
    """One round of the scheduler's admission loop (Scheduler._admit_loop)."""
    if h.q.has_incoming:
        await asyncio.wait_for(h.q.wait_incoming(), TIMEOUT)
    return await h.q.admit_incoming()


async def pop(h: Harness, max_pods: int = 16) -> list[QueuedPod]:
    return await asyncio.wait_for(h.q.pop_batch(max_pods), TIMEOUT)


async def pop_uids(h: Harness, max_pods: int = 16) -> list[str]:
    return [qp.uid for qp in await pop(h, max_pods)]


async def pop_one(h: Harness, uid: str) -> QueuedPod:
    batch = await pop(h, 1)
    assert [qp.uid for qp in batch] == [uid]
    return batch[0]


async def settle() -> None:
    """Lets every ready task run until it blocks (no time passes)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def fail_unschedulable(h: Harness, uid: str, plugins: frozenset[str] = FIT) -> QueuedPod:
    """Pops the pod (it must be at the head) and fails its cycle as unschedulable."""
    qp = await pop_one(h, uid)
    h.q.done_unschedulable(qp, plugins)
    return qp


async def unschedulable_times(h: Harness, uid: str, n: int) -> QueuedPod:
    """Admits the new pod and fails it ``n`` times, each retry after its backoff;
    it ends in the unschedulable pool, failed at the current time."""
    await admit(h)
    qp = await fail_unschedulable(h, uid)
    for _ in range(n - 1):
        h.clock.advance(60.0)
        assert h.q.move(EVENT_NODE_ADD) == 1
        await admit(h)
        qp = await fail_unschedulable(h, uid)
    assert h.where(uid) == UNSCHEDULABLE
    assert qp.unschedulable_count == n
    return qp


# -- activeQ order and popping ----------------------------------------------------------------


async def test_active_queue_pops_in_sort_key_order(h: Harness) -> None:
    """activeQ is a heap ordered by the profile's QueueSort Less (PrioritySort:
    priority, then the earlier timestamp); one QueueSort call covers the batch of
    pods that arrived together."""
    for name, priority in [("low", 1), ("high-a", 5), ("mid", 3), ("high-b", 5)]:
        h.add(name, priority)
        h.clock.advance(1.0)
    assert await admit(h) == 4
    assert h.plugins.sort_calls == [(PROFILE, ["low", "high-a", "mid", "high-b"])]
    assert h.check()[ACTIVE] == 4

    assert await pop_uids(h, 1) == ["high-a"]
    h.add("urgent", 9)
    await admit(h)
    assert [await pop_uids(h, 1) for _ in range(4)] == [["urgent"], ["high-b"], ["mid"], ["low"]]
    assert h.check()[IN_FLIGHT] == 5


@pytest.mark.parametrize(
    ("profiles", "max_pods", "batches"),
    [
        ("aaa", 8, ["a0 a1 a2"]),
        ("aaa", 2, ["a0 a1", "a2"]),
        ("aba", 8, ["a0", "b1", "a2"]),
        ("aabba", 8, ["a0 a1", "b2 b3", "a4"]),
        ("aabbb", 2, ["a0 a1", "b2 b3", "b4"]),
    ],
)
async def test_pop_batch_takes_consecutive_pods_of_the_head_profile_up_to_max(
    h: Harness, profiles: str, max_pods: int, batches: list[str]
) -> None:
    """Berth's batching of upstream's Pop: the head of the activeQ decides the
    profile; the batch stops at the first pod of another profile or at max."""
    for i, profile in enumerate(profiles):
        h.add(f"{profile}{i}", priority=100 - i, profile=profile)
    await admit(h)
    got = []
    for _ in batches:
        batch = await pop(h, max_pods)
        assert len({qp.profile for qp in batch}) == 1
        got.append(" ".join(qp.uid for qp in batch))
    assert got == batches
    assert h.check()[IN_FLIGHT] == len(profiles)


async def test_adding_a_queued_pod_again_is_an_update_not_a_second_entry(h: Harness) -> None:
    """Add of a pod the queue holds (an informer relist) leaves it in one place."""
    pod = h.add("p")
    await admit(h)
    h.q.add(pod, PROFILE)
    assert h.check()[ACTIVE] == 1
    assert await pop_uids(h) == ["p"]


# -- backoff durations -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "seconds"), [(0, 0.0), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (6, 10.0)]
)
@pytest.mark.parametrize("kind", ["unschedulable", "error"])
def test_backoff_doubles_from_1s_up_to_10s(
    h: Harness, kind: str, count: int, seconds: float
) -> None:
    """backoffQueue.calculateBackoffDuration: initial << (count-1), capped at the
    max (podInitialBackoffSeconds 1, podMaxBackoffSeconds 10)."""
    qp = QueuedPod(pod=cpb.Pod(uid="p"), profile=PROFILE, timestamp=T0, first_seen=T0)
    if kind == "unschedulable":
        qp.unschedulable_count = count
    else:
        qp.consecutive_errors = count
    assert h.q.backoff_duration(qp) == seconds


async def test_unschedulable_attempts_back_off_1_2_4_8_10_10_seconds(h: Harness) -> None:
    """getBackoffTime = the failure's timestamp + calculateBackoffDuration of the
    unschedulable count; an event moves the pod to the backoffQ until then."""
    h.add("p")
    await admit(h)
    for count, want in enumerate([1.0, 2.0, 4.0, 8.0, 10.0, 10.0], start=1):
        failed_at = h.clock.now
        qp = await fail_unschedulable(h, "p")
        assert (qp.unschedulable_count, h.where("p")) == (count, UNSCHEDULABLE)
        h.clock.advance(0.5)
        h.q.move(EVENT_NODE_ADD)
        assert h.where("p") == BACKOFF
        assert qp.backoff_expiry == failed_at + want
        h.clock.advance(want - 0.5 - 0.001)
        assert h.q.flush_backoff_completed() == 0
        h.clock.advance(0.001)
        assert h.q.flush_backoff_completed() == 1
        assert h.where("p") == INCOMING
        await admit(h)
        h.check()


async def test_errors_back_off_by_the_consecutive_error_count(h: Harness) -> None:
    """AddUnschedulableIfNotPresent: an error (no rejecting plugin) counts in
    ConsecutiveErrorsCount, a rejection counts in UnschedulableCount and resets the
    errors; calculateBackoffDuration uses the errors when there are any."""
    h.add("p")
    await admit(h)
    outcomes = ["unschedulable"] * 3 + ["error"] * 5 + ["unschedulable"]
    # 3 rejections: 1, 2, 4 s; errors count from 1 again: 1, 2, 4, 8, 10 s; the
    # next rejection is the 4th: 8 s.
    wants = [1.0, 2.0, 4.0, 1.0, 2.0, 4.0, 8.0, 10.0, 8.0]
    for outcome, want in zip(outcomes, wants, strict=True):
        qp = await pop_one(h, "p")
        failed_at = h.clock.now
        if outcome == "error":
            h.q.done_error(qp)
            assert qp.error_backoff
        else:
            h.q.done_unschedulable(qp, FIT)
            assert (h.where("p"), qp.consecutive_errors) == (UNSCHEDULABLE, 0)
            h.q.move(EVENT_NODE_ADD)
        assert h.where("p") == BACKOFF
        assert qp.backoff_expiry - failed_at == want, (outcome, qp)
        h.clock.advance(want)
        h.q.flush_backoff_completed()
        await admit(h)
    assert (qp.unschedulable_count, qp.consecutive_errors) == (4, 0)
    h.check()


# -- popping from the backoffQ (SchedulerPopFromBackoffQ) --------------------------------------


async def unschedulable_in_backoff(h: Harness, uid: str) -> QueuedPod:
    """The pod failed as unschedulable while an event arrived: it waits in the backoffQ."""
    qp = await pop_one(h, uid)
    h.q.move(EVENT_NODE_ADD)
    h.q.done_unschedulable(qp, FIT)
    assert h.where(uid) == BACKOFF
    return qp


@pytest.mark.parametrize("pop_from_backoff", [True, False])
async def test_backoff_pod_is_popped_early_only_when_the_active_queue_is_empty(
    clock: FakeClock, plugins: FakePlugins, pop_from_backoff: bool
) -> None:
    """SchedulerPopFromBackoffQ (beta, on since 1.33): Pop on an empty activeQ takes
    the head of the backoffQ if it failed as unschedulable, before its backoff is
    over; a non-empty activeQ is served first. Off, the pod waits out its backoff."""
    q = SchedulingQueue(
        plugins.sort_keys, plugins.pre_enqueue, clock=clock, pop_from_backoff=pop_from_backoff
    )
    h = Harness(q, clock, plugins)
    h.add("backing-off")
    await admit(h)
    qp = await unschedulable_in_backoff(h, "backing-off")
    h.add("ready")
    await admit(h)

    assert await pop_uids(h) == ["ready"]
    assert h.where("backing-off") == BACKOFF

    expiry = qp.backoff_expiry
    task = asyncio.create_task(h.q.pop_batch(16))
    if pop_from_backoff:
        await asyncio.wait_for(h.q.wait_incoming(), TIMEOUT)  # moved towards the activeQ
        assert h.where("backing-off") == INCOMING
        await h.q.admit_incoming()
        assert [p.uid for p in await asyncio.wait_for(task, TIMEOUT)] == ["backing-off"]
        assert clock.now < expiry
    else:
        await settle()
        assert not task.done()
        assert h.where("backing-off") == BACKOFF
        clock.advance(1.0)
        assert h.q.flush_backoff_completed() == 1
        await admit(h)
        assert [p.uid for p in await asyncio.wait_for(task, TIMEOUT)] == ["backing-off"]
    h.check()


async def test_error_backoff_pod_is_never_popped_early(h: Harness) -> None:
    """SchedulerPopFromBackoffQ pops only pods that failed as unschedulable; a pod
    that hit an error waits out its whole backoff, even with nothing else to do."""
    h.add("p")
    await admit(h)
    qp = await pop_one(h, "p")
    h.q.done_error(qp)
    assert h.where("p") == BACKOFF

    task = asyncio.create_task(h.q.pop_batch(16))
    await settle()
    assert not task.done()
    assert h.where("p") == BACKOFF
    h.clock.advance(0.999)
    assert h.q.flush_backoff_completed() == 0
    await settle()
    assert not task.done()

    h.clock.advance(0.001)
    assert h.q.flush_backoff_completed() == 1
    await admit(h)
    assert [p.uid for p in await asyncio.wait_for(task, TIMEOUT)] == ["p"]
    h.check()


# -- moving unschedulable pods (MoveAllToActiveOrBackoffQueue) ---------------------------------


@pytest.mark.parametrize(
    ("failures", "after", "place"),
    [
        (1, 0.5, BACKOFF),  # 1 s backoff not over
        (1, 1.0, ACTIVE),
        (2, 1.5, BACKOFF),  # 2 s
        (2, 2.0, ACTIVE),
        (4, 7.9, BACKOFF),  # 8 s
        (4, 60.0, ACTIVE),
    ],
)
async def test_move_all_sends_pods_to_backoff_or_to_active_when_backoff_is_over(
    h: Harness, failures: int, after: float, place: str
) -> None:
    """movePodsToActiveOrBackoffQueue → requeuePodWithQueueingStrategy: a pod still
    backing off (isPodBackingoff) goes to the backoffQ, any other to the activeQ."""
    h.add("p")
    await unschedulable_times(h, "p", failures)
    h.clock.advance(after)

    assert h.q.move(EVENT_NODE_ADD) == 1

    if place == ACTIVE:
        assert h.where("p") == INCOMING
        await admit(h)
    assert h.where("p") == place
    h.check()


# A hint map like the default profile's for two plugins: NodeResourcesFit
# registers Pod/Delete, NodeAffinity Node/Add|UpdateNodeLabel (no hints here).
FIT_AND_AFFINITY = HintMap(
    {
        PROFILE: [
            Registered(
                "NodeResourcesFit", ClusterEvent(EventResource.POD, ActionType.DELETE), False
            ),
            Registered(
                "NodeAffinity",
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
                False,
            ),
        ]
    }
)


async def test_move_moves_only_the_pods_the_event_may_help(h: Harness) -> None:
    """isPodWorthRequeuing: only the pods whose rejecting plugins registered
    the event; pods it cannot help stay unschedulable."""
    h.q.set_hints(FIT_AND_AFFINITY)
    h.add("too-big", priority=2)
    h.add("wrong-node", priority=1)
    await admit(h)
    await fail_unschedulable(h, "too-big", frozenset({"NodeResourcesFit"}))
    await fail_unschedulable(h, "wrong-node", frozenset({"NodeAffinity"}))

    assert h.q.move(EVENT_ASSIGNED_POD_DELETE) == 1
    assert (h.where("too-big"), h.where("wrong-node")) == (BACKOFF, UNSCHEDULABLE)
    assert h.q.move(EVENT_NODE_ADD) == 1
    assert h.where("wrong-node") == BACKOFF
    h.check()


@pytest.mark.parametrize(
    ("hints", "event", "place"),
    [
        (None, EVENT_NODE_ADD, BACKOFF),  # no hint map: every event helps
        (FIT_AND_AFFINITY, EVENT_ASSIGNED_POD_DELETE, BACKOFF),
        (FIT_AND_AFFINITY, EVENT_NODE_ADD, UNSCHEDULABLE),
    ],
    ids=["any-event", "helps", "does-not-help"],
)
async def test_event_during_the_cycle_sends_the_pod_to_backoff(
    h: Harness, hints: HintMap | None, event: ClusterEvent, place: str
) -> None:
    """AddUnschedulableIfNotPresent (determineSchedulingHintForInFlightPod): an
    event received while the pod was in flight that its rejectors registered
    sends it to the backoffQ rather than the unschedulable pool; an event
    that cannot help it does not."""
    if hints is not None:
        h.q.set_hints(hints)
    h.add("p")
    await admit(h)
    qp = await pop_one(h, "p")
    assert h.q.move(event) == 0  # nothing unschedulable to move now
    h.q.done_unschedulable(qp, FIT)
    assert h.where("p") == place
    if place == BACKOFF:
        assert qp.backoff_expiry == h.clock.now + 1.0
    h.check()


async def test_event_before_the_pod_was_popped_does_not_count(h: Harness) -> None:
    h.add("p")
    await admit(h)
    h.q.move(EVENT_NODE_ADD)
    await fail_unschedulable(h, "p")
    assert h.where("p") == UNSCHEDULABLE
    h.check()


@pytest.mark.parametrize(
    ("change", "place"),
    [("label", BACKOFF), ("phase", UNSCHEDULABLE)],
    ids=["spec-update", "status-update"],
)
async def test_update_during_the_cycle_is_used_for_the_retry(
    h: Harness, change: str, place: str
) -> None:
    """Update of an in-flight pod (addEventsIfPodInFlight): the pod is requeued
    with the latest version, and a real change (isPodUpdated) counts as an event
    for it; a status-only change does not."""
    pod = h.add("p")
    await admit(h)
    qp = await pop_one(h, "p")
    new = cpb.Pod()
    new.CopyFrom(pod)
    if change == "label":
        new.labels["tier"] = "web"
    else:
        new.phase = "Pending"
    h.q.update(new)
    h.q.done_unschedulable(qp, FIT)
    assert h.where("p") == place
    assert qp.pod == new
    h.check()


# -- flushUnschedulablePodsLeftover -----------------------------------------------------------


@pytest.mark.parametrize(
    ("age", "moved"),
    [(60.0, False), (299.0, False), (300.0, False), (300.001, True), (3600.0, True)],
)
async def test_flush_unschedulable_leftover_retries_pods_older_than_5_minutes(
    h: Harness, age: float, moved: bool
) -> None:
    """flushUnschedulablePodsLeftover: pods unschedulable for longer than
    podMaxInUnschedulablePodsDuration (5 min, DefaultPodMaxInUnschedulablePodsDuration)
    are moved (EventUnschedulableTimeout); by then their backoff is over."""
    assert DEFAULT_MAX_IN_UNSCHEDULABLE == 300.0
    h.add("old")
    await admit(h)
    await fail_unschedulable(h, "old")
    h.clock.advance(age - 10.0)
    h.add("young")
    await admit(h)
    await fail_unschedulable(h, "young")
    h.clock.advance(10.0)

    assert h.q.flush_unschedulable_leftover() == int(moved)

    assert h.where("old") == (INCOMING if moved else UNSCHEDULABLE)
    assert h.where("young") == UNSCHEDULABLE
    h.check()


# -- PreEnqueue: gated pods -------------------------------------------------------------------


async def test_gated_pods_are_not_popped_until_an_update_lifts_the_gate(h: Harness) -> None:
    """runPreEnqueuePlugins / moveToActiveQ: a pod a PreEnqueue plugin rejects is
    kept out of the activeQ (unschedulablePods, gated); Update of the pod
    (isPodUpdated) runs PreEnqueue again."""
    gated = h.add("gated", priority=9, gates=["example.com/wait"])
    h.add("free")
    await admit(h)
    qp = h.q.get("gated")
    assert qp is not None
    assert (qp.where, qp.gated_by) == (GATED, "SchedulingGates")
    assert await pop_uids(h) == ["free"]

    task = asyncio.create_task(h.q.pop_batch(16))
    await settle()
    assert not task.done()

    # A status-only change is no reason to ask PreEnqueue again.
    status_only = cpb.Pod()
    status_only.CopyFrom(gated)
    status_only.phase = "Pending"
    h.q.update(status_only)
    assert h.where("gated") == GATED
    assert h.plugins.pre_enqueue_calls.count("gated") == 1

    lifted = cpb.Pod()
    lifted.CopyFrom(status_only)
    del lifted.scheduling_gates[:]
    h.q.update(lifted)
    assert h.where("gated") == INCOMING
    await admit(h)
    assert h.plugins.pre_enqueue_calls.count("gated") == 2
    assert [qp.uid for qp in await asyncio.wait_for(task, TIMEOUT)] == ["gated"]
    h.check()


async def test_update_arriving_while_pre_enqueue_runs_is_not_lost(h: Harness) -> None:
    """Upstream runs PreEnqueue under the queue lock, so an Update cannot slip in
    between; here PreEnqueue is a call to the plugin service, and an update that
    arrives meanwhile must still be judged (the gate was lifted while PreEnqueue
    looked at the old spec)."""
    gated = h.add("p", gates=["example.com/wait"])
    lifted = cpb.Pod()
    lifted.CopyFrom(gated)
    del lifted.scheduling_gates[:]

    def lift(uid: str) -> None:
        h.plugins.during_pre_enqueue = None
        h.q.update(lifted)

    h.plugins.during_pre_enqueue = lift
    for _ in range(3):
        await admit(h)
        if not h.q.has_incoming:
            break
    assert h.where("p") == ACTIVE
    assert await pop_uids(h) == ["p"]
    h.check()


async def test_event_the_gate_registered_arriving_while_pre_enqueue_runs_is_not_lost(
    h: Harness,
) -> None:
    """An event the gating plugin registered that is moved on while PreEnqueue is on
    the wire (a gang's member added, for GangScheduling): PreEnqueue answered on the
    state before it, so the pod is judged again rather than gated until the flush.
    An event the plugin did not register changes nothing."""
    h.q.set_hints(
        HintMap(
            {
                PROFILE: [
                    Registered(
                        "SchedulingGates", ClusterEvent(EventResource.POD, ActionType.ADD), False
                    )
                ]
            }
        )
    )

    def moving(event: ClusterEvent) -> Callable[[str], None]:
        def during(uid: str) -> None:
            h.q.move(event)

        return during

    h.add("p", gates=["example.com/wait"])
    h.plugins.during_pre_enqueue = moving(EVENT_NODE_ADD)
    await admit(h)
    assert h.where("p") == GATED
    assert h.plugins.pre_enqueue_calls == ["p"]
    h.add("q", gates=["example.com/wait"])
    h.plugins.during_pre_enqueue = moving(EVENT_UNSCHEDULED_POD_ADD)
    await admit(h)
    # q is judged again; the event moved the gated p back through PreEnqueue too.
    assert (h.where("p"), h.where("q")) == (INCOMING, INCOMING)
    h.plugins.during_pre_enqueue = None
    await admit(h)
    assert sorted(h.plugins.pre_enqueue_calls) == ["p", "p", "q", "q"]
    assert (h.where("p"), h.where("q")) == (GATED, GATED)
    h.check()


async def test_pod_deleted_while_pre_enqueue_runs_is_not_gated(h: Harness) -> None:
    """Delete during the PreEnqueue call: the pod is gone, and the gated gauge does
    not count it (it would never be taken back out)."""
    h.add("p", gates=["example.com/wait"])

    def informer_delete(uid: str) -> None:
        h.q.delete(uid)

    h.plugins.during_pre_enqueue = informer_delete
    await admit(h)
    assert h.where("p") == GONE
    assert h.check() == dict.fromkeys(h.q.counts(), 0)


# -- Update: isPodUpdated ---------------------------------------------------------------------


def changed(pod: cpb.Pod, change: str) -> cpb.Pod:
    new = cpb.Pod()
    new.CopyFrom(pod)
    if change == "phase":
        new.phase = "Pending"
    elif change == "nominated_node_name":
        new.nominated_node_name = "n1"
    elif change == "label":
        new.labels["tier"] = "web"
    elif change == "toleration":
        new.tolerations.add(key="dedicated", operator="Exists")
    else:
        raise AssertionError(change)
    return new


@pytest.mark.parametrize(
    ("change", "after", "place"),
    [
        ("phase", 0.0, UNSCHEDULABLE),
        ("nominated_node_name", 0.0, UNSCHEDULABLE),
        ("label", 0.5, BACKOFF),  # still backing off (1 s)
        ("toleration", 0.5, BACKOFF),
        ("label", 1.0, ACTIVE),
        ("toleration", 30.0, ACTIVE),
    ],
)
async def test_update_of_an_unschedulable_pod_requeues_it_only_for_a_spec_change(
    h: Harness, change: str, after: float, place: str
) -> None:
    """PriorityQueue.Update on a pod in unschedulablePods: isPodUpdated ignores the
    status (phase, nominatedNodeName), so such an update leaves the pod where it is;
    any other change moves it to the backoffQ while isPodBackingoff, else to the
    activeQ."""
    pod = h.add("p")
    await admit(h)
    await fail_unschedulable(h, "p")
    h.clock.advance(after)
    new = changed(pod, change)

    h.q.update(new)

    if place == ACTIVE:
        assert h.where("p") == INCOMING
        await admit(h)
    assert h.where("p") == place
    qp = h.q.get("p")
    assert qp is not None and qp.pod == new, "the queue keeps the latest version either way"
    h.check()


# -- Delete ------------------------------------------------------------------------------------


async def put(h: Harness, uid: str, place: str) -> None:
    """Brings a new pod ``uid`` to ``place``."""
    h.add(uid, gates=["example.com/wait"] if place == GATED else [])
    if place == INCOMING:
        return
    await admit(h)
    if place in (ACTIVE, GATED):
        return
    qp = await pop_one(h, uid)
    if place == BACKOFF:
        h.q.done_error(qp)
    elif place == UNSCHEDULABLE:
        h.q.done_unschedulable(qp, FIT)
    assert h.where(uid) == place


@pytest.mark.parametrize("place", [INCOMING, ACTIVE, BACKOFF, UNSCHEDULABLE, GATED, IN_FLIGHT])
async def test_delete_removes_the_pod_from_any_place(h: Harness, place: str) -> None:
    """PriorityQueue.Delete: from the activeQ, the backoffQ or unschedulablePods
    (gated included); a pod in flight is not requeued when its cycle ends."""
    await put(h, "p", place)
    qp = h.q.get("p")
    assert qp is not None

    assert h.q.delete("p") is qp

    assert "p" not in h.q
    assert h.check() == dict.fromkeys(h.q.counts(), 0)
    # Nothing brings it back.
    h.q.done_unschedulable(qp, FIT)
    h.q.done_error(qp)
    h.clock.advance(3600.0)
    assert h.q.move(EVENT_NODE_ADD) == 0
    assert h.q.flush_backoff_completed() == 0
    assert h.q.flush_unschedulable_leftover() == 0
    assert await admit(h) == 0
    h.add("other")
    await admit(h)
    assert await pop_uids(h) == ["other"]
    assert h.q.delete("p") is None
    h.check()


async def test_done_bound_forgets_the_pod(h: Harness) -> None:
    h.add("p")
    await admit(h)
    qp = await pop_one(h, "p")
    h.q.done_bound(qp)
    assert "p" not in h.q
    assert h.check() == dict.fromkeys(h.q.counts(), 0)


# -- admission failures -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "failure",
    ["pre_enqueue:a1", "pre_enqueue:b1", "sort:a", "sort:b"],
)
async def test_admit_incoming_that_raises_keeps_the_pods_for_the_next_try(
    h: Harness, failure: str
) -> None:
    """The plugin service is unreachable during admission: the pods not yet admitted
    stay incoming (ServiceUnavailable is raised for the admission loop to back off)
    and the next round admits them; no pod is lost or admitted twice."""
    for i, profile in enumerate("aabb"):
        h.add(f"{profile}{i % 2}", priority=10 - i, profile=profile)
    h.add("gated", profile="a", gates=["example.com/wait"])
    h.plugins.fail[failure] = ServiceUnavailable("plugin service unreachable")

    with pytest.raises(ServiceUnavailable):
        await admit(h)
    counts = h.check()
    assert counts["incoming"] > 0
    assert counts["incoming"] + counts[ACTIVE] + counts[GATED] == 5

    h.add("late", priority=0, profile="b")
    await h.q.admit_incoming()

    assert not h.q.has_incoming
    assert h.check()[ACTIVE] == 5
    assert h.where("gated") == GATED
    popped = await pop_uids(h) + await pop_uids(h)
    assert sorted(popped) == ["a0", "a1", "b0", "b1", "late"]


async def test_pod_updated_during_a_failed_admission_is_queued_once(h: Harness) -> None:
    """A gated pod whose gate is lifted while a later PreEnqueue call of the same
    round fails is back in the incoming list once, not twice."""
    gated = h.add("gated", priority=9, gates=["example.com/wait"])
    h.add("p")
    lifted = cpb.Pod()
    lifted.CopyFrom(gated)
    del lifted.scheduling_gates[:]

    def lift_then_fail(uid: str) -> None:
        if uid == "p":
            h.q.update(lifted)
            raise ServiceUnavailable("plugin service unreachable")

    h.plugins.during_pre_enqueue = lift_then_fail
    with pytest.raises(ServiceUnavailable):
        await admit(h)
    assert h.check()["incoming"] == 2
    h.plugins.during_pre_enqueue = None
    await h.q.admit_incoming()
    assert h.check()[ACTIVE] == 2
    assert await pop_uids(h) == ["gated", "p"]


# -- the gauge ------------------------------------------------------------------------------------


async def test_pending_pods_gauge_moves_with_the_pods(h: Harness) -> None:
    """scheduler_pending_pods{queue=active|backoff|unschedulable|gated}
    (metrics.go PendingPods, updated by the queue on every move)."""

    def moved(**want: int) -> None:
        assert h.gauge_delta() == {place: float(want.get(place, 0)) for place in PLACES}

    h.add("a", priority=3)
    h.add("b", priority=2)
    h.add("c", priority=1)
    h.add("g", gates=["example.com/wait"])
    moved(active=4)
    await admit(h)
    moved(active=3, gated=1)
    a = await pop_one(h, "a")
    moved(active=2, gated=1)  # in flight: counted nowhere
    h.q.done_unschedulable(a, FIT)
    moved(active=2, unschedulable=1, gated=1)
    b = await pop_one(h, "b")
    h.q.done_error(b)
    moved(active=1, backoff=1, unschedulable=1, gated=1)
    h.clock.advance(0.5)
    h.q.move(EVENT_NODE_ADD)
    moved(active=1, backoff=2, gated=1)
    h.clock.advance(0.5)
    h.q.flush_backoff_completed()
    moved(active=3, gated=1)
    h.q.delete("g")
    moved(active=3)
    await admit(h)
    for qp in await pop(h):
        h.q.done_bound(qp)
    moved()
    h.check()


# -- scheduler_unschedulable_pods and scheduler_pod_scheduled_after_flush_total ----------------


def unschedulable_gauge(plugin: str, profile: str = PROFILE) -> float:
    value = REGISTRY.get_sample_value(
        "scheduler_unschedulable_pods", {"plugin": plugin, "profile": profile}
    )
    return value or 0.0


async def test_unschedulable_pods_counts_each_rejector_until_the_pod_is_popped(
    h: Harness,
) -> None:
    """scheduler_unschedulable_pods{plugin,profile} (metrics.go unschedulableReasons):
    AddUnschedulableIfNotPresent adds the pod to every plugin that rejected it
    (UnschedulablePlugins and PendingPlugins), wherever it goes next; the pod stops
    counting when it is popped for its next cycle (activeQueue.pop) or deleted
    (PriorityQueue.Delete); a PreEnqueue plugin that gates it counts it once
    (runPreEnqueuePlugin)."""
    base = {p: unschedulable_gauge(p) for p in ("NodeResourcesFit", "TaintToleration", "X")}

    def delta(plugin: str) -> float:
        return unschedulable_gauge(plugin) - base[plugin]

    h.add("a")
    h.add("b")
    await admit(h)
    a = await pop_one(h, "a")
    h.q.done_unschedulable(a, frozenset({"NodeResourcesFit", "TaintToleration"}))
    assert (delta("NodeResourcesFit"), delta("TaintToleration")) == (1.0, 1.0)
    b = await pop_one(h, "b")
    h.q.done_unschedulable(b, FIT, pending=frozenset({"X"}))
    assert (delta("NodeResourcesFit"), delta("TaintToleration"), delta("X")) == (2.0, 1.0, 1.0)

    # Moved to the backoffQ and on to the activeQ: still counted; popped: not.
    h.clock.advance(60.0)
    assert h.q.move(EVENT_NODE_ADD) == 2
    await admit(h)
    assert delta("NodeResourcesFit") == 2.0
    a = await pop_one(h, "a")
    assert (delta("NodeResourcesFit"), delta("TaintToleration")) == (1.0, 0.0)
    h.q.done_bound(a)
    # Deleted from the queue: its plugins stop counting it too.
    h.q.delete("b")
    assert (delta("NodeResourcesFit"), delta("X")) == (0.0, 0.0)
    h.check()


async def test_unschedulable_pods_counts_a_gated_pod_under_its_gate_once(h: Harness) -> None:
    """runPreEnqueuePlugin: the gating plugin counts the pod once, however many times
    PreEnqueue turns it away, until the pod is popped."""
    before = unschedulable_gauge("SchedulingGates")
    gated = h.add("g", gates=["example.com/wait"])
    await admit(h)
    assert unschedulable_gauge("SchedulingGates") - before == 1.0
    again = cpb.Pod()
    again.CopyFrom(gated)
    again.labels["x"] = "y"  # a spec change: PreEnqueue runs again and gates again
    h.q.update(again)
    await admit(h)
    assert h.where("g") == GATED
    assert unschedulable_gauge("SchedulingGates") - before == 1.0
    lifted = cpb.Pod()
    lifted.CopyFrom(again)
    del lifted.scheduling_gates[:]
    h.q.update(lifted)
    await admit(h)
    await pop_one(h, "g")
    assert unschedulable_gauge("SchedulingGates") - before == 0.0
    h.check()


async def test_a_pod_flushed_from_the_unschedulable_pool_is_marked_until_it_fails_again(
    h: Harness,
) -> None:
    """WasFlushedFromUnschedulable (scheduling_queue.go): set by
    flushUnschedulablePodsLeftover, cleared by the pod's next failure; a pod bound
    while it is set counts in scheduler_pod_scheduled_after_flush_total
    (shim/binding.py, schedule_one.go handleSchedulingResult)."""
    h.add("p")
    await admit(h)
    qp = await fail_unschedulable(h, "p")
    assert not qp.flushed
    h.clock.advance(DEFAULT_MAX_IN_UNSCHEDULABLE + 1)
    assert h.q.flush_unschedulable_leftover() == 1
    assert qp.flushed
    await admit(h)
    qp = await fail_unschedulable(h, "p")
    assert not qp.flushed
    h.check()
