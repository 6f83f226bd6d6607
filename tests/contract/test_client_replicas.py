"""berth.client.SchedulingClient against several replicas (protos/README.md,
"Client contract"), with replicas simulated in this process so every count is
exact: what each replica holds, how many full states each got, which answers
came from which state.

``FakeReplica`` follows the server's rules (server/state.py): a full state
always replaces; a delta applies when the replica holds a generation in
[base_generation, generation); a replica holding the cluster under another
incarnation, or nothing, answers STALE_SNAPSHOT with -1; a pinned request
finding a later snapshot answers SNAPSHOT_PASSED. Errors carry a
google.rpc.Status with an ErrorInfo and the ``berth-replica`` trailer, as
server/errors.py sends them (``legacy=True``: only the old
``berth-replica-generation`` trailer, no ids).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.rpc.error_details_pb2 import ErrorInfo
from google.rpc.status_pb2 import Status as RpcStatus

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import (
    ClusterStateLog,
    ErrorDetail,
    ReplicaTracker,
    SchedulingClient,
    SnapshotPassed,
    parse_target,
)
from berth.framework.testing import make_node, make_pod


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def rpc_error(
    code: grpc.StatusCode,
    message: str,
    *,
    reason: str = "",
    metadata: dict[str, str] | None = None,
    trailers: Sequence[tuple[str, str | bytes]] = (),
) -> grpc.aio.AioRpcError:
    out: list[tuple[str, str | bytes]] = list(trailers)
    if reason:
        info = ErrorInfo(reason=reason, domain="berth.dev", metadata=metadata or {})
        st = RpcStatus(code=code.value[0], message=message)
        st.details.add().Pack(info)
        out.append(("grpc-status-details-bin", st.SerializeToString()))
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*out), message)


class FakeCall:
    """What a grpc.aio unary call looks like to the client: awaitable, then
    trailing metadata."""

    def __init__(self, result: Any, trailers: tuple[tuple[str, str], ...]) -> None:
        self.result = result
        self.trailers = trailers

    def __await__(self) -> Generator[Any, None, Any]:
        return self._answer().__await__()

    async def _answer(self) -> Any:
        await asyncio.sleep(0)  # other calls run meanwhile, as over a network
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result

    async def trailing_metadata(self) -> grpc.aio.Metadata:
        return grpc.aio.Metadata(*self.trailers)


@dataclass
class FakeReplica:
    name: str
    legacy: bool = False
    up: bool = True
    id: str = field(default_factory=lambda: secrets.token_hex(4))
    # cluster_id -> (incarnation, generation, pod uids, node names)
    snaps: dict[str, tuple[int, int, set[str], set[str]]] = field(default_factory=dict)
    fulls: int = 0
    served: int = 0
    # (generation the request asked for, generation served, pods served from)
    answers: list[tuple[int, int, frozenset[str]]] = field(default_factory=list)

    def restart(self) -> None:
        self.id = secrets.token_hex(4)
        self.snaps = {}
        self.up = True

    def _stale(self, have: int, base: int) -> grpc.aio.AioRpcError:
        msg = f"replica {self.name} at {have}, base {base}"
        trailers: list[tuple[str, str | bytes]] = [("berth-replica-generation", str(have))]
        if self.legacy:
            return rpc_error(grpc.StatusCode.FAILED_PRECONDITION, msg, trailers=trailers)
        trailers.append(("berth-replica", self.id))
        return rpc_error(
            grpc.StatusCode.FAILED_PRECONDITION,
            msg,
            reason="STALE_SNAPSHOT",
            metadata={"replica_generation": str(have), "replica": self.id},
            trailers=trailers,
        )

    def serve(self, st: cpb.ClusterState) -> int:
        if not self.up:
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, f"{self.name} is down")
        held = self.snaps.get(st.cluster_id)
        if held is not None and held[0] != st.incarnation:
            held = None
        if st.full:
            self.fulls += 1
            pods = {p.uid for p in st.delta.upsert_pods}
            nodes = {n.name for n in st.delta.upsert_nodes}
            self.snaps[st.cluster_id] = (st.incarnation, st.generation, pods, nodes)
        elif held is None:
            raise self._stale(-1, st.base_generation)
        else:
            inc, have, pods, nodes = held
            if st.pinned and have > st.generation:
                raise rpc_error(
                    grpc.StatusCode.ABORTED,
                    "passed",
                    reason="SNAPSHOT_PASSED",
                    metadata={"replica_generation": str(have), "replica": self.id},
                )
            if have < st.base_generation:
                raise self._stale(have, st.base_generation)
            if have < st.generation:
                pods, nodes = set(pods), set(nodes)
                pods -= set(st.delta.delete_pods)
                pods |= {p.uid for p in st.delta.upsert_pods}
                nodes -= set(st.delta.delete_nodes)
                nodes |= {n.name for n in st.delta.upsert_nodes}
                self.snaps[st.cluster_id] = (inc, st.generation, pods, nodes)
        _, gen, pods, _ = self.snaps[st.cluster_id]
        self.served += 1
        self.answers.append((st.generation, gen, frozenset(pods)))
        return gen

    def call(self, request: Any) -> FakeCall:
        trailers = () if self.legacy else (("berth-replica", self.id),)
        try:
            if isinstance(request, pb.DescribeProfilesRequest):
                if not self.up:
                    raise rpc_error(grpc.StatusCode.UNAVAILABLE, f"{self.name} is down")
                return FakeCall(pb.DescribeProfilesResponse(), trailers)
            gen = self.serve(request.state)
        except grpc.aio.AioRpcError as err:
            return FakeCall(err, trailers)
        if isinstance(request, pb.SyncRequest):
            return FakeCall(pb.SyncResponse(generation=gen), trailers)
        return FakeCall(pb.ScheduleResponse(node="n1", generation=gen), trailers)


class ReplicaStub:
    """One address, one replica (endpoint-aware mode)."""

    def __init__(self, replica: FakeReplica) -> None:
        self.replica = replica

    def __getattr__(self, name: str) -> Any:
        def method(request: Any, timeout: float | None = None, **_options: Any) -> FakeCall:
            return self.replica.call(request)

        return method


class BalancedStub:
    """One channel over several replicas, round robin over those up (as
    gRPC's round_robin skips subchannels in TRANSIENT_FAILURE)."""

    def __init__(self, replicas: list[FakeReplica]) -> None:
        self.replicas = replicas
        self.next = 0

    def __getattr__(self, name: str) -> Any:
        def method(request: Any, timeout: float | None = None, **_options: Any) -> FakeCall:
            up = [r for r in self.replicas if r.up] or self.replicas
            r = up[self.next % len(up)]
            self.next += 1
            return r.call(request)

        return method


def cluster(cluster_id: str = "c1") -> ClusterStateLog:
    log = ClusterStateLog(cluster_id)
    for i in range(3):
        log.upsert_node(make_node(f"n{i}").capacity(cpu="8").obj())
    log.commit()
    return log


def step(log: ClusterStateLog, i: int) -> None:
    """One cycle's change: a pod placed, and every third cycle one removed."""
    log.upsert_pod(make_pod(f"p{i}").uid(f"p{i}").req(cpu="1").node(f"n{i % 3}").obj())
    if i % 3 == 2:
        log.delete_pod(f"p{i - 1}")
    log.commit()


def check_answers(replicas: Sequence[FakeReplica], truth: dict[int, frozenset[str]]) -> None:
    """Every answer came from exactly the generation asked for, with the pods
    the caller had at that generation."""
    for r in replicas:
        for asked, served, pods in r.answers:
            assert served == asked, (r.name, asked, served)
            assert pods == truth[asked], (r.name, asked, sorted(pods ^ truth[asked]))


async def run_cycles(
    client: SchedulingClient, log: ClusterStateLog, truth: dict[int, frozenset[str]], n: int
) -> None:
    for _ in range(n):
        step(log, log.generation)
        truth[log.generation] = frozenset(log.pods)
        await client.schedule("p", make_pod("x").obj())


def endpoint_client(
    log: ClusterStateLog, replicas: list[FakeReplica], clock: Clock
) -> SchedulingClient:
    by_address = {f"10.0.0.{i}:50051": r for i, r in enumerate(replicas)}
    return SchedulingClient.connect(
        ",".join(by_address),
        log,
        make_stub=lambda a: ReplicaStub(by_address[a]),
        clock=clock,
    )


# -- endpoint-aware ---------------------------------------------------------------------


async def test_endpoint_aware_spreads_calls_and_sends_each_replica_one_full_state() -> None:
    replicas = [FakeReplica(f"r{i}") for i in range(3)]
    log = cluster()
    truth = {log.generation: frozenset(log.pods)}
    client = endpoint_client(log, replicas, Clock())
    await run_cycles(client, log, truth, 30)
    assert [r.served for r in replicas] == [10, 10, 10]
    assert [r.fulls for r in replicas] == [1, 1, 1]
    assert client.full_sends == 3
    assert sorted(client.full_sends_by_replica.values()) == [1, 1, 1]
    # Each replica missed two generations between its calls: one STALE-free
    # delta covers them, never a resend.
    assert client.resyncs == 0
    check_answers(replicas, truth)


async def test_endpoint_aware_restarted_replica_costs_one_full_state_to_it() -> None:
    replicas = [FakeReplica(f"r{i}") for i in range(3)]
    log = cluster()
    truth = {log.generation: frozenset(log.pods)}
    client = endpoint_client(log, replicas, Clock())
    await run_cycles(client, log, truth, 9)
    replicas[1].restart()
    await run_cycles(client, log, truth, 12)
    replicas[1].restart()
    replicas[2].restart()
    await run_cycles(client, log, truth, 12)
    assert [r.fulls for r in replicas] == [1, 3, 2]
    # One STALE answer per restart, then the full state.
    assert client.resyncs == 3
    assert client.full_sends == 6
    check_answers(replicas, truth)


async def test_endpoint_aware_skips_a_replica_that_is_down_and_keeps_its_snapshot() -> None:
    replicas = [FakeReplica(f"r{i}") for i in range(3)]
    log = cluster()
    truth = {log.generation: frozenset(log.pods)}
    clock = Clock()
    client = endpoint_client(log, replicas, clock)
    await run_cycles(client, log, truth, 6)
    replicas[0].up = False
    served = [r.served for r in replicas]
    await run_cycles(client, log, truth, 10)  # no error reaches the caller
    assert replicas[0].served == served[0]
    assert client.failovers == 1  # tried once, then left alone while backing off
    assert sum(r.served for r in replicas) == sum(served) + 10
    # Back (not restarted): caught up by a delta from its own generation.
    replicas[0].up = True
    clock.now += 60
    await run_cycles(client, log, truth, 6)
    assert replicas[0].served > served[0]
    assert [r.fulls for r in replicas] == [1, 1, 1]
    check_answers(replicas, truth)


async def test_concurrent_first_calls_send_one_full_state_per_replica() -> None:
    """The shim's binding cycles call concurrently: calls that find a full state in
    flight to their replica wait for it and then send a delta."""
    replicas = [FakeReplica(f"r{i}") for i in range(2)]
    log = cluster()
    truth = {log.generation: frozenset(log.pods)}
    client = endpoint_client(log, replicas, Clock())
    await asyncio.gather(*(client.schedule("p", make_pod("x").obj()) for _ in range(8)))
    assert [r.fulls for r in replicas] == [1, 1]
    assert [r.served for r in replicas] == [4, 4]
    check_answers(replicas, truth)


async def test_endpoint_aware_all_replicas_down_reaches_the_caller_after_one_try_each() -> None:
    replicas = [FakeReplica(f"r{i}") for i in range(3)]
    log = cluster()
    client = endpoint_client(log, replicas, Clock())
    await client.sync()
    for r in replicas:
        r.up = False
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.schedule("p", make_pod("x").obj())
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert client.failovers == 3
    assert all(not s.healthy for s in client.stats())


async def test_dns_target_is_resolved_again_periodically_and_after_a_failure() -> None:
    replicas = {f"10.0.0.{i}:7000": FakeReplica(f"r{i}") for i in range(4)}
    answers = [["10.0.0.0:7000", "10.0.0.1:7000"]]
    asked: list[tuple[str, int]] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append((host, port))
        return answers[-1]

    clock = Clock()
    log = cluster()
    client = SchedulingClient.connect(
        "dns:///plugins.berth.svc:7000",
        log,
        resolve=resolve,
        resolve_every=30.0,
        make_stub=lambda a: ReplicaStub(replicas[a]),
        clock=clock,
    )
    await client.sync()
    assert asked == [("plugins.berth.svc", 7000)]
    assert [e.address for e in client.endpoints] == ["10.0.0.0:7000", "10.0.0.1:7000"]
    # The Service scales out: seen at the next periodic resolution.
    answers.append(["10.0.0.0:7000", "10.0.0.1:7000", "10.0.0.2:7000"])
    clock.now += 10
    await client.sync()
    assert len(asked) == 1
    clock.now += 25
    await client.sync()
    assert len(asked) == 2
    assert [e.address for e in client.endpoints][-1] == "10.0.0.2:7000"
    # A pod replaced: the old address fails, the client resolves again at once.
    replicas["10.0.0.1:7000"].up = False
    answers.append(["10.0.0.0:7000", "10.0.0.2:7000", "10.0.0.3:7000"])
    clock.now += 2
    for _ in range(3):
        await client.sync()
    assert len(asked) == 3
    assert [e.address for e in client.endpoints] == [
        "10.0.0.0:7000",
        "10.0.0.2:7000",
        "10.0.0.3:7000",
    ]
    assert replicas["10.0.0.3:7000"].served >= 1


# -- opaque: one channel over several replicas ---------------------------------------------


def opaque_client(
    log: ClusterStateLog, replicas: list[FakeReplica], clock: Clock
) -> SchedulingClient:
    return SchedulingClient.connect(
        "ipv4:10.0.0.1:1,10.0.0.2:1,10.0.0.3:1",
        log,
        make_stub=lambda _a: BalancedStub(replicas),
        clock=clock,
    )


async def test_opaque_round_robin_sends_deltas_every_replica_can_apply() -> None:
    """3 replicas behind gRPC's round_robin: the base is the lowest generation a
    known replica confirmed, so whichever replica gets the call can apply the
    delta. Start-up costs at most N+1 full states (the first call, then one per
    replica that had nothing, the retry of the first STALE landing on the next
    replica); afterwards none."""
    n = 3
    replicas = [FakeReplica(f"r{i}") for i in range(n)]
    log = cluster()
    truth = {log.generation: frozenset(log.pods)}
    client = opaque_client(log, replicas, Clock())
    await run_cycles(client, log, truth, 6)
    start_fulls = client.full_sends
    assert start_fulls <= n + 1
    await run_cycles(client, log, truth, 30)
    assert client.full_sends == start_fulls
    assert sum(r.fulls for r in replicas) == start_fulls
    check_answers(replicas, truth)


async def test_opaque_restarted_replica_costs_at_most_n_full_states() -> None:
    n = 3
    replicas = [FakeReplica(f"r{i}") for i in range(n)]
    log = cluster()
    truth = {log.generation: frozenset(log.pods)}
    client = opaque_client(log, replicas, Clock())
    await run_cycles(client, log, truth, 9)
    for victim in range(n):
        before = client.full_sends
        replicas[victim].restart()
        await run_cycles(client, log, truth, 12)
        # Full states until the balancer lands on the restarted replica: at
        # most one round of N calls.
        assert 1 <= client.full_sends - before <= n, (victim, client.full_sends - before)
    check_answers(replicas, truth)


async def test_opaque_replica_gone_for_good_is_forgotten() -> None:
    n = 3
    replicas = [FakeReplica(f"r{i}") for i in range(n)]
    log = cluster()
    truth = {log.generation: frozenset(log.pods)}
    client = opaque_client(log, replicas, Clock())
    await run_cycles(client, log, truth, 9)
    gone = replicas.pop(1)
    await run_cycles(client, log, truth, 80)
    tracker = client.endpoints[0].tracker
    assert gone.id not in tracker.replicas
    assert set(tracker.replicas) == {r.id for r in replicas}
    # The base follows the replicas still there: the last call's delta
    # covered a generation or two, not everything since the replica left.
    assert tracker.base() >= log.generation - 2
    check_answers(replicas, truth)


async def test_opaque_legacy_servers_without_ids_still_answer_from_the_right_state() -> None:
    """Servers that send neither ErrorInfo nor replica ids: the client cannot
    tell replicas apart and resends more, but never answers from a wrong
    state."""
    replicas = [FakeReplica(f"r{i}", legacy=True) for i in range(3)]
    log = cluster()
    truth = {log.generation: frozenset(log.pods)}
    client = opaque_client(log, replicas, Clock())
    await run_cycles(client, log, truth, 20)
    check_answers(replicas, truth)
    assert client.resyncs > 0


async def test_restarted_caller_with_the_same_cluster_id_is_never_served_old_state() -> None:
    replicas = [FakeReplica(f"r{i}") for i in range(3)]
    first = cluster("shared")
    truth = {first.generation: frozenset(first.pods)}
    client = endpoint_client(first, replicas, Clock())
    await run_cycles(client, first, truth, 12)
    # The caller restarts: same id, a new incarnation, generations from 1 again,
    # and a different cluster (no pods). Old generations mean nothing now.
    second = ClusterStateLog("shared")
    assert second.incarnation > first.incarnation  # microseconds since the epoch, at start
    for i in range(3):
        second.upsert_node(make_node(f"n{i}").capacity(cpu="8").obj())
    second.commit()
    for _ in range(5):
        second.commit()  # generations the first run also had
    for r in replicas:
        r.answers.clear()
    client2 = endpoint_client(second, replicas, Clock())
    for _ in range(6):
        await client2.schedule("p", make_pod("x").obj())
    for r in replicas:
        for asked, served, pods in r.answers:
            assert (asked, served, pods) == (second.generation, second.generation, frozenset())
    assert [r.fulls for r in replicas] == [2, 2, 2]  # one per caller run


# -- pinned cycles -------------------------------------------------------------------------


async def test_pinned_call_is_served_at_its_generation_or_restarts() -> None:
    replicas = [FakeReplica("r0")]
    log = cluster()
    truth = {log.generation: frozenset(log.pods)}
    client = endpoint_client(log, replicas, Clock())
    await run_cycles(client, log, truth, 2)
    started = log.generation
    # The cycle's next call, pinned, while the caller has moved on.
    step(log, 99)
    resp: pb.ScheduleResponse = await client.call(
        "Schedule",
        lambda st: pb.ScheduleRequest(profile="p", state=st, pod=make_pod("x").obj()),
        pin=started,
    )
    assert resp.generation == started
    assert replicas[0].answers[-1] == (started, started, truth[started])
    # The replica moves past it; the pinned cycle must restart.
    await client.sync()
    with pytest.raises(SnapshotPassed):
        await client.call(
            "Schedule",
            lambda st: pb.ScheduleRequest(profile="p", state=st, pod=make_pod("x").obj()),
            pin=started,
        )


def test_pinned_state_carries_the_changes_up_to_its_generation_only() -> None:
    log = cluster()
    base = log.generation
    step(log, 0)
    pinned_at = log.generation
    step(log, 1)
    st = log.pinned_state(base, pinned_at)
    assert st is not None
    assert (st.generation, st.base_generation, st.pinned) == (pinned_at, base, True)
    assert [p.uid for p in st.delta.upsert_pods] == ["p0"]
    assert log.pinned_state(0, pinned_at) is None  # a full state only exists now
    assert log.pinned_state(log.generation, pinned_at) is None  # the base is past it
    with pytest.raises(ValueError, match="not one this log has had"):
        log.pinned_state(base, log.generation + 1)


# -- pieces ----------------------------------------------------------------------------------


def test_tracker_base_is_the_lowest_confirmed_and_full_while_one_needs_it() -> None:
    clock = Clock()
    t = ReplicaTracker(clock=clock)
    assert t.base() == 0  # nothing known: full
    t.confirmed("a", 5)
    t.confirmed("b", 7)
    assert t.base() == 5
    t.stale("c", -1)
    assert t.base() == 0
    t.confirmed("c", 8)
    assert t.base() == 5
    t.stale("a", 3)
    assert t.base() == 3
    # "a" goes quiet: forgotten after forget_seconds of others answering.
    clock.now += 31
    t.confirmed("b", 9)
    t.confirmed("c", 9)
    assert t.base() == 9
    assert set(t.replicas) == {"b", "c"}


def test_exclusive_tracker_replaces_a_restarted_replica() -> None:
    t = ReplicaTracker(exclusive=True)
    t.confirmed("old", 10)
    t.stale("new", -1)
    assert set(t.replicas) == {"new"}
    assert t.base() == 0


@pytest.mark.parametrize(
    ("text", "kind", "addresses", "host", "port"),
    [
        ("dns:///plugins.berth.svc:50051", "dns", (), "plugins.berth.svc", 50051),
        ("dns://8.8.8.8/plugins:50051", "dns", (), "plugins", 50051),
        ("10.0.0.1:1,10.0.0.2:2", "list", ("10.0.0.1:1", "10.0.0.2:2"), "", 0),
        ("localhost:50051", "single", ("localhost:50051",), "", 0),
        ("ipv4:127.0.0.1:1,127.0.0.1:2", "single", ("ipv4:127.0.0.1:1,127.0.0.1:2",), "", 0),
    ],
)
def test_parse_target(
    text: str, kind: str, addresses: tuple[str, ...], host: str, port: int
) -> None:
    t = parse_target(text)
    assert (t.kind, t.addresses, t.host, t.port) == (kind, addresses, host, port)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "must not be empty"),
        ("dns:///plugins", "'plugins' is not host:port"),
        ("a:1,b", "'b' is not host:port"),
        ("a:1,b:99999", "'b:99999' is not host:port"),
    ],
)
def test_parse_target_refuses_naming_the_entry(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_target(text)


def test_opaque_mode_refuses_a_list() -> None:
    with pytest.raises(ValueError, match="ipv4:a:1"):
        SchedulingClient.connect("a:1,b:2", ClusterStateLog(), mode="opaque")


def test_error_detail_from_error_info_legacy_trailer_and_stream_error() -> None:
    typed = rpc_error(
        grpc.StatusCode.FAILED_PRECONDITION,
        "behind",
        reason="STALE_SNAPSHOT",
        metadata={"replica_generation": "4", "replica": "abc"},
    )
    d = ErrorDetail.from_rpc_error(typed)
    assert (d.reason, d.replica_generation, d.replica, d.stale) == (
        "STALE_SNAPSHOT",
        4,
        "abc",
        True,
    )
    legacy = rpc_error(
        grpc.StatusCode.FAILED_PRECONDITION,
        "behind",
        trailers=[("berth-replica-generation", "-1"), ("berth-replica", "r9")],
    )
    d = ErrorDetail.from_rpc_error(legacy)
    assert (d.reason, d.replica_generation, d.replica) == ("STALE_SNAPSHOT", -1, "r9")
    other_domain = rpc_error(grpc.StatusCode.NOT_FOUND, "x", reason="UNKNOWN_PROFILE")
    other_domain_info = ErrorInfo(reason="NOPE", domain="example.com")
    st = RpcStatus(code=5, message="x")
    st.details.add().Pack(other_domain_info)
    foreign = grpc.aio.AioRpcError(
        grpc.StatusCode.NOT_FOUND,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(("grpc-status-details-bin", st.SerializeToString())),
        "x",
    )
    assert ErrorDetail.from_rpc_error(other_domain).reason == "UNKNOWN_PROFILE"
    assert ErrorDetail.from_rpc_error(foreign).reason == ""
    stream = pb.RequestError(
        grpc_code=10, message="passed", reason="SNAPSHOT_PASSED", replica_generation=9
    )
    stream.metadata["replica"] = "r1"
    d = ErrorDetail.from_request_error(stream)
    assert (d.code, d.reason, d.replica_generation, d.replica) == (
        grpc.StatusCode.ABORTED,
        "SNAPSHOT_PASSED",
        9,
        "r1",
    )
