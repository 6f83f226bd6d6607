"""What ``/healthz``, ``/livez`` and ``/readyz`` answer, apart from how they are served.

As kube-scheduler wires them (cmd/kube-scheduler/app/server.go Run and
newEndpointsHandler):

- ``/healthz``: the process runs, and with leader election the leader-election watchdog
  (client-go healthzadaptor.go, ``LeaderElector.Check`` with a 20 s tolerance): a leader
  that has not renewed its Lease for the lease duration plus 20 s should have stopped; it
  is reported unhealthy (500, as upstream's healthz handler answers) so that the kubelet
  restarts it.
- ``/livez``: the process runs (upstream installs it without checks).
- ``/readyz``: 503 unless this replica can do its job: the watchdog passes, the API
  server answers (``ApiServerProbe``; upstream's readiness is its informers' sync, which a
  partition does not undo), and the scheduler is synced and scheduling, or stands by for
  the Lease.

Each answer is ``(status, body)``; ``shim.health`` serves them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from berth.kube.errors import ApiError
from berth.kube.rest import KubeApi

log = logging.getLogger(__name__)

# (ready, what to say): the scheduler's own readiness, e.g. (True, "ok: scheduling").
Readiness = Callable[[], tuple[bool, str]]
# None when healthy, else what is wrong (LeaderElector.check).
Watchdog = Callable[[], str | None]

# How often the API server is asked, and how long an answer may take.
PROBE_INTERVAL = 5.0
PROBE_TIMEOUT = 5.0


class ApiServerProbe:
    """Asks the API server's ``/readyz`` every ``interval`` seconds from a thread of its
    own (so a busy or stalled event loop does not make the answer stale); ``failure`` is
    why the last probe failed, or None. Any HTTP answer but a 5xx counts as reachable: a
    401, 403 or 404 comes from a server that answers, only not this question."""

    def __init__(
        self,
        api: KubeApi,
        *,
        interval: float = PROBE_INTERVAL,
        timeout: float = PROBE_TIMEOUT,
        path: str = "/readyz",
    ) -> None:
        self._api = api
        self._interval = interval
        self._timeout = timeout
        self._path = path
        self._failure: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="berth-apiserver-probe", daemon=True)

    @property
    def failure(self) -> str | None:
        return self._failure

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def probe_once(self) -> str | None:
        """One probe; returns (and keeps) why it failed, None when the server answered."""
        began = time.monotonic()
        try:
            self._api.probe(self._path, self._timeout)
            failure = None
        except ApiError as exc:
            if exc.status and exc.status < 500:
                failure = None
            elif exc.status:
                failure = f"the API server is not ready: {exc}"
            else:
                waited = time.monotonic() - began
                failure = f"the API server is unreachable ({waited:.1f}s): {exc.message}"
        except Exception as exc:  # e.g. a credential plugin failing
            failure = f"the API server cannot be asked: {type(exc).__name__}: {exc}"
        if (failure is None) != (self._failure is None):
            if failure is None:
                log.info("the API server answers again; ready")
            else:
                log.warning("%s; not ready until it answers", failure)
        self._failure = failure
        return failure

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            self.probe_once()
            self._stop.wait(max(0.0, self._interval - (time.monotonic() - began)))


@dataclass
class HealthChecks:
    """The answers of the health endpoints; each call is cheap (no I/O)."""

    readiness: Readiness
    watchdog: Watchdog | None = None
    api_server: ApiServerProbe | None = None

    def healthz(self) -> tuple[int, str]:
        """kube-scheduler's /healthz: ping and the leader-election watchdog."""
        why = self.watchdog() if self.watchdog is not None else None
        if why is not None:
            return 500, f"[-]leaderElection failed: {why}\nhealthz check failed"
        return 200, "ok"

    def livez(self) -> tuple[int, str]:
        """kube-scheduler's /livez: ping only."""
        return 200, "ok"

    def readyz(self) -> tuple[int, str]:
        """The watchdog, the API server, then the scheduler's own readiness."""
        why = self.watchdog() if self.watchdog is not None else None
        if why is not None:
            return 503, f"leader election: {why}"
        if self.api_server is not None:
            failure = self.api_server.failure
            if failure is not None:
                return 503, failure
        ok, what = self.readiness()
        return (200 if ok else 503), what


__all__ = ["PROBE_INTERVAL", "PROBE_TIMEOUT", "ApiServerProbe", "HealthChecks", "Readiness"]
