"""The client contract (protos/README.md, "Client contract";
protos/service_config.json): what every caller in any language loads, and
the Python client following it against real servers."""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from berth.api.v1 import scheduling_pb2 as pb
from berth.client import (
    RPC_NAMES,
    ClusterStateLog,
    ErrorDetail,
    SchedulingClient,
    load_service_config,
)
from berth.framework.testing import make_node, make_pod
from berth.server.app import RunningServer, start_server
from tests.contract.fakes import CONFIG, REGISTRY

# The file every client in every language loads (protos/README.md, Client contract).
SERVICE_CONFIG_PATH = Path(__file__).resolve().parents[2] / "protos" / "service_config.json"

SERVICE = "berth.v1.SchedulingService"


def method_config(config: dict[str, Any], rpc: str) -> dict[str, Any]:
    """The methodConfig gRPC applies to ``rpc``: one naming the method wins
    over one naming the whole service."""
    by_service = None
    for mc in config["methodConfig"]:
        for name in mc["name"]:
            if name.get("service") != SERVICE:
                continue
            if name.get("method") == rpc:
                return dict(mc)
            if "method" not in name:
                by_service = mc
    assert by_service is not None, rpc
    return dict(by_service)


def test_the_client_loads_the_shipped_file() -> None:
    """berth.api carries protos/service_config.json (hack/gen-protos.sh copies
    it; --check keeps them equal): the client loads exactly that."""
    assert load_service_config() == json.loads(SERVICE_CONFIG_PATH.read_text())


def test_every_rpc_has_a_deadline_and_only_unavailable_is_retried() -> None:
    config = json.loads(SERVICE_CONFIG_PATH.read_text())
    # The client knows every RPC the service declares, and each has its method config.
    service = pb.DESCRIPTOR.services_by_name["SchedulingService"]
    assert sorted(RPC_NAMES) == sorted(m.name for m in service.methods)
    for rpc in RPC_NAMES:
        mc = method_config(config, rpc)
        assert mc["waitForReady"] is False, rpc  # fail fast: another replica may answer
        if rpc == "ScheduleStream":
            # Long-lived; a deadline per message is the caller's. gRPC cannot
            # retry a stream once it has answered: the caller reopens it.
            assert "timeout" not in mc and "retryPolicy" not in mc
            continue
        assert mc["timeout"].endswith("s") and float(mc["timeout"][:-1]) > 0, rpc
        policy = mc["retryPolicy"]
        # FAILED_PRECONDITION (STALE_SNAPSHOT) and ABORTED (SNAPSHOT_PASSED) are
        # answered by resending other state, never by sending the same again.
        assert policy["retryableStatusCodes"] == ["UNAVAILABLE"], rpc
        assert 2 <= policy["maxAttempts"] <= 5
    assert config["loadBalancingConfig"] == [{"round_robin": {}}]


def test_message_limits_are_the_servers_default() -> None:
    from berth.server import cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["serve"])
    config = json.loads(SERVICE_CONFIG_PATH.read_text())
    for rpc in RPC_NAMES:
        mc = method_config(config, rpc)
        assert mc["maxRequestMessageBytes"] == args.max_message_bytes, rpc
        assert mc["maxResponseMessageBytes"] == args.max_message_bytes, rpc
    # A server run with another limit: the client follows.
    other = load_service_config(max_message_bytes=1024)
    assert {mc.get("maxRequestMessageBytes", 1024) for mc in other["methodConfig"]} == {1024}


async def fake_server(
    sync: Callable[[pb.SyncRequest, Any], Awaitable[pb.SyncResponse]],
) -> tuple[grpc.aio.Server, int]:
    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Sync": grpc.unary_unary_rpc_method_handler(
                sync,
                request_deserializer=pb.SyncRequest.FromString,
                response_serializer=pb.SyncResponse.SerializeToString,
            )
        },
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def test_grpc_retries_unavailable_by_the_service_config_and_nothing_else() -> None:
    calls: list[str] = []

    async def sync(request: pb.SyncRequest, context: Any) -> pb.SyncResponse:
        calls.append(request.state.cluster_id)
        if len(calls) == 1:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "warming up")
        if request.state.cluster_id == "refuse":
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no retry for this")
        return pb.SyncResponse(generation=request.state.generation)

    server, port = await fake_server(sync)
    try:
        client = SchedulingClient.connect(f"127.0.0.1:{port}", ClusterStateLog("ok"))
        resp = await client.sync()
        assert resp.generation == 1
        assert calls == ["ok", "ok"]  # the UNAVAILABLE answer was retried by gRPC
        refused = SchedulingClient.connect(f"127.0.0.1:{port}", ClusterStateLog("refuse"))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await refused.sync()
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert calls == ["ok", "ok", "refuse"]  # once: not a retryable code
        await client.close()
        await refused.close()
    finally:
        await server.stop(0)


