"""A pool of HTTP/1.1 keep-alive connections on the event loop, for the few request
shapes of the API server's clients here (a POST or PATCH with a JSON body, a small JSON
answer).

A request is one ``transport.write`` of pre-built bytes; the answer is parsed by
``httptools`` (llhttp, the parser uvicorn uses), which reassembles chunked bodies and says
whether the connection may be kept. TLS, connection set-up and flow control stay
asyncio's own. A general HTTP client (aiohttp) builds header, URL, payload and response
objects for every request, which costs more CPU than the shim's scheduling at its binding
rate (two requests per pod: the binding and the Scheduled event).

What it does (tests/unit/kube/test_http1.py, tests/unit/kube/test_asynchttp.py):

- at most ``connections`` requests at a time, one per connection, as
  client-go's HTTP/1.1 transport; a request waiting for one is served in
  turn; background requests hold at most ``background_share`` connections
  (half by default) and foreground ones have the rest to themselves (the
  shim's events are background requests beside its bindings: events never
  hold the connections kept for bindings, and a backlog of bindings does not
  starve the events); idle connections are reused newest first,
  one the server closed (``Connection: close``, an idle timeout) is never
  reused, and one idle for ``idle_timeout`` (90 s, client-go's: net/http's
  DefaultTransport value, which k8s.io/apimachinery/pkg/util/net/http.go
  ``SetOldTransportDefaults`` applies) is closed, so that a burst does not
  leave its connections open on the API server for good;
- the timeout runs from the moment a request has its slot, not while it waits
  for one (see `berth.kube.asynchttp`); the answers in flight share one timer
  (``_Deadlines``), a new connection's set-up has one of its own;
- a request is never resent: a connection that fails mid-request is closed and
  the caller gets the error (``KubeApi.request`` sends with ``retries=False``);
- a request cancelled or timed out closes its connection, so a late answer
  cannot be read as the next request's.

Redirects are not followed and bodies are never compressed (no ``Accept-Encoding``).
"""

from __future__ import annotations

import asyncio
import heapq
import ssl
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, cast

import httptools


class HttpError(Exception):
    """The request got no complete answer: connection refused, reset or
    closed, a malformed answer, or the timeout."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one request in flight at a time."""

    def __init__(self, max_body: int | None = None) -> None:
        self.transport: asyncio.Transport | None = None
        # None: no bound (the API server's answers here are small and trusted).
        self._max_body = max_body
        self._body_len = 0
        self._parser = httptools.HttpResponseParser(self)
        self._answer: asyncio.Future[tuple[int, bytes]] | None = None
        self._body: list[bytes] = []
        self._unsolicited = False
        self.reusable = False
        self.lost = False
        self.idle_since = 0.0

    # -- asyncio.Protocol -----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Any loop's transport (uvloop's are not asyncio.Transport subclasses).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._answer is None:
            # Bytes nobody asked for: the stream cannot be trusted any more.
            self._fail(HttpError("answer without a request"))
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(HttpError(f"malformed answer: {exc}"))
            return
        if self._unsolicited:
            # An answer began after the one asked for was complete.
            self._fail(HttpError("answer without a request"))

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.reusable = False
        answer, self._answer = self._answer, None
        if answer is not None and not answer.done():
            why = f": {exc}" if exc else ""
            answer.set_exception(HttpError(f"connection closed before the answer{why}"))

    # -- httptools callbacks --------------------------------------------------

    def on_message_begin(self) -> None:
        if self._answer is None:
            self._unsolicited = True

    def on_body(self, body: bytes) -> None:
        self._body_len += len(body)
        if self._max_body is not None and self._body_len > self._max_body:
            self._fail(HttpError(f"answer larger than {self._max_body} bytes"))
            raise httptools.HttpParserCallbackError("answer too large")
        self._body.append(body)

    def on_message_complete(self) -> None:
        status = int(self._parser.get_status_code())
        if 100 <= status < 200 and self._answer is not None:
            # An interim answer (100 Continue, 103 Early Hints; RFC 9110 section
            # 15.2): the final one follows on the same connection.
            self._body = []
            return
        answer, self._answer = self._answer, None
        self.reusable = bool(self._parser.should_keep_alive())
        if answer is not None and not answer.done():
            answer.set_result((status, b"".join(self._body)))
        self._body = []
        self._body_len = 0

    # -- use ------------------------------------------------------------------

    def exchange(self, request: bytes) -> asyncio.Future[tuple[int, bytes]]:
        """Sends ``request`` (head and body); the future answers (status, body).
        Raises HttpError if the connection is gone before anything is sent."""
        if not self.usable():
            raise HttpError("connection closed before the request was sent")
        if self._answer is not None:
            raise HttpError("a request is already waiting on this connection")
        assert self.transport is not None
        self._answer = asyncio.get_running_loop().create_future()
        self._body = []
        self._body_len = 0
        self.reusable = False
        self.transport.write(request)
        return self._answer

    def usable(self) -> bool:
        return not self.lost and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    def _fail(self, exc: HttpError) -> None:
        answer, self._answer = self._answer, None
        if answer is not None and not answer.done():
            answer.set_exception(exc)
        self.close()


