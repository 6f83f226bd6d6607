"""shim/informer.py Informer, after client-go's tools/cache Reflector
(reflector.go ListAndWatch, watchHandler) and DeltaFIFO (delta_fifo.go Replace).

The API server is a scripted fake: each list takes the next scripted
ListResult (or raises the next scripted ApiError; a list of them is a list
in pages, and an ApiError among the pages fails the list there), each ``watch_lines`` call
yields the next script's raw JSON lines and raises the exceptions placed among
them; with no script left, a watch stays quiet until the test ends. The
informer runs on its own thread, as in the shim, and delivers to a real
asyncio loop.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.kube.errors import ApiError
from berth.kube.records import PodSlabs, pod_record
from berth.kube.rest import JSON, KubeApi, ListResult
from berth.shim.informer import ADDED, DELETED, MODIFIED, Event, Informer, pod_key

PATH = "/api/v1/pods"
TIMEOUT = 5.0  # bound on every wait; none should come close

Script = list[bytes | Exception]


# -- objects and watch lines -----------------------------------------------------------------


def pod(name: str, rv: int, cpu: str = "100m", uid: str | None = None) -> JSON:
    meta: JSON = {"name": name, "namespace": "default", "resourceVersion": str(rv)}
    if uid != "":
        meta["uid"] = uid or name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Pending"},
    }


def line(kind: str, obj: JSON) -> bytes:
    return orjson.dumps({"type": kind, "object": obj})


def bookmark(rv: int) -> bytes:
    return line(
        "BOOKMARK",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"resourceVersion": str(rv)},
        },
    )


def error_event(code: int, reason: str, message: str) -> bytes:
    """A watch ERROR event: a metav1.Status as the object."""
    return line(
        "ERROR",
        {
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "reason": reason,
            "message": message,
            "code": code,
        },
    )


def unreachable(method: str = "GET") -> ApiError:
    return ApiError(method, PATH, 0, b"connection refused")


def gone() -> ApiError:
    body = orjson.dumps(
        {"kind": "Status", "reason": "Expired", "message": "too old resource version", "code": 410}
    )
    return ApiError("WATCH", PATH, 410, body)


# -- the fake API server -----------------------------------------------------------------------


@dataclass(frozen=True)
class WatchCall:
    resource_version: str
    timeout_seconds: int
    params: dict[str, Any]


class FakeKubeApi(KubeApi):
    """Only ``list`` and ``watch_lines``, from scripts. Calls come from the
    informer's thread; ``notify`` tells the test's loop that one happened."""

    def __init__(
        self,
        lists: list[ListResult | Exception | builtins.list[ListResult | Exception]],
        watches: list[Script],
    ) -> None:
        # No connection: KubeApi.__init__ is not wanted.
        self.lists = list(lists)
        self.watches = list(watches)
        self.list_calls: list[dict[str, Any]] = []
        # "page <n>" as each page is handed over, and whatever the test adds.
        self.trace: list[str] = []
        self.watch_calls: list[WatchCall] = []
        self.unscripted_lists = 0
        self.list_gate: threading.Event | None = None
        self.released = threading.Event()
        self.notify: Callable[[], None] = lambda: None
        self._lock = threading.Lock()

    def list_pages(self, path: str, **params: Any) -> Iterator[ListResult]:
        assert path == PATH
        with self._lock:
            self.list_calls.append(dict(params))
            step = self.lists.pop(0) if self.lists else None
        self.notify()
        if self.list_gate is not None:
            self.list_gate.wait(TIMEOUT)
        if step is None:
            self.unscripted_lists += 1
            self.released.wait(TIMEOUT)
            raise ApiError("GET", path, 503, b"unscripted list")
        pages = step if isinstance(step, builtins.list) else [step]
        return self._pages(pages)

    def _pages(self, pages: builtins.list[ListResult | Exception]) -> Iterator[ListResult]:
        for n, page in enumerate(pages, 1):
            if isinstance(page, Exception):
                raise page
            self.trace.append(f"page {n}")
            yield page

    def watch_lines(
        self,
        path: str,
        *,
        timeout_seconds: int,
        stop: threading.Event | None = None,
        idle_timeout: float | None = None,
        **params: Any,
    ) -> Iterator[bytes]:
        assert path == PATH
        with self._lock:
            self.watch_calls.append(
                WatchCall(str(params.get("resourceVersion", "")), timeout_seconds, dict(params))
            )
            script = self.watches.pop(0) if self.watches else None
        self.notify()
        return self._stream(script)

    def _stream(self, script: Script | None) -> Iterator[bytes]:
        if script is None:
            # Nothing more to say: a quiet watch until the test ends.
            self.released.wait(TIMEOUT)
            return
        for item in script:
            if isinstance(item, Exception):
                raise item
            yield item

    @property
    def watch_rvs(self) -> builtins.list[str]:
        return [c.resource_version for c in self.watch_calls]


class Collector:
    """``on_events`` for the informer, on the loop; ``until`` waits for a condition."""

    def __init__(self) -> None:
        self.batches: list[list[Event[cpb.Pod]]] = []
        self._changed = asyncio.Event()

    def on_events(self, events: list[Event[cpb.Pod]]) -> None:
        self.batches.append(list(events))
        self._changed.set()

    def poke(self) -> None:
        self._changed.set()

    @property
    def events(self) -> list[Event[cpb.Pod]]:
        return [e for batch in self.batches for e in batch]

    def seen(self) -> list[tuple[str, str, str]]:
        return [(e.type, e.key, e.resource_version) for e in self.events]

    async def until(self, cond: Callable[[], bool], what: str) -> None:
        async def wait() -> None:
            while True:
                self._changed.clear()
                if cond():
                    return
                await self._changed.wait()

        try:
            await asyncio.wait_for(wait(), TIMEOUT)
        except TimeoutError:
            pytest.fail(f"timed out waiting for {what}; events: {self.seen()}")


class RecordingStop(threading.Event):
    """The informer's stop event, recording how long each backoff waits."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None:
            self.waits.append(timeout)
        return super().wait(timeout)


