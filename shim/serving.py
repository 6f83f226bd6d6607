"""The transport of the shim's secure port (``--metrics-listen``, 10259 in the
deployment): HTTPS, as kube-scheduler serves /healthz, /readyz, /livez and
/metrics (k8s.io/apiserver pkg/server/options/serving.go
``SecureServingOptions``), with the callers authenticated and authorized by
the API server (shim/delegation.py).

The serving certificate is ``--tls-cert-file``/``--tls-private-key-file``; with
neither, a self-signed pair for ``localhost`` and 127.0.0.1 made at start and
kept in memory, as kube-scheduler does (options.go ``Config`` calls
``MaybeDefaultWithSelfSignedCerts``; see berth/tls/pki.py). ``--client-ca-file``
also accepts client certificates that CA signed (the request is then
authenticated by its certificate). TLS 1.2 at least.

Each connection's handshake runs on that connection's own thread with a
deadline, so a client that connects and sends nothing holds one thread for at
most ``HANDSHAKE_TIMEOUT`` and never the accepting thread.

Beside the health and metrics endpoints the port serves the routes of a
``DebugRoutes`` registry (``/configz``, ``/debug/...``): GET only, each request
authenticated and authorized like ``/metrics`` (a SubjectAccessReview of get on
the path), as kube-scheduler's handler chain guards its /configz and
/debug/pprof (cmd/kube-scheduler/app/server.go ``buildHandlerChain``). A
component adds its route with ``DebugRoutes.register``; see its docstring.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import os
import socket
import ssl
import tempfile
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from berth.shim.securedefaults import DEFAULT_ALWAYS_ALLOW_PATHS, DEFAULT_CACHE_TTL

if TYPE_CHECKING:
    # The secure port's delegated authn/authz: imported by build(), not with
    # --insecure-metrics.
    from berth.shim.delegation import DelegatedAuth, Refusal, ReviewApi

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 10.0

# The longest a route run on the event loop may take before it is answered 503.
DEBUG_ROUTE_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class DebugRequest:
    """What a debug route is handed: the path and its decoded query
    (``?pod=ns/name&pod=...`` gives ``{"pod": ("ns/name", ...)}``). The caller
    is already authenticated and authorized for the path."""

    path: str
    query: Mapping[str, tuple[str, ...]]

    def arg(self, name: str, default: str | None = None) -> str | None:
        """The last value of query parameter ``name``, else ``default``."""
        values = self.query.get(name)
        return values[-1] if values else default


@dataclass(frozen=True, slots=True)
class DebugAnswer:
    """A debug route's answer."""

    code: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"

    @classmethod
    def text(cls, text: str, code: int = 200) -> DebugAnswer:
        return cls(code, text.encode())

    @classmethod
    def json(cls, body: bytes, code: int = 200) -> DebugAnswer:
        return cls(code, body, "application/json")


DebugHandler = Callable[[DebugRequest], "DebugAnswer | Awaitable[DebugAnswer]"]


@dataclass(frozen=True, slots=True)
class _Route:
    handler: DebugHandler
    on_loop: bool
    timeout: float


