"""OpenTelemetry and Prometheus wiring for the server process.

Traces: the server continues the caller's trace from gRPC metadata
(``traceparent``) through opentelemetry-instrumentation-grpc's aio server
interceptor; health checks and reflection are not traced. Spans go to an
OTLP endpoint when one is configured (``--otlp-endpoint`` or the standard
``OTEL_EXPORTER_OTLP_ENDPOINT``); otherwise tracing stays a no-op.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from opentelemetry import trace
from opentelemetry.instrumentation.grpc import aio_server_interceptor, filters
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

log = logging.getLogger(__name__)


def setup_tracing(service_name: str, otlp_endpoint: str | None) -> TracerProvider | None:
    endpoint = otlp_endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not endpoint:
        return None
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    log.info("sending traces to %s", endpoint)
    return provider


def server_interceptor() -> Any:
    """Continues the caller's trace; skips health checks and reflection."""
    return aio_server_interceptor(  # type: ignore[no-untyped-call]
        filter_=filters.negate(
            filters.any_of(filters.health_check(), filters.service_prefix("grpc.reflection"))
        )
    )
