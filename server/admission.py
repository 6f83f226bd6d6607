"""What one replica serves at once: calls in flight and the bytes of their
requests, each capped (berth serve --max-inflight-calls, --max-inflight-bytes),
as kube-apiserver's max-in-flight filter caps its requests
(staging/src/k8s.io/apiserver/pkg/server/filters/maxinflight.go,
WithMaxInFlightLimit)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Gauge

from berth.server import errors

# Most calls (unary calls and stream messages) served at once, and most bytes
# of their requests (berth serve --max-inflight-calls, --max-inflight-bytes).
DEFAULT_MAX_INFLIGHT_CALLS = 64
DEFAULT_MAX_INFLIGHT_BYTES = 256 * 2**20

# What the replica serves at once, across its Admission instances (as
# kube-apiserver's apiserver_current_inflight_requests): the figures its
# --max-inflight-calls and --max-inflight-bytes caps are measured against.
INFLIGHT_CALLS = Gauge(
    "berth_plugin_server_inflight_calls", "Calls this plugin server is serving now"
)
INFLIGHT_BYTES = Gauge(
    "berth_plugin_server_inflight_bytes",
    "Bytes of the requests of the calls this plugin server is serving now",
)


class Admission:
    """Calls in flight and the bytes of their requests, each capped: beyond,
    a call is refused at once with RESOURCE_EXHAUSTED (reason OVERLOADED)
    before anything of it is done, and the caller backs off. A request larger
    than the byte cap alone is taken when nothing else is in flight (it could
    never be served otherwise; the message size limit bounds it). Used on
    the event loop only."""

    def __init__(
        self,
        max_calls: int = DEFAULT_MAX_INFLIGHT_CALLS,
        max_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
    ) -> None:
        self.max_calls = max_calls
        self.max_bytes = max_bytes
        self.calls = 0
        self.bytes = 0
        self.refused = 0
        # Set when the last call in flight leaves, while someone waits (wait_idle).
        self._idle: asyncio.Event | None = None

    def enter(self, size: int) -> None:
        if self.calls >= self.max_calls:
            self.refused += 1
            raise errors.overloaded(
                "calls", self.max_calls, "--max-inflight-calls", f"{self.calls} calls"
            )
        if self.calls and self.bytes + size > self.max_bytes:
            self.refused += 1
            raise errors.overloaded(
                "bytes",
                self.max_bytes,
                "--max-inflight-bytes",
                f"{self.bytes} bytes of requests and this one has {size}",
            )
        self.calls += 1
        self.bytes += size
        INFLIGHT_CALLS.inc()
        INFLIGHT_BYTES.inc(size)

    def leave(self, size: int) -> None:
        self.calls -= 1
        self.bytes -= size
        INFLIGHT_CALLS.dec()
        INFLIGHT_BYTES.dec(size)
        if not self.calls and self._idle is not None:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Until no call is in flight."""
        while self.calls:
            self._idle = asyncio.Event()
            try:
                await self._idle.wait()
            finally:
                self._idle = None

    @contextmanager
    def admitted(self, size: int) -> Iterator[None]:
        """``enter`` (which refuses beyond the caps), then ``leave`` when the
        block ends, however it ends."""
        self.enter(size)
        try:
            yield
        finally:
            self.leave(size)
