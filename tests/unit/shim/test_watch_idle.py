"""A watch that dies without a word is replaced: berth/kube/rest.py ``watch_lines``'
idle timeout against a real socket that stops talking, and the informer's reaction
(client-go reflector.go: a broken watch is started again from the last resourceVersion;
minWatchTimeout randomised per watch).

The server here is a thread on a loopback socket: it answers the watch's headers and a
first event, then neither writes nor closes, as a dropped NAT entry or a partition leaves
a connection. A live watch, even of a kind that never changes, is ended by the API server
at its timeoutSeconds, well before the idle timeout (tests/integration/
test_watch_partition.py checks the whole path through a proxy).
"""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import urllib3

from berth.kube.errors import WatchStalled
from berth.kube.rest import KubeApi, ListResult
from berth.shim.informer import WATCH_IDLE_TIMEOUT, WATCH_TIMEOUT_SECONDS, watch_timeout_seconds
from tests.unit.shim.test_informer import (
    PATH,
    Collector,
    FakeKubeApi,
    bookmark,
    line,
    pod,
    running,
)

pytestmark = pytest.mark.timeout(60)


class FixedRandom(random.Random):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def random(self) -> float:
        return self.value


class SilentAfterFirstEvent:
    """Answers one watch with a first event, then keeps the connection open, silent."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests: list[bytes] = []
        self.done = threading.Event()
        self.closed_by_client = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            self.requests.append(conn.recv(65536))
            event = line("ADDED", pod("a", 7)) + b"\n"
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
                + f"{len(event):x}\r\n".encode()
                + event
                + b"\r\n"
            )
            conn.settimeout(0.1)
            while not self.done.is_set():
                try:
                    if conn.recv(1) == b"":
                        self.closed_by_client.set()
                        return
                except TimeoutError:
                    continue

    def close(self) -> None:
        self.done.set()
        self.sock.close()


@pytest.fixture
def silent() -> Iterator[SilentAfterFirstEvent]:
    server = SilentAfterFirstEvent()
    yield server
    server.close()


def test_a_silent_watch_stream_raises_watch_stalled_after_its_idle_timeout(
    silent: SilentAfterFirstEvent,
) -> None:
    """The server would end the watch only after timeoutSeconds (300 s); a stream with no
    byte for ``idle_timeout`` seconds is given up on long before, and closed."""
    api = KubeApi(f"http://127.0.0.1:{silent.port}", urllib3.PoolManager(), lambda: None)
    got: list[bytes] = []
    began = time.monotonic()
    with pytest.raises(
        WatchStalled, match=r"no data for 0\.5s, not even the end of the watch"
    ) as err:
        for event in api.watch_lines(PATH, timeout_seconds=300, idle_timeout=0.5):
            got.append(event)
    assert time.monotonic() - began < 30  # bounded by the idle timeout, not timeoutSeconds
    assert got == [line("ADDED", pod("a", 7))]
    assert err.value.status == 0 and err.value.temporary
    request = silent.requests[0].decode()
    assert "allowWatchBookmarks=true" in request and "timeoutSeconds=300" in request
    assert silent.closed_by_client.wait(5), "the dead connection was not closed"


async def test_the_informer_replaces_a_stalled_watch_from_the_last_resource_version() -> None:
    """reflector.go: a watch that breaks is started again from the last resourceVersion
    seen (a bookmark's included), without a relist; the stall is counted."""
    api = FakeKubeApi(
        lists=[ListResult([], "10")],
        watches=[
            [line("ADDED", pod("a", 11)), bookmark(15), WatchStalled(PATH, WATCH_IDLE_TIMEOUT)],
            [line("ADDED", pod("b", 16))],
        ],
    )
    c = Collector()
    async with running(api, c) as informer:
        await c.until(lambda: len(c.events) == 2, "the event after the replaced watch")
        assert api.watch_rvs[:2] == ["10", "15"]
        assert informer.stats.stalled_watches == 1
        assert informer.stats.lists == 1
    assert [e.key for e in c.events] == ["a", "b"]


def test_watch_timeouts_are_spread_between_the_minimum_and_twice_it() -> None:
    """reflector.go: timeoutSeconds = minWatchTimeout * (rand.Float64() + 1.0)."""
    rng = random.Random(7)
    seen = [watch_timeout_seconds(300, rng) for _ in range(200)]
    assert all(300 <= s < 600 for s in seen)
    assert max(seen) - min(seen) > 200


def test_a_live_watch_ends_before_the_idle_timeout_and_a_dead_one_is_replaced_in_90s() -> None:
    """The longest watch the informer asks for ends (the API server closes it at its
    timeoutSeconds, events or not) before the idle timeout, which stays under 90 s."""
    longest = watch_timeout_seconds(WATCH_TIMEOUT_SECONDS, FixedRandom(0.999999))
    assert longest < WATCH_IDLE_TIMEOUT < 90
