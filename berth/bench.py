"""``berth bench cycle``: composite-RPC scheduling cycles over real gRPC.

Starts ``berth serve`` in its own process (or uses ``--server``), gives it a
cluster of N nodes, then runs scheduling cycles the way the shim does: one
Schedule call per pod, serially; after each placement the pod is added to
the cluster as bound, so every request carries a one-pod delta. Prints
cycles/s and latency percentiles per cluster size.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from berth.client import ClusterStateLog, SchedulingClient, open_channel
from berth_api.v1 import cluster_pb2 as cpb
from berth_api.v1 import scheduling_pb2 as pb


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

    @property
    def rate(self) -> float:
        return self.cycles / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else 0.0


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
            "for each cluster size."
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
    c.set_defaults(func=run_cycle)
    from berth import bench_perf, bench_shim

    bench_shim.register(bsub)
    bench_perf.register(bsub)

    def usage(_: argparse.Namespace) -> int:
        p.print_help()
        return 2

    p.set_defaults(func=usage)


def make_node(i: int) -> cpb.Node:
    """scheduler_perf's default node: 4 CPU, 32Gi, 110 pods."""
    n = cpb.Node(name=f"node-{i:05d}", uid=f"uid-node-{i}")
    for r in (n.capacity, n.allocatable):
        r.milli_cpu = 4000
        r.memory = 32 * 2**30
        r.pods = 110
    n.labels["kubernetes.io/hostname"] = n.name
    n.labels["topology.kubernetes.io/zone"] = f"zone-{i % 3}"
    return n


def make_pod(i: int) -> cpb.Pod:
    p = cpb.Pod(uid=f"uid-pod-{i}", name=f"pod-{i}", namespace="bench")
    p.scheduler_name = "default-scheduler"
    c = p.containers.add(name="c", image="registry.k8s.io/pause:3.10")
    c.requests.milli_cpu = 100
    c.requests.memory = 500 * 2**20
    return p


def bench_cluster(num_nodes: int) -> ClusterStateLog:
    log = ClusterStateLog()
    for i in range(num_nodes):
        log.upsert_node(make_node(i))
    log.commit()
    return log


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
    cmd = [sys.executable, "-m", "berth", "serve", "--listen", "127.0.0.1:0"]
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
    server: Server, profile: str, num_nodes: int, cycles: int, warmup: int, transport: str
) -> CycleStats:
    log = bench_cluster(num_nodes)
    async with open_channel(server.address) as channel:
        client = SchedulingClient(channel, log)
        await client.sync()
        call = client.schedule_streamed if transport == "stream" else client.schedule
        start_index = 0
        lat: list[float] = []
        scheduled = 0
        t_start = 0.0
        cpu_client = cpu_server = 0.0
        for i in range(warmup + cycles):
            if i == warmup:
                t_start = time.perf_counter()
                cpu_client = time.process_time()
                cpu_server = cpu_seconds(server.pid) if server.pid else 0.0
            pod = make_pod(i)
            t0 = time.perf_counter()
            resp = await call(profile, pod, start_index=start_index)
            if i >= warmup:
                lat.append((time.perf_counter() - t0) * 1000)
            start_index = resp.next_start_index
            if resp.node:
                assume(log, pod, resp.node)
                if i >= warmup:
                    scheduled += 1
        elapsed = time.perf_counter() - t_start
        cpu_client = time.process_time() - cpu_client
        cpu_server = cpu_seconds(server.pid) - cpu_server if server.pid else float("nan")
        await client.close()
    return CycleStats(
        num_nodes,
        cycles,
        elapsed,
        lat,
        scheduled,
        client.resyncs,
        transport,
        cpu_client * 1000 / cycles,
        cpu_server * 1000 / cycles,
    )


async def bench_batches(
    server: Server, profile: str, num_nodes: int, cycles: int, warmup: int, batch: int
) -> CycleStats:
    """Cycles in batches of ``batch`` pods per ScheduleBatch call; latency is
    per call divided by the pods in it."""
    log = bench_cluster(num_nodes)
    async with open_channel(server.address) as channel:
        client = SchedulingClient(channel, log)
        await client.sync()
        start_index = 0
        lat: list[float] = []
        scheduled = done = 0
        t_start = cpu_client = cpu_server = 0.0
        warm = False
        while done < warmup + cycles:
            if not warm and done >= warmup:
                warm = True
                t_start = time.perf_counter()
                cpu_client = time.process_time()
                cpu_server = cpu_seconds(server.pid) if server.pid else 0.0
            pods = [make_pod(done + k) for k in range(batch)]
            t0 = time.perf_counter()
            resp = await client.schedule_batch(profile, pods, start_index=start_index)
            per_pod = (time.perf_counter() - t0) * 1000 / batch
            start_index = resp.next_start_index
            for pod, res in zip(pods, resp.results, strict=True):
                if res.node:
                    assume(log, pod, res.node, commit=False)
                    if warm:
                        scheduled += 1
            log.commit()
            if warm:
                lat.extend([per_pod] * batch)
            done += batch
        timed = len(lat)
        elapsed = time.perf_counter() - t_start
        cpu_c = (time.process_time() - cpu_client) * 1000 / timed
        cpu_s = (
            (cpu_seconds(server.pid) - cpu_server) * 1000 / timed if server.pid else float("nan")
        )
    return CycleStats(
        num_nodes, timed, elapsed, lat, scheduled, client.resyncs, "batch", cpu_c, cpu_s
    )


