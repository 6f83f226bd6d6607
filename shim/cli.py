"""``berth shim``: run Berth as the named scheduler of a cluster."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import sys
from typing import TYPE_CHECKING

from berth import version_text
from berth.client.tls import add_client_tls_flags
from berth.kube.eventloop import new_event_loop
from berth.logs import log_start
from berth.shim.securedefaults import DEFAULT_ALWAYS_ALLOW_PATHS, DEFAULT_CACHE_TTL

if TYPE_CHECKING:
    from berth.framework.profile import SchedulerConfig
    from berth.shim.serving import SecureServingOptions

log = logging.getLogger("berth.shim")

# The name of kube-scheduler's profile, which pods with no spec.schedulerName get
# (k8s.io/api core/v1 DefaultSchedulerName).
DEFAULT_SCHEDULER = "default-scheduler"

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
        "profile 'default-scheduler' with the default plugins, which needs "
        "--allow-default-scheduler",
    )
    p.add_argument(
        "--allow-default-scheduler",
        action="store_true",
        help="schedule the pods of a profile named 'default-scheduler' (every pod that names "
        "no scheduler): only where no kube-scheduler runs, since both would race for each pod. "
        "Without it, such a profile (and running with no --config) is refused",
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
        "--insecure-plaintext",
        action="store_true",
        help="call the --plugin-server replicas in plaintext, without TLS: anyone on the path "
        "can read and change the cluster state and the answers. Without it, --plugin-server "
        "needs --plugin-server-ca (and -cert/-key for servers that require client certificates)",
    )
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
        help="serve /healthz, /readyz, /livez, /metrics, /configz and /debug/... over HTTPS at "
        "HOST:PORT (e.g. 0.0.0.0:10259), as kube-scheduler does: all but the health paths only "
        "to callers the API server authenticates (bearer token: TokenReview; client "
        "certificate: --client-ca-file) and authorizes (SubjectAccessReview of get on the "
        "path); off by default",
    )
    add_secure_serving_flags(p)
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
        default=32,
        metavar="N",
        help="binding POSTs and the scheduler's events go from the event loop over at most N "
        "keep-alive connections to the API server, the events on at most half of them and the "
        "other half the bindings' own; 0 sends both from worker threads through the kubernetes "
        "client's pool (default %(default)s; a proxy or an assert_hostname in the kubeconfig "
        "means threads)",
    )
    p.add_argument(
        "--explain-max-pods",
        type=int,
        default=2000,
        metavar="N",
        help="keep the last failed attempt of at most N pending pods in memory for "
        "'berth explain' (GET /debug/explain on the secure port; docs/explain.md), the "
        "oldest dropped first; 0 keeps none and turns the explain.berth.dev/result "
        "annotation off (default %(default)s)",
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
    p.add_argument(
        "--record",
        metavar="DIR",
        default=None,
        help="record the cluster events the shim sees and every scheduling decision in DIR "
        "(a new or empty directory; gzip'd JSON lines, cut in 64 MiB segments, stopping at "
        "1 GiB), for 'berth replay DIR' (docs/record-replay.md)",
    )
    p.add_argument("--version", action="version", version=version_text())
    # Logs at -v 0 unless given -v: a long-running process says what it does.
    p.set_defaults(func=run, default_verbosity=0)


def _duration(text: str) -> float:
    """Seconds from ``10s``, ``5m``, ``1h``, ``500ms`` (Go durations, as
    upstream's flags take them) or a plain number of seconds."""
    number, scale = text, 1.0
    for suffix, factor in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if text.endswith(suffix):
            number, scale = text[: -len(suffix)], factor
            break
    try:
        value = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration (e.g. 10s, 5m, 500ms)"
        ) from None
    if not 0 <= value <= 24 * 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: must lie between 0s and 24h")
    return value


