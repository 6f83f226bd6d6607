"""Every RPC bounded (issue 22), against a real `berth serve` process: a cycle
that burns CPU for seconds runs off the server's event loop, so
grpc.health.v1 answers probes within 100 ms meanwhile (every one within a
kubelet probe's timeout); and a caller's deadline stops a cycle at the next
plugin, so what comes after never runs.

The CPU-heavy plugin is a test distribution made on the fly: a package and
its ``berth.plugins`` entry point in a directory the server finds on its
PYTHONPATH (how ``berth serve`` finds any installed plugin)."""

from __future__ import annotations

import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.client import TOKEN_METADATA, ClusterStateLog
from berth.framework.testing import make_node, make_pod
from tests.contract.serve import Server, berth_serve

PROFILE = "burn"
# How long the plugin burns CPU in one cycle.
BURN_SECONDS = 3.0
# The promise: a health check answers within this whatever runs...
HEALTH_PROMPT_SECONDS = 0.100
# ...but for what a loaded machine's own scheduling adds to a few probes: a
# probe's share allowed past HEALTH_PROMPT_SECONDS. A cycle that held up the
# health service (run on the event loop, or keeping the GIL) would delay all
# of them, by up to the whole burn.
HEALTH_LATE_SHARE = 0.05
# No probe may outlast a kubelet probe's default timeout (core/v1 Probe
# timeoutSeconds, 1 s): one that did would count as a failed probe.
HEALTH_DEADLINE_SECONDS = 1.0
BURN_ANNOTATION = "test.berth.dev/burn-seconds"

PLUGIN = textwrap.dedent(
    '''
    """A Filter that burns CPU (pure Python, holding the GIL between switches)
    for as long as the pod's annotation says, and a Score that writes the
    pods it scores to $BERTH_TEST_SCORED."""

    import os
    import time
    from typing import ClassVar

    from berth.framework.interfaces import FilterPlugin, NodeVerdicts, ScorePlugin

    ANNOTATION = "test.berth.dev/burn-seconds"


    class BurnCPU(FilterPlugin, ScorePlugin):
        name: ClassVar[str] = "BurnCPU"

        def filter_nodes(self, state, pod, nodes):
            seconds = float(pod.proto.annotations.get(ANNOTATION, "0"))
            end = time.perf_counter() + seconds
            x = 0
            while time.perf_counter() < end:
                for i in range(1000):
                    x = (x * 31 + i) % 1000003
            return NodeVerdicts.all_pass(len(nodes))

        def score(self, state, pod, node):
            with open(os.environ["BERTH_TEST_SCORED"], "a") as out:
                out.write(pod.name + "\\n")
            return 0
    '''
)

CONFIG = f"""\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: {PROFILE}
  plugins:
    filter:
      enabled:
      - name: BurnCPU
    score:
      enabled:
      - name: BurnCPU
        weight: 1
"""


def plugin_distribution(where: Path) -> Path:
    """A directory holding the package and its dist-info (entry point)."""
    pkg = where / "berth_burn_test"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(PLUGIN)
    info = where / "berth_burn_test-0.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: berth-burn-test\nVersion: 0.0.0\n")
    (info / "entry_points.txt").write_text("[berth.plugins]\nBurnCPU = berth_burn_test:BurnCPU\n")
    return where


@pytest.fixture
def burn_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Server, Path]]:
    scored = tmp_path / "scored.txt"
    scored.write_text("")
    monkeypatch.setenv("BERTH_TEST_SCORED", str(scored))
    dist = plugin_distribution(tmp_path / "dist")
    with berth_serve(tmp_path / "serve", config_text=CONFIG, python_path=[dist]) as server:
        yield server, scored


def cluster() -> ClusterStateLog:
    log = ClusterStateLog()
    for i in range(3):
        log.upsert_node(make_node(f"n{i}").capacity(cpu="8", memory="16Gi", pods=110).obj())
    log.commit()
    return log


def burning_pod(name: str, seconds: float) -> pb.ScheduleRequest:
    pod = make_pod(name).scheduler(PROFILE).req(cpu="100m").obj()
    pod.annotations[BURN_ANNOTATION] = str(seconds)
    return pb.ScheduleRequest(profile=PROFILE, pod=pod)


def schedule(
    addr: str, log: ClusterStateLog, request: pb.ScheduleRequest, timeout: float
) -> pb.ScheduleResponse:
    request.state.CopyFrom(log.full_state())
    with grpc.insecure_channel(addr) as ch:
        resp: pb.ScheduleResponse = pb_grpc.SchedulingServiceStub(ch).Schedule(
            request, timeout=timeout, metadata=((TOKEN_METADATA, log.token),)
        )
        return resp


