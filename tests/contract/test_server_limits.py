"""Calls and request bytes in flight are capped (issue 22, "Every RPC
bounded"): beyond, a call is refused at once with RESOURCE_EXHAUSTED (reason
OVERLOADED) before anything of it is done, and berth's client backs off and
retries, so the pod is served once the replica has room, never lost.

A Gate plugin holds a cycle in flight on the server's worker until the test
opens it; everything else is real gRPC against an in-process server."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import grpc
import pytest

from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.client import ClusterStateLog, SchedulingClient
from berth.framework import CycleState, FilterPlugin, NodeInfo, PodInfo, Status
from berth.framework.profile import PluginRef, ProfileConfig, SchedulerConfig
from berth.framework.testing import make_node, make_pod
from berth.server.app import Limits, RunningServer, start_server
from tests.contract.fakes import REGISTRY as BASE
from tests.contract.test_server_errors import assert_info, refused

PROFILE = "gated"


class Gate(FilterPlugin):
    """Holds a pod labelled ``gate`` until the test opens the gate."""

    name = "Gate"
    entered = threading.Event()
    opened = threading.Event()

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if pod.proto.labels.get("gate"):
            Gate.entered.set()
            Gate.opened.wait(30)
        return Status.success()


REGISTRY = {**BASE, Gate.name: Gate}
CONFIG = SchedulerConfig(
    profiles=(
        ProfileConfig(
            scheduler_name=PROFILE,
            plugins={
                "queueSort": (PluginRef("Sort"),),
                "filter": (PluginRef("Gate"),),
                "bind": (PluginRef("Binder"),),
            },
        ),
    ),
    source="<limits>",
)


async def serve(limits: Limits) -> RunningServer:
    Gate.entered.clear()
    Gate.opened.clear()
    return await start_server(CONFIG, REGISTRY, "127.0.0.1:0", trace=False, limits=limits)


@pytest.fixture
async def one_call() -> AsyncIterator[RunningServer]:
    running = await serve(Limits(max_inflight_calls=1))
    try:
        yield running
    finally:
        Gate.opened.set()
        await running.stop(0)


def cluster(annotation_bytes: int = 0) -> ClusterStateLog:
    log = ClusterStateLog()
    log.upsert_node(make_node("n1").capacity(cpu="8", memory="16Gi", pods=110).obj())
    if annotation_bytes:
        other = make_pod("others").node("n1").obj()
        other.annotations["other.example.com/blob"] = "x" * annotation_bytes
        log.upsert_pod(other)
    log.commit()
    return log


def request(log: ClusterStateLog, name: str, gated: bool = False) -> pb.ScheduleRequest:
    pod = make_pod(name).scheduler(PROFILE).obj()
    if gated:
        pod.labels["gate"] = "yes"
    return pb.ScheduleRequest(profile=PROFILE, pod=pod, state=log.full_state())


async def held_in_flight(stub: pb_grpc.SchedulingServiceStub) -> asyncio.Task[pb.ScheduleResponse]:
    """A call the Gate holds on the server until the gate opens."""
    task: asyncio.Task[pb.ScheduleResponse] = asyncio.ensure_future(
        stub.Schedule(request(cluster(), "held", gated=True), timeout=30)
    )
    for _ in range(3000):
        if Gate.entered.is_set():
            return task
        await asyncio.sleep(0.001)
    raise AssertionError("the gated call never reached the server's Gate")


async def test_a_call_beyond_max_inflight_calls_is_refused_overloaded_and_nothing_of_it_done(
    one_call: RunningServer,
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{one_call.port}") as ch:
        stub = pb_grpc.SchedulingServiceStub(ch)
        held = await held_in_flight(stub)
        other = cluster()
        err, info = await refused(stub.Schedule(request(other, "second"), timeout=10))
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert_info(info, one_call, "OVERLOADED", {"limit": "calls", "max": "1"})
        assert "--max-inflight-calls 1" in (err.details() or "")
        assert "retry it after a backoff" in (err.details() or "")
        # Refused before anything was done: its full state was not taken.
        assert one_call.service.store.entry(other.cluster_id) is None
        Gate.opened.set()
        assert (await held).node == "n1"
        # Room again: the same call goes through.
        assert (await stub.Schedule(request(other, "second"), timeout=10)).node == "n1"


async def test_requests_beyond_max_inflight_bytes_are_refused_and_small_ones_still_served() -> None:
    running = await serve(Limits(max_inflight_calls=8, max_inflight_bytes=64 * 1024))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            stub = pb_grpc.SchedulingServiceStub(ch)
            held = await held_in_flight(stub)
            big = cluster(annotation_bytes=100 * 1024)
            err, info = await refused(stub.Schedule(request(big, "big"), timeout=10))
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert_info(info, running, "OVERLOADED", {"limit": "bytes", "max": str(64 * 1024)})
            assert "--max-inflight-bytes" in (err.details() or "")
            assert running.service.store.entry(big.cluster_id) is None
            Gate.opened.set()
            assert (await held).node == "n1"
            # Alone in flight, a request over the byte cap is served (else never).
            assert (await stub.Schedule(request(big, "big"), timeout=10)).node == "n1"
    finally:
        Gate.opened.set()
        await running.stop(0)


async def test_the_client_backs_off_on_overloaded_and_the_pod_is_served_once_there_is_room(
    one_call: RunningServer,
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{one_call.port}") as ch:
        held = await held_in_flight(pb_grpc.SchedulingServiceStub(ch))
        client = SchedulingClient(ch, cluster())
        call = asyncio.ensure_future(client.schedule(PROFILE, make_pod("patient").obj()))
        for _ in range(3000):
            if client.overloads >= 2:
                break
            await asyncio.sleep(0.001)
        assert client.overloads >= 2, "the client never met the full replica"
        assert not call.done()
        Gate.opened.set()
        resp = await asyncio.wait_for(call, 30)
        assert resp.node == "n1"
        assert (await held).node == "n1"
        assert one_call.service.admission.refused == client.overloads
