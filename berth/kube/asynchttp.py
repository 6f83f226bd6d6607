"""API writes on the event loop: HTTP/1.1 keep-alive connections (`berth.kube.http1`).

The shim's hottest write, the binding POST, is one per pod, concurrent, each waiting on
the API server for several milliseconds. Sent from a pool of worker threads, every answer
wakes a thread that must win the GIL back from the event loop, and every completion wakes
the loop through its self-pipe; both cost more CPU than the request itself. ``AsyncApi``
sends the same request from the event loop instead, through an ``Http1Pool`` that keeps at
most ``connections`` persistent connections (one request at a time on each, as client-go's
HTTP/1.1 transport does when HTTP/2 is off), so a request costs its bytes and a few
callbacks. The shim's event recorder writes its events through the same pool, as
background requests (``AsyncApi.background``): the events hold at most half of the
connections and the other half is the bindings' own, so events never hold up a binding
that is within its half, and a backlog of bindings does not starve the events (the
recorder drops what does not fit its queue). One pool rather than one each
opens fewer connections: in a drain every connection a pool may open gets opened, and a
TLS handshake costs more client CPU than a hundred requests on an open connection.

TLS is configured from the same ``kubernetes`` client configuration as ``KubeApi``'s
urllib3 pool (CA, client certificate and key, verification on or off,
``tls_server_name``); bearer tokens come from the same callable, read per request. A
client certificate goes without the CA OpenSSL would send beside it (`berth.kube.tlschain`),
as client-go sends it. ``AsyncApi.from_kubeapi`` returns None (and the caller keeps its
threads) for what it does not handle: a proxy, an ``assert_hostname`` override, or a
``KubeApi`` built without a configuration. Like ``KubeApi.request`` (``retries=False``) it
never resends a request, not even an idempotent one that met a connection the server had
just closed.

The timeout runs from the moment a request has a connection, not while it waits for one:
when the shim schedules faster than the API server binds, hundreds of bindings wait their
turn, and a timeout that counted the wait would fail bindings that were never sent, or
(sent at the end of their wait) that the API server went on to make, so that the retry
met "already assigned".

Each TLS connection of asyncio reads into a buffer of its own, 256 KiB by default
(``asyncio.sslproto.SSLProtocol.max_size``): 16 MiB for a 64-connection pool, for answers
of a few hundred bytes. The pool lowers it to one TLS record (16 KiB); a longer answer is
read in more than one step (``tls_read_buffer``).
"""

from __future__ import annotations

import asyncio
import copy
import functools
import ssl
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import orjson

from berth.kube import metrics
from berth.kube.config import tls_context
from berth.kube.errors import ApiError
from berth.kube.http1 import Http1Pool, HttpError
from berth.kube.rest import JSON, KubeApi, fenced_write

# RFC 8446 5.1: a TLS record carries at most 2^14 bytes of data.
TLS_RECORD_BYTES = 16 * 1024


def tls_read_buffer(size: int = TLS_RECORD_BYTES) -> int:
    """Sets the read buffer of the asyncio TLS connections this process opens
    from now on to ``size`` bytes (asyncio's default is 256 KiB, allocated
    per connection); returns the previous size. Only this process's
    asyncio TLS connections are concerned (in the shim: its binding and event pools)."""
    from asyncio import sslproto

    previous = int(sslproto.SSLProtocol.max_size)
    sslproto.SSLProtocol.max_size = size
    return previous


