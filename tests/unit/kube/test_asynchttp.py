"""berth.kube.asynchttp: the binding POST from the event loop (berth.kube.http1), against a
small HTTP/1.1 server on a local socket that answers the way the API server
does (Content-Length or chunked bodies, keep-alive, error Status objects)."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
import urllib3
from kubernetes import client as kclient

from berth.dev.localcluster.pki import write_pair
from berth.kube.asynchttp import TLS_RECORD_BYTES, AsyncApi
from berth.kube.errors import ApiError
from berth.kube.rest import USER_AGENT, KubeApi
from berth.tls.pki import new_authority

Handler = Callable[[str, str, dict[str, str], bytes], tuple[int, bytes, dict[str, str]]]


@dataclass
class FakeServer:
    handler: Handler
    connections: int = 0
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    # Close each connection after this many requests (0: never).
    close_after: int = 0
    chunked: bool = False
    # Seconds each answer takes; the most requests the server held at once.
    delay: float = 0.0
    busy: int = 0
    most_busy: int = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                try:
                    line = await reader.readuntil(b"\r\n")
                except asyncio.IncompleteReadError:
                    return
                method, path, _ = line.decode().split(" ", 2)
                headers: dict[str, str] = {}
                while (h := await reader.readuntil(b"\r\n")) != b"\r\n":
                    k, _, v = h.decode().partition(":")
                    headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests.append((method, path, headers, body))
                if self.delay:
                    self.busy += 1
                    self.most_busy = max(self.most_busy, self.busy)
                    await asyncio.sleep(self.delay)
                    self.busy -= 1
                status, payload, extra = self.handler(method, path, headers, body)
                if status == 0:
                    # Drop the connection without an answer.
                    return
                served += 1
                closing = self.close_after and served >= self.close_after
                head = [f"HTTP/1.1 {status} X", "Content-Type: application/json"]
                head += [f"{k}: {v}" for k, v in extra.items()]
                if closing:
                    head.append("Connection: close")
                if self.chunked:
                    head.append("Transfer-Encoding: chunked")
                    half = len(payload) // 2
                    data = b"".join(
                        f"{len(part):x}\r\n".encode() + part + b"\r\n"
                        for part in (payload[:half], payload[half:])
                        if part
                    )
                    data += b"0\r\n\r\n"
                else:
                    head.append(f"Content-Length: {len(payload)}")
                    data = payload
                writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
                await writer.drain()
                if closing:
                    return
        finally:
            writer.close()


def created(
    method: str, path: str, headers: dict[str, str], body: bytes
) -> tuple[int, bytes, dict[str, str]]:
    return 201, json.dumps({"kind": "Status", "status": "Success", "code": 201}).encode(), {}


@asynccontextmanager
async def running(
    server: FakeServer,
    token: Callable[[], str | None] = lambda: "Bearer t0k",
    api_timeout: float = 30.0,
    connections: int = 4,
) -> AsyncIterator[AsyncApi]:
    srv = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    cfg = kclient.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    api = KubeApi(
        cfg.host,
        urllib3.PoolManager(),
        token,
        qps=0,
        burst=1,
        configuration=(cfg, None),
        timeout=api_timeout,
    )
    asy = AsyncApi.from_kubeapi(api, connections=connections)
    assert asy is not None
    try:
        yield asy
    finally:
        await asy.close()
        srv.close()
        await srv.wait_closed()


BINDING = {"apiVersion": "v1", "kind": "Binding", "target": {"kind": "Node", "name": "n1"}}
PATH = "/api/v1/namespaces/ns/pods/p/binding"


async def test_posts_the_binding_with_headers_and_reuses_the_connection() -> None:
    server = FakeServer(created)
    async with running(server) as api:
        for _ in range(5):
            out = await api.request("POST", PATH, body=BINDING)
            assert out["status"] == "Success"
    assert server.connections == 1
    method, path, headers, body = server.requests[0]
    assert (method, path) == ("POST", PATH)
    assert json.loads(body) == BINDING
    assert headers["authorization"] == "Bearer t0k"
    assert headers["content-type"] == "application/json"
    assert headers["host"].startswith("127.0.0.1:")
    assert headers["user-agent"] == USER_AGENT
    assert headers["accept"] == "application/json"


async def test_concurrent_requests_use_at_most_the_pool() -> None:
    server = FakeServer(created)
    async with running(server) as api:
        await asyncio.gather(*(api.request("POST", PATH, body=BINDING) for _ in range(20)))
    assert len(server.requests) == 20
    assert 1 <= server.connections <= 4


async def test_waiting_for_a_connection_does_not_count_against_the_timeout() -> None:
    # 24 requests over 4 connections, 0.15 s each: the last waits ~0.75 s for a
    # connection, longer than the 0.5 s timeout, and must still be sent once and
    # answered (a timeout that counted the wait failed it, or failed it after
    # sending it).
    server = FakeServer(created, delay=0.15)
    async with running(server, api_timeout=0.5) as api:
        results = await asyncio.gather(
            *(api.request("POST", PATH, body=BINDING) for _ in range(24)),
            return_exceptions=True,
        )
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert len(server.requests) == 24
    assert server.most_busy <= 4


EVENTS = "/apis/events.k8s.io/v1/namespaces/ns/events"


async def test_a_background_view_holds_half_of_the_connections_and_shares_them() -> None:
    server = FakeServer(created, delay=0.05)
    async with running(server, connections=4) as api:
        events = api.background(decode=False)
        results = await asyncio.gather(*(events.request("POST", EVENTS, body={}) for _ in range(6)))
        assert server.most_busy <= 2
        assert server.connections <= 2
        # A binding then reuses a connection the events opened.
        out = await api.request("POST", PATH, body=BINDING)
    assert server.connections <= 2
    assert [path for _, path, _, _ in server.requests] == [EVENTS] * 6 + [PATH]
    # The view decodes as it was told, the AsyncApi as before.
    assert results == [{}] * 6
    assert out["status"] == "Success"


async def test_a_request_slower_than_the_timeout_still_times_out() -> None:
    server = FakeServer(created, delay=0.6)
    async with running(server, api_timeout=0.2) as api:
        with pytest.raises(ApiError) as err:
            await api.request("POST", PATH, body=BINDING)
    assert err.value.status == 0


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_error_status_raises_api_error_with_the_status_reason(chunked: bool) -> None:
    def conflict(*_: object) -> tuple[int, bytes, dict[str, str]]:
        status = {
            "kind": "Status",
            "status": "Failure",
            "reason": "Conflict",
            "message": 'pod p is already assigned to node "n0"',
            "code": 409,
        }
        return 409, json.dumps(status).encode(), {}

    server = FakeServer(conflict, chunked=chunked)
    async with running(server) as api:
        with pytest.raises(ApiError) as err:
            await api.request("POST", PATH, body=BINDING)
        # The connection stays usable after an error answer.
        with pytest.raises(ApiError):
            await api.request("POST", PATH, body=BINDING)
    assert err.value.conflict and err.value.reason == "Conflict"
    assert "already assigned" in err.value.message
    assert server.connections == 1


async def test_chunked_body_is_reassembled() -> None:
    server = FakeServer(created, chunked=True)
    async with running(server) as api:
        out = await api.request("POST", PATH, body=BINDING)
    assert out == {"kind": "Status", "status": "Success", "code": 201}


async def test_connection_closed_by_the_server_is_not_reused() -> None:
    server = FakeServer(created, close_after=1)
    async with running(server) as api:
        for _ in range(3):
            await api.request("POST", PATH, body=BINDING)
            await asyncio.sleep(0.01)  # the close reaches the idle connection
    assert server.connections == 3


async def test_unreachable_server_is_status_zero() -> None:
    srv = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    srv.close()
    await srv.wait_closed()
    cfg = kclient.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    api = AsyncApi.from_kubeapi(
        KubeApi(cfg.host, urllib3.PoolManager(), lambda: None, configuration=(cfg, None))
    )
    assert api is not None
    try:
        with pytest.raises(ApiError) as err:
            await api.request("POST", PATH, body=BINDING)
    finally:
        await api.close()
    assert err.value.status == 0 and err.value.temporary


async def test_a_request_the_server_drops_is_not_resent() -> None:
    # KubeApi.request sends with retries=False; a client that retries (aiohttp did) would repeat
    # an idempotent request (PUT here) once on a reused connection.
    answers = iter([201, 0])

    def once_then_drop(*_: object) -> tuple[int, bytes, dict[str, str]]:
        return next(answers), b"{}", {}

    server = FakeServer(once_then_drop)
    async with running(server) as api:
        await api.request("PUT", PATH, body=BINDING)
        with pytest.raises(ApiError) as err:
            await api.request("PUT", PATH, body=BINDING)
    assert err.value.status == 0
    assert len(server.requests) == 2


async def test_the_token_is_read_for_every_request() -> None:
    tokens = iter(["Bearer one", "Bearer two", None])
    server = FakeServer(created)
    async with running(server, token=lambda: next(tokens)) as api:
        for _ in range(3):
            await api.request("POST", PATH, body=BINDING)
    seen = [headers.get("authorization") for _, _, headers, _ in server.requests]
    assert seen == ["Bearer one", "Bearer two", None]


async def test_empty_body_is_an_empty_object_and_no_body_sends_none() -> None:
    server = FakeServer(lambda *_: (200, b"", {}))
    async with running(server) as api:
        assert await api.request("DELETE", PATH) == {}
    _, _, headers, body = server.requests[0]
    assert body == b"" and "content-type" not in headers


async def test_decode_false_leaves_a_successful_answer_unread_but_not_an_error() -> None:
    """The binding and the event writes ask decode=False: a 201's body is not
    parsed (here it is not even JSON), while an error's still reaches the
    ApiError, as with decoding."""
    answers: Iterator[tuple[int, bytes, dict[str, str]]] = iter(
        [
            (201, b"not json", {}),
            (409, json.dumps({"kind": "Status", "reason": "AlreadyExists"}).encode(), {}),
        ]
    )
    server = FakeServer(lambda *_: next(answers))
    async with running(server) as api:
        assert await api.request("POST", PATH, body=BINDING, decode=False) == {}
        with pytest.raises(ApiError) as err:
            await api.request("POST", PATH, body=BINDING, decode=False)
    assert err.value.status == 409 and err.value.conflict


async def test_an_async_api_made_not_to_decode_returns_empty_answers() -> None:
    server = FakeServer(lambda *_: (201, b"not json", {}))
    async with running(server) as api:
        quiet = AsyncApi.from_kubeapi(api._api, connections=1, decode=False)
        assert quiet is not None
        try:
            assert await quiet.create(PATH, BINDING) == {}
        finally:
            await quiet.close()
        # The default decodes (and this answer does not parse).
        with pytest.raises(orjson.JSONDecodeError):
            await api.create(PATH, BINDING)


async def test_tls_answers_longer_than_the_read_buffer_arrive_whole(tmp_path: Path) -> None:
    """asyncio's TLS connections read into a 16 KiB buffer once the shim opens its pool
    (``tls_read_buffer``); an answer of several TLS records is still read whole."""
    authority = new_authority("test-ca", days=1)
    ca_path = tmp_path / "ca.crt"
    ca_path.write_bytes(authority.cert_pem)
    leaf = write_pair(tmp_path, "server", authority.issue("server", days=1, ips=("127.0.0.1",)))
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(str(leaf.cert), str(leaf.key))
    long_answer = {"kind": "Status", "message": "x" * (5 * TLS_RECORD_BYTES + 123)}
    server = FakeServer(lambda *_: (201, json.dumps(long_answer).encode(), {}))
    srv = await asyncio.start_server(server.serve, "127.0.0.1", 0, ssl=server_ctx)
    port = srv.sockets[0].getsockname()[1]
    cfg = kclient.Configuration()
    cfg.host = f"https://127.0.0.1:{port}"
    cfg.ssl_ca_cert = str(ca_path)
    api = KubeApi(cfg.host, urllib3.PoolManager(), lambda: None, configuration=(cfg, None))
    asy = AsyncApi.from_kubeapi(api, connections=2)
    assert asy is not None
    from asyncio import sslproto

    default = sslproto.SSLProtocol.max_size
    try:
        for _ in range(2):
            assert await asy.request("POST", PATH, body=BINDING) == long_answer
        assert sslproto.SSLProtocol.max_size == TLS_RECORD_BYTES
        assert server.connections == 1
    finally:
        sslproto.SSLProtocol.max_size = default
        await asy.close()
        srv.close()
        await srv.wait_closed()


def test_tls_settings_come_from_the_client_configuration() -> None:
    pool = urllib3.PoolManager()
    insecure = kclient.Configuration()
    insecure.host = "https://10.0.0.1:6443"
    insecure.verify_ssl = False
    insecure.tls_server_name = "kubernetes.default"
    api = AsyncApi.from_kubeapi(
        KubeApi(insecure.host, pool, lambda: None, configuration=(insecure, None))
    )
    assert api is not None
    assert api._pool._ssl is not None and api._pool._ssl.verify_mode == ssl.CERT_NONE
    assert api._pool._server_hostname == "kubernetes.default"
    assert (api._pool._host, api._pool._port) == ("10.0.0.1", 6443)
    verified = kclient.Configuration()
    verified.host = "https://[fd00::1]:6443"
    api = AsyncApi.from_kubeapi(
        KubeApi(verified.host, pool, lambda: None, configuration=(verified, None))
    )
    assert api is not None
    assert api._pool._ssl is not None and api._pool._ssl.verify_mode == ssl.CERT_REQUIRED
    assert api._pool._ssl.check_hostname
    assert api._pool._server_hostname == "fd00::1"
    assert (api._pool._host, api._pool._port) == ("fd00::1", 6443)


def test_configurations_it_does_not_handle_keep_urllib3() -> None:
    pool = urllib3.PoolManager()
    proxied = kclient.Configuration()
    proxied.host = "https://10.0.0.1:6443"
    proxied.proxy = "http://proxy:3128"
    assert (
        AsyncApi.from_kubeapi(
            KubeApi(proxied.host, pool, lambda: None, configuration=(proxied, None))
        )
        is None
    )
    pinned = kclient.Configuration()
    pinned.host = "https://10.0.0.1:6443"
    pinned.assert_hostname = False
    assert (
        AsyncApi.from_kubeapi(
            KubeApi(pinned.host, pool, lambda: None, configuration=(pinned, None))
        )
        is None
    )
    assert AsyncApi.from_kubeapi(KubeApi("https://10.0.0.1:6443", pool, lambda: None)) is None
