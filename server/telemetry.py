"""OpenTelemetry and Prometheus wiring for the server process.

Metrics (``berth serve --metrics-listen``): every call the server answers is
counted by method and gRPC status code and timed
(``berth_plugin_server_calls_total{method,code}``,
``berth_plugin_server_call_duration_seconds{method}``); a call is a unary RPC,
an UploadState stream, or one message of a ScheduleStream (whose refusals are
answered in-stream with their code), as admission counts calls
(server/admission.py). The plugins' own metrics are framework/observe.py's.

Traces: the server continues the caller's trace from gRPC metadata
(``traceparent``) through opentelemetry-instrumentation-grpc's aio server
interceptor; health checks and reflection are not traced. Spans go to an
OTLP endpoint when one is configured (``--otlp-endpoint`` or the standard
``OTEL_EXPORTER_OTLP_ENDPOINT``); otherwise tracing stays a no-op.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

import grpc
from prometheus_client import Counter, Histogram

# OpenTelemetry is imported when tracing is configured: a process without an
# OTLP endpoint never loads it (tests/unit/cli/test_startup.py).
if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

log = logging.getLogger(__name__)

R = TypeVar("R")

# 0.5 ms to ~16 s: a cycle over a few nodes to a full state of a large cluster.
_CALL_BUCKETS: Final = tuple(0.0005 * 2**i for i in range(16))

CALLS = Counter(
    "berth_plugin_server_calls_total",
    "Calls this plugin server answered (unary RPCs, UploadState streams, ScheduleStream "
    "messages), by method and gRPC status code.",
    ["method", "code"],
)
CALL_DURATION = Histogram(
    "berth_plugin_server_call_duration_seconds",
    "Time this plugin server took to answer a call (unary RPC, UploadState stream, "
    "ScheduleStream message), by method.",
    ["method"],
    buckets=_CALL_BUCKETS,
)

_calls: dict[tuple[str, str], Any] = {}
_durations: dict[str, Any] = {}
# gRPC status codes by their numeric value, for codes given as numbers.
_CODE_NAMES: Final[dict[int, str]] = {code.value[0]: code.name for code in grpc.StatusCode}


def code_name(code: object) -> str:
    """A gRPC status code's name (``OK``, ``RESOURCE_EXHAUSTED``, ...), from a
    grpc.StatusCode or its number; ``UNKNOWN`` for anything else."""
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    if isinstance(code, int):
        return _CODE_NAMES.get(code, "UNKNOWN")
    return "UNKNOWN"


def call_done(method: str, code: str, seconds: float) -> None:
    key = (method, code)
    counter = _calls.get(key)
    if counter is None:
        counter = _calls[key] = CALLS.labels(method, code)
    counter.inc()
    histogram = _durations.get(method)
    if histogram is None:
        histogram = _durations[method] = CALL_DURATION.labels(method)
    histogram.observe(seconds)


def timed_call(
    method: str, impl: Callable[[Any, Any], Awaitable[R]]
) -> Callable[[Any, Any], Awaitable[R]]:
    """``impl`` (a unary or stream-unary handler) counted and timed as
    ``method``: OK when it returns, the code it aborted with, CANCELLED when
    the caller went away, UNKNOWN when it raised anything else."""

    @functools.wraps(impl)
    async def handler(request: Any, context: Any) -> R:
        start = time.perf_counter()
        code = "UNKNOWN"
        try:
            result = await impl(request, context)
            code = "OK"
            return result
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        except Exception:
            code = code_name(context.code())
            raise
        finally:
            call_done(method, code, time.perf_counter() - start)

    return handler


def setup_tracing(service_name: str, otlp_endpoint: str | None) -> TracerProvider | None:
    endpoint = otlp_endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not endpoint:
        return None
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    log.info("sending traces to %s", endpoint)
    return provider


def server_interceptor() -> Any:
    """Continues the caller's trace; skips health checks and reflection."""
    from opentelemetry.instrumentation.grpc import aio_server_interceptor, filters

    return aio_server_interceptor(  # type: ignore[no-untyped-call]
        filter_=filters.negate(
            filters.any_of(filters.health_check(), filters.service_prefix("grpc.reflection"))
        )
    )
