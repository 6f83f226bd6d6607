"""shim/fence.py: the leader's write fence, and the writes that ask it.

kube-scheduler stops writing by exiting once its renew loop gives up (client-go
leaderelection.go renew, RenewDeadline; cmd/kube-scheduler/app/server.go
OnStoppedLeading). The fence makes that hold for a process that was paused: a write
asks it right before its bytes go out, and it is closed once the renew deadline has
passed, on the monotonic clock, since the last successful acquire or renew began.
Requests go to a small HTTP server on a local socket (tests/unit/kube/test_asynchttp.py)
or to a pool that records what it is asked to send.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
import urllib3

from berth.framework.profile import LeaderElectionConfig
from berth.kube.rest import KubeApi
from berth.shim.fence import FencedWrite, LeaderFence
from berth.shim.leader import LeaderElector
from tests.unit.kube.test_asynchttp import BINDING, PATH, FakeServer, created, running
from tests.unit.shim.fakes import FakeClock
from tests.unit.shim.test_leader import NAME, NS, FakeLeaseApi, eventually, held_by, within

T0 = 5_000.0
RENEW_DEADLINE = 10.0
LEASE = "kube-system/berth-scheduler"


def fence_at(clock: Callable[[], float]) -> LeaderFence:
    return LeaderFence(RENEW_DEADLINE, lease=LEASE, clock=clock)


# -- the fence alone ---------------------------------------------------------------------------


def test_closed_until_acquired_open_until_the_renew_deadline_then_closed() -> None:
    """The leader's own view of its lease: writes may start until renewDeadline has
    passed since the last successful acquire or renew *began*, and not after."""
    clock = FakeClock(T0)
    fence = fence_at(clock)
    with pytest.raises(FencedWrite, match="has not acquired lease kube-system/berth-scheduler"):
        fence.check("POST", PATH)

    fence.renewed(started=T0 - 1.0)  # the acquire began a second ago
    assert fence.open
    fence.check("POST", PATH)
    clock.advance(8.9)  # 9.9s since the acquire began
    assert fence.open
    clock.advance(0.2)  # 10.1s: past the renew deadline with no newer success
    with pytest.raises(FencedWrite, match=r"not renewed within the 10s renew deadline") as err:
        fence.check("POST", PATH)
    assert err.value.reason == "NotLeader"
    assert err.value.temporary  # retried like an outage: a renewal may reopen the fence
    assert "not sent" in str(err.value)

    # A renewal that succeeds late (the renew loop had not given up yet) reopens it.
    fence.renewed(started=clock.now - 0.5)
    assert fence.open
    assert fence.refused == 2


def test_a_late_renewal_never_moves_the_deadline_back() -> None:
    clock = FakeClock(T0)
    fence = fence_at(clock)
    fence.renewed(started=T0)
    fence.renewed(started=T0 - 5)  # an older attempt answered after a newer one
    clock.advance(9.9)
    assert fence.open


def test_the_end_of_a_term_closes_it_for_good_until_a_new_campaign() -> None:
    clock = FakeClock(T0)
    fence = fence_at(clock)
    fence.renewed(started=T0)
    fence.lost("lost")
    with pytest.raises(FencedWrite, match=r"no longer the leader .*\(lost\)"):
        fence.check("DELETE", "/api/v1/namespaces/ns/pods/victim")
    fence.renewed(started=clock.now)  # a straggling renewal of the ended term
    assert not fence.open
    fence.campaign()  # LeaderElector.run again: closed until it acquires
    assert not fence.open
    fence.renewed(started=clock.now)
    assert fence.open


# -- KubeApi: writes from worker threads -------------------------------------------------------


class RecordingPool(urllib3.PoolManager):
    """Records what would be sent; answers 200 with an empty JSON object."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str]] = []

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        self.sent.append((method, url))
        return urllib3.HTTPResponse(body=b"{}", status=200, preload_content=True)


