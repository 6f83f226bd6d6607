"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics.

Several shim replicas may run; only the one holding the Lease schedules, the others stand
by. The algorithm is client-go's (staging/src/k8s.io/client-go/tools/leaderelection/
leaderelection.go, with the Lease handling of resourcelock/leaselock.go), re-implemented on
asyncio over the shim's ``KubeApi``:

* A candidate never trusts the timestamps written in the Lease: they come from another
  machine's clock. It notes, on its own clock, when it last saw the Lease record *change*
  (client-go's ``observedTime``); the holder's term is over once ``leaseDurationSeconds``
  have passed on that clock with no change seen. This tolerates any clock skew between
  replicas, though not a large difference in clock *rate*.
* Every write is conditional on the resourceVersion last read or written, so two
  candidates racing for an expired Lease cannot both win: the loser gets 409 Conflict.
* The leader renews every retry period. A renewal round retries every retry period until
  one write succeeds; if none has succeeded within the renew deadline, leadership is lost
  (the renew deadline is shorter than the lease duration, so the leader gives up before any
  standby may take over).
* On a clean stop the leader releases the Lease (client-go's ``ReleaseOnCancel``, which
  kube-scheduler sets): an empty holder with a one-second duration, which a standby takes at
  its next attempt instead of waiting out the lease duration.
* The elector keeps a write fence (``shim.fence.LeaderFence``, ``fence``): open from
  each successful acquire or renew until the renew deadline has passed since that attempt
  began, closed for good the moment the term ends. The shim's writes ask it right before
  they are sent, so a leader that was paused past its lease writes nothing when it runs
  again, before its renew loop has even noticed.
* ``check`` is client-go's ``LeaderElector.Check``, the watchdog behind kube-scheduler's
  ``/healthz`` (healthzadaptor.go): a leader whose Lease has not been renewed for the
  lease duration plus a tolerance is unhealthy.
* Durations are measured on a monotonic clock (``monotonic``), as Go's ``time.Since``
  does with its monotonic reading: a step of the wall clock neither ends nor extends a
  term. The wall clock (``clock``) only stamps acquireTime and renewTime.

Requests bypass ``KubeApi``'s shared token bucket (``limit=False``): kube-scheduler gives
leader election a client of its own, so lease renewals never queue behind binding traffic,
and each request is bounded by ``max(renewDeadline / 2, 1s)`` as
resourcelock.NewFromKubeconfig bounds its client.

Deliberate differences from client-go, each for the caller's sake:

* ``on_stopped_leading`` is called only when leadership is *lost*. client-go calls
  OnStoppedLeading whenever Run returns (kube-scheduler's callback then tells a requested
  shutdown from a loss by checking its context); here the caller that called ``stop()``
  already knows.
* A leader that sees another identity holding the Lease gives up at once; client-go keeps
  retrying until the renew deadline, which can only end the same way.
* Cancelling ``run()`` abandons the Lease without releasing it, as a crash would (standbys
  wait out the lease duration); ``stop()`` is the clean hand-over.
* Spec fields this module does not manage (``strategy``, ``preferredHolder``) are kept on
  update rather than dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import enum
import logging
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from berth.framework.profile import LeaderElectionConfig
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi, segment
from berth.shim import metrics
from berth.shim.fence import LeaderFence

log = logging.getLogger(__name__)

# wait.JitterUntil's factor in client-go's acquire loop: a candidate waits between 1 and
# 1 + JITTER_FACTOR retry periods between attempts, so candidates do not retry in lockstep.
JITTER_FACTOR = 1.2

LEASES_API = "/apis/coordination.k8s.io/v1"

# The smallest per-request timeout (resourcelock.NewFromKubeconfig: renewDeadline / 2, at
# least one second).
MIN_REQUEST_TIMEOUT = 1.0

# How long a cancelled leading task has to end before it is cancelled again.
CANCEL_RETRY_SECONDS = 0.1

# kube-scheduler's watchdog tolerance: WatchDog: leaderelection.NewLeaderHealthzAdaptor(
# time.Second * 20) in cmd/kube-scheduler/app/options/options.go makeLeaderElectionConfig.
WATCHDOG_TOLERANCE = 20.0


class LeaderElectionConfigError(ValueError):
    """The leader election settings cannot work; the message names the setting."""


def leases_path(namespace: str) -> str:
    """The Lease collection of ``namespace`` (where a missing Lease is created)."""
    return f"{LEASES_API}/namespaces/{segment(namespace)}/leases"


def lease_path(namespace: str, name: str) -> str:
    """One Lease object."""
    return f"{leases_path(namespace)}/{segment(name)}"


def micro_time(timestamp: float) -> str:
    """A ``metav1.MicroTime`` as the API server writes it: RFC 3339, UTC, microseconds."""
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    """``<hostname>_<random UUID>``, as kube-scheduler's makeLeaderElectionConfig builds it:
    the UUID keeps two processes on one host (or a restarted process) distinct."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True, slots=True)
class LeaderElectionRecord:
    """The fields of a Lease spec that leader election reads and writes
    (resourcelock.LeaderElectionRecord and its Lease conversions in leaselock.go)."""

    holder_identity: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str = ""
    renew_time: str = ""
    leader_transitions: int = 0

    @classmethod
    def from_spec(cls, spec: JSON) -> LeaderElectionRecord:
        """leaselock.go LeaseSpecToLeaderElectionRecord: absent fields read as zero."""
        return cls(
            holder_identity=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=str(spec.get("acquireTime") or ""),
            renew_time=str(spec.get("renewTime") or ""),
            leader_transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self, base: JSON | None = None) -> JSON:
        """leaselock.go LeaderElectionRecordToLeaseSpec, over ``base`` (the current spec)
        so fields this module does not manage survive the update."""
        spec: JSON = dict(base or {})
        spec.update(
            holderIdentity=self.holder_identity,
            leaseDurationSeconds=self.lease_duration_seconds,
            acquireTime=self.acquire_time or None,
            renewTime=self.renew_time or None,
            leaseTransitions=self.leader_transitions,
        )
        return {k: v for k, v in spec.items() if v is not None}


class _TermEnd(enum.Enum):
    """Why a term of leadership ended."""

    STOPPED = "stopped"  # stop() was called
    LOST = "lost"  # renewal failed past the deadline, or another identity holds the Lease
    TASK_FAILED = "task failed"  # on_started_leading raised


def _validate(config: LeaderElectionConfig) -> None:
    """NewLeaderElector's checks (leaderelection.go) plus the Lease-only rule, so a bad
    setting fails at construction with the setting's name instead of misbehaving later."""
    if config.resource_lock != "leases":
        raise LeaderElectionConfigError(
            f"leaderElection.resourceLock {config.resource_lock!r} is not supported: "
            'Berth elects its leader on a coordination.k8s.io/v1 Lease; set it to "leases"'
        )
    lease, renew, retry = (
        config.lease_duration_seconds,
        config.renew_deadline_seconds,
        config.retry_period_seconds,
    )
    if lease < 1:
        # The Lease stores whole seconds and the API server refuses 0.
        raise LeaderElectionConfigError(
            f"leaderElection.leaseDuration must be at least 1s, got {lease}s"
        )
    if renew <= 0:
        raise LeaderElectionConfigError("leaderElection.renewDeadline must be greater than zero")
    if retry <= 0:
        raise LeaderElectionConfigError("leaderElection.retryPeriod must be greater than zero")
    if lease <= renew:
        raise LeaderElectionConfigError(
            f"leaderElection.leaseDuration ({lease}s) must be greater than "
            f"renewDeadline ({renew}s): a leader must give up before standbys take over"
        )
    if renew <= JITTER_FACTOR * retry:
        raise LeaderElectionConfigError(
            f"leaderElection.renewDeadline ({renew}s) must be greater than "
            f"retryPeriod x {JITTER_FACTOR} ({JITTER_FACTOR * retry:g}s)"
        )


class LeaderElector:
    """One candidate for the leadership recorded in one Lease.

    ``run()`` campaigns until this candidate holds the Lease, runs the caller's leading
    work while renewing, and returns when leadership ends. The caller decides what a loss
    means (kube-scheduler exits). Durations come from ``config``; ``clock`` (seconds, wall
    time: it stamps acquireTime and renewTime) and ``monotonic`` (seconds, what durations
    are measured on; ``clock`` when only that is given, so one fake drives both in tests)
    are injectable for tests. The Lease is
    ``lease_namespace/lease_name``, defaulting to the config's resourceNamespace and
    resourceName: Berth passes its own name so it never contends for kube-scheduler's
    Lease.
    """

    def __init__(
        self,
        api: KubeApi,
        config: LeaderElectionConfig,
        *,
        identity: str | None = None,
        lease_name: str | None = None,
        lease_namespace: str | None = None,
        clock: Callable[[], float] | None = None,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        _validate(config)
        self.identity: str = default_identity() if identity is None else identity
        if not self.identity:
            raise LeaderElectionConfigError("leader election identity must not be empty")
        self.lease_name = lease_name or config.resource_name
        self.lease_namespace = lease_namespace or config.resource_namespace
        if not self.lease_name or not self.lease_namespace:
            raise LeaderElectionConfigError(
                "leaderElection.resourceName and resourceNamespace must not be empty"
            )
        self._api = api
        self._clock = clock or time.time
        self._monotonic = monotonic or clock or time.monotonic
        self._lease_duration = config.lease_duration_seconds
        self._renew_deadline = config.renew_deadline_seconds
        self._retry_period = config.retry_period_seconds
        self._request_timeout = max(self._renew_deadline / 2, MIN_REQUEST_TIMEOUT)
        self._path = lease_path(self.lease_namespace, self.lease_name)
        self._describe = f"{self.lease_namespace}/{self.lease_name}"
        # What the shim's writes ask before they are sent (see the module's docstring).
        self.fence = LeaderFence(self._renew_deadline, lease=self._describe, clock=self._monotonic)

        # The Lease object last read or written: its resourceVersion makes the next
        # update conditional (leaselock.go keeps ll.lease for the same reason).
        self._lease: JSON | None = None
        # client-go's observedRecord / observedTime: the record last seen or written, and
        # when (on our monotonic clock) it was seen to change.
        self._observed = LeaderElectionRecord()
        self._observed_time = 0.0
        # client-go's observedRawRecord: the record of the last read, to tell a change.
        self._last_read: LeaderElectionRecord | None = None
        # The holder last logged, so a standby logs each new holder once.
        self._reported_holder = ""
        # Why the last attempt did not get the Lease, for the message when a term ends.
        self._last_error = ""

        # leader_election_master_status{name=<lease name>}: 0 from the start
        # (client-go NewLeaderElector's leaderOff), 1 while leading.
        metrics.leading(self.lease_name, False)
        self._leading = False
        self._running = False
        self._stop_requested = False
        # Set by stop() (and by a failing leading task) to cut a pause short.
        self._wake = asyncio.Event()
        self._finished = asyncio.Event()
        self._finished.set()

    # -- public -----------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """True from the moment this candidate acquires the Lease until its term ends
        (loss, stop, failure or cancellation of ``run()``)."""
        return self._leading

    @property
    def lease(self) -> str:
        """``namespace/name`` of the Lease."""
        return self._describe

    def check(self, max_tolerable_expired: float = WATCHDOG_TOLERANCE) -> str | None:
        """client-go LeaderElector.Check, the leader-election watchdog of kube-scheduler's
        /healthz (and /readyz): None while this candidate is not the holder it last saw
        (a standby is healthy) or has renewed within the lease duration plus
        ``max_tolerable_expired`` seconds; otherwise what is wrong. A leader that failed to
        renew should have stopped; one that has not (a deadlock, a wedged loop) is reported
        unhealthy so that the kubelet restarts it."""
        if not self._observed_is_us():
            return None
        since = self._monotonic() - self._observed_time
        if since > self._lease_duration + max_tolerable_expired:
            return (
                f"failed election to renew leadership on lease {self._describe}: last renewed "
                f"{since:.0f}s ago (lease duration {self._lease_duration:g}s, tolerance "
                f"{max_tolerable_expired:g}s)"
            )
        return None

    def observed_holder(self) -> str:
        """The holder identity in the Lease as last seen or written ("" if none or not
        yet seen); client-go's GetLeader."""
        return self._observed.holder_identity

    async def run(
        self,
        on_started_leading: Callable[[], Awaitable[None]],
        on_stopped_leading: Callable[[], None] | None = None,
    ) -> None:
        """Campaign, lead, and return when the term ends (client-go's Run).

        Once the Lease is ours, ``on_started_leading()`` is awaited in a task of its own
        while the Lease is renewed. The term ends:

        * when leadership is lost: the leading task is cancelled (and awaited), the
          Lease is released if it still reads as ours, then ``on_stopped_leading()`` is
          called and ``run()`` returns;
        * when ``stop()`` is called: the leading task is cancelled and awaited, the Lease
          released, ``run()`` returns (``on_stopped_leading`` is not called);
        * when the leading task raises: the Lease is released and the exception
          propagates from ``run()``.

        A leading task that returns normally does not end the term: as in client-go, the
        Lease is held until ``stop()`` or a loss. Cancelling ``run()`` cancels the leading
        task and abandons the Lease without releasing it, as a crash would.
        """
        if self._running:
            raise RuntimeError(f"LeaderElector.run() for lease {self._describe} is already running")
        self._running = True
        self._finished.clear()
        if not self._stop_requested:
            self._wake.clear()  # a failed leading task of an earlier term may have set it
        self.fence.campaign()
        try:
            await self._run(on_started_leading, on_stopped_leading)
        finally:
            self._leading = False
            self.fence.lost("the election ended")
            self._running = False
            self._finished.set()

    async def stop(self) -> None:
        """End the campaign or the term cleanly and wait until ``run()`` has returned: a
        leader cancels its leading task, then releases the Lease so a standby takes over
        at its next attempt. Final: a later ``run()`` returns at once."""
        self._stop_requested = True
        self._wake.set()
        await self._finished.wait()

    # -- the loops ------------------------------------------------------------------

    async def _run(
        self,
        on_started_leading: Callable[[], Awaitable[None]],
        on_stopped_leading: Callable[[], None] | None,
    ) -> None:
        if not await self._acquire():
            return
        self._leading = True
        metrics.leading(self.lease_name, True)
        log.info("became leader of lease %s as %s", self._describe, self.identity)

        async def lead() -> None:
            await on_started_leading()

        leading = asyncio.create_task(lead(), name=f"leading {self._describe}")
        leading.add_done_callback(self._on_leading_done)
        end: _TermEnd | None = None
        try:
            end = await self._renew(leading)
        finally:
            # Whatever ended the term (cancellation of run() included), the leading work
            # stops before anything else happens: nothing may act as leader after this.
            # The fence first: no write starts from here, and those under way are cancelled.
            self._leading = False
            metrics.leading(self.lease_name, False)
            self.fence.lost(end.value if end is not None else "abandoned")
            error = await _cancel_and_wait(leading)

        if end is _TermEnd.LOST:
            # client-go's renew() releases after a loss too (ReleaseOnCancel): a write
            # conditional on our last resourceVersion only succeeds if nobody else has
            # written since, and then saves the standbys the wait for expiry.
            await self._release()
            if on_stopped_leading is not None:
                on_stopped_leading()
        else:
            await self._release()
        if error is not None:
            raise error

    async def _acquire(self) -> bool:
        """leaderelection.go acquire: try, then wait a jittered retry period, until the
        Lease is ours (True) or stop() is called (False)."""
        log.info("attempting to acquire lease %s as %s", self._describe, self.identity)
        while not self._stop_requested:
            if await self._try_acquire_or_renew(self._request_timeout):
                if self._stop_requested:
                    # Won just as we were told to stop: hand it straight back.
                    await self._release()
                    return False
                return True
            await self._pause(self._retry_period * (1.0 + random.random() * JITTER_FACTOR))
        return False

    async def _renew(self, leading: asyncio.Task[None]) -> _TermEnd:
        """leaderelection.go renew: every retry period a renewal round starts; a round
        retries every retry period until one write succeeds, and fails when none has
        within the renew deadline (wait.Until over wait.PollImmediateUntil with a
        RenewDeadline context, upstream)."""
        round_deadline: float | None = None  # set while a round has not yet succeeded
        last_error = ""
        while True:
            if round_deadline is None:
                delay = self._retry_period
            else:
                delay = min(self._retry_period, max(0.0, round_deadline - self._monotonic()))
            await self._pause(delay)
            if self._stop_requested:
                return _TermEnd.STOPPED
            if _failed(leading):
                return _TermEnd.TASK_FAILED
            if round_deadline is None:
                round_deadline = self._monotonic() + self._renew_deadline
            remaining = round_deadline - self._monotonic()
            if remaining > 0:
                budget = min(self._request_timeout, remaining)
                if await self._try_acquire_or_renew(budget):
                    round_deadline = None
                    continue
                holder = self._observed.holder_identity
                if holder and holder != self.identity:
                    log.info("lost lease %s: it is now held by %s", self._describe, holder)
                    return _TermEnd.LOST
                last_error = self._last_error
                if self._monotonic() < round_deadline:
                    continue
            log.info(
                "lost lease %s: no renewal succeeded within the %gs renew deadline (%s)",
                self._describe,
                self._renew_deadline,
                last_error or "out of time",
            )
            return _TermEnd.LOST

    # -- one attempt ----------------------------------------------------------------

    async def _try_acquire_or_renew(self, budget: float) -> bool:
        """leaderelection.go tryAcquireOrRenew: True when the Lease is ours after this
        attempt. The reason for a False is kept in ``_last_error``. A success opens the
        fence until the renew deadline, counted from when the attempt began: the Lease
        was written after that, so no standby can take it over earlier."""
        started = self._monotonic()
        if await self._attempt(budget, started):
            self.fence.renewed(started)
            return True
        return False

    async def _attempt(self, budget: float, now: float) -> bool:
        """One tryAcquireOrRenew; ``now`` is the monotonic time it began."""
        self._last_error = ""
        stamp = micro_time(self._clock())
        desired = LeaderElectionRecord(
            holder_identity=self.identity,
            lease_duration_seconds=int(self._lease_duration),
            acquire_time=stamp,
            renew_time=stamp,
        )

        # 1. Fast path for the leader: update on the resourceVersion last written,
        # assuming nobody else has written since.
        if self._observed_is_us() and self._lease is not None and self._lease_valid(now):
            old = self._observed
            record = replace(
                desired,
                acquire_time=old.acquire_time,
                leader_transitions=old.leader_transitions,
            )
            try:
                await self._update(record, budget)
                return True
            except ApiError as exc:
                log.debug("renewing lease %s failed (%s); re-reading it", self._describe, exc)

        # 2. Read the Lease, or create it when it does not exist.
        try:
            lease = await self._call("GET", self._path, None, budget)
        except ApiError as exc:
            if not exc.not_found:
                self._failed_attempt("cannot read", exc)
                return False
            return await self._create(desired, budget)
        self._lease = lease
        current = LeaderElectionRecord.from_spec(lease.get("spec") or {})

        # 3. Note when the record was seen to change; keep off a live Lease held by another.
        if current != self._last_read:
            self._set_observed(current)
            self._last_read = current
        if current.holder_identity and self._lease_valid(now) and not self._observed_is_us():
            self._last_error = f"held by {current.holder_identity}"
            if current.holder_identity != self._reported_holder:
                self._reported_holder = current.holder_identity
                log.info(
                    "lease %s held by %s; standing by", self._describe, current.holder_identity
                )
            return False

        # 4. Ours, expired or released: take it. A new holder counts a transition.
        if self._observed_is_us():
            record = replace(
                desired,
                acquire_time=current.acquire_time,
                leader_transitions=current.leader_transitions,
            )
        else:
            record = replace(desired, leader_transitions=current.leader_transitions + 1)
        try:
            await self._update(record, budget)
        except ApiError as exc:
            if exc.conflict:
                # Another candidate wrote first; what it wrote is read next attempt.
                self._last_error = "conflict: another candidate updated it first"
                log.debug("lease %s was updated by another candidate first", self._describe)
            else:
                self._failed_attempt("cannot update", exc)
            return False
        return True

    async def _create(self, record: LeaderElectionRecord, budget: float) -> bool:
        """leaselock.go Create: the first candidate to create the Lease holds it
        (409 AlreadyExists: another candidate created it first)."""
        body: JSON = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.lease_name, "namespace": self.lease_namespace},
            "spec": record.to_spec(),
        }
        try:
            self._lease = await self._call("POST", leases_path(self.lease_namespace), body, budget)
        except ApiError as exc:
            self._failed_attempt("cannot create", exc)
            return False
        self._set_observed(record)
        return True

    async def _update(self, record: LeaderElectionRecord, budget: float) -> None:
        """leaselock.go Update: PUT the Lease last read or written with ``record`` as its
        spec; its resourceVersion makes the write fail with 409 if anyone wrote since."""
        if self._lease is None:
            raise ApiError("PUT", self._path, 0, b"lease not read yet")
        body = dict(self._lease)
        body["spec"] = record.to_spec(self._lease.get("spec"))
        self._lease = await self._call("PUT", self._path, body, budget)
        self._set_observed(record)

    async def _release(self) -> None:
        """leaderelection.go release: if the Lease reads as ours, clear the holder and set
        a one-second duration, keeping the transition count."""
        if not self._observed_is_us() or self._lease is None:
            return
        now = self._clock()
        record = LeaderElectionRecord(
            holder_identity="",
            lease_duration_seconds=1,
            acquire_time=micro_time(now),
            renew_time=micro_time(now),
            leader_transitions=self._observed.leader_transitions,
        )
        try:
            await self._update(record, self._request_timeout)
        except ApiError as exc:
            log.warning(
                "could not release lease %s (%s); standbys take it when it expires",
                self._describe,
                exc,
            )
            return
        log.info("released lease %s", self._describe)

    # -- helpers ----------------------------------------------------------------------

    async def _call(self, method: str, path: str, body: JSON | None, budget: float) -> JSON:
        """One request on a worker thread, bounded by ``budget`` seconds (also its HTTP
        read timeout). Every failure is an ApiError (status 0 when the server could not
        be reached or did not answer in time), so the loops handle one kind of error."""
        try:
            return await asyncio.wait_for(
                asyncio.to_thread(
                    self._api.request,
                    method,
                    path,
                    body=body,
                    limit=False,
                    timeout=budget,
                    fenced=False,
                ),
                budget,
            )
        except ApiError:
            raise
        except TimeoutError as exc:
            raise ApiError(method, path, 0, f"no answer within {budget:.3g}s".encode()) from exc
        except Exception as exc:  # e.g. a credential plugin failing: retried like an outage
            raise ApiError(method, path, 0, f"{type(exc).__name__}: {exc}".encode()) from exc

    def _failed_attempt(self, what: str, exc: ApiError) -> None:
        self._last_error = f"{what} lease: {exc}"
        log.warning("%s lease %s: %s", what, self._describe, exc)

    def _set_observed(self, record: LeaderElectionRecord) -> None:
        """client-go setObservedRecord: the record, and the local time it was seen."""
        self._observed = record
        self._observed_time = self._monotonic()

    def _observed_is_us(self) -> bool:
        """client-go IsLeader: the record last seen or written names this candidate."""
        return self._observed.holder_identity == self.identity

    def _lease_valid(self, now: float) -> bool:
        """client-go isLeaseValid: the observed holder's duration has not passed, on our
        monotonic clock, since the record was last seen to change."""
        return self._observed_time + self._observed.lease_duration_seconds > now

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if stop() (or a failing leading task) wakes us."""
        if self._stop_requested or seconds <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    def _on_leading_done(self, task: asyncio.Task[None]) -> None:
        if _failed(task):
            self._wake.set()


def _failed(task: asyncio.Task[Any]) -> bool:
    """The task has finished by raising (cancellation is not a failure)."""
    return task.done() and not task.cancelled() and task.exception() is not None


async def _cancel_and_wait(task: asyncio.Task[None]) -> BaseException | None:
    """Cancel ``task`` and wait for it to end; its exception, if it raised one (other
    than being cancelled). ``asyncio.wait`` neither raises the task's exception nor
    swallows a cancellation of the caller. A task that loses a cancellation is cancelled
    again: Python 3.11's ``asyncio.wait_for`` drops one that arrives just as the awaited
    future completes (bpo-42130), and the scheduling loop awaits one, so a single cancel
    could leave a deposed leader's loop running."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_RETRY_SECONDS)
    return None if task.cancelled() else task.exception()


__all__ = [
    "JITTER_FACTOR",
    "WATCHDOG_TOLERANCE",
    "LeaderElectionConfigError",
    "LeaderElectionRecord",
    "LeaderElector",
    "default_identity",
    "lease_path",
    "leases_path",
    "micro_time",
]
