"""``berth bench SchedulingBasic|TopologySpreading|PodAntiAffinity``: Berth beside upstream
kube-scheduler on one API server, scheduler_perf style.

One private control plane (etcd and kube-apiserver, ``berth.dev.localcluster``) per invocation.
The workload's nodes are created once (scheduler_perf's templates/node-default.yaml: cpu 4,
memory 32Gi, pods 110; TopologySpreading labels them ``topology.kubernetes.io/zone``
moon-1, moon-2, moon-3 round robin, as labelNodePrepareStrategy does). Then each scheduler
in turn, alone on the cluster:

- ``kube-scheduler``: upstream's, built by hack/build-k8s.sh, default plugins.
- ``berth``: ``berth shim`` calling a ``berth serve`` over gRPC.
- ``berth-inprocess``: ``berth shim`` with the plugins in its own process.
- ``berth-NAME`` (``--variant NAME=ARGS``): ``berth`` with more flags for its shim, or
  another configuration, beside ``berth`` in the same rounds (what a flag or a plugin costs).
- ``bind-only``: no scheduling at all: a process that binds each pod, round robin over the
  nodes, the way the shim writes (``berth.kube.asynchttp.AsyncApi`` from an event loop: the
  same HTTP/1.1 pool, token bucket and binding request as the shim's binding cycle, on as
  many connections), and writes the pod's Scheduled event through the shim's own event
  recorder, as every scheduler must (schedule_one.go bindingCycle). Its rate is the API
  server's ceiling for this workload on this machine: the API work of scheduling with none
  of the scheduling.

Two modes. By default (scheduler_perf's) the measured pods are created while the scheduler
runs. With ``--drain`` the scheduler that bound the initial pods is stopped, the measured
pods are created with no scheduler running, and a fresh scheduler process drains the
backlog: the window runs from starting that process to the last binding (start-up
included: a restarted or failed-over scheduler facing a backlog), and holds only the
scheduler, its bindings and its events, so no run is limited by how fast pods are created.
Berth over gRPC restarts only its shim there: the plugin server runs as a Deployment of its
own (deploy/base/plugin-server.yaml) and keeps serving while the scheduler restarts
(``--drain-cold-server`` restarts it too).

Each run gets fresh namespaces and a fresh scheduler process, creates the initial pods (not
measured) and waits until all are bound, then creates the measured pods while the
scheduler runs (scheduler_perf's createPods with collectMetrics), from a process of their
own (``PodCreator``: 30 keep-alive connections, client QPS and burst 5000, as
scheduler_perf's CreatePod and its client), so that creating them is not what limits the
run; the output says, per run, how many created pods waited for their scheduler and
whether the run was creation-limited anyway. Throughput follows upstream's throughputCollector
(test/integration/scheduler_perf/util.go, run and collect): bound pods counted from a watch,
sampled every second; the first sample only starts the clock; an interval in which nothing
was bound is not recorded but the next rate is repeated over the skipped intervals;
percentiles index the sorted samples at ceil(n*q/100)-1. Latencies: the scheduling attempt
histogram each scheduler exports (``scheduler_scheduling_attempt_duration_seconds``,
result="scheduled", the measured window's increase, quantiles interpolated within the
exponential buckets as Prometheus' histogram_quantile does), and creation-to-bound from the
watch (the pod's ADDED event to the event that shows its nodeName). CPU seconds (utime +
stime from /proc/<pid>/stat) over the measured window per 1000 measured pods, and peak RSS
(VmHWM) of each process.

After each run the harness checks what the API server holds: every pod bound, each to one
node only (its nodeName never changed between watch events), the scheduler's own count of
successful bindings equal to the pods and no binding conflict reported, no node over its
allocatable cpu, memory or pod count, and the pods' own hard constraints (required pod
anti-affinity, DoNotSchedule topology spread). A violation makes the command exit 1 and
says what broke.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import logging
import math
import os
import platform
import re
import shlex
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from berth.kube.eventloop import new_event_loop
from berth.kube.flowcontrol import TokenBucket
from berth.kube.rest import JSON, KubeApi

log = logging.getLogger(__name__)

SCHEDULERS: tuple[str, ...] = ("kube-scheduler", "berth", "berth-inprocess", "bind-only")
RUN_LABEL = "berth.dev/bench-run"
NODE_LABEL = "berth.dev/bench-node"
ZONE_KEY = "topology.kubernetes.io/zone"
HOSTNAME_KEY = "kubernetes.io/hostname"
ZONES = ("moon-1", "moon-2", "moon-3")
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.2"  # scheduler_perf's templates
ATTEMPT_METRIC = "scheduler_scheduling_attempt_duration_seconds"
ATTEMPTS_TOTAL = "scheduler_schedule_attempts_total"
# What the API server answers a second binding of a bound pod
# (pkg/registry/core/pod/storage/storage.go, assignPod); every scheduler here logs it.
CONFLICT_TEXT = "is already assigned to node"
# shim.scheduler.ShimOptions.bind_connections: the bind-only loop binds over as many
# connections, and writes its events on them, as the shim does.
BIND_CONNECTIONS = 32
# Threads creating the nodes and the initial pods (not measured; the measured pods come from
# PodCreator).
CREATE_WORKERS = 16
# The measured pods: scheduler_perf creates them from 30 workers (test/utils/runners.go,
# CreatePod: ParallelizeUntil(ctx, 30, ...)) through a client of QPS 5000, burst 5000
# (util.go, mustSetupCluster); here from one process of as many keep-alive connections.
CREATE_CONNECTIONS = 30
CREATE_QPS = 5000.0
CREATE_PROCESSES = 1
SAMPLE_INTERVAL = 1.0  # util.go, throughputSampleInterval
# How long a scheduler's own count of bindings may trail what the API server shows.
REPORT_GRACE = 15.0
# A run whose last binding came this soon after the last creation had no backlog left.
CREATION_TAIL = 0.25
# ... and was creation-limited if, at the median 1 s sample, fewer than this share of the
# measured pods waited for the scheduler (it kept up with creation most of the time).
CREATION_BACKLOG = 0.05

# --- workloads ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    name: str
    upstream: str  # where scheduler_perf defines it
    about: str
    init_kind: str  # pod template of the initial pods: "default" | "spreading" | "anti-affinity"
    measured_kind: str
    zones: bool  # label the nodes with zones round robin
    needs: tuple[str, ...]  # plugins a scheduler must run for the workload to mean anything
    default_nodes: int
    default_init_pods: int
    default_pods: int


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            name="SchedulingBasic",
            upstream="misc/performance-config.yaml SchedulingBasic",
            about="pod-default pods (100m cpu, 500Mi) on node-default nodes",
            init_kind="default",
            measured_kind="default",
            zones=False,
            needs=(),
            default_nodes=1000,
            default_init_pods=1000,
            default_pods=2000,
        ),
        Workload(
            name="TopologySpreading",
            upstream="topology_spreading/performance-config.yaml TopologySpreading",
            about="nodes in zones moon-1..3; pod-default initial pods, then "
            "pod-with-topology-spreading pods (maxSkew 5 over zones, DoNotSchedule)",
            init_kind="default",
            measured_kind="spreading",
            zones=True,
            needs=("PodTopologySpread",),
            default_nodes=1000,
            default_init_pods=1000,
            default_pods=2000,
        ),
        Workload(
            name="PodAntiAffinity",
            upstream="affinity/performance-config.yaml SchedulingPodAntiAffinity",
            about="pod-with-pod-anti-affinity pods (color=green, one per hostname, across "
            "the initial and the measured namespace)",
            init_kind="anti-affinity",
            measured_kind="anti-affinity",
            zones=False,
            needs=("InterPodAffinity",),
            default_nodes=1000,
            default_init_pods=200,
            default_pods=600,
        ),
    )
}

# node-default.yaml and pod-default.yaml: how many pods one node holds.
NODE_CPU_MILLI, NODE_MEMORY, NODE_PODS = 4000, 32 * 2**30, 110
POD_CPU_MILLI, POD_MEMORY = 100, 500 * 2**20
PODS_PER_NODE = min(NODE_CPU_MILLI // POD_CPU_MILLI, NODE_MEMORY // POD_MEMORY, NODE_PODS)


def perf_node(i: int, zones: bool) -> JSON:
    """templates/node-default.yaml (cpu 4, memory 32Gi, pods 110), Ready."""
    from berth.dev.localcluster import objects

    labels = {NODE_LABEL: "true"}
    if zones:
        labels[ZONE_KEY] = ZONES[i % len(ZONES)]
    return objects.node(f"perf-node-{i:05d}", cpu="4", memory="32Gi", pods=110, labels=labels)


def perf_pod(
    kind: str,
    name: str,
    namespace: str,
    *,
    scheduler: str,
    run: str,
    anti_affinity_namespaces: Sequence[str],
) -> JSON:
    """templates/pod-default.yaml, pod-with-topology-spreading.yaml or
    pod-with-pod-anti-affinity.yaml, named, for ``scheduler``, labelled with the run."""
    resources = {"cpu": f"{POD_CPU_MILLI}m", "memory": "500Mi"}
    spec: JSON = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "pause",
                "image": PAUSE_IMAGE,
                "ports": [{"containerPort": 80}],
                "resources": {"limits": dict(resources), "requests": dict(resources)},
            }
        ],
    }
    labels = {RUN_LABEL: run}
    if kind == "spreading":
        labels["color"] = "blue"
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 5,
                "topologyKey": ZONE_KEY,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"color": "blue"}},
            }
        ]
    elif kind == "anti-affinity":
        labels["color"] = "green"
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"color": "green"}},
                        "topologyKey": HOSTNAME_KEY,
                        "namespaces": list(anti_affinity_namespaces),
                    }
                ]
            }
        }
    elif kind != "default":
        raise ValueError(f"unknown pod template {kind!r}")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }


def berth_missing_plugins(workload: Workload) -> list[str]:
    """The plugins ``workload`` needs that Berth's default profile does not run (not
    registered, so left out of the defaults): its rows would measure nothing."""
    if not workload.needs:
        return []
    from berth.framework.config import parse_config
    from berth.plugins.registry import load_registry

    quiet = logging.getLogger("berth.framework.config")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "defaults left out" is what we are asking about
    try:
        config = parse_config(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "profiles": [{"schedulerName": "probe"}],
            },
            "<berth bench>",
            load_registry(strict=False),
        )
    finally:
        quiet.setLevel(level)
    enabled = {ref.name for refs in config.profiles[0].plugins.values() for ref in refs}
    return [p for p in workload.needs if p not in enabled]


# --- figures -------------------------------------------------------------------------------------


def percentile_ceil(sorted_values: Sequence[float], q: float) -> float:
    """util.go collect(): values[ceil(n*q/100)-1] of the sorted samples."""
    n = len(sorted_values)
    return sorted_values[max(0, math.ceil(n * q / 100) - 1)]


@dataclass
class Throughput:
    """throughputCollector's output: the recorded rates (repeated over skipped intervals)
    and, for the plot, each sample's time since the measurement began."""

    rates: list[float] = field(default_factory=list)
    points: list[tuple[float, float]] = field(default_factory=list)

    def summary(self) -> dict[str, float | None]:
        if not self.rates:
            return {"avg": None, "p50": None, "p90": None, "p95": None, "p99": None}
        s = sorted(self.rates)
        return {
            "avg": sum(s) / len(s),
            "p50": percentile_ceil(s, 50),
            "p90": percentile_ceil(s, 90),
            "p95": percentile_ceil(s, 95),
            "p99": percentile_ceil(s, 99),
        }


