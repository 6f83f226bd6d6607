"""Callers own their state (issue 22): a replica keeps each cluster state under
(caller, cluster_id), the caller being its mTLS certificate or its
berth-caller-token. A second caller that learns the first's cluster_id and
sends a full state with a huge generation changes nothing the first sees; a
caller rotating cluster ids evicts only its own snapshots; cluster ids never
reach the log. Real gRPC against an in-process server."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.client import TOKEN_METADATA, ClusterStateLog, SchedulingClient
from berth.client.tls import client_tls
from berth.framework.testing import make_node, make_pod
from berth.server.app import Limits, RunningServer, start_server
from berth.server.identity import CallerTokensError, load_tokens
from berth.server.state import DEFAULT_MAX_PER_CALLER
from berth.tls.serving import ServerTLS
from tests.contract.fakes import CONFIG, REGISTRY
from tests.contract.test_server_errors import assert_info, refused
from tests.contract.tlscerts import CA

PROFILE = "contract"
SHARED_ID = "shim-cluster-id"


@pytest.fixture
async def server() -> AsyncIterator[RunningServer]:
    running = await start_server(CONFIG, REGISTRY, "127.0.0.1:0", trace=False)
    try:
        yield running
    finally:
        await running.stop(0)


def shim_cluster(token: str = "shim-token-0123456789") -> ClusterStateLog:
    log = ClusterStateLog(SHARED_ID, token=token)
    log.upsert_node(make_node("shim-node").capacity(cpu="8", memory="16Gi", pods=110).obj())
    log.commit()
    return log


def poison(incarnation: int) -> cpb.ClusterState:
    """What an attacker sends under the shim's cluster_id: a full state far
    ahead of the shim's, holding only its own node."""
    st = cpb.ClusterState(
        cluster_id=SHARED_ID, generation=10**15, full=True, incarnation=incarnation
    )
    st.delta.upsert_nodes.append(make_node("attacker-node").capacity(cpu="64").obj())
    return st


