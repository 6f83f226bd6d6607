"""API writes on the event loop: HTTP/1.1 keep-alive connections over asyncio.

The binding POST is the shim's hottest write (one per pod, concurrent, each
waiting on the API server for several milliseconds). Sent from a pool of
worker threads it costs far more CPU than the request itself: every response
wakes a thread that must win the GIL back from the event loop, and every
completion wakes the loop through its self-pipe (measured here: ~0.7 ms of CPU
per binding from 16 threads against ~0.08 ms per Event POST written
sequentially from one thread; docs/benchmarks.md). ``AsyncApi`` sends the same
request from the event loop instead, over a few persistent connections
(one request at a time on each, as client-go's HTTP/1.1 transport does when
HTTP/2 is off), so a binding costs its bytes and a few callbacks.

It speaks just enough HTTP/1.1 for the API server's answers: a status line,
headers, and a ``Content-Length`` or chunked body. TLS is configured from the
same ``kubernetes`` client configuration as ``KubeApi``'s urllib3 pool (CA,
client certificate and key, verification on or off, ``tls_server_name``);
bearer tokens come from the same callable. ``AsyncApi.from_kubeapi`` returns
None (and the shim keeps the threads) for what it does not handle: a proxy, an
``assert_hostname`` override, or a ``KubeApi`` built without a configuration.
Like ``KubeApi.request`` (``retries=False``) it never resends a request; a
connection the server closed while it sat idle is dropped before use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections import deque
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson
import urllib3

from shim.kubeapi import JSON, USER_AGENT, ApiError, KubeApi

log = logging.getLogger(__name__)

# Most bytes of a header block or a chunk-size line we accept.
_MAX_LINE = 64 * 1024


@dataclass(slots=True)
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class _ProtocolError(Exception):
    pass


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
        self._host = host
        self._port = port
        self._ssl = ssl_context
        self._server_hostname = server_hostname
        self._timeout = timeout
        self._host_header = host if port in (80, 443) else f"{host}:{port}"
        if ":" in host and not host.startswith("["):
            self._host_header = f"[{host}]:{port}"
        self._idle: deque[_Conn] = deque()
        self._slots = asyncio.Semaphore(connections)

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
        while self._idle:
            self._idle.popleft().close()

    async def _connect(self) -> _Conn:
        reader, writer = await asyncio.open_connection(
            self._host,
            self._port,
            ssl=self._ssl,
            server_hostname=self._server_hostname if self._ssl is not None else None,
            limit=_MAX_LINE,
        )
        return _Conn(reader, writer)

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
        data = b"" if body is None else orjson.dumps(body)
        head = [
            f"{method} {path} HTTP/1.1",
            f"Host: {self._host_header}",
            f"User-Agent: {USER_AGENT}",
            "Accept: application/json",
            f"Content-Length: {len(data)}",
        ]
        if body is not None:
            head.append(f"Content-Type: {content_type}")
        token = self._api.auth_header()
        if token:
            head.append(f"Authorization: {token}")
        raw = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data
        async with self._slots:
            conn = None
            while self._idle:
                c = self._idle.pop()
                if c.usable():
                    conn = c
                    break
                c.close()
            try:
                async with asyncio.timeout(self._timeout):
                    if conn is None:
                        conn = await self._connect()
                    conn.writer.write(raw)
                    status, payload, keep = await _read_response(conn.reader, method)
            except (
                OSError,
                EOFError,
                TimeoutError,
                ValueError,
                asyncio.LimitOverrunError,
                _ProtocolError,
            ) as exc:
                if conn is not None:
                    conn.close()
                raise ApiError(method, path, 0, str(exc).encode() or repr(exc).encode()) from exc
            except BaseException:
                if conn is not None:
                    conn.close()
                raise
            if keep:
                self._idle.append(conn)
            else:
                conn.close()
        if status >= 400:
            raise ApiError(method, path, status, payload)
        if not payload:
            return {}
        out: JSON = orjson.loads(payload)
        return out

    async def wait_for_token(self) -> None:
        """The shared token bucket, without blocking the loop."""
        delay = self._api.reserve_token()
        if delay > 0:
            await asyncio.sleep(delay)


async def _read_response(reader: asyncio.StreamReader, method: str) -> tuple[int, bytes, bool]:
    """(status, body, keep the connection) of one HTTP/1.1 response; 1xx
    interim responses are skipped."""
    while True:
        line = await reader.readuntil(b"\r\n")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise _ProtocolError(f"not an HTTP/1.x status line: {line[:80]!r}")
        try:
            status = int(parts[1])
        except ValueError as exc:
            raise _ProtocolError(f"bad status in {line[:80]!r}") from exc
        keep = parts[0] == b"HTTP/1.1"
        length: int | None = None
        chunked = False
        while True:
            h = await reader.readuntil(b"\r\n")
            if h == b"\r\n":
                break
            name, sep, value = h.partition(b":")
            if not sep:
                raise _ProtocolError(f"bad header line {h[:80]!r}")
            key = name.strip().lower()
            if key == b"content-length":
                length = int(value.strip())
            elif key == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif key == b"connection":
                v = value.strip().lower()
                if v == b"close":
                    keep = False
                elif v == b"keep-alive":
                    keep = True
        if 100 <= status < 200:
            continue
        if method == "HEAD" or status in (204, 304):
            return status, b"", keep
        if chunked:
            body = bytearray()
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    # Trailers, up to the empty line.
                    while await reader.readuntil(b"\r\n") != b"\r\n":
                        pass
                    return status, bytes(body), keep
                body += await reader.readexactly(size)
                if await reader.readexactly(2) != b"\r\n":
                    raise _ProtocolError("chunk not followed by CRLF")
        if length is not None:
            return status, await reader.readexactly(length), keep
        # No length: the body runs to the end of the connection.
        return status, await reader.read(), False


__all__ = ["AsyncApi"]
