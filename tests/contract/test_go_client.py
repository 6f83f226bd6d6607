"""Contract test: the Go example client (examples/go-client) against `berth serve`.

Issue #2 asks for a client in another language that gets a placement decision from a
running server; issue #8 for Go code importable from this repository. The client imports
the committed module berth.dev/berth/gen/go (hack/gen-go.sh, checked by
`hack/gen-go.sh --check`) through a replace directive. This builds it with its
build.sh, starts `berth serve` on a free loopback port with a minimal
KubeSchedulerConfiguration, and checks what the client prints for its built-in example
cluster:

    node-a   4 CPU,  8Gi  running 3 CPU, 6Gi
    node-b   8 CPU, 16Gi  running 1 CPU, 2Gi    <- the emptiest schedulable node
    node-c   2 CPU,  2Gi  empty but small
    node-d  16 CPU, 64Gi  cordoned (spec.unschedulable)

Go is required: without it the build fixture fails (it does not skip), so a CI
image that lost its Go toolchain shows up red.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.contract.serve import (
    Run,
    Server,
    berth_serve,
    build_example_client,
    free_loopback_port,
    run_client,
)

REPO = Path(__file__).resolve().parents[2]
CLIENT_DIR = REPO / "examples" / "go-client"
CLIENT_BIN = CLIENT_DIR / "bin" / "berth-go-client"

# The client's exit codes (examples/go-client/main.go).
EXIT_PLACED = 0
EXIT_RPC_ERROR = 1
EXIT_USAGE = 2
EXIT_UNSCHEDULABLE = 3


@pytest.fixture(scope="session")
def go_client() -> Path:
    """Builds examples/go-client with its build.sh (go build against ../../gen/go), once."""
    if shutil.which("go") is None:
        pytest.fail(
            "Go toolchain not found on PATH: the Go client contract test needs Go 1.26+ to "
            "build examples/go-client (install Go, or put its bin/ directory on PATH)",
            pytrace=False,
        )
    return build_example_client(CLIENT_DIR, CLIENT_BIN)


@pytest.fixture(scope="module")
def berth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`berth serve` on a free loopback port with a minimal configuration."""
    with berth_serve(tmp_path_factory.mktemp("berth-serve")) as server:
        yield server


def _run_client(binary: Path, *args: str) -> Run:
    return run_client([str(binary), *args])


def _nodes(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in result["nodes"]}


def test_places_pod_on_emptiest_schedulable_node(go_client: Path, berth_server: Server) -> None:
    run = _run_client(go_client, "--addr", berth_server.addr, "--json")
    assert run.returncode == EXIT_PLACED, run.describe()
    result = run.json()
    assert result["status"] == "Success", run.describe()
    assert result["node"] == "node-b", run.describe()
    assert result["generation"] == 1
    assert result["evaluated_nodes"] == 4
    assert result["feasible_nodes"] == 3

    nodes = _nodes(result)
    assert set(nodes) == {"node-a", "node-b", "node-c", "node-d"}
    cordoned = nodes["node-d"]
    assert cordoned["filter"] == "rejected", run.describe()
    assert cordoned["plugin"] == "NodeUnschedulable"
    assert cordoned["reasons"] == ["node(s) were unschedulable"]
    assert cordoned["code"] == "UnschedulableAndUnresolvable"
    assert "total" not in cordoned

    for name in ("node-a", "node-b", "node-c"):
        assert nodes[name]["filter"] == "passed", run.describe()
        assert "NodeResourcesFit" in nodes[name]["scores"], run.describe()
    assert "NodeResourcesFit" in result["score_plugins"]
    # LeastAllocated: the emptiest node scores highest, the fullest lowest.
    totals = {name: nodes[name]["total"] for name in ("node-a", "node-b", "node-c")}
    assert max(totals, key=lambda n: totals[n]) == "node-b", totals
    assert min(totals, key=lambda n: totals[n]) == "node-a", totals
    assert nodes["node-b"]["chosen"] is True


def test_reports_insufficient_cpu(go_client: Path, berth_server: Server) -> None:
    # 1.5 CPU: node-a has 1 CPU free, so NodeResourcesFit rejects it.
    run = _run_client(go_client, "--addr", berth_server.addr, "--cpu", "1500m", "--json")
    assert run.returncode == EXIT_PLACED, run.describe()
    result = run.json()
    assert result["node"] == "node-b", run.describe()
    assert result["milli_cpu"] == 1500
    nodes = _nodes(result)
    assert nodes["node-a"]["filter"] == "rejected", run.describe()
    assert nodes["node-a"]["plugin"] == "NodeResourcesFit"
    assert nodes["node-a"]["reasons"] == ["Insufficient cpu"]
    assert nodes["node-d"]["plugin"] == "NodeUnschedulable"
    assert nodes["node-c"]["filter"] == "passed"


