"""``berth what-if``: where would these pods go, and what if the policy changed?

Takes a snapshot of a cluster (files, or a live cluster with --kubeconfig; every kind the
profiles' plugins read, berth/cli/snapshot.py), places the pods of --pods in order through
each configuration's real plugin chain (berth/cli/simulate.py), and reports where each
lands, which stay pending and why (upstream's FitError words), and per-node utilisation
after. With two --config, the runs are side by side: placements that differ, pending
counts, utilisation per configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from berth.cli.simulate import (
    DEFAULT_PASSES,
    PROGRESS_PODS,
    Amount,
    NodeUse,
    PodOutcome,
    Run,
    Simulation,
)
from berth.cli.snapshot import (
    Limits,
    SnapshotError,
    add_snapshot_flags,
    load_pods,
    reads_of,
    stderr_progress,
    take_snapshot,
)

__all__ = ["differences", "register", "render_json", "render_table", "run"]

PROG = "berth what-if"

DESCRIPTION = """\
Places the pods of --pods, in order, on a snapshot of a cluster through the real plugin
chain of a KubeSchedulerConfiguration (the code 'berth serve' and 'berth shim' run: each
placed pod counts on its node for the pods after it, what Reserve and PreBind write goes
into the snapshot, a gang waits at Permit until it is complete), and reports where each
pod lands, which stay pending and why (in upstream's words: "0/N nodes are available:
..."), and each node's utilisation after (requests against allocatable: cpu, memory, pods,
extended resources such as GPUs, DRA devices).

With two --config, both run on the same snapshot and the report puts them side by side:
the placements that differ, pending counts and utilisation per configuration.

The snapshot holds every kind the profiles' plugins read (NodeMetrics for LowCpuScheduler,
PVCs/PVs/StorageClasses for the volume plugins, PodGroups for Coscheduling, ResourceClaims,
ResourceSlices and DeviceClasses for DynamicResources, Namespaces, PDBs, ...); objects of
other kinds are dropped with one warning line per kind on stderr.

Exit status: 0 every pod placed, 1 some pod pending, 2 error."""

EPILOG = """\
examples:
  kubectl get nodes,pods,pvc,pv,storageclasses,namespaces -A -o yaml > cluster.yaml
  berth what-if --cluster cluster.yaml --pods new-pods.yaml
  berth what-if --kubeconfig ~/.kube/config --pods new-pods.yaml -o json
  berth what-if --cluster cluster.yaml --pods new-pods.yaml --config today.yaml --config tomorrow.yaml

