"""client-go's token bucket rate limiter (k8s.io/client-go/util/flowcontrol/throttle.go,
``NewTokenBucketRateLimiter``): the QPS and burst of a client's requests."""

from __future__ import annotations

import threading
import time


class TokenBucket:
    """``qps`` tokens a second, at most ``burst`` saved up, full at the start; thread-safe.
    ``qps <= 0`` means no limit (client-go: a negative QPS disables the limiter)."""

    def __init__(self, qps: float, burst: int, now: float | None = None) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._tokens = float(self.burst)
        self._last = time.monotonic() if now is None else now
        self._lock = threading.Lock()

    def reserve(self, now: float | None = None) -> float:
        """Takes a token; returns how long to wait before using it (0 when one was saved).
        ``now``: a time.monotonic() reading, for a caller that has one."""
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = time.monotonic() if now is None else now
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            if self._tokens >= 0:
                return 0.0
            return -self._tokens / self.qps

    def wait(self) -> None:
        """Takes a token, sleeping until it may be used."""
        delay = self.reserve()
        if delay > 0:
            time.sleep(delay)


__all__ = ["TokenBucket"]