@asynccontextmanager
async def running(
    api: FakeKubeApi,
    collector: Collector,
    *,
    field_selector: str | None = None,
    backoff_initial: float = 0.01,
    backoff_max: float = 0.04,
    stop: threading.Event | None = None,
    decode: Callable[[JSON], cpb.Pod] = pod_record,
    decode_first_list: Callable[[], Callable[[JSON], cpb.Pod]] | None = None,
) -> AsyncIterator[Informer[cpb.Pod]]:
    loop = asyncio.get_running_loop()
    informer: Informer[cpb.Pod] = Informer(
        api,
        PATH,
        name="pods",
        decode=decode,
        decode_first_list=decode_first_list,
        key_of=pod_key,
        on_events=collector.on_events,
        loop=loop,
        field_selector=field_selector,
        watch_timeout=60,
        backoff_initial=backoff_initial,
        backoff_max=backoff_max,
    )
    if stop is not None:
        informer._stop = stop

    def notify() -> None:
        loop.call_soon_threadsafe(collector.poke)

    api.notify = notify
    informer.start()
    thread = informer._thread
    assert thread is not None
    try:
        yield informer
    finally:
        informer.stop()
        api.released.set()
        if api.list_gate is not None:
            api.list_gate.set()
        await asyncio.to_thread(thread.join, TIMEOUT)
        assert not thread.is_alive()
    assert api.unscripted_lists == 0, "the informer listed more often than scripted"


# -- ListAndWatch ------------------------------------------------------------------------------


async def test_lists_then_watches_from_the_lists_resource_version() -> None:
    """Reflector.ListAndWatch: list (ADDED for each item, in one batch), then watch
    from the list's resourceVersion; a watch that ends is resumed from the last
    resourceVersion seen (watchHandler keeps it)."""
    api = FakeKubeApi(
        lists=[ListResult([pod("a", 5), pod("b", 6)], "10")],
        watches=[[line("ADDED", pod("c", 11)), line("MODIFIED", pod("a", 12, cpu="250m"))]],
    )
    c = Collector()
    async with running(api, c, field_selector="spec.nodeName=") as informer:
        await c.until(lambda: len(api.watch_calls) == 2 and len(c.events) == 4, "the resumed watch")

        assert c.seen() == [
            (ADDED, "a", "5"),
            (ADDED, "b", "6"),
            (ADDED, "c", "11"),
            (MODIFIED, "a", "12"),
        ]
        # The list goes over in one batch (later events may join it while the loop is busy).
        assert len(c.batches[0]) >= 2
        assert c.events[3].record.containers[0].requests.milli_cpu == 250
        assert api.watch_rvs == ["10", "12"]
        assert informer.resource_version == "12"
        assert api.list_calls == [{"fieldSelector": "spec.nodeName="}]
        assert all(w.params["fieldSelector"] == "spec.nodeName=" for w in api.watch_calls)
        # reflector.go: minWatchTimeout times a random factor in [1, 2).
        assert 60 <= api.watch_calls[0].timeout_seconds < 120
        assert (informer.stats.lists, informer.stats.events, informer.stats.errors) == (1, 2, 0)