def add_secure_serving_flags(p: argparse.ArgumentParser) -> None:
    """The secure port's flags, named as kube-scheduler names them."""
    g = p.add_argument_group(
        "secure serving (--metrics-listen)",
        "HTTPS and delegated authentication/authorization of /metrics, /configz and /debug/..., "
        "as kube-scheduler's secure port (its flag names). The ServiceAccount needs create on tokenreviews and "
        "subjectaccessreviews (the ClusterRole system:auth-delegator)",
    )
    g.add_argument(
        "--tls-cert-file",
        metavar="FILE",
        help="PEM serving certificate (chain, leaf first); default: a self-signed one for "
        "localhost and 127.0.0.1, made at start and kept in memory",
    )
    g.add_argument(
        "--tls-private-key-file", metavar="FILE", help="PEM private key of --tls-cert-file"
    )
    g.add_argument(
        "--client-ca-file",
        metavar="FILE",
        help="also authenticate callers by a client certificate this PEM CA signed (CN: user, "
        "O: groups)",
    )
    g.add_argument(
        "--authorization-always-allow-paths",
        metavar="PATHS",
        default=",".join(DEFAULT_ALWAYS_ALLOW_PATHS),
        help="comma-separated paths anyone may GET without authentication (a trailing * "
        "matches a prefix; default %(default)s)",
    )
    for flag, what in (
        ("--authentication-token-webhook-cache-ttl", "TokenReview answers"),
        ("--authorization-webhook-cache-authorized-ttl", "SubjectAccessReview allowances"),
        ("--authorization-webhook-cache-unauthorized-ttl", "SubjectAccessReview denials"),
    ):
        g.add_argument(
            flag,
            type=_duration,
            default=DEFAULT_CACHE_TTL,
            metavar="DURATION",
            help=f"how long {what} are cached (default 10s, as upstream)",
        )
    g.add_argument(
        "--insecure-metrics",
        action="store_true",
        help="serve --metrics-listen, its /configz and /debug/... included, over plain HTTP to "
        "anyone instead (no TLS, no authentication): for a workstation or tests, never a "
        "reachable address",
    )


def secure_serving_from_args(args: argparse.Namespace) -> SecureServingOptions | None:
    """The secure port's options (None: --insecure-metrics); ValueError names
    the flag at fault."""
    from berth.shim.serving import SecureServingOptions, ServingCertificate

    tls_flags = [
        f
        for f, v in (
            ("--tls-cert-file", args.tls_cert_file),
            ("--tls-private-key-file", args.tls_private_key_file),
            ("--client-ca-file", args.client_ca_file),
        )
        if v is not None
    ]
    if args.insecure_metrics:
        if tls_flags:
            raise ValueError(f"--insecure-metrics serves plain HTTP: drop {', '.join(tls_flags)}")
        return None
    if (args.tls_cert_file is None) != (args.tls_private_key_file is None):
        raise ValueError("--tls-cert-file and --tls-private-key-file go together")
    paths = tuple(p.strip() for p in args.authorization_always_allow_paths.split(",") if p.strip())
    for path in paths:
        if not path.startswith("/"):
            raise ValueError(f"--authorization-always-allow-paths: {path!r} must start with /")
    return SecureServingOptions(
        certificate=ServingCertificate(
            args.tls_cert_file, args.tls_private_key_file, args.client_ca_file
        ),
        always_allow_paths=paths,
        token_ttl=args.authentication_token_webhook_cache_ttl,
        allowed_ttl=args.authorization_webhook_cache_authorized_ttl,
        denied_ttl=args.authorization_webhook_cache_unauthorized_ttl,
    )


def default_scheduler_refusal(
    config: SchedulerConfig, path: str | None, allowed: bool
) -> str | None:
    """Why the shim will not start with ``config``, or None. A profile named
    ``default-scheduler`` takes every pod that names no scheduler, the pods
    the cluster's kube-scheduler schedules: both would bind each one, so the
    shim runs such a profile only when told to (``--allow-default-scheduler``)."""
    if allowed:
        return None
    for i, profile in enumerate(config.profiles):
        if profile.scheduler_name != DEFAULT_SCHEDULER:
            continue
        where = (
            f"{path}: profiles[{i}].schedulerName is {DEFAULT_SCHEDULER!r}"
            if path
            else f"without --config the one profile is {DEFAULT_SCHEDULER!r}"
        )
        return (
            f"{where}: Berth would schedule every pod that names no scheduler, racing the "
            "cluster's kube-scheduler for each one. Give the profile a name of its own (e.g. "
            "schedulerName: berth-scheduler in a --config file, and spec.schedulerName: "
            "berth-scheduler in the pods Berth should place), or pass "
            "--allow-default-scheduler if no other scheduler runs in this cluster"
        )
    return None


def run(args: argparse.Namespace) -> int:
    # Start-up creates ~100,000 objects that live as long as the process (modules,
    # classes, functions, the plugin registry, the configuration, then the first LISTs'
    # nodes and pods), and the cyclic collector would traverse them over a hundred times
    # while they are being created (~10% of the start-up imports' CPU, measured with
    # gc.callbacks). So it is off until they exist: shim/app.py run freezes them
    # (gc.freeze: a permanent generation no collection traverses again, full ones
    # included) and turns it back on once the caches have synced, or after
    # app.COLLECTOR_PAUSE_LIMIT if they have not.
    gc.disable()
    try:
        return _run(args)
    finally:
        gc.enable()