@pytest.mark.parametrize(
    "attacker_metadata",
    [(), ((TOKEN_METADATA, "attacker-token-0123456789"),)],
    ids=["without-token", "with-own-token"],
)
async def test_a_second_caller_with_the_shims_cluster_id_changes_nothing_the_shim_sees(
    server: RunningServer, attacker_metadata: tuple[tuple[str, str], ...]
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        log = shim_cluster()
        shim = SchedulingClient(ch, log)
        assert (await shim.schedule(PROFILE, make_pod("before").obj())).node == "shim-node"
        stub = pb_grpc.SchedulingServiceStub(ch)
        # The attacker's full state is taken, as its own.
        resp = await stub.Sync(
            pb.SyncRequest(state=poison(log.incarnation)), metadata=attacker_metadata, timeout=10
        )
        assert resp.generation == 10**15
        log.upsert_pod(make_pod("bound").node("shim-node").req(cpu="1").obj())
        log.commit()
        after = await shim.schedule(PROFILE, make_pod("after").obj())
        assert after.node == "shim-node"
        assert after.generation == log.generation
        assert shim.resyncs == 0, "the shim's snapshot was lost to the attacker's state"
        assert (await shim.sync()).node_count == 1


async def test_rotating_cluster_ids_evicts_only_the_rotating_callers_own_snapshots(
    server: RunningServer,
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        log = shim_cluster()
        shim = SchedulingClient(ch, log)
        await shim.sync()
        stub = pb_grpc.SchedulingServiceStub(ch)
        rotator = ((TOKEN_METADATA, "rotating-token-0123456789"),)
        # More ids than the whole cache holds (--max-clusters 16).
        for i in range(40):
            st = cpb.ClusterState(cluster_id=f"rotated-{i}", generation=1, full=True)
            st.delta.upsert_nodes.append(make_node("x").obj())
            await stub.Sync(pb.SyncRequest(state=st), metadata=rotator, timeout=10)
        assert server.service.store.entry("rotated-39") is not None
        assert server.service.store.entry("rotated-0") is None
        assert (await shim.schedule(PROFILE, make_pod("p").obj())).node == "shim-node"
        assert shim.resyncs == 0, "another caller's rotation evicted the shim's snapshot"
        held = [
            cid for cid in (f"rotated-{i}" for i in range(40)) if server.service.store.entry(cid)
        ]
        assert len(held) == DEFAULT_MAX_PER_CALLER


async def test_minted_callers_never_evict_the_shims_snapshot_and_are_refused_overloaded(
    server: RunningServer,
) -> None:
    """Without --caller-tokens anyone may present a fresh token: each is a
    caller with one snapshot. Filling the whole cache that way must not push
    out the shim's snapshot (the largest of the singles); the newcomers are
    refused OVERLOADED instead, which a caller retries after a backoff."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        log = shim_cluster()
        for i in range(20):
            log.upsert_pod(make_pod(f"other-{i}").node("shim-node").obj())
        log.commit()
        shim = SchedulingClient(ch, log)
        await shim.sync()
        stub = pb_grpc.SchedulingServiceStub(ch)
        refusals = 0
        # More callers than the whole cache holds (--max-clusters 16).
        for i in range(40):
            st = cpb.ClusterState(cluster_id=f"minted-{i}", generation=1, full=True)
            st.delta.upsert_nodes.append(make_node("x").obj())
            minted = ((TOKEN_METADATA, f"minted-token-{i:04d}-0123456789"),)
            try:
                await stub.Sync(pb.SyncRequest(state=st), metadata=minted, timeout=10)
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                assert "--max-clusters 16" in (exc.details() or ""), exc.details()
                refusals += 1
        assert refusals == 40 - 15
        assert (await shim.schedule(PROFILE, make_pod("p").obj())).node == "shim-node"
        assert shim.resyncs == 0, "a minted caller evicted the shim's snapshot"


async def test_a_full_state_over_the_callers_byte_cap_is_refused_state_too_large() -> None:
    running = await start_server(
        CONFIG, REGISTRY, "127.0.0.1:0", trace=False, limits=Limits(max_caller_state_bytes=4096)
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            log = shim_cluster()
            big = make_pod("others").node("shim-node").obj()
            big.annotations["other.example.com/blob"] = "x" * 8192
            log.upsert_pod(big)
            log.commit()
            stub = pb_grpc.SchedulingServiceStub(ch)
            err, info = await refused(stub.Sync(pb.SyncRequest(state=log.full_state()), timeout=10))
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert_info(info, running, "STATE_TOO_LARGE", {"max_caller_state_bytes": "4096"})
            assert "--max-caller-state-bytes" in (err.details() or "")
            assert running.service.store.entry(SHARED_ID) is None
    finally:
        await running.stop(0)


async def test_with_caller_tokens_only_listed_callers_are_served() -> None:
    token = "shim-token-0123456789"
    running = await start_server(
        CONFIG, REGISTRY, "127.0.0.1:0", trace=False, caller_tokens={"shim": token}
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            stub = pb_grpc.SchedulingServiceStub(ch)
            state = shim_cluster(token).full_state()
            for metadata in ((), ((TOKEN_METADATA, token[:-1] + "X"),)):
                err, info = await refused(
                    stub.Sync(pb.SyncRequest(state=state), metadata=metadata, timeout=10)
                )
                assert err.code() == grpc.StatusCode.UNAUTHENTICATED
                assert_info(info, running, "UNAUTHENTICATED", {})
            assert running.service.store.entry(SHARED_ID) is None
            shim = SchedulingClient(ch, shim_cluster(token))
            assert (await shim.schedule(PROFILE, make_pod("p").obj())).node == "shim-node"
            assert running.service.store.entry(SHARED_ID, "token:shim") is not None
    finally:
        await running.stop(0)


def test_caller_tokens_file_errors_name_the_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "tokens"
    for text, wanted in [
        ("shim\n", "line 1: want 'NAME TOKEN'"),
        ("shim short\n", "must have 16 to"),
        ("a 0123456789abcdef\nb 0123456789abcdef\n", "line 2: the token of 'b' is another"),
        ("# nothing\n", "lists no caller"),
    ]:
        f.write_text(text)
        with pytest.raises(CallerTokensError, match=wanted):
            load_tokens(f)
    f.write_text("# the shim\nshim 0123456789abcdef\n\nplace fedcba9876543210\n")
    assert load_tokens(f) == {"shim": "0123456789abcdef", "place": "fedcba9876543210"}


async def test_mtls_callers_are_told_apart_by_their_certificate(tmp_path: Path) -> None:
    """Two clients with certificates of one CA, the same cluster_id and even
    the same token: each has a snapshot of its own."""
    ca = CA(tmp_path, "berth")
    served = ca.issue("server", server=True)
    shim_leaf = ca.issue("shim", server=False)
    other_leaf = ca.issue("other", server=False)
    running = await start_server(
        CONFIG,
        REGISTRY,
        "127.0.0.1:0",
        trace=False,
        tls=ServerTLS(served.cert, served.key, ca.path),
    )
    try:
        clients = []
        for leaf in (shim_leaf, other_leaf):
            creds = client_tls(ca.path, leaf.cert, leaf.key).credentials
            clients.append(
                SchedulingClient.connect(
                    f"127.0.0.1:{running.port}", shim_cluster(), timeout=10, credentials=creds
                )
            )
        shim, other = clients
        await shim.sync()
        other.state.generation = 10**6
        other.state.upsert_node(make_node("other-node").obj())
        other.state.commit()
        await other.sync()
        store = running.service.store
        assert store.held("x509:CN=shim") == (1, store.entry(SHARED_ID, "x509:CN=shim").size)  # type: ignore[union-attr]
        assert (await shim.schedule(PROFILE, make_pod("p").obj())).node == "shim-node"
        assert shim.resyncs == 0
        for c in clients:
            await c.close()
    finally:
        await running.stop(0)


async def test_cluster_ids_never_reach_the_servers_log(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        log = shim_cluster()
        shim = SchedulingClient(ch, log)
        await shim.sync()
        server.service.store.clear()  # the next call is answered STALE_SNAPSHOT
        log.upsert_node(make_node("n2").obj())
        log.commit()
        await shim.schedule(PROFILE, make_pod("p").obj())
        assert shim.resyncs == 1
        stub = pb_grpc.SchedulingServiceStub(ch)
        for i in range(20):  # evictions
            st = cpb.ClusterState(cluster_id=f"{SHARED_ID}-{i}", generation=1, full=True)
            await stub.Sync(pb.SyncRequest(state=st), timeout=10)
    assert "full state at generation" in caplog.text
    assert "evicted a snapshot" in caplog.text
    assert SHARED_ID not in caplog.text