def test_no_node_fits(go_client: Path, berth_server: Server) -> None:
    run = _run_client(go_client, "--addr", berth_server.addr, "--cpu", "64", "--json")
    assert run.returncode == EXIT_UNSCHEDULABLE, run.describe()
    result = run.json()
    assert result["node"] == ""
    assert result["status"] in ("Unschedulable", "UnschedulableAndUnresolvable"), run.describe()
    message = result["message"]
    assert message.startswith("0/4 nodes are available: "), message
    assert "3 Insufficient cpu" in message, message
    assert "1 node(s) were unschedulable" in message, message
    nodes = _nodes(result)
    assert all(n["filter"] == "rejected" for n in nodes.values()), run.describe()


def test_text_output(go_client: Path, berth_server: Server) -> None:
    run = _run_client(go_client, "--addr", berth_server.addr, "--memory", "1Gi")
    assert run.returncode == EXIT_PLACED, run.describe()
    lines = run.stdout.splitlines()
    assert "placed on: node-b" in lines, run.describe()
    assert lines[0].startswith("pod default/go-client-demo (cpu 500m, memory 1Gi)"), run.describe()
    (cordoned,) = [line for line in lines if " node-d " in f" {line} "]
    assert "rejected by NodeUnschedulable: node(s) were unschedulable" in cordoned
    (chosen,) = [line for line in lines if line.startswith("*")]
    assert chosen.split()[1] == "node-b"


def test_cluster_from_file(go_client: Path, berth_server: Server, tmp_path: Path) -> None:
    # The same cluster, read from a file, with node-d uncordoned: the biggest,
    # emptiest node wins.
    dump = _run_client(go_client, "--print-example-cluster")
    assert dump.returncode == 0, dump.describe()
    cluster = dump.json()
    for node in cluster["upsert_nodes"]:
        if node["name"] == "node-d":
            node.pop("unschedulable")
            node.pop("taints")
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(cluster))
    run = _run_client(go_client, "--addr", berth_server.addr, "--cluster", str(path), "--json")
    assert run.returncode == EXIT_PLACED, run.describe()
    result = run.json()
    assert result["node"] == "node-d", run.describe()
    assert all(n["filter"] == "passed" for n in result["nodes"]), run.describe()


def test_rpc_error_exits_with_grpc_status(go_client: Path) -> None:
    # A port nothing listens on: the client fails fast with the gRPC code.
    dead = f"127.0.0.1:{free_loopback_port()}"
    run = _run_client(go_client, "--addr", dead, "--timeout", "5s")
    assert run.returncode == EXIT_RPC_ERROR, run.describe()
    assert f"Schedule RPC to {dead} failed: Unavailable:" in run.stderr, run.describe()


def test_unknown_profile_is_an_rpc_error(go_client: Path, berth_server: Server) -> None:
    run = _run_client(go_client, "--addr", berth_server.addr, "--profile", "no-such-scheduler")
    assert run.returncode == EXIT_RPC_ERROR, run.describe()
    # The server answers NOT_FOUND for a profile it does not run, with a
    # google.rpc.ErrorInfo the client decodes from the status details.
    assert "failed: NotFound: " in run.stderr, run.describe()
    assert "no-such-scheduler" in run.stderr, run.describe()
    assert "(reason UNKNOWN_PROFILE)" in run.stderr, run.describe()


def test_service_config_file(go_client: Path, berth_server: Server, tmp_path: Path) -> None:
    # The repository's service config loads; a broken one is a usage error naming it.
    good = REPO / "protos" / "service_config.json"
    run = _run_client(go_client, "--addr", berth_server.addr, "--service-config", str(good))
    assert run.returncode == EXIT_PLACED, run.describe()
    bad = tmp_path / "service_config.json"
    bad.write_text('{"methodConfig": [')
    run = _run_client(go_client, "--addr", berth_server.addr, "--service-config", str(bad))
    assert run.returncode == EXIT_USAGE, run.describe()
    assert str(bad) in run.stderr, run.describe()


def test_embedded_service_config_is_the_repository_file() -> None:
    # gen/go embeds a copy (berthv1.DefaultServiceConfig); hack/gen-go.sh --check
    # keeps it equal, this says so where the Go client is tested.
    embedded = REPO / "gen" / "go" / "berth" / "v1" / "service_config.json"
    assert embedded.read_bytes() == (REPO / "protos" / "service_config.json").read_bytes()


def test_go_unit_tests(go_client: Path) -> None:
    # go vet and the client's own tests (quantity parsing, STALE_SNAPSHOT resends
    # decoded from ErrorInfo against an in-process fake replica, the service
    # config's retry of UNAVAILABLE, output summary).
    for cmd in (["go", "vet", "./..."], ["go", "test", "./..."]):
        proc = subprocess.run(
            cmd, cwd=CLIENT_DIR, capture_output=True, text=True, timeout=600, check=False
        )
        assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stdout}\n{proc.stderr}"