class ThroughputCollector:
    """util.go throughputCollector.run, fed by the watch: call ``tick(now, scheduled)`` once
    per interval with the number of measured pods bound so far."""

    def __init__(self, began: float) -> None:
        self.began = began
        self.result = Throughput()
        self._started = False
        self._last_count = 0
        self._last_time = began
        self._skipped = 0

    def tick(self, now: float, scheduled: int) -> float | None:
        """Returns the rate recorded by this tick, if any."""
        if scheduled == 0:
            return None
        if not self._started:
            # The first sample only starts the clock: sampling and creation begin independently.
            self._started = True
            self._last_count, self._last_time = scheduled, now
            return None
        new = scheduled - self._last_count
        if new == 0:
            self._skipped += 1
            return None
        rate = new / (now - self._last_time)
        self.result.rates.extend([rate] * (self._skipped + 1))
        self.result.points.append((now - self.began, rate))
        self._last_count, self._last_time, self._skipped = scheduled, now, 0
        return rate


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus' histogram_quantile over cumulative ``(upper bound, count)`` buckets
    (+Inf last): linear within the bucket holding the rank; the highest finite bound when
    the rank falls in +Inf. None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return prev_bound
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return prev_bound


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse_metrics(text: str) -> Samples:
    """Prometheus text exposition to {(sample name, sorted labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def sample(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, lbl), v in samples.items() if n == name and want <= set(lbl))


def _batch_average(before: Samples, after: Samples) -> float | None:
    """Pods per scheduling call of the shim during the window
    (berth_shim_schedule_batch_pods); None for a scheduler without it."""
    name = "berth_shim_schedule_batch_pods"
    calls = sample(after, f"{name}_count") - sample(before, f"{name}_count")
    if calls <= 0:
        return None
    return round((sample(after, f"{name}_sum") - sample(before, f"{name}_sum")) / calls, 2)


def attempt_buckets(before: Samples, after: Samples, profile: str) -> list[tuple[float, float]]:
    """The increase of scheduled attempts' duration buckets between two scrapes."""
    bounds: set[str] = {
        dict(lbl)["le"]
        for (n, lbl) in after
        if n == f"{ATTEMPT_METRIC}_bucket"
        and dict(lbl).get("profile") == profile
        and dict(lbl).get("result") == "scheduled"
    }
    out = []
    for le in bounds:
        labels = {"profile": profile, "result": "scheduled", "le": le}
        delta = sample(after, f"{ATTEMPT_METRIC}_bucket", **labels) - sample(
            before, f"{ATTEMPT_METRIC}_bucket", **labels
        )
        out.append((float(le), delta))
    return sorted(out)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all threads (/proc/<pid>/stat fields 14 and 15)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    """VmHWM: the process's peak resident set size."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise ValueError(f"no VmHWM in /proc/{pid}/status")


# --- the correctness check -----------------------------------------------------------------------


@dataclass
class RunFacts:
    """What one run left behind, for `check_run`."""

    pods: list[JSON]  # the run's pods as the API server lists them afterwards
    nodes: list[JSON]
    # "namespace/name" -> every non-empty nodeName the watch showed, in order.
    node_history: Mapping[str, Sequence[str]]
    expected: Sequence[str]  # "namespace/name" of every pod the run created
    # The scheduler's own count of successful bindings (None: it does not say).
    scheduled_reported: int | None
    # Bindings the API server refused because the pod was bound already, as reported.
    conflicts_reported: int
    # "namespace/name" of each pod with a Scheduled event; None: events are not checked.
    scheduled_events: Set[str] | None = None


def scheduled_events(client: KubeApi, namespaces: Iterable[str]) -> set[str]:
    """ "namespace/name" of every pod with a Scheduled event in ``namespaces``
    (core/v1 events: the events.k8s.io/v1 ones the schedulers write, listed with
    a field selector on the reason)."""
    out: set[str] = set()
    for ns in namespaces:
        cont = ""
        while True:
            params: dict[str, Any] = {"fieldSelector": "reason=Scheduled", "limit": 2000}
            if cont:
                params["continue"] = cont
            page = client.get(f"/api/v1/namespaces/{ns}/events", **params)
            for ev in page.get("items") or []:
                obj = ev.get("involvedObject") or {}
                if obj.get("kind") == "Pod":
                    out.add(f"{obj.get('namespace') or ns}/{obj.get('name')}")
            cont = (page.get("metadata") or {}).get("continue") or ""
            if not cont:
                break
    return out


def _key(pod: JSON) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _requests(pod: JSON) -> tuple[int, int]:
    """cpu millis and memory bytes a pod asks for (containers; init containers by their max;
    overhead added), as NodeResourcesFit counts them for these templates."""
    from berth.framework.units import parse_quantity

    def of(containers: Iterable[JSON]) -> list[tuple[int, int]]:
        out = []
        for c in containers:
            req = (c.get("resources") or {}).get("requests") or {}
            out.append(
                (
                    parse_quantity(str(req.get("cpu", "0"))).milli(),
                    parse_quantity(str(req.get("memory", "0"))).value(),
                )
            )
        return out

    spec = pod["spec"]
    main = of(spec.get("containers") or [])
    init = of(spec.get("initContainers") or [])
    cpu = max([sum(c for c, _ in main), *(c for c, _ in init)])
    mem = max([sum(m for _, m in main), *(m for _, m in init)])
    overhead = spec.get("overhead") or {}
    cpu += parse_quantity(str(overhead.get("cpu", "0"))).milli()
    mem += parse_quantity(str(overhead.get("memory", "0"))).value()
    return cpu, mem


def _selects(selector: JSON, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector: matchLabels and matchExpressions (In, NotIn, Exists,
    DoesNotExist)."""
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def check_run(facts: RunFacts) -> list[str]:
    """Every violation of bound-exactly-once, node capacity and the pods' hard constraints;
    an empty list when the run is correct."""
    from berth.framework.units import parse_quantity

    problems: list[str] = []
    by_key = {_key(p): p for p in facts.pods}
    nodes = {n["metadata"]["name"]: n for n in facts.nodes}

    unbound = [
        k for k in facts.expected if not (by_key.get(k) or {}).get("spec", {}).get("nodeName")
    ]
    if unbound:
        problems.append(
            f"{len(unbound)} pod(s) not bound at the end: {', '.join(sorted(unbound)[:5])}"
        )
    for key, seen in sorted(facts.node_history.items()):
        distinct = list(dict.fromkeys(seen))
        if len(distinct) > 1:
            problems.append(f"pod {key} was bound more than once: {' -> '.join(distinct)}")
    if facts.scheduled_reported is not None and facts.scheduled_reported != len(facts.expected):
        problems.append(
            f"the scheduler reported {facts.scheduled_reported} successful bindings for "
            f"{len(facts.expected)} pods"
        )
    if facts.scheduled_events is not None:
        # schedule_one.go bindingCycle: kube-scheduler records a Scheduled event for
        # every pod it binds. A scheduler that drops them saves the API server work
        # the other schedulers pay for, so the run does not compare like with like.
        missing = [k for k in facts.expected if k not in facts.scheduled_events]
        if missing:
            problems.append(
                f"{len(missing)} of {len(facts.expected)} pod(s) have no Scheduled event: "
                f"{', '.join(sorted(missing)[:5])}"
            )
    if facts.conflicts_reported:
        problems.append(
            f"the scheduler reported {facts.conflicts_reported} binding(s) of a pod that was "
            "already bound (API server: 'is already assigned to node')"
        )

    used: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    placed: list[tuple[JSON, str]] = []
    for pod in facts.pods:
        node = pod.get("spec", {}).get("nodeName")
        if not node:
            continue
        if node not in nodes:
            problems.append(f"pod {_key(pod)} is bound to {node}, which is not a node")
            continue
        cpu, mem = _requests(pod)
        u = used[node]
        u[0] += cpu
        u[1] += mem
        u[2] += 1
        placed.append((pod, node))
    for name, (cpu, mem, count) in sorted(used.items()):
        alloc = nodes[name].get("status", {}).get("allocatable") or {}
        limits = (
            ("cpu", cpu, parse_quantity(str(alloc.get("cpu", "0"))).milli(), "m"),
            ("memory", mem, parse_quantity(str(alloc.get("memory", "0"))).value(), " bytes"),
            ("pods", count, parse_quantity(str(alloc.get("pods", "0"))).value(), ""),
        )
        for what, have, cap, unit in limits:
            if have > cap:
                problems.append(
                    f"node {name} is overcommitted: {what} {have}{unit} requested by its pods, "
                    f"{cap}{unit} allocatable"
                )

    problems.extend(_anti_affinity_violations(placed, nodes))
    problems.extend(_spread_violations(placed, nodes))
    return problems