async def test_a_list_in_pages_is_decoded_page_by_page() -> None:
    """KubeApi.list_pages (client-go's pager, 500 items a page): each page becomes
    records before the next page is asked for, so the informer holds one page of
    JSON at a time; the objects go over together, at the last page's
    resourceVersion."""
    api = FakeKubeApi(
        lists=[[ListResult([pod("a", 5), pod("b", 6)], ""), ListResult([pod("c", 7)], "10")]],
        watches=[],
    )
    c = Collector()

    def traced(obj: JSON) -> cpb.Pod:
        api.trace.append(f"decode {obj['metadata']['name']}")
        return pod_record(obj)

    async with running(api, c, decode=traced):
        await c.until(lambda: len(c.events) == 3 and len(api.watch_calls) == 1, "the watch")

        assert api.trace == ["page 1", "decode a", "decode b", "page 2", "decode c"]
        assert c.seen() == [(ADDED, "a", "5"), (ADDED, "b", "6"), (ADDED, "c", "7")]
        assert len(c.batches[0]) == 3
        assert api.watch_rvs[0] == "10"


async def test_a_list_that_fails_between_pages_delivers_nothing_and_loses_nothing() -> None:
    """Reflector.list: a list that fails half-way is an error like any other (backoff,
    list again); the pages it did get are neither delivered nor remembered, so the
    next list delivers every object once."""
    api = FakeKubeApi(
        lists=[
            [ListResult([pod("a", 5)], ""), unreachable()],
            [ListResult([pod("a", 5)], ""), ListResult([pod("b", 6)], "10")],
        ],
        watches=[],
    )
    c = Collector()
    async with running(api, c) as informer:
        await c.until(
            lambda: len(c.events) == 2 and len(api.watch_calls) == 1, "the watch after the list"
        )

        assert c.seen() == [(ADDED, "a", "5"), (ADDED, "b", "6")]
        assert len(api.list_calls) == 2
        assert (informer.stats.lists, informer.stats.errors) == (1, 1)
        assert api.watch_rvs[0] == "10"


async def test_bookmarks_advance_the_resource_version_the_next_watch_starts_from() -> None:
    """watchHandler: a BOOKMARK delivers nothing but moves the resourceVersion, so
    a watch that ends or breaks resumes after it rather than from an older one."""
    api = FakeKubeApi(
        lists=[ListResult([pod("a", 5)], "10")],
        watches=[
            [bookmark(20), line("ADDED", pod("b", 21)), bookmark(30)],
            [bookmark(40), unreachable("WATCH")],
        ],
    )
    c = Collector()
    async with running(api, c) as informer:
        await c.until(lambda: len(api.watch_calls) == 3, "the third watch")

        assert api.watch_rvs == ["10", "30", "40"]
        assert c.seen() == [(ADDED, "a", "5"), (ADDED, "b", "21")]
        assert informer.resource_version == "40"
        assert informer.stats.lists == 1


# -- 410 Gone: relist, DeltaFIFO.Replace ------------------------------------------------------


@pytest.mark.parametrize(
    "gone_by",
    [
        [error_event(410, "Expired", "too old resource version: 3 (9)")],
        [gone()],
    ],
    ids=["watch-error-event", "http-410"],
)
async def test_gone_relists_and_reports_the_difference(gone_by: Script) -> None:
    """Reflector: a watch ERROR event with code 410 (apierrors.IsResourceExpired /
    IsGone) or a 410 answer makes the reflector list again; DeltaFIFO.Replace then
    reports objects the list no longer has as deleted (with their last known
    state), changed ones as MODIFIED, new ones as ADDED, unchanged ones not at all."""
    api = FakeKubeApi(
        lists=[
            ListResult([pod("a", 1), pod("b", 2), pod("c", 3)], "3"),
            ListResult([pod("a", 1), pod("b", 7, cpu="300m"), pod("d", 8), pod("e", 4)], "9"),
        ],
        watches=[[line("ADDED", pod("e", 4)), *gone_by]],
    )
    c = Collector()
    async with running(api, c) as informer:
        await c.until(lambda: len(api.watch_calls) == 2, "the watch after the relist")

        first, relist = c.seen()[:4], c.seen()[4:]
        assert first == [(ADDED, "a", "1"), (ADDED, "b", "2"), (ADDED, "c", "3"), (ADDED, "e", "4")]
        assert relist == [(MODIFIED, "b", "7"), (ADDED, "d", "8"), (DELETED, "c", "3")]
        assert c.events[-1].record.name == "c", "a deletion carries the last known object"
        assert api.watch_rvs == ["3", "9"]
        assert len(api.list_calls) == 2
        assert informer.stats.relists_after_gone == 1
        assert informer.stats.errors == 0, "Gone is no error: no backoff before the relist"


