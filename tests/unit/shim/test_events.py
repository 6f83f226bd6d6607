"""shim/events.py: client-go tools/events series aggregation, against a fake API.

Each test names the upstream function (staging/src/k8s.io/client-go/tools/events/
event_broadcaster.go unless said otherwise) whose behaviour it pins down.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import random
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

import orjson
import pytest

from berth.kube.errors import ApiError
from berth.kube.rest import JSON
from berth.shim.events import (
    DEFAULT_SLEEP_DURATION,
    FINISH_TIME,
    MAX_QUEUED_EVENTS,
    MAX_TRIES_PER_EVENT,
    NOTE_LENGTH_LIMIT,
    EventRecorder,
    ObjectRef,
    ThreadedSink,
    micro_time,
    truncate_note,
)
from tests.unit.shim.fakes import FakeClock

T0 = 1_760_000_000.25
NS = "shop"
COLLECTION = f"/apis/events.k8s.io/v1/namespaces/{NS}/events"
POD = ObjectRef(kind="Pod", namespace=NS, name="checkout", uid="uid-1")
OTHER_POD = ObjectRef(kind="Pod", namespace=NS, name="cart", uid="uid-2")
NOTE = "0/5 nodes are available: 5 Insufficient cpu."


@dataclass
class Call:
    method: str  # "create" | "patch"
    path: str
    body: JSON


def api_error(status: int, reason: str = "", method: str = "POST") -> ApiError:
    body = orjson.dumps({"kind": "Status", "reason": reason, "message": f"{reason} for test"})
    return ApiError(method, COLLECTION, status, body if status else b"connection refused")


class FakeApi:
    """Records calls; ``failures`` are raised by the next calls, in order (None: succeed)."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.failures: list[ApiError | None] = []
        self.always_fail: ApiError | None = None
        self.before_call: Callable[[], None] | None = None
        self._lock = threading.Lock()

    def _call(self, method: str, path: str, body: JSON) -> JSON:
        if self.before_call is not None:
            self.before_call()
        with self._lock:
            self.calls.append(Call(method, path, copy.deepcopy(body)))
            failure = self.failures.pop(0) if self.failures else self.always_fail
        if failure is not None:
            raise failure
        return copy.deepcopy(body)

    def create(self, path: str, body: JSON) -> JSON:
        return self._call("create", path, body)

    def strategic_patch(self, path: str, patch: JSON) -> JSON:
        return self._call("patch", path, patch)


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
async def sinks() -> AsyncIterator[Callable[[FakeApi], ThreadedSink]]:
    """Makes the recorder's EventSink of a fake blocking API (as the shim makes
    one of KubeApi where AsyncApi cannot serve); closed after the test."""
    made: list[ThreadedSink] = []

    def make(api: FakeApi) -> ThreadedSink:
        made.append(ThreadedSink(api))
        return made[-1]

    yield make
    for sink in made:
        await sink.close()


@pytest.fixture
def sink(api: FakeApi, sinks: Callable[[FakeApi], ThreadedSink]) -> ThreadedSink:
    return sinks(api)


@pytest.fixture
async def recorder(
    sink: ThreadedSink, clock: FakeClock, sleeps: list[float]
) -> AsyncIterator[EventRecorder]:
    """Not started: tests drive it with process_pending / refresh_series / finish_series."""
    rec = EventRecorder(
        sink, "berth", reporting_instance="berth-host1", clock=clock, sleep=sleeps.append
    )
    yield rec
    await rec.stop(grace=1.0)


def failed_scheduling(rec: EventRecorder, note: str = NOTE, regarding: ObjectRef = POD) -> None:
    rec.record(regarding, "Warning", "FailedScheduling", "Scheduling", note)


def record_times(rec: EventRecorder, clock: FakeClock, n: int, step: float = 1.0) -> None:
    for _ in range(n):
        failed_scheduling(rec)
        clock.advance(step)


# -- recordToSink: create, then a series patch, then counting in memory -------


