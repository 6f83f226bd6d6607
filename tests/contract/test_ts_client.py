"""Contract test: the TypeScript example client (examples/ts-client) against `berth serve`.

Issue #8 asks for a second client language that follows the client contract: the
service config (deadlines, retries on UNAVAILABLE, message sizes, round_robin), the
cluster as deltas with a resend when a replica is stale (STALE_SNAPSHOT, decoded from
the google.rpc.ErrorInfo in grpc-status-details-bin, or from a ScheduleStream
RequestError), and clear errors. This builds the client with its build.sh (npm ci from
the committed lock file, proto-loader-gen-types, tsc), runs its node:test unit tests,
and runs it against real `berth serve` replicas. Node and npm are required: without
them the build fixture fails (it does not skip).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from berth.api.v1 import scheduling_pb2 as pb
from tests.contract.serve import (
    Run,
    Server,
    berth_serve,
    build_example_client,
    free_loopback_port,
    run_client,
)

REPO = Path(__file__).resolve().parents[2]
CLIENT_DIR = REPO / "examples" / "ts-client"
CLIENT_JS = CLIENT_DIR / "dist" / "src" / "main.js"

# The client's exit codes (examples/ts-client/src/main.ts).
EXIT_PLACED = 0
EXIT_RPC_ERROR = 1
EXIT_USAGE = 2
EXIT_UNSCHEDULABLE = 3

STALE_FROM_NOTHING = "STALE_SNAPSHOT replica_generation=-1"


@pytest.fixture(scope="session")
def ts_client() -> Path:
    """Builds examples/ts-client with its build.sh, once."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            pytest.fail(
                f"{tool} not found on PATH: the TypeScript client contract test needs Node.js "
                "18+ and npm to build examples/ts-client",
                pytrace=False,
            )
    return build_example_client(CLIENT_DIR, CLIENT_JS)


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    """Two `berth serve` replicas of the same configuration."""
    with (
        berth_serve(tmp_path_factory.mktemp("replica-a")) as a,
        berth_serve(tmp_path_factory.mktemp("replica-b")) as b,
    ):
        yield a, b


def _client(script: Path, *args: str) -> Run:
    return run_client(["node", str(script), *args])


def _outcomes(report: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["kind"], s["outcome"]) for s in report["sends"]]


