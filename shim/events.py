"""Scheduling events (events.k8s.io/v1) written the way kube-scheduler writes them.

kube-scheduler reports through client-go's ``tools/events`` package, and this module
keeps that package's behaviour (staging/src/k8s.io/client-go/tools/events/
event_broadcaster.go and event_recorder.go):

- Occurrences are *isomorphic* when they share type, action, reason, reporting
  controller, reporting instance, regarding and related object (event_broadcaster.go
  ``getKey``); the note is not part of the key, so "0/5 nodes are available: ..." and
  "0/6 nodes are available: ..." for one pod are one event.
- The first occurrence of a key is created (POST) as a new Event; the second turns
  it into a series (``series.count`` 2) written at once by a strategic-merge PATCH;
  later ones only count up in memory (``recordToSink``).
- Every 30 minutes each cached series is patched again (``refreshExistingEventSeries``:
  it keeps the Event alive past the API server's event TTL); every 6 minutes series
  not observed for 6 minutes get their final count written and leave the cache, and
  singletons older than 6 minutes leave it (``finishSeries``).
- A write is retried after a jittered 10 s sleep, at most 12 tries, when the API
  server could not take it; a rejected write is logged and dropped (``attemptRecording``,
  ``recordEvent``). A PATCH answered 404 creates the Event instead; a create of a
  series answered AlreadyExists is retried.
- Recording never blocks the caller: occurrences go into a queue of at most 1000,
  and an occurrence that does not fit is dropped with a log line
  (``maxQueuedEvents``, ``watch.DropIfChannelFull``, event_recorder.go).

One writer, on the event loop. ``record`` can be called from the event loop or any
other thread at the cost of a lock and an append. Every write goes through one path
(``_process``: cache, then ``_attempt``: retries, then ``_write_once``: one PATCH or
create) over one transport, an ``EventSink`` whose two calls are awaited:

- ``berth.kube.asynchttp.AsyncApi``, the shim's: the bindings' connections, the
  events as background requests (they hold at most half of them, and the other
  half is the bindings' own), and no thread has to win the GIL back for each
  answer.
- ``ThreadedSink`` around a blocking client (``KubeApi``), where ``AsyncApi``
  cannot serve the API access configuration (a proxy, an ``assert_hostname``
  override): each call runs in a worker thread.

Upstream writes each occurrence from a goroutine of its own (``recordToSink``), so
writes overlap and the queue drains as fast as the API server answers; a scheduler
binding hundreds of pods a second needs tens of writes under way. Here up to
``writers`` (64 by default) writer tasks take occurrences from the queue; the
refresh and finish timers are two more tasks (``StartRecordingToSinkWithContext``
runs them as two goroutines).

Where this differs from upstream, on purpose:

- Retried failures are those ``ApiError.temporary`` names (unreachable, 429, 5xx).
  client-go retries only transport errors here, because its REST client already
  retries 429 and 5xx-with-Retry-After underneath; ``KubeApi`` does not.
- ``lastObservedTime`` is the time of the ``record`` call, not of its processing, so a
  backed-up queue does not skew it.
- ``finish_series`` skips the PATCH when the API server already has the final count
  (a series seen exactly twice), and ``stop`` writes the counts the API server has not
  seen yet (client-go's Shutdown loses them).
- The note is cut to the API server's limit here (1024 bytes, ``NoteLengthLimit`` in
  pkg/apis/core/validation/events.go) the way kube-scheduler's ``truncateMessage``
  (pkg/scheduler/schedule_one.go) cuts FailedScheduling messages; client-go's
  event_recorder.go has no limit of its own, and an over-long note would be rejected.
  The cut falls on a character boundary, where Go's byte slice may split one.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import enum
import logging
import math
import random
import socket
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from berth.kube.errors import ApiError
from berth.kube.rest import JSON, segment

log = logging.getLogger(__name__)

# event_broadcaster.go constants.
MAX_TRIES_PER_EVENT = 12
FINISH_TIME = 6 * 60.0
REFRESH_TIME = 30 * 60.0
MAX_QUEUED_EVENTS = 1000
# Writes under way at once per recorder at most (upstream: a goroutine per occurrence).
DEFAULT_WRITERS = 64
DEFAULT_SLEEP_DURATION = 10.0
# wait.Jitter(sleepDuration, 0.25) in attemptRecording: d + rand * 0.25 * d.
SLEEP_JITTER = 0.25

# pkg/apis/core/validation/events.go NoteLengthLimit (bytes), and the suffix
# kube-scheduler's truncateMessage (pkg/scheduler/schedule_one.go) appends.
NOTE_LENGTH_LIMIT = 1024
TRUNCATED_SUFFIX = " ..."

EVENT_TYPE_NORMAL = "Normal"
EVENT_TYPE_WARNING = "Warning"
# client-go tools/record/util ValidateEventType.
EVENT_TYPES = frozenset({EVENT_TYPE_NORMAL, EVENT_TYPE_WARNING})

# A cluster-scoped object's events go to "default" (event_recorder.go makeEvent).
DEFAULT_NAMESPACE = "default"

# At most one "queue full" log line this often; the line says how many were dropped.
DROP_LOG_INTERVAL = 10.0


class EventSink(Protocol):
    """The two calls the recorder makes (client-go tools/events ``EventSink``:
    Create and Patch), awaited on the recorder's event loop.
    ``berth.shim.asynchttp.AsyncApi`` is one; ``ThreadedSink`` makes one of a
    blocking client."""

    async def create(self, path: str, body: JSON) -> JSON: ...

    async def strategic_patch(self, path: str, patch: JSON) -> JSON: ...


class BlockingSink(Protocol):
    """The same two calls, blocking the calling thread; ``KubeApi`` is one."""

    def create(self, path: str, body: JSON) -> JSON: ...

    def strategic_patch(self, path: str, patch: JSON) -> JSON: ...


class ThreadedSink:
    """A blocking client as an ``EventSink``: each call runs in a worker thread
    (at most ``workers`` of them, each started when a call finds none free), so
    the event loop never waits on the API server."""

    def __init__(self, api: BlockingSink, workers: int = DEFAULT_WRITERS) -> None:
        self._api = api
        self._lock = threading.Lock()
        self._threads = 0
        self._pool = ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="berth-events", initializer=self._started
        )

    def _started(self) -> None:
        with self._lock:
            self._threads += 1

    @property
    def threads(self) -> int:
        """How many worker threads have started."""
        with self._lock:
            return self._threads

    async def create(self, path: str, body: JSON) -> JSON:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._api.create, path, body)

    async def strategic_patch(self, path: str, patch: JSON) -> JSON:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._api.strategic_patch, path, patch)

    async def close(self) -> None:
        """Lets the worker threads end once their call returns; later calls fail."""
        self._pool.shutdown(wait=False, cancel_futures=True)


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The object an event is about (a core/v1 ObjectReference). Part of the event's
    identity: two occurrences about different objects are never one series."""

    kind: str
    namespace: str
    name: str
    uid: str
    api_version: str = "v1"

    def to_json(self) -> JSON:
        ref: JSON = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        return ref