async def test_the_first_list_alone_decodes_with_the_first_list_decoder() -> None:
    """``decode_first_list`` makes one decoder for the first list (nothing known
    yet); the watch and a relist after 410 decode with ``decode``, and what is
    delivered is the same either way."""
    made: list[list[str]] = []

    def first_list() -> Callable[[JSON], cpb.Pod]:
        names: list[str] = []
        made.append(names)
        slabs = PodSlabs(2)

        def decode(obj: JSON) -> cpb.Pod:
            names.append(obj["metadata"]["name"])
            return slabs(obj)

        return decode

    api = FakeKubeApi(
        lists=[
            ListResult([pod("a", 1), pod("b", 2), pod("c", 3)], "3"),
            ListResult([pod("a", 1), pod("b", 7, cpu="300m")], "9"),
        ],
        watches=[[line("ADDED", pod("e", 4)), gone()]],
    )
    c = Collector()
    async with running(api, c, decode_first_list=first_list):
        await c.until(lambda: len(api.watch_calls) == 2, "the watch after the relist")

        assert made == [["a", "b", "c"]], "one decoder, for the first list only"
        first = [e.record for e in c.events[:3]]
        assert first == [pod_record(pod(n, rv)) for n, rv in (("a", 1), ("b", 2), ("c", 3))]
        assert c.seen()[3:] == [
            (ADDED, "e", "4"),
            (MODIFIED, "b", "7"),
            (DELETED, "c", "3"),
            (DELETED, "e", "4"),
        ]


async def test_other_watch_errors_resume_the_watch_without_a_relist() -> None:
    """An ERROR event other than 410 (here a 500) ends the watch; the reflector
    backs off and watches again from the same resourceVersion."""
    api = FakeKubeApi(
        lists=[ListResult([pod("a", 5)], "5")],
        watches=[[line("ADDED", pod("b", 6)), error_event(500, "InternalError", "etcd hiccup")]],
    )
    c = Collector()
    async with running(api, c) as informer:
        await c.until(lambda: len(api.watch_calls) == 2, "the second watch")
        assert api.watch_rvs == ["5", "6"]
        assert len(api.list_calls) == 1
        assert informer.stats.errors == 1
        assert c.seen() == [(ADDED, "a", "5"), (ADDED, "b", "6")]


# -- no event twice ----------------------------------------------------------------------------


async def test_the_same_object_at_the_same_resource_version_is_delivered_once() -> None:
    """An object already delivered at a resourceVersion is not delivered again,
    whether the list and the watch overlap or a resumed watch replays it (the
    store's view: an update to the same version is no change). Event types follow
    what was delivered: MODIFIED of an unknown object is an ADDED, a second
    DELETED is dropped."""
    api = FakeKubeApi(
        lists=[ListResult([pod("a", 5), pod("b", 6)], "6")],
        watches=[
            [
                line("ADDED", pod("a", 5)),  # the list already had it
                line("MODIFIED", pod("b", 7)),
                line("MODIFIED", pod("b", 7)),
            ],
            [
                line("MODIFIED", pod("b", 7)),  # replayed after the reconnect
                line("MODIFIED", pod("z", 9)),  # never seen: delivered as ADDED
                line("ADDED", pod("z", 10)),  # known: delivered as MODIFIED
                line("DELETED", pod("b", 11)),
                line("DELETED", pod("b", 11)),
            ],
        ],
    )
    c = Collector()
    async with running(api, c) as informer:
        await c.until(lambda: len(api.watch_calls) == 3, "the third watch")

        assert c.seen() == [
            (ADDED, "a", "5"),
            (ADDED, "b", "6"),
            (MODIFIED, "b", "7"),
            (ADDED, "z", "9"),
            (MODIFIED, "z", "10"),
            (DELETED, "b", "11"),
        ]
        assert informer.stats.duplicates == 4
        assert api.watch_rvs == ["6", "7", "11"]