def contract_cluster() -> ClusterStateLog:
    log = ClusterStateLog()
    log.upsert_node(make_node("c").capacity(cpu="4").obj())
    log.commit()
    return log


@pytest.fixture
async def replicas() -> AsyncIterator[list[RunningServer]]:
    servers = [await start_server(CONFIG, REGISTRY, "127.0.0.1:0", trace=False) for _ in range(3)]
    try:
        yield servers
    finally:
        for s in servers:
            await s.stop(0)


async def test_real_server_errors_carry_error_info_and_the_replica(
    replicas: list[RunningServer],
) -> None:
    server = replicas[0]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        stub = pb_grpc_stub(ch)
        log = contract_cluster()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Schedule(
                pb.ScheduleRequest(profile="contract", state=log.state_since(1), pod=pod())
            )
        stale = ErrorDetail.from_rpc_error(err.value)
        assert (stale.code, stale.reason, stale.replica_generation) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "STALE_SNAPSHOT",
            -1,
        )
        assert stale.replica, "the answer names the replica"
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Schedule(
                pb.ScheduleRequest(profile="nope", state=log.full_state(), pod=pod())
            )
        unknown = ErrorDetail.from_rpc_error(err.value)
        assert unknown.reason == "UNKNOWN_PROFILE"
        assert unknown.metadata["profiles"] == "contract"
        assert unknown.replica == stale.replica
        call = stub.Schedule(
            pb.ScheduleRequest(profile="contract", state=log.full_state(), pod=pod())
        )
        assert (await call).node == "c"
        trailers = dict(await call.trailing_metadata())
        assert trailers["berth-replica"] == stale.replica


def pb_grpc_stub(ch: grpc.aio.Channel) -> Any:
    from berth.api.v1 import scheduling_pb2_grpc

    return scheduling_pb2_grpc.SchedulingServiceStub(ch)


def pod() -> Any:
    return make_pod("p").obj()


@pytest.mark.parametrize("streamed", [False, True], ids=["unary", "stream"])
async def test_endpoint_aware_client_over_three_servers_survives_one_stopping(
    replicas: list[RunningServer], streamed: bool
) -> None:
    log = contract_cluster()
    target = ",".join(f"127.0.0.1:{s.port}" for s in replicas)
    client = SchedulingClient.connect(target, log, timeout=10)
    call = client.schedule_streamed if streamed else client.schedule
    for i in range(9):
        log.upsert_pod(make_pod(f"q{i}").uid(f"q{i}").req(cpu="100m").node("c").obj())
        log.commit()
        resp = await call("contract", pod())
        assert (resp.node, resp.generation) == ("c", log.generation)
    assert [s.calls for s in client.stats()] == [3, 3, 3]
    assert client.full_sends == 3
    assert sorted(client.full_sends_by_replica.values()) == [1, 1, 1]
    await replicas[1].stop(0)
    for i in range(9):
        log.upsert_pod(make_pod(f"r{i}").uid(f"r{i}").req(cpu="100m").node("c").obj())
        log.commit()
        resp = await call("contract", pod())
        assert (resp.node, resp.generation) == ("c", log.generation)
    assert client.failovers == 1
    assert client.full_sends == 3
    # Round robin over the two left: one has the last generation, the other the one before.
    held = sorted(s.service.store.generation(log.cluster_id) for s in (replicas[0], replicas[2]))
    assert held == [log.generation - 1, log.generation]
    await client.close()


async def test_dns_target_resolves_to_the_replicas_addresses(
    replicas: list[RunningServer],
) -> None:
    """``dns:///localhost:PORT`` through the system resolver: every address localhost
    has (127.0.0.1, and ::1 where configured) becomes an endpoint; one the server does
    not listen on is skipped, and the cycle is answered."""
    server = replicas[0]
    log = contract_cluster()
    client = SchedulingClient.connect(f"dns:///localhost:{server.port}", log, timeout=10)
    resp = await client.schedule("contract", pod())
    assert resp.node == "c"
    addresses = [s.address for s in client.stats()]
    assert f"127.0.0.1:{server.port}" in addresses
    assert client.full_sends == 1
    await client.close()


def test_shim_refuses_a_bad_plugin_server_target_naming_the_entry() -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "berth", "shim", "--plugin-server", "10.0.0.1:50051,plugins"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "--plugin-server: plugin server target" in out.stderr
    assert "'plugins' is not host:port" in out.stderr