class _Deadlines:
    """The answers a pool waits for, each failed with TimeoutError at its deadline:
    one timer for all of them (armed for the earliest) instead of an
    ``asyncio.timeout`` each, whose timer handle is made, scheduled and
    cancelled for every request. Answers that came are dropped from the front
    as later ones are watched, so the heap holds about as many as are in flight."""

    def __init__(self) -> None:
        # [deadline, sequence, answer]: the sequence orders equal deadlines (the
        # answer is never compared); the answer is None once its request has it,
        # so that the heap does not keep answers alive.
        self._heap: list[list[Any]] = []
        self._seq = 0
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for = 0.0

    def watch(self, answer: asyncio.Future[tuple[int, bytes]], deadline: float) -> list[Any]:
        """Fails ``answer`` at ``deadline`` unless it came; returns its entry, for
        ``done``."""
        heap = self._heap
        while heap and heap[0][2] is None:
            heapq.heappop(heap)
        self._seq += 1
        entry = [deadline, self._seq, answer]
        heapq.heappush(heap, entry)
        if self._timer is None or deadline < self._armed_for:
            self._arm(heap[0][0])
        return entry

    @staticmethod
    def done(entry: list[Any]) -> None:
        """The request has its answer (or gave up on it): no longer watched."""
        entry[2] = None

    def __len__(self) -> int:
        return len(self._heap)

    def clear(self) -> None:
        self._heap.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_for = when
        self._timer = asyncio.get_running_loop().call_at(when, self._expire)

    def _expire(self) -> None:
        self._timer = None
        heap = self._heap
        now = asyncio.get_running_loop().time()
        while heap and (heap[0][0] <= now or heap[0][2] is None):
            answer = heapq.heappop(heap)[2]
            if answer is not None and not answer.done():
                answer.set_exception(TimeoutError())
        if heap:
            self._arm(heap[0][0])