async def test_first_occurrence_is_created_as_upstream_make_event_builds_it(
    recorder: EventRecorder, api: FakeApi
) -> None:
    """recordToSink creates the first occurrence; event_recorder.go makeEvent names it
    <regarding>.<hex unix nanos> and fills the events.k8s.io/v1 fields."""
    failed_scheduling(recorder)
    await recorder.process_pending()

    assert [c.method for c in api.calls] == ["create"]
    call = api.calls[0]
    assert call.path == COLLECTION
    body = call.body
    assert body["metadata"] == {"name": f"checkout.{int(T0 * 1e9):x}", "namespace": NS}
    assert body["apiVersion"] == "events.k8s.io/v1"
    assert body["kind"] == "Event"
    assert body["eventTime"] == "2025-10-09T08:53:20.250000Z"
    assert body["reportingController"] == "berth"
    assert body["reportingInstance"] == "berth-host1"
    assert body["action"] == "Scheduling"
    assert body["reason"] == "FailedScheduling"
    assert body["type"] == "Warning"
    assert body["note"] == NOTE
    assert body["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": NS,
        "name": "checkout",
        "uid": "uid-1",
    }
    assert "series" not in body
    assert "related" not in body


async def test_second_occurrence_patches_series_count_two(
    recorder: EventRecorder, api: FakeApi, clock: FakeClock
) -> None:
    """recordToSink: the second isomorphic occurrence gets series {count: 2} and is
    written at once by a strategic-merge patch holding only the series
    (createPatchBytesForSeries)."""
    failed_scheduling(recorder)
    clock.advance(3.0)
    failed_scheduling(recorder)
    await recorder.process_pending()

    assert [c.method for c in api.calls] == ["create", "patch"]
    name = api.calls[0].body["metadata"]["name"]
    assert api.calls[1].path == f"{COLLECTION}/{name}"
    assert api.calls[1].body == {"series": {"count": 2, "lastObservedTime": micro_time(T0 + 3.0)}}


async def test_third_and_later_occurrences_only_count_in_memory(
    recorder: EventRecorder, api: FakeApi, clock: FakeClock
) -> None:
    """recordToSink: once a series exists, occurrences only bump count and
    lastObservedTime in the cache; nothing is written."""
    record_times(recorder, clock, 10)
    await recorder.process_pending()

    assert [c.method for c in api.calls] == ["create", "patch"]
    assert recorder.cached == 1


async def test_different_notes_of_one_key_aggregate_into_one_event(
    recorder: EventRecorder, api: FakeApi
) -> None:
    """getKey leaves the note out: FailedScheduling with a new message is the same
    series, and the event keeps its first note."""
    failed_scheduling(recorder, "0/5 nodes are available: 5 Insufficient cpu.")
    failed_scheduling(recorder, "0/6 nodes are available: 6 Insufficient memory.")
    await recorder.process_pending()

    assert [c.method for c in api.calls] == ["create", "patch"]
    assert api.calls[0].body["note"] == "0/5 nodes are available: 5 Insufficient cpu."
    assert api.calls[1].body["series"]["count"] == 2


@pytest.mark.parametrize(
    ("type_", "reason", "action", "regarding"),
    [
        ("Warning", "FailedBinding", "Scheduling", POD),  # reason
        ("Warning", "FailedScheduling", "Binding", POD),  # action
        ("Normal", "FailedScheduling", "Scheduling", POD),  # type
        ("Warning", "FailedScheduling", "Scheduling", OTHER_POD),  # regarding
    ],
)
async def test_occurrences_differing_in_a_key_field_are_separate_events(
    recorder: EventRecorder,
    api: FakeApi,
    type_: str,
    reason: str,
    action: str,
    regarding: ObjectRef,
) -> None:
    """getKey: type, action, reason and regarding each tell events apart."""
    failed_scheduling(recorder)
    recorder.record(regarding, type_, reason, action, NOTE)
    await recorder.process_pending()

    assert [c.method for c in api.calls] == ["create", "create"]
    assert recorder.cached == 2


async def test_related_object_is_part_of_the_key_and_of_the_event(
    recorder: EventRecorder, api: FakeApi
) -> None:
    """getKey includes the related reference (kube-scheduler's Preempted events
    name the preemptor there)."""
    recorder.record(POD, "Normal", "Preempted", "Preempting", "by a", related=OTHER_POD)
    recorder.record(POD, "Normal", "Preempted", "Preempting", "by b", related=None)
    await recorder.process_pending()

    assert [c.method for c in api.calls] == ["create", "create"]
    assert api.calls[0].body["related"]["name"] == "cart"


async def test_cluster_scoped_objects_report_into_the_default_namespace(
    recorder: EventRecorder, api: FakeApi
) -> None:
    """event_recorder.go makeEvent: an object with no namespace reports into "default"."""
    node = ObjectRef(kind="Node", namespace="", name="node-a", uid="")
    recorder.record(node, "Normal", "RegisteredNode", "Registering", "hello")
    await recorder.process_pending()

    assert api.calls[0].path == "/apis/events.k8s.io/v1/namespaces/default/events"
    assert api.calls[0].body["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": "node-a"}