class AsyncApi:
    """Requests to one API server from the event loop, at most
    ``connections`` at a time."""

    def __init__(
        self,
        api: KubeApi,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None,
        *,
        connections: int = 16,
        timeout: float = 30.0,
        decode: bool = True,
    ) -> None:
        """``decode``: whether requests decode a successful answer unless told
        (see ``request``)."""
        self._api = api
        self._decode = decode
        self._background = False
        # rest_client_* metrics' host label: the server's, as KubeApi's.
        self._metric_host: str = getattr(api, "metric_host", None) or f"{host}:{port}"
        # No connection, no loop needed until the first request.
        self._pool = Http1Pool(
            host,
            port,
            ssl_context=ssl_context,
            server_hostname=server_hostname,
            connections=connections,
            timeout=timeout,
            headers={"User-Agent": api.user_agent, "Accept": "application/json"},
        )
        self._tls = ssl_context is not None
        self._used = False

    @classmethod
    def from_kubeapi(
        cls, api: KubeApi, *, connections: int = 16, decode: bool = True
    ) -> AsyncApi | None:
        """An AsyncApi with ``api``'s server, TLS and credentials, or None when
        its configuration asks for something only urllib3 does here."""
        conf = getattr(api, "configuration", None)
        cfg: Any = conf[0] if isinstance(conf, tuple) else conf
        if (
            not isinstance(api, KubeApi)
            or cfg is None
            or getattr(cfg, "proxy", None)
            or getattr(cfg, "assert_hostname", None) is not None
        ):
            return None
        parts = urlsplit(api.host)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return None
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if parts.path not in ("", "/"):
            return None
        context: ssl.SSLContext | None = None
        server_hostname: str | None = None
        if parts.scheme == "https":
            # As KubeApi's pool (the same context when it has one): the certificate
            # alone, as client-go sends it (with the CA beside it the API server checks
            # more signatures per request).
            context = api.tls or tls_context(cfg)
            server_hostname = cfg.tls_server_name or parts.hostname
        return cls(
            api,
            parts.hostname,
            port,
            context,
            server_hostname,
            connections=connections,
            timeout=api.timeout,
            decode=decode,
        )

    def background(self, *, decode: bool | None = None) -> AsyncApi:
        """This AsyncApi's connections, for background requests: they hold at
        most half of them, the other half is this AsyncApi's own (``Http1Pool``).
        ``decode``: as the constructor's (None: this one's). Closing either
        closes the pool."""
        view = copy.copy(self)
        view._background = True
        if decode is not None:
            view._decode = decode
        return view

    async def close(self) -> None:
        """Closes the connections; later requests fail (status 0)."""
        await self._pool.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        limit: bool = True,
        decode: bool | None = None,
    ) -> JSON:
        """One request, as ``KubeApi.request``: the decoded body (``{}`` when
        empty); ApiError for an error status or an unreachable server
        (status 0). ``limit`` waits for the shared token bucket first. A write
        asks ``KubeApi.fence`` right before its bytes go out, and is cancelled
        (the fence's ApiError raised) if the fence closes while it is under way.
        ``decode=False``: a successful answer's body is not read and ``{}`` is
        returned (a caller that needs only to know the write was made: the
        binding's Status, the created Event); an error's body still is, in the
        ApiError. None: the ``decode`` this AsyncApi was made with."""
        if decode is None:
            decode = self._decode
        fence = self._api.fence
        if fence is not None and fenced_write(method, path):
            async with fence.in_flight(method, path):
                return await self._request(
                    method, path, body, content_type, limit, fence.check, decode
                )
        return await self._request(method, path, body, content_type, limit, None, decode)

    async def _request(
        self,
        method: str,
        path: str,
        body: Any,
        content_type: str,
        limit: bool,
        check: Callable[[str, str], None] | None,
        decode: bool,
    ) -> JSON:
        start = time.perf_counter()
        if limit:
            await self.wait_for_token()
        if not self._used:
            self._used = True
            if self._tls:
                tls_read_buffer()
        headers: dict[str, str] = {}
        data: bytes | None = None
        if body is not None:
            data = orjson.dumps(body)
            headers["Content-Type"] = content_type
        token = self._api.auth_header()
        if token:
            headers["Authorization"] = token
        before_send = None if check is None else functools.partial(check, method, path)
        try:
            status, payload = await self._pool.request(
                method,
                path,
                body=data,
                headers=headers,
                before_send=before_send,
                background=self._background,
            )
        except HttpError as exc:
            metrics.request_done(method, self._metric_host, 0, time.perf_counter() - start)
            raise ApiError(method, path, 0, str(exc).encode()) from exc
        metrics.request_done(method, self._metric_host, status, time.perf_counter() - start)
        if status >= 400:
            raise ApiError(method, path, status, payload)
        if not payload or not decode:
            return {}
        out: JSON = orjson.loads(payload)
        return out

    async def create(self, path: str, body: JSON) -> JSON:
        """POST, as ``KubeApi.create`` (rate-limited)."""
        return await self.request("POST", path, body=body)

    async def strategic_patch(self, path: str, patch: JSON) -> JSON:
        """A strategic-merge PATCH, as ``KubeApi.strategic_patch`` (rate-limited)."""
        return await self.request(
            "PATCH", path, body=patch, content_type="application/strategic-merge-patch+json"
        )

    async def wait_for_token(self) -> None:
        """The shared token bucket, without blocking the loop."""
        delay = self._api.reserve_token()
        if delay > 0:
            await asyncio.sleep(delay)


__all__ = ["AsyncApi"]
