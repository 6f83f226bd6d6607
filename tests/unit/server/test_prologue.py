"""The prologue every RPC runs over (server/prologue.py), in process: a call
holds its cluster's lock while its handler runs, a request refused for its
profile builds none of a large full state, and only calls from the network
are admitted against the in-flight caps."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

import grpc
import pytest

from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog
from berth.framework.config import default_config
from berth.framework.testing import make_node, make_pod
from berth.plugins.registry import REGISTRY
from berth.server.admission import Admission
from berth.server.app import build_frameworks
from berth.server.prologue import Call, Worker
from berth.server.service import SchedulingService
from berth.server.state import STEPWISE_ENTRIES

PROFILE = "default-scheduler"


class Refused(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class Context:
    """The part of grpc.aio.ServicerContext the prologue uses."""

    def set_trailing_metadata(self, _metadata: Sequence[tuple[str, str]]) -> None:
        pass

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    def time_remaining(self) -> float | None:
        return None

    async def abort(self, code: grpc.StatusCode, details: str = "", **_: Any) -> NoReturn:
        raise Refused(code, details)


@pytest.fixture
def service() -> Iterator[SchedulingService]:
    config = default_config(REGISTRY)
    svc = SchedulingService(config, build_frameworks(config, REGISTRY), admission=Admission(0))
    try:
        yield svc
    finally:
        svc.close()


def cluster(nodes: int) -> ClusterStateLog:
    log = ClusterStateLog()
    for i in range(nodes):
        log.upsert_node(make_node(f"n{i}").capacity(cpu="4", pods=10).obj())
    log.commit()
    return log


async def test_a_handler_runs_holding_its_clusters_lock(service: SchedulingService) -> None:
    log = cluster(2)
    seen: list[tuple[bool, str]] = []

    def handler(call: Call, request: pb.SyncRequest) -> pb.SyncResponse:
        seen.append((service.locks.busy_cluster(log.cluster_id), call.caller))
        return pb.SyncResponse()

    await service.prologue.run(
        Context(), pb.SyncRequest(state=log.full_state()), pb.SyncRequest, handler
    )
    assert seen == [(True, "anonymous")]
    assert not service.locks.busy_cluster(log.cluster_id)


async def test_an_unknown_profile_is_refused_before_a_large_full_state_is_built(
    service: SchedulingService,
) -> None:
    log = cluster(STEPWISE_ENTRIES + 1)
    request = pb.ScheduleRequest(
        profile="nobody", state=log.full_state(), pod=make_pod("p").req(cpu="1").obj()
    )
    with pytest.raises(Refused) as refused:
        await service.Schedule(request, Context())
    assert refused.value.code == grpc.StatusCode.NOT_FOUND
    assert service.store.entry(log.cluster_id) is None
    # With a profile it serves, the same state is built (in slices) and used.
    request.profile = PROFILE
    resp = await service.Schedule(request, Context())
    assert resp.node and resp.generation == log.generation
    assert service.store.entry(log.cluster_id) is not None


async def test_only_calls_from_the_network_are_admitted(service: SchedulingService) -> None:
    """Admission(0) takes no call: a request arriving as bytes is refused
    OVERLOADED; an in-process caller's message is served."""
    request = pb.SyncRequest(state=cluster(1).full_state())
    with pytest.raises(Refused) as refused:
        await service.Sync(request.SerializeToString(), Context())
    assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--max-inflight-calls" in refused.value.details
    assert (await service.Sync(request, Context())).node_count == 1


async def test_wait_idle_returns_when_the_last_call_in_flight_leaves() -> None:
    """RunningServer.stop drains the calls in flight before gRPC's shutdown
    closes the connections (which could cut off an answer just returned)."""
    admission = Admission()
    admission.enter(10)
    admission.enter(20)
    waiter = asyncio.create_task(admission.wait_idle())
    await asyncio.sleep(0.01)
    admission.leave(10)
    await asyncio.sleep(0.01)
    assert not waiter.done()
    admission.leave(20)
    await asyncio.wait_for(waiter, 1.0)
    # Nothing in flight: returns at once.
    await asyncio.wait_for(admission.wait_idle(), 0.1)


async def test_work_in_slices_keeps_the_worker_only_while_no_other_call_waits() -> None:
    worker = Worker()
    try:
        # Alone on the worker, every slice runs in one hand-off.
        left = [5]

        def step() -> bool:
            left[0] -= 1
            return left[0] == 0

        assert await worker.run_slices(step)
        assert left == [0]

        # Another call's work queued meanwhile: the slice's answer goes back
        # to the loop, and that work runs before the next slice.
        order: list[str] = []
        queued = asyncio.Event()
        other: list[asyncio.Task[None]] = []

        def slow_step() -> bool:
            order.append("slice")
            if not other:
                loop.call_soon_threadsafe(lambda: other.append(asyncio.create_task(run_other())))
                while not queued.is_set():
                    time.sleep(0.001)
            return order.count("slice") >= 3

        async def run_other() -> None:
            queuing = asyncio.ensure_future(worker.run(lambda: order.append("other")))
            await asyncio.sleep(0)  # the task ran up to awaiting its work: queued
            queued.set()
            await queuing

        loop = asyncio.get_running_loop()
        assert not await worker.run_slices(slow_step)
        await other[0]
        assert order == ["slice", "other"]
        assert await worker.run_slices(slow_step)
        assert order == ["slice", "other", "slice", "slice"]
    finally:
        worker.close()


async def test_a_cancelled_call_stops_its_slices_and_waits_for_the_one_running() -> None:
    worker = Worker()
    try:
        started = threading.Event()
        release = threading.Event()
        slices: list[int] = []

        def step() -> bool:
            slices.append(1)
            started.set()
            release.wait(5)
            return False  # never done by itself

        task = asyncio.create_task(worker.run_slices(step))
        await asyncio.to_thread(started.wait, 5)
        task.cancel()
        await asyncio.sleep(0.01)
        assert not task.done()  # the running slice is waited for
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        assert len(slices) == 1
        # The worker serves the next call.
        assert await worker.run(lambda: 7) == 7
    finally:
        worker.close()


async def test_a_call_cancelled_while_its_work_is_queued_never_runs_it() -> None:
    worker = Worker()
    try:
        started = threading.Event()
        release = threading.Event()
        ran: list[str] = []

        def first() -> str:
            started.set()
            release.wait(5)
            ran.append("first")
            return "first"

        def queued() -> str:
            ran.append("queued")
            return "queued"

        running = asyncio.create_task(worker.run(first))
        await asyncio.to_thread(started.wait, 5)
        cancelled = asyncio.create_task(worker.run(queued))
        await asyncio.sleep(0.01)
        cancelled.cancel()
        await asyncio.sleep(0.01)
        release.set()
        assert await asyncio.wait_for(running, 5) == "first"
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(cancelled, 5)
        assert ran == ["first"]
        assert await worker.run(lambda: 7) == 7
    finally:
        worker.close()