async def test_unknown_event_type_is_logged_and_not_recorded(
    recorder: EventRecorder, api: FakeApi, caplog: pytest.LogCaptureFixture
) -> None:
    """event_recorder.go eventf: util.ValidateEventType admits Normal and Warning only."""
    with caplog.at_level(logging.ERROR, logger="berth.shim.events"):
        recorder.record(POD, "Critical", "FailedScheduling", "Scheduling", NOTE)
    await recorder.process_pending()

    assert api.calls == []
    assert "neither Normal nor Warning" in caplog.text


async def test_event_names_stay_unique_when_the_clock_repeats(
    recorder: EventRecorder, api: FakeApi
) -> None:
    """makeEvent names by unix nanos; two keys in the same instant must not collide
    (the second create would fail AlreadyExists)."""
    failed_scheduling(recorder, regarding=POD)
    recorder.record(POD, "Warning", "FailedBinding", "Binding", NOTE)
    await recorder.process_pending()

    names = [c.body["metadata"]["name"] for c in api.calls]
    assert len(set(names)) == 2


def test_reporting_instance_defaults_to_controller_dash_hostname(sink: ThreadedSink) -> None:
    """NewRecorder: reportingInstance = reportingController + "-" + hostname."""
    rec = EventRecorder(sink, "default-scheduler")
    assert rec.reporting_instance == f"default-scheduler-{socket.gethostname()}"


def test_long_note_is_cut_to_the_api_servers_byte_limit() -> None:
    """kube-scheduler schedule_one.go truncateMessage: at most NoteLengthLimit (1024)
    bytes, ending " ..."; here without splitting a multi-byte character."""
    assert truncate_note("short") == "short"
    exact = "x" * NOTE_LENGTH_LIMIT
    assert truncate_note(exact) == exact

    cut = truncate_note("x" * 5000)
    assert len(cut.encode()) == NOTE_LENGTH_LIMIT
    assert cut.endswith(" ...")

    wide = truncate_note("é" * 1000)  # 2 bytes each
    assert len(wide.encode()) <= NOTE_LENGTH_LIMIT
    assert wide.endswith(" ...")
    assert set(wide[:-4]) == {"é"}


async def test_recorded_note_is_truncated(recorder: EventRecorder, api: FakeApi) -> None:
    failed_scheduling(recorder, "n" * 3000)
    await recorder.process_pending()
    assert len(api.calls[0].body["note"].encode()) == NOTE_LENGTH_LIMIT


# -- refreshExistingEventSeries and finishSeries ---------------------------------


async def test_refresh_patches_the_current_count_of_every_series(
    recorder: EventRecorder, api: FakeApi, clock: FakeClock
) -> None:
    """refreshExistingEventSeries: every cached series is patched with its count;
    singletons are not written."""
    record_times(recorder, clock, 5)
    recorder.record(OTHER_POD, "Warning", "FailedScheduling", "Scheduling", NOTE)
    await recorder.process_pending()
    api.calls.clear()

    await recorder.refresh_series()

    assert [c.method for c in api.calls] == ["patch"]
    assert api.calls[0].body == {"series": {"count": 5, "lastObservedTime": micro_time(T0 + 4.0)}}
    assert recorder.cached == 2  # refresh keeps everything


async def test_finish_writes_final_count_of_a_quiet_series_and_forgets_it(
    recorder: EventRecorder, api: FakeApi, clock: FakeClock
) -> None:
    """finishSeries: a series not observed for finishTime gets its final count
    written and leaves the cache; the next occurrence starts a new event."""
    record_times(recorder, clock, 5)  # last observed at T0 + 4
    await recorder.process_pending()
    first_name = api.calls[0].body["metadata"]["name"]
    api.calls.clear()

    clock.now = T0 + 4 + FINISH_TIME  # not yet *before* now - finishTime
    await recorder.finish_series()
    assert api.calls == []
    assert recorder.cached == 1

    clock.advance(0.001)
    await recorder.finish_series()
    assert [c.method for c in api.calls] == ["patch"]
    assert api.calls[0].path == f"{COLLECTION}/{first_name}"
    assert api.calls[0].body["series"]["count"] == 5
    assert recorder.cached == 0

    api.calls.clear()
    failed_scheduling(recorder)
    await recorder.process_pending()
    assert [c.method for c in api.calls] == ["create"]
    assert api.calls[0].body["metadata"]["name"] != first_name