class Http1Pool:
    """Requests to one server, at most ``connections`` at a time."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        connections: int = 16,
        timeout: float = 30.0,
        idle_timeout: float = 90.0,
        headers: Mapping[str, str] | None = None,
        max_body: int | None = None,
        background_share: int | None = None,
    ) -> None:
        """``max_body``: the longest answer body taken, in bytes (a longer
        one fails the request with HttpError and closes its connection);
        None for no bound. ``background_share``: the connections background
        requests (``request(background=True)``) hold at most, and are sure
        of (None: half of ``connections``, at least one); the others are the
        foreground requests' own."""
        self._max_body = max_body
        self._host = host
        self._port = port
        self._ssl = ssl_context
        self._server_hostname = server_hostname if ssl_context is not None else None
        self._connections = connections
        self._timeout = timeout
        self._idle_timeout = idle_timeout
        default_port = 443 if ssl_context is not None else 80
        netloc = f"[{host}]" if ":" in host and not host.startswith("[") else host
        if port != default_port:
            netloc = f"{netloc}:{port}"
        fixed = {"Host": netloc, **(headers or {})}
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        # Idle connections, the longest idle first.
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        share = max(1, connections // 2) if background_share is None else background_share
        if not 1 <= share <= connections:
            raise ValueError(f"background_share must be in 1..{connections}, got {share}")
        self._background_share = share
        self._foreground_own = connections - share
        # Slots: requests that hold a connection (or are opening one); the
        # background requests among them; the requests waiting for a slot, in
        # order (``_grant`` says who goes next).
        self._busy = 0
        self._busy_background = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._waiting_background: deque[asyncio.Future[None]] = deque()
        self._reaper: asyncio.TimerHandle | None = None
        self._deadlines = _Deadlines()
        self._closed = False

    @property
    def open_connections(self) -> int:
        return sum(1 for c in self._open if c.usable())

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        before_send: Callable[[], None] | None = None,
        background: bool = False,
    ) -> tuple[int, bytes]:
        """(status, body) of one request. Raises HttpError when there is no
        complete answer (nothing is resent). ``before_send`` is called once the
        request has its connection, right before its bytes go out; what it
        raises ends the request unsent (the connection stays in the pool).
        ``background``: the request holds one of ``background_share``
        connections; a foreground request waiting for a connection of its own
        share goes first."""
        if self._closed:
            raise HttpError("the pool is closed")
        head = [f"{method} {path} HTTP/1.1\r\n", self._fixed]
        if headers:
            head.extend(f"{k}: {v}\r\n" for k, v in headers.items())
        if body is not None:
            head.append(f"Content-Length: {len(body)}\r\n")
        head.append("\r\n")
        data = "".join(head).encode("latin-1")
        if body:
            data += body
        await self._acquire(background)
        try:
            if self._closed:
                # Closed while this request waited for a connection: it must not
                # open one on a pool nobody will close again.
                raise HttpError("the pool was closed while the request waited for a connection")
            conn: _Connection | None = None
            deadline = asyncio.get_running_loop().time() + self._timeout
            try:
                conn = self._take()
                if conn is None:
                    # A new connection (rare once the pool is open): a timer of its own.
                    async with asyncio.timeout_at(deadline):
                        conn = await self._connect()
                if before_send is not None:
                    try:
                        before_send()
                    except BaseException:
                        unused, conn = conn, None
                        self._park(unused)
                        raise
                answer = conn.exchange(data)
                watched = self._deadlines.watch(answer, deadline)
                try:
                    status, payload = await answer
                finally:
                    _Deadlines.done(watched)
            except TimeoutError as exc:
                if conn is not None:
                    self._discard(conn)
                raise HttpError(f"no answer within {self._timeout:g}s") from exc
            except OSError as exc:
                if conn is not None:
                    self._discard(conn)
                raise HttpError(str(exc) or repr(exc)) from exc
            except BaseException:
                # HttpError, or the caller cancelled: a late answer must not
                # meet the connection's next request.
                if conn is not None:
                    self._discard(conn)
                raise
            if conn.reusable and conn.usable() and not self._closed:
                self._park(conn)
            else:
                self._discard(conn)
            return status, payload
        finally:
            self._release(background)

    async def _acquire(self, background: bool) -> None:
        """A slot: at once when one is free and nobody waits ahead of this
        request, else in turn (``_grant``)."""
        ahead = self._waiting_background if background else None
        if self._may_start(background) and not self._waiting and not ahead:
            self._take_slot(background)
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._waiting_background if background else self._waiting
        queue.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                # Granted, then cancelled before it could run: the slot goes on.
                self._release(background)
            elif waiter in queue:
                queue.remove(waiter)
            raise

    def _may_start(self, background: bool) -> bool:
        if self._busy >= self._connections:
            return False
        return not background or self._busy_background < self._background_share

    def _take_slot(self, background: bool) -> None:
        self._busy += 1
        if background:
            self._busy_background += 1

    def _release(self, background: bool) -> None:
        self._busy -= 1
        if background:
            self._busy_background -= 1
        self._grant()

    def _grant(self) -> None:
        """Free slots to the waiting requests, each kind in order: a foreground
        request while the foreground ones hold fewer than their own share, then
        a background one within its share (so that a backlog of foreground
        requests does not starve them), then foreground ones on what is left."""
        while self._busy < self._connections:
            foreground = self._busy - self._busy_background
            if self._waiting and foreground < self._foreground_own:
                queue, background = self._waiting, False
            elif self._waiting_background and self._may_start(True):
                queue, background = self._waiting_background, True
            elif self._waiting:
                queue, background = self._waiting, False
            else:
                return
            waiter = queue.popleft()
            if not waiter.done():  # a cancelled one leaves on its own
                self._take_slot(background)
                waiter.set_result(None)

    async def close(self) -> None:
        self._closed = True
        self._deadlines.clear()
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()

    def _take(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.usable():
                return conn
            self._open.discard(conn)
        return None

    def _park(self, conn: _Connection) -> None:
        loop = asyncio.get_running_loop()
        conn.idle_since = loop.time()
        self._idle.append(conn)
        if self._reaper is None:
            self._reaper = loop.call_later(self._idle_timeout, self._reap)

    def _reap(self) -> None:
        """Closes the connections idle for ``idle_timeout``; runs again when the
        longest idle of the others will be."""
        self._reaper = None
        now = asyncio.get_running_loop().time()
        expired = 0
        for conn in self._idle:
            if now - conn.idle_since < self._idle_timeout:
                break
            self._discard(conn)
            expired += 1
        del self._idle[:expired]
        if self._idle and not self._closed:
            wait = self._idle[0].idle_since + self._idle_timeout - now
            self._reaper = asyncio.get_running_loop().call_later(wait, self._reap)

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        max_body = self._max_body
        _, conn = await loop.create_connection(
            lambda: _Connection(max_body),
            self._host,
            self._port,
            ssl=self._ssl,
            server_hostname=self._server_hostname,
        )
        self._open.add(conn)
        return conn

    def _discard(self, conn: _Connection) -> None:
        conn.close()
        self._open.discard(conn)


__all__ = ["Http1Pool", "HttpError"]
