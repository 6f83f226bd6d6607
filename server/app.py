"""Builds and runs the gRPC server: SchedulingService, grpc.health.v1,
reflection, metrics, graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Mapping
from dataclasses import dataclass

import grpc
from google.protobuf import symbol_database
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from berth.api.v1 import scheduling_pb2
from berth.framework.interfaces import Plugin
from berth.framework.profile import SchedulerConfig
from berth.framework.runtime import Framework, ProfileError
from berth.server import telemetry
from berth.server.admission import (
    DEFAULT_MAX_INFLIGHT_BYTES,
    DEFAULT_MAX_INFLIGHT_CALLS,
    Admission,
)
from berth.server.errors import Replica
from berth.server.identity import Callers
from berth.server.prologue import DEFAULT_SLICE_SECONDS
from berth.server.service import DEFAULT_MAX_BATCH_PODS, SchedulingService
from berth.server.state import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_CALLER_BYTES,
    DEFAULT_MAX_PER_CALLER,
    SnapshotStore,
)
from berth.tls.serving import ServerTLS

log = logging.getLogger(__name__)

SERVICE_NAME = scheduling_pb2.DESCRIPTOR.services_by_name["SchedulingService"].full_name
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


def service_handler(service: SchedulingService, traced: bool = False) -> grpc.GenericRpcHandler:
    """Handlers for every RPC of the service descriptor. Requests arrive as
    bytes: the service admits and parses them itself (server/prologue.py), so
    a call beyond the in-flight caps is refused before its request is parsed
    and a malformed message is answered INVALID_ARGUMENT naming the expected
    type (grpc's own deserializer would answer INTERNAL). Each call is
    counted and timed (server/telemetry.py); a ScheduleStream's messages are,
    each, by the service."""
    desc = scheduling_pb2.DESCRIPTOR.services_by_name["SchedulingService"]
    db = symbol_database.Default()
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in desc.methods:
        resp_cls = db.GetSymbol(method.output_type.full_name)
        impl = getattr(service, method.name)
        if method.name == "ScheduleStream" and not traced:
            impl = service.schedule_stream_direct
        if method.client_streaming and method.server_streaming:
            # Stream messages stay bytes; the service parses each and answers
            # a malformed one in-stream (ScheduleStreamResponse.error).
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                impl, request_deserializer=None, response_serializer=resp_cls.SerializeToString
            )
        elif method.client_streaming:
            # UploadState: the service parses (and admits) each part itself.
            handlers[method.name] = grpc.stream_unary_rpc_method_handler(
                telemetry.timed_call(method.name, impl),
                request_deserializer=None,
                response_serializer=resp_cls.SerializeToString,
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                telemetry.timed_call(method.name, impl),
                request_deserializer=None,
                response_serializer=resp_cls.SerializeToString,
            )
    return grpc.method_handlers_generic_handler(desc.full_name, handlers)


def build_frameworks(
    config: SchedulerConfig, registry: Mapping[str, type[Plugin]]
) -> dict[str, Framework]:
    """One Framework per profile; ProfileError names the profile at fault."""
    out: dict[str, Framework] = {}
    for profile in config.profiles:
        try:
            out[profile.scheduler_name] = Framework(
                profile, registry, config.percentage_of_nodes_to_score
            )
        except ProfileError as exc:
            raise ProfileError(f"{config.source}: {exc}") from exc
    return out


@dataclass(frozen=True)
class Limits:
    """What one replica takes at once (berth serve's flags of the same names)."""

    max_inflight_calls: int = DEFAULT_MAX_INFLIGHT_CALLS
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES
    max_states_per_caller: int = DEFAULT_MAX_PER_CALLER
    max_caller_state_bytes: int = DEFAULT_MAX_CALLER_BYTES
    max_state_bytes: int = DEFAULT_MAX_BYTES


# How long answers already handed to gRPC get to leave before its shutdown
# closes the connections (RunningServer.stop).
DRAIN_FLUSH_SECONDS = 0.2
# How long RunningServer.stop waits at least for the worker thread to end.
WORKER_JOIN_SECONDS = 5.0


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    health: health.aio.HealthServicer
    service: SchedulingService
    # --health-listen: a plaintext server with grpc.health.v1 only (probes
    # that cannot speak TLS), and its port.
    health_server: grpc.aio.Server | None = None
    health_port: int = 0

    async def stop(self, grace: float = 5.0) -> None:
        """Stop taking work, let in-flight RPCs finish within ``grace``."""
        await self.health.enter_graceful_shutdown()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        # gRPC core closes the connections as soon as its shutdown finds no
        # call running, which can cut off the answer a handler has just
        # returned (the caller then sees UNAVAILABLE, "Stream removed"). So the
        # calls in flight finish here first, and their answers get a moment to
        # leave, before the transport shuts down.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.service.admission.wait_idle(), deadline - loop.time())
        await asyncio.sleep(max(0.0, min(DRAIN_FLUSH_SECONDS, deadline - loop.time())))
        await self.server.stop(max(0.0, deadline - loop.time()))
        if self.health_server is not None:
            await self.health_server.stop(0)
        self.service.close()
        # The worker ends with the job it is on (a call cancelled at the grace
        # stops at its deadline or next slice) and those queued before close.
        timeout = max(WORKER_JOIN_SECONDS, deadline - loop.time())
        if not await asyncio.to_thread(self.service.worker.join, timeout):
            log.warning(
                "plugin work still runs %.1fs after the server stopped; the process "
                "exits when it ends (its call's deadline stops it at the next plugin)",
                timeout,
            )


async def start_server(
    config: SchedulerConfig,
    registry: Mapping[str, type[Plugin]],
    listen: str = "127.0.0.1:50051",
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    max_clusters: int = 16,
    trace: bool = True,
    max_batch_pods: int = DEFAULT_MAX_BATCH_PODS,
    slice_seconds: float = DEFAULT_SLICE_SECONDS,
    replica_id: str | None = None,
    tls: ServerTLS | None = None,
    health_listen: str | None = None,
    *,
    limits: Limits | None = None,
    caller_tokens: Mapping[str, str] | None = None,
) -> RunningServer:
    """``tls``: serve TLS (mTLS when it names a client CA) instead of
    plaintext; TLSFileError (a ValueError) when its files do not load.
    ``health_listen``: also serve grpc.health.v1, and nothing else, in
    plaintext at this address. ``limits``: the caps on calls in flight and
    on the state kept per caller (Limits' defaults are berth serve's).
    ``caller_tokens``: name -> token, the only callers taken
    (--caller-tokens; server/identity.py)."""
    lim = limits or Limits()
    frameworks = build_frameworks(config, registry)
    service = SchedulingService(
        config,
        frameworks,
        SnapshotStore(
            max_clusters,
            max_per_caller=lim.max_states_per_caller,
            max_bytes=lim.max_state_bytes,
            max_caller_bytes=lim.max_caller_state_bytes,
        ),
        max_batch_pods=max_batch_pods,
        replica=Replica(replica_id),
        slice_seconds=slice_seconds,
        callers=Callers(caller_tokens),
        admission=Admission(lim.max_inflight_calls, lim.max_inflight_bytes),
        # RunningServer.stop closes and joins it.
        daemon_worker=False,
    )
    interceptors = [telemetry.server_interceptor()] if trace else []
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.so_reuseport", 0),
        ],
    )
    server.add_generic_rpc_handlers((service_handler(service, traced=trace),))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (
            SERVICE_NAME,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ),
        server,
    )
    credentials = tls.credentials() if tls is not None else None
    port = _bind(server, listen, "--listen", credentials)
    health_server = None
    health_port = 0
    if health_listen:
        health_server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, health_server)
        health_port = _bind(health_server, health_listen, "--health-listen", None)
    await server.start()
    if health_server is not None:
        await health_server.start()
        log.info("grpc.health.v1 in plaintext on %s (port %d)", health_listen, health_port)
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info(
        "serving %s on %s (port %d, %s) as replica %s; profiles: %s",
        SERVICE_NAME,
        listen,
        port,
        _transport(tls),
        service.replica.id,
        ", ".join(frameworks),
    )
    return RunningServer(server, port, health_servicer, service, health_server, health_port)


def _transport(tls: ServerTLS | None) -> str:
    if tls is None:
        return "plaintext"
    if tls.client_ca is None:
        return f"TLS with {tls.cert}"
    return f"mTLS with {tls.cert}, client certificates from {tls.client_ca} required"


def _bind(
    server: grpc.aio.Server,
    listen: str,
    flag: str,
    credentials: grpc.ServerCredentials | None,
) -> int:
    port: int
    try:
        if credentials is None:
            port = server.add_insecure_port(listen)
        else:
            port = server.add_secure_port(listen, credentials)
    except RuntimeError as exc:
        port = 0
        log.debug("bind failed: %s", exc)
    if port == 0:
        raise OSError(
            f"cannot listen on {listen}: the address is in use or not available here; "
            f"pick another with {flag} HOST:PORT"
        )
    return port


async def serve_forever(running: RunningServer, grace: float) -> None:
    """Runs until SIGTERM/SIGINT, then shuts down gracefully."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("signal received: draining in-flight requests (grace %.1fs)", grace)
    await running.stop(grace)
    log.info("server stopped")
