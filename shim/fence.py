"""The leader's write fence: no API write starts unless this replica may still lead.

client-go's leader election does not fence (staging/src/k8s.io/client-go/tools/
leaderelection/doc.go: "does not guarantee that only one client is acting as a leader");
kube-scheduler relies on stopping at once: its renew loop gives up after RenewDeadline
(leaderelection.go renew) and OnStoppedLeading exits the process with "leaderelection
lost" (cmd/kube-scheduler/app/server.go). A process that was paused (SIGSTOP, a long
GC or VM pause, a saturated node) cannot stop at once: when it runs again, whatever work
was ready (bindings, preemptions, status patches) runs before its renew loop has noticed
anything, and another replica may have led for a while.

``LeaderFence`` closes that window. The elector tells it when each successful acquire
or renew *started* (monotonic clock); the Lease was written after that instant, so no
standby can take over before ``start + leaseDuration`` on any clock ticking at our rate.
Every write consults the fence right before it is sent (``KubeApi.request``,
``AsyncApi.request`` through ``Http1Pool``'s ``before_send``), and is refused
(``FencedWrite``) once ``start + renewDeadline`` has passed with no newer success, the
leader's own view of its lease validity, computed from the monotonic clock so a
paused process sees the time it lost. The margin ``leaseDuration - renewDeadline``
covers a write's trip to the API server.

Writes under way on the event loop are cancelled when the deadline passes or the term
ends (``FencedWrite`` is raised in the task that waited on them, as ``asyncio.timeout``
turns its cancellation into TimeoutError). A write already sent from a worker thread
cannot be called back; its answer is not awaited, since the shim exits after a loss, as
kube-scheduler does.

Lease writes themselves go around the fence (``KubeApi.request(..., fenced=False)``):
the elector must be able to acquire and renew.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType

from berth.kube.errors import ApiError

log = logging.getLogger(__name__)


class FencedWrite(ApiError):
    """A write refused (or cancelled) by the fence: this replica may not be the leader
    any more. Status 0, like an unreachable server, so callers that retry temporary
    failures retry it, which only succeeds if a renewal reopens the fence."""

    def __init__(self, method: str, path: str, why: str) -> None:
        super().__init__(method, path, 0)
        self.reason = "NotLeader"
        self.message = why
        self.args = (f"{method} {path} not sent: {why}",)


class LeaderFence:
    """Whether this replica may write, from the leader election's point of view.

    Closed until the first ``renewed``; open until ``start + renew_deadline`` of the
    latest successful acquire or renew; closed for good by ``lost``. Thread-safe:
    ``check`` runs on worker threads too. ``clock`` is monotonic (injectable for tests).
    """

    def __init__(
        self,
        renew_deadline: float,
        *,
        lease: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if renew_deadline <= 0:
            raise ValueError(f"renew_deadline must be positive, got {renew_deadline}")
        self.renew_deadline = renew_deadline
        self.lease = lease
        self._clock = clock
        self._lock = threading.Lock()
        self._deadline = float("-inf")  # never renewed: closed
        self._lost = ""  # why the term ended ("" while it has not)
        self._refused = 0
        # Writes under way on the event loop, cancelled when the fence closes.
        self._in_flight: set[_InFlight] = set()
        self._timer: asyncio.TimerHandle | None = None

    # -- the elector's side -----------------------------------------------------------

    def campaign(self) -> None:
        """A new campaign begins (``LeaderElector.run``): closed until it acquires."""
        with self._lock:
            self._lost = ""
            self._deadline = float("-inf")

    def renewed(self, started: float) -> None:
        """An acquire or renew that began at ``started`` (this fence's clock) succeeded:
        writes may start until ``started + renew_deadline``. Ignored after ``lost``."""
        with self._lock:
            if self._lost:
                return
            self._deadline = max(self._deadline, started + self.renew_deadline)
            deadline = self._deadline
        self._arm(deadline)

    def lost(self, why: str) -> None:
        """The term ended (lost, stopped, or abandoned): no write starts from now on, and
        the writes under way on the event loop are cancelled. Final."""
        with self._lock:
            if self._lost:
                return
            self._lost = why or "leadership ended"
            self._deadline = float("-inf")
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._cancel_in_flight()

    # -- the writers' side ------------------------------------------------------------

    @property
    def open(self) -> bool:
        """May a write start now?"""
        return self._why_closed() is None

    @property
    def refused(self) -> int:
        """Writes refused so far."""
        return self._refused

    def check(self, method: str, path: str) -> None:
        """Right before a write is sent: raises FencedWrite when it may not be."""
        why = self._why_closed()
        if why is None:
            return
        with self._lock:
            self._refused += 1
            first = self._refused == 1
        # The first refusal says what happened; the rest would repeat it per write.
        (log.warning if first else log.debug)("not sending %s %s: %s", method, path, why)
        raise FencedWrite(method, path, why)

    def in_flight(self, method: str, path: str) -> _InFlight:
        """``async with fence.in_flight(method, path):`` around a write sent from the
        event loop: when the fence closes while it runs, the task is cancelled and
        FencedWrite raised in its place."""
        return _InFlight(self, method, path)

    # -- inside -------------------------------------------------------------------------

    def _why_closed(self) -> str | None:
        lost, deadline = self._lost, self._deadline
        if lost:
            return f"this replica is no longer the leader of lease {self.lease} ({lost})"
        now = self._clock()
        if now < deadline:
            return None
        if deadline == float("-inf"):
            return f"this replica has not acquired lease {self.lease}"
        return (
            f"lease {self.lease} not renewed within the {self.renew_deadline:g}s renew "
            f"deadline ({now - deadline + self.renew_deadline:.1f}s since the last renewal "
            "began); another replica may be leading"
        )

    def _arm(self, deadline: float) -> None:
        """On the event loop: cancel the writes under way when ``deadline`` passes."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not on a loop (unit tests of check alone): nothing to cancel
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0.0, deadline - self._clock())
        self._timer = loop.call_later(delay, self._expire)

    def _expire(self) -> None:
        self._timer = None
        if self.open:
            return  # renewed meanwhile (the timer is re-armed then; a stale one lands here)
        self._cancel_in_flight()

    def _cancel_in_flight(self) -> None:
        for write in list(self._in_flight):
            write.cancel()


class _InFlight:
    """One write under way on the event loop (see ``LeaderFence.in_flight``)."""

    def __init__(self, fence: LeaderFence, method: str, path: str) -> None:
        self._fence = fence
        self._method = method
        self._path = path
        self._task: asyncio.Task[object] | None = None
        self._cancelled = False

    def cancel(self) -> None:
        if self._task is not None and not self._task.done() and not self._cancelled:
            self._cancelled = True
            self._task.cancel()

    async def __aenter__(self) -> None:
        self._fence.check(self._method, self._path)
        self._task = asyncio.current_task()
        self._fence._in_flight.add(self)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._fence._in_flight.discard(self)
        if (
            self._cancelled
            and exc_type is asyncio.CancelledError
            and self._task is not None
            and self._task.uncancel() == 0
        ):
            why = self._fence._why_closed() or "the fence closed"
            raise FencedWrite(self._method, self._path, f"cancelled under way: {why}") from exc


__all__ = ["FencedWrite", "LeaderFence"]
