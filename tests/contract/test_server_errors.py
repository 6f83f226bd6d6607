"""The error model (protos/README.md, "Errors"): every refusal carries a
google.rpc.Status with an ErrorInfo (domain berth.dev, reason, metadata with
the replica's id) beside its message, unary and in-stream; every response
names the replica that answered (trailer berth-replica)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.client import ClusterStateLog
from berth.framework.testing import make_node, make_pod
from berth.server.app import RunningServer, start_server
from berth.server.errors import DOMAIN, REPLICA_TRAILER, decode_error_info
from tests.contract.fakes import CONFIG, REGISTRY

PROFILE = "contract"


def cluster(cluster_id: str | None = None) -> ClusterStateLog:
    log = ClusterStateLog(cluster_id)
    for name, zone in (("a", "z1"), ("b", "z1"), ("c", "z2")):
        log.upsert_node(make_node(name).capacity(cpu="4").labels(zone=zone, score="1").obj())
    log.commit()
    return log


def trailer(metadata: Any, key: str) -> str | bytes | None:
    for k, v in metadata or ():
        if k == key:
            return v  # type: ignore[no-any-return]
    return None


async def refused(
    call: Awaitable[Any],
) -> tuple[grpc.aio.AioRpcError, error_details_pb2.ErrorInfo]:
    """The refusal of a unary call and its decoded ErrorInfo (which must be there)."""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    info = decode_error_info(tuple(err.value.trailing_metadata() or ()))
    assert info is not None, f"no ErrorInfo in {err.value.trailing_metadata()}"
    return err.value, info


def assert_info(
    info: error_details_pb2.ErrorInfo,
    server: RunningServer,
    reason: str,
    metadata: Mapping[str, str],
) -> None:
    assert info.domain == DOMAIN
    assert info.reason == reason
    assert info.metadata["replica"] == server.service.replica.id
    for key, value in metadata.items():
        assert info.metadata[key] == value, (key, dict(info.metadata))


@pytest.fixture
async def small_batch_server() -> AsyncIterator[RunningServer]:
    running = await start_server(CONFIG, REGISTRY, "127.0.0.1:0", trace=False, max_batch_pods=2)
    try:
        yield running
    finally:
        await running.stop(0)


def full(log: ClusterStateLog) -> cpb.ClusterState:
    return log.full_state()


Case = Callable[[pb_grpc.SchedulingServiceStub, RunningServer], Awaitable[Any]]


async def _stale(stub: pb_grpc.SchedulingServiceStub, _: RunningServer) -> Any:
    log = cluster()
    return await stub.Schedule(
        pb.ScheduleRequest(profile=PROFILE, state=log.state_since(1), pod=make_pod().obj())
    )


async def _passed(stub: pb_grpc.SchedulingServiceStub, _: RunningServer) -> Any:
    log = cluster()
    await stub.Sync(pb.SyncRequest(state=log.full_state()))
    log.upsert_pod(make_pod("p").req(cpu="1").node("a").obj())
    log.commit()
    await stub.Sync(pb.SyncRequest(state=log.state_since(1)))  # the replica is at 2
    pinned = cpb.ClusterState(
        cluster_id=log.cluster_id,
        generation=1,
        base_generation=1,
        incarnation=log.incarnation,
        pinned=True,
    )
    return await stub.Filter(
        pb.NodesRequest(profile=PROFILE, state=pinned, pod=make_pod().obj(), all_nodes=True)
    )


async def _invalid(stub: pb_grpc.SchedulingServiceStub, _: RunningServer) -> Any:
    return await stub.Schedule(
        pb.ScheduleRequest(profile=PROFILE, state=full(cluster()), pod=cpb.Pod(name="p"))
    )


async def _unknown_profile(stub: pb_grpc.SchedulingServiceStub, _: RunningServer) -> Any:
    return await stub.Schedule(
        pb.ScheduleRequest(profile="nope", state=full(cluster()), pod=make_pod().obj())
    )


async def _unknown_node(stub: pb_grpc.SchedulingServiceStub, _: RunningServer) -> Any:
    return await stub.Reserve(
        pb.NodeRequest(profile=PROFILE, state=full(cluster()), pod=make_pod().obj(), node="ghost")
    )


async def _internal(stub: pb_grpc.SchedulingServiceStub, server: RunningServer) -> Any:
    """A bug in the server (here: the framework raising a plain exception)."""

    def boom(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("a bug")

    fw = server.service.frameworks[PROFILE]
    fw.run_pre_filter_with_plugins = boom  # type: ignore[method-assign,assignment]
    try:
        return await stub.Schedule(
            pb.ScheduleRequest(profile=PROFILE, state=full(cluster()), pod=make_pod().obj())
        )
    finally:
        del fw.run_pre_filter_with_plugins


CASES: list[tuple[str, Case, grpc.StatusCode, str, dict[str, str], str]] = [
    (
        "stale",
        _stale,
        grpc.StatusCode.FAILED_PRECONDITION,
        "STALE_SNAPSHOT",
        {"replica_generation": "-1"},
        "has no snapshot of this cluster_id",
    ),
    (
        "passed",
        _passed,
        grpc.StatusCode.ABORTED,
        "SNAPSHOT_PASSED",
        {"replica_generation": "2"},
        "past the pinned generation 1",
    ),
    (
        "invalid",
        _invalid,
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_REQUEST",
        {"field": "pod.uid"},
        "pod.uid: must not be empty",
    ),
    (
        "unknown-profile",
        _unknown_profile,
        grpc.StatusCode.NOT_FOUND,
        "UNKNOWN_PROFILE",
        {"profile": "nope", "profiles": "contract"},
        "profile 'nope' is not configured",
    ),
    (
        "unknown-node",
        _unknown_node,
        grpc.StatusCode.NOT_FOUND,
        "UNKNOWN_NODE",
        {"node": "ghost", "field": "node"},
        "node: 'ghost' is not in the snapshot",
    ),
    (
        "internal",
        _internal,
        grpc.StatusCode.INTERNAL,
        "INTERNAL",
        {},
        "internal error in the plugin server",
    ),
]


@pytest.mark.parametrize(
    ("make_call", "code", "reason", "metadata", "message"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
async def test_each_refusal_carries_error_info(
    server: RunningServer,
    channel: grpc.aio.Channel,
    make_call: Case,
    code: grpc.StatusCode,
    reason: str,
    metadata: dict[str, str],
    message: str,
) -> None:
    stub = pb_grpc.SchedulingServiceStub(channel)
    err, info = await refused(make_call(stub, server))
    assert err.code() == code
    assert message in (err.details() or "")
    assert_info(info, server, reason, metadata)
    assert trailer(err.trailing_metadata(), REPLICA_TRAILER) == server.service.replica.id
    # The google.rpc.Status says the same as the gRPC status itself.
    if reason in ("STALE_SNAPSHOT", "SNAPSHOT_PASSED"):
        # Kept for callers that predate ErrorInfo.
        assert (
            trailer(err.trailing_metadata(), "berth-replica-generation")
            == (metadata["replica_generation"])
        )
    # The server keeps serving.
    log = cluster()
    ok = await stub.Schedule(
        pb.ScheduleRequest(profile=PROFILE, state=log.full_state(), pod=make_pod().obj())
    )
    assert ok.node


async def test_malformed_bytes_carry_error_info(server: RunningServer) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        raw = ch.unary_unary("/berth.v1.SchedulingService/Filter")
        err, info = await refused(raw(b"\xff\xff\xff"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert_info(info, server, "INVALID_REQUEST", {"field": "request"})
    assert "not a valid berth.v1.NodesRequest message" in (err.details() or "")


async def test_batch_too_large_carries_the_limit(small_batch_server: RunningServer) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{small_batch_server.port}") as ch:
        stub = pb_grpc.SchedulingServiceStub(ch)
        pods = [make_pod(f"p{i}").obj() for i in range(3)]
        err, info = await refused(
            stub.ScheduleBatch(
                pb.ScheduleBatchRequest(profile=PROFILE, state=full(cluster()), pods=pods)
            )
        )
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert_info(info, small_batch_server, "BATCH_TOO_LARGE", {"max_batch_pods": "2"})
        # Two pods are within the limit.
        ok = await stub.ScheduleBatch(
            pb.ScheduleBatchRequest(profile=PROFILE, state=full(cluster()), pods=pods[:2])
        )
        assert len(ok.results) == 2


async def test_every_unary_response_names_the_replica(server: RunningServer) -> None:
    other = await start_server(CONFIG, REGISTRY, "127.0.0.1:0", trace=False)
    try:
        ids = []
        for running in (server, other):
            async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
                stub = pb_grpc.SchedulingServiceStub(ch)
                call = stub.Schedule(
                    pb.ScheduleRequest(profile=PROFILE, state=full(cluster()), pod=make_pod().obj())
                )
                assert (await call).node
                got = trailer(await call.trailing_metadata(), REPLICA_TRAILER)
                assert got == running.service.replica.id
                described = stub.DescribeProfiles(pb.DescribeProfilesRequest())
                await described
                assert trailer(await described.trailing_metadata(), REPLICA_TRAILER) == got
                ids.append(got)
        assert ids[0] != ids[1]  # a random id per server
    finally:
        await other.stop(0)


async def test_stream_refusals_are_the_error_arm_with_the_same_error_info(
    server: RunningServer, channel: grpc.aio.Channel
) -> None:
    """A refused stream message is answered with ScheduleStreamResponse.error (never a
    success-looking response) carrying the reason, domain and metadata the unary
    call would carry; the stream names its replica up front and at its end."""
    stub = pb_grpc.SchedulingServiceStub(channel)
    call = stub.ScheduleStream()
    assert trailer(await call.initial_metadata(), REPLICA_TRAILER) == server.service.replica.id
    log = cluster()
    requests = [
        pb.ScheduleRequest(profile="nope", state=log.full_state(), pod=make_pod().obj()),
        pb.ScheduleRequest(profile=PROFILE, state=cluster().state_since(1), pod=make_pod().obj()),
        pb.ScheduleRequest(profile=PROFILE, state=log.full_state(), pod=cpb.Pod(name="p")),
        pb.ScheduleRequest(profile=PROFILE, state=log.full_state(), pod=make_pod().obj()),
    ]
    answers = []
    for req in requests:
        await call.write(req)
        answers.append(await call.read())
    await call.done_writing()
    assert [a.WhichOneof("result") for a in answers] == ["error", "error", "error", "response"]
    profile, stale, invalid = (a.error for a in answers[:3])
    for err in (profile, stale, invalid):
        assert err.domain == DOMAIN
        assert err.metadata["replica"] == server.service.replica.id
    assert (profile.grpc_code, profile.reason) == (
        grpc.StatusCode.NOT_FOUND.value[0],
        "UNKNOWN_PROFILE",
    )
    assert profile.metadata["profile"] == "nope"
    assert (stale.grpc_code, stale.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION.value[0],
        "STALE_SNAPSHOT",
    )
    assert stale.replica_generation == -1 and stale.metadata["replica_generation"] == "-1"
    assert (invalid.reason, invalid.metadata["field"]) == ("INVALID_REQUEST", "pod.uid")
    assert answers[3].response.node and answers[3].response.generation == log.generation
    assert trailer(await call.trailing_metadata(), REPLICA_TRAILER) == server.service.replica.id
    assert await call.code() == grpc.StatusCode.OK