# -- an unreachable server ----------------------------------------------------------------------


async def test_unreachable_server_is_retried_with_backoff_and_nothing_is_lost() -> None:
    """Reflector: list and watch failures are retried with a backoff that doubles up
    to a cap (client-go: 800 ms .. 30 s, here injected as 20 ms .. 50 ms), never
    given up on; a broken watch resumes from the last resourceVersion, so the
    events after it still arrive."""
    api = FakeKubeApi(
        lists=[unreachable(), unreachable(), ListResult([pod("a", 5)], "5")],
        watches=[
            [unreachable("WATCH")],  # cannot connect
            [line("ADDED", pod("b", 6)), unreachable("WATCH")],  # breaks mid-stream
            [line("ADDED", pod("c", 7))],  # ends normally: the backoff starts over
            [unreachable("WATCH")],
        ],
    )
    stop = RecordingStop()
    c = Collector()
    async with running(api, c, backoff_initial=0.02, backoff_max=0.05, stop=stop) as informer:
        assert not informer.synced
        await c.until(lambda: len(api.watch_calls) == 5, "the fifth watch")

        assert c.seen() == [(ADDED, "a", "5"), (ADDED, "b", "6"), (ADDED, "c", "7")]
        assert len(api.list_calls) == 3
        assert api.watch_rvs == ["5", "5", "6", "7", "7"]
        assert stop.waits == [0.02, 0.04, 0.05, 0.05, 0.02]
        assert informer.stats.errors == 5
        assert informer.synced


# -- objects that cannot be decoded ------------------------------------------------------------


async def test_undecodable_objects_are_skipped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An object the shim cannot use (no uid, a bad quantity) is logged and skipped;
    the others are delivered and the informer carries on. A garbled line breaks
    the watch like a broken stream (client-go's StreamWatcher stops on a decode
    error) and the watch resumes from the last resourceVersion."""
    caplog.set_level(logging.WARNING, logger="berth.shim.informer")
    api = FakeKubeApi(
        lists=[ListResult([pod("a", 5), pod("no-uid", 6, uid=""), pod("bad-cpu", 7, "lots")], "7")],
        watches=[
            [
                line("ADDED", pod("b", 8)),
                line("ADDED", pod("bad-cpu-2", 9, "a lot")),
                b'{"type": "ADDED", "object": {',
                line("ADDED", pod("lost-with-the-stream", 10)),
            ],
            [line("ADDED", pod("c", 10))],
        ],
    )
    c = Collector()
    async with running(api, c) as informer:
        await c.until(lambda: len(api.watch_calls) == 3, "the third watch")

        assert c.seen() == [(ADDED, "a", "5"), (ADDED, "b", "8"), (ADDED, "c", "10")]
        assert api.watch_rvs == ["7", "9", "10"]
        assert informer.synced
        assert informer.stats.errors == 1
    skipped = [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()]
    assert len(skipped) == 3, skipped
    assert any("default/no-uid" in m and "uid" in m for m in skipped)
    assert any("default/bad-cpu" in m and "cpu" in m for m in skipped)
    assert all(r.levelno == logging.WARNING for r in caplog.records if "skipping" in r.getMessage())


# -- HasSynced ----------------------------------------------------------------------------------


@pytest.mark.parametrize("items", [2, 0])
async def test_wait_synced_resolves_after_the_first_list_is_delivered(items: int) -> None:
    """HasSynced: true once the first list has been delivered (an empty one too);
    by then on_events has seen every listed object."""
    objects = [pod("a", 5), pod("b", 6)][:items]
    api = FakeKubeApi(lists=[ListResult(objects, "6")], watches=[])
    api.list_gate = threading.Event()
    c = Collector()
    async with running(api, c) as informer:
        await c.until(lambda: len(api.list_calls) == 1, "the list call")
        synced = asyncio.create_task(informer.wait_synced())
        for _ in range(20):
            await asyncio.sleep(0)
        assert not synced.done()
        assert not informer.synced

        api.list_gate.set()
        await asyncio.wait_for(synced, TIMEOUT)

        assert informer.synced
        assert len(c.events) == items
        assert informer.resource_version == "6"
