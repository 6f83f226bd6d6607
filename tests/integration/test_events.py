"""shim/events.py against a real kube-apiserver: what lands in events.k8s.io/v1 and in
core/v1 (what ``kubectl describe`` and ``kubectl get events`` read), and that it has the
shape of the events upstream kube-scheduler writes.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from berth.dev.localcluster import Cluster, objects, start_kube_scheduler
from berth.kube.asynchttp import AsyncApi
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi
from berth.shim.events import (
    FINISH_TIME,
    NOTE_LENGTH_LIMIT,
    EventRecorder,
    ObjectRef,
    ThreadedSink,
    events_path,
    micro_time,
)
from berth.shim.scheduler import ShimOptions

pytestmark = pytest.mark.integration

CONTROLLER = "berth-events-test"
NOTE = "0/3 nodes are available: 3 Insufficient cpu."


class FakeClock:
    """Real time at the start, then moved by the test (to drive finishSeries)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def api(cluster: Cluster) -> Iterator[KubeApi]:
    client = KubeApi.from_kubeconfig(str(cluster.kubeconfig))
    yield client
    client.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def sink(api: KubeApi) -> AsyncIterator[AsyncApi]:
    """The shim's EventSink (shim/scheduler.py): background requests on the
    bindings' connections, on the event loop."""
    bindings = AsyncApi.from_kubeapi(api, connections=ShimOptions().bind_connections)
    assert bindings is not None
    yield bindings.background(decode=False)
    await bindings.close()


@pytest.fixture
async def recorder(sink: AsyncApi, clock: FakeClock) -> AsyncIterator[EventRecorder]:
    rec = EventRecorder(sink, CONTROLLER, clock=clock)
    rec.start()
    yield rec
    await rec.stop(grace=10)


def make_pod(kube: KubeApi, namespace: str, name: str, **kwargs: Any) -> JSON:
    body = objects.pod(name, namespace=namespace, **kwargs)
    return kube.create(f"/api/v1/namespaces/{namespace}/pods", body)


@pytest.fixture
def pod(kube: KubeApi, namespace: str) -> ObjectRef:
    """A pending pod no scheduler serves: a real object for events to be about."""
    meta = make_pod(kube, namespace, "web", scheduler_name="nobody")["metadata"]
    return ObjectRef(kind="Pod", namespace=namespace, name=meta["name"], uid=meta["uid"])


def v1_events(kube: KubeApi, namespace: str) -> list[JSON]:
    items: list[JSON] = kube.get(events_path(namespace))["items"]
    return items


def core_events(kube: KubeApi, namespace: str) -> list[JSON]:
    items: list[JSON] = kube.get(f"/api/v1/namespaces/{namespace}/events")["items"]
    return items


async def failed_scheduling(
    rec: EventRecorder, pod: ObjectRef, clock: FakeClock, times: int
) -> None:
    for _ in range(times):
        rec.record(pod, "Warning", "FailedScheduling", "Scheduling", NOTE)
        clock.now += 1.0
    assert await rec.wait_idle(30)


async def test_five_failed_schedulings_are_one_event_whose_series_ends_at_five(
    kube: KubeApi,
    namespace: str,
    pod: ObjectRef,
    recorder: EventRecorder,
    clock: FakeClock,
) -> None:
    """recordToSink writes the first two occurrences (create, then series count 2);
    finishSeries writes the final count 5. core/v1 shows the same event."""
    t0 = clock.now
    await failed_scheduling(recorder, pod, clock, 5)

    [event] = v1_events(kube, namespace)
    assert event["series"]["count"] == 2
    assert event["series"]["lastObservedTime"] == micro_time(t0 + 1)
    assert event["metadata"]["name"].startswith("web.")
    assert event["eventTime"] == micro_time(t0)
    assert event["reason"] == "FailedScheduling"
    assert event["action"] == "Scheduling"
    assert event["type"] == "Warning"
    assert event["note"] == NOTE
    assert event["reportingController"] == CONTROLLER
    assert event["reportingInstance"] == recorder.reporting_instance
    assert event["regarding"]["uid"] == pod.uid
    assert event["regarding"]["kind"] == "Pod"

    clock.now += FINISH_TIME + 1
    await recorder.finish_series()

    [event] = v1_events(kube, namespace)
    assert event["series"]["count"] == 5
    assert event["series"]["lastObservedTime"] == micro_time(t0 + 4)
    assert recorder.cached == 0

    # The core/v1 view, which kubectl describe reads: "Warning FailedScheduling
    # <age> (x5 over <age>) berth-events-test  <message>". For an events.k8s.io
    # event the repeat count is series.count; the deprecated core "count"
    # (deprecatedCount) is not set, as client-go's tools/events leaves it unset.
    [core] = core_events(kube, namespace)
    assert core["metadata"]["name"] == event["metadata"]["name"]
    assert core["reason"] == "FailedScheduling"
    assert core["message"] == NOTE
    assert core["type"] == "Warning"
    assert core["action"] == "Scheduling"
    assert core["series"]["count"] == 5
    assert core.get("count", 0) == 0
    assert core["involvedObject"]["name"] == "web"
    assert core["involvedObject"]["uid"] == pod.uid
    assert core["reportingComponent"] == CONTROLLER
    assert core["reportingInstance"] == recorder.reporting_instance
    assert core["eventTime"] == micro_time(t0)