def test_kubeapi_refuses_a_write_before_sending_it_and_lets_reads_through() -> None:
    clock = FakeClock(T0)
    pool = RecordingPool()
    api = KubeApi("https://fake.invalid", pool, lambda: None, qps=0)
    api.fence = fence = fence_at(clock)

    writes: list[Callable[[], object]] = [
        lambda: api.create(PATH, BINDING),
        lambda: api.strategic_patch("/api/v1/namespaces/ns/pods/p/status", {"status": {}}),
        lambda: api.merge_patch("/api/v1/persistentvolumes/pv", {"metadata": {}}),
        lambda: api.delete("/api/v1/namespaces/ns/pods/victim", uid="u1"),
        lambda: api.update("/api/v1/namespaces/ns/pods/p", {}),
    ]
    for write in writes:
        with pytest.raises(FencedWrite):
            write()
    assert pool.sent == []

    # Reads, the Lease's own writes, and reviews (questions, nothing stored) go through.
    api.get("/api/v1/pods")
    api.request("PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", body={}, fenced=False)
    api.create("/apis/authentication.k8s.io/v1/tokenreviews", {})
    api.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", {})
    assert [m for m, _ in pool.sent] == ["GET", "PUT", "POST", "POST"]

    fence.renewed(started=clock.now)
    api.create(PATH, BINDING)
    assert pool.sent[-1] == ("POST", f"https://fake.invalid{PATH}")


# -- AsyncApi: writes from the event loop ------------------------------------------------------


async def test_async_write_refused_when_the_deadline_passes_while_it_waits_its_turn() -> None:
    """The check is made once the request has its connection, right before its bytes go
    out: a binding that waited for the rate limiter past the renew deadline is not sent."""
    clock = FakeClock(T0)
    server = FakeServer(created)
    async with running(server) as api:
        kube = api._api
        kube._limiter.qps, kube._limiter.burst = 4.0, 1  # the next token in 0.25 s
        kube.fence = fence = fence_at(clock)
        fence.renewed(started=T0)
        await api.request("POST", PATH, body=BINDING)  # takes the one token
        waiting = asyncio.create_task(api.request("POST", PATH, body=BINDING))
        await asyncio.sleep(0.05)  # waiting for its token now
        clock.advance(RENEW_DEADLINE)  # a pause: the deadline passes meanwhile
        with pytest.raises(FencedWrite, match="renew deadline"):
            await within(waiting, "the waiting binding to be refused")
    assert len(server.requests) == 1


async def test_async_write_under_way_is_cancelled_when_the_term_ends() -> None:
    """A write whose answer has not come is cancelled when leadership ends: the caller
    gets FencedWrite (a failed write it handles like any other), not a cancellation,
    and the connection is closed so no late answer is read."""
    server = FakeServer(created, delay=3600.0)  # takes the request, never answers
    async with running(server) as api:
        api._api.fence = fence = LeaderFence(RENEW_DEADLINE, lease=LEASE)
        fence.renewed(started=time.monotonic())
        write = asyncio.create_task(api.request("POST", PATH, body=BINDING))
        await eventually(lambda: len(server.requests) == 1, "the request to reach the server")
        fence.lost("lost")
        with pytest.raises(FencedWrite, match="cancelled under way"):
            await within(write, "the write under way to be cancelled")
        assert not write.cancelled()
        assert api._pool.open_connections == 0


async def test_async_write_under_way_is_cancelled_when_the_renew_deadline_passes() -> None:
    """No renewal within the renew deadline: the writes under way are cancelled then,
    without waiting for the renew loop to declare the loss (30 s pool timeout here)."""
    server = FakeServer(created, delay=3600.0)
    async with running(server) as api:
        api._api.fence = fence = LeaderFence(0.3, lease=LEASE)
        fence.renewed(started=time.monotonic())
        write = asyncio.create_task(api.request("POST", PATH, body=BINDING))
        with pytest.raises(FencedWrite, match="renew deadline"):
            await within(write, "the write to be cancelled at the deadline")


async def test_a_cancellation_by_the_caller_is_not_turned_into_a_fenced_write() -> None:
    server = FakeServer(created, delay=3600.0)
    async with running(server) as api:
        api._api.fence = fence = LeaderFence(RENEW_DEADLINE, lease=LEASE)
        fence.renewed(started=time.monotonic())
        write = asyncio.create_task(api.request("POST", PATH, body=BINDING))
        await eventually(lambda: len(server.requests) == 1, "the request to reach the server")
        write.cancel()
        with pytest.raises(asyncio.CancelledError):
            await write
        fence.lost("stopped")  # nothing left under way to touch


# -- the elector keeps the fence ---------------------------------------------------------------

CONFIG = LeaderElectionConfig(
    lease_duration_seconds=15.0, renew_deadline_seconds=RENEW_DEADLINE, retry_period_seconds=0.01
)


