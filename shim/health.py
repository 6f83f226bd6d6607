"""``/healthz``, ``/livez``, ``/readyz`` and ``/metrics``, like kube-scheduler's
secure serving endpoints: over HTTPS with delegated authentication and authorization
when given a ``SecureServing`` (shim/serving.py; ``berth shim``'s default), else plain
HTTP to anyone (``--insecure-metrics``).

- ``/healthz``, ``/livez``, ``/readyz``: what ``shim.healthchecks.HealthChecks``
  answers (the leader-election watchdog, the API server's reachability, the
  scheduler's readiness).
- ``/metrics``: the Prometheus registry (kube-scheduler's metric names).
- every route of a ``shim.serving.DebugRoutes`` registry (``/configz``,
  ``/debug/...``), authenticated and authorized like ``/metrics``.

A request must arrive whole within ``REQUEST_HEAD_TIMEOUT`` seconds of its
connection's start (after the TLS handshake, which has its own deadline), as
upstream's secure serving bounds it (k8s.io/apiserver pkg/server/secure_serving.go:
``ReadHeaderTimeout: 32 * time.Second``); a client that sends its request a byte at
a time, or nothing, is cut off then, and its answer is written within as long.
"""

from __future__ import annotations

import io
import logging
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from berth.shim.healthchecks import HealthChecks
from berth.shim.serving import DebugRequest, DebugRoutes

if TYPE_CHECKING:
    from berth.shim.serving import SecureServing

log = logging.getLogger(__name__)

# secure_serving.go's ReadHeaderTimeout; also the bound on writing the answer.
REQUEST_HEAD_TIMEOUT = 32.0
# Query parameters a debug route's request may carry (the request line itself
# is bounded by http.server at 64 KiB).
MAX_QUERY_FIELDS = 64


class _DeadlineReader(io.RawIOBase):
    """A connection's reads, every one of them over by ``deadline`` (time.monotonic):
    the socket's own timeout bounds one read, so a byte every few seconds would
    otherwise hold the connection (and its thread) for as long as the client likes."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"request not received within {REQUEST_HEAD_TIMEOUT:g}s")
        self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class HealthServer:
    def __init__(
        self,
        address: str,
        checks: HealthChecks,
        secure: SecureServing | None = None,
        routes: DebugRoutes | None = None,
    ) -> None:
        host, _, port = address.rpartition(":")
        if not port.isdigit():
            raise ValueError(
                f"--metrics-listen {address!r}: expected HOST:PORT, e.g. 0.0.0.0:10259"
            )
        answers = {"/healthz": checks.healthz, "/livez": checks.livez, "/readyz": checks.readyz}
        debug = routes if routes is not None else DebugRoutes()
        self.routes = debug

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                super().setup()
                # The request head is read through a reader with a deadline
                # (BaseHTTPRequestHandler answers its TimeoutError by closing).
                self.rfile.close()
                deadline = time.monotonic() + REQUEST_HEAD_TIMEOUT
                self.rfile = io.BufferedReader(_DeadlineReader(self.connection, deadline))

            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                refusal = secure.refuse(self, path) if secure is not None else None
                if refusal is not None:
                    self._send(refusal.code, refusal.body, refusal.content_type)
                    return
                answer = answers.get(path)
                if answer is not None:
                    code, text = answer()
                    self._send(code, text.encode(), "text/plain")
                elif path == "/metrics":
                    self._send(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
                else:
                    self._debug(path, query)

            def _debug(self, path: str, query: str) -> None:
                try:
                    parsed = urllib.parse.parse_qs(
                        query, keep_blank_values=True, max_num_fields=MAX_QUERY_FIELDS
                    )
                except ValueError:
                    self._send(400, b"too many query parameters", "text/plain")
                    return
                request = DebugRequest(path, {k: tuple(v) for k, v in parsed.items()})
                answer = debug.serve(request)
                if answer is None:
                    known = ["/healthz", "/livez", "/readyz", "/metrics", *debug.paths()]
                    self._send(404, f"not found: try {', '.join(known)}".encode(), "text/plain")
                else:
                    self._send(answer.code, answer.body, answer.content_type)

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                # The whole answer within the bound (sendall's timeout is its total).
                self.connection.settimeout(REQUEST_HEAD_TIMEOUT)
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("health: " + format, *args)

        bind = (host or "0.0.0.0", int(port))
        self.server = secure.server(bind, Handler) if secure else ThreadingHTTPServer(bind, Handler)
        self.server.daemon_threads = True
        self.scheme = secure.scheme if secure is not None else "http"
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="berth-health", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


__all__ = ["REQUEST_HEAD_TIMEOUT", "HealthServer"]
