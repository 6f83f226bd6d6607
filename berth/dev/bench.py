"""``berth bench cycle``: composite-RPC scheduling cycles over real gRPC.

Starts ``berth serve`` in its own process (or uses ``--server``), gives it a
cluster of N nodes, then runs scheduling cycles the way the shim does: one
Schedule call per pod, serially; after each placement the pod is added to
the cluster as bound, so every request carries a one-pod delta. Prints
cycles/s and latency percentiles per cluster size.

The workload (``Workload``): optionally a cluster already holding pods
(``--existing-pods``, bound round robin before the run, not scheduled), and a
share of the pods, existing and measured alike, with a topology spread
constraint (``--spread-fraction``) or required pod anti-affinity
(``--anti-affinity-fraction``), shaped like scheduler_perf's
pod-with-topology-spreading and pod-with-pod-anti-affinity templates. Latency
is also reported per kind of pod.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog, SchedulingClient, open_channel

# The kinds of pods a workload mixes.
PLAIN: Final = "plain"
SPREAD: Final = "spread"
ANTI: Final = "anti-affinity"
KINDS: Final = (PLAIN, SPREAD, ANTI)

NAMESPACE: Final = "bench"
ZONES: Final = 3
# Plain pods carry one of this many ``app`` labels (workloads), so label
# selectors meet a realistic variety of label sets.
APPS: Final = 100


@dataclass
class CycleStats:
    nodes: int
    cycles: int
    seconds: float
    latencies_ms: list[float]
    scheduled: int
    resyncs: int
    transport: str
    # CPU milliseconds per cycle; wall time on a shared host is noisy, CPU
    # time says what the work costs.
    client_cpu_ms: float
    server_cpu_ms: float
    # The kind of pod of each latency (aligned with latencies_ms), and the
    # pods of each kind placed.
    kinds: list[str] = field(default_factory=list)
    placed_by_kind: dict[str, int] = field(default_factory=dict)
    existing_pods: int = 0
    # In-process with --breakdown: (extension point, plugin) -> kind -> ms
    # summed over the timed cycles.
    breakdown: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    # In-process: the CPU time of each cycle (aligned with latencies_ms),
    # steadier than wall time on a shared host.
    cpu_ms: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.cycles / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else 0.0

    def of_kind(self, kind: str) -> list[float]:
        return [ms for ms, k in zip(self.latencies_ms, self.kinds, strict=True) if k == kind]

    def cpu_of_kind(self, kind: str) -> list[float]:
        """Per-cycle CPU ms of the kind's cycles (in-process only, else [])."""
        if not self.cpu_ms:
            return []
        return [ms for ms, k in zip(self.cpu_ms, self.kinds, strict=True) if k == kind]


