"""``berth place``: where would this pod go, and why?

Takes a snapshot of the cluster (files, ``kubectl get nodes,pods -A -o yaml``
and the objects the profile's plugins read, or a live cluster with
``--kubeconfig``: berth/cli/snapshot.py), sends it and the pod to a plugin
server in one Schedule call with ``explain``, and prints the chosen node, every node's filter result with its
reason, and the per-plugin and total scores. Without ``--server`` it starts a
server on a free loopback port for the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import grpc
from google.protobuf import json_format

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.cli.snapshot import (
    Limits,
    Snapshot,
    SnapshotError,
    add_snapshot_flags,
    load_files,
    load_pods,
    take_snapshot,
)
from berth.client import ClusterStateLog, SchedulingClient, open_channel
from berth.client.tls import add_client_tls_flags, client_tls_from_args
from berth.shim.objects import object_record

CODE_NAMES = {
    0: "Success",
    1: "Error",
    2: "Unschedulable",
    3: "UnschedulableAndUnresolvable",
    4: "Wait",
    5: "Skip",
    6: "Pending",
}


class UsageError(Exception):
    pass


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "place",
        help="ask where a pod would be scheduled, with every node's filter result and score",
        description=(
            "Ask a plugin server where POD would be scheduled on a snapshot of a cluster "
            "(files, or a live cluster with --kubeconfig; with every kind the profile's "
            "plugins read), and why: prints the chosen node, each node's filter result with "
            "its reason, and the per-plugin and total scores. For a list of pods, and to "
            "compare two configurations, see 'berth what-if'. Exit status: 0 placed, 1 "
            "unschedulable, 2 error."
        ),
        epilog=(
            "example: kubectl get nodes,pods -A -o yaml > cluster.yaml; "
            "berth place --cluster cluster.yaml --pod pod.yaml"
        ),
    )
    add_snapshot_flags(
        p,
        cluster_help="the cluster as YAML or JSON files (kubectl get ... -o yaml): Lists, "
        "several documents or single objects; nodes, (bound) pods, and the objects the "
        "profile's plugins read (other kinds are dropped with a warning)",
    )
    p.add_argument("--pod", required=True, metavar="FILE", help="YAML of the pod to place")
    p.add_argument(
        "--server",
        metavar="ADDR",
        help="a running 'berth serve' (host:port); default: start one for this run",
    )
    add_client_tls_flags(p, "--server")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="KubeSchedulerConfiguration for the server started for this run "
        "(ignored with --server)",
    )
    p.add_argument(
        "--profile",
        metavar="NAME",
        help="profile (schedulerName) to use; default: the pod's spec.schedulerName",
    )
    p.add_argument("--json", action="store_true", help="print the raw ScheduleResponse as JSON")
    p.add_argument("--seed", type=int, default=1, help="tie-break seed (default %(default)s)")
    p.set_defaults(func=run)


def load_target(path: str, limits: Limits) -> tuple[cpb.Pod, Mapping[str, Any]]:
    """The one pod of the --pod file, with its manifest."""
    pods = load_pods(path, limits)
    if len(pods) != 1:
        raise UsageError(f"{path}: expected exactly one Pod, found {len(pods)}")
    return pods[0]


def load_inputs(
    cluster_path: str, pod_path: str, reads: Sequence[pb.ObjectKind] = ()
) -> tuple[ClusterStateLog, cpb.Pod]:
    """The cluster file's snapshot (keeping the kinds in ``reads``) as a
    committed cluster-state log, and the pod of the pod file."""
    snap = load_files([cluster_path], reads)
    pod, manifest = load_target(pod_path, Limits())
    log = ClusterStateLog()
    fill_state(log, snap, pod, manifest)
    return log, pod


def fill_state(
    log: ClusterStateLog, snap: Snapshot, pod: cpb.Pod, manifest: Mapping[str, Any]
) -> None:
    """The snapshot into the cluster-state log, and the pod to place into the
    kinds that read pods (it exists, pending, as the scheduler sees it)."""
    for n in snap.nodes:
        log.upsert_node(n)
    for p in snap.pods:
        log.upsert_pod(p)
    for o in snap.objects:
        log.upsert_object(o)
    for src in snap.pod_sources(pod.labels):
        meta = {**(manifest.get("metadata") or {}), "uid": pod.uid}
        log.upsert_object(object_record(src, {**manifest, "metadata": meta}))
    log.commit()


def _describe_requests(pod: cpb.Pod) -> str:
    from berth.framework.model import pod_requests

    r = pod_requests(pod)
    parts = [f"cpu {r.milli_cpu}m", f"memory {_bytes(r.memory)}"]
    parts += [f"{k} {v}" for k, v in sorted(r.scalar.items())]
    return ", ".join(parts)


def _bytes(n: int) -> str:
    for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def render(
    resp: pb.ScheduleResponse, pod: cpb.Pod, profile: str, all_nodes: list[str], out: TextIO
) -> None:
    w = out.write
    w(f"Pod {pod.namespace}/{pod.name} ({_describe_requests(pod)}), profile {profile}\n")
    if resp.node:
        w(f"Placement: {resp.node}\n")
    else:
        w(f"Placement: none ({CODE_NAMES.get(resp.status.code, resp.status.code)})\n")
        if resp.diagnosis.message:
            w(f"  {resp.diagnosis.message}\n")
        elif resp.status.reasons:
            w(f"  {'; '.join(resp.status.reasons)}\n")
    rejected = {r.node: r.status for r in resp.diagnosis.rejected}
    feasible = [n for n in all_nodes if n not in rejected]
    w(f"\nFilter: {len(feasible)} of {len(all_nodes)} nodes feasible\n")
    width = max((len(n) for n in all_nodes), default=4)
    for name in all_nodes:
        st = rejected.get(name)
        if st is None:
            w(f"  {name:<{width}}  passed\n")
        else:
            code = CODE_NAMES.get(st.code, str(st.code))
            w(f"  {name:<{width}}  {code} by {st.plugin}: {', '.join(st.reasons)}\n")
    if resp.scores:
        plugins = sorted({p for s in resp.scores for p in s.plugins})
        w("\nScores (normalised x weight):\n")
        cols = [max(len(p), 5) for p in plugins]
        w(
            f"  {'NODE':<{width}}  "
            + "  ".join(f"{p:>{c}}" for p, c in zip(plugins, cols, strict=True))
        )
        w("  TOTAL\n")
        for s in resp.scores:
            mark = "  <- chosen" if s.node == resp.node else ""
            w(f"  {s.node:<{width}}  ")
            w("  ".join(f"{s.plugins.get(p, 0):>{c}}" for p, c in zip(plugins, cols, strict=True)))
            w(f"  {s.total:>5}{mark}\n")


async def _place(args: argparse.Namespace, out: TextIO) -> int:
    limits = Limits(max_bytes=args.max_bytes, max_objects=args.max_objects)
    pod, manifest = load_target(args.pod, limits)
    profile = args.profile or pod.scheduler_name
    log = ClusterStateLog()
    running = None
    address = args.server
    tls = client_tls_from_args(args)
    if tls is not None and address is None:
        raise UsageError("the --plugin-server-* TLS flags need --server")
    if address is None:
        from berth.framework.config import default_config, load_config
        from berth.plugins.registry import load_registry
        from berth.server.app import start_server

        registry = load_registry()
        config = load_config(args.config, registry) if args.config else default_config(registry)
        running = await start_server(config, registry, "127.0.0.1:0", trace=False)
        address = f"127.0.0.1:{running.port}"
    try:
        options = []
        if tls is not None and tls.server_name:
            options.append(("grpc.ssl_target_name_override", tls.server_name))
        async with open_channel(
            address, credentials=tls.credentials if tls else None, options=options
        ) as channel:
            client = SchedulingClient(channel, log)
            # What the profile's plugins read (DescribeProfiles), taken into the snapshot.
            described: pb.DescribeProfilesResponse = await client.unary(
                "DescribeProfiles", pb.DescribeProfilesRequest()
            )
            chosen = [x for x in described.profiles if x.scheduler_name == profile]
            reads = [k for x in (chosen or described.profiles) for k in x.reads]
            snap = take_snapshot(args, reads, "berth place")
            fill_state(log, snap, pod, manifest)
            resp = await client.schedule(profile, pod, explain=True, seed=args.seed)
    finally:
        if running is not None:
            await running.stop(0)
    if args.json:
        out.write(json.dumps(json_format.MessageToDict(resp), indent=2) + "\n")
    else:
        render(resp, pod, profile, sorted(log.nodes), out)
    if resp.node:
        return 0
    return 2 if resp.status.code == 1 else 1


def run(args: argparse.Namespace) -> int:
    from berth.framework.config import ConfigError
    from berth.plugins.registry import RegistryError
    from berth.tls.serving import TLSFileError

    try:
        return asyncio.run(_place(args, sys.stdout))
    except (UsageError, SnapshotError, ConfigError, RegistryError, TLSFileError) as exc:
        print(f"berth place: {exc}", file=sys.stderr)
        return 2
    except grpc.aio.AioRpcError as exc:
        print(
            f"berth place: the server answered {exc.code().name}: {exc.details()}",
            file=sys.stderr,
        )
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            print(f"  is 'berth serve' running at {args.server}?", file=sys.stderr)
            print(
                "  does its transport match: TLS needs --plugin-server-ca (and, for a server "
                "run with --tls-client-ca, --plugin-server-cert/-key), whose certificate names "
                "the host dialled or --plugin-server-tls-name?",
                file=sys.stderr,
            )
        return 2
