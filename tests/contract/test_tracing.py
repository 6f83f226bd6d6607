"""One trace per cycle: the caller's span, the server's RPC span under it,
extension point and plugin spans under that; health checks untraced."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry import trace
from opentelemetry.instrumentation.grpc import aio_client_interceptors
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from berth.client import ClusterStateLog, SchedulingClient
from berth.framework.testing import make_node, make_pod
from berth.server.app import RunningServer

EXPORTER = InMemorySpanExporter()


def _install_provider() -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)


_install_provider()


async def test_client_server_and_plugin_spans_share_one_trace(
    traced_server: RunningServer,
) -> None:
    server = traced_server
    EXPORTER.clear()
    log = ClusterStateLog()
    log.upsert_node(make_node("a").capacity(cpu="4").labels(score="5").obj())
    log.upsert_node(make_node("b").capacity(cpu="4").labels(score="7").obj())
    log.commit()
    tracer = trace.get_tracer("test")
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{server.port}",
        interceptors=aio_client_interceptors(),  # type: ignore[no-untyped-call]
    ) as ch:
        with tracer.start_as_current_span("scheduling-attempt") as root:
            resp = await SchedulingClient(ch, log).schedule("contract", make_pod().obj())
        await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest())
    assert resp.node == "b"
    spans = EXPORTER.get_finished_spans()
    trace_id = root.get_span_context().trace_id
    by_name = {s.name: s for s in spans}
    # The server records no span for health checks (the client may).
    assert not [s for s in spans if "Health" in s.name and s.kind == trace.SpanKind.SERVER]
    spans = tuple(s for s in spans if "Health" not in s.name)
    assert all(s.context is not None and s.context.trace_id == trace_id for s in spans), [
        s.name for s in spans
    ]
    rpc_spans = [s for s in spans if s.name == "/berth.v1.SchedulingService/Schedule"]
    assert len(rpc_spans) == 2  # client and server
    server_span = next(s for s in rpc_spans if s.kind == trace.SpanKind.SERVER)
    client = next(s for s in rpc_spans if s.kind == trace.SpanKind.CLIENT)
    assert server_span.parent is not None and server_span.parent.span_id == client.context.span_id
    filter_ep = by_name["Filter"]
    assert filter_ep.parent is not None and filter_ep.parent.span_id == server_span.context.span_id
    plugin = by_name["Filter/ZoneFromPreFilter"]
    assert plugin.parent is not None and plugin.parent.span_id == filter_ep.context.span_id
    assert (
        plugin.attributes is not None and plugin.attributes["berth.plugin"] == "ZoneFromPreFilter"
    )
    assert "Score/LabelScore" in by_name