@dataclass(frozen=True)
class Workload:
    """The pods of a run: pod ``j`` (existing pods first, then the measured
    ones) is plain, spreading or anti-affinity, drawn with a fixed seed so
    every run and transport sees the same sequence.

    - plain: scheduler_perf's pod-default (100m cpu, 500Mi), label ``app``.
    - spreading: pod-with-topology-spreading: label ``color: blue``, one
      constraint maxSkew 5 on ``topology.kubernetes.io/zone``, DoNotSchedule,
      selecting ``color: blue``.
    - anti-affinity: pod-with-pod-anti-affinity, in groups of
      ``anti_affinity_group`` pods (label ``anti-group: g<k>``): required
      anti-affinity on ``kubernetes.io/hostname`` against the pods of its
      group, so a group has at most one pod per node (upstream's template
      uses one group, which caps the cluster at one such pod per node).
    """

    existing_pods: int = 0
    spread_fraction: float = 0.0
    anti_affinity_fraction: float = 0.0
    anti_affinity_group: int = 100
    seed: int = 1
    # (key, value, fraction): that share of the nodes carries key=value
    # (``--node-label``); the values of one key go to disjoint nodes.
    node_labels: tuple[tuple[str, str, float], ...] = ()

    def validate(self) -> None:
        if self.existing_pods < 0:
            raise ValueError(f"--existing-pods: must be >= 0, got {self.existing_pods}")
        for name, f in (
            ("--spread-fraction", self.spread_fraction),
            ("--anti-affinity-fraction", self.anti_affinity_fraction),
        ):
            if not 0.0 <= f <= 1.0:
                raise ValueError(f"{name}: must lie in [0, 1], got {f}")
        if self.spread_fraction + self.anti_affinity_fraction > 1.0:
            raise ValueError(
                "--spread-fraction + --anti-affinity-fraction: must be at most 1, got "
                f"{self.spread_fraction + self.anti_affinity_fraction}"
            )
        if self.anti_affinity_group < 1:
            raise ValueError(f"--anti-affinity-group: must be >= 1, got {self.anti_affinity_group}")
        per_key: dict[str, float] = {}
        for key, value, f in self.node_labels:
            if not 0.0 <= f <= 1.0:
                raise ValueError(f"--node-label {key}={value}:{f}: the fraction must lie in [0, 1]")
            per_key[key] = per_key.get(key, 0.0) + f
            if per_key[key] > 1.0:
                raise ValueError(
                    f"--node-label {key}: the fractions of its values must add up to at most 1, "
                    f"got {per_key[key]:g}"
                )

    def label_node(self, i: int, node: cpb.Node) -> None:
        """Gives node ``i`` the ``node_labels`` it draws: its position in
        [0, 1) (a golden-ratio sequence, so every share of the nodes is spread
        evenly over them and the zones) falls in one value's band per key."""
        at = (i * 0.6180339887498949) % 1.0
        below: dict[str, float] = {}
        for key, value, f in self.node_labels:
            start = below.get(key, 0.0)
            below[key] = start + f
            if start <= at < start + f:
                node.labels[key] = value

    def pods(self) -> Iterator[tuple[str, cpb.Pod]]:
        """(kind, pod) for j = 0, 1, ...: the existing pods, then the
        measured ones, without end."""
        rng = random.Random(self.seed)
        anti = 0
        j = 0
        while True:
            r = rng.random()
            if r < self.anti_affinity_fraction:
                yield ANTI, anti_affinity_pod(j, anti // self.anti_affinity_group)
                anti += 1
            elif r < self.anti_affinity_fraction + self.spread_fraction:
                yield SPREAD, spreading_pod(j)
            else:
                yield PLAIN, make_pod(j)
            j += 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmarks (figures, not pass/fail)",
        description="Benchmarks that print figures. See docs/benchmarks.md for recorded runs.",
    )
    bsub = p.add_subparsers(dest="bench", metavar="BENCH")
    c = bsub.add_parser(
        "cycle",
        help="composite Schedule RPC cycles/s and latency at given cluster sizes",
        description=(
            "Runs serial composite-RPC scheduling cycles (Schedule) against a plugin server "
            "over real gRPC, as the shim does, and prints cycles/s and p50/p90/p99 latency "
            "for each cluster size, then per kind of pod (plain, spreading, anti-affinity). "
            "Each placed pod joins the cluster as bound for the cycles after it. Nodes are "
            "scheduler_perf's node-default (4 cpu, 32Gi, 110 pods) in 3 zones."
        ),
    )
    c.add_argument(
        "--nodes",
        type=int,
        action="append",
        metavar="N",
        help="cluster size; repeat for several (default: 500 and 5000)",
    )
    c.add_argument("--cycles", type=int, default=2000, help="cycles per size (default %(default)s)")
    c.add_argument(
        "--warmup", type=int, default=200, help="untimed cycles first (default %(default)s)"
    )
    c.add_argument("--server", metavar="ADDR", help="use a running server instead of starting one")
    c.add_argument("--config", metavar="FILE", help="config for the server started here")
    c.add_argument("--profile", default="default-scheduler", help="profile (default %(default)s)")
    c.add_argument(
        "--transport",
        choices=("stream", "unary", "batch", "inprocess", "all"),
        default="all",
        help="ScheduleStream (the shim's path), unary Schedule, ScheduleBatch (--batch pods "
        "per call), the same service called in-process without gRPC (what the plugins and "
        "protocol cost alone), or all (default %(default)s)",
    )
    c.add_argument(
        "--batch",
        type=int,
        default=16,
        metavar="K",
        help="pods per ScheduleBatch call (default %(default)s)",
    )
    w = c.add_argument_group(
        "workload",
        "The pods: existing ones are bound round robin over the nodes before the run (not "
        "scheduled; anti-affinity groups kept one pod per node); every pod, existing or "
        "measured, is drawn plain, spreading or anti-affinity with the fractions below "
        "(fixed seed). Default: an empty cluster and plain pods only",
    )
    w.add_argument(
        "--existing-pods",
        type=int,
        default=0,
        metavar="N",
        help="pods bound in the cluster before the run (default %(default)s)",
    )
    w.add_argument(
        "--spread-fraction",
        type=float,
        default=0.0,
        metavar="F",
        help="share of pods with a topology spread constraint: maxSkew 5 over zones, "
        "DoNotSchedule, selecting color=blue (default %(default)s)",
    )
    w.add_argument(
        "--anti-affinity-fraction",
        type=float,
        default=0.0,
        metavar="F",
        help="share of pods with required pod anti-affinity on kubernetes.io/hostname "
        "against the pods of their group (default %(default)s)",
    )
    w.add_argument(
        "--anti-affinity-group",
        type=int,
        default=100,
        metavar="K",
        help="anti-affinity pods per group, consecutive ones forming a group; a group holds "
        "at most one pod per node (default %(default)s)",
    )
    w.add_argument(
        "--node-label",
        type=_node_label,
        action="append",
        default=[],
        metavar="KEY=VALUE:F",
        help="give a share F of the nodes the label KEY=VALUE, spread evenly over them; "
        "repeat for more, the values of one key on disjoint nodes (e.g. "
        "example.com/pool=general:0.3 example.com/pool=gpu:0.1; default: none)",
    )
    c.add_argument(
        "--breakdown",
        action="store_true",
        help="in-process only: time every plugin call (not the usual 10%% sample) and print "
        "ms per cycle by extension point, plugin and kind of pod (adds timing overhead)",
    )
    c.set_defaults(func=run_cycle)
    from berth.dev import bench_perf, bench_shim

    bench_shim.register(bsub)
    bench_perf.register(bsub)

    def usage(_: argparse.Namespace) -> int:
        p.print_help()
        return 2

    p.set_defaults(func=usage)


