"""One trace per scheduling attempt, across processes: ``berth shim`` and ``berth serve``
both export over OTLP (the standard exporter, configured by --otlp-endpoint) to a
collector this test runs, and the shim's spans (attempt, queue wait, Bind) and the
server's spans (the Schedule RPC, extension points, plugins) share one trace id."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as tpb
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as tgrpc

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.ports import free_port
from berth.dev.localcluster.process import local_serve_command
from berth.dev.localcluster.testing import NodeFactory
from berth.kube.rest import KubeApi
from tests.integration.shimtools import (
    Proc,
    Shim,
    profile_for,
    running,
    wait_all_bound,
    write_config,
)

pytestmark = pytest.mark.integration


class Collector(tgrpc.TraceServiceServicer):
    """An OTLP/gRPC trace receiver that keeps (service, span name, trace id, span id, parent)."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str, bytes, bytes, bytes]] = []
        self.lock = threading.Lock()

    def Export(
        self, request: tpb.ExportTraceServiceRequest, context: Any
    ) -> tpb.ExportTraceServiceResponse:
        with self.lock:
            for rs in request.resource_spans:
                service = next(
                    (
                        a.value.string_value
                        for a in rs.resource.attributes
                        if a.key == "service.name"
                    ),
                    "",
                )
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.spans.append(
                            (service, s.name, s.trace_id, s.span_id, s.parent_span_id)
                        )
        return tpb.ExportTraceServiceResponse()


@pytest.fixture
def collector() -> Iterator[tuple[Collector, int]]:
    c = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    tgrpc.add_TraceServiceServicer_to_server(c, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield c, port
    finally:
        server.stop(0)


def test_one_trace_holds_the_shims_and_the_servers_spans(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    collector: tuple[Collector, int],
) -> None:
    coll, otlp_port = collector
    endpoint = f"http://127.0.0.1:{otlp_port}"
    profile = profile_for(namespace)
    config = write_config(tmp_path / "c.yaml", profile)
    fake_nodes(2, cpu="4")
    port = free_port()
    serve = Proc(
        [*local_serve_command(config, port), "--otlp-endpoint", endpoint],
        tmp_path / "serve.log",
    ).start()
    shim = Shim(
        config,
        cluster.kubeconfig,
        tmp_path / "shim.log",
        server=f"127.0.0.1:{port}",
        extra=["--otlp-endpoint", endpoint, "--v=2"],
    )
    with running(serve):
        with running(shim.start()):
            objects.create_pods(
                kube, [objects.pod("traced", namespace=namespace, scheduler_name=profile)]
            )
            wait_all_bound(kube, namespace, 1, timeout=60)
        # Stopping flushes the batch span processors of both processes.
        serve.stop()
    with coll.lock:
        spans = list(coll.spans)
    attempts = [s for s in spans if s[0] == "berth-shim" and s[1] == "scheduling_attempt"]
    assert len(attempts) == 1, spans
    trace_id = attempts[0][2]
    in_trace = [s for s in spans if s[2] == trace_id]
    names = {(svc, name) for svc, name, *_ in in_trace}
    assert ("berth-shim", "queue_wait") in names
    assert ("berth-shim", "Bind") in names
    # The server continued the shim's trace: its RPC span and the framework's spans.
    assert ("berth-server", "/berth.v1.SchedulingService/Schedule") in names, names
    assert any(
        svc == "berth-server" and name != "/berth.v1.SchedulingService/Schedule"
        for svc, name in names
    ), names
    server_rpc = next(
        s
        for s in in_trace
        if s[0] == "berth-server" and s[1] == "/berth.v1.SchedulingService/Schedule"
    )
    client_rpc_ids = {s[3] for s in in_trace if s[0] == "berth-shim"}
    assert server_rpc[4] in client_rpc_ids  # parented by a shim span
    # The shim's per-pod log line names the attempt's trace (berth/logs.py TraceIdFilter).
    bound = [line for line in shim.text().splitlines() if "Successfully bound pod to node" in line]
    assert len(bound) == 1, shim.text()[-3000:]
    assert f'pod="{namespace}/traced"' in bound[0]
    assert f'trace_id="{trace_id.hex()}"' in bound[0], bound[0]
