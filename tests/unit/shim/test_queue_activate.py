"""SchedulingQueue.activate, after upstream's PriorityQueue.Activate
(pkg/scheduler/backend/queue/scheduling_queue.go, Activate and activate): the
pods a plugin put in PodsToActivate leave the backoffQ or the unschedulable
pool for the activeQ at once; a pod in flight registers the activation
(EventForceActivate) so its failed cycle requeues it after backoff instead of
parking it; pods elsewhere are left alone.

Uses the harness of test_queue.py (fake QueueSort/PreEnqueue, fake clock, and
``check()``: each pod in exactly one place, the pending-pods gauge agreeing).
"""

from __future__ import annotations

import pytest

from berth.shim.queue import ACTIVE, BACKOFF, GATED, IN_FLIGHT, UNSCHEDULABLE, SchedulingQueue
from tests.unit.shim.fakes import FakeClock
from tests.unit.shim.test_queue import (
    FIT,
    INCOMING,
    T0,
    FakePlugins,
    Harness,
    admit,
    fail_unschedulable,
    pop_one,
    pop_uids,
)


@pytest.fixture
def q() -> Harness:
    plugins = FakePlugins()
    clock = FakeClock(T0)
    return Harness(
        SchedulingQueue(plugins.sort_keys, plugins.pre_enqueue, clock=clock), clock, plugins
    )


async def backed_off(h: Harness, uid: str, *, error: bool = False) -> None:
    """The pod fails once and waits in the backoffQ (an event arrived during its
    cycle, so it is not parked as unschedulable; or it failed with an error)."""
    qp = await pop_one(h, uid)
    if error:
        h.q.done_error(qp)
    else:
        # An event for this pod only while it was in flight.
        assert h.q.activate([uid]) == 0
        h.q.done_unschedulable(qp, FIT)
    assert h.where(uid) == BACKOFF


async def test_activate_moves_backoff_and_unschedulable_pods_to_the_active_queue_at_once(
    q: Harness,
) -> None:
    """activate: from unschedulablePods or the backoffQ to moveToActiveQ, whatever is
    left of the backoff."""
    for name, prio in (("parked", 3), ("backing-off", 2), ("erred", 1)):
        q.add(name, priority=prio)
    await admit(q)
    await fail_unschedulable(q, "parked")
    await backed_off(q, "backing-off")
    await backed_off(q, "erred", error=True)
    assert q.where("parked") == UNSCHEDULABLE
    # The error backoff is never popped early, and no time passes in this test.
    erred = q.q.get("erred")
    assert erred is not None and erred.error_backoff

    assert q.q.activate(["parked", "backing-off", "erred"]) == 3
    assert {q.where(u) for u in ("parked", "backing-off", "erred")} == {INCOMING}
    q.check()
    await admit(q)
    assert {q.where(u) for u in ("parked", "backing-off", "erred")} == {ACTIVE}
    # PreEnqueue and QueueSort ran again (moveToActiveQ), and the pods come out in order.
    assert await pop_uids(q) == ["parked", "backing-off", "erred"]
    q.check()


async def test_activate_leaves_active_unknown_and_repeated_pods_alone(q: Harness) -> None:
    """activate returns false for a pod in neither unschedulablePods nor the backoffQ
    (already active, or not queued at all); a uid named twice moves once."""
    q.add("active")
    q.add("parked", priority=5)
    await admit(q)
    await fail_unschedulable(q, "parked")
    sorts = len(q.plugins.sort_calls)

    assert q.q.activate(["active", "no-such-pod"]) == 0
    assert q.where("active") == ACTIVE
    assert len(q.plugins.sort_calls) == sorts
    assert q.q.activate(["parked", "parked"]) == 1
    await admit(q)
    assert q.plugins.sort_calls[-1][1] == ["parked"]
    q.check()


async def test_activate_runs_pre_enqueue_again_for_a_gated_pod(q: Harness) -> None:
    """A gated pod sits in unschedulablePods upstream: Activate takes it to
    moveToActiveQ, which runs PreEnqueue again; a gate still there keeps it gated."""
    q.add("gated", gates=["example.com/wait"])
    await admit(q)
    assert q.where("gated") == GATED
    calls = q.plugins.pre_enqueue_calls.count("gated")

    assert q.q.activate(["gated"]) == 1
    await admit(q)
    assert q.where("gated") == GATED
    assert q.plugins.pre_enqueue_calls.count("gated") == calls + 1
    q.check()


async def test_activating_a_pod_in_flight_sends_its_failure_to_backoff(q: Harness) -> None:
    """Activate of a pod in flight: addEventsIfPodInFlight(EventForceActivate) with the
    pod as its target; when its cycle fails it goes to the backoffQ
    (isPodWorthRequeuing: queueAfterBackoff for its own wildcard event), while another
    pod in flight at the same time, not named, is parked as usual."""
    q.add("named", priority=2)
    q.add("other", priority=1)
    await admit(q)
    named = await pop_one(q, "named")
    other = await pop_one(q, "other")
    assert (named.where, other.where) == (IN_FLIGHT, IN_FLIGHT)

    assert q.q.activate(["named"]) == 0  # nothing moves now
    q.q.done_unschedulable(named, FIT)
    q.q.done_unschedulable(other, FIT)
    assert (q.where("named"), q.where("other")) == (BACKOFF, UNSCHEDULABLE)
    q.check()