def _node_label(text: str) -> tuple[str, str, float]:
    """``--node-label KEY=VALUE:F``."""
    label, colon, fraction = text.rpartition(":")
    key, eq, value = label.partition("=")
    if not colon or not eq or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: want KEY=VALUE:F, e.g. example.com/pool=a:0.3")
    try:
        return key, value, float(fraction)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: F must be a number, got {fraction!r}"
        ) from None


def make_node(i: int) -> cpb.Node:
    """scheduler_perf's default node: 4 CPU, 32Gi, 110 pods."""
    n = cpb.Node(name=f"node-{i:05d}", uid=f"uid-node-{i}")
    for r in (n.capacity, n.allocatable):
        r.milli_cpu = 4000
        r.memory = 32 * 2**30
        r.pods = 110
    n.labels["kubernetes.io/hostname"] = n.name
    n.labels["topology.kubernetes.io/zone"] = f"zone-{i % ZONES}"
    return n


def make_pod(i: int) -> cpb.Pod:
    """scheduler_perf's pod-default: 100m cpu, 500Mi."""
    p = cpb.Pod(uid=f"uid-pod-{i}", name=f"pod-{i}", namespace=NAMESPACE)
    p.scheduler_name = "default-scheduler"
    p.labels["app"] = f"app-{i % APPS}"
    c = p.containers.add(name="c", image="registry.k8s.io/pause:3.10")
    c.requests.milli_cpu = 100
    c.requests.memory = 500 * 2**20
    return p


def spreading_pod(i: int) -> cpb.Pod:
    """scheduler_perf's pod-with-topology-spreading."""
    p = make_pod(i)
    del p.labels["app"]
    p.labels["color"] = "blue"
    t = p.topology_spread_constraints.add(
        max_skew=5, topology_key="topology.kubernetes.io/zone", when_unsatisfiable="DoNotSchedule"
    )
    t.label_selector.match_labels["color"] = "blue"
    return p


