"""The server stays responsive (issue 8): the largest batch it accepts runs in
slices, so health checks and other callers' clusters are answered meanwhile;
the batch holds its own cluster, honours its deadline between pods and always
leaves the snapshot as it found it. Client and server share one event loop
here, which is harder than a separate `berth serve` process."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.client import ClusterStateLog
from berth.dev.bench import make_node as bench_node
from berth.dev.bench import make_pod as bench_pod
from berth.framework.config import default_config
from berth.plugins.registry import REGISTRY
from berth.server import prologue
from berth.server.app import RunningServer, start_server
from berth.server.service import DEFAULT_MAX_BATCH_PODS
from berth.server.state import STEPWISE_ENTRIES
from tests.contract.test_server_errors import assert_info, refused

PROFILE = "default-scheduler"
NODES = 5000
# The promise of issue 8: a health check answers within this while a batch runs.
HEALTH_BUDGET_SECONDS = 0.100


@pytest.fixture
async def big() -> AsyncIterator[tuple[RunningServer, grpc.aio.Channel]]:
    """A server with the default profile and default limits (--max-batch-pods)."""
    running = await start_server(default_config(REGISTRY), REGISTRY, "127.0.0.1:0", trace=False)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            yield running, ch
    finally:
        await running.stop(0)


T = TypeVar("T")


def spawn(call: Awaitable[T]) -> asyncio.Task[T]:
    """A gRPC call running in the background."""

    async def wait() -> T:
        return await call

    return asyncio.create_task(wait())


def big_cluster(nodes: int = NODES, pods: int = 0) -> ClusterStateLog:
    log = ClusterStateLog()
    for i in range(nodes):
        log.upsert_node(bench_node(i))
    for i in range(pods):
        bound = bench_pod(1_000_000 + i)
        bound.node_name = f"node-{i % nodes:05d}"
        log.upsert_pod(bound)
    log.commit()
    return log


def at(log: ClusterStateLog) -> cpb.ClusterState:
    return cpb.ClusterState(
        cluster_id=log.cluster_id,
        generation=log.generation,
        base_generation=log.generation,
        incarnation=log.incarnation,
    )


def queue(n: int = DEFAULT_MAX_BATCH_PODS) -> list[cpb.Pod]:
    return [bench_pod(i) for i in range(n)]


def fingerprint(server: RunningServer, log: ClusterStateLog) -> tuple[int, set[str], int]:
    """Generation, pod uids and total requested CPU of the replica's snapshot."""
    entry = server.service.store.entry(log.cluster_id)
    assert entry is not None
    snap = entry.snapshot
    cpu = sum(ni.requested.milli_cpu for ni in snap.nodes.values())
    return entry.generation, set(snap.pods), cpu


async def probe_health_while(channel: grpc.aio.Channel, work: asyncio.Task[T]) -> list[float]:
    """Health check latencies, one probe after another, while ``work`` runs."""
    stub = health_pb2_grpc.HealthStub(channel)
    req = health_pb2.HealthCheckRequest(service="berth.v1.SchedulingService")
    latencies = []
    while not work.done():
        t0 = time.perf_counter()
        resp = await stub.Check(req, timeout=5)
        latencies.append(time.perf_counter() - t0)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
        await asyncio.sleep(0.002)
    return latencies


async def wait_until_busy(server: RunningServer, cluster_id: str) -> None:
    for _ in range(2000):
        if server.service.locks.busy_cluster(cluster_id):
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"cluster {cluster_id} never became busy")


async def test_health_answers_within_100ms_while_the_largest_batch_runs(
    big: tuple[RunningServer, grpc.aio.Channel],
) -> None:
    """The largest batch the server accepts (--max-batch-pods, default) at 5000 nodes
    takes several times the budget; health checks sent one after another while it runs
    must each be answered within 100 ms. This machine is shared (other processes can
    take the CPU from this one for longer than the budget), so the batch runs up to
    three times and one run with every probe in budget passes; a server that blocks
    during a batch misses the budget in every run."""
    server, channel = big
    stub = pb_grpc.SchedulingServiceStub(channel)
    log = big_cluster()
    await stub.Sync(pb.SyncRequest(state=log.full_state()))
    pods = queue(server.service.max_batch_pods)
    assert len(pods) == DEFAULT_MAX_BATCH_PODS
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        batch = spawn(
            stub.ScheduleBatch(pb.ScheduleBatchRequest(profile=PROFILE, state=at(log), pods=pods))
        )
        await wait_until_busy(server, log.cluster_id)
        latencies = await probe_health_while(channel, batch)
        out = await batch
        took = time.perf_counter() - t0
        assert len(out.results) == len(pods) and all(r.node for r in out.results)
        # The batch ran long enough to be probed several times.
        assert len(latencies) >= 3, f"batch too quick to probe ({took * 1000:.0f} ms)"
        runs.append((took, latencies))
        print(
            f"batch of {len(pods)} pods at {NODES} nodes: {took * 1000:.0f} ms; "
            f"{len(latencies)} health checks, slowest {max(latencies) * 1000:.1f} ms"
        )
        if max(latencies) < HEALTH_BUDGET_SECONDS:
            return
    raise AssertionError(
        "a health check took longer than 100 ms in every run: "
        + "; ".join(
            f"batch {took * 1000:.0f} ms, probes {[round(x * 1000) for x in lat]} ms"
            for took, lat in runs
        )
    )


