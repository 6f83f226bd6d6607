"""The plugin server's call metrics (server/telemetry.py): every unary call and every
ScheduleStream message is counted by method and gRPC status code
(berth_plugin_server_calls_total) and timed (berth_plugin_server_call_duration_seconds),
with and without the tracing interceptor; and the framework's metrics
(scheduler_plugin_evaluation_total, scheduler_scheduling_algorithm_duration_seconds) move
on the server that ran the cycle."""

from __future__ import annotations

import grpc
from prometheus_client import REGISTRY as METRICS

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.client import ClusterStateLog
from berth.framework.testing import make_node, make_pod
from berth.server.telemetry import code_name

PROFILE = "contract"


def calls(method: str, code: str) -> float:
    value = METRICS.get_sample_value(
        "berth_plugin_server_calls_total", {"method": method, "code": code}
    )
    return value or 0.0


def timed(method: str) -> float:
    value = METRICS.get_sample_value(
        "berth_plugin_server_call_duration_seconds_count", {"method": method}
    )
    return value or 0.0


def cluster() -> ClusterStateLog:
    log = ClusterStateLog()
    for name in ("a", "b"):
        log.upsert_node(make_node(name).capacity(cpu="4").labels(score="1").obj())
    log.commit()
    return log


async def test_unary_calls_are_counted_by_method_and_code(channel: grpc.aio.Channel) -> None:
    stub = pb_grpc.SchedulingServiceStub(channel)
    ok, missing, durations = (
        calls("Schedule", "OK"),
        calls("Schedule", "NOT_FOUND"),
        timed("Schedule"),
    )
    algorithm = METRICS.get_sample_value("scheduler_scheduling_algorithm_duration_seconds_count")
    log = cluster()
    answer = await stub.Schedule(
        pb.ScheduleRequest(profile=PROFILE, state=log.full_state(), pod=make_pod().obj())
    )
    assert answer.node
    try:
        await stub.Schedule(
            pb.ScheduleRequest(profile="nope", state=log.full_state(), pod=make_pod().obj())
        )
    except grpc.aio.AioRpcError as err:
        assert err.code() == grpc.StatusCode.NOT_FOUND
    else:
        raise AssertionError("an unknown profile was served")
    assert (calls("Schedule", "OK"), calls("Schedule", "NOT_FOUND")) == (ok + 1, missing + 1)
    assert timed("Schedule") == durations + 2
    after = METRICS.get_sample_value("scheduler_scheduling_algorithm_duration_seconds_count")
    assert (after or 0.0) >= (algorithm or 0.0) + 1


async def test_each_stream_message_is_a_call_with_its_in_stream_code(
    channel: grpc.aio.Channel,
) -> None:
    stub = pb_grpc.SchedulingServiceStub(channel)
    ok, invalid = calls("ScheduleStream", "OK"), calls("ScheduleStream", "INVALID_ARGUMENT")
    durations = timed("ScheduleStream")
    log = cluster()
    call = stub.ScheduleStream()
    for pod in (make_pod("p1").obj(), cpb.Pod(name="no-uid"), make_pod("p2").obj()):
        await call.write(pb.ScheduleRequest(profile=PROFILE, state=log.full_state(), pod=pod))
        await call.read()
    await call.done_writing()
    assert await call.code() == grpc.StatusCode.OK
    assert calls("ScheduleStream", "OK") == ok + 2
    assert calls("ScheduleStream", "INVALID_ARGUMENT") == invalid + 1
    assert timed("ScheduleStream") == durations + 3


def test_code_names_are_grpcs() -> None:
    assert code_name(grpc.StatusCode.RESOURCE_EXHAUSTED) == "RESOURCE_EXHAUSTED"
    assert code_name(grpc.StatusCode.NOT_FOUND.value[0]) == "NOT_FOUND"
    assert code_name(None) == "UNKNOWN"
