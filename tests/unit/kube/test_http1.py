"""berth.kube.http1: the keep-alive pool under what can go wrong on a connection
(the request shapes and API-server answers are in test_asynchttp.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from berth.kube.http1 import Http1Pool, HttpError, _Connection

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head + await reader.readexactly(length)


@asynccontextmanager
async def server(serve: Serve) -> AsyncIterator[tuple[int, list[int]]]:
    """A server whose handler gets each connection's number; yields its port
    and the list of connection numbers, one per request read."""
    counter = 0
    seen: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal counter
        counter += 1
        number = counter
        try:
            while True:
                try:
                    await read_request(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                seen.append(number)
                await serve(reader, writer, number)
                await writer.drain()
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield srv.sockets[0].getsockname()[1], seen
    finally:
        srv.close()
        await srv.wait_closed()


async def test_one_connection_serves_requests_in_turn() -> None:
    async def ok(_r: asyncio.StreamReader, w: asyncio.StreamWriter, _n: int) -> None:
        w.write(OK)

    async with server(ok) as (port, seen):
        pool = Http1Pool("127.0.0.1", port, connections=2)
        for _ in range(3):
            assert await pool.request("GET", "/x") == (200, b"{}")
        await pool.close()
    assert seen == [1, 1, 1]


async def test_a_malformed_answer_fails_the_request_and_its_connection() -> None:
    async def garbage_first(_r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        w.write(b"NOT HTTP AT ALL\r\n\r\n" if n == 1 else OK)

    async with server(garbage_first) as (port, seen):
        pool = Http1Pool("127.0.0.1", port, connections=1)
        with pytest.raises(HttpError, match="malformed answer"):
            await pool.request("GET", "/x")
        assert await pool.request("GET", "/x") == (200, b"{}")
        await pool.close()
    assert seen == [1, 2]


async def test_a_cancelled_request_does_not_leave_its_answer_to_the_next() -> None:
    # The first answer comes late, after its caller gave up; on a reused
    # connection it would be read as the second request's answer.
    async def slow_first(_r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        if n == 1:
            await asyncio.sleep(0.3)
            w.write(b"HTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\nlate")
        else:
            w.write(OK)

    async with server(slow_first) as (port, seen):
        pool = Http1Pool("127.0.0.1", port, connections=1)
        task = asyncio.create_task(pool.request("POST", "/x", body=b"{}"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await pool.request("POST", "/x", body=b"{}") == (200, b"{}")
        await pool.close()
    assert seen == [1, 2]


async def test_the_timeout_closes_the_connection_and_the_slot_is_released() -> None:
    async def slow_first(_r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        if n == 1:
            await asyncio.sleep(0.5)
        w.write(OK)

    async with server(slow_first) as (port, seen):
        pool = Http1Pool("127.0.0.1", port, connections=1, timeout=0.1)
        with pytest.raises(HttpError, match=r"no answer within 0\.1s"):
            await pool.request("GET", "/x")
        assert await pool.request("GET", "/x") == (200, b"{}")
        await pool.close()
    assert seen == [1, 2]


async def test_one_shared_deadline_times_out_only_the_slow_answer() -> None:
    """The answers in flight share one deadline timer: the slow request on the
    first connection times out on time while the other connections' requests,
    watched after it with later deadlines, are answered; and nothing answered
    stays watched."""

    async def slow_on_first(_r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        if n == 1:
            await asyncio.sleep(1.0)
        w.write(OK)

    async with server(slow_on_first) as (port, _seen):
        pool = Http1Pool("127.0.0.1", port, connections=4, timeout=0.3)
        slow = asyncio.create_task(pool.request("GET", "/slow"))
        await asyncio.sleep(0.05)
        loop = asyncio.get_running_loop()
        started = loop.time()
        for _ in range(10):
            answers = await asyncio.gather(*(pool.request("GET", "/x") for _ in range(3)))
            assert answers == [(200, b"{}")] * 3
        with pytest.raises(HttpError, match=r"no answer within 0\.3s"):
            await slow
        # Failed at its own deadline (0.3 s after it was sent), not a later one's.
        assert loop.time() - started < 0.5
        assert len(pool._deadlines) <= 1
        assert await pool.request("GET", "/x") == (200, b"{}")
        await pool.close()
        assert len(pool._deadlines) == 0


async def test_bytes_sent_to_an_idle_connection_retire_it() -> None:
    async def ok_then_junk(_r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        w.write(OK + (b"HTTP/1.1 200 OK\r\n" if n == 1 else b""))

    async with server(ok_then_junk) as (port, seen):
        pool = Http1Pool("127.0.0.1", port, connections=1)
        assert await pool.request("GET", "/x") == (200, b"{}")
        await asyncio.sleep(0.05)
        assert pool.open_connections == 0
        assert await pool.request("GET", "/x") == (200, b"{}")
        await pool.close()
    assert seen == [1, 2]


async def test_an_answer_cut_short_is_an_error_not_a_short_body() -> None:
    async def cut(_r: asyncio.StreamReader, w: asyncio.StreamWriter, _n: int) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}")
        await w.drain()
        w.close()

    async with server(cut) as (port, _):
        pool = Http1Pool("127.0.0.1", port, connections=1)
        with pytest.raises(HttpError, match="connection closed before the answer"):
            await pool.request("GET", "/x")
        await pool.close()


async def test_a_closed_pool_refuses_requests() -> None:
    pool = Http1Pool("127.0.0.1", 1)
    await pool.close()
    with pytest.raises(HttpError, match="closed"):
        await pool.request("GET", "/x")


def test_host_header_names_the_port_unless_it_is_the_scheme_default() -> None:
    # RFC 9112 section 3.2; brackets for an IPv6 literal (RFC 3986 section 3.2.2).
    assert "Host: 10.0.0.1:6443\r\n" in Http1Pool("10.0.0.1", 6443)._fixed
    assert "Host: api.example\r\n" in Http1Pool("api.example", 80)._fixed
    assert "Host: [fd00::1]:6443\r\n" in Http1Pool("fd00::1", 6443)._fixed


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.sent.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


async def test_a_connection_lost_before_the_request_is_an_http_error_and_nothing_is_sent() -> None:
    # Seen under uvloop, whose TLS handshake can end in connection_lost before the
    # pool's first request: the request must fail as HttpError (the shim's
    # ApiError status 0, retried with backoff), not as an assertion.
    conn = _Connection()
    transport = _Transport()
    conn.connection_made(transport)
    conn.connection_lost(ConnectionResetError("reset"))
    with pytest.raises(HttpError, match="connection closed before the request was sent"):
        conn.exchange(b"GET / HTTP/1.1\r\n\r\n")
    assert transport.sent == []


async def test_connections_idle_for_the_idle_timeout_are_closed() -> None:
    # client-go's transports close a connection idle for 90 s (IdleConnTimeout);
    # a burst must not leave its connections open on the API server for good.
    async def ok(_r: asyncio.StreamReader, w: asyncio.StreamWriter, _n: int) -> None:
        w.write(OK)

    async with server(ok) as (port, seen):
        # A quarter of a second of slack either side of each check.
        pool = Http1Pool("127.0.0.1", port, connections=4, idle_timeout=1.0)
        await asyncio.gather(*(pool.request("GET", "/x") for _ in range(4)))
        assert pool.open_connections == 4
        await asyncio.sleep(0.5)
        assert await pool.request("GET", "/x") == (200, b"{}")  # one kept busy
        await asyncio.sleep(0.75)
        # The three left idle since the burst are gone; the one used since is not.
        assert pool.open_connections == 1
        await asyncio.sleep(1.0)
        assert pool.open_connections == 0
        assert await pool.request("GET", "/x") == (200, b"{}")
        await pool.close()
    assert len(set(seen)) == 5


async def test_an_interim_answer_is_skipped_for_the_final_one() -> None:
    async def continue_then_ok(_r: asyncio.StreamReader, w: asyncio.StreamWriter, _n: int) -> None:
        w.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await w.drain()
        await asyncio.sleep(0.05)
        w.write(b"HTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\ndone")

    async with server(continue_then_ok) as (port, seen):
        pool = Http1Pool("127.0.0.1", port, connections=1)
        assert await pool.request("POST", "/x", body=b"{}") == (201, b"done")
        assert await pool.request("POST", "/x", body=b"{}") == (201, b"done")
        await pool.close()
    assert seen == [1, 1]


@asynccontextmanager
async def gated_server(
    hold: Callable[[str], asyncio.Event | None],
) -> AsyncIterator[tuple[int, list[tuple[int, str]], asyncio.Event]]:
    """A server that answers a request once ``hold(path)`` is set (None: at
    once); yields its port, the (connection number, path) of each request read,
    and an event set whenever one is read."""
    counter = 0
    seen: list[tuple[int, str]] = []
    arrived = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal counter
        counter += 1
        number = counter
        try:
            while True:
                try:
                    head = await read_request(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                path = head.split(b" ", 2)[1].decode()
                seen.append((number, path))
                arrived.set()
                gate = hold(path)
                if gate is not None:
                    await gate.wait()
                writer.write(OK)
                await writer.drain()
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield srv.sockets[0].getsockname()[1], seen, arrived
    finally:
        srv.close()
        await srv.wait_closed()


async def test_a_foreground_request_short_of_its_own_share_goes_before_background_ones() -> None:
    gates = {"/fg1": asyncio.Event(), "/bg0": asyncio.Event()}
    async with gated_server(gates.get) as (port, seen, arrived):
        # Two connections, one for each kind: /bg0 and /fg1 hold them.
        pool = Http1Pool("127.0.0.1", port, connections=2, background_share=1)
        held = [
            asyncio.create_task(pool.request("POST", "/bg0", background=True)),
            asyncio.create_task(pool.request("POST", "/fg1")),
        ]
        while len(seen) < 2:
            arrived.clear()
            await arrived.wait()
        queued = [
            asyncio.create_task(pool.request("POST", "/bg1", background=True)),
            asyncio.create_task(pool.request("POST", "/fg2")),
        ]
        await asyncio.sleep(0)
        # The foreground connection frees: /fg2 has it, though /bg1 waited longer.
        gates["/fg1"].set()
        assert await queued[1] == (200, b"{}")
        assert [path for _, path in seen[2:]] == ["/fg2"]
        gates["/bg0"].set()
        await asyncio.gather(*held, queued[0])
        await pool.close()
    assert [path for _, path in seen[2:]] == ["/fg2", "/bg1"]


async def test_a_backlog_of_foreground_requests_does_not_starve_background_ones() -> None:
    gates = {"/fg0": asyncio.Event(), "/fg1": asyncio.Event()}
    async with gated_server(gates.get) as (port, seen, arrived):
        pool = Http1Pool("127.0.0.1", port, connections=2, background_share=1)
        held = [asyncio.create_task(pool.request("POST", f"/fg{i}")) for i in range(2)]
        while len(seen) < 2:
            arrived.clear()
            await arrived.wait()
        # Both connections are foreground; a background request waits, then
        # foreground ones queue behind it.
        queued = [asyncio.create_task(pool.request("POST", "/bg", background=True))]
        await asyncio.sleep(0)
        queued += [asyncio.create_task(pool.request("POST", f"/fg{i}")) for i in (2, 3)]
        await asyncio.sleep(0)
        # The first free connection goes to the background request: the
        # foreground ones hold their own share already.
        gates["/fg1"].set()
        assert await queued[0] == (200, b"{}")
        assert [path for _, path in seen[2:3]] == ["/bg"]
        gates["/fg0"].set()
        await asyncio.gather(*held, *queued)
        await pool.close()
    assert sorted(path for _, path in seen[3:]) == ["/fg2", "/fg3"]


async def test_background_requests_hold_at_most_their_share_and_leave_the_rest() -> None:
    release = asyncio.Event()

    def hold(path: str) -> asyncio.Event | None:
        return release if path.startswith("/bg") else None

    async with gated_server(hold) as (port, seen, arrived):
        pool = Http1Pool("127.0.0.1", port, connections=3, background_share=1)
        background = [
            asyncio.create_task(pool.request("POST", f"/bg{i}", background=True)) for i in range(3)
        ]
        await arrived.wait()
        # One background request is held by the server, the other two wait for
        # the share: a foreground request still has a connection at once.
        assert await pool.request("POST", "/fg") == (200, b"{}")
        assert [path for _, path in seen] == ["/bg0", "/fg"]
        release.set()
        await asyncio.gather(*background)
        await pool.close()
    assert sorted(path for _, path in seen) == ["/bg0", "/bg1", "/bg2", "/fg"]
    # The background requests never held a second connection: two in all.
    assert {number for number, _ in seen} == {1, 2}


@asynccontextmanager
async def first_request_held() -> AsyncIterator[
    tuple[Http1Pool, asyncio.Task[tuple[int, bytes]], asyncio.Event, list[tuple[int, str]]]
]:
    """A one-connection pool whose request "/first" reached the server and is held
    there until the yielded event is set; yields the pool, that request's task,
    the event and the requests the server read."""
    release = asyncio.Event()

    def hold(path: str) -> asyncio.Event | None:
        return release if path == "/first" else None

    async with gated_server(hold) as (port, seen, arrived):
        pool = Http1Pool("127.0.0.1", port, connections=1)
        first = asyncio.create_task(pool.request("POST", "/first"))
        await arrived.wait()
        yield pool, first, release, seen


async def test_a_cancelled_waiting_request_leaves_no_slot_taken() -> None:
    async with first_request_held() as (pool, first, release, seen):
        waiting = [
            asyncio.create_task(pool.request("POST", "/never", background=background))
            for background in (False, True)
        ]
        await asyncio.sleep(0)
        for task in waiting:
            task.cancel()
        release.set()
        assert await first == (200, b"{}")
        for task in waiting:
            with pytest.raises(asyncio.CancelledError):
                await task
        # The only connection is free again, for either kind of request.
        assert await pool.request("POST", "/next") == (200, b"{}")
        assert await pool.request("POST", "/last", background=True) == (200, b"{}")
        await pool.close()
    assert [path for _, path in seen] == ["/first", "/next", "/last"]


def test_the_background_share_is_within_the_pool() -> None:
    for share in (0, 3):
        with pytest.raises(ValueError, match="background_share"):
            Http1Pool("127.0.0.1", 1, connections=2, background_share=share)


async def test_a_request_waiting_for_a_connection_when_the_pool_closes_opens_none() -> None:
    async with first_request_held() as (pool, first, release, seen):
        waiting = asyncio.create_task(pool.request("POST", "/after-close"))
        await asyncio.sleep(0)
        await pool.close()
        release.set()
        with pytest.raises(HttpError):
            await first
        with pytest.raises(HttpError, match="closed while the request waited"):
            await waiting
    # The waiting request neither reached the server nor opened a connection.
    assert [path for _, path in seen] == ["/first"]
    assert not pool._open