def _run(args: argparse.Namespace) -> int:
    from berth.client.tls import client_tls_from_args
    from berth.framework.config import ConfigError, default_config, load_config
    from berth.kube.config import ConfigurationError
    from berth.plugins.registry import RegistryError, load_registry
    from berth.shim.app import ShimSettings
    from berth.shim.app import run as run_shim
    from berth.shim.scheduler import ShimOptions
    from berth.shim.serving import SecureServingOptions

    log_start(log, "berth shim")
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
    if args.insecure_plaintext and (tls is not None or args.server is None):
        print(
            "berth shim: --insecure-plaintext "
            + (
                "and the --plugin-server-* TLS flags exclude each other"
                if tls is not None
                else "needs --plugin-server (without it the plugins run in this process)"
            ),
            file=sys.stderr,
        )
        return 2
    if args.server is not None and tls is None and not args.insecure_plaintext:
        print(
            f"berth shim: --plugin-server {args.server} would be called in plaintext. Give "
            "--plugin-server-ca FILE (the CA of the servers' certificates; with "
            "--plugin-server-cert FILE --plugin-server-key FILE for servers run with "
            "--tls-client-ca) to call them over TLS, or --insecure-plaintext to call them in "
            "plaintext anyway (their 'berth serve' needs --insecure-plaintext too)",
            file=sys.stderr,
        )
        return 2
    try:
        secure_serving = secure_serving_from_args(args)
    except ValueError as exc:
        print(f"berth shim: {exc}", file=sys.stderr)
        return 2
    if secure_serving is not None and not args.metrics_listen:
        given = [f for f in ("tls_cert_file", "client_ca_file") if getattr(args, f) is not None]
        if given:
            print(
                "berth shim: --tls-cert-file and --client-ca-file are for --metrics-listen, "
                "which is off",
                file=sys.stderr,
            )
            return 2
    if args.explain_max_pods < 0:
        print(
            f"berth shim: --explain-max-pods must be >= 0, got {args.explain_max_pods}",
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
    refusal = default_scheduler_refusal(config, args.config, args.allow_default_scheduler)
    if refusal:
        print(f"berth shim: {refusal}", file=sys.stderr)
        return 2
    # server/telemetry.py setup_tracing's endpoint: without one there is no tracing, and its
    # module (grpc's and prometheus' metrics, OpenTelemetry's set-up) is not imported.
    endpoint = args.otlp_endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    traced = False
    if endpoint:
        from berth.server import telemetry

        traced = telemetry.setup_tracing("berth-shim", endpoint) is not None
    settings = ShimSettings(
        config=config,
        registry=registry,
        server=args.server,
        server_mode=args.plugin_server_mode,
        kubeconfig=args.kubeconfig,
        metrics_listen=args.metrics_listen,
        secure_serving=secure_serving or SecureServingOptions(),
        insecure_metrics=secure_serving is None,
        leader_elect=args.leader_elect,
        qps=args.kube_api_qps,
        burst=args.kube_api_burst,
        server_timeout=args.server_timeout,
        traced=traced,
        tls=tls,
        options=ShimOptions(
            # parallelism bounds the shim's concurrent API writes, preemption's
            # victim deletions among them, as upstream's Parallelizer bounds
            # executor.go prepareCandidate's deletions.
            bind_workers=config.parallelism,
            batch_size=args.batch_size,
            assumed_ttl=args.assumed_pod_ttl,
            bind_connections=args.bind_connections,
            explain_entries=args.explain_max_pods,
        ),
        record=args.record,
    )
    # The shim's background threads (informers, API workers, and event writes
    # where they go through events.ThreadedSink) spend their time waiting on the
    # API server, and each answer needs the GIL back from a busy event loop,
    # which CPython hands over only after its switch interval (5 ms by default).
    # A shorter interval lets those threads' answers in sooner while the loop is
    # busy (docs/benchmarks.md measures event writes at 5 ms and 1 ms).
    sys.setswitchinterval(GIL_SWITCH_INTERVAL)
    try:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            return runner.run(run_shim(settings))
    except ConfigurationError as exc:
        print(f"berth shim: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"berth shim: {exc}", file=sys.stderr)
        return 2