async def test_a_large_full_state_is_built_in_slices(
    big: tuple[RunningServer, grpc.aio.Channel],
) -> None:
    server, channel = big
    stub = pb_grpc.SchedulingServiceStub(channel)
    log = big_cluster(pods=20_000)
    full = log.full_state()
    assert len(full.delta.upsert_nodes) + len(full.delta.upsert_pods) > STEPWISE_ENTRIES
    sync = spawn(stub.Sync(pb.SyncRequest(state=full)))
    await wait_until_busy(server, log.cluster_id)
    latencies = await probe_health_while(channel, sync)
    resp = await sync
    assert (resp.generation, resp.node_count, resp.pod_count) == (1, NODES, 20_000)
    # Built at once, the state would block the loop for its whole build (~1 s here)
    # and leave no room for several probes. The median, not the slowest: a snapshot
    # growing by ~10^5 objects triggers CPython's full garbage collections, which
    # stop the loop for their length (tens to hundreds of ms) whatever the slicing.
    shown = [round(x * 1000, 1) for x in latencies]
    assert len(latencies) >= 3, shown
    assert statistics.median(latencies) < HEALTH_BUDGET_SECONDS, shown
    # Built in slices or at once, the snapshot is the same.
    _, uids, cpu = fingerprint(server, log)
    assert uids == {p.uid for p in full.delta.upsert_pods}
    assert cpu == 20_000 * 100


async def test_a_batch_holds_its_cluster_and_lets_other_clusters_through(
    big: tuple[RunningServer, grpc.aio.Channel],
) -> None:
    server, channel = big
    stub = pb_grpc.SchedulingServiceStub(channel)
    held = big_cluster()
    other = big_cluster(nodes=50)
    await stub.Sync(pb.SyncRequest(state=held.full_state()))
    before = fingerprint(server, held)
    batch = spawn(
        stub.ScheduleBatch(pb.ScheduleBatchRequest(profile=PROFILE, state=at(held), pods=queue()))
    )
    await wait_until_busy(server, held.cluster_id)
    # Another cluster is served while the batch runs.
    resp = await stub.Schedule(
        pb.ScheduleRequest(profile=PROFILE, state=other.full_state(), pod=bench_pod(-1))
    )
    assert resp.node and not batch.done()
    # A call on the held cluster waits for the batch, then sees the snapshot as
    # the batch found it (no assumed pods).
    same = await stub.Sync(pb.SyncRequest(state=at(held)))
    assert batch.done()
    assert same.pod_count == 0
    assert len((await batch).results) == DEFAULT_MAX_BATCH_PODS
    assert fingerprint(server, held) == before


async def test_an_expired_deadline_stops_the_batch_and_leaves_the_snapshot_as_it_was(
    big: tuple[RunningServer, grpc.aio.Channel], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, channel = big
    stub = pb_grpc.SchedulingServiceStub(channel)
    log = big_cluster()
    log.upsert_pod(bench_pod(-2))  # a pending pod the batch re-places
    pods = queue()
    existing = pods[0]
    existing.node_name = "node-00007"
    log.upsert_pod(existing)
    log.commit()
    await stub.Sync(pb.SyncRequest(state=log.full_state()))
    before = fingerprint(server, log)
    # The batch's server side reads a 50 ms deadline while the client's own is 5 s. With
    # both at 50 ms the client's timer and the server's answer race, and a client that
    # gives up first sees no ErrorInfo; this way the answer checked is always the server's.
    t0 = time.perf_counter()
    with monkeypatch.context() as patch:
        patch.setattr(prologue, "deadline_of", lambda _context: time.perf_counter() + 0.05)
        err, info = await refused(
            stub.ScheduleBatch(
                pb.ScheduleBatchRequest(profile=PROFILE, state=at(log), pods=pods), timeout=5.0
            )
        )
    assert time.perf_counter() - t0 < 1.0
    assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert_info(info, server, "DEADLINE", {})
    assert "the replica's snapshot is as the batch found it" in (err.details() or "")
    assert fingerprint(server, log) == before
    # The next request at the old generation is served without any resend.
    resp = await stub.Schedule(pb.ScheduleRequest(profile=PROFILE, state=at(log), pod=pods[1]))
    assert resp.node and resp.generation == log.generation


async def test_a_cancelled_batch_leaves_the_snapshot_as_it_was(
    big: tuple[RunningServer, grpc.aio.Channel],
) -> None:
    server, channel = big
    stub = pb_grpc.SchedulingServiceStub(channel)
    log = big_cluster()
    await stub.Sync(pb.SyncRequest(state=log.full_state()))
    before = fingerprint(server, log)
    call = stub.ScheduleBatch(pb.ScheduleBatchRequest(profile=PROFILE, state=at(log), pods=queue()))
    await wait_until_busy(server, log.cluster_id)
    await asyncio.sleep(0.02)  # some pods placed
    call.cancel()
    for _ in range(1000):
        if not server.service.locks.busy_cluster(log.cluster_id):
            break
        await asyncio.sleep(0.002)
    assert not server.service.locks.busy_cluster(log.cluster_id)
    assert fingerprint(server, log) == before
