"""SchedulingService through a real gRPC channel to an in-process server."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.client import ClusterStateLog, RequestRefused, SchedulingClient
from berth.framework.testing import make_node, make_pod
from berth.server.app import RunningServer, start_server
from tests.contract.fakes import CONFIG, REGISTRY


def cluster() -> ClusterStateLog:
    log = ClusterStateLog()
    for name, zone, score in (("a", "z1", "10"), ("b", "z1", "40"), ("c", "z2", "90")):
        log.upsert_node(make_node(name).capacity(cpu="4").labels(zone=zone, score=score).obj())
    log.commit()
    return log


async def test_schedule_over_a_snapshot_returns_the_best_node(channel: grpc.aio.Channel) -> None:
    client = SchedulingClient(channel, cluster())
    resp = await client.schedule("contract", make_pod().obj(), explain=True)
    assert resp.status.code == pb.CODE_SUCCESS
    assert resp.node == "c"
    assert [s.node for s in resp.scores] == ["c", "b", "a"]
    assert resp.scores[0].plugins["LabelScore"] == 180  # 90 x weight 2
    # The explanation's three stages of a score: raw, normalised, weighted.
    assert resp.scores[0].raw["LabelScore"] == 90
    assert resp.scores[0].normalized["LabelScore"] == 90
    assert resp.scores[1].raw["LabelScore"] == 40


async def test_schedule_reports_the_fit_error_when_no_node_fits(channel: grpc.aio.Channel) -> None:
    log = cluster()
    log.upsert_node(make_node("c").capacity(cpu="4").labels(zone="z2", reject="RejectLabel").obj())
    log.commit()
    resp = await SchedulingClient(channel, log).schedule(
        "contract", make_pod().labels(zone="z2").obj()
    )
    assert resp.node == ""
    assert resp.status.code == pb.CODE_UNSCHEDULABLE
    assert resp.diagnosis.message == (
        "0/3 nodes are available: 1 rejected by RejectLabel, 2 node(s) not in zone z2."
    )
    assert set(resp.diagnosis.unschedulable_plugins) == {"RejectLabel", "ZoneFromPreFilter"}


async def test_cycle_state_round_trips_across_rpcs(channel: grpc.aio.Channel) -> None:
    """PreFilter writes CycleState, the caller carries it to Filter: the
    server itself remembers nothing between the two calls."""
    log = cluster()
    stub = pb_grpc.SchedulingServiceStub(channel)
    pod = make_pod().labels(zone="z2").obj()
    pre = await stub.PreFilter(pb.CycleRequest(profile="contract", state=log.full_state(), pod=pod))
    assert pre.status.code == pb.CODE_SUCCESS
    assert "ZoneFromPreFilter/wanted" in pre.cycle.data
    state = cpb.ClusterState(
        cluster_id=log.cluster_id,
        generation=log.generation,
        base_generation=log.generation,
        incarnation=log.incarnation,
    )
    filt = await stub.Filter(
        pb.NodesRequest(profile="contract", state=state, pod=pod, cycle=pre.cycle, all_nodes=True)
    )
    assert list(filt.feasible) == ["c"]
    # Without the cycle state the Filter plugin cannot read it: an Error, as upstream.
    bare = await stub.Filter(
        pb.NodesRequest(profile="contract", state=state, pod=pod, all_nodes=True)
    )
    assert not bare.feasible
    assert {r.status.code for r in bare.rejected} == {pb.CODE_ERROR}


async def test_score_and_normalize_rpcs_compose_to_the_schedule_totals(
    channel: grpc.aio.Channel,
) -> None:
    log = cluster()
    stub = pb_grpc.SchedulingServiceStub(channel)
    pod = make_pod().obj()
    score = await stub.Score(
        pb.NodesRequest(profile="contract", state=log.full_state(), pod=pod, nodes=["a", "c"])
    )
    assert [(p.plugin, list(p.scores)) for p in score.plugins] == [("LabelScore", [10, 90])]
    state = cpb.ClusterState(
        cluster_id=log.cluster_id, generation=1, base_generation=1, incarnation=log.incarnation
    )
    norm = await stub.NormalizeScore(
        pb.NormalizeScoreRequest(
            profile="contract", state=state, pod=pod, nodes=["a", "c"], plugins=score.plugins
        )
    )
    assert list(norm.totals) == [20, 180]


async def test_lagging_and_new_replicas_are_resynced(server: RunningServer) -> None:
    """Two replicas behind one caller: a new replica gets the state in full,
    a replica that missed generations gets only the changes since its own."""
    other = await start_server(CONFIG, REGISTRY, "127.0.0.1:0")
    try:
        log = cluster()
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as ch_a,
            grpc.aio.insecure_channel(f"127.0.0.1:{other.port}") as ch_b,
        ):
            a = SchedulingClient(ch_a, log)
            b = SchedulingClient(ch_b, log)
            await a.sync()
            assert a.resyncs == 0  # first contact sends the state in full
            for i in range(3):
                resp = await a.schedule("contract", make_pod(f"p{i}").obj())
                bound = make_pod(f"p{i}").req(cpu="1").node(resp.node).obj()
                log.upsert_pod(bound)
                log.commit()
            # Replica B has nothing: one FAILED_PRECONDITION, then full.
            b.acked = a.acked
            await b.schedule("contract", make_pod("x").obj())
            assert b.resyncs == 1
            assert other.service.store.generation(log.cluster_id) == log.generation
            # More changes through B; A falls behind and catches up from its generation.
            a_gen = server.service.store.generation(log.cluster_id)
            a_snapshot = server.service.store.snapshot_of(log.cluster_id)
            for i in range(2):
                log.upsert_pod(make_pod(f"q{i}").req(cpu="1").node("a").obj())
                log.commit()
                await b.schedule("contract", make_pod(f"y{i}").obj())
            a.acked = b.acked
            await a.schedule("contract", make_pod("z").obj())
            assert a.resyncs == 1
            # Caught up by a delta from its own generation, not a full resend.
            assert server.service.store.snapshot_of(log.cluster_id) is a_snapshot
            assert server.service.store.generation(log.cluster_id) == log.generation > a_gen
            snap = server.service.store.snapshot_of(log.cluster_id)
            assert (
                snap.nodes["a"].requested.milli_cpu
                == other.service.store.snapshot_of(log.cluster_id).nodes["a"].requested.milli_cpu
            )
    finally:
        await other.stop(0)


async def test_health_check_reports_serving(channel: grpc.aio.Channel) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    resp = await stub.Check(health_pb2.HealthCheckRequest(service="berth.v1.SchedulingService"))
    assert resp.status == health_pb2.HealthCheckResponse.SERVING


async def test_describe_profiles_lists_plugins_per_extension_point(
    channel: grpc.aio.Channel,
) -> None:
    resp = await pb_grpc.SchedulingServiceStub(channel).DescribeProfiles(
        pb.DescribeProfilesRequest()
    )
    (prof,) = resp.profiles
    points = {ep.name: [(p.name, p.weight) for p in ep.plugins] for ep in prof.extension_points}
    assert points["filter"] == [("ZoneFromPreFilter", 0), ("RejectLabel", 0)]
    assert points["score"] == [("LabelScore", 2)]


@pytest.mark.parametrize(
    ("method", "request_", "code", "message"),
    [
        ("Schedule", pb.ScheduleRequest(profile="contract"), "INVALID_ARGUMENT", "state: required"),
        (
            "Schedule",
            pb.ScheduleRequest(
                profile="nope", state=cpb.ClusterState(cluster_id="x", generation=1, full=True)
            ),
            "NOT_FOUND",
            "profile 'nope' is not configured on this server; configured: contract",
        ),
        (
            "Schedule",
            pb.ScheduleRequest(profile="", pod=cpb.Pod(uid="u", name="p")),
            "INVALID_ARGUMENT",
            "profile: must name a profile",
        ),
        (
            "Schedule",
            pb.ScheduleRequest(
                profile="contract", state=cpb.ClusterState(cluster_id="x", generation=1, full=True)
            ),
            "INVALID_ARGUMENT",
            "pod: required",
        ),
        (
            "Schedule",
            pb.ScheduleRequest(
                profile="contract",
                state=cpb.ClusterState(cluster_id="x", generation=1, full=True),
                pod=cpb.Pod(name="p"),
            ),
            "INVALID_ARGUMENT",
            "pod.uid: must not be empty",
        ),
        (
            "Schedule",
            pb.ScheduleRequest(
                profile="contract",
                state=cpb.ClusterState(
                    cluster_id="x",
                    generation=1,
                    full=True,
                    delta=cpb.ClusterDelta(upsert_nodes=[cpb.Node()]),
                ),
                pod=cpb.Pod(uid="u", name="p"),
            ),
            "INVALID_ARGUMENT",
            "state.delta.upsert_nodes[0].name: must not be empty",
        ),
        (
            "Filter",
            pb.NodesRequest(
                profile="contract",
                state=cpb.ClusterState(cluster_id="x", generation=1, full=True),
                pod=cpb.Pod(uid="u", name="p"),
                nodes=["ghost"],
            ),
            "NOT_FOUND",
            "nodes[0]: node 'ghost' is not in the snapshot (generation 1)",
        ),
        (
            "Reserve",
            pb.NodeRequest(
                profile="contract",
                state=cpb.ClusterState(cluster_id="x", generation=1, full=True),
                pod=cpb.Pod(uid="u", name="p"),
                node="ghost",
            ),
            "NOT_FOUND",
            "node: 'ghost' is not in the snapshot",
        ),
        (
            "Filter",
            pb.NodesRequest(
                profile="contract",
                state=cpb.ClusterState(
                    cluster_id="y",
                    generation=1,
                    full=True,
                    delta=cpb.ClusterDelta(upsert_nodes=[cpb.Node(name="a")]),
                ),
                pod=cpb.Pod(uid="u", name="p"),
                cycle=pb.CycleState(data={"ZoneFromPreFilter/wanted": b"\xc1garbage"}),
                all_nodes=True,
            ),
            "INVALID_ARGUMENT",
            "cycle.data: cycle state 'ZoneFromPreFilter/wanted' does not decode",
        ),
        (
            "NormalizeScore",
            pb.NormalizeScoreRequest(
                profile="contract",
                state=cpb.ClusterState(
                    cluster_id="n",
                    generation=1,
                    full=True,
                    delta=cpb.ClusterDelta(upsert_nodes=[cpb.Node(name="a")]),
                ),
                pod=cpb.Pod(uid="u", name="p"),
                nodes=["a"],
                plugins=[pb.PluginScores(plugin="LabelScore", scores=[1, 2])],
            ),
            "INVALID_ARGUMENT",
            "plugins[0].scores: has 2 scores for 1 nodes",
        ),
        (
            "NormalizeScore",
            pb.NormalizeScoreRequest(
                profile="contract",
                state=cpb.ClusterState(
                    cluster_id="n",
                    generation=1,
                    full=True,
                    delta=cpb.ClusterDelta(upsert_nodes=[cpb.Node(name="a")]),
                ),
                pod=cpb.Pod(uid="u", name="p"),
                nodes=["a"],
                plugins=[pb.PluginScores(plugin="Nope", scores=[1])],
            ),
            "INVALID_ARGUMENT",
            "plugins[0].plugin: 'Nope' is not a score plugin of profile 'contract'",
        ),
        (
            "Filter",
            pb.NodesRequest(
                profile="contract",
                state=cpb.ClusterState(cluster_id="f", generation=1, full=True),
                pod=cpb.Pod(uid="u", name="p"),
                nodes=["a"],
                all_nodes=True,
            ),
            "INVALID_ARGUMENT",
            "nodes: must be empty when all_nodes is set",
        ),
        (
            "Schedule",
            pb.ScheduleRequest(
                profile="contract",
                state=cpb.ClusterState(cluster_id="z", generation=5, base_generation=4),
                pod=cpb.Pod(uid="u", name="p"),
            ),
            "FAILED_PRECONDITION",
            "this replica has no snapshot of this cluster_id",
        ),
    ],
    ids=[
        "no-state",
        "unknown-profile",
        "empty-profile",
        "no-pod",
        "pod-without-uid",
        "node-without-name",
        "unknown-node-filter",
        "unknown-node-reserve",
        "malformed-cycle-state",
        "normalize-length-mismatch",
        "normalize-unknown-plugin",
        "nodes-and-all-nodes",
        "replica-without-snapshot",
    ],
)
async def test_bad_requests_get_precise_errors_and_the_server_keeps_serving(
    channel: grpc.aio.Channel, method: str, request_: object, code: str, message: str
) -> None:
    stub = pb_grpc.SchedulingServiceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await getattr(stub, method)(request_)
    assert err.value.code() == getattr(grpc.StatusCode, code)
    assert message in (err.value.details() or "")
    # The next good request is served.
    resp = await SchedulingClient(channel, cluster()).schedule("contract", make_pod().obj())
    assert resp.node == "c"


async def test_failed_precondition_carries_the_replica_generation(
    channel: grpc.aio.Channel,
) -> None:
    log = cluster()
    stub = pb_grpc.SchedulingServiceStub(channel)
    await stub.Sync(pb.SyncRequest(state=log.full_state()))
    for i in range(3):
        log.upsert_pod(make_pod(f"p{i}").node("a").obj())
        log.commit()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Sync(pb.SyncRequest(state=log.state_since(3)))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert ("berth-replica-generation", "1") in tuple(err.value.trailing_metadata() or ())


async def test_malformed_protobuf_bytes_are_invalid_argument(server: RunningServer) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        raw = ch.unary_unary("/berth.v1.SchedulingService/Schedule")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await raw(b"\xff\xff\xff\xff")
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "not a valid berth.v1.ScheduleRequest" in (err.value.details() or "")
        resp = await SchedulingClient(ch, cluster()).schedule("contract", make_pod().obj())
        assert resp.node == "c"


async def test_oversized_message_is_resource_exhausted(channel: grpc.aio.Channel) -> None:
    """The server's limit (1 MiB in this fixture) answers RESOURCE_EXHAUSTED."""
    log = cluster()
    big = make_pod("big").obj()
    big.annotations["blob"] = "x" * (2 * 1024 * 1024)
    stub = pb_grpc.SchedulingServiceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Schedule(pb.ScheduleRequest(profile="contract", state=log.full_state(), pod=big))
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in (err.value.details() or "")
    resp = await SchedulingClient(channel, log).schedule("contract", make_pod().obj())
    assert resp.node == "c"


