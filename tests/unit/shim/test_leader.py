"""shim/leader.py: client-go leader election on a Lease, against an in-memory Lease API.

Each test names the upstream function it pins down: leaderelection.go
(staging/src/k8s.io/client-go/tools/leaderelection/) unless it says resourcelock/
leaselock.go. Time is a fake clock the test advances; the elector's pauses are real but
tiny (a 10 ms retry period), so expiry and deadlines depend only on the fake clock.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
import urllib3

from berth.framework.profile import LeaderElectionConfig
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi
from berth.shim.leader import (
    LeaderElectionConfigError,
    LeaderElector,
    default_identity,
    lease_path,
    leases_path,
    micro_time,
)
from tests.unit.shim.fakes import FakeClock

T0 = 1_760_000_000.25
NS = "kube-system"
NAME = "berth-scheduler"
PATH = lease_path(NS, NAME)
COLLECTION = leases_path(NS)
# Upstream's durations, with a retry period short enough for a quick test: the fake clock
# decides expiry and deadlines, the real retry period only how fast the loops spin.
CONFIG = LeaderElectionConfig(
    lease_duration_seconds=15.0, renew_deadline_seconds=10.0, retry_period_seconds=0.01
)
WAIT = 5.0  # seconds of real time any awaited condition may take


def api_error(method: str, path: str, status: int, reason: str) -> ApiError:
    body = orjson.dumps({"kind": "Status", "reason": reason, "message": f"{reason} (fake)"})
    return ApiError(method, path, status, body)


class FakeLeaseApi(KubeApi):
    """Leases in memory with the API server's optimistic concurrency: every write bumps
    resourceVersion; a PUT carrying another resourceVersion gets 409 Conflict, a POST of
    an existing name 409 AlreadyExists. Called from the elector's worker threads."""

    def __init__(self) -> None:
        super().__init__("https://fake.invalid", urllib3.PoolManager(), lambda: None)
        self._lock = threading.Lock()
        self._objects: dict[str, JSON] = {}
        self._rv = 0
        self.calls: list[tuple[str, str, bool]] = []  # method, path, rate-limited
        # Methods answered with 503 while listed.
        self.failing: set[str] = set()
        # Run once, just before the next PUT / POST is applied: another writer racing.
        self.before_put: Callable[[], None] | None = None
        self.before_post: Callable[[], None] | None = None

    # -- the server -------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        limit: bool = True,
        timeout: float | None = None,
        fenced: bool = True,
    ) -> JSON:
        # Lease writes go around the write fence, or no candidate could ever acquire.
        assert not fenced, f"{method} {path} sent through the write fence"
        with self._lock:
            self.calls.append((method, path, limit))
            if method in self.failing:
                raise api_error(method, path, 503, "ServiceUnavailable")
        if method == "PUT" and self.before_put is not None:
            hook, self.before_put = self.before_put, None
            hook()
        if method == "POST" and self.before_post is not None:
            hook, self.before_post = self.before_post, None
            hook()
        with self._lock:
            if method == "GET":
                if path not in self._objects:
                    raise api_error(method, path, 404, "NotFound")
                return copy.deepcopy(self._objects[path])
            if method == "POST":
                obj_path = f"{path}/{body['metadata']['name']}"
                if obj_path not in self._objects:
                    return self._store(obj_path, body)
                raise api_error(method, path, 409, "AlreadyExists")
            if method == "PUT":
                stored = self._objects.get(path)
                if stored is None:
                    raise api_error(method, path, 404, "NotFound")
                sent = (body.get("metadata") or {}).get("resourceVersion")
                if sent != stored["metadata"]["resourceVersion"]:
                    raise api_error(method, path, 409, "Conflict")
                return self._store(path, body)
        raise AssertionError(f"unexpected {method} {path}")

    def _store(self, path: str, body: JSON) -> JSON:
        self._rv += 1
        obj = copy.deepcopy(body)
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        self._objects[path] = obj
        return copy.deepcopy(obj)

    # -- the test's view ----------------------------------------------------------

    def lease(self) -> JSON:
        with self._lock:
            return copy.deepcopy(self._objects[PATH])

    def spec(self) -> JSON:
        spec: JSON = self.lease()["spec"]
        return spec

    def write_spec(self, **spec: Any) -> None:
        """Another writer (a rival candidate, or the holder renewing) sets the spec."""
        with self._lock:
            current = self._objects.get(PATH)
            obj: JSON = current or {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": NAME, "namespace": NS},
                "spec": {},
            }
            obj = copy.deepcopy(obj)
            obj["spec"] = {**obj["spec"], **spec}
            self._store(PATH, obj)

    def count(self, method: str) -> int:
        with self._lock:
            return sum(1 for m, _, _ in self.calls if m == method)


