"""Resident memory of the schedulers against the pods and nodes they hold.

Starts a private etcd + kube-apiserver (``berth.dev.localcluster``), fills it to each
point of ``--points`` (nodes:pods, the pods bound by ``spec.nodeName`` and shaped like
scheduler_perf's pod-default, the nodes like node-default), then at each point starts every
scheduler of ``--schedulers`` on its own, has it schedule a few pending pods (so the plugin
server holds the cluster state too), waits ``--settle`` seconds and reads VmRSS and VmHWM of
each of its processes from /proc. Fresh processes at every point: what a scheduler holds
after its first list, not what it kept from earlier points.

Two points that differ only in pods give the cost per 1000 pods; two that differ only in
nodes, per 1000 nodes::

    python -m berth.dev.memprobe --points 1000:0,1000:10000,1000:20000,2000:20000

Not a benchmark: nothing is timed. The machine's other load does not move RSS much, but a
point is one process start: repeat with ``--repeat`` to see the spread.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("berth.dev.memprobe")

NAMESPACE = "memprobe"
PROBE_LABEL = "berth.dev/memprobe"
SCHEDULERS = ("kube-scheduler", "berth", "berth-inprocess")


def proc_status_kib(pid: int, field: str) -> int:
    """A ``kB`` field of /proc/<pid>/status (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise ValueError(f"no {field} in /proc/{pid}/status")


def smaps_top(pid: int, count: int = 8) -> dict[str, float]:
    """Resident MiB by mapping (a file's name, [heap], [anon], [stack]), the ``count``
    largest, from /proc/<pid>/smaps: native libraries against heap and anonymous
    memory (Python objects, upb arenas and Go's heap are all anonymous)."""
    by: dict[str, int] = {}
    name = "[anon]"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head, _, rest = line.partition(" ")
        if "-" in head and not head.endswith(":"):
            fields = rest.split()
            name = Path(fields[4]).name if len(fields) >= 5 else "[anon]"
        elif head == "Rss:":
            by[name] = by.get(name, 0) + int(rest.split()[0])
    top = sorted(by.items(), key=lambda kv: -kv[1])[:count]
    return {k: round(v / 1024, 1) for k, v in top}


def parse_points(text: str) -> list[tuple[int, int]]:
    points: list[tuple[int, int]] = []
    for part in text.split(","):
        nodes, _, pods = part.partition(":")
        try:
            points.append((int(nodes), int(pods or 0)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"--points: {part!r} is not NODES:PODS") from None
    if any(b[0] < a[0] or b[1] < a[1] for a, b in itertools.pairwise(points)):
        raise argparse.ArgumentTypeError(
            "--points: nodes and pods may only grow from point to point"
        )
    return points


def _fill(kube: Any, nodes: int, pods: int, have: list[int]) -> None:
    """Creates nodes and bound pods up to ``nodes``/``pods`` (``have``: counts so far)."""
    from berth.dev.bench_perf import perf_node, perf_pod
    from berth.dev.localcluster import objects

    t0 = time.monotonic()
    objects.create_nodes(kube, (perf_node(i, False) for i in range(have[0], nodes)), concurrency=32)
    have[0] = max(have[0], nodes)

    def bound(i: int) -> dict[str, Any]:
        p = perf_pod(
            "default",
            f"filler-{i:06d}",
            NAMESPACE,
            scheduler="default-scheduler",
            run="filler",
            anti_affinity_namespaces=(),
        )
        p["spec"]["nodeName"] = f"perf-node-{i % have[0]:05d}"
        return p

    objects.create_pods(kube, (bound(i) for i in range(have[1], pods)), concurrency=32)
    have[1] = max(have[1], pods)
    log.info("filled to %d nodes, %d pods in %.0fs", nodes, pods, time.monotonic() - t0)


def _schedule_some(kube: Any, profile: str, count: int, tag: str, timeout: float) -> None:
    """Creates ``count`` pending pods for ``profile`` and waits until they are bound."""
    from berth.dev.bench_perf import perf_pod
    from berth.dev.localcluster import objects

    pods = []
    for i in range(count):
        p = perf_pod(
            "default",
            f"probe-{tag}-{i:03d}",
            NAMESPACE,
            scheduler=profile,
            run=tag,
            anti_affinity_namespaces=(),
        )
        p["metadata"]["labels"][PROBE_LABEL] = tag
        pods.append(p)
    objects.create_pods(kube, pods)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = kube.list(
            f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=f"{PROBE_LABEL}={tag}"
        ).items
        if len(items) == count and all(objects.is_bound(p) for p in items):
            return
        time.sleep(0.5)
    raise RuntimeError(f"{profile}: {count} probe pods not bound within {timeout:g}s")


def _start(name: str, cluster: Any, work: Path, profile: str) -> Any:
    from berth.dev import bench_perf

    if name == "kube-scheduler":
        return bench_perf.start_kube_scheduler_run(cluster, work, profile, 5000.0, 5000)
    return bench_perf.start_berth_run(
        cluster, work, profile, 5000.0, 5000, 256, grpc=name == "berth"
    )


def probe(opts: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    from berth.dev.localcluster import LocalCluster, objects
    from berth.dev.localcluster.cluster import ClusterConfig

    local = LocalCluster(
        ClusterConfig(state_dir=work / "cluster", die_with_parent=True, controllers=())
    )
    local.start()
    results: list[dict[str, Any]] = []
    try:
        with local.cluster.client() as kube:
            objects.create_namespace(kube, NAMESPACE)
            have = [0, 0]
            run = 0
            for nodes, pods in opts.points:
                _fill(kube, nodes, pods, have)
                for rep in range(opts.repeat):
                    for name in opts.schedulers:
                        run += 1
                        profile = f"memprobe-{run}"
                        running = _start(name, local.cluster, work / profile, profile)
                        try:
                            _schedule_some(kube, profile, opts.probe_pods, profile, 120.0)
                            time.sleep(opts.settle)
                            row: dict[str, Any] = {
                                "scheduler": name,
                                "nodes": nodes,
                                "pods": pods,
                                # With the probe pods of this run and the earlier ones.
                                "pods_total": pods + run * opts.probe_pods,
                                "repeat": rep,
                            }
                            for proc, pid in running.processes.items():
                                row[f"{proc}_rss_mib"] = proc_status_kib(pid, "VmRSS") / 1024
                                row[f"{proc}_hwm_mib"] = proc_status_kib(pid, "VmHWM") / 1024
                                if opts.smaps:
                                    row[f"{proc}_smaps"] = smaps_top(pid)
                            results.append(row)
                            print(json.dumps(row), flush=True)
                        finally:
                            running.stop()
    finally:
        local.stop()
    return results


def slopes(results: Sequence[dict[str, Any]]) -> list[str]:
    """MiB per 1000 pods (same nodes) and per 1000 nodes (same pods), by process, from the
    points' fewest and most pods (or nodes), each the mean of its repeats. The filler pods
    count, not the few probe pods (the same at every point but growing by run)."""
    lines: list[str] = []
    by: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by.setdefault(r["scheduler"], []).append(r)

    def slope(rows: list[dict[str, Any]], key: str, other: str, what: str) -> None:
        groups: dict[int, list[dict[str, Any]]] = {}
        for r in rows:
            groups.setdefault(r[other], []).append(r)
        for fixed, group in groups.items():
            xs = sorted({r[key] for r in group})
            if len(xs) < 2:
                continue
            lo = [r for r in group if r[key] == xs[0]]
            hi = [r for r in group if r[key] == xs[-1]]
            for col in sorted(k for k in group[0] if k.endswith("_mib")):
                a = sum(r[col] for r in lo) / len(lo)
                b = sum(r[col] for r in hi) / len(hi)
                per = (b - a) / (xs[-1] - xs[0]) * 1000
                lines.append(
                    f"{rows[0]['scheduler']:16} {col:18} {per:7.2f} MiB per 1000 {what} "
                    f"({other}={fixed}, {xs[0]}..{xs[-1]}: {a:.1f} -> {b:.1f})"
                )

    for rows in by.values():
        slope(rows, "pods", "nodes", "pods")
        slope(rows, "nodes", "pods", "nodes")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m berth.dev.memprobe",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="Each scheduler runs alone at each point; nothing else should be scheduling.",
    )
    parser.add_argument(
        "--points",
        type=parse_points,
        default=parse_points("1000:0,1000:10000,1000:20000,2000:20000"),
        help="NODES:PODS,... growing; bound pods and nodes at each measurement "
        "(default: 1000:0,1000:10000,1000:20000,2000:20000)",
    )
    parser.add_argument(
        "--schedulers",
        type=lambda s: s.split(","),
        default=list(SCHEDULERS),
        help=f"comma-separated, of {', '.join(SCHEDULERS)} (default: all)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs of each scheduler per point")
    parser.add_argument(
        "--probe-pods", type=int, default=20, help="pending pods each run schedules (default 20)"
    )
    parser.add_argument(
        "--settle", type=float, default=5.0, help="seconds after the probe pods are bound"
    )
    parser.add_argument(
        "--smaps",
        action="store_true",
        help="add each process's largest mappings by resident MiB (/proc/PID/smaps)",
    )
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--work-dir", type=Path, help="cluster and logs (default: a temp dir)")
    opts = parser.parse_args(argv)
    bad = [s for s in opts.schedulers if s not in SCHEDULERS]
    if bad:
        parser.error(f"--schedulers: unknown {', '.join(bad)}; known: {', '.join(SCHEDULERS)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    run: Callable[[Path], list[dict[str, Any]]] = lambda w: probe(opts, w)  # noqa: E731
    if opts.work_dir:
        opts.work_dir.mkdir(parents=True, exist_ok=True)
        results = run(opts.work_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="berth-memprobe-") as tmp:
            results = run(Path(tmp))
    for line in slopes(results):
        print(line)
    if opts.json:
        opts.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
