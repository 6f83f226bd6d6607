"""UploadState streams are bounded (issue 22, "Every RPC bounded"): the state an
upload builds aside counts against the replica's state caps while it is
built, so parallel or abandoned uploads cannot take the server past its
memory limits; an upload that stops sending parts ends; an upload that finds
the cache full is refused OVERLOADED (which the caller retries), not INTERNAL.
Real gRPC against an in-process server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import grpc

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.client import TOKEN_METADATA, ClusterStateLog
from berth.framework.testing import make_node, make_pod
from berth.server.app import Limits, start_server
from tests.contract.fakes import CONFIG, REGISTRY
from tests.contract.test_server_errors import assert_info, refused

PART_BYTES = 40 * 1024


def part(cluster_id: str, name: str, blob_bytes: int = PART_BYTES) -> cpb.ClusterState:
    """One full-state part of about ``blob_bytes``."""
    st = cpb.ClusterState(cluster_id=cluster_id, generation=1, full=True, incarnation=1)
    pod = make_pod(name).obj()
    pod.annotations["other.example.com/blob"] = "x" * blob_bytes
    st.delta.upsert_pods.append(pod)
    return st


def token(i: int) -> tuple[tuple[str, str], ...]:
    return ((TOKEN_METADATA, f"uploader-token-{i:04d}-0123456789"),)


async def held_open(
    first: cpb.ClusterState, release: asyncio.Event
) -> AsyncIterator[pb.UploadStateRequest]:
    """An upload that sends one part, then waits (the stream stays open)."""
    yield pb.UploadStateRequest(state=first)
    await release.wait()


async def until(check: Callable[[], bool], what: str) -> None:
    for _ in range(3000):
        if check():
            return
        await asyncio.sleep(0.002)
    raise AssertionError(f"never: {what}")


async def test_uploads_under_way_count_against_the_state_caps_and_give_them_back_when_they_end() -> (
    None
):
    # Room for two parts under way in all, one per caller.
    limits = Limits(max_caller_state_bytes=60 * 1024, max_state_bytes=100 * 1024)
    running = await start_server(CONFIG, REGISTRY, "127.0.0.1:0", trace=False, limits=limits)
    store = running.service.store
    releases = [asyncio.Event(), asyncio.Event()]
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            stub = pb_grpc.SchedulingServiceStub(ch)
            open_calls = [
                stub.UploadState(held_open(part(f"c{i}", f"p{i}"), releases[i]), metadata=token(i))
                for i in range(2)
            ]
            await until(lambda: store.uploading_bytes > 80 * 1024, "two uploads under way")
            # A third caller's part would take the uploads under way past
            # --max-state-bytes: refused at once, and the replica keeps nothing of it.
            err, info = await refused(
                stub.UploadState(
                    iter([pb.UploadStateRequest(state=part("c2", "p2"))]),
                    metadata=token(2),
                    timeout=10,
                )
            )
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert_info(info, running, "OVERLOADED", {"limit": "uploads", "max": str(100 * 1024)})
            assert "--max-state-bytes" in (err.details() or "")
            assert store.entry("c2") is None
            # One caller's second upload under way beyond its own cap: refused too.
            err, info = await refused(
                stub.UploadState(
                    iter([pb.UploadStateRequest(state=part("c0-other", "q0", 25 * 1024))]),
                    metadata=token(0),
                    timeout=10,
                )
            )
            assert_info(info, running, "OVERLOADED", {"limit": "uploads", "max": str(60 * 1024)})
            assert "--max-caller-state-bytes" in (err.details() or "")
            # The held uploads finish: stored, they count as snapshots now and
            # no longer as uploads under way; a third caller's upload that fits
            # beside them goes through.
            for release in releases:
                release.set()
            for done in await asyncio.gather(*open_calls):
                assert done.generation == 1 and done.pod_count == 1
            assert store.uploading_bytes == 0
            resp = await stub.UploadState(
                iter([pb.UploadStateRequest(state=part("c2", "p2", 4 * 1024))]),
                metadata=token(2),
                timeout=10,
            )
            assert resp.pod_count == 1
            assert store.uploading_bytes == 0
    finally:
        for release in releases:
            release.set()
        await running.stop(0)


async def test_an_upload_that_stops_sending_parts_ends_and_gives_back_its_bytes() -> None:
    running = await start_server(CONFIG, REGISTRY, "127.0.0.1:0", trace=False)
    running.service.upload_idle_seconds = 0.5
    store = running.service.store
    release = asyncio.Event()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            stub = pb_grpc.SchedulingServiceStub(ch)
            # No deadline of its own: only the idle limit ends it.
            call = stub.UploadState(held_open(part("idle", "p"), release))
            err, _info = await refused(asyncio.wait_for(call, 20))
            assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert "no part for 0.5 s after parts[0]" in (err.details() or "")
            assert store.uploading_bytes == 0
            assert store.entry("idle") is None
    finally:
        release.set()
        await running.stop(0)


async def test_an_upload_that_finds_the_cache_full_of_others_in_use_is_refused_overloaded() -> None:
    running = await start_server(CONFIG, REGISTRY, "127.0.0.1:0", trace=False, max_clusters=1)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            stub = pb_grpc.SchedulingServiceStub(ch)
            shim = ClusterStateLog("shim", token="shim-token-0123456789")
            shim.upsert_node(make_node("n1").capacity(cpu="8", memory="16Gi", pods=110).obj())
            shim.commit()
            await stub.Sync(
                pb.SyncRequest(state=shim.full_state()),
                metadata=((TOKEN_METADATA, shim.token),),
                timeout=10,
            )
            err, info = await refused(
                stub.UploadState(
                    iter([pb.UploadStateRequest(state=part("other", "p", 100))]),
                    metadata=token(1),
                    timeout=10,
                )
            )
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert_info(info, running, "OVERLOADED", {"limit": "snapshots", "max": "1"})
            details = err.details() or ""
            assert "--max-clusters 1" in details and ",," not in details, details
            # The shim's snapshot stays, and the refused upload holds nothing.
            assert running.service.store.entry("shim") is not None
            assert running.service.store.entry("other") is None
            assert running.service.store.uploading_bytes == 0
    finally:
        await running.stop(0)


async def test_a_part_of_another_cluster_id_is_refused_without_quoting_either_id() -> None:
    running = await start_server(CONFIG, REGISTRY, "127.0.0.1:0", trace=False)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            stub = pb_grpc.SchedulingServiceStub(ch)
            parts = [part("first-secret-id", "p", 10), part("second-secret-id", "q", 10)]
            err, info = await refused(
                stub.UploadState(iter([pb.UploadStateRequest(state=p) for p in parts]), timeout=10)
            )
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
            details = err.details() or ""
            assert details.startswith("parts[1].state.cluster_id: must equal the first part's")
            assert "secret-id" not in details and "secret-id" not in str(info)
            assert running.service.store.uploading_bytes == 0
    finally:
        await running.stop(0)