def anti_affinity_pod(i: int, group: int) -> cpb.Pod:
    """scheduler_perf's pod-with-pod-anti-affinity, its group's own."""
    p = make_pod(i)
    del p.labels["app"]
    p.labels["anti-group"] = f"g{group}"
    term = p.affinity.pod_anti_affinity.required.add(topology_key="kubernetes.io/hostname")
    term.label_selector.match_labels["anti-group"] = f"g{group}"
    return p


def bench_cluster(
    num_nodes: int, workload: Workload | None = None
) -> tuple[ClusterStateLog, Iterator[tuple[str, cpb.Pod]]]:
    """The nodes and the workload's existing pods, committed; and the
    workload's pods still to come (the measured ones)."""
    wl = workload or Workload()
    log = ClusterStateLog()
    for i in range(num_nodes):
        node = make_node(i)
        wl.label_node(i, node)
        log.upsert_node(node)
    pods = wl.pods()
    place_existing(log, num_nodes, wl.existing_pods, pods)
    log.commit()
    return log, pods


def place_existing(
    log: ClusterStateLog, num_nodes: int, count: int, pods: Iterator[tuple[str, cpb.Pod]]
) -> None:
    """Binds ``count`` pods round robin, skipping a node that already holds
    a pod of the same anti-affinity group (a valid cluster; spreading pods
    stay balanced over the zones as the nodes are)."""
    if not count:
        return
    if num_nodes <= 0:
        raise ValueError("--existing-pods: there are no nodes to bind them to")
    used: set[tuple[str, int]] = set()
    for cursor in range(count):
        _, pod = next(pods)
        group = pod.labels.get("anti-group")
        node = cursor % num_nodes
        if group is not None:
            tries = 0
            while (group, node) in used:
                tries += 1
                if tries >= num_nodes:
                    raise ValueError(
                        f"--anti-affinity-group: group {group} has more pods than the "
                        f"{num_nodes} nodes"
                    )
                node = (node + 1) % num_nodes
            used.add((group, node))
        pod.node_name = f"node-{node:05d}"
        log.upsert_pod(pod)


def assume(log: ClusterStateLog, pod: cpb.Pod, node: str, commit: bool = True) -> None:
    """The pod counts on its node from the next cycle on, as the shim's
    cache assumes a pod after Reserve."""
    bound = cpb.Pod()
    bound.CopyFrom(pod)
    bound.node_name = node
    log.upsert_pod(bound)
    if commit:
        log.commit()


