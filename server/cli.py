"""``berth serve``: run the plugin server."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from berth import version_text
from berth.logs import log_start

if TYPE_CHECKING:
    from berth.tls.serving import ServerTLS

log = logging.getLogger("berth.serve")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="run the gRPC plugin server",
        description=(
            "Run the stateless gRPC plugin server (berth.v1.SchedulingService) for the "
            "profiles of a KubeSchedulerConfiguration file. Replicas are interchangeable: "
            "run as many as load needs behind one Service. Each process answers as a "
            "replica with a random id (trailing metadata berth-replica)."
        ),
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) file; "
        "default: one profile 'default-scheduler' with the default plugins",
    )
    p.add_argument(
        "--listen",
        metavar="ADDR",
        default="127.0.0.1:50051",
        help="gRPC address to listen on (default %(default)s). The API is served over TLS "
        "(--tls-cert, --tls-key), or in plaintext only with --insecure-plaintext",
    )
    tls = p.add_argument_group(
        "transport security",
        "TLS for the gRPC API. The files are read at start and again at the first handshake "
        "after any of them changes (a renewed Secret): new connections get the new "
        "certificate, open ones keep theirs",
    )
    tls.add_argument(
        "--tls-cert",
        metavar="FILE",
        help="serve TLS with this PEM certificate (chain, leaf first); needs --tls-key",
    )
    tls.add_argument("--tls-key", metavar="FILE", help="PEM private key of --tls-cert")
    tls.add_argument(
        "--tls-client-ca",
        metavar="FILE",
        help="require a client certificate signed by this PEM CA (bundle) and refuse "
        "clients without one (mTLS); needs --tls-cert",
    )
    tls.add_argument(
        "--insecure-plaintext",
        "--insecure-listen",
        dest="insecure_plaintext",
        action="store_true",
        help="serve the gRPC API in plaintext, without TLS: anyone who reaches the port can "
        "call it and read what callers send, so only on loopback, behind a NetworkPolicy or on "
        "a trusted network (--insecure-listen is the old name)",
    )
    tls.add_argument(
        "--health-listen",
        metavar="ADDR",
        default="",
        help="also serve grpc.health.v1 (and nothing else) in plaintext at ADDR, e.g. "
        "0.0.0.0:50052 for kubelet gRPC probes, which cannot speak TLS; off by default",
    )
    p.add_argument(
        "--metrics-listen",
        metavar="ADDR",
        default="",
        help="serve Prometheus metrics, and /configz (the effective configuration), over plain "
        "HTTP to anyone at ADDR (host:port), e.g. 0.0.0.0:10261; off by default",
    )
    p.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        default=None,
        help="send OpenTelemetry traces to this OTLP/gRPC endpoint "
        "(default: $OTEL_EXPORTER_OTLP_ENDPOINT; no tracing when neither is set)",
    )
    p.add_argument(
        "--max-message-bytes",
        type=int,
        default=64 * 1024 * 1024,
        metavar="N",
        help="largest request or response accepted (default %(default)s); larger ones get "
        "RESOURCE_EXHAUSTED",
    )
    p.add_argument(
        "--max-clusters",
        type=int,
        default=16,
        metavar="N",
        help="cluster snapshots cached at once, all callers together; beyond, the caller "
        "holding the most gives up its least recently used (it resends it in full when it "
        "needs it), else a snapshot unused for 5 minutes goes; when every other snapshot "
        "is its caller's only one and in use, a new caller's state is refused with "
        "RESOURCE_EXHAUSTED (OVERLOADED) instead (default %(default)s)",
    )
    limits = p.add_argument_group(
        "limits",
        "What one replica takes at once. A call beyond the in-flight caps is refused at once "
        "with RESOURCE_EXHAUSTED (reason OVERLOADED) and berth's client retries it after a "
        "backoff; callers are told apart by their mTLS certificate or berth-caller-token "
        "metadata, and each caller's snapshots are capped so none can evict another's",
    )
    limits.add_argument(
        "--max-inflight-calls",
        type=int,
        default=64,
        metavar="N",
        help="calls (unary calls and stream messages) served at once (default %(default)s)",
    )
    limits.add_argument(
        "--max-inflight-bytes",
        type=int,
        default=256 * 2**20,
        metavar="N",
        help="bytes of the requests served at once; one request larger than this is still "
        "taken when nothing else is in flight (default %(default)s, 256 MiB)",
    )
    limits.add_argument(
        "--max-states-per-caller",
        type=int,
        default=4,
        metavar="N",
        help="cluster snapshots one caller may hold; its own least recently used goes beyond "
        "(default %(default)s)",
    )
    limits.add_argument(
        "--max-caller-state-bytes",
        type=int,
        default=2**30,
        metavar="N",
        help="bytes of cluster state (objects' wire size) one caller may hold; a larger full "
        "state is refused with RESOURCE_EXHAUSTED (reason STATE_TOO_LARGE) "
        "(default %(default)s, 1 GiB)",
    )
    limits.add_argument(
        "--max-state-bytes",
        type=int,
        default=2 * 2**30,
        metavar="N",
        help="bytes of cluster state held for all callers together (default %(default)s, 2 GiB)",
    )
    limits.add_argument(
        "--caller-tokens",
        metavar="FILE",
        default=None,
        help="take only the callers this file lists, one 'NAME TOKEN' a line (tokens of 16+ "
        "characters, sent in berth-caller-token metadata; berth shim and berth place send "
        "$BERTH_CALLER_TOKEN); others get UNAUTHENTICATED. mTLS clients are known by their "
        "certificate instead. Without it any caller is taken and kept apart by its token",
    )
    p.add_argument(
        "--max-batch-pods",
        type=int,
        default=256,
        metavar="N",
        help="most pods one ScheduleBatch call may carry; more is RESOURCE_EXHAUSTED "
        "(reason BATCH_TOO_LARGE) and the caller splits the batch (default %(default)s). "
        "A batch holds its cluster's snapshot for its whole run and stops at its deadline",
    )
    p.add_argument(
        "--slice-ms",
        type=float,
        default=2.0,
        metavar="MS",
        help="longest a ScheduleBatch or a large full state works on the plugin worker "
        "without letting other calls in: other callers' clusters wait at most about this "
        "long (health checks never wait: plugins run off the event loop) "
        "(default %(default)s)",
    )
    p.add_argument(
        "--grace",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="on SIGTERM, time in-flight requests get to finish (default %(default)s)",
    )
    p.add_argument(
        "--list-plugins",
        action="store_true",
        help="print the plugins this server can run (in-tree and installed through the "
        "berth.plugins entry points) and exit; the same as 'berth plugins'",
    )
    p.add_argument("--version", action="version", version=version_text())
    # Logs at -v 0 unless given -v: a long-running process says what it does.
    p.set_defaults(func=run, default_verbosity=0)


def run(args: argparse.Namespace) -> int:
    # As in berth shim (shim/cli.py run): the cyclic collector is off while start-up
    # creates the objects that live as long as the process (modules, numpy, the plugins,
    # the configuration and the profiles' frameworks), which are then frozen
    # (gc.freeze: no collection traverses them again) once the server listens.
    gc.disable()
    try:
        return _run(args)
    finally:
        gc.enable()


def _run(args: argparse.Namespace) -> int:
    from berth.framework.config import ConfigError, default_config, load_config
    from berth.framework.discovery import print_listing
    from berth.framework.runtime import ProfileError
    from berth.plugins.registry import RegistryError, load_registry
    from berth.server import telemetry
    from berth.server.app import Limits, serve_forever, start_server
    from berth.tls.serving import TLSFileError

    if args.list_plugins:
        return print_listing(load_registry(strict=False), sys.stdout)
    log_start(log, "berth serve")
    for flag, value in (
        ("--max-clusters", args.max_clusters),
        ("--max-batch-pods", args.max_batch_pods),
        ("--max-inflight-calls", args.max_inflight_calls),
        ("--max-inflight-bytes", args.max_inflight_bytes),
        ("--max-states-per-caller", args.max_states_per_caller),
        ("--max-caller-state-bytes", args.max_caller_state_bytes),
        ("--max-state-bytes", args.max_state_bytes),
    ):
        if value < 1:
            print(f"berth serve: {flag} must be at least 1, got {value}", file=sys.stderr)
            return 2
    if not 0 < args.slice_ms <= 1000:
        print(
            f"berth serve: --slice-ms must lie in (0, 1000], got {args.slice_ms}", file=sys.stderr
        )
        return 2
    try:
        tls = server_tls(args)
    except ValueError as exc:
        print(f"berth serve: {exc}", file=sys.stderr)
        return 2
    tokens = None
    if args.caller_tokens is not None:
        from berth.server.identity import CallerTokensError, load_tokens

        try:
            tokens = load_tokens(Path(args.caller_tokens))
        except CallerTokensError as exc:
            print(f"berth serve: {exc}", file=sys.stderr)
            return 2
    try:
        registry = load_registry()
    except RegistryError as exc:
        print(f"berth serve: {exc}", file=sys.stderr)
        return 2
    out_of_tree = [f"{n} ({s})" for n, s in registry.sources.items() if not s.in_tree]
    if out_of_tree:
        log.info("out-of-tree plugins: %s", "; ".join(out_of_tree))
    try:
        config = load_config(args.config, registry) if args.config else default_config(registry)
    except ConfigError as exc:
        print(f"berth serve: invalid configuration: {exc}", file=sys.stderr)
        return 2
    tracing = telemetry.setup_tracing("berth-server", args.otlp_endpoint) is not None
    if args.metrics_listen:
        from berth.server import metricsport

        try:
            metricsport.start(args.metrics_listen, config)
        except (OSError, ValueError) as exc:
            print(
                f"berth serve: cannot serve metrics on {args.metrics_listen!r}: {exc}",
                file=sys.stderr,
            )
            return 2
        log.info("metrics and configz on http://%s/metrics, /configz", args.metrics_listen)

    async def main() -> int:
        try:
            running = await start_server(
                config,
                registry,
                args.listen,
                max_message_bytes=args.max_message_bytes,
                trace=tracing,
                max_clusters=args.max_clusters,
                max_batch_pods=args.max_batch_pods,
                slice_seconds=args.slice_ms / 1000,
                tls=tls,
                health_listen=args.health_listen or None,
                limits=Limits(
                    max_inflight_calls=args.max_inflight_calls,
                    max_inflight_bytes=args.max_inflight_bytes,
                    max_states_per_caller=args.max_states_per_caller,
                    max_caller_state_bytes=args.max_caller_state_bytes,
                    max_state_bytes=args.max_state_bytes,
                ),
                caller_tokens=tokens,
            )
        except (OSError, ProfileError, TLSFileError) as exc:
            print(f"berth serve: {exc}", file=sys.stderr)
            return 2
        # A line scripts can wait for.
        print(f"berth serve: listening on port {running.port}", flush=True)
        gc.freeze()
        gc.enable()
        await serve_forever(running, args.grace)
        return 0

    return asyncio.run(main())


def server_tls(args: argparse.Namespace) -> ServerTLS | None:
    """The TLS settings of ``berth serve``'s flags, their files loaded once to
    check them; ValueError (TLSFileError for a file) names the flag at fault.
    Without TLS material the server refuses to start unless given
    --insecure-plaintext, whatever the address."""
    from berth.tls.serving import ServerTLS, is_loopback_listen

    if args.tls_cert is None:
        for flag, value in (("--tls-key", args.tls_key), ("--tls-client-ca", args.tls_client_ca)):
            if value is not None:
                raise ValueError(f"{flag} needs --tls-cert (and --tls-key)")
        if not args.insecure_plaintext:
            raise ValueError(
                f"no TLS certificate for the gRPC API on {args.listen}: give --tls-cert FILE "
                "--tls-key FILE (and --tls-client-ca FILE to require client certificates; "
                "'berth certs' makes them), or --insecure-plaintext to serve plaintext anyway "
                "(its callers then need --insecure-plaintext too)"
            )
        if not is_loopback_listen(args.listen):
            log.warning(
                "plaintext gRPC on %s (--insecure-plaintext): anyone who reaches it can call "
                "the API",
                args.listen,
            )
        return None
    if args.insecure_plaintext:
        raise ValueError("--insecure-plaintext and --tls-cert exclude each other")
    if args.tls_key is None:
        raise ValueError("--tls-cert needs --tls-key (the certificate's private key)")
    tls = ServerTLS(
        Path(args.tls_cert),
        Path(args.tls_key),
        Path(args.tls_client_ca) if args.tls_client_ca is not None else None,
    )
    tls.load()
    return tls