async def test_finish_forgets_a_singleton_older_than_finish_time_without_writing(
    recorder: EventRecorder, api: FakeApi, clock: FakeClock
) -> None:
    """finishSeries: a singleton (no series) older than finishTime is only dropped
    from the cache, so a later occurrence is a new event, not a series."""
    failed_scheduling(recorder)
    await recorder.process_pending()
    api.calls.clear()

    clock.advance(FINISH_TIME / 2)
    await recorder.finish_series()
    assert recorder.cached == 1

    clock.advance(FINISH_TIME / 2 + 1)
    await recorder.finish_series()
    assert api.calls == []
    assert recorder.cached == 0

    failed_scheduling(recorder)
    await recorder.process_pending()
    assert [c.method for c in api.calls] == ["create"]


async def test_finish_skips_the_patch_when_the_final_count_is_already_written(
    recorder: EventRecorder, api: FakeApi, clock: FakeClock
) -> None:
    """Berth's one saving over finishSeries: a series seen exactly twice already has
    count 2 on the server, so finishing it sends nothing."""
    record_times(recorder, clock, 2)
    await recorder.process_pending()
    api.calls.clear()

    clock.advance(FINISH_TIME + 1)
    await recorder.finish_series()

    assert api.calls == []
    assert recorder.cached == 0


async def test_finish_keeps_a_series_whose_write_is_worth_retrying(
    recorder: EventRecorder, api: FakeApi, clock: FakeClock
) -> None:
    """finishSeries deletes a series only when recordEvent does not ask to retry."""
    record_times(recorder, clock, 3)
    await recorder.process_pending()
    clock.advance(FINISH_TIME + 1)

    api.failures = [api_error(0)]
    await recorder.finish_series()
    assert recorder.cached == 1

    await recorder.finish_series()
    assert recorder.cached == 0
    assert api.calls[-1].body["series"]["count"] == 3


# -- attemptRecording and recordEvent: failures ---------------------------------


@pytest.mark.parametrize("status", [0, 503, 429])
async def test_temporary_failure_is_retried_after_a_jittered_sleep_then_succeeds(
    recorder: EventRecorder, api: FakeApi, sleeps: list[float], status: int
) -> None:
    """attemptRecording: an unreachable API server is retried after
    wait.Jitter(10s, 0.25)."""
    api.failures = [api_error(status), api_error(status)]
    failed_scheduling(recorder)
    await recorder.process_pending()

    assert [c.method for c in api.calls] == ["create"] * 3
    assert len(sleeps) == 2
    assert all(DEFAULT_SLEEP_DURATION <= s <= DEFAULT_SLEEP_DURATION * 1.25 for s in sleeps)
    assert recorder.stats.writes == 1


