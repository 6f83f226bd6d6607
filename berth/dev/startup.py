"""How long ``berth shim`` and ``berth serve`` take to start, from spawn.

    python -m berth.dev.startup [--runs 5] [--nodes 100] [--pods 1500] [--what shim,serve]
        [--grpc] [--trees DIR,DIR]

- ``shim``: a local cluster (etcd and kube-apiserver, no controllers) with ``--nodes``
  nodes and ``--pods`` pending pods, then ``--runs`` times (after one spawn not counted):
  spawn ``berth shim`` and time until its ``/readyz`` answers 200 (informers listed and
  synced), and the CPU time (user + system, all its threads) it had used by then. The
  pods name another scheduler, so no run binds any and every run starts from the same
  cluster; the shim lists and caches them all the same. Its plugins run in-process, or
  with ``--grpc`` on a ``berth serve`` started once beforehand, as the drain benchmark
  runs it (berth/dev/bench_perf.py: the server outlives the shim it restarts).
- ``--trees A,B``: Berth's source trees to compare (each put first on PYTHONPATH, and
  compiled): every run spawns the shim of each tree in turn, alternating, against the same
  cluster and server, and each tree gets its own figures.
- ``serve``: ``--runs`` times, spawn ``berth serve --insecure-plaintext`` on a free
  loopback port and time until it prints its ``listening on port`` line.
- ``import``: ``--runs`` times, ``python -c 'import berth.shim.app'`` and the
  ``-X importtime`` entries of the modules that cost most, cumulative.

Before measuring, Berth's modules are compiled to bytecode (``compileall``), as the image
ships them (deploy/Dockerfile): with ``PYTHONDONTWRITEBYTECODE=1`` and no ``__pycache__``
every spawn compiles ~180 modules from source first, a cost no deployment pays.
``--no-compile`` leaves the bytecode as it is, to measure that case.

Each figure is the median of the runs, with the minimum and maximum; the machine's load
average is printed beside them, since a shared machine's figures are noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

SCHEDULER_NAME = "berth-startup"
# The pending pods' scheduler: not the shim's, so runs bind nothing.
OTHER_SCHEDULER = "berth-startup-other"
NAMESPACE = "startup"
READY_TIMEOUT = 60.0

CONFIG = f"""apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
- schedulerName: {SCHEDULER_NAME}
"""


def _berth() -> list[str]:
    return [sys.executable, "-m", "berth"]


def _summary(name: str, values: Sequence[float]) -> str:
    return (
        f"{name}: median {statistics.median(values):.3f}s "
        f"(min {min(values):.3f}, max {max(values):.3f}, {len(values)} runs; "
        f"load average {os.getloadavg()[0]:.2f})"
    )


def measure_serve(runs: int) -> list[float]:
    from berth.dev.localcluster.ports import free_port

    times = []
    for _ in range(runs):
        port = free_port()
        start = time.monotonic()
        proc = subprocess.Popen(
            [*_berth(), "serve", "--insecure-plaintext", "--listen", f"127.0.0.1:{port}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if "listening on port" in line:
                    times.append(time.monotonic() - start)
                    break
            else:
                raise SystemExit(f"berth serve exited ({proc.wait()}) before listening")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return times


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` (all its threads) so far, from
    /proc/PID/stat; NaN where there is no /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    # After the command's ")": state is field 3, utime and stime fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tree_env(tree: str | None) -> dict[str, str] | None:
    if tree is None:
        return None
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tree, env.get("PYTHONPATH")) if p)
    return env


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class ShimTimes:
    """One tree's spawns: seconds to ready, and CPU seconds used by then."""

    ready: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def _start_server(config: Path) -> tuple[subprocess.Popen[str], int]:
    from berth.dev.localcluster.ports import free_port
    from berth.dev.localcluster.process import local_serve_command

    port = free_port()
    proc = subprocess.Popen(
        local_serve_command(config, port),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "listening on port" in line:
            return proc, port
    raise SystemExit(f"berth serve exited ({proc.wait()}) before listening")


def _spawn_shim_once(
    kubeconfig: str, config: Path, server_args: Sequence[str], tree: str | None
) -> tuple[float, float]:
    from berth.dev.localcluster.ports import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}/readyz"
    env = _tree_env(tree)
    start = time.monotonic()
    proc = subprocess.Popen(
        [
            *_berth(),
            "shim",
            "--kubeconfig",
            kubeconfig,
            "--config",
            str(config),
            "--metrics-listen",
            f"127.0.0.1:{port}",
            "--insecure-metrics",
            *server_args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        # python -m puts the working directory first on sys.path, before PYTHONPATH.
        cwd=tree,
    )
    try:
        while not _ready(url):
            if proc.poll() is not None:
                raise SystemExit(f"berth shim exited ({proc.returncode}) before ready")
            if time.monotonic() - start > READY_TIMEOUT:
                raise SystemExit(f"berth shim not ready within {READY_TIMEOUT:g}s")
            time.sleep(0.01)
        return time.monotonic() - start, _cpu_seconds(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def measure_shim(
    runs: int, nodes: int, pods: int, grpc: bool = False, trees: Sequence[str | None] = (None,)
) -> dict[str | None, ShimTimes]:
    from berth.dev.localcluster import LocalCluster, objects
    from berth.dev.localcluster.binaries import default_bin_dir, require_binaries
    from berth.dev.localcluster.cluster import ClusterConfig

    directory = default_bin_dir()
    require_binaries(directory)
    with tempfile.TemporaryDirectory(prefix="berth-startup-") as tmp:
        local = LocalCluster(
            ClusterConfig(
                state_dir=Path(tmp) / "cluster",
                bin_dir=directory,
                die_with_parent=True,
                controllers=(),
            )
        )
        local.start()
        server: subprocess.Popen[str] | None = None
        try:
            cluster = local.cluster
            with cluster.client() as kube:
                objects.create_namespace(kube, NAMESPACE)
                objects.create_nodes(kube, (objects.node(f"node-{i:04d}") for i in range(nodes)))
                objects.create_pods(
                    kube,
                    (
                        objects.pod(
                            f"pod-{i:05d}", namespace=NAMESPACE, scheduler_name=OTHER_SCHEDULER
                        )
                        for i in range(pods)
                    ),
                )
            config = Path(tmp) / "config.yaml"
            config.write_text(CONFIG)
            kubeconfig = str(cluster.scheduler_kubeconfig or cluster.kubeconfig)
            server_args: list[str] = []
            if grpc:
                server, port = _start_server(config)
                server_args = ["--plugin-server", f"127.0.0.1:{port}", "--insecure-plaintext"]
            results = {tree: ShimTimes() for tree in trees}
            # One spawn first, not counted: the API server's first LISTs of a new
            # cluster are slower than any after (its watch cache fills).
            _spawn_shim_once(kubeconfig, config, server_args, trees[0])
            for run in range(runs):
                # Alternating, each run in the other order: a tree is not always the
                # one spawned right after another's.
                for tree in trees if run % 2 == 0 else list(reversed(trees)):
                    ready, cpu = _spawn_shim_once(kubeconfig, config, server_args, tree)
                    results[tree].ready.append(ready)
                    results[tree].cpu.append(cpu)
            return results
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=30)
            local.stop()


def measure_import(runs: int, top: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.monotonic()
        subprocess.run([sys.executable, "-c", "import berth.shim.app"], check=True)
        times.append(time.monotonic() - start)
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import berth.shim.app"],
        check=True,
        capture_output=True,
        text=True,
    ).stderr
    rows = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    rows.sort(reverse=True)
    print(f"-X importtime, import berth.shim.app, top {top} cumulative (us):")
    for us, name in rows[:top]:
        print(f"  {us:>9} {name}")
    return times


def compile_berth(tree: str | None = None) -> None:
    """Bytecode for every module of Berth's source tree (``tree``'s, else the one
    imported): the package and the folders its links point to (compileall does not
    follow links)."""
    import compileall

    import berth

    package = (
        Path(tree, "berth").resolve() if tree is not None else Path(berth.__file__).resolve().parent
    )
    roots = {package, *(p.resolve() for p in package.iterdir() if p.is_symlink())}
    for root in sorted(roots):
        compileall.compile_dir(root, quiet=1, workers=0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m berth.dev.startup",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="shim: a local cluster from ~/.cache/berth/k8s (hack/build-k8s.sh builds it).",
    )
    parser.add_argument("--runs", type=int, default=5, help="spawns of each (default 5)")
    parser.add_argument("--nodes", type=int, default=100, help="nodes for shim (default 100)")
    parser.add_argument(
        "--pods", type=int, default=1500, help="pending pods for shim (default 1500)"
    )
    parser.add_argument(
        "--what",
        default="import,serve,shim",
        help="comma-separated: import, serve, shim (default all three)",
    )
    parser.add_argument(
        "--top", type=int, default=15, help="importtime entries to print (default 15)"
    )
    parser.add_argument(
        "--grpc",
        action="store_true",
        help="shim: its plugins on a berth serve over gRPC (as the drain benchmark), not "
        "in-process",
    )
    parser.add_argument(
        "--trees",
        default="",
        metavar="DIR,DIR",
        help="shim: Berth source trees to compare, alternating spawns (each first on "
        "PYTHONPATH); default: the one imported",
    )
    parser.add_argument(
        "--no-compile",
        action="store_true",
        help="do not compile Berth's modules to bytecode first (see above)",
    )
    args = parser.parse_args(argv)
    what = [w.strip() for w in args.what.split(",") if w.strip()]
    unknown = set(what) - {"import", "serve", "shim"}
    if unknown or args.runs < 1:
        parser.error(f"--what takes import, serve, shim (got {args.what!r}); --runs >= 1")
    trees: list[str | None] = [
        str(Path(t).resolve()) for t in args.trees.split(",") if t.strip()
    ] or [None]
    if not args.no_compile:
        for tree in trees:
            compile_berth(tree)
    from berth.dev.bench_perf import python_text

    # Start-up depends on the interpreter's build most of all (docs/benchmarks.md, session 36).
    print(f"Python: {python_text()}", flush=True)
    if "import" in what:
        print(_summary("import berth.shim.app", measure_import(args.runs, args.top)), flush=True)
    if "serve" in what:
        print(_summary("berth serve spawn->listening", measure_serve(args.runs)), flush=True)
    if "shim" in what:
        results = measure_shim(args.runs, args.nodes, args.pods, args.grpc, trees)
        mode = "over gRPC" if args.grpc else "in-process plugins"
        for tree, times in results.items():
            where = f" [{tree}]" if tree is not None else ""
            print(
                _summary(
                    f"berth shim spawn->ready ({args.nodes} nodes, {args.pods} pods, {mode})"
                    + where,
                    times.ready,
                ),
                flush=True,
            )
            print(_summary(f"  its CPU until ready{where}", times.cpu), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