def test_health_answers_probes_within_100ms_while_a_cycle_burns_cpu_for_seconds(
    burn_server: tuple[Server, Path],
) -> None:
    server, scored = burn_server
    log = cluster()
    done: list[pb.ScheduleResponse] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            done.append(schedule(server.addr, log, burning_pod("burner", BURN_SECONDS), 60))
        except BaseException as exc:
            errors.append(exc)

    cycle = threading.Thread(target=run)
    took: list[float] = []
    failures: list[str] = []
    with grpc.insecure_channel(server.addr) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        health.Check(health_pb2.HealthCheckRequest(), timeout=5)  # connected
        cycle.start()
        # Probes until the burning cycle is answered.
        while cycle.is_alive():
            began = time.perf_counter()
            try:
                resp = health.Check(
                    health_pb2.HealthCheckRequest(), timeout=HEALTH_DEADLINE_SECONDS
                )
                assert resp.status == health_pb2.HealthCheckResponse.SERVING
                took.append(time.perf_counter() - began)
            except grpc.RpcError as exc:
                failures.append(f"{exc.code().name}: {exc.details()}")
            time.sleep(0.02)
    cycle.join()
    assert not errors, errors
    assert done and done[0].node, done
    # The burn ran while the probes went: it is what the cycle took.
    assert "burner" in scored.read_text().split()
    tail = server.log.read_text(errors="replace")[-2000:]
    assert not failures, (
        f"{len(failures)} of {len(took) + len(failures)} health probes missed a kubelet "
        f"probe's {HEALTH_DEADLINE_SECONDS:.0f} s timeout while a cycle burned CPU: "
        f"{failures[:3]}\n{tail}"
    )
    assert len(took) >= 20, f"only {len(took)} probes went out during a {BURN_SECONDS}s cycle"
    late = sorted(t for t in took if t > HEALTH_PROMPT_SECONDS)
    assert len(late) <= HEALTH_LATE_SHARE * len(took), (
        f"{len(late)} of {len(took)} health probes took longer than "
        f"{HEALTH_PROMPT_SECONDS * 1000:.0f} ms while a cycle burned CPU (the slowest: "
        f"{[round(t * 1000) for t in late[-3:]]} ms)\n{tail}"
    )


def test_a_cycle_past_its_deadline_stops_at_the_next_plugin(
    burn_server: tuple[Server, Path],
) -> None:
    """The burning Filter outlives the call's deadline: the cycle stops before
    Score (which would record the pod), the client gets DEADLINE_EXCEEDED, and
    the server goes on serving the same cluster."""
    server, scored = burn_server
    log = cluster()
    with pytest.raises(grpc.RpcError) as err:
        schedule(server.addr, log, burning_pod("late", 1.5), timeout=0.5)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # One worker runs cycles in order: this one starts once the late one
    # has stopped, so by its answer the late cycle's fate is known.
    ok = schedule(server.addr, log, burning_pod("after", 0), timeout=30)
    assert ok.node
    names = scored.read_text().split()
    assert "after" in names
    assert "late" not in names, "Score ran for a cycle whose caller's deadline had passed"
    assert "stopped at its deadline" in server.log.read_text()


def test_a_streamed_cycle_past_its_timeout_millis_stops_and_is_answered_deadline(
    burn_server: tuple[Server, Path],
) -> None:
    """ScheduleStream messages have no gRPC deadline of their own: the
    request's timeout_millis is theirs, and the stream stays open."""
    server, scored = burn_server
    log = cluster()
    late = burning_pod("late-stream", 1.5)
    late.state.CopyFrom(log.full_state())
    late.timeout_millis = 300
    after = burning_pod("after-stream", 0)
    after.state.CopyFrom(log.full_state())
    with grpc.insecure_channel(server.addr) as ch:
        stream = pb_grpc.SchedulingServiceStub(ch).ScheduleStream(
            iter([late, after]), timeout=60, metadata=((TOKEN_METADATA, log.token),)
        )
        first, second = list(stream)
    assert first.WhichOneof("result") == "error", first
    assert first.error.reason == "DEADLINE"
    assert first.error.grpc_code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
    assert "the request's deadline passed" in first.error.message
    assert second.response.node
    names = scored.read_text().split()
    assert "after-stream" in names and "late-stream" not in names