async def test_gives_up_after_max_tries_per_event(
    recorder: EventRecorder,
    api: FakeApi,
    sleeps: list[float],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """attemptRecording: at most maxTriesPerEvent (12) tries, then an error log."""
    api.always_fail = api_error(0)
    with caplog.at_level(logging.ERROR, logger="berth.shim.events"):
        failed_scheduling(recorder)
        await recorder.process_pending()

    assert len(api.calls) == MAX_TRIES_PER_EVENT
    assert len(sleeps) == MAX_TRIES_PER_EVENT - 1
    assert f"gave up after {MAX_TRIES_PER_EVENT} tries" in caplog.text


@pytest.mark.parametrize(("status", "reason"), [(403, "Forbidden"), (422, "Invalid")])
async def test_rejected_write_is_logged_and_dropped_without_retry(
    recorder: EventRecorder,
    api: FakeApi,
    sleeps: list[float],
    caplog: pytest.LogCaptureFixture,
    status: int,
    reason: str,
) -> None:
    """recordEvent: a status error other than AlreadyExists-on-a-series is not retried."""
    api.failures = [api_error(status, reason)]
    with caplog.at_level(logging.ERROR, logger="berth.shim.events"):
        failed_scheduling(recorder)
        await recorder.process_pending()

    assert len(api.calls) == 1
    assert sleeps == []
    assert "rejected by the API server, dropped" in caplog.text


async def test_series_patch_answered_not_found_creates_the_event_with_its_series(
    recorder: EventRecorder, api: FakeApi, clock: FakeClock
) -> None:
    """recordEvent: a patch that finds no Event (deleted, or expired by its TTL)
    falls back to creating it, series included."""
    failed_scheduling(recorder)
    clock.advance(2.0)
    failed_scheduling(recorder)
    api.failures = [None, api_error(404, "NotFound", "PATCH")]
    await recorder.process_pending()

    assert [c.method for c in api.calls] == ["create", "patch", "create"]
    recreated = api.calls[2].body
    assert recreated["metadata"] == api.calls[0].body["metadata"]
    assert recreated["series"] == {"count": 2, "lastObservedTime": micro_time(T0 + 2.0)}
    assert recreated["note"] == NOTE


async def test_series_create_answered_already_exists_is_retried(
    recorder: EventRecorder, api: FakeApi, sleeps: list[float]
) -> None:
    """recordEvent: creating a series after a 404 patch can meet the first
    occurrence's create; AlreadyExists then means the patch will work, so retry."""
    failed_scheduling(recorder)
    failed_scheduling(recorder)
    api.failures = [None, api_error(404, "NotFound", "PATCH"), api_error(409, "AlreadyExists")]
    await recorder.process_pending()

    assert [c.method for c in api.calls] == ["create", "patch", "create", "patch"]
    assert len(sleeps) == 1
    assert recorder.stats.writes == 2


async def test_singleton_create_answered_already_exists_is_not_retried(
    recorder: EventRecorder, api: FakeApi, sleeps: list[float]
) -> None:
    """recordEvent: AlreadyExists for a plain create is dropped (logged at debug)."""
    api.failures = [api_error(409, "AlreadyExists")]
    failed_scheduling(recorder)
    await recorder.process_pending()

    assert len(api.calls) == 1
    assert sleeps == []


# -- the queue: maxQueuedEvents, DropIfChannelFull, never blocking --------------


async def test_full_queue_drops_occurrences_with_a_log_line(
    api: FakeApi, sink: ThreadedSink, caplog: pytest.LogCaptureFixture
) -> None:
    """maxQueuedEvents with watch.DropIfChannelFull: what does not fit is dropped,
    and event_recorder.go says so in the log (here at most once per 10 s)."""
    rec = EventRecorder(sink, "berth", max_queued=3)
    with caplog.at_level(logging.WARNING, logger="berth.shim.events"):
        for i in range(6):
            rec.record(POD, "Warning", f"Reason{i}", "Scheduling", NOTE)

    assert rec.queued == 3
    assert rec.stats.dropped_queue_full == 3
    drops = [r for r in caplog.records if "event queue full" in r.getMessage()]
    assert len(drops) == 1
    assert "dropped event Reason3" in drops[0].getMessage()

    assert await rec.process_pending() == 3
    assert [c.body["reason"] for c in api.calls] == ["Reason0", "Reason1", "Reason2"]


def test_default_queue_bound_is_upstreams_max_queued_events(sink: ThreadedSink) -> None:
    rec = EventRecorder(sink, "berth")
    for i in range(MAX_QUEUED_EVENTS + 5):
        rec.record(POD, "Warning", f"R{i}", "Scheduling", NOTE)
    assert rec.queued == MAX_QUEUED_EVENTS
    assert rec.stats.dropped_queue_full == 5


@pytest.fixture
def stuck_api() -> Iterator[tuple[FakeApi, threading.Event, threading.Event]]:
    """An API whose calls hang until released: (api, entered, release)."""
    api = FakeApi()
    entered = threading.Event()
    release = threading.Event()

    def hang() -> None:
        entered.set()
        release.wait(10)

    api.before_call = hang
    yield api, entered, release
    release.set()


def test_record_from_another_thread_never_blocks_while_the_writer_is_stuck(
    stuck_api: tuple[FakeApi, threading.Event, threading.Event],
) -> None:
    """event_recorder.go: recording is fire-and-forget; a hung API server costs the
    caller nothing, and the excess is dropped rather than waited for. The caller
    here is a thread other than the event loop's."""
    api, entered, release = stuck_api
    sink = ThreadedSink(api)
    rec = EventRecorder(sink, "berth", writers=1)
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, daemon=True)
    loop_thread.start()
    try:
        asyncio.run_coroutine_threadsafe(_start(rec), loop).result(5)
        failed_scheduling(rec)
        assert entered.wait(5)

        started = time.perf_counter()
        for i in range(MAX_QUEUED_EVENTS + 500):
            rec.record(POD, "Warning", f"R{i}", "Scheduling", NOTE)
        elapsed = time.perf_counter() - started

        assert elapsed < 1.0
        assert rec.queued == MAX_QUEUED_EVENTS
        assert rec.stats.dropped_queue_full == 500
    finally:
        release.set()
        asyncio.run_coroutine_threadsafe(rec.stop(grace=5), loop).result(10)
        asyncio.run_coroutine_threadsafe(sink.close(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join(5)
        loop.close()
    assert rec.stats.writes == MAX_QUEUED_EVENTS + 1


async def _start(rec: EventRecorder) -> None:
    rec.start()


async def test_record_from_the_event_loop_returns_while_the_writer_is_stuck(
    stuck_api: tuple[FakeApi, threading.Event, threading.Event],
    sinks: Callable[[FakeApi], ThreadedSink],
) -> None:
    """record is a plain call usable from asyncio code: it neither awaits nor waits
    for the writer."""
    api, entered, release = stuck_api
    rec = EventRecorder(sinks(api), "berth", writers=1)
    rec.start()
    try:
        failed_scheduling(rec)
        assert await asyncio.to_thread(entered.wait, 5)
        started = time.perf_counter()
        for _ in range(100):
            failed_scheduling(rec)
        assert time.perf_counter() - started < 0.5
        assert rec.queued == 100
    finally:
        release.set()
        await rec.stop(grace=5)
    assert [c.method for c in api.calls] == ["create", "patch", "patch"]  # + stop's flush


# -- concurrent writers (recordToSink writes each occurrence from a goroutine) ----


class GatedApi(FakeApi):
    """Calls wait at a gate; counts how many are under way at once."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.in_flight = 0
        self.most_in_flight = 0
        self._count_lock = threading.Condition()
        self.before_call = self._enter

    def _enter(self) -> None:
        with self._count_lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self._count_lock.notify_all()
        try:
            assert self.gate.wait(10)
        finally:
            with self._count_lock:
                self.in_flight -= 1

    async def wait_in_flight(self, n: int) -> bool:
        def wait() -> bool:
            with self._count_lock:
                return self._count_lock.wait_for(lambda: self.in_flight >= n, 5)

        return await asyncio.to_thread(wait)


def scheduled(rec: EventRecorder, i: int) -> None:
    pod = ObjectRef("Pod", "ns", f"p{i}", f"uid-{i}")
    rec.record(pod, "Normal", "Scheduled", "Binding", f"Successfully assigned ns/p{i} to n1")


async def test_writes_overlap_up_to_the_writer_count(
    sinks: Callable[[FakeApi], ThreadedSink],
) -> None:
    """event_broadcaster.go recordToSink writes every occurrence from a goroutine
    of its own: a slow API server delays events, it does not serialize them.
    Distinct occurrences are written at once, up to ``writers`` at a time."""
    api = GatedApi()
    sink = sinks(api)
    rec = EventRecorder(sink, "berth", writers=3)
    rec.start()
    try:
        for i in range(7):
            scheduled(rec, i)
        assert await api.wait_in_flight(3)
        assert rec.writer_tasks == 3
        assert sink.threads == 3
        assert rec.queued == 4
        api.gate.set()
        assert await rec.wait_idle(5)
    finally:
        api.gate.set()
        await rec.stop(grace=5)
    assert api.most_in_flight == 3
    names = sorted(c.body["regarding"]["name"] for c in api.calls)
    assert names == [f"p{i}" for i in range(7)]
    assert rec.stats.writes == 7


async def test_an_idle_recorder_keeps_one_writer(api: FakeApi, sink: ThreadedSink) -> None:
    """More writers start only while occurrences wait for a busy writer; one
    that finds the queue empty ends."""
    rec = EventRecorder(sink, "berth", writers=8)
    rec.start()
    try:
        for i in range(5):
            scheduled(rec, i)
            assert rec.writer_tasks == 1
            assert await rec.wait_idle(5)
            assert rec.writer_tasks == 0
    finally:
        await rec.stop(grace=5)
    assert len(api.calls) == 5


async def test_stop_drains_with_every_writer_then_flushes_series(
    sinks: Callable[[FakeApi], ThreadedSink],
) -> None:
    """stop: the queue is written by all writers; the series counts last."""
    api = GatedApi()
    rec = EventRecorder(sinks(api), "berth", writers=4)
    rec.start()
    try:
        failed_scheduling(rec)
        assert await api.wait_in_flight(1)
        for i in range(10):
            scheduled(rec, i)
        assert await api.wait_in_flight(4)
        failed_scheduling(rec)  # a series of the first key, written as a PATCH
        failed_scheduling(rec)  # counted only
    finally:
        api.gate.set()
        await rec.stop(grace=5)
    created = [c for c in api.calls if c.method == "create"]
    assert sorted(
        c.body["regarding"]["name"] for c in created if c.body["reason"] == "Scheduled"
    ) == sorted(f"p{i}" for i in range(10))
    patches = [c for c in api.calls if c.method == "patch"]
    # The series PATCH (count 2), then stop's flush with the count seen since (3).
    assert [p.body["series"]["count"] for p in patches] == [2, 3]
    assert rec.stats.abandoned_on_stop == 0


class AsyncFakeApi:
    """An EventSink of the event loop, as AsyncApi is: calls wait at a gate (an
    asyncio.Event); records them."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.gate = asyncio.Event()
        self.in_flight = 0
        self.most_in_flight = 0
        self.threads: set[int] = set()
        self.failures: list[ApiError] = []

    async def _call(self, method: str, path: str, body: JSON) -> JSON:
        self.threads.add(threading.get_ident())
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.gate.wait()
        finally:
            self.in_flight -= 1
        self.calls.append(Call(method, path, copy.deepcopy(body)))
        if self.failures:
            raise self.failures.pop(0)
        return body

    async def create(self, path: str, body: JSON) -> JSON:
        return await self._call("create", path, body)

    async def strategic_patch(self, path: str, patch: JSON) -> JSON:
        return await self._call("patch", path, patch)


async def _until(cond: Callable[[], bool]) -> None:
    for _ in range(500):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in 5 s")


async def test_on_the_event_loop_writes_overlap_and_no_thread_is_started() -> None:
    """With a sink of the event loop (the shim's AsyncApi) writes are tasks on
    the loop, up to ``writers`` at once, and the recorder starts no thread:
    not for the writes, not for the timers."""
    sink = AsyncFakeApi()
    rec = EventRecorder(sink, "berth", writers=3)
    threads_before = set(threading.enumerate())
    rec.start()
    try:
        for i in range(7):
            scheduled(rec, i)
        await _until(lambda: sink.in_flight == 3)
        assert rec.writer_tasks == 3
        assert rec.queued == 4
        assert not set(threading.enumerate()) - threads_before
        sink.gate.set()
        assert await rec.wait_idle(5)
    finally:
        sink.gate.set()
        await rec.stop(grace=5)
    assert sink.most_in_flight == 3
    assert sorted(c.body["regarding"]["name"] for c in sink.calls) == [f"p{i}" for i in range(7)]
    assert sink.threads == {threading.get_ident()}
    assert rec.stats.writes == 7


async def test_on_the_event_loop_a_series_and_a_retry_follow_upstream() -> None:
    """The same recordToSink and attemptRecording rules from the loop: the
    second occurrence PATCHes the series, a 404 creates it, a temporary failure
    is retried after the sleep."""
    sink = AsyncFakeApi()
    sink.gate.set()
    sleeps: list[float] = []
    rec = EventRecorder(sink, "berth", sleep=sleeps.append, rng=random.Random(1))
    rec.start()
    try:
        failed_scheduling(rec)
        assert await rec.wait_idle(5)
        sink.failures = [
            ApiError("PATCH", "/x", 404, b"gone"),
            ApiError("POST", "/x", 503, b"busy"),
        ]
        failed_scheduling(rec)
        assert await rec.wait_idle(5)
    finally:
        await rec.stop(grace=5)
    # The retry starts over with the PATCH, which finds the Event created meanwhile.
    assert [c.method for c in sink.calls] == ["create", "patch", "create", "patch"]
    assert sink.calls[-1].body["series"]["count"] == 2
    assert len(sleeps) == 1
    assert rec.stats.writes == 2


def test_writers_must_be_positive(sink: ThreadedSink) -> None:
    with pytest.raises(ValueError, match="writers must be at least 1, got 0"):
        EventRecorder(sink, "berth", writers=0)


# -- the writers, the timers, stop ------------------------------------------------


async def test_started_recorder_writes_in_the_background(api: FakeApi, sink: ThreadedSink) -> None:
    """startRecordingEvents: a started recorder writes without the caller's help."""
    rec = EventRecorder(sink, "berth")
    rec.start()
    try:
        for _ in range(3):
            failed_scheduling(rec)
        assert await rec.wait_idle(5)
        assert [c.method for c in api.calls] == ["create", "patch"]
    finally:
        await rec.stop()


async def test_timers_refresh_and_finish_series_on_their_own(
    api: FakeApi, sink: ThreadedSink
) -> None:
    """StartRecordingToSinkWithContext runs refreshExistingEventSeries every
    refreshTime and finishSeries every finishTime (here shortened)."""
    rec = EventRecorder(sink, "berth", refresh_time=0.05, finish_time=0.4)
    rec.start()
    try:
        for _ in range(4):
            failed_scheduling(rec)
        assert await rec.wait_idle(5)
        assert rec.cached == 1
        await _until(lambda: rec.cached == 0)  # finished
        patches = [c.body["series"]["count"] for c in api.calls if c.method == "patch"]
        assert patches[0] == 2
        assert patches.count(4) >= 2  # refreshed at least once, and finished
    finally:
        await rec.stop()


async def test_stop_writes_what_is_queued_and_counts_the_server_has_not_seen(
    api: FakeApi, sink: ThreadedSink
) -> None:
    """Berth's stop drains the queue, then patches series counts past the last
    write (client-go's Shutdown would lose the 3rd and 4th occurrence)."""
    rec = EventRecorder(sink, "berth")
    for _ in range(4):
        failed_scheduling(rec)
    rec.start()
    await rec.stop(grace=5)

    assert [c.method for c in api.calls] == ["create", "patch", "patch"]
    assert api.calls[2].body["series"]["count"] == 4


async def test_stop_without_start_drains_from_the_awaiting_task(
    api: FakeApi, sink: ThreadedSink
) -> None:
    rec = EventRecorder(sink, "berth")
    failed_scheduling(rec)
    await rec.stop()
    assert [c.method for c in api.calls] == ["create"]


async def test_record_after_stop_is_ignored(api: FakeApi, sink: ThreadedSink) -> None:
    rec = EventRecorder(sink, "berth")
    await rec.stop()
    failed_scheduling(rec)
    assert rec.queued == 0
    assert await rec.process_pending() == 0
    assert api.calls == []


async def test_stop_cuts_a_retry_sleep_short_and_does_not_retry_again(
    api: FakeApi, sink: ThreadedSink
) -> None:
    """attemptRecording gives up when its context is done: stop does not wait out the
    10 s backoff of an unreachable API server."""
    api.always_fail = api_error(0)
    rec = EventRecorder(sink, "berth")  # default sleep: interruptible
    rec.start()
    failed_scheduling(rec)
    await _until(lambda: bool(api.calls))

    started = time.monotonic()
    await rec.stop(grace=3)
    assert time.monotonic() - started < 2
    assert len(api.calls) == 1


async def test_stop_abandons_what_is_left_at_its_deadline(
    api: FakeApi, sink: ThreadedSink, caplog: pytest.LogCaptureFixture
) -> None:
    """stop is best effort within its grace period; the rest is dropped and counted."""
    api.before_call = lambda: time.sleep(0.1)
    rec = EventRecorder(sink, "berth")
    for i in range(20):
        rec.record(POD, "Warning", f"R{i}", "Scheduling", NOTE)
    with caplog.at_level(logging.WARNING, logger="berth.shim.events"):
        started = time.monotonic()
        await rec.stop(grace=0.25)
    assert time.monotonic() - started < 1.0
    assert 1 <= len(api.calls) < 20
    assert rec.stats.abandoned_on_stop == 20 - len(api.calls)
    assert "not written: stop's deadline passed" in caplog.text


async def test_start_after_stop_is_refused(sink: ThreadedSink) -> None:
    rec = EventRecorder(sink, "berth")
    await rec.stop()
    with pytest.raises(RuntimeError):
        rec.start()


def test_micro_time_is_what_datetime_shows_for_any_instant() -> None:
    """micro_time keeps the formatted second and fills in the microseconds;
    the text is datetime's for the same float: rounding half to even, a
    fraction that rounds up to the next second, seconds that repeat or go back."""
    import datetime as dt
    import random

    def reference(t: float) -> str:
        return dt.datetime.fromtimestamp(t, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    rng = random.Random(26)
    instants = [
        0.0,
        1.0,
        1_795_872_000.0,
        1_795_872_000.9999995,
        1_795_872_000.9999994,
        1_795_872_000.0000005,
        1_795_872_000.0000015,
        1_795_872_059.9999999,
        1_795_871_999.5,
        951_782_400.25,  # 2000-02-29
    ]
    instants += [rng.uniform(0, 4_102_444_800) for _ in range(20_000)]
    base = rng.uniform(1.7e9, 1.8e9)
    instants += [base + i * 0.000_731 for i in range(5_000)]
    instants += [base + rng.random() - 0.5 for _ in range(2_000)]
    for t in instants:
        assert micro_time(t) == reference(t), t