async def test_series_whose_event_was_deleted_is_created_again_with_its_count(
    kube: KubeApi,
    namespace: str,
    pod: ObjectRef,
    recorder: EventRecorder,
    clock: FakeClock,
) -> None:
    """recordEvent: a series patch answered 404 (the Event was deleted or expired)
    creates the Event, series included; the API server accepts that create."""
    await failed_scheduling(recorder, pod, clock, 2)
    [event] = v1_events(kube, namespace)
    kube.delete(events_path(namespace, event["metadata"]["name"]))
    assert v1_events(kube, namespace) == []

    await failed_scheduling(recorder, pod, clock, 1)  # count 3, in memory only
    await recorder.refresh_series()

    [again] = v1_events(kube, namespace)
    assert again["metadata"]["name"] == event["metadata"]["name"]
    assert again["series"]["count"] == 3
    assert again["note"] == NOTE


async def test_note_is_cut_to_what_the_api_server_accepts(
    kube: KubeApi,
    api: KubeApi,
    namespace: str,
    pod: ObjectRef,
    recorder: EventRecorder,
    clock: FakeClock,
) -> None:
    """NoteLengthLimit is 1024 bytes: one byte more is refused, so the recorder cuts
    long notes (as kube-scheduler's truncateMessage does) and they are accepted."""
    recorder.record(pod, "Warning", "FailedScheduling", "Scheduling", "x" * 5000)
    assert await recorder.wait_idle(30)
    [event] = v1_events(kube, namespace)
    assert len(event["note"]) == NOTE_LENGTH_LIMIT
    assert event["note"].endswith(" ...")

    too_long = {**event, "metadata": {"name": "too-long", "namespace": namespace}}
    too_long["note"] = "x" * (NOTE_LENGTH_LIMIT + 1)
    with pytest.raises(ApiError) as refused:
        api.create(events_path(namespace), too_long)
    assert refused.value.status == 422


async def test_stop_writes_the_count_the_server_has_not_seen(
    kube: KubeApi, sink: AsyncApi, namespace: str, pod: ObjectRef, clock: FakeClock
) -> None:
    """Occurrences after the second are only counted in memory; stop writes them."""
    rec = EventRecorder(sink, CONTROLLER, clock=clock)
    rec.start()
    await failed_scheduling(rec, pod, clock, 4)
    assert v1_events(kube, namespace)[0]["series"]["count"] == 2

    await rec.stop(grace=10)

    [event] = v1_events(kube, namespace)
    assert event["series"]["count"] == 4


async def test_a_blocking_client_behind_threaded_sink_writes_the_same_series(
    kube: KubeApi, api: KubeApi, namespace: str, pod: ObjectRef, clock: FakeClock
) -> None:
    """Where AsyncApi cannot serve the API access configuration (a proxy), the shim
    hands the recorder KubeApi behind a ThreadedSink: the same create, series PATCH
    and final count reach the API server."""
    sink = ThreadedSink(api)
    rec = EventRecorder(sink, CONTROLLER, clock=clock)
    rec.start()
    try:
        await failed_scheduling(rec, pod, clock, 3)
        assert v1_events(kube, namespace)[0]["series"]["count"] == 2
    finally:
        await rec.stop(grace=10)
        await sink.close()
    [event] = v1_events(kube, namespace)
    assert event["series"]["count"] == 3
    assert event["reportingController"] == CONTROLLER


def _shape(event: JSON) -> JSON:
    """The parts of an event that should look alike whoever wrote it."""
    name_ok = re.fullmatch(r"[a-z0-9-]+\.[0-9a-f]+", event["metadata"]["name"]) is not None
    time_ok = (
        re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", event["eventTime"]) is not None
    )
    return {
        "fields": sorted(k for k in event if k != "metadata"),
        "regarding": sorted(k for k in event["regarding"] if k != "resourceVersion"),
        "name <regarding>.<hex nanos>": name_ok,
        "eventTime MicroTime": time_ok,
        "reportingInstance <controller>-<host>": event["reportingInstance"].startswith(
            event["reportingController"] + "-"
        ),
        "action": event["action"],
        "type": event["type"],
        "reason": event["reason"],
    }


async def test_event_has_the_shape_of_kube_schedulers_failed_scheduling_event(
    cluster: Cluster,
    k8s_bin_dir: Path,
    kube: KubeApi,
    sink: AsyncApi,
    namespace: str,
    tmp_path: Path,
) -> None:
    """Upstream kube-scheduler, asked to place a pod no node fits, writes a
    FailedScheduling event; ours for the same situation has the same fields."""
    scheduler_name = f"upstream-{namespace}"
    make_pod(
        kube,
        namespace,
        "upstream-pod",
        scheduler_name=scheduler_name,
        node_selector={"berth.dev/no-such-label": "x"},
    )
    with start_kube_scheduler(
        cluster, tmp_path / "kube-scheduler", scheduler_name=scheduler_name, bin_dir=k8s_bin_dir
    ):
        deadline = time.monotonic() + 60
        theirs: list[JSON] = []
        while not theirs and time.monotonic() < deadline:
            theirs = [
                e for e in v1_events(kube, namespace) if e["reportingController"] == scheduler_name
            ]
            await asyncio.sleep(0.2)
    assert theirs, "kube-scheduler wrote no FailedScheduling event within 60 s"

    meta = make_pod(kube, namespace, "our-pod", scheduler_name="nobody")["metadata"]
    ref = ObjectRef(kind="Pod", namespace=namespace, name=meta["name"], uid=meta["uid"])
    rec = EventRecorder(sink, CONTROLLER)
    rec.record(ref, "Warning", "FailedScheduling", "Scheduling", NOTE)
    await rec.stop(grace=10)
    [ours] = [e for e in v1_events(kube, namespace) if e["reportingController"] == CONTROLLER]

    assert _shape(ours) == _shape(theirs[0])