async def test_schedule_stream_answers_in_order_and_survives_bad_requests(
    channel: grpc.aio.Channel,
) -> None:
    """ScheduleStream: a refused request is answered in-stream with the error
    the unary RPC would give, and the next request on the same stream works."""
    log = cluster()
    client = SchedulingClient(channel, log)
    first = await client.schedule_streamed("contract", make_pod().obj())
    assert first.node == "c"
    call = client._stream
    with pytest.raises(RequestRefused) as err:
        await client.schedule_streamed("nope", make_pod().obj())
    assert err.value.code == grpc.StatusCode.NOT_FOUND
    assert "profile 'nope' is not configured" in err.value.message
    with pytest.raises(RequestRefused) as err:
        await client.schedule_streamed("contract", cpb.Pod(name="no-uid"))
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.message == "pod.uid: must not be empty"
    again = await client.schedule_streamed("contract", make_pod().obj())
    assert again.node == "c"
    assert client._stream is call  # the same stream throughout
    await client.close()


async def test_schedule_stream_resyncs_a_replica_that_lost_its_snapshot(
    server: RunningServer, channel: grpc.aio.Channel
) -> None:
    log = cluster()
    client = SchedulingClient(channel, log)
    await client.schedule_streamed("contract", make_pod().obj())
    server.service.store.clear()  # as if the replica restarted
    log.upsert_pod(make_pod("p").req(cpu="1").node("c").obj())
    log.commit()
    resp = await client.schedule_streamed("contract", make_pod().obj())
    assert resp.node == "c"
    assert client.resyncs == 1
    assert server.service.store.generation(log.cluster_id) == log.generation
    await client.close()


