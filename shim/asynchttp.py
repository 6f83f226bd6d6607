"""API writes on the event loop: aiohttp keep-alive connections.

The binding POST is the shim's hottest write (one per pod, concurrent, each
waiting on the API server for several milliseconds). Sent from a pool of
worker threads it costs far more CPU than the request itself: every response
wakes a thread that must win the GIL back from the event loop, and every
completion wakes the loop through its self-pipe (measured here: ~0.7 ms of CPU
per binding from 16 threads against ~0.08 ms per Event POST written
sequentially from one thread; docs/benchmarks.md). ``AsyncApi`` sends the same
request from the event loop instead, through an ``aiohttp`` session whose
connector keeps at most ``connections`` persistent connections (one request
at a time on each, as client-go's HTTP/1.1 transport does when HTTP/2 is off),
so a binding costs its bytes and a few callbacks. The event recorder writes its
events the same way, through a second ``AsyncApi`` with connections of its own
(``EventRecorder.use_event_loop``), so that events never wait behind bindings.

TLS is configured from the same ``kubernetes`` client configuration as
``KubeApi``'s urllib3 pool (CA, client certificate and key, verification on or
off, ``tls_server_name``); bearer tokens come from the same callable, read per
request. A client certificate goes without the CA OpenSSL would send beside it
(``shim.tlschain``), as client-go sends it. ``AsyncApi.from_kubeapi`` returns
None (and the shim keeps the threads) for what it does not handle: a proxy, an
``assert_hostname`` override, or a ``KubeApi`` built without a configuration. Like
``KubeApi.request`` (``retries=False``) it never resends a request: aiohttp's
retry of idempotent requests on a reused connection is turned off.

The timeout runs from the moment a request has a connection, not while it
waits for one: when the shim schedules faster than the API server binds,
hundreds of bindings wait their turn, and a timeout that counted the wait
failed bindings that were never sent, or (sent at the end of their wait)
that the API server went on to make, so that the retry met "already
assigned" (urllib3's pool, whose read timeout starts with the request, never
did either).

Each TLS connection of asyncio reads into a buffer of its own, 256 KiB by
default (``asyncio.sslproto.SSLProtocol.max_size``): 16 MiB of a 64-connection
pool, ~10% of the shim's memory, for answers of a few hundred bytes. The
shim's session lowers it to one TLS record (16 KiB); a longer answer is read
in more than one step (``tls_read_buffer``).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
import urllib3

from shim.kubeapi import JSON, USER_AGENT, ApiError, KubeApi
from shim.tlschain import send_own_certificate_only

log = logging.getLogger(__name__)

# RFC 8446 5.1: a TLS record carries at most 2^14 bytes of data.
TLS_RECORD_BYTES = 16 * 1024


def tls_read_buffer(size: int = TLS_RECORD_BYTES) -> int:
    """Sets the read buffer of the asyncio TLS connections this process opens
    from now on to ``size`` bytes (asyncio's default is 256 KiB, allocated
    per connection); returns the previous size. Only this process's
    asyncio TLS connections are concerned: the shim's are its binding pool."""
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
    ) -> None:
        self._api = api
        self._ssl = ssl_context
        self._server_hostname = server_hostname if ssl_context is not None else None
        scheme = "https" if ssl_context is not None else "http"
        netloc = f"[{host}]" if ":" in host and not host.startswith("[") else host
        self._base = f"{scheme}://{netloc}:{port}"
        self._connections = connections
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        # Made on first use: an aiohttp session belongs to the running loop.
        self._session: aiohttp.ClientSession | None = None
        # A request holds a slot from before it asks the connector for a
        # connection until its answer is read: with as many slots as
        # connections it never queues inside aiohttp, where the wait would
        # count against its timeout.
        self._slots: asyncio.Semaphore | None = None

    @classmethod
    def from_kubeapi(cls, api: KubeApi, *, connections: int = 16) -> AsyncApi | None:
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
            # The checks urllib3 makes with the kubernetes package's pool
            # arguments (kubernetes/client/rest.py RESTClientObject).
            context = urllib3.util.ssl_.create_urllib3_context(
                cert_reqs=ssl.CERT_REQUIRED if cfg.verify_ssl else ssl.CERT_NONE
            )
            if cfg.verify_ssl:
                if cfg.ssl_ca_cert or getattr(cfg, "ca_cert_data", None):
                    context.load_verify_locations(
                        cafile=cfg.ssl_ca_cert or None,
                        cadata=getattr(cfg, "ca_cert_data", None) or None,
                    )
                else:
                    context.load_default_certs()
                context.check_hostname = True
            if cfg.cert_file:
                context.load_cert_chain(cfg.cert_file, cfg.key_file or None)
                # The certificate alone, as client-go sends it: with the CA beside
                # it, the API server checks more signatures per request (tlschain.py).
                if not send_own_certificate_only(context):
                    log.debug("client certificate: OpenSSL may send the CA with it")
            server_hostname = cfg.tls_server_name or parts.hostname
        return cls(
            api,
            parts.hostname,
            port,
            context,
            server_hostname,
            connections=connections,
            timeout=api.timeout,
        )

    async def close(self) -> None:
        self._slots = None
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def _open(self) -> aiohttp.ClientSession:
        if self._ssl is not None:
            tls_read_buffer()
        connector = aiohttp.TCPConnector(
            limit=self._connections,
            limit_per_host=self._connections,
            # For http the connector never uses it; False keeps aiohttp from
            # building a default context it would not use.
            ssl=self._ssl if self._ssl is not None else False,
            # The API server's answers are small and plain JSON.
            enable_cleanup_closed=False,
        )
        session = aiohttp.ClientSession(
            base_url=self._base,
            connector=connector,
            timeout=self._timeout,
            headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
            auto_decompress=False,
            skip_auto_headers=("Accept-Encoding",),
        )
        # Never resend (KubeApi.request uses retries=False): aiohttp would
        # otherwise repeat a GET/PUT/DELETE once when a reused connection
        # drops. aiohttp's own test client turns it off the same way.
        session._retry_connection = False
        return session

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        limit: bool = True,
    ) -> JSON:
        """One request, as ``KubeApi.request``: the decoded body (``{}`` when
        empty); ApiError for an error status or an unreachable server
        (status 0). ``limit`` waits for the shared token bucket first."""
        if limit:
            await self.wait_for_token()
        session = self._session
        if session is None or session.closed:
            session = self._session = self._open()
        slots = self._slots
        if slots is None:
            slots = self._slots = asyncio.Semaphore(self._connections)
        headers: dict[str, str] = {}
        data: bytes | None = None
        if body is not None:
            data = orjson.dumps(body)
            headers["Content-Type"] = content_type
        token = self._api.auth_header()
        if token:
            headers["Authorization"] = token
        try:
            async with (
                slots,
                session.request(
                    method,
                    path,
                    data=data,
                    headers=headers,
                    server_hostname=self._server_hostname,
                    allow_redirects=False,
                ) as resp,
            ):
                status = resp.status
                payload = await resp.read()
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            raise ApiError(method, path, 0, str(exc).encode() or repr(exc).encode()) from exc
        if status >= 400:
            raise ApiError(method, path, status, payload)
        if not payload:
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