def held_by(holder: str, *, renewed_at: float, transitions: int = 0) -> dict[str, Any]:
    """A Lease spec as another candidate writes it."""
    return {
        "holderIdentity": holder,
        "leaseDurationSeconds": 15,
        "acquireTime": micro_time(renewed_at),
        "renewTime": micro_time(renewed_at),
        "leaseTransitions": transitions,
    }


async def eventually(predicate: Callable[[], bool], what: str) -> None:
    """Poll ``predicate`` (cheap, in-memory) until true; fail naming ``what`` after
    WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {WAIT}s waiting for {what}")
        await asyncio.sleep(0.001)


async def within(awaitable: Awaitable[Any], what: str) -> Any:
    """Await ``awaitable``; fail naming ``what`` if it takes over WAIT seconds."""
    try:
        return await asyncio.wait_for(awaitable, WAIT)
    except TimeoutError:
        pytest.fail(f"timed out after {WAIT}s waiting for {what}")


async def more_calls(api: FakeLeaseApi, method: str, n: int = 3) -> None:
    """Let the elector make ``n`` more ``method`` calls (so it has acted on the present
    state and the clock at least once)."""
    target = api.count(method) + n
    await eventually(lambda: api.count(method) >= target, f"{n} more {method} calls")


@dataclass
class Candidate:
    """An elector running ``run()`` in a task, with what its callbacks saw."""

    elector: LeaderElector
    started: asyncio.Event = field(default_factory=asyncio.Event)
    leading_cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    stopped_calls: int = 0
    task: asyncio.Task[None] | None = None
    fail_with: BaseException | None = None

    async def lead(self) -> None:
        self.started.set()
        if self.fail_with is not None:
            raise self.fail_with
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.leading_cancelled.set()
            raise

    def on_stopped(self) -> None:
        self.stopped_calls += 1

    def start(self) -> Candidate:
        self.task = asyncio.create_task(self.elector.run(self.lead, self.on_stopped))
        return self

    async def finished(self) -> None:
        """Wait for run() to return (re-raising what it raised)."""
        assert self.task is not None
        await within(asyncio.shield(self.task), f"run() of {self.elector.identity} to return")


@pytest.fixture
def api() -> FakeLeaseApi:
    return FakeLeaseApi()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def candidates(api: FakeLeaseApi, clock: FakeClock) -> Iterator[Callable[[str], Candidate]]:
    """``candidates(identity)`` makes and starts a candidate; all are cancelled at the end."""
    made: list[Candidate] = []

    def make(identity: str, **kwargs: Any) -> Candidate:
        elector = LeaderElector(
            api,
            CONFIG,
            identity=identity,
            lease_name=NAME,
            lease_namespace=NS,
            clock=clock,
            **kwargs,
        )
        candidate = Candidate(elector).start()
        made.append(candidate)
        return candidate

    yield make
    for candidate in made:
        if candidate.task is not None:
            candidate.task.cancel()


# -- acquire ------------------------------------------------------------------------------


async def test_try_acquire_or_renew_creates_a_missing_lease(
    api: FakeLeaseApi, candidates: Callable[[str], Candidate]
) -> None:
    """tryAcquireOrRenew step 2 / leaselock.go Create: no Lease yet, so the candidate
    creates it holding it, with zero transitions."""
    me = candidates("me")
    await within(me.started.wait(), "the candidate to lead")

    assert me.elector.is_leader
    assert me.elector.observed_holder() == "me"
    lease = api.lease()
    assert lease["metadata"] == {"name": NAME, "namespace": NS, "resourceVersion": "1"}
    assert lease["spec"] == {
        "holderIdentity": "me",
        "leaseDurationSeconds": 15,
        "acquireTime": micro_time(T0),
        "renewTime": micro_time(T0),
        "leaseTransitions": 0,
    }
    # A client of its own upstream: never queued behind the shim's rate-limited writes.
    assert all(not limited for _, _, limited in api.calls)
    await me.elector.stop()


async def test_try_acquire_or_renew_stands_by_while_a_live_lease_is_held_by_another(
    api: FakeLeaseApi,
    clock: FakeClock,
    candidates: Callable[[str], Candidate],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """tryAcquireOrRenew step 3 with isLeaseValid: the Lease's own renewTime (here from
    another, far-off clock) is not trusted; the holder's term runs for
    leaseDurationSeconds on our clock from when we first saw the record."""
    api.write_spec(**held_by("other", renewed_at=T0 - 86_400))
    caplog.set_level(logging.INFO, logger="berth.shim.leader")
    me = candidates("me")
    await more_calls(api, "GET")
    clock.advance(14.9)
    await more_calls(api, "GET")

    assert not me.elector.is_leader
    assert not me.started.is_set()
    assert me.elector.observed_holder() == "other"
    assert api.count("PUT") == 0
    assert api.spec()["holderIdentity"] == "other"
    standing_by = [r for r in caplog.messages if "standing by" in r]
    assert standing_by == [f"lease {NS}/{NAME} held by other; standing by"]

    await within(me.elector.stop(), "stop() while standing by")
    await me.finished()
    assert api.spec()["holderIdentity"] == "other"  # not ours: nothing to release
    assert me.stopped_calls == 0


async def test_is_lease_valid_counts_from_the_last_observed_change(
    api: FakeLeaseApi, clock: FakeClock, candidates: Callable[[str], Candidate]
) -> None:
    """setObservedRecord / isLeaseValid: each change of the record (the holder renewing)
    restarts the lease duration on our clock; only a full leaseDuration without a change
    seen lets a standby in."""
    api.write_spec(**held_by("other", renewed_at=T0))
    me = candidates("me")
    await more_calls(api, "GET")

    clock.advance(10)
    api.write_spec(renewTime=micro_time(clock.now))  # the holder renews at T0+10
    await more_calls(api, "GET")
    clock.advance(10)  # T0+20: 20s since first seen, 10s since the renewal
    await more_calls(api, "GET")
    assert not me.started.is_set(), "took a lease renewed 10s ago (lease duration 15s)"

    clock.advance(5.5)  # T0+25.5: 15.5s without a change seen
    await within(me.started.wait(), "the standby to take the expired lease")
    assert api.spec()["holderIdentity"] == "me"
    await me.elector.stop()


async def test_try_acquire_or_renew_takes_an_expired_lease_and_counts_a_transition(
    api: FakeLeaseApi, clock: FakeClock, candidates: Callable[[str], Candidate]
) -> None:
    """tryAcquireOrRenew step 4: a new holder sets acquireTime to now and increments
    leaseTransitions."""
    api.write_spec(**held_by("other", renewed_at=T0, transitions=4))
    me = candidates("me")
    await more_calls(api, "GET")
    clock.advance(15.5)
    await within(me.started.wait(), "the standby to take the expired lease")

    assert api.spec() == {
        "holderIdentity": "me",
        "leaseDurationSeconds": 15,
        "acquireTime": micro_time(T0 + 15.5),
        "renewTime": micro_time(T0 + 15.5),
        "leaseTransitions": 5,
    }
    assert me.elector.is_leader
    await me.elector.stop()


async def test_try_acquire_or_renew_takes_a_released_lease_at_once(
    api: FakeLeaseApi, candidates: Callable[[str], Candidate]
) -> None:
    """tryAcquireOrRenew step 3: an empty holderIdentity (release) is free now, whatever
    the duration says."""
    api.write_spec(**{**held_by("", renewed_at=T0, transitions=2), "leaseDurationSeconds": 1})
    me = candidates("me")
    await within(me.started.wait(), "the candidate to take the released lease")
    assert api.spec()["leaseTransitions"] == 3


async def test_update_conflict_means_not_acquired(
    api: FakeLeaseApi, clock: FakeClock, candidates: Callable[[str], Candidate]
) -> None:
    """leaselock.go Update carries the resourceVersion read: when the holder renews
    between our read and our write, the write gets 409 Conflict and we are not leader;
    the renewal is then read and restarts the holder's term."""
    api.write_spec(**held_by("other", renewed_at=T0, transitions=1))
    clock.advance(100)  # long expired by the Lease's timestamps; we have not seen it yet

    def holder_renews() -> None:
        api.write_spec(renewTime=micro_time(clock.now))

    me = candidates("me")
    await more_calls(api, "GET")
    api.before_put = holder_renews
    clock.advance(15.5)  # expired on our clock: the next attempt tries to take it
    await eventually(lambda: api.before_put is None, "the candidate's write")
    await more_calls(api, "GET")

    assert not me.started.is_set()
    assert not me.elector.is_leader
    assert api.count("PUT") == 1  # the one that conflicted; the renewal is now live
    spec = api.spec()
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("other", 1)
    await me.elector.stop()