class DebugRoutes:
    """The secure port's authenticated routes beyond health and metrics.

    ``register(path, handler)`` adds one; the port then answers ``GET path`` to
    callers the API server authorizes for it (``get`` on the non-resource path,
    as for /metrics; with ``--insecure-metrics``, to anyone), and 404 to every
    path not registered. For example, with ``routes`` the shim's registry
    (shim/app.py makes it before the scheduler starts)::

        def explain(req: DebugRequest) -> DebugAnswer:
            pod = req.arg("pod")
            ...
            return DebugAnswer.json(orjson.dumps(result))

        routes.register("/debug/explain", explain)

    A handler runs, by default, on the shim's event loop (the scheduler's
    cache, queue and snapshot are safe to read there and nowhere else), so it
    must not block; it may be a coroutine function (``async def``), awaited on
    the loop. It has ``timeout`` seconds (``DEBUG_ROUTE_TIMEOUT``) before the
    caller gets 503 and the handler is cancelled. ``on_loop=False`` runs a
    plain function on the request's own thread instead, for a handler that
    blocks by design (a CPU profile over N seconds) and touches no loop state;
    it bounds itself. A handler that raises is answered 500 and logged.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self._routes: dict[str, _Route] = {}
        self._lock = threading.Lock()

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The event loop on which ``on_loop`` handlers run."""
        self._loop = loop

    def register(
        self,
        path: str,
        handler: DebugHandler,
        *,
        on_loop: bool = True,
        timeout: float = DEBUG_ROUTE_TIMEOUT,
    ) -> None:
        """Serve ``GET path`` with ``handler``; ValueError for a path that
        does not start with ``/``, one already registered, or one of the
        health and metrics endpoints."""
        if not path.startswith("/") or "?" in path:
            raise ValueError(f"debug route {path!r}: a path starting with /, without a query")
        if path in RESERVED_PATHS:
            raise ValueError(f"debug route {path!r}: the port serves that path itself")
        with self._lock:
            if path in self._routes:
                raise ValueError(f"debug route {path!r} is registered twice")
            self._routes[path] = _Route(handler, on_loop, timeout)

    def paths(self) -> list[str]:
        with self._lock:
            return sorted(self._routes)

    def __contains__(self, path: object) -> bool:
        with self._lock:
            return path in self._routes

    def serve(self, request: DebugRequest) -> DebugAnswer | None:
        """The route's answer; None when no route has the path. Called on the
        request's thread."""
        with self._lock:
            route = self._routes.get(request.path)
        if route is None:
            return None
        try:
            if not route.on_loop:
                answer = route.handler(request)
                if inspect.isawaitable(answer):
                    raise TypeError("an on_loop=False debug handler must not be async")
                return answer
            return self._on_loop(route, request)
        except concurrent.futures.TimeoutError:
            log.warning("debug route %s took more than %gs", request.path, route.timeout)
            return DebugAnswer.text(
                f"{request.path} did not answer within {route.timeout:g}s\n", 503
            )
        except Exception:
            log.exception("debug route %s failed", request.path)
            return DebugAnswer.text(f"{request.path} failed; the shim's log has why\n", 500)

    def _on_loop(self, route: _Route, request: DebugRequest) -> DebugAnswer:
        loop = self._loop
        if loop is None or loop.is_closed():
            return DebugAnswer.text("the scheduler is not running\n", 503)

        async def call() -> DebugAnswer:
            answer = route.handler(request)
            if inspect.isawaitable(answer):
                return await answer
            return answer

        future = asyncio.run_coroutine_threadsafe(call(), loop)
        try:
            return future.result(route.timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise


# Served by shim.health.HealthServer itself; no debug route may take them.
RESERVED_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/metrics"})


@dataclass(frozen=True, slots=True)
class ServingCertificate:
    """``--tls-cert-file``, ``--tls-private-key-file`` and ``--client-ca-file``."""

    cert_file: str | None = None
    key_file: str | None = None
    client_ca_file: str | None = None

    def context(self) -> ssl.SSLContext:
        """The server's TLS context; ValueError naming the flag and file when
        one does not load."""
        from berth.tls.serving import read_key_pair, read_pem_certificates

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.cert_file is not None or self.key_file is not None:
            if self.cert_file is None or self.key_file is None:
                raise ValueError("--tls-cert-file and --tls-private-key-file go together")
            key_pem, chain = read_key_pair(
                self.cert_file, self.key_file, "--tls-cert-file", "--tls-private-key-file"
            )
        else:
            from berth.tls.pki import self_signed_serving

            pair = self_signed_serving()
            key_pem, chain = pair.key, pair.cert
        _load_chain(ctx, chain, key_pem)
        if self.client_ca_file is not None:
            ca = read_pem_certificates(self.client_ca_file, "--client-ca-file")
            ctx.load_verify_locations(cadata=ca.decode())
            # Optional: a caller without a certificate authenticates by token.
            ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx

    @property
    def self_signed(self) -> bool:
        return self.cert_file is None


def _load_chain(ctx: ssl.SSLContext, chain: bytes, key: bytes) -> None:
    """``load_cert_chain`` reads files only: the PEMs go through a private
    temporary directory that is removed at once."""
    with tempfile.TemporaryDirectory(prefix="berth-serving-") as d:
        cert_path, key_path = Path(d) / "tls.crt", Path(d) / "tls.key"
        cert_path.write_bytes(chain)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        ctx.load_cert_chain(cert_path, key_path)


class _TLSServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: Callable[..., BaseHTTPRequestHandler],
        context: ssl.SSLContext,
    ) -> None:
        self.context = context
        super().__init__(address, handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        # No I/O here: the handshake runs on the connection's thread.
        tls = self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return tls, addr

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(HANDSHAKE_TIMEOUT)
        try:
            request.do_handshake()
        except (OSError, ValueError) as exc:
            log.debug("secure port: TLS handshake with %s failed: %s", client_address, exc)
            return
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug(
            "secure port: connection from %s ended on an error", client_address, exc_info=True
        )


class SecureServing:
    """HTTPS and delegated authn/authz for shim.health.HealthServer."""

    scheme = "https"

    def __init__(self, certificate: ServingCertificate, auth: DelegatedAuth) -> None:
        self.certificate = certificate
        self.context = certificate.context()
        self.auth = auth

    def server(
        self, address: tuple[str, int], handler: Callable[..., BaseHTTPRequestHandler]
    ) -> ThreadingHTTPServer:
        return _TLSServer(address, handler, self.context)

    def refuse(self, handler: BaseHTTPRequestHandler, path: str) -> Refusal | None:
        """None to answer the request, else what to answer instead."""
        peer = None
        if self.certificate.client_ca_file is not None:
            conn = handler.request
            if isinstance(conn, ssl.SSLSocket):
                peer = conn.getpeercert()
        return self.auth.refuse(handler.command, path, handler.headers.get("Authorization"), peer)


@dataclass(frozen=True, slots=True)
class SecureServingOptions:
    """``berth shim``'s flags for the secure port."""

    certificate: ServingCertificate = ServingCertificate()
    always_allow_paths: tuple[str, ...] = DEFAULT_ALWAYS_ALLOW_PATHS
    token_ttl: float = DEFAULT_CACHE_TTL
    allowed_ttl: float = DEFAULT_CACHE_TTL
    denied_ttl: float = DEFAULT_CACHE_TTL

    def build(self, api: ReviewApi) -> SecureServing:
        """The secure port's TLS and authn/authz, reviews sent through ``api``.
        ValueError (a bad certificate file) names the flag and file."""
        from berth.shim.delegation import DelegatedAuth

        auth = DelegatedAuth(
            api,
            always_allow_paths=self.always_allow_paths,
            token_ttl=self.token_ttl,
            allowed_ttl=self.allowed_ttl,
            denied_ttl=self.denied_ttl,
        )
        return SecureServing(self.certificate, auth)


__all__ = [
    "DEBUG_ROUTE_TIMEOUT",
    "HANDSHAKE_TIMEOUT",
    "RESERVED_PATHS",
    "DebugAnswer",
    "DebugHandler",
    "DebugRequest",
    "DebugRoutes",
    "SecureServing",
    "SecureServingOptions",
    "ServingCertificate",
]
