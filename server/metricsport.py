"""``berth serve --metrics-listen``: plain HTTP, open to anyone who reaches it, serving
``/configz`` (the effective KubeSchedulerConfiguration, as kube-scheduler's
component-base configz answers it: ``{"componentconfig": {...}}``) and, on every other
path, the Prometheus registry (prometheus_client's ``make_wsgi_app``, as
``start_http_server`` serves it).

The server has no secure port of its own: its metrics port carries nothing a
caller could act on, and the configuration is the same file its operator gave
every replica. Keep the port off networks that should not read it (the
deployment exposes it to the cluster only)."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import orjson
from prometheus_client import make_wsgi_app

from berth.framework.configz import configz
from berth.framework.profile import SchedulerConfig

StartResponse = Callable[..., Any]


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log on stderr."""


def app(config: SchedulerConfig) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    body = orjson.dumps(configz(config))
    metrics = make_wsgi_app()

    def serve(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/configz":
            start_response(
                "200 OK",
                [("Content-Type", "application/json"), ("X-Content-Type-Options", "nosniff")],
            )
            return [body]
        result: Iterable[bytes] = metrics(environ, start_response)
        return result

    return serve


def start(address: str, config: SchedulerConfig) -> WSGIServer:
    """Serves ``address`` (HOST:PORT) on a daemon thread; ValueError or OSError
    when it cannot."""
    host, _, port = address.rpartition(":")
    server = make_server(
        host or "0.0.0.0", int(port), app(config), _Server, handler_class=_QuietHandler
    )
    threading.Thread(target=server.serve_forever, name="berth-metrics", daemon=True).start()
    return server


__all__ = ["app", "start"]