def elector(api: FakeLeaseApi, clock: FakeClock, identity: str = "a") -> LeaderElector:
    return LeaderElector(
        api, CONFIG, identity=identity, lease_name=NAME, lease_namespace=NS, clock=clock
    )


async def hold(e: LeaderElector) -> tuple[asyncio.Task[None], asyncio.Event]:
    started = asyncio.Event()

    async def lead() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(e.run(lead))
    await within(started.wait(), "leadership")
    return task, started


async def test_a_leader_paused_past_its_renew_deadline_refuses_writes_at_once() -> None:
    """SIGSTOP, a long GC pause: when the process runs again, the work that was ready
    runs before the renew loop. Its writes must already be refused: the fence reads
    the monotonic clock, it does not wait for the loop to notice."""
    api, clock = FakeLeaseApi(), FakeClock(T0)
    e = elector(api, clock)
    task, _ = await hold(e)
    try:
        assert e.fence.open
        clock.advance(CONFIG.lease_duration_seconds + 1)  # the pause; no await since
        assert not e.fence.open
        with pytest.raises(FencedWrite, match="renew deadline"):
            e.fence.check("POST", PATH)
    finally:
        task.cancel()


async def test_losing_the_lease_closes_the_fence_for_good() -> None:
    """leaderelection.go renew: another identity in the Lease ends the term; the fence
    closes before the leading task is cancelled and stays closed."""
    api, clock = FakeLeaseApi(), FakeClock(T0)
    e = elector(api, clock)
    task, _ = await hold(e)
    api.write_spec(**held_by("b", renewed_at=clock.now, transitions=1))
    await within(task, "the term to end")
    assert not e.is_leader
    assert not e.fence.open
    with pytest.raises(FencedWrite, match=r"no longer the leader .*\(lost\)"):
        e.fence.check("POST", PATH)


# -- the watchdog (client-go LeaderElector.Check, healthzadaptor.go) ---------------------------


async def test_watchdog_fails_a_leader_not_renewed_for_lease_duration_plus_tolerance() -> None:
    """A leader whose renew loop no longer runs (here its task is cancelled; a deadlock
    does the same) is healthy until leaseDuration + 20 s have passed since its last
    renewal, and unhealthy after."""
    api, clock = FakeLeaseApi(), FakeClock(T0)
    e = elector(api, clock)
    task, _ = await hold(e)
    assert e.check() is None
    task.cancel()
    await asyncio.wait({task})
    renewed = clock.now
    clock.now = renewed + CONFIG.lease_duration_seconds + 20 - 0.1
    assert e.check() is None
    clock.now = renewed + CONFIG.lease_duration_seconds + 20 + 0.1
    why = e.check()
    assert why is not None
    assert why.startswith("failed election to renew leadership on lease kube-system/")
    assert e.check(max_tolerable_expired=60) is None


async def test_watchdog_passes_a_standby() -> None:
    """Check: "Currently not concerned with the case that we are hot standby"."""
    api, clock = FakeLeaseApi(), FakeClock(T0)
    api.write_spec(**held_by("other", renewed_at=clock.now))
    e = elector(api, clock, identity="b")

    async def lead() -> None:
        await asyncio.Event().wait()

    task = asyncio.create_task(e.run(lead))
    try:
        await eventually(lambda: e.observed_holder() == "other", "b to see the holder")
        clock.advance(1000)
        assert e.check() is None
    finally:
        task.cancel()


async def test_a_leading_task_that_loses_a_cancellation_still_ends_with_the_term() -> None:
    """Python 3.11's asyncio.wait_for drops a cancellation that arrives as its future
    completes (bpo-42130), which the scheduling loop's queue wait can meet: the term's
    end cancels the leading task until it is done, so the loss is reported and the shim
    exits instead of scheduling on as a deposed leader."""
    api, clock = FakeLeaseApi(), FakeClock(T0)
    e = elector(api, clock)
    started, swallowed = asyncio.Event(), asyncio.Event()
    stopped: list[str] = []

    async def lead() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            swallowed.set()  # as wait_for can: the loop goes on
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
        await asyncio.Event().wait()

    task = asyncio.create_task(e.run(lead, lambda: stopped.append("lost")))
    await within(started.wait(), "leadership")
    api.write_spec(**held_by("b", renewed_at=clock.now, transitions=1))
    await within(task, "the term to end")
    assert swallowed.is_set()
    assert stopped == ["lost"]