def cpu_seconds(pid: int) -> float:
    """User+system CPU time of a process (Linux /proc), 0.0 where unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


@dataclass
class Server:
    address: str
    pid: int | None = None


@contextlib.contextmanager
def spawn_server(config: str | None) -> Iterator[Server]:
    cmd = [
        sys.executable,
        "-m",
        "berth",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--insecure-plaintext",
    ]
    if config:
        cmd += ["--config", config]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=os.environ.copy()
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "listening on port" not in line:
            raise RuntimeError(f"berth serve did not start (exit {proc.poll()}): {line.strip()}")
        yield Server(f"127.0.0.1:{int(line.rsplit(' ', 1)[1])}", proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


async def bench_cycles(
    server: Server,
    profile: str,
    num_nodes: int,
    cycles: int,
    warmup: int,
    transport: str,
    workload: Workload | None = None,
) -> CycleStats:
    log, pods = bench_cluster(num_nodes, workload)
    async with open_channel(server.address) as channel:
        client = SchedulingClient(channel, log)
        await client.sync()
        call = client.schedule_streamed if transport == "stream" else client.schedule
        start_index = 0
        lat: list[float] = []
        kinds: list[str] = []
        placed: dict[str, int] = {}
        t_start = 0.0
        cpu_client = cpu_server = 0.0
        for i in range(warmup + cycles):
            if i == warmup:
                t_start = time.perf_counter()
                cpu_client = time.process_time()
                cpu_server = cpu_seconds(server.pid) if server.pid else 0.0
            kind, pod = next(pods)
            t0 = time.perf_counter()
            resp = await call(profile, pod, start_index=start_index, group_rejected=True)
            if i >= warmup:
                lat.append((time.perf_counter() - t0) * 1000)
                kinds.append(kind)
            start_index = resp.next_start_index
            if resp.node:
                assume(log, pod, resp.node)
                if i >= warmup:
                    placed[kind] = placed.get(kind, 0) + 1
        elapsed = time.perf_counter() - t_start
        cpu_client = time.process_time() - cpu_client
        cpu_server = cpu_seconds(server.pid) - cpu_server if server.pid else float("nan")
        await client.close()
    return CycleStats(
        num_nodes,
        cycles,
        elapsed,
        lat,
        sum(placed.values()),
        client.resyncs,
        transport,
        cpu_client * 1000 / cycles,
        cpu_server * 1000 / cycles,
        kinds,
        placed,
        (workload or Workload()).existing_pods,
    )


async def bench_batches(
    server: Server,
    profile: str,
    num_nodes: int,
    cycles: int,
    warmup: int,
    batch: int,
    workload: Workload | None = None,
) -> CycleStats:
    """Cycles in batches of ``batch`` pods per ScheduleBatch call; latency is
    per call divided by the pods in it (so per kind it is the batch's mean)."""
    log, source = bench_cluster(num_nodes, workload)
    async with open_channel(server.address) as channel:
        client = SchedulingClient(channel, log)
        await client.sync()
        start_index = 0
        lat: list[float] = []
        kinds: list[str] = []
        placed: dict[str, int] = {}
        done = 0
        t_start = cpu_client = cpu_server = 0.0
        warm = False
        while done < warmup + cycles:
            if not warm and done >= warmup:
                warm = True
                t_start = time.perf_counter()
                cpu_client = time.process_time()
                cpu_server = cpu_seconds(server.pid) if server.pid else 0.0
            drawn = [next(source) for _ in range(batch)]
            pods = [pod for _, pod in drawn]
            t0 = time.perf_counter()
            resp = await client.schedule_batch(
                profile, pods, start_index=start_index, group_rejected=True
            )
            per_pod = (time.perf_counter() - t0) * 1000 / batch
            start_index = resp.next_start_index
            for (kind, pod), res in zip(drawn, resp.results, strict=True):
                if res.node:
                    assume(log, pod, res.node, commit=False)
                    if warm:
                        placed[kind] = placed.get(kind, 0) + 1
            log.commit()
            if warm:
                lat.extend([per_pod] * batch)
                kinds.extend(kind for kind, _ in drawn)
            done += batch
        timed = len(lat)
        elapsed = time.perf_counter() - t_start
        cpu_c = (time.process_time() - cpu_client) * 1000 / timed
        cpu_s = (
            (cpu_seconds(server.pid) - cpu_server) * 1000 / timed if server.pid else float("nan")
        )
    return CycleStats(
        num_nodes,
        timed,
        elapsed,
        lat,
        sum(placed.values()),
        client.resyncs,
        "batch",
        cpu_c,
        cpu_s,
        kinds,
        placed,
        (workload or Workload()).existing_pods,
    )


class _PluginTimes:
    """With --breakdown: every plugin call timed (the runtime samples 10% of
    cycles otherwise) and summed by (extension point, plugin) for the kind
    of the pod in the cycle."""

    def __init__(self) -> None:
        self.kind = ""
        self.on = False
        self.totals: dict[tuple[str, str], dict[str, float]] = {}

    def observe(self, point: str, plugin: str, code: Any, seconds: float) -> None:
        if not self.on:
            return
        by_kind = self.totals.setdefault((point, plugin), {})
        by_kind[self.kind] = by_kind.get(self.kind, 0.0) + seconds * 1000

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        from berth.framework import observe, runtime

        saved: tuple[float, Callable[..., None]] = (
            runtime.PLUGIN_METRICS_SAMPLE_RATE,
            observe.observe_plugin,
        )
        runtime.PLUGIN_METRICS_SAMPLE_RATE = 1.0
        observe.observe_plugin = self.observe
        try:
            yield
        finally:
            runtime.PLUGIN_METRICS_SAMPLE_RATE, observe.observe_plugin = saved


def bench_inprocess(
    config_path: str | None,
    profile: str,
    num_nodes: int,
    cycles: int,
    warmup: int,
    workload: Workload | None = None,
    breakdown: bool = False,
) -> CycleStats:
    """The same cycles through the same service object, called directly: the
    requests, the delta protocol and the plugins, without gRPC."""
    from berth.framework.config import default_config, load_config
    from berth.plugins.registry import load_registry
    from berth.server.app import build_frameworks
    from berth.server.service import SchedulingService

    registry = load_registry()
    config = load_config(config_path, registry) if config_path else default_config(registry)
    service = SchedulingService(config, build_frameworks(config, registry))
    log, pods = bench_cluster(num_nodes, workload)
    times = _PluginTimes()
    acked = 0
    start_index = 0
    lat: list[float] = []
    cpu_lat: list[float] = []
    kinds: list[str] = []
    placed: dict[str, int] = {}
    t_start = cpu = 0.0
    with times.installed() if breakdown else contextlib.nullcontext():
        for i in range(warmup + cycles):
            if i == warmup:
                t_start = time.perf_counter()
                cpu = time.process_time()
                times.on = True
            kind, pod = next(pods)
            times.kind = kind
            c0 = time.process_time()
            t0 = time.perf_counter()
            st = log.state_since(acked)
            resp = service.schedule_or_error(
                pb.ScheduleRequest(
                    profile=profile,
                    state=st,
                    pod=pod,
                    start_index=start_index,
                    group_rejected=True,
                )
            ).SerializeToString()
            acked = st.generation
            if i >= warmup:
                lat.append((time.perf_counter() - t0) * 1000)
                cpu_lat.append((time.process_time() - c0) * 1000)
                kinds.append(kind)
            answer = pb.ScheduleStreamResponse.FromString(resp)
            if answer.WhichOneof("result") != "response":
                raise SystemExit(f"berth bench: the server refused a cycle: {answer.error.message}")
            out = answer.response
            start_index = out.next_start_index
            if out.node:
                assume(log, pod, out.node)
                if i >= warmup:
                    placed[kind] = placed.get(kind, 0) + 1
    elapsed = time.perf_counter() - t_start
    cpu_ms = (time.process_time() - cpu) * 1000 / cycles
    return CycleStats(
        num_nodes,
        cycles,
        elapsed,
        lat,
        sum(placed.values()),
        0,
        "inprocess",
        cpu_ms,
        0.0,
        kinds,
        placed,
        (workload or Workload()).existing_pods,
        times.totals,
        cpu_lat,
    )


RPC_NAMES: Final = {
    "stream": "ScheduleStream",
    "unary": "Schedule (unary)",
    "batch": "ScheduleBatch",
    "inprocess": "in-process, no gRPC",
}


def run_cycle(args: argparse.Namespace) -> int:
    sizes = args.nodes or [500, 5000]
    workload = Workload(
        existing_pods=args.existing_pods,
        spread_fraction=args.spread_fraction,
        anti_affinity_fraction=args.anti_affinity_fraction,
        anti_affinity_group=args.anti_affinity_group,
        node_labels=tuple(args.node_label),
    )
    try:
        workload.validate()
    except ValueError as exc:
        print(f"berth bench cycle: {exc}", file=sys.stderr)
        return 2
    transports = (
        ["stream", "unary", "batch", "inprocess"] if args.transport == "all" else [args.transport]
    )
    if args.breakdown and "inprocess" not in transports:
        print(
            "berth bench cycle: --breakdown: times plugins in-process only; "
            "use --transport inprocess or all",
            file=sys.stderr,
        )
        return 2
    from berth.dev.bench_perf import python_text

    # The cycle's cost depends on the interpreter's build (docs/benchmarks.md, session 36).
    print(f"[bench] Python: {python_text()}", flush=True)
    results: list[CycleStats] = []
    with contextlib.ExitStack() as stack:
        server: Server | None = None
        if transports != ["inprocess"]:
            server = Server(args.server) if args.server else None
            if server is None:
                print("[bench] starting berth serve ...", flush=True)
                server = stack.enter_context(spawn_server(args.config))
            print(
                f"[bench] server at {server.address}; {args.cycles} timed cycles per size",
                flush=True,
            )
        for n in sizes:
            for transport in transports:
                print(
                    f"[bench] {n} nodes, {workload.existing_pods} existing pods, {transport}: "
                    f"warming up ({args.warmup} cycles) ...",
                    flush=True,
                )
                if transport == "inprocess":
                    stats = bench_inprocess(
                        args.config,
                        args.profile,
                        n,
                        args.cycles,
                        args.warmup,
                        workload,
                        args.breakdown,
                    )
                else:
                    assert server is not None
                    if transport == "batch":
                        stats = asyncio.run(
                            bench_batches(
                                server,
                                args.profile,
                                n,
                                args.cycles,
                                args.warmup,
                                args.batch,
                                workload,
                            )
                        )
                    else:
                        stats = asyncio.run(
                            bench_cycles(
                                server,
                                args.profile,
                                n,
                                args.cycles,
                                args.warmup,
                                transport,
                                workload,
                            )
                        )
                results.append(stats)
                print(
                    f"[bench] {n} nodes, {transport}: {stats.rate:.0f} cycles/s, "
                    f"p50 {stats.pct(50):.2f} ms, p99 {stats.pct(99):.2f} ms",
                    flush=True,
                )
    print_tables(results)
    return 0


def print_tables(results: list[CycleStats]) -> None:
    print()
    print(
        "| nodes | RPC | cycles | cycles/s | p50 ms | p90 ms | p99 ms "
        "| server CPU ms/cycle | client CPU ms/cycle | placed | resyncs |"
    )
    # In-process, the one process does both sides: its CPU is the client column.
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in results:
        print(
            f"| {s.nodes} | {RPC_NAMES[s.transport]} | {s.cycles} | {s.rate:.0f} | "
            f"{s.pct(50):.2f} | {s.pct(90):.2f} | {s.pct(99):.2f} | "
            f"{'-' if s.transport == 'inprocess' else f'{s.server_cpu_ms:.2f}'} | "
            f"{s.client_cpu_ms:.2f} | {s.scheduled} | {s.resyncs} |"
        )
    print()
    # Per kind: pods/s is the kind's pods over the time their cycles took
    # (1000 / mean latency), the rate a stream of that kind alone would see.
    # ScheduleBatch's per-pod latency is its call's mean, the same for every
    # kind in a batch. In-process, "CPU ms" is the mean CPU time of a cycle.
    print(
        "| RPC | nodes | existing pods | kind | cycles | pods/s | p50 ms | p90 ms | p99 ms "
        "| CPU ms | placed |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for s in results:
        for kind in KINDS:
            lat = s.of_kind(kind)
            if not lat:
                continue
            p50, p90, p99 = (float(np.percentile(lat, q)) for q in (50, 90, 99))
            cpu = s.cpu_of_kind(kind)
            cpu_cell = f"{sum(cpu) / len(cpu):.2f}" if cpu else "-"
            print(
                f"| {RPC_NAMES[s.transport]} | {s.nodes} | {s.existing_pods} | {kind} | "
                f"{len(lat)} | {1000 * len(lat) / sum(lat):.0f} | {p50:.2f} | {p90:.2f} | "
                f"{p99:.2f} | {cpu_cell} | {s.placed_by_kind.get(kind, 0)} |"
            )
    for s in results:
        if not s.breakdown:
            continue
        counts = {kind: len(s.of_kind(kind)) for kind in KINDS}
        present = [k for k in KINDS if counts[k]]
        print()
        print(f"In-process, {s.nodes} nodes: ms per cycle by plugin call (every call timed)")
        print()
        print("| extension point | plugin | " + " | ".join(present) + " |")
        print("|---|---|" + "---:|" * len(present))
        rows = sorted(
            s.breakdown.items(),
            key=lambda item: -sum(item[1].get(k, 0.0) / counts[k] for k in present),
        )
        for (point, plugin), by_kind in rows:
            cells = " | ".join(f"{by_kind.get(k, 0.0) / counts[k]:.3f}" for k in present)
            print(f"| {point} | {plugin} | {cells} |")
