"""Contract test: the Go example client (examples/go-client) against `berth serve`.

Issue #2 asks for a client in another language, generated from the same
protos/berth/v1/*.proto files, that gets a placement decision from a running
server. This builds the client with its own build.sh (protoc from the venv's
grpcio-tools, Go plugins from the module proxy), starts `berth serve` on a free
loopback port with a minimal KubeSchedulerConfiguration, and checks what the
client prints for its built-in example cluster:

    node-a   4 CPU,  8Gi  running 3 CPU, 6Gi
    node-b   8 CPU, 16Gi  running 1 CPU, 2Gi    <- the emptiest schedulable node
    node-c   2 CPU,  2Gi  empty but small
    node-d  16 CPU, 64Gi  cordoned (spec.unschedulable)

Go is required: without it the build fixture fails (it does not skip), so a CI
image that lost its Go toolchain shows up red.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

REPO = Path(__file__).resolve().parents[2]
CLIENT_DIR = REPO / "examples" / "go-client"
CLIENT_BIN = CLIENT_DIR / "bin" / "berth-go-client"

SCHEDULER_CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
"""

BUILD_TIMEOUT_S = 540.0  # cold: ~1.5 min on 2 cores (plugins + grpc-go); under pytest-timeout
SERVER_READY_TIMEOUT_S = 90.0
CLIENT_TIMEOUT_S = 60.0

# The client's exit codes (examples/go-client/main.go).
EXIT_PLACED = 0
EXIT_RPC_ERROR = 1
EXIT_UNSCHEDULABLE = 3


@dataclass(frozen=True)
class Server:
    addr: str
    log: Path


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return f"exit {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"

    def json(self) -> dict[str, Any]:
        try:
            out: dict[str, Any] = json.loads(self.stdout)
        except json.JSONDecodeError as e:
            raise AssertionError(f"client printed no JSON ({e}):\n{self.describe()}") from e
        return out


def _venv_for_build() -> dict[str, str]:
    """The environment for build.sh: protoc comes from this interpreter's venv."""
    env = dict(os.environ)
    if sys.prefix != sys.base_prefix and "BERTH_VENV" not in env:
        env["BERTH_VENV"] = sys.prefix
    return env


@pytest.fixture(scope="session")
def go_client() -> Path:
    """Builds examples/go-client with its build.sh (gen.sh + go build), once."""
    if shutil.which("go") is None:
        pytest.fail(
            "Go toolchain not found on PATH: the Go client contract test needs Go 1.26+ to "
            "build examples/go-client (install Go, or put its bin/ directory on PATH)",
            pytrace=False,
        )
    try:
        proc = subprocess.run(
            [str(CLIENT_DIR / "build.sh")],
            cwd=CLIENT_DIR,
            env=_venv_for_build(),
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"examples/go-client/build.sh took over {BUILD_TIMEOUT_S:.0f}s", pytrace=False)
    if proc.returncode != 0 or not CLIENT_BIN.is_file():
        pytest.fail(
            f"examples/go-client/build.sh failed (exit {proc.returncode}):\n"
            f"{proc.stdout}\n{proc.stderr}",
            pytrace=False,
        )
    return CLIENT_BIN


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_until_serving(proc: subprocess.Popen[bytes], addr: str, log: Path) -> None:
    """Polls grpc.health.v1 until the server says SERVING (or answers gRPC at all)."""
    deadline = time.monotonic() + SERVER_READY_TIMEOUT_S
    last = "no answer yet"
    with grpc.insecure_channel(addr) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"berth serve exited with {proc.returncode} before it was ready; "
                    f"its output:\n{log.read_text(errors='replace')}",
                    pytrace=False,
                )
            try:
                resp = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last = f"health status {resp.status}"
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                    return  # it answers gRPC but registers no health service
                last = f"{e.code()}: {e.details()}"
            if time.monotonic() > deadline:
                pytest.fail(
                    f"berth serve at {addr} not ready after {SERVER_READY_TIMEOUT_S:.0f}s "
                    f"({last}); its output:\n{log.read_text(errors='replace')}",
                    pytrace=False,
                )
            time.sleep(0.25)


@pytest.fixture(scope="module")
def berth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`berth serve` on a free loopback port with a minimal configuration."""
    workdir = tmp_path_factory.mktemp("berth-serve")
    config = workdir / "scheduler-config.yaml"
    config.write_text(SCHEDULER_CONFIG)
    log = workdir / "server.log"
    addr = f"127.0.0.1:{_free_loopback_port()}"
    cmd = [sys.executable, "-m", "berth", "serve", "--config", str(config), "--listen", addr]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_until_serving(proc, addr, log)
        yield Server(addr=addr, log=log)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)


def _run_client(binary: Path, *args: str) -> Run:
    proc = subprocess.run(
        [str(binary), *args],
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
        check=False,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


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
    dead = f"127.0.0.1:{_free_loopback_port()}"
    run = _run_client(go_client, "--addr", dead, "--timeout", "5s")
    assert run.returncode == EXIT_RPC_ERROR, run.describe()
    assert f"Schedule RPC to {dead} failed: Unavailable:" in run.stderr, run.describe()


def test_unknown_profile_is_an_rpc_error(go_client: Path, berth_server: Server) -> None:
    run = _run_client(go_client, "--addr", berth_server.addr, "--profile", "no-such-scheduler")
    assert run.returncode == EXIT_RPC_ERROR, run.describe()
    # The server answers NOT_FOUND for a profile it does not run (server/service.py).
    assert "failed: NotFound: " in run.stderr, run.describe()
    assert "no-such-scheduler" in run.stderr, run.describe()


def test_go_unit_tests(go_client: Path) -> None:
    # go vet and the client's own tests (quantity parsing, FAILED_PRECONDITION
    # resync against an in-process fake server, output summary).
    for cmd in (["go", "vet", "./..."], ["go", "test", "./..."]):
        proc = subprocess.run(
            cmd, cwd=CLIENT_DIR, capture_output=True, text=True, timeout=600, check=False
        )
        assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stdout}\n{proc.stderr}"
