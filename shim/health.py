"""``/healthz``, ``/livez``, ``/readyz`` and ``/metrics``, like kube-scheduler's
secure serving endpoints: over HTTPS with delegated authentication and authorization
when given a ``SecureServing`` (shim/serving.py; ``berth shim``'s default), else plain
HTTP to anyone (``--insecure-metrics``).

- ``/healthz``, ``/livez``, ``/readyz``: what ``shim.healthchecks.HealthChecks``
  answers (the leader-election watchdog, the API server's reachability, the
  scheduler's readiness).
- ``/metrics``: the Prometheus registry (kube-scheduler's metric names).
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from shim.healthchecks import HealthChecks

if TYPE_CHECKING:
    from shim.serving import SecureServing

log = logging.getLogger(__name__)


class HealthServer:
    def __init__(
        self, address: str, checks: HealthChecks, secure: SecureServing | None = None
    ) -> None:
        host, _, port = address.rpartition(":")
        if not port.isdigit():
            raise ValueError(
                f"--metrics-listen {address!r}: expected HOST:PORT, e.g. 0.0.0.0:10259"
            )
        answers = {"/healthz": checks.healthz, "/livez": checks.livez, "/readyz": checks.readyz}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
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
                    self._send(
                        404, b"not found: try /healthz, /livez, /readyz or /metrics", "text/plain"
                    )

            def _send(self, code: int, body: bytes, ctype: str) -> None:
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


__all__ = ["HealthServer"]
