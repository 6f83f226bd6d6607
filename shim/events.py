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

``record`` can be called from the asyncio event loop or any other thread at the cost of
a lock and an append. Upstream writes each occurrence from a goroutine of its own
(``recordToSink``), so writes overlap and the queue drains as fast as the API server
answers. A busy API server takes long over each event: 76-110 ms per POST on average in
a SchedulingBasic run on two cores (for kube-scheduler's events and the shim's alike),
so a scheduler binding 400 pods a second needs about 40 writes under way. With one
writer at a time the queue overflowed and most Scheduled events were dropped
(docs/benchmarks.md, session 19). So up to ``writers`` (64 by default) writes overlap:

- The shim calls ``use_event_loop``: each write is a task on its event loop, over
  connections of its own (``shim.asynchttp.AsyncApi``). One writer thread remains, for
  the two timers.
- Otherwise writer threads: when an occurrence is queued while every writer is busy,
  another thread starts. Each answer then has to win the GIL back from the event loop,
  which cost about 1 ms of CPU per event in the shim; the event loop path costs a
  fraction of that.

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
import random
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
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
# Writer threads per recorder at most (upstream: a goroutine per occurrence).
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
    """The two calls the recorder makes (client-go tools/events ``EventSink``);
    ``KubeApi`` is one."""

    def create(self, path: str, body: JSON) -> JSON: ...

    def strategic_patch(self, path: str, patch: JSON) -> JSON: ...


class AsyncEventSink(Protocol):
    """The same two calls from the event loop; ``shim.asynchttp.AsyncApi`` is one."""

    async def create(self, path: str, body: JSON) -> JSON: ...

    async def strategic_patch(self, path: str, patch: JSON) -> JSON: ...


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


