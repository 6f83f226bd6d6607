"""A cluster whose full state is far over the 64 MiB message limit resyncs
(issue 22, "Large clusters cannot resync"): berth's client sends it over
UploadState in parts, the replica builds it aside and swaps it in, and the
cycle goes on with a delta. After the server restarts, the same happens
again. A real `berth serve` process; 200 MiB of state, most of it the
annotations other schedulers' pods carry."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import grpc

from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog, SchedulingClient
from berth.framework.testing import make_node, make_pod
from tests.contract.serve import berth_serve, free_loopback_port

PROFILE = "default-scheduler"
NODES = 2000
PODS = 1600
# Each other scheduler's pod carries this much annotation: 1600 x 128 KiB = 200 MiB.
ANNOTATION_BYTES = 128 * 1024
MESSAGE_LIMIT = 64 * 2**20


def large_cluster() -> ClusterStateLog:
    log = ClusterStateLog()
    for i in range(NODES):
        log.upsert_node(
            make_node(f"node-{i:05d}").capacity(cpu="32", memory="128Gi", pods=110).obj()
        )
    blob = "x" * ANNOTATION_BYTES
    for i in range(PODS):
        pod = make_pod(f"other-{i:05d}").node(f"node-{i % NODES:05d}").req(cpu="100m").obj()
        pod.scheduler_name = "other-scheduler"
        pod.annotations["other.example.com/state"] = blob
        log.upsert_pod(pod)
    log.commit()
    return log


async def schedule(client: SchedulingClient, name: str) -> pb.ScheduleResponse:
    """A cycle, retried while the restarted server's port is not answering yet
    (the shim backs the pod off and retries the same way)."""
    for _ in range(40):
        try:
            return await client.schedule(PROFILE, make_pod(name).req(cpu="1").obj())
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            await asyncio.sleep(0.25)
    raise AssertionError("the server never answered")


def full_states_logged(log: Path) -> list[float]:
    """The sizes (MiB) of the full states the server says it took."""
    return [
        float(m)
        for m in re.findall(r"full state at generation .*?, ([\d.]+) MiB\)", log.read_text())
    ]


async def test_a_200_mib_cluster_resyncs_in_parts_and_again_after_a_server_restart(
    tmp_path: Path,
) -> None:
    log = large_cluster()
    full = log.full_state().ByteSize()
    assert full > 3 * MESSAGE_LIMIT, f"the cluster is only {full / 2**20:.0f} MiB"
    port = free_loopback_port()
    client = SchedulingClient.connect(f"127.0.0.1:{port}", log, timeout=120)
    try:
        with berth_serve(tmp_path / "first", port=port) as server:
            first = await schedule(client, "first")
            assert first.status.code == 0 and first.node, first
            assert client.uploads == 1
            sizes = full_states_logged(server.log)
            assert len(sizes) == 1 and sizes[0] > 190, sizes
        # A new process on the same address holds nothing: the client finds
        # out (STALE_SNAPSHOT) and uploads the state again.
        with berth_serve(tmp_path / "second", port=port) as server:
            second = await schedule(client, "second")
            assert second.status.code == 0 and second.node, second
            assert client.uploads == 2
            assert client.resyncs >= 1
            assert len(full_states_logged(server.log)) == 1
            # From here on, deltas: no third upload.
            log.upsert_pod(make_pod("placed").node(second.node).req(cpu="1").obj())
            log.commit()
            third = await schedule(client, "third")
            assert third.node and client.uploads == 2
    finally:
        await client.close()