def test_unit_tests(ts_client: Path) -> None:
    # node:test: quantities, the delta log, the service config, ErrorInfo decoding, and
    # the resend paths (unary and stream) against an in-process fake replica.
    proc = subprocess.run(
        ["npm", "test", "--silent"],
        cwd=CLIENT_DIR,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"npm test:\n{proc.stdout}\n{proc.stderr}"
    assert "# fail 0" in proc.stdout, proc.stdout


def test_places_pod_on_emptiest_schedulable_node(
    ts_client: Path, replicas: tuple[Server, Server]
) -> None:
    run = _client(ts_client, "--addr", replicas[0].addr, "--json")
    assert run.returncode == EXIT_PLACED, run.describe()
    report = run.json()
    (pod,) = report["pods"]
    assert pod["node"] == "node-b", run.describe()
    assert pod["status"] == "Success"
    assert pod["evaluated_nodes"] == 4
    assert pod["feasible_nodes"] == 3
    nodes = {n["name"]: n for n in pod["nodes"]}
    assert nodes["node-d"]["filter"] == "rejected"
    assert nodes["node-d"]["plugin"] == "NodeUnschedulable"
    assert nodes["node-d"]["code"] == "UnschedulableAndUnresolvable"
    totals = {n: nodes[n]["total"] for n in ("node-a", "node-b", "node-c")}
    assert max(totals, key=lambda n: totals[n]) == "node-b", totals
    assert _outcomes(report) == [("full", "ok")]


def test_text_output(ts_client: Path, replicas: tuple[Server, Server]) -> None:
    run = _client(ts_client, "--addr", replicas[0].addr, "--cpu", "1500m")
    assert run.returncode == EXIT_PLACED, run.describe()
    assert "placed on: node-b" in run.stdout, run.describe()
    assert "rejected by NodeResourcesFit: Insufficient cpu" in run.stdout, run.describe()
    assert "full state at generation 1 (6 object(s)): ok" in run.stdout, run.describe()


def test_no_node_fits(ts_client: Path, replicas: tuple[Server, Server]) -> None:
    run = _client(ts_client, "--addr", replicas[0].addr, "--cpu", "64", "--json")
    assert run.returncode == EXIT_UNSCHEDULABLE, run.describe()
    (pod,) = run.json()["pods"]
    assert pod["node"] == ""
    assert pod["message"].startswith("0/4 nodes are available: "), pod
    assert "3 Insufficient cpu" in pod["message"], pod


@pytest.mark.parametrize("transport", ["unary", "stream"])
def test_fresh_replica_gets_a_delta_then_the_full_state(
    ts_client: Path, replicas: tuple[Server, Server], tmp_path: Path, transport: str
) -> None:
    """The caller keeps its cluster across runs (--state). Its first call to a
    replica that has never seen the cluster carries a delta; the replica answers
    STALE_SNAPSHOT (replica_generation -1) and the resent full state is served."""
    a, b = replicas
    state = str(tmp_path / "caller.json")
    extra = ["--stream"] if transport == "stream" else []

    first = _client(ts_client, "--addr", a.addr, "--state", state, "--pods", "2", "--json", *extra)
    assert first.returncode == EXIT_PLACED, first.describe()
    assert _outcomes(first.json()) == [("full", "ok"), ("delta", "ok")]

    second = _client(ts_client, "--addr", b.addr, "--state", state, "--json", *extra)
    assert second.returncode == EXIT_PLACED, second.describe()
    report = second.json()
    assert _outcomes(report) == [("delta", STALE_FROM_NOTHING), ("full", "ok")], report["sends"]
    # Generation 3 (two placed pods later) from the base replica A confirmed.
    assert report["sends"][0]["base_generation"] == 2
    (pod,) = report["pods"]
    assert pod["node"] and pod["generation"] == 3, pod
    # Both replicas are known now, each at a generation of its own.
    assert sorted(report["replicas"].values()) == [2, 3], report["replicas"]

    third = _client(ts_client, "--addr", a.addr, "--state", state, "--json", *extra)
    assert third.returncode == EXIT_PLACED, third.describe()
    sends = third.json()["sends"]
    # A still holds 2: a delta from the lowest generation a known replica holds.
    assert [(s["kind"], s["base_generation"], s["outcome"]) for s in sends] == [
        ("delta", 2, "ok")
    ], sends


def test_round_robin_over_two_replicas_places_as_one_replica(
    ts_client: Path, replicas: tuple[Server, Server]
) -> None:
    a, b = replicas
    args = ["--pods", "6", "--seed", "11", "--cpu", "700m", "--memory", "1Gi", "--json"]
    single = _client(ts_client, "--addr", a.addr, *args)
    spread = _client(ts_client, "--addr", f"{a.addr},{b.addr}", *args)
    assert single.returncode == EXIT_PLACED, single.describe()
    assert spread.returncode == EXIT_PLACED, spread.describe()
    one, two = single.json(), spread.json()
    assert [p["node"] for p in two["pods"]] == [p["node"] for p in one["pods"]]
    assert [p["generation"] for p in two["pods"]] == list(range(1, 7))
    # Every stale answer is followed by a resend that is served.
    sends = two["sends"]
    for i, s in enumerate(sends):
        if s["outcome"] != "ok":
            assert s["outcome"].startswith("STALE_SNAPSHOT"), sends
            assert sends[i + 1]["pod"] == s["pod"] and sends[i + 1]["outcome"] == "ok", sends
    # One full state per replica, plus at most one resend the balancer took elsewhere.
    assert two["full_sends"] <= 3, sends
    assert len(two["replicas"]) <= 2, two["replicas"]


def test_unknown_profile_is_a_typed_error(ts_client: Path, replicas: tuple[Server, Server]) -> None:
    run = _client(ts_client, "--addr", replicas[0].addr, "--profile", "no-such-scheduler")
    assert run.returncode == EXIT_RPC_ERROR, run.describe()
    assert "Schedule RPC to" in run.stderr, run.describe()
    assert "failed: NOT_FOUND: " in run.stderr, run.describe()
    assert "(reason UNKNOWN_PROFILE)" in run.stderr, run.describe()
    assert "profile=no-such-scheduler" in run.stderr, run.describe()


def test_no_server_is_unavailable(ts_client: Path) -> None:
    dead = f"127.0.0.1:{free_loopback_port()}"
    run = _client(ts_client, "--addr", dead, "--timeout", "5s")
    assert run.returncode == EXIT_RPC_ERROR, run.describe()
    assert f"Schedule RPC to {dead} failed: UNAVAILABLE: " in run.stderr, run.describe()


def test_bad_service_config_is_a_usage_error(ts_client: Path, tmp_path: Path) -> None:
    bad = tmp_path / "service_config.json"
    bad.write_text('{"methodConfig": [{"name": [{"service": 1}]}]}')
    run = _client(ts_client, "--service-config", str(bad))
    assert run.returncode == EXIT_USAGE, run.describe()
    assert str(bad) in run.stderr, run.describe()


class _FlakyReplica:
    """Answers the first Schedule UNAVAILABLE (a replica restarting), then places."""

    def __init__(self) -> None:
        self.calls = 0

    def schedule(self, request: pb.ScheduleRequest, context: Any) -> pb.ScheduleResponse:
        self.calls += 1
        if self.calls == 1:
            context.abort(grpc.StatusCode.UNAVAILABLE, "replica restarting")
        context.set_trailing_metadata((("berth-replica", "flaky"),))
        return pb.ScheduleResponse(
            status=pb.Status(), node="node-c", generation=request.state.generation
        )

    def handler(self) -> Any:
        return grpc.method_handlers_generic_handler(
            "berth.v1.SchedulingService",
            {
                "Schedule": grpc.unary_unary_rpc_method_handler(
                    self.schedule,
                    request_deserializer=pb.ScheduleRequest.FromString,
                    response_serializer=pb.ScheduleResponse.SerializeToString,
                )
            },
        )


def test_unavailable_is_retried_by_the_service_config(ts_client: Path) -> None:
    servicer = _FlakyReplica()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((servicer.handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        run = _client(ts_client, "--addr", f"127.0.0.1:{port}", "--json")
    finally:
        server.stop(0)
    assert run.returncode == EXIT_PLACED, run.describe()
    assert servicer.calls == 2, "the channel's retryPolicy resends the UNAVAILABLE call"
    report = run.json()
    assert [p["node"] for p in report["pods"]] == ["node-c"]
    assert _outcomes(report) == [("full", "ok")], "retries are the channel's, not resends"