# The last whole second micro_time formatted, and its text: events come many a
# second, and formatting the date is most of the work.
_micro_second: tuple[int, str] = (-1, "")


def micro_time(t: float) -> str:
    """A metav1.MicroTime: RFC 3339 in UTC with exactly six fractional digits
    (what ``datetime.fromtimestamp(t, UTC)`` shows: the microseconds rounded
    half to even, a carry going to the second)."""
    global _micro_second
    if t < 0:
        return dt.datetime.fromtimestamp(t, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    fraction, whole = math.modf(t)
    micros = round(fraction * 1e6)
    second = int(whole)
    if micros >= 1_000_000:
        second += 1
        micros -= 1_000_000
    cached_second, text = _micro_second
    if second != cached_second:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _micro_second = (second, text)
    return f"{text}.{micros:06d}Z"


def truncate_note(note: str) -> str:
    """``note`` if it fits the API server's 1024-byte limit, else its first bytes
    (whole characters) and " ..." within the limit, as kube-scheduler's
    ``truncateMessage`` does."""
    data = note.encode()
    if len(data) <= NOTE_LENGTH_LIMIT:
        return note
    head = data[: NOTE_LENGTH_LIMIT - len(TRUNCATED_SUFFIX)].decode(errors="ignore")
    return head + TRUNCATED_SUFFIX


def events_path(namespace: str, name: str = "") -> str:
    """The events.k8s.io/v1 collection of ``namespace``, or one Event in it."""
    path = f"/apis/events.k8s.io/v1/namespaces/{segment(namespace)}/events"
    return f"{path}/{segment(name)}" if name else path


_Key = tuple[str, str, str, ObjectRef, ObjectRef | None]


@dataclass(frozen=True, slots=True)
class _Occurrence:
    """One ``record`` call, as queued."""

    regarding: ObjectRef
    related: ObjectRef | None
    type_: str
    reason: str
    action: str
    note: str
    at: float

    def key(self) -> _Key:
        # getKey: reportingController and reportingInstance are the same for
        # every occurrence of one recorder, so they need not be in the tuple.
        return (self.type_, self.action, self.reason, self.regarding, self.related)


@dataclass(frozen=True, slots=True)
class _Write:
    """One write of a cached event, taken under the lock and sent outside it."""

    namespace: str
    name: str
    body: JSON  # the whole Event, for a create
    series: JSON | None  # the series, for a PATCH; None: a create
    count: int  # what the API server will show once this is written


@dataclass(slots=True)
class _CachedEvent:
    """An event as the API server has it (or will): the recorder's ``eventCache``
    entry for one key."""

    namespace: str
    name: str
    body: JSON  # without series
    event_time: float
    series_count: int | None = None
    last_observed: float = 0.0
    written_count: int = 0  # the count last written: 0 none yet, 1 the create

    def write(self) -> _Write:
        if self.series_count is None:
            return _Write(self.namespace, self.name, self.body, None, 1)
        series = {"count": self.series_count, "lastObservedTime": micro_time(self.last_observed)}
        return _Write(
            self.namespace, self.name, {**self.body, "series": series}, series, self.series_count
        )


class _Result(enum.Enum):
    WRITTEN = "written"
    RETRY = "retry"
    DROPPED = "dropped"


@dataclass(slots=True)
class RecorderStats:
    """Counters for logs and metrics."""

    recorded: int = 0
    dropped_queue_full: int = 0
    writes: int = 0
    write_failures: int = 0
    abandoned_on_stop: int = 0


class EventRecorder:
    """Records events for one reporting controller (kube-scheduler: the profile's
    scheduler name) and writes them to the API server from the event loop.

    ``record`` only queues. ``start`` (on the event loop) writes from then on, as
    tasks on that loop, and runs the refresh and finish timers; ``stop`` drains the
    queue within a deadline. Without ``start``, ``process_pending``,
    ``refresh_series`` and ``finish_series`` do the same work when awaited, which is
    how the tests drive the timers.
    """

    def __init__(
        self,
        sink: EventSink,
        reporting_controller: str,
        *,
        reporting_instance: str | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] | None = None,
        refresh_time: float = REFRESH_TIME,
        finish_time: float = FINISH_TIME,
        retry_sleep: float = DEFAULT_SLEEP_DURATION,
        max_tries: int = MAX_TRIES_PER_EVENT,
        max_queued: int = MAX_QUEUED_EVENTS,
        rng: random.Random | None = None,
        writers: int = DEFAULT_WRITERS,
    ) -> None:
        """``writers`` is how many writes may be under way at once (writer tasks,
        started as the queue needs them). ``reporting_instance`` defaults to
        ``<controller>-<hostname>`` as in event_broadcaster.go ``NewRecorder``.
        ``clock`` gives event times (and the ages ``finish_series`` compares);
        ``sleep`` stands in for the wait between retries (None: a wait that
        ``stop`` cuts short). ``refresh_time`` and ``finish_time`` are the timer
        periods, ``finish_time`` also the age after which a series is finished."""
        self._sink = sink
        self.reporting_controller = reporting_controller
        self.reporting_instance = (
            reporting_instance
            if reporting_instance is not None
            else f"{reporting_controller}-{socket.gethostname()}"
        )
        self._clock = clock
        self._sleep = sleep
        self.refresh_time = refresh_time
        self.finish_time = finish_time
        self._retry_sleep = retry_sleep
        self._max_tries = max(1, max_tries)
        self._max_queued = max_queued
        if writers < 1:
            raise ValueError(f"writers must be at least 1, got {writers}")
        self._writers = writers
        self._rng = rng or random.Random()
        self.stats = RecorderStats()
        self._last_drop_log = -DROP_LOG_INTERVAL
        self._drops_since_log = 0

        # _lock guards what record() touches from any thread: the queue, _closed,
        # _loop and the stats record() counts. Everything else belongs to the
        # event loop.
        self._lock = threading.Lock()
        self._queue: deque[_Occurrence] = deque()
        self._closed = False
        self._deadline: float | None = None  # time.monotonic() by which stop() gives up
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._writer_tasks: set[asyncio.Task[None]] = set()
        self._timer_tasks: list[asyncio.Task[None]] = []
        self._busy = 0  # occurrences being written
        self._written = asyncio.Event()  # set when a write ends, for wait_idle
        self._stopping = asyncio.Event()  # cuts retry sleeps short

        self._cache: dict[_Key, _CachedEvent] = {}
        self._last_name_ns = 0

    # -- the caller's side ------------------------------------------------------

    def record(
        self,
        regarding: ObjectRef,
        type_: str,
        reason: str,
        action: str,
        note: str,
        *,
        related: ObjectRef | None = None,
    ) -> None:
        """Queues one occurrence; never blocks and never raises. ``type_`` is
        "Normal" or "Warning" (anything else is logged and ignored, like
        event_recorder.go ``eventf``). A full queue drops the occurrence."""
        if type_ not in EVENT_TYPES:
            log.error(
                "event %s about %s %s/%s not recorded: type %r is neither Normal nor Warning",
                reason,
                regarding.kind,
                regarding.namespace,
                regarding.name,
                type_,
            )
            return
        occurrence = _Occurrence(regarding, related, type_, reason, action, note, self._clock())
        loop: asyncio.AbstractEventLoop | None = None
        with self._lock:
            closed = self._closed
            queued = not closed and len(self._queue) < self._max_queued
            if queued:
                self._queue.append(occurrence)
                self.stats.recorded += 1
                loop = self._loop
            elif not closed:
                self.stats.dropped_queue_full += 1
                self._drops_since_log += 1
                now = time.monotonic()
                if now - self._last_drop_log < DROP_LOG_INTERVAL:
                    return
                dropped, self._drops_since_log = self._drops_since_log, 0
                self._last_drop_log = now
        if queued:
            if loop is not None:  # started: writer tasks take it from the queue
                self._wake_writers(loop)
            return
        if closed:
            log.debug(
                "event %s about %s/%s not recorded: the recorder is stopped",
                reason,
                regarding.namespace,
                regarding.name,
            )
            return
        log.warning(
            "event queue full (%d waiting writes): dropped event %s about %s %s/%s; "
            "%d event(s) dropped since the last such message",
            self._max_queued,
            reason,
            regarding.kind,
            regarding.namespace,
            regarding.name,
            dropped,
        )

    # -- lifecycle --------------------------------------------------------------

    def start(self) -> None:
        """Writes queued occurrences from now on, as tasks on the running event
        loop, and starts the refresh and finish timers (event_broadcaster.go
        ``StartRecordingToSinkWithContext``). Call from the loop."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                raise RuntimeError("EventRecorder.start after stop")
            if self._loop is not None:
                return
            self._loop = loop
            self._loop_thread = threading.get_ident()
        self._timer_tasks = [
            loop.create_task(self._every(self.refresh_time, self.refresh_series)),
            loop.create_task(self._every(self.finish_time, self.finish_series)),
        ]
        self._spawn_writers()

    async def stop(self, grace: float = 5.0) -> None:
        """Writes what is queued and the series counts the API server has not seen,
        one try each, for at most ``grace`` seconds; then stops. What is left is
        dropped with a log line. Later ``record`` calls are ignored. Without
        ``start``, the queue is written from the awaiting task, one at a time."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._deadline = time.monotonic() + grace
            started = self._loop is not None
        self._stopping.set()  # no more retry sleeps
        for timer in self._timer_tasks:
            timer.cancel()
        await asyncio.gather(*self._timer_tasks, return_exceptions=True)
        if not started:
            await self._write_queued()
        else:
            # Every writer helps drain the queue.
            self._spawn_writers()
            if self._writer_tasks:
                left = max(self._deadline - time.monotonic(), 0.0)
                _, pending = await asyncio.wait(set(self._writer_tasks), timeout=left)
                if pending:
                    log.warning(
                        "event writer still busy %.1fs after stop (a write in flight); "
                        "leaving it behind",
                        grace,
                    )
        # Past the deadline this only counts what it leaves unwritten.
        await self._guarded(self.flush_series)

    async def wait_idle(self, within: float | None = None) -> bool:
        """Waits until the queue is empty and no write is under way; False when
        that takes longer than ``within`` seconds."""
        try:
            async with asyncio.timeout(within):
                while self.queued or self._busy:
                    self._written.clear()
                    await self._written.wait()
        except TimeoutError:
            return False
        return True

    @property
    def writer_tasks(self) -> int:
        """How many writer tasks are running."""
        return len(self._writer_tasks)

    @property
    def queued(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def cached(self) -> int:
        """How many events (singletons and series) the recorder remembers."""
        return len(self._cache)

    # -- the work ---------------------------------------------------------------

    async def process_pending(self) -> int:
        """Writes every queued occurrence from the awaiting task; how many there were."""
        done = 0
        while (occurrence := self._next()) is not None:
            await self._process(occurrence)
            done += 1
        return done

    async def refresh_series(self) -> None:
        """PATCHes every cached series with its current count, one try each
        (event_broadcaster.go ``refreshExistingEventSeries``)."""
        writes = [
            (key, ev.write()) for key, ev in self._cache.items() if ev.series_count is not None
        ]
        for key, w in writes:
            if await self._write_once(w) is _Result.WRITTEN:
                self._mark_written(key, w)

    async def finish_series(self) -> None:
        """Writes the final count of every series not observed for ``finish_time``
        and forgets it; forgets singletons older than ``finish_time``
        (event_broadcaster.go ``finishSeries``). A series whose write is worth
        retrying stays for the next round."""
        horizon = self._clock() - self.finish_time
        todo: list[tuple[_Key, _CachedEvent, _Write]] = []
        for key, ev in list(self._cache.items()):
            if ev.series_count is None:
                if ev.event_time < horizon:
                    del self._cache[key]
            elif ev.last_observed < horizon:
                todo.append((key, ev, ev.write()))
        for key, ev, w in todo:
            if ev.written_count >= w.count:
                result = _Result.WRITTEN
            else:
                result = await self._write_once(w)
            if result is _Result.RETRY:
                continue
            # Observed again while we wrote: not finished after all.
            if self._cache.get(key) is ev and ev.series_count == w.count:
                del self._cache[key]
            if result is _Result.WRITTEN:
                log.debug("event series %s/%s finished at count %d", w.namespace, w.name, w.count)

    async def flush_series(self) -> None:
        """PATCHes every series whose count the API server has not seen yet, one try
        each (what ``stop`` does last; not an upstream step)."""
        writes = [
            (key, ev.write())
            for key, ev in self._cache.items()
            if ev.series_count is not None and ev.written_count < ev.series_count
        ]
        for key, w in writes:
            if self._past_deadline():
                self.stats.abandoned_on_stop += 1
                continue
            if await self._write_once(w) is _Result.WRITTEN:
                self._mark_written(key, w)

    # -- internals --------------------------------------------------------------

    def _wake_writers(self, loop: asyncio.AbstractEventLoop) -> None:
        """Has the loop start writer tasks for what is queued (from any thread)."""
        if threading.get_ident() == self._loop_thread:
            self._spawn_writers()
            return
        try:
            loop.call_soon_threadsafe(self._spawn_writers)
        except RuntimeError:  # the loop is closed; stop() was never awaited
            log.debug("event recorder %s: its event loop is closed", self.reporting_controller)

    def _spawn_writers(self) -> None:
        """On the loop: a writer task per queued occurrence, up to ``writers``."""
        loop = self._loop
        if loop is None:
            return
        want = min(self.queued, self._writers) - len(self._writer_tasks)
        for _ in range(want):
            self._writer_tasks.add(loop.create_task(self._writer()))

    async def _writer(self) -> None:
        """A writer task (upstream: the goroutine ``recordToSink`` starts per
        occurrence): writes queued occurrences until the queue is empty. It
        leaves in the same step that saw the queue empty, so an occurrence
        queued after that starts a new task."""
        try:
            await self._write_queued()
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._writer_tasks.discard(task)

    async def _write_queued(self) -> None:
        """Writes queued occurrences one after another until the queue is empty
        (or ``stop``'s deadline has passed)."""
        while (occurrence := self._next()) is not None:
            self._busy += 1
            try:
                await self._guarded(self._process, occurrence)
            finally:
                self._busy -= 1
                self._written.set()

    def _next(self) -> _Occurrence | None:
        """The next queued occurrence; None when there is none, or when ``stop``'s
        deadline has passed (what is left is then dropped with a log line)."""
        with self._lock:
            if not self._queue:
                return None
            if not self._past_deadline():
                return self._queue.popleft()
            abandoned = len(self._queue)
            self._queue.clear()
            self.stats.abandoned_on_stop += abandoned
        log.warning(
            "event recorder stopped with %d event(s) not written: stop's deadline passed",
            abandoned,
        )
        return None

    async def _every(self, period: float, step: Callable[[], Awaitable[None]]) -> None:
        """A timer (``wait.UntilWithContext``): ``step`` every ``period`` seconds."""
        while True:
            await asyncio.sleep(period)
            await self._guarded(step)

    async def _guarded(self, fn: Callable[..., Awaitable[None]], *args: _Occurrence) -> None:
        """Runs one step of the writer; a bug in it is logged, not fatal to the writer."""
        try:
            await fn(*args)
        except Exception:
            log.exception("event writer: unexpected error in %s", fn.__name__)

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() > self._deadline

    def _prepare(self, occ: _Occurrence) -> tuple[_Key, _Write] | None:
        """One occurrence into the cache (event_broadcaster.go ``recordToSink``):
        a new key is created, the second occurrence starts a series written
        now, later ones only count (None: nothing to write)."""
        key = occ.key()
        ev = self._cache.get(key)
        if ev is not None and ev.series_count is not None:
            ev.series_count += 1
            ev.last_observed = occ.at
            return None
        if ev is not None:
            ev.series_count = 2
            ev.last_observed = occ.at
        else:
            ev = self._new_event(occ)
            self._cache[key] = ev
        return key, ev.write()

    async def _process(self, occ: _Occurrence) -> None:
        """One occurrence: into the cache, then written if it needs a write."""
        todo = self._prepare(occ)
        if todo is not None and await self._attempt(todo[1]):
            self._mark_written(*todo)

    def _new_event(self, occ: _Occurrence) -> _CachedEvent:
        """event_recorder.go ``makeEvent``."""
        # Name: "<regarding name>.<unix nanos in hex>", kept unique per recorder
        # when the clock repeats itself.
        ns = max(int(occ.at * 1_000_000_000), self._last_name_ns + 1)
        self._last_name_ns = ns
        namespace = occ.regarding.namespace or DEFAULT_NAMESPACE
        name = f"{occ.regarding.name}.{ns:x}"
        body: JSON = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": micro_time(occ.at),
            "reportingController": self.reporting_controller,
            "reportingInstance": self.reporting_instance,
            "action": occ.action,
            "reason": occ.reason,
            "regarding": occ.regarding.to_json(),
            "note": truncate_note(occ.note),
            "type": occ.type_,
        }
        if occ.related is not None:
            body["related"] = occ.related.to_json()
        return _CachedEvent(namespace, name, body, occ.at)

    def _mark_written(self, key: _Key, w: _Write) -> None:
        """Notes the count the API server now has (if the event is still cached)."""
        ev = self._cache.get(key)
        if ev is not None and ev.name == w.name:
            ev.written_count = max(ev.written_count, w.count)

    async def _attempt(self, w: _Write) -> bool:
        """Writes with retries (event_broadcaster.go ``attemptRecording``): up to
        ``max_tries`` tries, a jittered sleep between; no retry once ``stop`` is
        called (upstream gives up when its context is done)."""
        tries = 0
        while True:
            result = await self._write_once(w)
            if result is not _Result.RETRY:
                return result is _Result.WRITTEN
            tries += 1
            delay = self._retry_delay(w, tries)
            if delay is None:
                return False
            await self._pause(delay)
            if self._stopping_now(w):
                return False

    async def _pause(self, delay: float) -> None:
        """The sleep between tries, cut short by ``stop``."""
        if self._sleep is not None:
            self._sleep(delay)
            return
        try:
            async with asyncio.timeout(delay):
                await self._stopping.wait()
        except TimeoutError:
            pass

    def _retry_delay(self, w: _Write, tries: int) -> float | None:
        """The sleep before the next try; None: give up (too many tries, or
        stopping)."""
        if tries >= self._max_tries:
            log.error(
                "event %s/%s (%s) not written: gave up after %d tries",
                w.namespace,
                w.name,
                w.body.get("reason"),
                tries,
            )
            return None
        if self._stopping_now(w):
            return None
        return self._retry_sleep * (1.0 + self._rng.random() * SLEEP_JITTER)

    def _stopping_now(self, w: _Write) -> bool:
        if not self._stopping.is_set():
            return False
        log.warning(
            "event %s/%s (%s) not written: the recorder is stopping, no more retries",
            w.namespace,
            w.name,
            w.body.get("reason"),
        )
        return True

    async def _write_once(self, w: _Write) -> _Result:
        """One write (event_broadcaster.go ``recordEvent``): a series is PATCHed, or
        created if the Event is gone; anything else is created."""
        try:
            if w.series is not None:
                try:
                    await self._sink.strategic_patch(
                        events_path(w.namespace, w.name), {"series": w.series}
                    )
                    self.stats.writes += 1
                    return _Result.WRITTEN
                except ApiError as exc:
                    if not exc.not_found:
                        raise
                    log.debug("event %s/%s is gone; creating it again", w.namespace, w.name)
            await self._sink.create(events_path(w.namespace), w.body)
            self.stats.writes += 1
            return _Result.WRITTEN
        except ApiError as exc:
            return self._failed(w, exc)

    def _failed(self, w: _Write, exc: ApiError) -> _Result:
        """What a failed write leads to (event_broadcaster.go ``recordEvent``)."""
        reason = w.body.get("reason")
        self.stats.write_failures += 1
        if exc.conflict and w.series is not None:
            # The create after a 404 met the create of the first occurrence:
            # the Event exists now, so the PATCH will work next time.
            log.info(
                "event %s/%s (%s) was created meanwhile; retrying its series write",
                w.namespace,
                w.name,
                reason,
            )
            return _Result.RETRY
        if exc.conflict:
            log.debug("event %s/%s already exists; not retried", w.namespace, w.name)
            return _Result.DROPPED
        if exc.temporary:
            log.warning(
                "event %s/%s (%s) not written yet, will retry: %s",
                w.namespace,
                w.name,
                reason,
                exc,
            )
            return _Result.RETRY
        log.error(
            "event %s/%s (%s) rejected by the API server, dropped: %s",
            w.namespace,
            w.name,
            reason,
            exc,
        )
        return _Result.DROPPED


__all__ = [
    "DEFAULT_SLEEP_DURATION",
    "DEFAULT_WRITERS",
    "EVENT_TYPE_NORMAL",
    "EVENT_TYPE_WARNING",
    "FINISH_TIME",
    "MAX_QUEUED_EVENTS",
    "MAX_TRIES_PER_EVENT",
    "NOTE_LENGTH_LIMIT",
    "REFRESH_TIME",
    "BlockingSink",
    "EventRecorder",
    "EventSink",
    "ObjectRef",
    "RecorderStats",
    "ThreadedSink",
    "events_path",
    "micro_time",
    "truncate_note",
]