See docs/what-if.md."""


class UsageError(Exception):
    pass


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "what-if",
        help="place a list of pods on a cluster snapshot; compare two configurations",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_snapshot_flags(
        p,
        cluster_help="the cluster as YAML or JSON files (kubectl get ... -o yaml): Lists, "
        "several documents or single objects; nodes, pods bound to them, and the objects "
        "plugins read",
    )
    p.add_argument(
        "--pods",
        required=True,
        metavar="FILE",
        help="the pods to place, in order (YAML or JSON; a List or several documents)",
    )
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="KubeSchedulerConfiguration; give it twice to compare two (default: upstream's "
        "default profile)",
    )
    p.add_argument(
        "--profile",
        metavar="NAME",
        help="profile for every pod; default: each pod's schedulerName, or a configuration's "
        "only profile",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "yaml"),
        default="table",
        help="output format (default %(default)s)",
    )
    p.add_argument(
        "--passes",
        type=int,
        default=DEFAULT_PASSES,
        metavar="N",
        help="try pending pods again while a pass places any, at most N passes in all (as the "
        "scheduling queue retries them on cluster events; 1: one try each; default "
        "%(default)s)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=1,
        help="tie-break seed: among nodes of equal top score the scheduler picks at random; "
        "the same seed picks the same (default %(default)s)",
    )
    p.set_defaults(func=run)


@dataclass(frozen=True, slots=True)
class Loaded:
    name: str
    config: Any


def _configs(paths: Sequence[str], registry: Any) -> list[Loaded]:
    from berth.framework.config import default_config, load_config

    if len(paths) > 2:
        raise UsageError("--config: at most two configurations are compared")
    if not paths:
        return [Loaded("default", default_config(registry))]
    names = ["A", "B"] if len(paths) == 2 else [Path(paths[0]).name]
    return [Loaded(n, load_config(path, registry)) for n, path in zip(names, paths, strict=True)]


async def _what_if(args: argparse.Namespace) -> list[Run]:
    from berth.plugins.registry import load_registry
    from berth.server.app import build_frameworks
    from berth.server.service import SchedulingService

    if args.passes < 1:
        raise UsageError("--passes must be at least 1")
    registry = load_registry()
    configs = _configs(args.config, registry)
    for c in configs:
        if c.config.extenders:
            print(
                f"{PROG}: warning: {c.config.source}: its {len(c.config.extenders)} extender(s) "
                "are not called: the run is the plugins' answer alone",
                file=sys.stderr,
            )
    built = [build_frameworks(c.config, registry) for c in configs]
    reads = [k for fws in built for k in reads_of(fws)]
    snap = take_snapshot(args, reads, PROG)
    pods = load_pods(args.pods, Limits(max_bytes=args.max_bytes, max_objects=args.max_objects))
    progress = stderr_progress(PROG) if len(pods) > PROGRESS_PODS else None
    runs = []
    for c, fws in zip(configs, built, strict=True):
        sim = Simulation(
            c.name,
            c.config,
            SchedulingService(c.config, fws),
            snap.state_log(),
            pods,
            profile=args.profile,
            passes=args.passes,
            seed=args.seed,
            progress=progress,
            pod_sources=snap.pod_sources,
        )
        runs.append(await sim.run())
    return runs


def run(args: argparse.Namespace) -> int:
    from berth.framework.config import ConfigError
    from berth.framework.runtime import ProfileError
    from berth.plugins.registry import RegistryError

    try:
        runs = asyncio.run(_what_if(args))
    except (UsageError, SnapshotError, ConfigError, ProfileError, RegistryError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    if args.output == "table":
        render_table(runs, sys.stdout)
    else:
        doc = render_json(runs)
        if args.output == "json":
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        else:
            sys.stdout.write(yaml.safe_dump(doc, sort_keys=False))
    if any(p.status == "error" for r in runs for p in r.pods):
        return 2
    return 1 if any(r.pending for r in runs) else 0


# -- output ----------------------------------------------------------------------------------


def _amount(a: Amount) -> dict[str, int]:
    return {"requested": a.requested, "allocatable": a.allocatable}


def _node_doc(n: NodeUse) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "node": n.node,
        "cpu": _amount(n.cpu),
        "memory": _amount(n.memory),
        "pods": _amount(n.pods),
    }
    if n.extended:
        doc["extended"] = {k: _amount(v) for k, v in n.extended.items()}
    if n.devices:
        doc["devices"] = {k: _amount(v) for k, v in n.devices.items()}
    return doc


def _pod_doc(p: PodOutcome) -> dict[str, Any]:
    doc: dict[str, Any] = {"pod": p.pod, "profile": p.profile, "status": p.status}
    doc["node"] = p.node or None
    if p.reason:
        doc["reason"] = p.reason
    if p.victims:
        doc["victims"] = p.victims
    return doc


def differences(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """The pods whose node (or status) differs between the two runs."""
    if len(runs) != 2:
        return []
    out = []
    for a, b in zip(runs[0].pods, runs[1].pods, strict=True):
        if (a.node, a.status) != (b.node, b.status):
            out.append(
                {
                    "pod": a.pod,
                    runs[0].name: a.node or a.status,
                    runs[1].name: b.node or b.status,
                }
            )
    return out


def render_json(runs: Sequence[Run]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "configs": [
            {
                "name": r.name,
                "source": r.source,
                "placed": sum(p.placed for p in r.pods),
                "pending": len(r.pending),
                "passes": r.passes,
                "pods": [_pod_doc(p) for p in r.pods],
                "evicted": r.evicted,
                "nodes": [_node_doc(n) for n in r.nodes],
            }
            for r in runs
        ]
    }
    if len(runs) == 2:
        doc["differences"] = differences(runs)
    return doc


def _cpu(a: Amount) -> str:
    """Both in cores when both are whole cores, else both in millicores."""
    if a.requested % 1000 == 0 and a.allocatable % 1000 == 0:
        return f"{a.requested // 1000}/{a.allocatable // 1000}"
    return f"{a.requested}m/{a.allocatable}m"


def _mem(a: Amount) -> str:
    """Both in the largest binary unit that divides both, else in Gi with a decimal."""
    for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if a.requested % size == 0 and a.allocatable % size == 0:
            return f"{a.requested // size}{unit}/{a.allocatable // size}{unit}"
    return f"{a.requested / 2**30:.1f}Gi/{a.allocatable / 2**30:.1f}Gi"


def _pct(a: Amount) -> str:
    return f"{100 * a.requested // a.allocatable}%" if a.allocatable else "-"


def _use(a: Amount, fmt: Any = None) -> str:
    if not a.allocatable and not a.requested:
        return "-"
    both = fmt(a) if fmt is not None else f"{a.requested}/{a.allocatable}"
    return f"{both} ({_pct(a)})"


def _table(rows: list[list[str]], out: TextIO, indent: str = "  ") -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r, widths, strict=True)]
        out.write(indent + "  ".join(cells).rstrip() + "\n")


def _resource_columns(runs: Sequence[Run]) -> tuple[list[str], list[str]]:
    ext = sorted({k for r in runs for n in r.nodes for k in n.extended})
    dev = sorted({k for r in runs for n in r.nodes for k in n.devices})
    return ext, dev


def render_table(runs: Sequence[Run], out: TextIO) -> None:
    w = out.write
    if len(runs) == 1:
        r = runs[0]
        w(f"Configuration: {r.source}\n")
        placed = sum(p.placed for p in r.pods)
        w(f"\nPlacements: {placed} of {len(r.pods)} pods placed, {len(r.pending)} pending\n")
        rows = [["POD", "NODE", "RESULT"]]
        for p in r.pods:
            rows.append([p.pod, p.node or "-", p.status + (f": {p.reason}" if p.reason else "")])
        _table(rows, out)
    else:
        a, b = runs
        w(f"Configurations: A = {a.source}, B = {b.source}\n")
        diff = differences(runs)
        w(
            f"\nPlacements: {len(diff)} of {len(a.pods)} pods differ; pending: "
            f"A {len(a.pending)}, B {len(b.pending)}\n"
        )
        rows = [["POD", "A", "B", ""]]
        for pa, pb_ in zip(a.pods, b.pods, strict=True):
            differs = (pa.node, pa.status) != (pb_.node, pb_.status)
            rows.append(
                [
                    pa.pod,
                    pa.node or pa.status,
                    pb_.node or pb_.status,
                    "<- differs" if differs else "",
                ]
            )
        _table(rows, out)
        for r in runs:
            if r.pending:
                w(f"\nPending under {r.name}:\n")
                for p in r.pending:
                    w(f"  {p.pod}: {p.status}: {p.reason}\n")
    for r in runs:
        if r.evicted:
            w(f"\nEvicted under {r.name} (preemption victims): {', '.join(r.evicted)}\n")
    ext, dev = _resource_columns(runs)
    w("\nUtilisation after (requests / allocatable):\n")
    if len(runs) == 1:
        rows = [["NODE", "CPU", "MEMORY", "PODS", *ext, *(f"{d} (DRA)" for d in dev)]]
        for n in runs[0].nodes:
            rows.append(
                [
                    n.node,
                    _use(n.cpu, _cpu),
                    _use(n.memory, _mem),
                    f"{n.pods.requested}/{n.pods.allocatable}",
                    *(_use(n.extended.get(k, Amount(0, 0))) for k in ext),
                    *(_use(n.devices.get(d, Amount(0, 0))) for d in dev),
                ]
            )
    else:
        heads = ["CPU", "MEMORY", "PODS", *ext, *(f"{d} (DRA)" for d in dev)]
        rows = [["NODE", *(f"{h} A|B" for h in heads)]]
        for na, nb in zip(runs[0].nodes, runs[1].nodes, strict=True):

            def both(get: Any, na: NodeUse = na, nb: NodeUse = nb) -> str:
                return f"{_pct(get(na))} | {_pct(get(nb))}"

            rows.append(
                [
                    na.node,
                    both(lambda n: n.cpu),
                    both(lambda n: n.memory),
                    f"{na.pods.requested} | {nb.pods.requested}",
                    *(both(lambda n, k=k: n.extended.get(k, Amount(0, 0))) for k in ext),
                    *(both(lambda n, d=d: n.devices.get(d, Amount(0, 0))) for d in dev),
                ]
            )
    _table(rows, out)
