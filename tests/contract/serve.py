"""`berth serve` as a subprocess, for the contract tests of the example clients in
other languages (test_go_client.py, test_ts_client.py): a free loopback port, a
minimal KubeSchedulerConfiguration, readiness by grpc.health.v1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

REPO = Path(__file__).resolve().parents[2]

# The default plugins: PrioritySort, NodeResourcesFit, NodeName, NodeUnschedulable, ...
SCHEDULER_CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
"""

SERVER_READY_TIMEOUT_S = 90.0
CLIENT_TIMEOUT_S = 60.0
# A cold build on 2 cores: about a minute (grpc-go; npm ci + tsc); under pytest-timeout.
BUILD_TIMEOUT_S = 540.0


@dataclass(frozen=True)
class Server:
    addr: str
    log: Path


@dataclass(frozen=True)
class Run:
    """A finished client process."""

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


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def free_loopback_ports(count: int) -> list[int]:
    """``count`` distinct free ports: each socket stays bound until all are
    chosen (free_loopback_port twice can return the same port, the first
    having been released)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def run_client(cmd: Sequence[str], cwd: Path | None = None) -> Run:
    proc = subprocess.run(
        list(cmd), cwd=cwd, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, check=False
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def build_example_client(client_dir: Path, output: Path) -> Path:
    """Runs ``<client_dir>/build.sh`` there; returns ``output``, which it must have made.
    Fails the test (no skip) when the build fails or takes over BUILD_TIMEOUT_S."""
    where = client_dir.relative_to(REPO)
    try:
        proc = subprocess.run(
            [str(client_dir / "build.sh")],
            cwd=client_dir,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{where}/build.sh took over {BUILD_TIMEOUT_S:.0f}s", pytrace=False)
    if proc.returncode != 0 or not output.is_file():
        pytest.fail(
            f"{where}/build.sh failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}",
            pytrace=False,
        )
    return output


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


@contextmanager
def berth_serve(
    workdir: Path,
    *,
    config_text: str = SCHEDULER_CONFIG,
    args: Sequence[str] = (),
    python_path: Sequence[Path] = (),
    port: int | None = None,
) -> Iterator[Server]:
    """`berth serve` on a free loopback port (or ``port``) with a minimal
    configuration (or ``config_text``) and extra ``args``; ``python_path``
    is put first on the server's PYTHONPATH (where a test's plugin
    distribution lives)."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "scheduler-config.yaml"
    config.write_text(config_text)
    log = workdir / "server.log"
    addr = f"127.0.0.1:{port or free_loopback_port()}"
    cmd = [
        *[sys.executable, "-m", "berth", "serve", "--config", str(config), "--listen", addr],
        "--insecure-plaintext",
        *args,
    ]
    env = dict(os.environ)
    if python_path:
        paths = [str(p) for p in python_path]
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env)
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