def _anti_affinity_violations(
    placed: list[tuple[JSON, str]], nodes: Mapping[str, JSON]
) -> list[str]:
    """Required pod anti-affinity: no other pod its term selects shares its topology domain."""
    problems = []

    def node_label(node: str, key: str) -> str | None:
        value = nodes[node]["metadata"].get("labels", {}).get(key)
        return None if value is None else str(value)

    for pod, node in placed:
        terms = ((pod["spec"].get("affinity") or {}).get("podAntiAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or []
        for term in terms:
            key = term["topologyKey"]
            domain = node_label(node, key)
            if domain is None:
                continue
            spaces = set(term.get("namespaces") or [pod["metadata"]["namespace"]])
            for other, other_node in placed:
                if other is pod or other["metadata"]["namespace"] not in spaces:
                    continue
                if node_label(other_node, key) != domain:
                    continue
                if _selects(term.get("labelSelector") or {}, other["metadata"].get("labels") or {}):
                    problems.append(
                        f"pod anti-affinity broken: {_key(pod)} and {_key(other)} share "
                        f"{key}={domain}"
                    )
    return problems


def _spread_violations(placed: list[tuple[JSON, str]], nodes: Mapping[str, JSON]) -> list[str]:
    """DoNotSchedule topology spread: over the domains of the nodes carrying the key, the
    matching pods of the namespace differ by at most maxSkew."""
    problems = []
    checked: set[tuple[str, bytes]] = set()
    for pod, _ in placed:
        ns = pod["metadata"]["namespace"]
        for c in pod["spec"].get("topologySpreadConstraints") or []:
            if c.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule":
                continue
            ident = (ns, orjson.dumps(c, option=orjson.OPT_SORT_KEYS))
            if ident in checked:
                continue
            checked.add(ident)
            key = c["topologyKey"]
            counts: Counter[str] = Counter(
                {
                    str(n["metadata"]["labels"][key]): 0
                    for n in nodes.values()
                    if key in (n["metadata"].get("labels") or {})
                }
            )
            for other, node in placed:
                domain = (nodes[node]["metadata"].get("labels") or {}).get(key)
                if (
                    domain is not None
                    and other["metadata"]["namespace"] == ns
                    and _selects(
                        c.get("labelSelector") or {}, other["metadata"].get("labels") or {}
                    )
                ):
                    counts[str(domain)] += 1
            if counts:
                skew = max(counts.values()) - min(counts.values())
                if skew > int(c["maxSkew"]):
                    problems.append(
                        f"topology spread broken in {ns}: {key} skew {skew} > maxSkew "
                        f"{c['maxSkew']} ({dict(sorted(counts.items()))})"
                    )
    return problems


# --- watching the run's pods ---------------------------------------------------------------------


class ApiserverProfile:
    """A CPU profile of kube-apiserver (``/debug/pprof/profile``, Go's pprof format) over
    part of a measured window, fetched from a thread so that the window goes on."""

    DELAY = 2.0  # seconds into the window: past the first, ramping-up sample

    def __init__(
        self, client: KubeApi, path: Path, seconds: int, say: Callable[[str], None]
    ) -> None:
        self.client = client
        self.path = path
        self.seconds = seconds
        self.say = say
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, name="bench-pprof", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        time.sleep(self.DELAY)
        try:
            data = self.client.get_bytes(
                "/debug/pprof/profile", seconds=self.seconds, timeout=self.seconds + 30
            )
            self.path.write_bytes(data)
        except Exception as exc:
            self.error = str(exc)

    def finish(self, window: float) -> str | None:
        """Waits for the profile; its path, or None (said why) when there is none."""
        self._thread.join(self.seconds + 60)
        if self._thread.is_alive() or self.error is not None:
            self.say(f"no kube-apiserver profile: {self.error or 'it did not come back'}")
            return None
        note = ""
        if window < self.DELAY + self.seconds:
            note = (
                f"; the window ended after {window:.1f}s, so the profile also holds idle time:"
                " pass a shorter --apiserver-pprof-seconds"
            )
        self.say(f"kube-apiserver CPU profile ({self.seconds}s) written to {self.path}{note}")
        return str(self.path)


class PodWatch:
    """One watch on the run's pods (label RUN_LABEL=run), from before the first is created:
    when each was first seen, when it was first seen bound, every nodeName it showed."""

    def __init__(self, client: KubeApi, run: str, measured_namespace: str) -> None:
        self.client = client
        self.selector = f"{RUN_LABEL}={run}"
        self.measured_namespace = measured_namespace
        self.first_seen: dict[str, float] = {}
        self.bound_at: dict[str, float] = {}
        self.history: dict[str, list[str]] = defaultdict(list)
        self.bound_measured = 0
        self.bound_other = 0
        self.seen_measured = 0  # measured pods the watch has seen created
        self.last_bound = time.monotonic()
        self.error: str | None = None
        self.changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-watch", daemon=True)

    def start(self) -> None:
        listed = self.client.get("/api/v1/pods", labelSelector=self.selector, limit=1)
        self._rv = str(listed["metadata"]["resourceVersion"])
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for event in self.client.watch(
                    "/api/v1/pods",
                    timeout_seconds=120,
                    resourceVersion=self._rv,
                    labelSelector=self.selector,
                ):
                    now = time.monotonic()
                    if event["type"] == "ERROR":
                        raise RuntimeError(f"the watch failed: {event['object']}")
                    obj = event["object"]
                    self._rv = obj["metadata"].get("resourceVersion", self._rv)
                    self._seen(event["type"], obj, now)
                    if self._stop.is_set():
                        return
        except Exception as exc:
            with self.changed:
                self.error = f"watch on the run's pods ended: {exc}"
                self.changed.notify_all()

    def _seen(self, kind: str, obj: JSON, now: float) -> None:
        key = _key(obj)
        node = obj.get("spec", {}).get("nodeName")
        with self.changed:
            if key not in self.first_seen:
                self.first_seen[key] = now
                if obj["metadata"]["namespace"] == self.measured_namespace:
                    self.seen_measured += 1
            if not node or kind == "DELETED":
                return
            hist = self.history[key]
            if not hist or hist[-1] != node:
                hist.append(node)
            if key not in self.bound_at:
                self.bound_at[key] = now
                self.last_bound = now
                if obj["metadata"]["namespace"] == self.measured_namespace:
                    self.bound_measured += 1
                else:
                    self.bound_other += 1
                self.changed.notify_all()


# --- the schedulers ------------------------------------------------------------------------------


class BenchError(Exception):
    """The run could not be made or did not finish; the message says why."""


@dataclass
class Running:
    """A scheduler under test: its processes (label -> pid), how to read its metrics, logs,
    and how to stop it."""

    processes: dict[str, int]
    logs: list[Path]
    stop: Callable[[], None]
    metrics: Callable[[], str] | None = None  # Prometheus text, or None (bind-only)
    reported: Callable[[], tuple[int | None, int]] = lambda: (None, 0)
    # Berth over gRPC: stop the shim and leave ``berth serve`` running; returns the
    # server for the next start_berth_run (drain mode: the plugin server is a Deployment
    # of its own, deploy/base/plugin-server.yaml, and outlives a restarted shim).
    detach_server: Callable[[], PluginServer] | None = None


@dataclass(frozen=True)
class PluginServer:
    """A running ``berth serve`` that a shim may be started against."""

    port: int
    pid: int
    record: Any  # berth.dev.localcluster.process.ProcessRecord
    log: Path


@dataclass(frozen=True)
class Variant:
    """``--variant NAME=ARGS``: Berth over gRPC as the scheduler ``berth-NAME``, its shim
    started with ``shim_args`` after the harness's own flags, and its profile taken from
    ``config`` (the ARGS' ``--config FILE``) instead of ``--berth-config``."""

    name: str
    shim_args: tuple[str, ...]
    config: Path | None = None

    @property
    def scheduler(self) -> str:
        return f"berth-{self.name}"


# Flags of ``berth shim`` the harness sets itself: a variant may not change them.
VARIANT_RESERVED = (
    "--kubeconfig",
    "--plugin-server",
    "--metrics-listen",
    "--insecure-metrics",
    "--insecure-plaintext",
    "--leader-elect",
    "--no-leader-elect",
)
VARIANT_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?")


def parse_variant(text: str) -> Variant:
    """``NAME=ARGS`` (ARGS split as a shell would): BenchError saying what is wrong."""
    name, sep, rest = text.partition("=")
    if not sep:
        raise BenchError(
            f"--variant {text!r}: expected NAME=ARGS, e.g. noexplain='--explain-max-pods 0'"
        )
    if not VARIANT_NAME.fullmatch(name):
        raise BenchError(
            f"--variant {text!r}: NAME must be 1-20 lowercase letters, digits or '-', "
            "starting and ending with a letter or digit (it becomes the scheduler berth-NAME)"
        )
    try:
        words = shlex.split(rest)
    except ValueError as exc:
        raise BenchError(f"--variant {text!r}: ARGS: {exc}") from None
    args: list[str] = []
    config: Path | None = None
    i = 0
    while i < len(words):
        word = words[i]
        flag = word.split("=", 1)[0]
        if flag == "--config":
            if "=" in word:
                value = word.split("=", 1)[1]
            elif i + 1 < len(words):
                i += 1
                value = words[i]
            else:
                raise BenchError(f"--variant {name}: --config needs a FILE")
            config = Path(value)
            if not config.is_file():
                raise BenchError(f"--variant {name}: --config {value}: no such file")
        elif flag in VARIANT_RESERVED:
            raise BenchError(
                f"--variant {name}: {flag} is set by the harness; variants may not change it"
            )
        else:
            args.append(word)
        i += 1
    return Variant(name=name, shim_args=tuple(args), config=config)


def _get(url: str, *, insecure: bool = False, timeout: float = 10.0) -> tuple[int, str]:
    ctx = None
    if insecure:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # kube-scheduler's self-signed serving certificate
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode(errors="replace")
    except OSError:
        return 0, ""


def _wait(
    check: Callable[[], bool],
    timeout: float,
    what: str,
    proc: subprocess.Popen[bytes],
    log_path: Path,
) -> None:
    from berth.dev.localcluster.process import log_tail

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(
                f"{what}: exited with code {proc.returncode}:\n{log_tail(log_path, 30)}"
            )
        if check():
            return
        time.sleep(0.1)
    raise BenchError(f"{what}: not ready within {timeout:g}s:\n{log_tail(log_path, 30)}")


def _count_in(path: Path, text: str) -> int:
    try:
        return path.read_text(errors="replace").count(text)
    except OSError:
        return 0


def _berth_config(path: Path, profile: str, base: Path | None = None) -> Path:
    """Berth's configuration for a run: the defaults, or ``base``'s first profile
    (``--berth-config``) renamed to the run's scheduler name."""
    if base is None:
        path.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1\n"
            "kind: KubeSchedulerConfiguration\n"
            f"profiles:\n  - schedulerName: {profile}\n"
        )
        return path
    import yaml

    doc = yaml.safe_load(base.read_text())
    profiles = doc.get("profiles") if isinstance(doc, dict) else None
    if not profiles or not isinstance(profiles[0], dict):
        raise BenchError(f"--berth-config {base}: needs a KubeSchedulerConfiguration with profiles")
    doc["profiles"] = [{**profiles[0], "schedulerName": profile}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def start_kube_scheduler_run(
    cluster: Any, work: Path, profile: str, qps: float, burst: int
) -> Running:
    from berth.dev.localcluster import start_kube_scheduler

    ks = start_kube_scheduler(
        cluster,
        work,
        scheduler_name=profile,
        qps=qps,
        burst=burst,
        # /metrics without credentials, as /readyz already is (scraped over https, the
        # scheduler's self-signed certificate not verified).
        extra_args=["--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"],
    )
    url = f"https://127.0.0.1:{ks.port}/metrics"

    def metrics() -> str:
        status, text = _get(url, insecure=True)
        if status != 200:
            raise BenchError(f"kube-scheduler /metrics answered HTTP {status}: {text[:300]}")
        return text

    def reported() -> tuple[int | None, int]:
        scheduled = int(sample(parse_metrics(metrics()), ATTEMPTS_TOTAL, result="scheduled"))
        return scheduled, _count_in(ks.log_path, CONFLICT_TEXT)

    return Running(
        processes={"kube-scheduler": ks.pid},
        logs=[ks.log_path],
        stop=lambda: log.info("%s", ks.stop()),
        metrics=metrics,
        reported=reported,
    )


def start_berth_run(
    cluster: Any,
    work: Path,
    profile: str,
    qps: float,
    burst: int,
    batch_size: int,
    grpc: bool,
    config_base: Path | None = None,
    shim_args: Sequence[str] = (),
    server: PluginServer | None = None,
) -> Running:
    """``server``: a ``berth serve`` left running by an earlier run's ``detach_server``,
    used (and stopped with this run) instead of starting one."""
    from berth.dev.localcluster.ports import free_port
    from berth.dev.localcluster.process import ProcessRecord, local_serve_command, spawn, stop

    work.mkdir(parents=True, exist_ok=True)
    config = _berth_config(work / "scheduler-config.yaml", profile, config_base)
    berth = [sys.executable, "-m", "berth"]
    records: list[ProcessRecord] = []
    processes: dict[str, int] = {}
    logs: list[Path] = []

    def stop_all() -> None:
        for rec in reversed(records):
            log.info("%s", stop(rec))

    try:
        served = server
        if served is not None:
            records.append(served.record)
            processes["serve"] = served.pid
            logs.append(served.log)
        elif grpc:
            port = free_port()
            serve_log = work / "serve.log"
            proc, rec = spawn(
                "berth serve",
                local_serve_command(config, port),
                serve_log,
                die_with_parent=True,
            )
            records.append(rec)
            processes["serve"] = proc.pid
            logs.append(serve_log)
            _wait(
                lambda: "listening on port" in serve_log.read_text(errors="replace"),
                60,
                "berth serve",
                proc,
                serve_log,
            )
            served = PluginServer(port=port, pid=proc.pid, record=rec, log=serve_log)
        server_args: list[str] = []
        if served is not None:
            server_args = ["--plugin-server", f"127.0.0.1:{served.port}", "--insecure-plaintext"]
        mport = free_port()
        shim_log = work / "shim.log"
        proc, rec = spawn(
            "berth shim",
            [
                *berth,
                "shim",
                "--config",
                str(config),
                "--kubeconfig",
                str(cluster.scheduler_kubeconfig or cluster.kubeconfig),
                "--no-leader-elect",
                "--batch-size",
                str(batch_size),
                "--kube-api-qps",
                str(qps),
                "--kube-api-burst",
                str(burst),
                "--metrics-listen",
                f"127.0.0.1:{mport}",
                "--insecure-metrics",
                *server_args,
                *shim_args,
            ],
            shim_log,
            die_with_parent=True,
        )
        records.append(rec)
        processes = {"shim": proc.pid, **processes}
        logs.insert(0, shim_log)
        base = f"http://127.0.0.1:{mport}"
        _wait(
            lambda: _get(f"{base}/readyz", timeout=2)[0] == 200, 120, "berth shim", proc, shim_log
        )
    except BaseException:
        stop_all()
        raise

    def metrics() -> str:
        status, text = _get(f"{base}/metrics")
        if status != 200:
            raise BenchError(f"berth shim /metrics answered HTTP {status}: {text[:300]}")
        return text

    def reported() -> tuple[int | None, int]:
        scheduled = int(
            sample(parse_metrics(metrics()), ATTEMPTS_TOTAL, result="scheduled", profile=profile)
        )
        return scheduled, _count_in(shim_log, CONFLICT_TEXT)

    def detach_server() -> PluginServer:
        """Stop the shim alone; the server keeps running."""
        assert served is not None
        for rec in reversed(records):
            if rec is not served.record:
                log.info("%s", stop(rec))
        return served

    return Running(
        processes=processes,
        logs=logs,
        stop=stop_all,
        metrics=metrics,
        reported=reported,
        detach_server=detach_server if served is not None else None,
    )


def start_bind_only_run(cluster: Any, work: Path, profile: str, qps: float, burst: int) -> Running:
    from berth.dev.localcluster.process import spawn, stop

    work.mkdir(parents=True, exist_ok=True)
    log_path = work / "bind-only.log"
    proc, rec = spawn(
        "bind-only",
        [
            sys.executable,
            "-m",
            "berth.dev.bench_perf",
            "bind-only",
            "--kubeconfig",
            str(cluster.scheduler_kubeconfig or cluster.kubeconfig),
            "--scheduler-name",
            profile,
            "--qps",
            str(qps),
            "--burst",
            str(burst),
        ],
        log_path,
        die_with_parent=True,
    )
    try:
        _wait(
            lambda: "bind-only: ready" in log_path.read_text(errors="replace"),
            60,
            "bind-only",
            proc,
            log_path,
        )
    except BaseException:
        stop(rec)
        raise
    final: list[tuple[int | None, int]] = []
    stopped: list[bool] = []

    def stop_it() -> None:
        """Stops it once; it prints its counters on SIGTERM."""
        if stopped:
            return
        stopped.append(True)
        log.info("%s", stop(rec))
        text = log_path.read_text(errors="replace")
        m = re.findall(r"bind-only: bound (\d+), conflicts (\d+), errors (\d+)", text)
        if m:
            bound, conflicts, _errors = (int(x) for x in m[-1])
            final.append((bound, conflicts))

    def reported() -> tuple[int | None, int]:
        # Its counters come with its exit: it is done once every pod is bound.
        stop_it()
        if not final:
            raise BenchError(f"bind-only printed no counters when stopped; see {log_path}")
        return final[-1]

    return Running(
        processes={"bind-only": proc.pid}, logs=[log_path], stop=stop_it, reported=reported
    )


# --- one run -------------------------------------------------------------------------------------


@dataclass
class Options:
    workload: Workload
    nodes: int
    init_pods: int
    pods: int
    qps: float
    burst: int
    batch_size: int
    schedulers: tuple[str, ...]
    stall_timeout: float
    settle: float
    create_processes: int = CREATE_PROCESSES
    create_connections: int = CREATE_CONNECTIONS
    create_qps: float = CREATE_QPS
    create_burst: int = int(CREATE_QPS)
    berth_config: Path | None = None
    # Runs of the scheduler list, the order reversed every other round.
    rounds: int = 1
    # Restart kube-apiserver (same etcd, same flags) before every run but the first, so
    # that each scheduler meets an API server in the same state.
    restart_apiserver: bool = True
    # Write a CPU profile of kube-apiserver (pprof, ``go tool pprof``) for each run's
    # measured window into this directory (kube-apiserver then runs with --profiling).
    apiserver_pprof: Path | None = None
    apiserver_pprof_seconds: int = 10
    # Drain mode: the measured pods are created with no scheduler running; a fresh
    # scheduler process drains them (module docstring).
    drain: bool = False
    # Drain mode, Berth over gRPC: restart ``berth serve`` too, not only the shim.
    drain_cold_server: bool = False
    # ``--variant``: more Berth schedulers, ``berth-NAME``.
    variants: tuple[Variant, ...] = ()

    def variant(self, scheduler: str) -> Variant | None:
        return next((v for v in self.variants if v.scheduler == scheduler), None)


def _progress(workload: str, message: str) -> None:
    print(f"[bench {workload}] {message}", flush=True)


@functools.cache
def python_text() -> str:
    """The interpreter every Python process of the benchmark runs on (Berth's, bind-only's,
    the pod creator's): its version and path, and whether sysconfig says it was configured
    with profile-guided or link-time optimization. Such a build (the official images',
    deploy/Dockerfile's base) runs Berth 10-30% faster than a plain ``./configure``, so
    the figures depend on it. Some distributions' optimized builds (Debian's) do not say
    so in sysconfig. The same for the whole process: worked out once (the header, then
    every record, print it)."""
    import sysconfig

    flags = str(sysconfig.get_config_var("CONFIG_ARGS") or "")
    said = [f for f in ("--enable-optimizations", "--with-lto") if f in flags]
    build = f"configured {' '.join(said)}" if said else "sysconfig reports no PGO or LTO"
    return (
        f"{platform.python_implementation()} {platform.python_version()} at {sys.executable} "
        f"({build})"
    )


def _wait_bound(
    watch: PodWatch,
    count: Callable[[], int],
    want: int,
    *,
    stall: float,
    what: str,
    on_tick: Callable[[float, int], None] | None = None,
    began: float | None = None,
) -> None:
    """Wait until ``count()`` reaches ``want``; call ``on_tick(now, count)`` every
    SAMPLE_INTERVAL from ``began`` on; BenchError when nothing is bound for ``stall`` s."""
    next_tick = (began if began is not None else time.monotonic()) + SAMPLE_INTERVAL
    with watch.changed:
        while True:
            n = count()
            if n >= want:
                return
            if watch.error:
                raise BenchError(watch.error)
            now = time.monotonic()
            if on_tick is not None and now >= next_tick:
                watch.changed.release()
                try:
                    on_tick(now, n)
                finally:
                    watch.changed.acquire()
                next_tick += SAMPLE_INTERVAL * max(
                    1, math.floor((now - next_tick) / SAMPLE_INTERVAL) + 1
                )
                continue
            if now - watch.last_bound > stall:
                raise BenchError(f"{what}: {n}/{want} bound, none for {stall:g}s")
            wait = (next_tick - now) if on_tick is not None else 1.0
            watch.changed.wait(timeout=max(0.001, min(wait, 1.0)))


def _wait_seen(watch: PodWatch, want: int, timeout: float) -> None:
    """Wait until the watch has seen ``want`` measured pods created."""
    deadline = time.monotonic() + timeout
    with watch.changed:
        while watch.seen_measured < want:
            if watch.error:
                raise BenchError(watch.error)
            if time.monotonic() > deadline:
                raise BenchError(
                    f"the watch saw {watch.seen_measured} of {want} measured pods created "
                    f"within {timeout:g}s"
                )
            watch.changed.wait(timeout=0.5)


def _delete_pods(
    client: KubeApi, namespaces: Sequence[str], selector: str, timeout: float = 600
) -> None:
    from berth.dev.localcluster import objects
    from berth.kube.errors import ApiError

    for ns in namespaces:
        try:
            client.delete(f"/api/v1/namespaces/{ns}/pods", gracePeriodSeconds=0)
        except ApiError as exc:
            if exc.status != 0:
                raise
            # A collection of many thousand pods takes the API server longer than the
            # client's read timeout to delete; it goes on deleting, and the wait below
            # sees it finish.
            log.info("deleting the pods of %s goes on after the call timed out: %s", ns, exc)
    deadline = time.monotonic() + timeout
    while client.get("/api/v1/pods", labelSelector=selector, limit=1).get("items"):
        if time.monotonic() > deadline:
            raise BenchError(f"pods labelled {selector} still exist {timeout:g}s after deletion")
        time.sleep(0.5)
    for ns in namespaces:
        # The run's events too: left behind (they live an hour), they grow what the next
        # run's API server and etcd carry and slow whichever scheduler runs later.
        client.delete(f"/api/v1/namespaces/{ns}/events")
        objects.delete_namespace(client, ns)


def run_one(
    opts: Options,
    scheduler: str,
    cluster: Any,
    client: KubeApi,
    nodes: list[JSON],
    work: Path,
    server_pids: Mapping[str, int],
    pprof_to: Path | None = None,
) -> dict[str, Any]:
    """One scheduler through the workload; the record (the checks' violations included).
    With ``pprof_to``, a CPU profile of kube-apiserver over the measured window goes
    there."""
    from berth.dev.localcluster import objects

    w = opts.workload

    def say(message: str) -> None:
        _progress(w.name, f"{scheduler}: {message}")

    tag = uuid.uuid4().hex[:6]
    run = f"{scheduler}-{tag}"
    profile = f"perf-{scheduler}"
    init_ns, measured_ns = f"perf-{tag}-0", f"perf-{tag}-1"
    spaces = (measured_ns, init_ns)  # the anti-affinity template's ["sched-1", "sched-0"]
    for ns in (init_ns, measured_ns):
        objects.create_namespace(client, ns)

    def pods(kind: str, ns: str, count: int) -> list[JSON]:
        return [
            perf_pod(
                kind,
                f"pod-{i:05d}",
                ns,
                scheduler=profile,
                run=run,
                anti_affinity_namespaces=spaces,
            )
            for i in range(count)
        ]

    record: dict[str, Any] = {
        "workload": w.name,
        "scheduler": scheduler,
        "nodes": opts.nodes,
        "init_pods": opts.init_pods,
        "pods": opts.pods,
        "qps": opts.qps,
        "burst": opts.burst,
    }
    record["mode"] = "drain" if opts.drain else "concurrent"
    variant = opts.variant(scheduler)
    config_base = variant.config if variant and variant.config else opts.berth_config
    if scheduler.startswith("berth"):
        record["batch_size"] = opts.batch_size
        record["berth_config"] = str(config_base) if config_base else None
    if variant is not None:
        record["shim_args"] = list(variant.shim_args)
    say("starting")
    t_start = time.monotonic()
    # A directory per run: a log left by an earlier round must not answer for this one.
    sdir = work / run

    def start(where: Path, server: PluginServer | None = None) -> Running:
        if scheduler == "kube-scheduler":
            return start_kube_scheduler_run(cluster, where, profile, opts.qps, opts.burst)
        if scheduler in ("berth", "berth-inprocess") or variant is not None:
            return start_berth_run(
                cluster,
                where,
                profile,
                opts.qps,
                opts.burst,
                opts.batch_size,
                grpc=scheduler != "berth-inprocess",
                config_base=config_base,
                shim_args=variant.shim_args if variant else (),
                server=server,
            )
        if scheduler == "bind-only":
            return start_bind_only_run(cluster, where, profile, opts.qps, opts.burst)
        raise BenchError(f"unknown scheduler {scheduler!r}")

    running = start(sdir)
    # The counts of the process that bound the initial pods, in drain mode.
    init_reported: tuple[int | None, int] = (0, 0)
    watch = PodWatch(client, run, measured_ns)
    creator: PodCreator | None = None
    stopped = False
    error: BenchError | None = None
    try:
        say(
            f"ready in {time.monotonic() - t_start:.1f}s (pids "
            + ", ".join(f"{k} {v}" for k, v in running.processes.items())
            + f"); creating {opts.init_pods} initial pods"
        )
        watch.start()
        if opts.init_pods:
            objects.create_pods(
                client, pods(w.init_kind, init_ns, opts.init_pods), concurrency=CREATE_WORKERS
            )
            _wait_bound(
                watch,
                lambda: watch.bound_other,
                opts.init_pods,
                stall=opts.stall_timeout,
                what="initial pods",
            )
        measured = pods(w.measured_kind, measured_ns, opts.pods)
        created: list[BaseException] = []
        created_at: list[float] = []
        creator_cpu: float | None = None
        kept: PluginServer | None = None
        if opts.drain:
            # The watch shows a binding before its scheduler has counted it: wait for the
            # count (as after the measured window) before this process stops.
            init_reported = _settled_report(running, opts.init_pods)
            if running.detach_server is not None and not opts.drain_cold_server:
                kept = running.detach_server()
                record["server_kept"] = True
                stopped_what = "stopped the shim (berth serve keeps running)"
            else:
                running.stop()
                stopped_what = "stopped"
            stopped = True
            say(
                f"initial pods bound; {stopped_what}; creating {opts.pods} measured pods with "
                "no scheduler"
            )
            t_create = time.monotonic()
            objects.create_pods(client, measured, concurrency=opts.create_connections)
            _wait_seen(watch, opts.pods, opts.stall_timeout)
            say(
                f"{opts.pods} measured pods pending (created in {time.monotonic() - t_create:.1f}s);"
                f" starting a fresh {scheduler} to drain them"
            )
            began = time.monotonic()
            kept_cpu = cpu_seconds(kept.pid) if kept is not None else 0.0
            try:
                running = start(sdir / "drain", server=kept)
            except BaseException:
                if kept is not None:
                    from berth.dev.localcluster.process import stop

                    log.info("%s", stop(kept.record))
                raise
            stopped = False
            record["ready_seconds"] = time.monotonic() - began
            # What start-up cost, apart: the per-pod CPU below spreads it over the measured
            # pods, so workloads of different sizes compare only with it shown.
            # A kept berth serve counts from the window's start, as below.
            record["ready_cpu_seconds"] = {
                k: round(cpu_seconds(p) - (kept_cpu if k == "serve" else 0.0), 3)
                for k, p in running.processes.items()
            }
            if len(running.processes) > 1:
                record["ready_cpu_seconds"]["total"] = sum(record["ready_cpu_seconds"].values())
            say(f"ready in {record['ready_seconds']:.1f}s; draining")
            # A fresh process: everything it has done is the measured window's.
            before = {}
            created_at.append(began)
        else:
            say(f"initial pods bound; creating {opts.pods} measured pods while it schedules")
            before = parse_metrics(running.metrics()) if running.metrics else {}
        if opts.create_processes > 0 and not opts.drain:
            creator = PodCreator(
                cluster.kubeconfig,
                measured,
                sdir / "creator",
                processes=opts.create_processes,
                connections=opts.create_connections,
                qps=opts.create_qps,
                burst=opts.create_burst,
            )
            creator.start()
        pids = {**running.processes, **server_pids, "harness": os.getpid()}
        cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
        if opts.drain:
            # The drain window starts with the scheduler's process: its start-up counts;
            # a kept berth serve counts from the window's start.
            cpu0.update({k: 0.0 for k in running.processes})
            if kept is not None:
                cpu0["serve"] = kept_cpu

        def create() -> None:
            """With ``--create-processes 0``: the measured pods created from threads of the harness."""
            try:
                objects.create_pods(client, measured, concurrency=opts.create_connections)
                created_at.append(time.monotonic())
            except BaseException as exc:
                created.append(exc)

        # Created, seen by the watch and not yet bound, at each sample: a scheduler that
        # keeps up with creation has next to none.
        backlog: list[tuple[float, int]] = []
        if not opts.drain:
            began = time.monotonic()
        collector = ThroughputCollector(began)
        last_said = [began]

        def on_tick(now: float, n: int) -> None:
            rate = collector.tick(now, n)
            backlog.append((now - collector.began, watch.seen_measured - n))
            if now - last_said[0] >= 2.0:
                last_said[0] = now
                shown = f", {rate:.0f} pods/s" if rate is not None else ""
                say(f"{n}/{opts.pods} measured pods bound{shown}, {backlog[-1][1]} pending")
            if created:
                raise BenchError(f"creating the measured pods failed: {created[0]}")
            why = creator.failure() if creator is not None else None
            if why:
                raise BenchError(f"creating the measured pods failed: {why}")

        thread: threading.Thread | None = None
        if creator is not None:
            creator.go()
        elif not opts.drain:
            thread = threading.Thread(target=create, name="bench-create", daemon=True)
            thread.start()
        profiler = (
            ApiserverProfile(client, pprof_to, opts.apiserver_pprof_seconds, say)
            if pprof_to is not None
            else None
        )
        if profiler is not None:
            profiler.start()
        _wait_bound(
            watch,
            lambda: watch.bound_measured,
            opts.pods,
            stall=opts.stall_timeout,
            what="measured pods",
            on_tick=on_tick,
            began=began,
        )
        elapsed = time.monotonic() - began
        cpu1 = {k: cpu_seconds(p) for k, p in pids.items()}
        if profiler is not None:
            record["apiserver_pprof"] = profiler.finish(elapsed)
        rss = {k: peak_rss_mib(p) for k, p in running.processes.items()}
        if creator is not None:
            result = creator.wait(60)
            created_at.append(result.last)
            creator_cpu = result.cpu_seconds
            if result.created != opts.pods:
                raise BenchError(f"the pod creator created {result.created} of {opts.pods} pods")
        elif thread is not None:
            thread.join(60)
        # The API server shows a binding before the scheduler has counted it (its binding
        # call has yet to return): give its count a moment to catch up before comparing.
        total = opts.init_pods + opts.pods
        deadline = time.monotonic() + REPORT_GRACE
        scheduled_reported, conflicts = _settled_report(running, total - (init_reported[0] or 0))
        if scheduled_reported is not None and init_reported[0] is not None:
            scheduled_reported += init_reported[0]
        conflicts += init_reported[1]
        # Every scheduler, bind-only included, writes a Scheduled event per binding, after
        # the binding and in the background: give the last ones the same grace, with the
        # scheduler still running.
        while True:
            events = scheduled_events(client, (init_ns, measured_ns))
            if len(events) >= total or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        after = parse_metrics(running.metrics()) if running.metrics else {}
        running.stop()
        stopped = True
        watch.stop()
        if opts.drain:
            say(
                f"all {opts.pods} measured pods drained in {elapsed:.1f}s, start-up included "
                f"({opts.pods / elapsed:.0f} pods/s); checking"
            )
        else:
            made = f"{created_at[0] - began:.1f}s" if created_at else "?"
            say(
                f"all {opts.pods} measured pods bound in {elapsed:.1f}s (created in {made}); checking"
            )

        listed = client.get("/api/v1/pods", labelSelector=f"{RUN_LABEL}={run}")["items"]
        expected = [f"{init_ns}/pod-{i:05d}" for i in range(opts.init_pods)] + [
            f"{measured_ns}/pod-{i:05d}" for i in range(opts.pods)
        ]
        with watch.changed:
            history = {k: list(v) for k, v in watch.history.items()}
            first_seen = dict(watch.first_seen)
            bound_at = dict(watch.bound_at)
        violations = check_run(
            RunFacts(
                pods=listed,
                nodes=nodes,
                node_history=history,
                expected=expected,
                scheduled_reported=scheduled_reported,
                conflicts_reported=conflicts,
                scheduled_events=events,
            )
        )

        summary = collector.result.summary()
        # Creation to binding; in drain mode, the window's start to binding (the pods
        # were created before any scheduler ran).
        e2e = sorted(
            (bound_at[k] - (max(first_seen[k], began) if opts.drain else first_seen[k])) * 1000
            for k in expected[opts.init_pods :]
            if k in bound_at and k in first_seen
        )
        buckets = attempt_buckets(before, after, profile) if running.metrics else []
        per_k = 1000.0 / opts.pods
        caught_up = bool(created_at) and elapsed - (created_at[0] - began) < CREATION_TAIL
        backlog_p50 = percentile_ceil(sorted(n for _, n in backlog), 50) if backlog else None
        cpu = {k: (cpu1[k] - cpu0[k]) * per_k for k in running.processes}
        if len(cpu) > 1:
            cpu["total"] = sum(cpu.values())
        if len(rss) > 1:
            rss["total"] = sum(rss.values())
        record.update(
            {
                "status": "ok" if not violations else "failed",
                "pods_per_second_avg": summary["avg"],
                "pods_per_second_p50": summary["p50"],
                "pods_per_second_p90": summary["p90"],
                "pods_per_second_p95": summary["p95"],
                "pods_per_second_p99": summary["p99"],
                "pods_per_second_overall": opts.pods / elapsed,
                "measured_seconds": elapsed,
                # When creating the pods took about as long as binding them, creation was
                # the limit (bind-only usually is in that case).
                "creation_seconds": created_at[0] - began if created_at else None,
                "creation": {
                    "processes": opts.create_processes,
                    "connections": opts.create_connections,
                    "qps": opts.create_qps,
                    "burst": opts.create_burst,
                },
                # The last pod was bound right after the last creation: the scheduler had no
                # backlog left at the end ...
                "caught_up_at_end": caught_up,
                # ... and little during the run: its rate is (at least partly) the
                # creation rate.
                "creation_limited": caught_up
                and (backlog_p50 is None or backlog_p50 < CREATION_BACKLOG * opts.pods),
                # Pods created (seen by the watch) and not yet bound, each second.
                "backlog": [[round(t, 3), n] for t, n in backlog],
                "backlog_p50": backlog_p50,
                "backlog_max": max((n for _, n in backlog), default=None),
                "samples": [[round(t, 3), round(r, 2)] for t, r in collector.result.points],
                # [seconds since the window began, measured pods bound by then]: what
                # --plot draws in drain mode.
                "bound_timeline": bound_timeline(
                    [bound_at[k] - began for k in expected[opts.init_pods :] if k in bound_at]
                ),
                # The shim's pods per scheduling call (its --batch-size is the most).
                "shim_batch_pods_avg": _batch_average(before, after),
                "attempt_latency_ms_p50": _ms(histogram_quantile(0.50, buckets)),
                "attempt_latency_ms_p99": _ms(histogram_quantile(0.99, buckets)),
                "e2e_latency_ms_p50": percentile_ceil(e2e, 50) if e2e else None,
                "e2e_latency_ms_p99": percentile_ceil(e2e, 99) if e2e else None,
                "cpu_seconds_per_1000_pods": cpu,
                "python": None if scheduler == "kube-scheduler" else python_text(),
                "peak_rss_mib": rss,
                "other_cpu_seconds_per_1000_pods": {
                    **{k: (cpu1[k] - cpu0[k]) * per_k for k in pids if k not in running.processes},
                    # From its own count: it has exited by now.
                    **({"creator": creator_cpu * per_k} if creator_cpu is not None else {}),
                },
                "checks": {
                    "pods": len(expected),
                    "nodes": len(nodes),
                    "scheduled_reported": scheduled_reported,
                    "conflicts_reported": conflicts,
                    "scheduled_events": len(events),
                    "violations": violations,
                },
                "logs": [str(p) for p in running.logs],
            }
        )
        if violations:
            say("CORRECTNESS CHECK FAILED:\n  " + "\n  ".join(violations[:20]))
        else:
            say(
                f"checked: {len(expected)} pods bound once each, no node overcommitted, "
                "constraints hold, a Scheduled event for each"
            )
    except Exception as exc:  # reported as this run's failure; the next run goes on
        from berth.dev.localcluster.process import log_tail

        why = str(exc) if isinstance(exc, BenchError) else f"{type(exc).__name__}: {exc}"
        tails = "".join(f"\n  last lines of {p}:\n{log_tail(p, 12)}" for p in running.logs)
        error = BenchError(why + tails)
    finally:
        watch.stop()
        if creator is not None:
            creator.stop()
        if not stopped:
            running.stop()
    say("deleting the run's pods")
    try:
        # The API server deletes a collection's pods at tens per second: give each of
        # them a tenth of a second more than the default wait.
        _delete_pods(
            client,
            (init_ns, measured_ns),
            f"{RUN_LABEL}={run}",
            timeout=max(600.0, (opts.init_pods + opts.pods) / 10),
        )
    except BenchError as exc:
        if error is not None:
            raise error from exc
        # The run was measured and checked: its record stands, with the failed clean-up
        # said beside it (the next run's namespaces are its own).
        say(f"CLEAN-UP FAILED: {exc}")
        record["cleanup_error"] = str(exc)
    if error is not None:
        raise error
    return record


def _settled_report(running: Running, want: int) -> tuple[int | None, int]:
    """The scheduler's (successful bindings, conflicts) once it counts ``want`` bindings,
    or as they stand after REPORT_GRACE: the API server shows a binding before the
    scheduler's binding call has returned and been counted."""
    deadline = time.monotonic() + REPORT_GRACE
    while True:
        scheduled, conflicts = running.reported()
        if scheduled is None or scheduled >= want or time.monotonic() > deadline:
            return scheduled, conflicts
        time.sleep(0.2)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


# --- the whole benchmark -------------------------------------------------------------------------


def run_bench(opts: Options, work: Path) -> list[dict[str, Any]]:
    from berth.dev.localcluster import LocalCluster, objects
    from berth.dev.localcluster.binaries import default_bin_dir
    from berth.dev.localcluster.cluster import ClusterConfig

    w = opts.workload
    missing = berth_missing_plugins(w)
    records: list[dict[str, Any]] = []
    _progress(w.name, f"starting etcd and kube-apiserver in {work / 'cluster'}")
    if opts.apiserver_pprof is not None:
        opts.apiserver_pprof.mkdir(parents=True, exist_ok=True)
    with LocalCluster(
        ClusterConfig(
            state_dir=work / "cluster",
            bin_dir=default_bin_dir(),
            die_with_parent=True,
            # No kube-controller-manager: scheduler_perf (test/integration/scheduler_perf) runs
            # none, so the API server serves the schedulers under test alone.
            controllers=(),
            # Deleting a run's pods between runs: the API server's DeleteCollection deletes
            # with one worker by default (~20 pods/s, 12 minutes for 15,000 pods); outside
            # every measured window. Later flags win: --profiling turns on what
            # berth.dev.localcluster turns off.
            apiserver_args=(
                "--delete-collection-workers=16",
                *(("--profiling=true",) if opts.apiserver_pprof is not None else ()),
            ),
        )
    ) as local:
        server_pids = {p.name: p.pid for p in local.state.processes}
        client = local.cluster.client(pool_size=64)
        t0 = time.monotonic()
        _progress(
            w.name,
            f"creating {opts.nodes} nodes (node-default: cpu 4, memory 32Gi, pods 110{', zones moon-1..3' if w.zones else ''})",
        )
        objects.create_nodes(
            client, [perf_node(i, w.zones) for i in range(opts.nodes)], concurrency=CREATE_WORKERS
        )
        nodes = client.get("/api/v1/nodes", labelSelector=f"{NODE_LABEL}=true")["items"]
        _progress(w.name, f"{len(nodes)} nodes in {time.monotonic() - t0:.1f}s")
        runs = [
            (rnd, scheduler)
            for rnd in range(1, opts.rounds + 1)
            for scheduler in round_order(opts.schedulers, rnd)
        ]
        for i, (rnd, scheduler) in enumerate(runs):
            if opts.rounds > 1 and (i == 0 or runs[i - 1][0] != rnd):
                order = ", ".join(round_order(opts.schedulers, rnd))
                _progress(w.name, f"round {rnd} of {opts.rounds}: {order}")
            if scheduler.startswith("berth") and missing:
                note = "; ".join(f"{p} not in Berth's plugin registry" for p in missing)
                _progress(w.name, f"{scheduler}: not run: {note}")
                records.append(
                    {
                        "workload": w.name,
                        "scheduler": scheduler,
                        "nodes": opts.nodes,
                        "init_pods": opts.init_pods,
                        "pods": opts.pods,
                        "qps": opts.qps,
                        "burst": opts.burst,
                        "status": f"not run: {note}",
                        "round": rnd,
                        "pods_per_second_avg": None,
                        "pods_per_second_p50": None,
                        "pods_per_second_p99": None,
                        "ratio_to_kube_scheduler": None,
                    }
                )
                continue
            if i > 0 and opts.restart_apiserver:
                # An API server that has served a run is slower for the next one
                # (docs/benchmarks.md measures it with --no-restart-apiserver), so each
                # run gets a fresh one, as upstream's scheduler_perf gives every workload
                # an API server of its own (test/integration/scheduler_perf).
                t_restart = time.monotonic()
                local.restart_apiserver()
                server_pids = {p.name: p.pid for p in local.state.processes}
                client.close()
                client = local.cluster.client(pool_size=64)
                _progress(
                    w.name,
                    f"kube-apiserver restarted for the next run ({time.monotonic() - t_restart:.1f}s;"
                    " same etcd and flags)",
                )
            pprof_to = (
                opts.apiserver_pprof / f"{w.name}-{scheduler}-round{rnd}.pprof"
                if opts.apiserver_pprof is not None
                else None
            )
            try:
                record = run_one(
                    opts, scheduler, local.cluster, client, nodes, work, server_pids, pprof_to
                )
                record["round"] = rnd
                record["apiserver_restarted"] = i > 0 and opts.restart_apiserver
                records.append(record)
            except BenchError as exc:
                _progress(w.name, f"{scheduler}: FAILED: {exc}")
                records.append(
                    {
                        "workload": w.name,
                        "scheduler": scheduler,
                        "nodes": opts.nodes,
                        "init_pods": opts.init_pods,
                        "pods": opts.pods,
                        "qps": opts.qps,
                        "burst": opts.burst,
                        "status": f"failed: {str(exc).splitlines()[0]}",
                        "round": rnd,
                        "error": str(exc),
                        "pods_per_second_avg": None,
                        "pods_per_second_p50": None,
                        "pods_per_second_p99": None,
                    }
                )
            if i != len(runs) - 1:
                time.sleep(opts.settle)
    _add_ratios(records)
    return records


def round_order(schedulers: Sequence[str], rnd: int) -> tuple[str, ...]:
    """The order of round ``rnd`` (from 1): as given in odd rounds, reversed in even ones.
    Over two rounds each scheduler runs once earlier and once later on the API server, so a
    drift of the machine or of the cluster's state over the session weighs on both alike."""
    return tuple(schedulers) if rnd % 2 else tuple(reversed(schedulers))


def rate_of(r: Mapping[str, Any]) -> float | None:
    """The rate a run is compared by: upstream's throughputCollector average while pods are
    created, the measured pods over the whole window (start-up included) in drain mode."""
    v = r.get("pods_per_second_overall" if r.get("mode") == "drain" else "pods_per_second_avg")
    return float(v) if v else None


def cpu_total(r: Mapping[str, Any]) -> float | None:
    """A run's CPU seconds per 1000 pods, all its processes together (the shim and the
    plugin server's ``total``, or a single process's figure)."""
    cpu = r.get("cpu_seconds_per_1000_pods")
    if not cpu:
        return None
    if "total" in cpu:
        return float(cpu["total"])
    return float(next(iter(cpu.values()))) if len(cpu) == 1 else None


def _add_ratios(records: list[dict[str, Any]]) -> None:
    """Ratios to kube-scheduler (rate and CPU per pod) and shares of bind-only's ceiling,
    each against the run of the same round."""

    def run_of(name: str, rnd: Any) -> dict[str, Any] | None:
        for r in records:
            if r["scheduler"] == name and r.get("round") == rnd and r.get("status") == "ok":
                return r
        return None

    for r in records:
        rnd = r.get("round")
        kube, bind_only = run_of("kube-scheduler", rnd), run_of("bind-only", rnd)
        kube_rate = None if kube is None else rate_of(kube)
        ceiling = None if bind_only is None else rate_of(bind_only)
        avg = rate_of(r)
        if r["scheduler"] != "kube-scheduler":
            r["ratio_to_kube_scheduler"] = avg / kube_rate if avg and kube_rate else None
            cpu, kube_cpu = cpu_total(r), None if kube is None else cpu_total(kube)
            r["cpu_ratio_to_kube_scheduler"] = cpu / kube_cpu if cpu and kube_cpu else None
        r["share_of_bind_only"] = avg / ceiling if avg and ceiling else None


def summarize_rounds(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per scheduler over every round (``"round": "median"``): the median of its
    runs' figures, and of its per-round ratios to kube-scheduler. Empty with one round."""
    rounds = sorted({r["round"] for r in records if isinstance(r.get("round"), int)})
    if len(rounds) < 2:
        return []
    out: list[dict[str, Any]] = []
    names = list(dict.fromkeys(r["scheduler"] for r in records))
    for name in names:
        runs = [r for r in records if r["scheduler"] == name and r.get("status") == "ok"]
        if not runs:
            continue

        def median_of(key: str, rows: Sequence[dict[str, Any]] = runs) -> float | None:
            values = [float(r[key]) for r in rows if r.get(key) is not None]
            return statistics.median(values) if values else None

        first = runs[0]
        cpu = [r["cpu_seconds_per_1000_pods"] for r in runs if r.get("cpu_seconds_per_1000_pods")]
        rss = [r["peak_rss_mib"] for r in runs if r.get("peak_rss_mib")]
        ready = [r["ready_cpu_seconds"] for r in runs if r.get("ready_cpu_seconds")]
        summary: dict[str, Any] = {
            "workload": first["workload"],
            "scheduler": name,
            "round": "median",
            "rounds": len(runs),
            "status": "ok",
            "nodes": first["nodes"],
            "init_pods": first.get("init_pods"),
            "pods": first["pods"],
            "qps": first.get("qps"),
            "burst": first.get("burst"),
            "mode": first.get("mode", "concurrent"),
            "pods_per_second_avg": median_of("pods_per_second_avg"),
            "pods_per_second_overall": median_of("pods_per_second_overall"),
            "pods_per_second_p50": median_of("pods_per_second_p50"),
            "pods_per_second_p99": median_of("pods_per_second_p99"),
            "pods_per_second_avg_by_round": [rate_of(r) for r in runs],
            "cpu_seconds_per_1000_pods": {
                k: statistics.median(float(c[k]) for c in cpu if k in c) for k in cpu[0]
            }
            if cpu
            else None,
            "peak_rss_mib": {k: max(float(m[k]) for m in rss if k in m) for k in rss[0]}
            if rss
            else None,
            "ready_cpu_seconds": {
                k: statistics.median(float(c[k]) for c in ready if k in c) for k in ready[0]
            }
            if ready
            else None,
        }
        if name != "kube-scheduler":
            for key in ("ratio_to_kube_scheduler", "cpu_ratio_to_kube_scheduler"):
                summary[f"{key}_by_round"] = [r.get(key) for r in runs]
                summary[key] = median_of(key)
        summary["share_of_bind_only_by_round"] = [r.get("share_of_bind_only") for r in runs]
        summary["share_of_bind_only"] = median_of("share_of_bind_only")
        out.append(summary)
    return out


def format_rounds(summaries: Sequence[dict[str, Any]]) -> str:
    """The rounds' table: each figure by round, then its median; the ratios and shares
    are each against the run of the same round."""
    if not summaries:
        return ""
    lines = [
        "| scheduler | pods/s by round | median | x kube-scheduler by round | median | "
        "of bind-only by round | CPU s / 1000 pods (median) | "
        "x kube-scheduler's CPU by round | median | CPU s to ready (median) | "
        "peak RSS MiB (max) |",
        "|---|---|---:|---|---:|---|---|---|---:|---|---|",
    ]

    def by_round(values: Sequence[float | None] | None, fmt: str, scale: float = 1.0) -> str:
        if values is None:
            return "-"
        return ", ".join(_num(None if v is None else v * scale, fmt) for v in values)

    for s in summaries:
        shares = s.get("share_of_bind_only_by_round")
        lines.append(
            f"| {s['scheduler']} | {by_round(s['pods_per_second_avg_by_round'], '.0f')} | "
            f"{_num(rate_of(s))} | "
            f"{by_round(s.get('ratio_to_kube_scheduler_by_round'), '.2f')} | "
            f"{_num(s.get('ratio_to_kube_scheduler'), '.2f')} | "
            f"{'-' if shares is None or all(v is None for v in shares) else by_round(shares, '.0f', 100) + '%'} | "
            f"{_per_process(s.get('cpu_seconds_per_1000_pods'), '.1f')} | "
            f"{by_round(s.get('cpu_ratio_to_kube_scheduler_by_round'), '.2f')} | "
            f"{_num(s.get('cpu_ratio_to_kube_scheduler'), '.2f')} | "
            f"{_per_process(s.get('ready_cpu_seconds'), '.2f')} | "
            f"{_per_process(s.get('peak_rss_mib'), '.0f')} |"
        )
    return "\n".join(lines)


def run_label(r: Mapping[str, Any], rounds: int = 1) -> str:
    """The scheduler, and its round when there is more than one."""
    rnd = r.get("round")
    return (
        f"{r['scheduler']} #{rnd}" if rounds > 1 and isinstance(rnd, int) else str(r["scheduler"])
    )


# --- output --------------------------------------------------------------------------------------


def _num(v: Any, fmt: str = ".0f") -> str:
    return "-" if v is None else format(v, fmt)


def _per_process(values: Mapping[str, float] | None, fmt: str) -> str:
    if not values:
        return "-"
    parts = [f"{k} {format(v, fmt)}" for k, v in values.items() if k != "total"]
    if "total" in values:
        return " + ".join(parts) + f" = {format(values['total'], fmt)}"
    return parts[0] if len(parts) == 1 else ", ".join(parts)


def format_table(records: Sequence[dict[str, Any]], rounds: int = 1) -> str:
    drain = any(r.get("mode") == "drain" for r in records)
    head = (
        f"| workload | scheduler | {'pods/s drained, start-up incl.' if drain else 'pods/s avg'} "
        "| p50 | p90 | p99 | attempt ms p50 / p99 | "
        f"{'start' if drain else 'e2e'} ms p50 / p99 | x kube-scheduler | of bind-only | "
        "CPU s / 1000 pods | x kube-scheduler's CPU | CPU s to ready | peak RSS MiB |"
    )
    lines = [head, "|" + "---|" * 14]
    for r in records:
        if r.get("status") != "ok":
            lines.append(
                f"| {r['workload']} | {run_label(r, rounds)} | {r.get('status')} |" + " |" * 11
            )
            continue
        lines.append(
            f"| {r['workload']} | {run_label(r, rounds)} | {_num(rate_of(r))} | "
            f"{_num(r['pods_per_second_p50'])} | {_num(r['pods_per_second_p90'])} | "
            f"{_num(r['pods_per_second_p99'])} | "
            f"{_num(r.get('attempt_latency_ms_p50'), '.1f')} / {_num(r.get('attempt_latency_ms_p99'), '.1f')} | "
            f"{_num(r.get('e2e_latency_ms_p50'))} / {_num(r.get('e2e_latency_ms_p99'))} | "
            f"{_num(r.get('ratio_to_kube_scheduler'), '.2f')} | "
            f"{_num(None if r.get('share_of_bind_only') is None else 100 * r['share_of_bind_only'])}% | "
            f"{_per_process(r.get('cpu_seconds_per_1000_pods'), '.1f')} | "
            f"{_num(r.get('cpu_ratio_to_kube_scheduler'), '.2f')} | "
            f"{_per_process(r.get('ready_cpu_seconds'), '.2f')} | "
            f"{_per_process(r.get('peak_rss_mib'), '.0f')} |"
        )
    return "\n".join(lines)


def format_other_cpu(records: Sequence[dict[str, Any]], rounds: int = 1) -> str:
    """The rest of the machine during each measured window."""
    rows = [r for r in records if r.get("status") == "ok"]
    if not rows:
        return ""
    names = list(rows[0].get("other_cpu_seconds_per_1000_pods", {}))
    lines = [
        "| scheduler | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for r in rows:
        other = r.get("other_cpu_seconds_per_1000_pods", {})
        lines.append(
            f"| {run_label(r, rounds)} | "
            + " | ".join(_num(other.get(n), ".1f") for n in names)
            + " |"
        )
    return "\n".join(lines)


def _creation_text(opts: Options) -> str:
    if opts.create_processes == 0:
        return (
            f"measured pods created by {opts.create_connections} threads of the harness "
            f"(no client limit)"
        )
    return (
        f"measured pods created by {opts.create_processes} process(es) x "
        f"{opts.create_connections} connections, client QPS {opts.create_qps:g} and burst "
        f"{opts.create_burst}"
    )


def format_creation(records: Sequence[dict[str, Any]], rounds: int = 1) -> str:
    """Was the run creation-limited? How long creating took against binding, and how many
    created pods waited for their scheduler each second."""
    rows = [r for r in records if r.get("status") == "ok"]
    if not rows:
        return ""
    lines = [
        "| scheduler | created in s | created pods/s | all bound in s | pending p50 / max | "
        "creation-limited |",
        "|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        made = r.get("creation_seconds")
        lines.append(
            f"| {run_label(r, rounds)} | {_num(made, '.1f')} | "
            f"{_num(None if not made else r['pods'] / made)} | "
            f"{_num(r.get('measured_seconds'), '.1f')} | "
            f"{_num(r.get('backlog_p50'))} / {_num(r.get('backlog_max'))} | "
            + (
                "yes"
                if r.get("creation_limited")
                else "caught up at the end only"
                if r.get("caught_up_at_end")
                else "no"
            )
            + " |"
        )
    return "\n".join(lines)


# Points of a run's bound_timeline at the most.
TIMELINE_POINTS = 200


def bound_timeline(seconds: Sequence[float], points: int = TIMELINE_POINTS) -> list[list[float]]:
    """The measured pods' binding times (seconds since the window began) as
    ``[seconds, pods bound by then]`` points: every pod of a small run, evenly
    spaced ranks of a large one, the first and the last always."""
    ts = sorted(seconds)
    n = len(ts)
    if n <= points:
        ranks: Sequence[int] = range(n)
    else:
        ranks = sorted({round(i * (n - 1) / (points - 1)) for i in range(points)})
    return [[round(ts[i], 3), i + 1] for i in ranks]


def write_plot(records: Sequence[dict[str, Any]], path: Path, title: str, rounds: int = 1) -> None:
    """A PNG with a line per run. Concurrent mode: pods/s over time (the 1 s
    samples). Drain mode: measured pods bound against seconds since the
    scheduler's process started, start-up included (``bound_timeline``), a
    colour per scheduler and a dash pattern per round, and a tick on the x
    axis where each was ready."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drain = any(r.get("mode") == "drain" for r in records)
    fig, ax = plt.subplots(figsize=(9, 5))
    colours: dict[str, str] = {}
    dashes = ("-", "--", ":", "-.")
    drawn = 0
    for r in records:
        points = r.get("bound_timeline" if drain else "samples") or []
        if r.get("status") != "ok" or not points:
            continue
        label = f"{run_label(r, rounds)} ({_num(rate_of(r))} pods/s)"
        if not drain:
            ax.plot(*zip(*points, strict=True), marker="o", markersize=3, label=label)
            drawn += 1
            continue
        colour = colours.setdefault(str(r.get("scheduler")), f"C{len(colours)}")
        style = dashes[(int(r.get("round") or 1) - 1) % len(dashes)]
        xs, ys = zip(*points, strict=True)
        ax.plot([0.0, *xs], [0, *ys], color=colour, linestyle=style, label=label)
        ready = r.get("ready_seconds")
        if ready is not None:
            ax.plot([ready], [0], marker="|", markersize=14, color=colour)
        drawn += 1
    if drain:
        ax.set_xlabel("seconds since the scheduler's process started (ticks: ready)")
        ax.set_ylabel("measured pods bound")
        ax.set_xlim(left=0)
    else:
        ax.set_xlabel("seconds since the measured pods began to be created")
        ax.set_ylabel("pods bound per second (1 s samples)")
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize="small" if drain else None)
    else:
        empty = "no run bound a pod" if drain else "no run lasted two 1 s samples"
        ax.text(0.5, 0.5, empty, ha="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- the command ---------------------------------------------------------------------------------


def register(bsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for w in WORKLOADS.values():
        p = bsub.add_parser(
            w.name,
            help=f"scheduler_perf's {w.name} under kube-scheduler, berth and bind-only, side by side",
            description=(
                f"scheduler_perf's {w.name} ({w.upstream}: {w.about}) on a private etcd and "
                "kube-apiserver: the nodes once, then each scheduler in turn with fresh "
                "namespaces: initial pods (not measured), then measured pods created while it "
                "runs. Prints pods/s (upstream's throughputCollector), attempt and "
                "creation-to-bound latency, CPU and peak RSS per process, and checks every "
                "pod bound once, no node overcommitted and the workload's constraints held "
                "(exit 1 if not). See docs/benchmarks.md."
            ),
        )
        p.add_argument(
            "--nodes", type=int, default=w.default_nodes, help="nodes (default %(default)s)"
        )
        p.add_argument(
            "--init-pods",
            type=int,
            default=w.default_init_pods,
            help="initial pods, bound before measuring (default %(default)s)",
        )
        p.add_argument(
            "--pods", type=int, default=w.default_pods, help="measured pods (default %(default)s)"
        )
        p.add_argument(
            "--qps",
            type=float,
            default=5000.0,
            help="client QPS of every scheduler (kube-scheduler's clientConnection.qps, the "
            "shim's --kube-api-qps, bind-only's limiter) (default %(default)s)",
        )
        p.add_argument("--burst", type=int, default=None, help="client burst (default: the QPS)")
        p.add_argument(
            "--schedulers",
            default=None,
            help="comma-separated subset, run in this order (default "
            f"{','.join(SCHEDULERS)}, each --variant after berth)",
        )
        p.add_argument(
            "--variant",
            action="append",
            default=[],
            metavar="NAME=ARGS",
            help="one more scheduler, berth-NAME: Berth over gRPC with ARGS added to its "
            "shim's command line (split as a shell would), e.g. "
            "noexplain='--explain-max-pods 0' to measure what explanations cost beside "
            "berth in the same rounds; a --config FILE among ARGS gives it that "
            "configuration's first profile (as --berth-config) for both its processes; "
            "repeatable",
        )
        p.add_argument(
            "--rounds",
            type=int,
            default=1,
            help="run the schedulers this many times on the same API server, the order "
            "reversed every other round (kube-scheduler, berth, then berth, kube-scheduler), "
            "so that neither always runs first; each ratio is taken within its round and the "
            "medians are printed at the end (default %(default)s)",
        )
        p.add_argument(
            "--batch-size",
            type=int,
            default=16,
            help="the shim's --batch-size (default %(default)s)",
        )
        p.add_argument(
            "--create-processes",
            type=int,
            default=CREATE_PROCESSES,
            help="processes creating the measured pods, each with --create-connections "
            "keep-alive connections; 0: threads of the harness's own process (default "
            "%(default)s)",
        )
        p.add_argument(
            "--create-connections",
            type=int,
            default=CREATE_CONNECTIONS,
            help="concurrent creations per creating process (scheduler_perf's CreatePod uses "
            "30 workers) (default %(default)s)",
        )
        p.add_argument(
            "--create-qps",
            type=float,
            default=CREATE_QPS,
            help="the creating client's QPS, split between the processes (scheduler_perf's "
            "client: 5000) (default %(default)s)",
        )
        p.add_argument(
            "--create-burst", type=int, default=None, help="its burst (default: its QPS)"
        )
        p.add_argument(
            "--berth-config",
            metavar="FILE",
            help="run Berth with this KubeSchedulerConfiguration's first profile (renamed to "
            "the run's scheduler name) instead of the defaults, e.g. to measure what a "
            "plugin costs; kube-scheduler keeps its defaults",
        )
        p.add_argument("--json", metavar="FILE", help="write the records as a JSON list")
        p.add_argument(
            "--plot",
            metavar="FILE",
            help="write a PNG of pods/s over time per scheduler; with --drain, of the pods "
            "bound since each scheduler's process started",
        )
        p.add_argument(
            "--stall-timeout",
            type=float,
            default=60.0,
            help="fail a run when no pod is bound for this long (default %(default)s s)",
        )
        p.add_argument(
            "--settle",
            type=float,
            default=3.0,
            help="pause between schedulers (default %(default)s s)",
        )
        p.add_argument(
            "--drain",
            action="store_true",
            help="create the measured pods with no scheduler running, then time a fresh "
            "scheduler process draining them, start-up included (default: create them while "
            "the scheduler runs, as scheduler_perf does); Berth over gRPC restarts its shim "
            "only, as when its scheduler Deployment restarts or fails over while the plugin "
            "server Deployment keeps serving",
        )
        p.add_argument(
            "--drain-cold-server",
            action="store_true",
            help="with --drain: restart berth serve too, so that its start-up counts as well",
        )
        p.add_argument(
            "--no-restart-apiserver",
            dest="restart_apiserver",
            action="store_false",
            help="keep one kube-apiserver process for every run (default: restart it, same "
            "etcd and flags, before each run but the first; a served run slows the next)",
        )
        p.add_argument(
            "--apiserver-pprof",
            metavar="DIR",
            help="run kube-apiserver with --profiling and write a CPU profile of it over each "
            "run's measured window to DIR/<workload>-<scheduler>-round<N>.pprof (read it with "
            "`go tool pprof -top FILE`); the profile starts 2 s into the window",
        )
        p.add_argument(
            "--apiserver-pprof-seconds",
            type=int,
            default=10,
            metavar="N",
            help="length of each kube-apiserver profile (default %(default)s s; keep it under "
            "the measured window, or the profile also covers the idle time after it)",
        )
        p.add_argument(
            "--work-dir",
            metavar="DIR",
            help="keep the cluster's and the schedulers' files and logs here (default: a "
            "temporary directory, removed at the end unless a run failed)",
        )
        p.set_defaults(func=run_perf, workload=w.name)


def _qps_and_burst(prefix: str, qps: float, burst: int | None) -> int:
    """Checks ``--{prefix}qps`` and ``--{prefix}burst``; the burst, which defaults to the
    QPS."""
    if qps <= 0:
        raise BenchError(f"--{prefix}qps must be > 0, got {qps:g}")
    out = int(qps) if burst is None else burst
    if out < 1:
        raise BenchError(f"--{prefix}burst must be at least 1, got {out}")
    return out


def options_from(args: argparse.Namespace) -> Options:
    w = WORKLOADS[args.workload]
    variants = tuple(parse_variant(v) for v in args.variant)
    names = [v.scheduler for v in variants]
    if len(set(names)) != len(names):
        raise BenchError(f"--variant names one twice: {', '.join(names)}")
    known = (*SCHEDULERS[:2], *names, *SCHEDULERS[2:])
    if args.schedulers is None:
        schedulers = known
    else:
        schedulers = tuple(s.strip() for s in str(args.schedulers).split(",") if s.strip())
    unknown = [s for s in schedulers if s not in known]
    if unknown or not schedulers:
        raise BenchError(
            f"--schedulers: unknown {', '.join(unknown) or '(none given)'}; choose from "
            f"{', '.join(known)}"
        )
    if args.drain_cold_server and not args.drain:
        raise BenchError("--drain-cold-server goes with --drain")
    if len(set(schedulers)) != len(schedulers):
        raise BenchError(f"--schedulers names one twice: {args.schedulers}")
    for flag, value, least in (
        ("--nodes", args.nodes, 1),
        ("--pods", args.pods, 1),
        ("--rounds", args.rounds, 1),
        ("--init-pods", args.init_pods, 0),
        ("--batch-size", args.batch_size, 1),
        ("--create-processes", args.create_processes, 0),
        ("--create-connections", args.create_connections, 1),
        ("--apiserver-pprof-seconds", args.apiserver_pprof_seconds, 1),
    ):
        if value < least:
            raise BenchError(f"{flag} must be at least {least}, got {value}")
    burst = _qps_and_burst("", args.qps, args.burst)
    if args.berth_config and not Path(args.berth_config).is_file():
        raise BenchError(f"--berth-config {args.berth_config}: no such file")
    create_burst = _qps_and_burst("create-", args.create_qps, args.create_burst)
    total = args.init_pods + args.pods
    if w.measured_kind == "anti-affinity" and total > args.nodes:
        raise BenchError(
            f"{w.name} places one pod per node: --init-pods + --pods ({total}) must not exceed "
            f"--nodes ({args.nodes})"
        )
    if total > PODS_PER_NODE * args.nodes:
        raise BenchError(
            f"{total} pods do not fit on {args.nodes} nodes ({PODS_PER_NODE} of these pods fit "
            "on one node): lower --init-pods/--pods or raise --nodes"
        )
    return Options(
        workload=w,
        nodes=args.nodes,
        init_pods=args.init_pods,
        pods=args.pods,
        qps=float(args.qps),
        burst=burst,
        batch_size=args.batch_size,
        schedulers=schedulers,
        stall_timeout=args.stall_timeout,
        settle=args.settle,
        create_processes=args.create_processes,
        create_connections=args.create_connections,
        create_qps=float(args.create_qps),
        create_burst=create_burst,
        berth_config=Path(args.berth_config) if args.berth_config else None,
        rounds=args.rounds,
        restart_apiserver=args.restart_apiserver,
        apiserver_pprof=Path(args.apiserver_pprof) if args.apiserver_pprof else None,
        apiserver_pprof_seconds=args.apiserver_pprof_seconds,
        drain=args.drain,
        drain_cold_server=args.drain_cold_server,
        variants=variants,
    )


def run_perf(args: argparse.Namespace) -> int:
    try:
        opts = options_from(args)
    except BenchError as exc:
        print(f"berth bench {args.workload}: {exc}", file=sys.stderr)
        return 2
    w = opts.workload
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print(
                "berth bench: --plot needs matplotlib: pip install 'berth-scheduler[bench]'",
                file=sys.stderr,
            )
            return 2
    keep = args.work_dir is not None
    work = Path(args.work_dir) if keep else Path(tempfile.mkdtemp(prefix="berth-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    _progress(
        w.name,
        f"{opts.nodes} nodes, {opts.init_pods} initial pods, {opts.pods} measured pods; "
        f"schedulers {', '.join(opts.schedulers)}"
        + (
            f" in {opts.rounds} rounds, the order reversed every other round"
            if opts.rounds > 1
            else ""
        )
        + f"; client QPS {opts.qps:g}, burst {opts.burst} "
        f"for every scheduler; shim batch size {opts.batch_size}; {_creation_text(opts)}"
        + (f"; Berth configured by {opts.berth_config}" if opts.berth_config else ""),
    )
    _progress(w.name, f"Python processes on {python_text()}")
    if any(s.startswith("berth") for s in opts.schedulers):
        # Every Berth process would otherwise compile its modules from source when the
        # environment says PYTHONDONTWRITEBYTECODE (the image sets it, and ships bytecode
        # compiled at install time, deploy/Dockerfile).
        from berth.dev.startup import compile_berth

        _progress(w.name, "compiling Berth's modules to bytecode, as its image ships them")
        compile_berth()
    started = time.monotonic()
    failed = True
    try:
        records = run_bench(opts, work)
        failed = any(r.get("status", "").startswith("failed") for r in records)
    finally:
        if not keep and not failed:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(
        f"{w.name} ({w.upstream}): {opts.nodes} nodes, {opts.init_pods} initial + {opts.pods} "
        f"measured pods; client QPS {opts.qps:g} and burst {opts.burst} for every scheduler; "
        f"{time.monotonic() - started:.0f}s in all"
    )
    rounds = opts.rounds
    print(format_table(records, rounds))
    if any(r.get("status") == "ok" and not r.get("samples") for r in records):
        print(
            "(pods/s '-': the measured pods were bound before a second 1 s sample, so "
            "upstream's collector has no rate; pods_per_second_overall in the JSON still is)"
        )
    limited = [run_label(r, rounds) for r in records if r.get("creation_limited")]
    if limited:
        print(
            f"(creation-limited: {', '.join(limited)}: the last pod was bound within "
            f"{CREATION_TAIL:g} s of the last creation and at the median second fewer than "
            f"{CREATION_BACKLOG:.0%} of the pods waited to be scheduled, so the rate is at least "
            "partly the rate at which this machine created the pods; bind-only's ceiling "
            "includes creation anyway, but a scheduler marked so may be faster than it shows)"
        )
    creation = "" if opts.drain else format_creation(records, rounds)
    if creation:
        print(f"\nCreating the measured pods ({_creation_text(opts)}):")
        print(creation)
    other = format_other_cpu(records, rounds)
    if other:
        print("\nCPU s / 1000 measured pods elsewhere during each measured window:")
        print(other)
    summaries = summarize_rounds(records)
    if summaries:
        print(
            f"\nOver {rounds} rounds (each ratio against kube-scheduler's run of the same round):"
        )
        print(format_rounds(summaries))
    if args.json:
        Path(args.json).write_bytes(
            orjson.dumps([*records, *summaries], option=orjson.OPT_INDENT_2) + b"\n"
        )
        print(f"\nrecords written to {args.json}")
    if args.plot:
        write_plot(
            records,
            Path(args.plot),
            f"{w.name}: {opts.nodes} nodes, {opts.pods} measured pods, client QPS {opts.qps:g}",
            rounds,
        )
        print(f"plot written to {args.plot}")
    if failed:
        print(f"\nberth bench {w.name}: FAILED (logs kept in {work}):", file=sys.stderr)
        for r in records:
            status = str(r.get("status", ""))
            if status.startswith("failed"):
                problems = (r.get("checks") or {}).get("violations") or [status]
                print(f"  {r['scheduler']}: " + "; ".join(problems[:10]), file=sys.stderr)
        return 1
    return 0


# --- creating the measured pods ------------------------------------------------------------------

CREATOR_READY = "creator: ready"
_CREATOR_DONE = re.compile(
    r"creator: created (\d+) pods in ([0-9.]+) s, last at ([0-9.]+), cpu ([0-9.]+) s"
)


async def _create_pods_async(
    kubeconfig: Path, bodies: Sequence[tuple[str, bytes]], connections: int, bucket: TokenBucket
) -> None:
    """Open ``connections`` keep-alive connections, say CREATOR_READY, wait for SIGUSR1, then
    POST every (path, body) over them and print what _CREATOR_DONE reads. Raises on the
    first error status: a run with a pod missing means nothing."""
    import asyncio
    import signal
    from urllib.parse import urlsplit

    from berth.kube.config import authorization, load_configuration, tls_context
    from berth.kube.http1 import Http1Pool

    cfg = load_configuration(kubeconfig)
    headers = {
        "Accept": "application/json",
        "User-Agent": "berth-bench-creator",
    }
    token = authorization(cfg)
    if token:
        headers["Authorization"] = token
    url = urlsplit(cfg.host)
    secure = url.scheme == "https"
    # The certificate alone, as scheduler_perf's client-go creator sends it (with the CA
    # beside it every pod creation costs the API server more: berth/kube/tlschain.py).
    context = tls_context(cfg) if secure else None
    loop = asyncio.get_running_loop()
    go = asyncio.Event()
    loop.add_signal_handler(signal.SIGUSR1, go.set)
    # The shim's own HTTP/1.1 pool (a POST is never resent), one request per connection
    # at a time, as client-go's HTTP/1.1 transport.
    pool = Http1Pool(
        url.hostname or "localhost",
        url.port or (443 if secure else 80),
        ssl_context=context,
        server_hostname=url.hostname,
        connections=connections,
        headers=headers,
    )
    try:
        # Connections and TLS handshakes before the clock starts, so the timed window
        # holds the creations alone, as from a client whose pool is already warm.
        await asyncio.gather(*(pool.request("GET", "/version") for _ in range(connections)))
        print(CREATOR_READY, flush=True)
        await go.wait()
        began, cpu0 = time.monotonic(), time.process_time()
        todo = iter(bodies)
        last = began
        created = 0
        json_body = {"Content-Type": "application/json"}

        async def worker() -> None:
            nonlocal last, created
            for path, body in todo:
                wait = bucket.reserve()
                if wait > 0:
                    await asyncio.sleep(wait)
                status, payload = await pool.request("POST", path, body=body, headers=json_body)
                if status >= 300:
                    raise RuntimeError(
                        f"POST {path} -> HTTP {status}: " + payload[:300].decode(errors="replace")
                    )
                created += 1
                last = time.monotonic()

        await asyncio.gather(*(worker() for _ in range(connections)))
        print(
            f"creator: created {created} pods in {last - began:.3f} s, last at {last:.6f}, "
            f"cpu {time.process_time() - cpu0:.3f} s",
            flush=True,
        )
    finally:
        await pool.close()


def creator_main(argv: Sequence[str]) -> int:
    """``python -m berth.dev.bench_perf create``: create the pods of ``--pods FILE`` (a JSON list)
    when SIGUSR1 arrives. Its own process, so that creating the pods competes with the
    scheduler for the CPU only, not for the harness's GIL (the watch that times the run)."""
    import asyncio

    p = argparse.ArgumentParser(prog="python -m berth.dev.bench_perf create")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--pods", required=True, help="a JSON list of pod objects")
    p.add_argument("--connections", type=int, default=CREATE_CONNECTIONS)
    p.add_argument("--qps", type=float, default=CREATE_QPS)
    p.add_argument("--burst", type=int, default=int(CREATE_QPS))
    args = p.parse_args(argv)
    if args.qps <= 0 or args.burst < 1:
        p.error(f"--qps must be > 0 and --burst >= 1, got {args.qps:g}, {args.burst}")
    pods = orjson.loads(Path(args.pods).read_bytes())
    # Serialised before the clock starts: what is timed is the API server's work.
    bodies = [
        (f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", orjson.dumps(pod))
        for pod in pods
    ]
    try:
        asyncio.run(
            _create_pods_async(
                Path(args.kubeconfig),
                bodies,
                max(1, min(args.connections, len(bodies) or 1)),
                TokenBucket(args.qps, args.burst),
            )
        )
    except Exception as exc:
        print(f"creator: FAILED: {type(exc).__name__}: {exc}", flush=True)
        return 1
    return 0


@dataclass
class CreatorResult:
    created: int
    seconds: float  # from the signal to the last answer, the slowest process
    last: float  # time.monotonic() of the last answer, any process
    cpu_seconds: float  # all processes, from the signal on


def _says(path: Path, text: str) -> Callable[[], bool]:
    return lambda: text in path.read_text(errors="replace")


class PodCreator:
    """The measured pods' creation, in ``processes`` processes of ``connections`` keep-alive
    connections each (round robin split of the pods; the QPS and burst split evenly), started
    and warmed up by ``start``, let go by ``go``."""

    def __init__(
        self,
        kubeconfig: Path,
        pods: Sequence[JSON],
        work: Path,
        *,
        processes: int,
        connections: int,
        qps: float,
        burst: int,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.pods = pods
        self.work = work
        self.processes = max(1, min(processes, len(pods)))
        self.connections = connections
        self.qps = qps
        self.burst = burst
        self._procs: list[tuple[subprocess.Popen[bytes], Any, Path]] = []

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc, _, _ in self._procs]

    def start(self, timeout: float = 60.0) -> None:
        from berth.dev.localcluster.process import spawn

        self.work.mkdir(parents=True, exist_ok=True)
        n = self.processes
        for k in range(n):
            share = self.pods[k::n]
            spec = self.work / f"creator-{k}.json"
            spec.write_bytes(orjson.dumps(list(share)))
            log_path = self.work / f"creator-{k}.log"
            log_path.unlink(missing_ok=True)
            proc, rec = spawn(
                f"creator {k}",
                [
                    sys.executable,
                    "-m",
                    "berth.dev.bench_perf",
                    "create",
                    "--kubeconfig",
                    str(self.kubeconfig),
                    "--pods",
                    str(spec),
                    "--connections",
                    str(self.connections),
                    "--qps",
                    f"{self.qps / n:g}",
                    "--burst",
                    str(max(1, self.burst // n)),
                ],
                log_path,
                die_with_parent=True,
            )
            self._procs.append((proc, rec, log_path))
        try:
            for proc, _, log_path in self._procs:
                _wait(_says(log_path, CREATOR_READY), timeout, "pod creator", proc, log_path)
        except BaseException:
            self.stop()
            raise

    def go(self) -> None:
        import signal

        for proc, _, _ in self._procs:
            proc.send_signal(signal.SIGUSR1)

    def failure(self) -> str | None:
        """Why a process failed, if one has."""
        for proc, _, log_path in self._procs:
            code = proc.poll()
            if code is not None and code != 0:
                from berth.dev.localcluster.process import log_tail

                return f"pod creator exited with code {code}: {log_tail(log_path, 5)}"
        return None

    def wait(self, timeout: float) -> CreatorResult:
        deadline = time.monotonic() + timeout
        results = []
        for proc, _, log_path in self._procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired as exc:
                raise BenchError(f"the pod creator did not finish within {timeout:g}s") from exc
            found = _CREATOR_DONE.findall(log_path.read_text(errors="replace"))
            if proc.returncode != 0 or not found:
                raise BenchError(self.failure() or f"the pod creator said nothing; see {log_path}")
            results.append(tuple(float(x) for x in found[-1]))
        return CreatorResult(
            created=int(sum(r[0] for r in results)),
            seconds=max(r[1] for r in results),
            last=max(r[2] for r in results),
            cpu_seconds=sum(r[3] for r in results),
        )

    def stop(self) -> None:
        from berth.dev.localcluster.process import stop

        for proc, rec, _ in self._procs:
            if proc.poll() is None:
                log.info("%s", stop(rec))


# --- bind-only: the API server's ceiling ---------------------------------------------------------


async def _start_recorder(recorder: Any) -> None:
    """EventRecorder.start must run on the loop that writes."""
    recorder.start()


def bind_only_main(argv: Sequence[str]) -> int:
    """Bind every pending pod that names ``--scheduler-name``, round robin over the nodes
    sorted by name, through the shim's KubeApi and its binding request, and write each
    bound pod's Scheduled event through the shim's event recorder; no scheduling."""
    import asyncio
    import signal

    from berth.kube.asynchttp import AsyncApi
    from berth.kube.errors import ApiError
    from berth.kube.rest import KubeApi, pod_path
    from berth.shim.events import EventRecorder, ObjectRef

    p = argparse.ArgumentParser(prog="python -m berth.dev.bench_perf bind-only")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--scheduler-name", required=True)
    p.add_argument("--qps", type=float, required=True)
    p.add_argument("--burst", type=int, required=True)
    args = p.parse_args(argv)
    api = KubeApi.from_kubeconfig(args.kubeconfig, qps=args.qps, burst=args.burst)
    nodes = sorted(str(n["metadata"]["name"]) for n in api.list("/api/v1/nodes").items)
    if not nodes:
        print("bind-only: no nodes", flush=True)
        return 2
    selector = f"spec.schedulerName={args.scheduler_name},spec.nodeName="
    # The shim's event path (shim/scheduler.py): an EventRecorder writing from an event
    # loop through the asyncio client, the reporting controller the scheduler's name.
    loop = new_event_loop()
    threading.Thread(target=loop.run_forever, name="bind-only-loop", daemon=True).start()
    # The shim's write path (shim/scheduler.py, shim/binding.py Binder.bind): bindings
    # POSTed from an event loop through the asyncio client, events through an
    # EventRecorder as background requests on the same connections, the reporting
    # controller the scheduler's name.
    binder = AsyncApi.from_kubeapi(api, connections=BIND_CONNECTIONS)
    sink = None if binder is None else binder.background(decode=False)
    if binder is None or sink is None:
        print("bind-only: the kubeconfig needs the kubernetes client's pool", flush=True)
        return 2
    recorder = EventRecorder(sink, args.scheduler_name)
    asyncio.run_coroutine_threadsafe(_start_recorder(recorder), loop).result(10)
    counts = {"bound": 0, "conflicts": 0, "errors": 0}
    seen: set[str] = set()
    turn = [0]
    pending: set[concurrent.futures.Future[None]] = set()

    async def bind(ns: str, name: str, uid: str, node: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            await binder.wait_for_token()
            await binder.request("POST", pod_path(ns, name, "binding"), body=body, limit=False)
            outcome = "bound"
            recorder.record(
                ObjectRef(kind="Pod", namespace=ns, name=name, uid=uid),
                "Normal",
                "Scheduled",
                "Binding",
                f"Successfully assigned {ns}/{name} to {node}",
            )
        except ApiError as exc:
            outcome = "conflicts" if exc.conflict else "errors"
            print(f"bind-only: binding {ns}/{name} to {node}: {exc}", flush=True)
        # Only the loop's thread counts: no lock needed.
        counts[outcome] += 1

    def offer(obj: JSON) -> None:
        meta = obj["metadata"]
        uid = str(meta["uid"])
        if uid in seen or obj.get("spec", {}).get("nodeName") or meta.get("deletionTimestamp"):
            return
        seen.add(uid)
        node = nodes[turn[0] % len(nodes)]
        turn[0] += 1
        fut = asyncio.run_coroutine_threadsafe(
            bind(str(meta["namespace"]), str(meta["name"]), uid, node), loop
        )
        pending.add(fut)
        fut.add_done_callback(pending.discard)

    class Stop(Exception):
        pass

    def on_term(_sig: int, _frame: object) -> None:
        raise Stop

    signal.signal(signal.SIGTERM, on_term)
    try:
        listing = api.list("/api/v1/pods", fieldSelector=selector)
        for obj in listing.items:
            offer(obj)
        rv = listing.resource_version
        print(
            f"bind-only: ready: {len(nodes)} nodes, binding pods of {args.scheduler_name}",
            flush=True,
        )
        while True:
            for line in api.watch_lines(
                "/api/v1/pods", timeout_seconds=300, fieldSelector=selector, resourceVersion=rv
            ):
                event = orjson.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    print(f"bind-only: watch error {obj}; listing again", flush=True)
                    listing = api.list("/api/v1/pods", fieldSelector=selector)
                    for o in listing.items:
                        offer(o)
                    rv = listing.resource_version
                    break
                rv = obj["metadata"].get("resourceVersion", rv)
                if event["type"] in ("ADDED", "MODIFIED"):
                    offer(obj)
    except (Stop, KeyboardInterrupt):
        pass
    finally:
        # Bindings under way finish (and are counted) before the counters are printed;
        # their events are written, as the shim's are when it stops.
        concurrent.futures.wait(list(pending), timeout=30)
        asyncio.run_coroutine_threadsafe(recorder.stop(), loop).result(30)
        print(
            f"bind-only: bound {counts['bound']}, conflicts {counts['conflicts']}, "
            f"errors {counts['errors']}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "bind-only":
        sys.exit(bind_only_main(sys.argv[2:]))
    if len(sys.argv) > 1 and sys.argv[1] == "create":
        sys.exit(creator_main(sys.argv[2:]))
    print("usage: python -m berth.dev.bench_perf bind-only|create ...", file=sys.stderr)
    sys.exit(2)


__all__ = [
    "SCHEDULERS",
    "WORKLOADS",
    "RunFacts",
    "ThroughputCollector",
    "Workload",
    "berth_missing_plugins",
    "check_run",
    "histogram_quantile",
    "percentile_ceil",
    "register",
]
