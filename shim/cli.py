"""``berth shim``: run Berth as the named scheduler of a cluster."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from berth.tls import add_client_tls_flags

log = logging.getLogger("berth.shim")

# sys.setswitchinterval for the shim's process (CPython's default is 0.005 s).
GIL_SWITCH_INTERVAL = 0.001


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "shim",
        help="run the scheduler: watch the API server, schedule and bind pods",
        description=(
            "Run Berth as the scheduler of every pod whose spec.schedulerName names one of the "
            "configuration's profiles: watch nodes and pods, queue, run each scheduling cycle "
            "on the plugin service (the 'berth serve' replicas named by --plugin-server, else in "
            "this process), and "
            "bind. clientConnection and leaderElection come from the configuration as in "
            "kube-scheduler; flags override them."
        ),
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1); default: one "
        "profile 'default-scheduler' with the default plugins",
    )
    p.add_argument(
        "--plugin-server",
        "--server",
        dest="server",
        metavar="TARGET",
        help="plugin servers to run cycles on over gRPC: dns:///NAME:PORT (e.g. a headless "
        "Service: every address it resolves to is a replica, re-resolved every 30s and on "
        "failure), a list HOST:PORT,HOST:PORT, or one gRPC target (HOST:PORT, ipv4:A:P,B:P "
        "balanced by gRPC, a proxy). Calls go round robin over the replicas; one that is "
        "unavailable is skipped. Default: run the plugins in this process",
    )
    add_client_tls_flags(p, "--plugin-server")
    p.add_argument(
        "--plugin-server-mode",
        choices=("auto", "endpoints", "opaque"),
        default="auto",
        help="auto (default): one channel per replica for dns:/// and lists, one channel "
        "otherwise; endpoints: resolve HOST:PORT to its replicas too; opaque: one channel "
        "whatever the target, replicas told apart by the id in their answers",
    )
    p.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig for the API server (default: clientConnection.kubeconfig, else "
        "in-cluster, else $KUBECONFIG or ~/.kube/config)",
    )
    p.add_argument(
        "--metrics-listen",
        metavar="ADDR",
        default="",
        help="serve /healthz, /readyz and /metrics at HOST:PORT (e.g. 0.0.0.0:10259); off "
        "by default",
    )
    le = p.add_mutually_exclusive_group()
    le.add_argument(
        "--leader-elect",
        dest="leader_elect",
        action="store_true",
        default=None,
        help="take part in leader election (default: leaderElection.leaderElect, true)",
    )
    le.add_argument(
        "--no-leader-elect",
        dest="leader_elect",
        action="store_false",
        help="schedule without leader election (one replica only)",
    )
    p.add_argument(
        "--kube-api-qps",
        type=float,
        default=None,
        metavar="QPS",
        help="API requests per second (default: clientConnection.qps, 50)",
    )
    p.add_argument(
        "--kube-api-burst",
        type=int,
        default=None,
        metavar="N",
        help="API request burst (default: clientConnection.burst, 100)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=16,
        metavar="N",
        help="most queued pods one ScheduleBatch call schedules, each in its own cycle "
        "(default %(default)s; 1 sends every pod alone)",
    )
    p.add_argument(
        "--bind-connections",
        type=int,
        default=64,
        metavar="N",
        help="binding POSTs go from the event loop over at most N keep-alive connections to the "
        "API server; 0 sends them from worker threads through the kubernetes client's pool "
        "(default %(default)s; a proxy or an assert_hostname in the kubeconfig means threads)",
    )
    p.add_argument(
        "--assumed-pod-ttl",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="check an assumed pod with the API server when its bind has not shown up in the "
        "watch after this long (default %(default)s)",
    )
    p.add_argument(
        "--server-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="deadline of each call to the plugin server (default %(default)s)",
    )
    p.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        default=None,
        help="send OpenTelemetry traces to this OTLP/gRPC endpoint (default: "
        "$OTEL_EXPORTER_OTLP_ENDPOINT; no tracing when neither is set)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.verbose == 0:
        logging.getLogger().setLevel(logging.INFO)
    from berth.tls import client_tls_from_args
    from plugins.framework.config import ConfigError, default_config, load_config
    from plugins.registry import RegistryError, load_registry
    from server import telemetry
    from shim.app import ShimSettings
    from shim.app import run as run_shim
    from shim.kubeapi import ConfigurationError
    from shim.scheduler import ShimOptions

    # The plugins the in-process service runs; with --server the server has
    # its own, and these only check the configuration's names.
    try:
        registry = load_registry()
    except RegistryError as exc:
        print(f"berth shim: {exc}", file=sys.stderr)
        return 2
    try:
        config = load_config(args.config, registry) if args.config else default_config(registry)
    except ConfigError as exc:
        print(f"berth shim: invalid configuration: {exc}", file=sys.stderr)
        return 2
    if args.server is not None:
        from berth.client import parse_target

        try:
            parse_target(args.server)
        except ValueError as exc:
            print(f"berth shim: --plugin-server: {exc}", file=sys.stderr)
            return 2
    try:
        tls = client_tls_from_args(args)
    except ValueError as exc:
        print(f"berth shim: {exc}", file=sys.stderr)
        return 2
    if tls is not None and args.server is None:
        print(
            "berth shim: the --plugin-server-* TLS flags need --plugin-server (without it the "
            "plugins run in this process)",
            file=sys.stderr,
        )
        return 2
    if args.bind_connections < 0:
        print(
            f"berth shim: --bind-connections must be >= 0, got {args.bind_connections}",
            file=sys.stderr,
        )
        return 2
    for flag, value in (
        ("--batch-size", args.batch_size),
        ("--assumed-pod-ttl", args.assumed_pod_ttl),
    ):
        if value <= 0:
            print(f"berth shim: {flag} must be > 0, got {value}", file=sys.stderr)
            return 2
    traced = telemetry.setup_tracing("berth-shim", args.otlp_endpoint) is not None
    settings = ShimSettings(
        config=config,
        registry=registry,
        server=args.server,
        server_mode=args.plugin_server_mode,
        kubeconfig=args.kubeconfig,
        metrics_listen=args.metrics_listen,
        leader_elect=args.leader_elect,
        qps=args.kube_api_qps,
        burst=args.kube_api_burst,
        server_timeout=args.server_timeout,
        traced=traced,
        tls=tls,
        options=ShimOptions(
            batch_size=args.batch_size,
            assumed_ttl=args.assumed_pod_ttl,
            bind_connections=args.bind_connections,
        ),
    )
    # The shim's background threads (event writers, informers) spend their
    # time waiting on the API server, and each answer needs the GIL back from a
    # busy event loop, which CPython hands over only after its switch interval
    # (5 ms by default). Against a thread that never yields, eight event writers
    # wrote ~180 events/s at 5 ms and ~680/s at 1 ms (docs/benchmarks.md,
    # session 19).
    sys.setswitchinterval(GIL_SWITCH_INTERVAL)
    try:
        return asyncio.run(run_shim(settings))
    except ConfigurationError as exc:
        print(f"berth shim: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"berth shim: {exc}", file=sys.stderr)
        return 2