async def test_create_conflict_means_not_acquired(
    api: FakeLeaseApi, candidates: Callable[[str], Candidate]
) -> None:
    """leaselock.go Create: two candidates find no Lease; the one whose create comes
    second gets 409 AlreadyExists and stands by."""
    api.before_post = lambda: api.write_spec(**held_by("other", renewed_at=T0))
    me = candidates("me")
    await eventually(lambda: api.count("POST") == 1, "the candidate's create")
    await more_calls(api, "GET")

    assert not me.started.is_set()
    assert api.spec()["holderIdentity"] == "other"
    assert me.elector.observed_holder() == "other"
    await me.elector.stop()


# -- renew ----------------------------------------------------------------------------------


async def test_renew_updates_renew_time_every_retry_period(
    api: FakeLeaseApi, clock: FakeClock, candidates: Callable[[str], Candidate]
) -> None:
    """renew + tryAcquireOrRenew fast path: the leader writes renewTime on the
    resourceVersion it last wrote, without reading first; acquireTime and the transition
    count stay."""
    api.write_spec(**held_by("", renewed_at=T0, transitions=7))
    me = candidates("me")
    await within(me.started.wait(), "the candidate to lead")
    gets = api.count("GET")

    clock.advance(5)
    await more_calls(api, "PUT")
    assert api.spec() == {
        "holderIdentity": "me",
        "leaseDurationSeconds": 15,
        "acquireTime": micro_time(T0),
        "renewTime": micro_time(T0 + 5),
        "leaseTransitions": 8,
    }
    assert api.count("GET") == gets, "renewals should not re-read the lease"
    assert me.elector.is_leader
    await me.elector.stop()


