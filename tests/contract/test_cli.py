"""The ``berth`` commands as a user runs them: separate processes, real gRPC."""

from __future__ import annotations

import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from berth import __version__ as berth_version
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.client import ClusterStateLog
from berth.framework.testing import make_node, make_pod
from tests.contract.serve import free_loopback_port, free_loopback_ports

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cluster"


def berth(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "berth", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


class Served:
    def __init__(self, proc: subprocess.Popen[str], port: int, metrics: int) -> None:
        self.proc = proc
        self.port = port
        self.metrics = metrics


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    port, metrics = free_loopback_ports(2)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "berth",
            "serve",
            "--listen",
            f"127.0.0.1:{port}",
            "--metrics-listen",
            f"127.0.0.1:{metrics}",
            "--insecure-plaintext",
            "--grace",
            "5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "listening on port" in line, proc.stderr.read() if proc.stderr else ""
    yield Served(proc, port, metrics)
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_place_on_the_example_cluster_explains_every_node() -> None:
    out = berth(
        "place", "--cluster", str(EXAMPLE / "cluster.yaml"), "--pod", str(EXAMPLE / "pod.yaml")
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Placement: node-a" in text
    assert "Filter: 3 of 5 nodes feasible" in text
    assert (
        "node-c  UnschedulableAndUnresolvable by NodeUnschedulable: node(s) were unschedulable"
        in text
    )
    assert "node-d  Unschedulable by NodeResourcesFit: Insufficient cpu" in text
    # NodeResourcesFit's LeastAllocated score of the chosen node is 79; other plugins add
    # columns of their own.
    assert re.search(r"node-a\s.*\s79\s.*<- chosen", text), text


def test_place_reports_an_unschedulable_pod_like_upstream(tmp_path: Path) -> None:
    pod = tmp_path / "big.yaml"
    pod.write_text(
        "kind: Pod\nmetadata: {name: big}\nspec:\n  containers:\n  - name: c\n"
        "    resources: {requests: {cpu: '64'}}\n"
    )
    out = berth("place", "--cluster", str(EXAMPLE / "cluster.yaml"), "--pod", str(pod))
    assert out.returncode == 1, out.stderr
    assert (
        "0/5 nodes are available: 1 node(s) were unschedulable, 4 Insufficient cpu." in out.stdout
    )


def test_place_with_a_missing_file_says_which() -> None:
    out = berth("place", "--cluster", "nope.yaml", "--pod", str(EXAMPLE / "pod.yaml"))
    assert out.returncode == 2
    assert "cluster file 'nope.yaml' does not exist" in out.stderr


def test_serve_refuses_a_bad_config_naming_file_and_field(tmp_path: Path) -> None:
    cfg = tmp_path / "sched.yaml"
    cfg.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "profiles:\n- schedulerName: s\n  plugins:\n    filter:\n      enabled:\n"
        "      - name: NoSuchPlugin\n"
    )
    out = berth(
        "serve",
        "--config",
        str(cfg),
        "--listen",
        f"127.0.0.1:{free_loopback_port()}",
        "--insecure-plaintext",
        timeout=30,
    )
    assert out.returncode == 2
    assert str(cfg) in out.stderr
    assert "profiles[0].plugins.filter.enabled[0].name" in out.stderr
    assert "NoSuchPlugin" in out.stderr


def test_serve_refuses_a_taken_port() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = berth("serve", "--listen", f"127.0.0.1:{port}", "--insecure-plaintext", timeout=30)
    assert out.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in out.stderr


def test_serve_exposes_upstream_metric_names(served: Served) -> None:
    log = ClusterStateLog()
    log.upsert_node(make_node("a").capacity(cpu="4", memory="8Gi").obj())
    log.commit()
    with grpc.insecure_channel(f"127.0.0.1:{served.port}") as ch:
        resp = pb_grpc.SchedulingServiceStub(ch).Schedule(
            pb.ScheduleRequest(
                profile="default-scheduler", state=log.full_state(), pod=make_pod().obj()
            )
        )
    assert resp.node == "a"
    body = (
        urllib.request.urlopen(f"http://127.0.0.1:{served.metrics}/metrics", timeout=10)
        .read()
        .decode()
    )
    assert (
        'scheduler_framework_extension_point_duration_seconds_count{extension_point="Filter",'
        'profile="default-scheduler",status="Success"} 1.0' in body
    )
    assert "scheduler_plugin_execution_duration_seconds" in body


def test_serve_answers_configz_on_its_metrics_port(served: Served) -> None:
    """component-base configz: {"componentconfig": <the effective configuration>}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{served.metrics}/configz", timeout=10) as r:
        assert r.headers["Content-Type"] == "application/json"
        body = json.loads(r.read())
    config = body["componentconfig"]
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["profiles"][0]["schedulerName"] == "default-scheduler"
    assert config["podInitialBackoffSeconds"] == 1


def test_serve_offers_reflection_and_health(served: Served) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{served.port}") as ch:
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        responses = stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
        names = {s.name for r in responses for s in r.list_services_response.service}
    assert {"berth.v1.SchedulingService", "grpc.health.v1.Health"} <= names


def _wait_until_in_flight(served: Served, timeout: float = 30.0) -> None:
    """Until the server's berth_plugin_server_inflight_calls gauge shows a call."""
    deadline = time.monotonic() + timeout
    url = f"http://127.0.0.1:{served.metrics}/metrics"
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
        for line in text.splitlines():
            if line.startswith("berth_plugin_server_inflight_calls ") and float(line.split()[1]):
                return
        time.sleep(0.005)
    raise AssertionError(f"no call in flight on the server within {timeout}s")


def test_serve_logs_its_version_then_its_interpreter_first(served: Served) -> None:
    """As kube-scheduler starts its log (cmd/kube-scheduler/app/server.go Run: the
    version, then "Golang settings")."""
    served.proc.terminate()
    _, err = served.proc.communicate(timeout=30)
    first, second = err.splitlines()[:2]
    assert "Starting berth serve" in first and f'version="{berth_version}"' in first
    assert "Python settings" in second and f'executable="{sys.executable}"' in second


def test_sigterm_lets_in_flight_requests_finish_then_exits(served: Served) -> None:
    """Graceful shutdown: after SIGTERM the server stops taking new calls,
    answers those in flight, and exits 0."""
    log = ClusterStateLog()
    for i in range(5000):
        log.upsert_node(make_node(f"n{i}").capacity(cpu="4", memory="8Gi").obj())
    log.commit()
    with grpc.insecure_channel(f"127.0.0.1:{served.port}") as ch:
        stub = pb_grpc.SchedulingServiceStub(ch)
        future = stub.Schedule.future(
            pb.ScheduleRequest(
                profile="default-scheduler",
                state=log.full_state(),
                pod=make_pod().obj(),
                explain=True,
            )
        )
        # SIGTERM once the call is in flight (decoding 5000 nodes takes the server
        # far longer than this wait); before, it would be refused as a new call.
        _wait_until_in_flight(served)
        served.proc.send_signal(signal.SIGTERM)
        resp = future.result(timeout=30)
    assert resp.node
    assert served.proc.wait(timeout=30) == 0
    assert served.proc.stderr is not None
    stderr = served.proc.stderr.read()
    assert "server stopped" in stderr
    # The worker thread ended before the process did (RunningServer.stop).
    assert "plugin work still runs" not in stderr


def test_bench_cycle_runs_every_transport_and_places_every_pod() -> None:
    """A smoke run of the benchmark (figures are not asserted: benchmarks
    print them, docs/benchmarks.md records them)."""
    out = berth(
        "bench",
        "cycle",
        "--nodes",
        "120",
        "--cycles",
        "30",
        "--warmup",
        "5",
        "--batch",
        "10",
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith("| 120 |")]
    assert [r.split("|")[2].strip() for r in rows] == [
        "ScheduleStream",
        "Schedule (unary)",
        "ScheduleBatch",
        "in-process, no gRPC",
    ]
    # placed == cycles, and no resync was needed on a single replica.
    assert all(r.split("|")[-3].strip() == "30" and r.split("|")[-2].strip() == "0" for r in rows)
    # The interpreter it ran on is named (its build moves the figures).
    assert (
        f"[bench] Python: CPython {platform.python_version()} at {sys.executable} (" in out.stdout
    )


def test_place_asks_a_running_server(served: Served) -> None:
    out = berth(
        "place",
        "--cluster",
        str(EXAMPLE / "cluster.yaml"),
        "--pod",
        str(EXAMPLE / "pod.yaml"),
        "--server",
        f"127.0.0.1:{served.port}",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    assert '"node": "node-a"' in out.stdout


def test_place_says_when_no_server_answers() -> None:
    out = berth(
        "place",
        "--cluster",
        str(EXAMPLE / "cluster.yaml"),
        "--pod",
        str(EXAMPLE / "pod.yaml"),
        "--server",
        f"127.0.0.1:{free_loopback_port()}",
    )
    assert out.returncode == 2
    assert "UNAVAILABLE" in out.stderr
    assert "is 'berth serve' running at" in out.stderr