def micro_time(t: float) -> str:
    """A metav1.MicroTime: RFC 3339 in UTC with exactly six fractional digits."""
    return dt.datetime.fromtimestamp(t, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
    scheduler name) and writes them to the API server in the background.

    ``record`` only queues. ``start`` runs the writer thread and its refresh and
    finish timers; ``stop`` drains the queue within a deadline. Without ``start``,
    ``process_pending``, ``refresh_series`` and ``finish_series`` do the same work on
    the caller's thread, which is how the tests drive the timers.
    """

    def __init__(
        self,
        api: EventSink,
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
        """``writers`` is how many writes may be under way at once (writer
        threads, started as the queue needs them). ``reporting_instance``
        defaults to ``<controller>-<hostname>`` as in event_broadcaster.go
        ``NewRecorder``. ``clock`` gives event times (and the
        ages ``finish_series`` compares); ``sleep`` waits between retries (None: a
        wait that ``stop`` cuts short). ``refresh_time`` and ``finish_time`` are
        the timer periods, ``finish_time`` also the age after which a series is
        finished."""
        self._api = api
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

        # _cond guards the queue, _busy, _idle, _threads, _closed and the stats;
        # _lock the cache.
        lock = threading.RLock()
        self._cond = threading.Condition(lock)
        # Wakes wait_idle (not the idle writers) when a write ends.
        self._done = threading.Condition(lock)
        self._queue: deque[_Occurrence] = deque()
        self._busy = 0  # writes (or drains) under way
        self._idle = 0  # writer threads free to take an occurrence
        self._closed = False
        self._deadline: float | None = None  # time.monotonic() by which stop() gives up
        self._stop_event = threading.Event()
        self._threads: list[threading.Thread] = []
        # With use_event_loop: occurrences are written by tasks on that loop.
        self._async_sink: AsyncEventSink | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._tasks: set[asyncio.Task[None]] = set()

        self._lock = threading.Lock()
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
        with self._cond:
            if self._closed:
                closed = True
            elif len(self._queue) < self._max_queued:
                self._queue.append(occurrence)
                self.stats.recorded += 1
                if self._loop is not None:
                    self._wake_tasks()
                elif (
                    self._threads
                    and len(self._queue) > self._idle
                    and len(self._threads) < self._writers
                ):
                    # More occurrences wait than writers are free: one more.
                    self._start_writer()
                else:
                    self._cond.notify()
                return
            else:
                closed = False
                self.stats.dropped_queue_full += 1
                self._drops_since_log += 1
                now = time.monotonic()
                if now - self._last_drop_log < DROP_LOG_INTERVAL:
                    return
                dropped, self._drops_since_log = self._drops_since_log, 0
                self._last_drop_log = now
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
        """Starts the writer thread, which also runs the refresh and finish timers
        (event_broadcaster.go ``StartRecordingToSinkWithContext``)."""
        with self._cond:
            if self._closed:
                raise RuntimeError("EventRecorder.start after stop")
            if self._threads:
                return
            self._start_writer()

    def use_event_loop(self, sink: AsyncEventSink) -> None:
        """Writes occurrences from tasks on the running event loop, through
        ``sink``, instead of from writer threads: no thread has to win the GIL
        back for each answer (a thread per write cost the shim about 1 ms of
        CPU per event; docs/benchmarks.md, session 19). Up to ``writers``
        writes are under way at once. The first writer thread still runs the
        timers and, at ``stop``, helps drain the queue. Call from the loop,
        before ``start``."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._async_sink = sink

    def _wake_tasks(self) -> None:
        """Starts writer tasks for the queued occurrences (with ``_cond`` held,
        from any thread)."""
        loop = self._loop
        assert loop is not None
        if threading.get_ident() == self._loop_thread:
            self._spawn_tasks()
        else:
            loop.call_soon_threadsafe(self._spawn_tasks)

    def _spawn_tasks(self) -> None:
        """On the loop: one task per queued occurrence, up to ``writers``."""
        loop = self._loop
        assert loop is not None
        with self._cond:
            want = min(len(self._queue), self._writers) - len(self._tasks)
            for _ in range(max(want, 0)):
                task = loop.create_task(self._write_task())
                self._tasks.add(task)

    async def _write_task(self) -> None:
        """Writes queued occurrences until the queue is empty."""
        task = asyncio.current_task()
        while True:
            with self._cond:
                if not self._queue:
                    # Leaves in the same step that saw the queue empty, so a
                    # record() after this starts a new task.
                    if task is not None:
                        self._tasks.discard(task)
                    return
                occurrence = self._queue.popleft()
                self._busy += 1
            try:
                await self._aprocess(occurrence)
            except Exception:
                log.exception("event writer: unexpected error writing an event")
            finally:
                with self._cond:
                    self._busy -= 1
                    self._done.notify_all()

    def _start_writer(self) -> None:
        """Starts one more writer thread, free until it takes an occurrence;
        called with ``_cond`` held. The first one also runs the timers."""
        k = len(self._threads)
        self._idle += 1
        thread = threading.Thread(
            target=self._run,
            args=(k == 0,),
            name=f"events-{self.reporting_controller}" + (f"-{k}" if k else ""),
            daemon=True,
        )
        self._threads.append(thread)
        thread.start()

    @property
    def writer_threads(self) -> int:
        """How many writer threads have started."""
        with self._cond:
            return len(self._threads)

    def stop(self, timeout: float = 5.0) -> None:
        """Writes what is queued and the series counts the API server has not seen,
        one try each, for at most ``timeout`` seconds; then stops. What is left is
        dropped with a log line. Later ``record`` calls are ignored."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._deadline = time.monotonic() + timeout
            threads = list(self._threads)
            self._cond.notify_all()
        self._stop_event.set()  # no more retry sleeps
        if not threads:
            self._drain_and_flush()
            return
        # The first writer finishes last (it flushes the series counts once
        # the others have drained the queue).
        threads[0].join(timeout)
        if threads[0].is_alive():
            log.warning(
                "event writer still busy %.1fs after stop (a write in flight); leaving it behind",
                timeout,
            )

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Waits until the queue is empty and no write is under way; False on timeout."""
        with self._cond:
            return self._done.wait_for(lambda: not self._queue and self._busy == 0, timeout)

    @property
    def queued(self) -> int:
        with self._cond:
            return len(self._queue)

    @property
    def cached(self) -> int:
        """How many events (singletons and series) the recorder remembers."""
        with self._lock:
            return len(self._cache)

    # -- the work, callable on any thread when the writer is not running --------

    def process_pending(self) -> int:
        """Writes every queued occurrence on the caller's thread; how many there were."""
        done = 0
        while True:
            with self._cond:
                if not self._queue:
                    return done
                occurrence = self._queue.popleft()
            self._process(occurrence)
            done += 1

    def refresh_series(self) -> None:
        """PATCHes every cached series with its current count, one try each
        (event_broadcaster.go ``refreshExistingEventSeries``)."""
        with self._lock:
            writes = [
                (key, ev.write()) for key, ev in self._cache.items() if ev.series_count is not None
            ]
        for key, w in writes:
            if self._write_once(w) is _Result.WRITTEN:
                self._mark_written(key, w)

    def finish_series(self) -> None:
        """Writes the final count of every series not observed for ``finish_time``
        and forgets it; forgets singletons older than ``finish_time``
        (event_broadcaster.go ``finishSeries``). A series whose write is worth
        retrying stays for the next round."""
        horizon = self._clock() - self.finish_time
        todo: list[tuple[_Key, _CachedEvent, _Write]] = []
        with self._lock:
            for key, ev in list(self._cache.items()):
                if ev.series_count is None:
                    if ev.event_time < horizon:
                        del self._cache[key]
                elif ev.last_observed < horizon:
                    todo.append((key, ev, ev.write()))
        for key, ev, w in todo:
            result = _Result.WRITTEN if ev.written_count >= w.count else self._write_once(w)
            if result is _Result.RETRY:
                continue
            with self._lock:
                # Observed again while we wrote: not finished after all.
                if self._cache.get(key) is ev and ev.series_count == w.count:
                    del self._cache[key]
            if result is _Result.WRITTEN:
                log.debug("event series %s/%s finished at count %d", w.namespace, w.name, w.count)

    def flush_series(self) -> None:
        """PATCHes every series whose count the API server has not seen yet, one try
        each (what ``stop`` does last; not an upstream step)."""
        with self._lock:
            writes = [
                (key, ev.write())
                for key, ev in self._cache.items()
                if ev.series_count is not None and ev.written_count < ev.series_count
            ]
        for key, w in writes:
            if self._past_deadline():
                self._count("abandoned_on_stop")
                continue
            if self._write_once(w) is _Result.WRITTEN:
                self._mark_written(key, w)

    # -- internals --------------------------------------------------------------

    def _run(self, primary: bool) -> None:
        """A writer thread: queued occurrences first; the primary writer also
        runs the timers when due. After ``stop`` every writer helps drain the
        queue, and the primary one then writes the series counts."""
        next_refresh = time.monotonic() + self.refresh_time
        next_finish = time.monotonic() + self.finish_time
        while True:
            with self._cond:
                # This writer counts as free (_idle) until it takes an occurrence;
                # with use_event_loop, tasks take them and this thread runs the timers.
                tasks_write = self._loop is not None
                if (tasks_write or not self._queue) and not self._closed:
                    if primary:
                        wait = min(next_refresh, next_finish) - time.monotonic()
                        if wait > 0:
                            self._cond.wait(wait)
                    else:
                        self._cond.wait()
                if self._closed:
                    self._idle -= 1
                    break
                occurrence = self._queue.popleft() if self._queue and not tasks_write else None
                self._idle -= 1
                self._busy += 1
            try:
                if occurrence is not None:
                    self._guarded(self._process, occurrence)
                if primary:
                    now = time.monotonic()
                    if now >= next_finish:
                        self._guarded(self.finish_series)
                        next_finish = time.monotonic() + self.finish_time
                    if now >= next_refresh:
                        self._guarded(self.refresh_series)
                        next_refresh = time.monotonic() + self.refresh_time
            finally:
                with self._cond:
                    self._busy -= 1
                    self._idle += 1
                    self._done.notify_all()
        self._drain()
        if primary:
            with self._cond:
                others = self._threads[1:]
            for thread in others:
                left = None if self._deadline is None else self._deadline - time.monotonic()
                thread.join(max(left, 0.0) if left is not None else None)
            self._flush()

    def _drain_and_flush(self) -> None:
        """stop's work on the caller's thread: the queue, then the unwritten
        series counts, until the deadline."""
        self._drain()
        self._flush()

    def _drain(self) -> None:
        """Writes what is queued (shared by every writer after ``stop``), until
        the deadline; what is left then is dropped with a log line."""
        while True:
            with self._cond:
                if not self._queue:
                    return
                if self._past_deadline():
                    abandoned = len(self._queue)
                    self._queue.clear()
                    self.stats.abandoned_on_stop += abandoned
                    log.warning(
                        "event recorder stopped with %d event(s) not written: "
                        "stop's deadline passed",
                        abandoned,
                    )
                    return
                occurrence = self._queue.popleft()
                self._busy += 1
            try:
                self._guarded(self._process, occurrence)
            finally:
                with self._cond:
                    self._busy -= 1
                    self._done.notify_all()

    def _flush(self) -> None:
        with self._cond:
            self._busy += 1
        try:
            self._guarded(self.flush_series)
        finally:
            with self._cond:
                self._busy -= 1
                self._done.notify_all()

    def _count(self, stat: str) -> None:
        """One more of a counter the writers share."""
        with self._cond:
            setattr(self.stats, stat, getattr(self.stats, stat) + 1)

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() > self._deadline

    def _guarded(self, fn: Callable[..., None], *args: object) -> None:
        """Runs one step of the writer; a bug in it is logged, not fatal to the thread."""
        try:
            fn(*args)
        except Exception:
            log.exception("event writer: unexpected error in %s", fn.__name__)

    def _prepare(self, occ: _Occurrence) -> tuple[_Key, _Write] | None:
        """One occurrence into the cache (event_broadcaster.go ``recordToSink``):
        a new key is created, the second occurrence starts a series written
        now, later ones only count (None: nothing to write)."""
        key = occ.key()
        with self._lock:
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

    def _process(self, occ: _Occurrence) -> None:
        """One occurrence, written from this thread."""
        todo = self._prepare(occ)
        if todo is not None and self._attempt(todo[1]):
            self._mark_written(*todo)

    async def _aprocess(self, occ: _Occurrence) -> None:
        """One occurrence, written from the event loop."""
        todo = self._prepare(occ)
        if todo is not None and await self._aattempt(todo[1]):
            self._mark_written(*todo)

    def _new_event(self, occ: _Occurrence) -> _CachedEvent:
        """event_recorder.go ``makeEvent``; called with the cache lock held."""
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
        with self._lock:
            ev = self._cache.get(key)
            if ev is not None and ev.name == w.name:
                ev.written_count = max(ev.written_count, w.count)

    def _attempt(self, w: _Write) -> bool:
        """Writes with retries (event_broadcaster.go ``attemptRecording``): up to
        ``max_tries`` tries, a jittered sleep between; no retry once ``stop`` is
        called (upstream gives up when its context is done)."""
        tries = 0
        while True:
            result = self._write_once(w)
            if result is not _Result.RETRY:
                return result is _Result.WRITTEN
            tries += 1
            delay = self._retry_delay(w, tries)
            if delay is None:
                return False
            if self._sleep is not None:
                self._sleep(delay)
            else:
                self._stop_event.wait(delay)  # cut short by stop()
            if self._stopping_now(w):
                return False

    async def _aattempt(self, w: _Write) -> bool:
        """``_attempt`` from the event loop."""
        tries = 0
        while True:
            result = await self._awrite_once(w)
            if result is not _Result.RETRY:
                return result is _Result.WRITTEN
            tries += 1
            delay = self._retry_delay(w, tries)
            if delay is None:
                return False
            if self._sleep is not None:
                self._sleep(delay)
            else:
                await asyncio.sleep(delay)
            if self._stopping_now(w):
                return False

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
        if not self._stop_event.is_set():
            return False
        log.warning(
            "event %s/%s (%s) not written: the recorder is stopping, no more retries",
            w.namespace,
            w.name,
            w.body.get("reason"),
        )
        return True

    def _write_once(self, w: _Write) -> _Result:
        """One write (event_broadcaster.go ``recordEvent``): a series is PATCHed, or
        created if the Event is gone; anything else is created."""
        try:
            if w.series is not None:
                try:
                    self._api.strategic_patch(
                        events_path(w.namespace, w.name), {"series": w.series}
                    )
                    self._count("writes")
                    return _Result.WRITTEN
                except ApiError as exc:
                    self._gone_or_raise(w, exc)
            self._api.create(events_path(w.namespace), w.body)
            self._count("writes")
            return _Result.WRITTEN
        except ApiError as exc:
            return self._failed(w, exc)

    async def _awrite_once(self, w: _Write) -> _Result:
        """``_write_once`` through the event loop's sink."""
        sink = self._async_sink
        assert sink is not None
        try:
            if w.series is not None:
                try:
                    await sink.strategic_patch(
                        events_path(w.namespace, w.name), {"series": w.series}
                    )
                    self._count("writes")
                    return _Result.WRITTEN
                except ApiError as exc:
                    self._gone_or_raise(w, exc)
            await sink.create(events_path(w.namespace), w.body)
            self._count("writes")
            return _Result.WRITTEN
        except ApiError as exc:
            return self._failed(w, exc)

    @staticmethod
    def _gone_or_raise(w: _Write, exc: ApiError) -> None:
        """A series PATCH answered 404: the Event is gone, create it again."""
        if not exc.not_found:
            raise exc
        log.debug("event %s/%s is gone; creating it again", w.namespace, w.name)

    def _failed(self, w: _Write, exc: ApiError) -> _Result:
        """What a failed write leads to (event_broadcaster.go ``recordEvent``)."""
        reason = w.body.get("reason")
        self._count("write_failures")
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
    "AsyncEventSink",
    "EventRecorder",
    "EventSink",
    "ObjectRef",
    "RecorderStats",
    "events_path",
    "micro_time",
    "truncate_note",
]
