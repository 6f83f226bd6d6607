"""Assembles a running shim: API access, the plugin service (gRPC or
in-process), leader election, health and metrics, the scheduler."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from berth.client import ClusterStateLog, Mode
from berth.client.tls import ClientTLS
from berth.framework.interfaces import Plugin
from berth.framework.profile import SchedulerConfig
from berth.framework.writes import config_writes
from berth.kube.rest import KubeApi
from berth.shim import debug
from berth.shim.extenders import ExtenderSetupError
from berth.shim.health import HealthServer
from berth.shim.healthchecks import ApiServerProbe, HealthChecks
from berth.shim.scheduler import Scheduler, ShimOptions
from berth.shim.service import PluginService
from berth.shim.serving import DebugRoutes, SecureServingOptions

if TYPE_CHECKING:
    # Imported where used: only with leader election, only with --record.
    from berth.shim.leader import LeaderElector
    from berth.shim.record import Recording

log = logging.getLogger(__name__)

# kube-scheduler's lease is kube-system/kube-scheduler; Berth runs beside it,
# so a configuration that leaves the default gets a lease of its own.
BERTH_LEASE_NAME = "berth-scheduler"

# kube-scheduler's exit status after losing its lease (server.go OnStoppedLeading:
# klog.FlushAndExit(klog.ExitFlushTimeout, 1)), so that it restarts and campaigns again.
EXIT_LEADERSHIP_LOST = 1

# What a user whose API access cannot be configured is told to do.
KUBECONFIG_HINT = "pass --kubeconfig FILE or set clientConnection.kubeconfig in the configuration"


@dataclass
class ShimSettings:
    config: SchedulerConfig
    # Plugins of the in-process service; None: plugins.registry.load_registry().
    registry: Mapping[str, type[Plugin]] | None = None
    # Plugin server target (berth shim --plugin-server): dns:///name:port, a list
    # host:port,host:port, or one gRPC target; None runs the plugins in-process.
    server: str | None = None
    server_mode: Mode = "auto"
    kubeconfig: str | None = None
    metrics_listen: str = ""
    # The secure port's TLS and delegated authn/authz; --insecure-metrics: plain HTTP, open.
    secure_serving: SecureServingOptions = field(default_factory=SecureServingOptions)
    insecure_metrics: bool = False
    leader_elect: bool | None = None
    qps: float | None = None
    burst: int | None = None
    server_timeout: float = 30.0
    traced: bool = False
    # TLS to the plugin servers (--plugin-server-ca/-cert/-key/-tls-name); None: plaintext.
    tls: ClientTLS | None = None
    options: ShimOptions = field(default_factory=ShimOptions)
    # berth shim --record DIR: record events and decisions there (shim/record.py).
    record: str | None = None


def _registry(settings: ShimSettings) -> Mapping[str, type[Plugin]]:
    if settings.registry is not None:
        return settings.registry
    from berth.plugins.registry import load_registry

    return load_registry()


def build_service(settings: ShimSettings, state: ClusterStateLog) -> PluginService:
    if settings.server:
        interceptors = []
        if settings.traced:
            from opentelemetry.instrumentation.grpc import aio_client_interceptors

            interceptors = list(aio_client_interceptors())  # type: ignore[no-untyped-call]
        svc = PluginService.over_grpc(
            settings.server,
            state,
            settings.server_timeout,
            mode=settings.server_mode,
            interceptors=interceptors,
            credentials=settings.tls.credentials if settings.tls else None,
            tls_name=settings.tls.server_name if settings.tls else None,
        )
        svc.stream = not settings.traced
        # What the plugins may write, from this configuration and this
        # process's registry: the server's answers cannot widen it.
        svc.declared_writes = config_writes(settings.config, _registry(settings))
        return svc
    from berth.server.app import build_frameworks
    from berth.server.service import SchedulingService

    registry = _registry(settings)
    service = SchedulingService(settings.config, build_frameworks(settings.config, registry))
    return PluginService.in_process(service, state)


# How long start-up may keep the cyclic collector paused waiting for the caches to
# sync (shim/cli.py run): a standby that delays its cache until it leads, or an API
# server that does not answer, gets it back after this.
COLLECTOR_PAUSE_LIMIT = 60.0


async def resume_collector(synced: asyncio.Event, limit: float = COLLECTOR_PAUSE_LIMIT) -> None:
    """Once ``synced`` is set, or after ``limit`` seconds, freezes every object
    that exists (start-up's modules and configuration, the first LISTs' nodes and
    pods: gc.freeze, so no collection traverses them again) and turns the cyclic
    collector back on; cancelled, it does so at once."""
    try:
        await asyncio.wait_for(synced.wait(), limit)
    except TimeoutError:
        log.info("caches not synced after %.0fs: cyclic garbage collection resumes", limit)
    finally:
        gc.freeze()
        gc.enable()


async def run(settings: ShimSettings) -> int:
    cfg = settings.config
    cc = cfg.client_connection
    api = KubeApi.from_kubeconfig(
        settings.kubeconfig or cc.kubeconfig or None,
        qps=settings.qps if settings.qps is not None else cc.qps,
        burst=settings.burst if settings.burst is not None else cc.burst,
        hint=KUBECONFIG_HINT,
    )
    profiles = [p.scheduler_name for p in cfg.profiles]
    recorder: Recording | None = None
    state = ClusterStateLog()
    if settings.record:
        from berth.shim.record import Recording, RecordingStateLog

        recorder = Recording(settings.record)
        recorder.start(cfg)
        state = RecordingStateLog(recorder)
    service = build_service(settings, state)
    try:
        scheduler = Scheduler(
            api,
            service,
            profiles,
            options=settings.options,
            initial_backoff=float(cfg.pod_initial_backoff_seconds),
            max_backoff=float(cfg.pod_max_backoff_seconds),
            extenders=cfg.extenders,
            record=recorder,
        )
    except ExtenderSetupError as setup_error:
        print(f"berth shim: {cfg.source}: {setup_error}", file=sys.stderr, flush=True)
        await service.close()
        if recorder is not None:
            recorder.close()
        return 2
    le = cfg.leader_election
    leader_elect = le.leader_elect if settings.leader_elect is None else settings.leader_elect
    elector: LeaderElector | None = None
    if leader_elect:
        from berth.shim.leader import LeaderElector

        name = BERTH_LEASE_NAME if le.resource_name == "kube-scheduler" else le.resource_name
        elector = LeaderElector(api, le, lease_name=name, lease_namespace=le.resource_namespace)
        # Every write of this process asks the elector's fence right before it is sent.
        api.fence = elector.fence

    def readiness() -> tuple[bool, str]:
        if scheduler.ready:
            return True, "ok: scheduling"
        if elector is not None and not elector.is_leader:
            return True, f"ok: standing by (lease held by {elector.observed_holder() or 'nobody'})"
        return False, "informers not synced yet"

    loop = asyncio.get_running_loop()
    # The secure port's authenticated routes (/configz, /debug/...): each
    # component adds its own here, before the port opens.
    routes = DebugRoutes(loop)
    dumper = debug.CacheDumper(scheduler.cache, scheduler.queue)
    debug.install(routes, cfg, dumper, loop)
    # debugger/signal.go: SIGUSR2 writes the cache and the queue to the log.
    loop.add_signal_handler(signal.SIGUSR2, dumper.log_all)
    # Why pods are pending (shim/explain.py; berth explain).
    routes.register("/debug/explain", scheduler.explainer.handle)
    health = None
    probe = None
    if settings.metrics_listen:
        secure = None if settings.insecure_metrics else settings.secure_serving.build(api)
        probe = ApiServerProbe(api)
        probe.start()
        checks = HealthChecks(
            readiness, watchdog=elector.check if elector is not None else None, api_server=probe
        )
        health = HealthServer(settings.metrics_listen, checks, secure, routes)
        health.start()
        log.info(
            "health and metrics on %s://%s (port %d)%s",
            health.scheme,
            settings.metrics_listen,
            health.port,
            " in plaintext, open to anyone (--insecure-metrics)"
            if secure is None
            else "; /metrics for callers the API server authorizes"
            + (" (self-signed certificate)" if secure.certificate.self_signed else ""),
        )

    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    where = "in-process plugin service"
    if settings.server:
        target = service.client.target
        where = (
            f"plugin servers at {settings.server} "
            + (
                "(one channel per replica, round robin)"
                if target is not None
                and target.kind in ("dns", "list")
                and settings.server_mode != "opaque"
                else "(one channel; replicas told apart by id)"
            )
            + (f" over {settings.tls.description}" if settings.tls else " in plaintext")
        )
    print(
        f"berth shim: scheduling for {', '.join(profiles)} with {where}"
        + (f"; leader election on lease {le.resource_namespace}/{name}" if elector else ""),
        flush=True,
    )
    lost = False

    async def lead() -> None:
        await scheduler.run()

    def on_lost() -> None:
        nonlocal lost
        lost = True
        # server.go OnStoppedLeading's words; the fence already refuses every write.
        log.error("leaderelection lost: stopping (exit status %d)", EXIT_LEADERSHIP_LOST)
        stop.set()

    async def campaign(elector: LeaderElector) -> None:
        # server.go Run: unless delayCacheUntilActive, the informers start and
        # sync before the election, so a standby holds a warm cache and
        # schedules at once when it takes over; with it, only once leading
        # (Scheduler.run starts them then).
        if not cfg.delay_cache_until_active:
            await scheduler.start_cache()
        await elector.run(lead, on_lost)

    # The process paused the cyclic collector for its start (shim/cli.py run): it
    # resumes once the first LISTs are in.
    collector: asyncio.Task[None] | None = None
    if not gc.isenabled():
        collector = asyncio.create_task(resume_collector(scheduler.synced))
    main: asyncio.Task[None]
    if elector is not None:
        main = asyncio.create_task(campaign(elector))
    else:
        main = asyncio.create_task(lead())
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({main, stopper}, return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if main in done and main.exception() is not None:
        exc = main.exception()
        if isinstance(exc, SystemExit):
            print(exc.code, flush=True)
            code = 2
        else:
            log.error("shim stopped on an error", exc_info=exc)
            code = 1
    log.info("stopping: %s", "leadership lost" if lost else "signal or end of work")
    await scheduler.stop()
    if elector is not None:
        await elector.stop()
    main.cancel()
    stopper.cancel()
    if collector is not None:
        collector.cancel()
        await asyncio.gather(collector, return_exceptions=True)
    await asyncio.gather(main, stopper, return_exceptions=True)
    await service.close()
    if health is not None:
        health.stop()
    if probe is not None:
        probe.stop()
    api.close()
    if recorder is not None:
        recorder.close()
        log.info("recording to %s closed: %d records", recorder.directory, recorder.written_records)
    c = scheduler.counters
    log.info(
        "shim stopped: %d cycles, %d bound, %d unschedulable attempts, %d errors",
        c.cycles,
        c.bound,
        c.unschedulable,
        c.errors,
    )
    # kube-scheduler exits non-zero when it loses its lease, so it restarts
    # and campaigns again.
    return EXIT_LEADERSHIP_LOST if lost else code


__all__ = [
    "COLLECTOR_PAUSE_LIMIT",
    "EXIT_LEADERSHIP_LOST",
    "ShimSettings",
    "build_service",
    "resume_collector",
    "run",
]