async def test_malformed_message_on_the_stream_is_answered_in_stream(
    server: RunningServer,
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        call = ch.stream_stream("/berth.v1.SchedulingService/ScheduleStream")()
        await call.write(b"\xff\xff\xff")
        raw = await call.read()
        resp = pb.ScheduleStreamResponse.FromString(raw)
        assert resp.WhichOneof("result") == "error"
        assert resp.error.grpc_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "not a valid berth.v1.ScheduleRequest" in resp.error.message
        log = cluster()
        good = pb.ScheduleRequest(profile="contract", state=log.full_state(), pod=make_pod().obj())
        await call.write(good.SerializeToString())
        assert pb.ScheduleStreamResponse.FromString(await call.read()).response.node == "c"
        await call.done_writing()


async def test_stop_ends_the_worker_thread_once_its_work_in_flight_is_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An orderly stop: the worker thread (not a daemon, so never cut off in
    the middle of a job at exit) finishes the work in flight and ends before
    ``stop`` returns, even past the grace. The work is let go only once the
    worker is closed, after the gRPC server stopped."""
    running = await start_server(CONFIG, REGISTRY, "127.0.0.1:0", trace=False)
    worker = running.service.worker
    gate = threading.Event()
    finished: list[str] = []

    def work() -> str:
        assert gate.wait(30)
        finished.append("work")
        return "done"

    close = worker.close

    def close_then_release() -> None:
        close()
        threading.Timer(0.1, gate.set).start()

    monkeypatch.setattr(worker, "close", close_then_release)
    in_flight = asyncio.ensure_future(worker.run(work))
    await asyncio.sleep(0)
    await running.stop(0.05)
    assert finished == ["work"]
    assert worker.join(0)
    assert not worker.daemon
    assert await in_flight == "done"