async def test_renew_failing_past_the_renew_deadline_loses_leadership(
    api: FakeLeaseApi,
    clock: FakeClock,
    candidates: Callable[[str], Candidate],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """renew: a round retries every retry period; when no write has succeeded within
    RenewDeadline, leadership is lost: the leading work is cancelled and
    on_stopped_leading called."""
    caplog.set_level(logging.INFO, logger="berth.shim.leader")
    me = candidates("me")
    await within(me.started.wait(), "the candidate to lead")

    api.failing = {"GET", "PUT"}
    await more_calls(api, "PUT")
    clock.advance(9.9)  # still within the round's deadline
    await more_calls(api, "PUT")
    assert me.elector.is_leader
    assert not me.leading_cancelled.is_set()

    clock.advance(0.2)
    await me.finished()
    assert not me.elector.is_leader
    assert me.leading_cancelled.is_set()
    assert me.stopped_calls == 1
    assert any(
        m.startswith(f"lost lease {NS}/{NAME}: no renewal succeeded within the 10s")
        for m in caplog.messages
    ), caplog.messages


async def test_renew_recovers_when_a_write_succeeds_within_the_deadline(
    api: FakeLeaseApi, clock: FakeClock, candidates: Callable[[str], Candidate]
) -> None:
    """renew: failures inside a round are retried; one success ends the round and the
    next round gets a fresh deadline."""
    me = candidates("me")
    await within(me.started.wait(), "the candidate to lead")
    api.failing = {"GET", "PUT"}
    await more_calls(api, "PUT")
    clock.advance(9)
    api.failing = set()
    await more_calls(api, "PUT")
    clock.advance(9)  # 18s after the failing round began: a new round, not a loss
    await more_calls(api, "PUT")

    assert me.elector.is_leader
    assert me.stopped_calls == 0
    assert api.spec()["renewTime"] == micro_time(T0 + 18)
    await me.elector.stop()


async def test_renew_gives_up_when_another_identity_holds_the_lease(
    api: FakeLeaseApi, candidates: Callable[[str], Candidate]
) -> None:
    """tryAcquireOrRenew step 3 while leading: someone else's live record (written over
    ours) means our term is over; we stop at once rather than retrying to the deadline,
    and do not touch their Lease."""
    me = candidates("me")
    await within(me.started.wait(), "the candidate to lead")
    api.write_spec(holderIdentity="usurper", renewTime=micro_time(T0))
    await me.finished()

    assert me.stopped_calls == 1
    assert me.leading_cancelled.is_set()
    assert api.spec()["holderIdentity"] == "usurper"


# -- release and the end of a term -------------------------------------------------------


async def test_release_on_stop_clears_the_holder_and_a_standby_takes_over_at_once(
    api: FakeLeaseApi, candidates: Callable[[str], Candidate]
) -> None:
    """release (ReleaseOnCancel): on a clean stop the leader writes an empty holder and a
    one-second duration, keeping the transition count; a standby takes it at its next
    attempt, without the clock moving."""
    me = candidates("me")
    await within(me.started.wait(), "the candidate to lead")
    standby = candidates("standby")
    await eventually(lambda: standby.elector.observed_holder() == "me", "the standby to see me")

    await within(me.elector.stop(), "stop()")
    await me.finished()
    assert me.leading_cancelled.is_set()
    assert me.stopped_calls == 0  # a requested stop is not a loss
    assert not me.elector.is_leader

    await within(standby.started.wait(), "the standby to take the released lease")
    spec = api.spec()
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("standby", 1)
    await standby.elector.stop()
    assert api.spec()["holderIdentity"] == ""
    assert api.spec()["leaseDurationSeconds"] == 1


async def test_cancelling_run_abandons_the_lease_without_release(
    api: FakeLeaseApi, candidates: Callable[[str], Candidate]
) -> None:
    """A cancelled run() behaves as a crash: the leading task is cancelled, the Lease
    keeps naming us until it expires (standbys wait out leaseDuration)."""
    me = candidates("me")
    await within(me.started.wait(), "the candidate to lead")
    puts = api.count("PUT")
    assert me.task is not None
    me.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await me.task
    assert me.leading_cancelled.is_set()
    assert not me.elector.is_leader
    assert api.spec()["holderIdentity"] == "me"
    assert api.count("PUT") == puts


async def test_a_failing_leading_task_releases_the_lease_and_propagates(
    api: FakeLeaseApi, clock: FakeClock
) -> None:
    """The leading work raising ends the term: the Lease is released for a standby and
    the error comes out of run()."""
    elector = LeaderElector(api, CONFIG, identity="me", lease_name=NAME, lease_namespace=NS)
    me = Candidate(elector, fail_with=RuntimeError("scheduling loop broke")).start()
    with pytest.raises(RuntimeError, match="scheduling loop broke"):
        await me.finished()
    assert api.spec()["holderIdentity"] == ""
    assert me.stopped_calls == 0


async def test_stop_before_run_makes_run_return_at_once(api: FakeLeaseApi) -> None:
    elector = LeaderElector(api, CONFIG, identity="me", lease_name=NAME, lease_namespace=NS)
    await elector.stop()
    await within(elector.run(Candidate(elector).lead), "run() after stop()")
    assert api.calls == []


async def test_run_twice_at_once_is_refused(
    api: FakeLeaseApi, candidates: Callable[[str], Candidate]
) -> None:
    me = candidates("me")
    await within(me.started.wait(), "the candidate to lead")
    with pytest.raises(RuntimeError, match="already running"):
        await me.elector.run(me.lead)
    await me.elector.stop()


# -- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize("lock", ["endpointsleases", "configmapsleases", "endpoints", ""])
def test_refuses_resource_locks_other_than_leases(api: FakeLeaseApi, lock: str) -> None:
    with pytest.raises(LeaderElectionConfigError, match=r'resourceLock .* set it to "leases"'):
        LeaderElector(api, LeaderElectionConfig(resource_lock=lock))


@pytest.mark.parametrize(
    ("lease", "renew", "retry", "message"),
    [
        (10.0, 10.0, 2.0, "leaseDuration .* must be greater than renewDeadline"),
        (15.0, 2.4, 2.0, r"renewDeadline .* must be greater than retryPeriod x 1.2"),
        (0.5, 0.4, 0.1, "leaseDuration must be at least 1s"),
        (15.0, 10.0, 0.0, "retryPeriod must be greater than zero"),
    ],
)
def test_refuses_durations_new_leader_elector_refuses(
    api: FakeLeaseApi, lease: float, renew: float, retry: float, message: str
) -> None:
    """NewLeaderElector's checks, made at construction."""
    config = LeaderElectionConfig(
        lease_duration_seconds=lease, renew_deadline_seconds=renew, retry_period_seconds=retry
    )
    with pytest.raises(LeaderElectionConfigError, match=message):
        LeaderElector(api, config)


def test_lease_and_identity_defaults(api: FakeLeaseApi) -> None:
    """The Lease defaults to the config's resourceNamespace/resourceName; the identity is
    kube-scheduler's hostname_UUID, unique per elector."""
    a = LeaderElector(api, LeaderElectionConfig())
    b = LeaderElector(api, LeaderElectionConfig(), lease_name="berth-scheduler")
    assert (a.lease_namespace, a.lease_name) == ("kube-system", "kube-scheduler")
    assert (b.lease_namespace, b.lease_name) == ("kube-system", "berth-scheduler")
    uuid_re = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    assert re.fullmatch(rf".+_{uuid_re}", a.identity)
    assert a.identity != b.identity
    assert default_identity().split("_")[0] == a.identity.split("_")[0]
    with pytest.raises(LeaderElectionConfigError, match="identity"):
        LeaderElector(api, LeaderElectionConfig(), identity="")


def test_micro_time_is_rfc3339_with_microseconds() -> None:
    assert micro_time(0.5) == "1970-01-01T00:00:00.500000Z"
    assert micro_time(T0) == "2025-10-09T08:53:20.250000Z"
    assert COLLECTION == "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"


async def test_leader_election_master_status_is_1_while_leading_and_0_otherwise(
    api: FakeLeaseApi, candidates: Callable[[str], Candidate]
) -> None:
    """leader_election_master_status{name} (component-base clientgo/leaderelection
    leaderGauge): 0 from the elector's start (NewLeaderElector's leaderOff), 1 once it
    leads (acquire's leaderOn), 0 again when its term ends."""
    from prometheus_client import REGISTRY

    def status() -> float | None:
        return REGISTRY.get_sample_value("leader_election_master_status", {"name": NAME})

    me = candidates("me")
    await within(me.started.wait(), "the candidate to lead")
    assert status() == 1.0
    await within(me.elector.stop(), "stop()")
    await me.finished()
    assert status() == 0.0
    # A standby that never leads reports 0.
    api.write_spec(**held_by("other", renewed_at=T0))
    standby = candidates("standby")
    await eventually(lambda: standby.elector.observed_holder() == "other", "the standby to look")
    assert status() == 0.0
    await standby.elector.stop()