def bench_inprocess(
    config_path: str | None, profile: str, num_nodes: int, cycles: int, warmup: int
) -> CycleStats:
    """The same cycles through the same service object, called directly: the
    requests, the delta protocol and the plugins, without gRPC."""
    from plugins.framework.config import default_config, load_config
    from plugins.registry import load_registry
    from server.app import build_frameworks
    from server.service import SchedulingService

    registry = load_registry()
    config = load_config(config_path, registry) if config_path else default_config(registry)
    service = SchedulingService(config, build_frameworks(config, registry))
    log = bench_cluster(num_nodes)
    acked = 0
    start_index = 0
    lat: list[float] = []
    scheduled = 0
    t_start = cpu = 0.0
    for i in range(warmup + cycles):
        if i == warmup:
            t_start = time.perf_counter()
            cpu = time.process_time()
        pod = make_pod(i)
        t0 = time.perf_counter()
        st = log.state_since(acked)
        resp = service.schedule_or_error(
            pb.ScheduleRequest(profile=profile, state=st, pod=pod, start_index=start_index)
        ).SerializeToString()
        acked = st.generation
        if i >= warmup:
            lat.append((time.perf_counter() - t0) * 1000)
        answer = pb.ScheduleStreamResponse.FromString(resp)
        if answer.WhichOneof("result") != "response":
            raise SystemExit(f"berth bench: the server refused a cycle: {answer.error.message}")
        out = answer.response
        start_index = out.next_start_index
        if out.node:
            assume(log, pod, out.node)
            if i >= warmup:
                scheduled += 1
    elapsed = time.perf_counter() - t_start
    cpu_ms = (time.process_time() - cpu) * 1000 / cycles
    return CycleStats(num_nodes, cycles, elapsed, lat, scheduled, 0, "inprocess", cpu_ms, 0.0)


def run_cycle(args: argparse.Namespace) -> int:
    sizes = args.nodes or [500, 5000]
    results: list[CycleStats] = []
    with contextlib.ExitStack() as stack:
        server = Server(args.server) if args.server else None
        if server is None:
            print("[bench] starting berth serve ...", flush=True)
            server = stack.enter_context(spawn_server(args.config))
        print(
            f"[bench] server at {server.address}; {args.cycles} timed cycles per size", flush=True
        )
        transports = (
            ["stream", "unary", "batch", "inprocess"]
            if args.transport == "all"
            else [args.transport]
        )
        for n in sizes:
            for transport in transports:
                print(
                    f"[bench] {n} nodes, {transport}: warming up ({args.warmup} cycles) ...",
                    flush=True,
                )
                if transport == "batch":
                    stats = asyncio.run(
                        bench_batches(server, args.profile, n, args.cycles, args.warmup, args.batch)
                    )
                elif transport == "inprocess":
                    stats = bench_inprocess(args.config, args.profile, n, args.cycles, args.warmup)
                else:
                    stats = asyncio.run(
                        bench_cycles(server, args.profile, n, args.cycles, args.warmup, transport)
                    )
                results.append(stats)
                print(
                    f"[bench] {n} nodes, {transport}: {stats.rate:.0f} cycles/s, "
                    f"p50 {stats.pct(50):.2f} ms, p99 {stats.pct(99):.2f} ms",
                    flush=True,
                )
    print()
    print(
        "| nodes | RPC | cycles | cycles/s | p50 ms | p90 ms | p99 ms "
        "| server CPU ms/cycle | client CPU ms/cycle | placed | resyncs |"
    )
    # In-process, the one process does both sides: its CPU is the client column.
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in results:
        rpc = {
            "stream": "ScheduleStream",
            "unary": "Schedule (unary)",
            "batch": "ScheduleBatch",
            "inprocess": "in-process, no gRPC",
        }[s.transport]
        print(
            f"| {s.nodes} | {rpc} | {s.cycles} | {s.rate:.0f} | {s.pct(50):.2f} | "
            f"{s.pct(90):.2f} | {s.pct(99):.2f} | "
            f"{'-' if s.transport == 'inprocess' else f'{s.server_cpu_ms:.2f}'} | "
            f"{s.client_cpu_ms:.2f} | {s.scheduled} | {s.resyncs} |"
        )
    return 0
