"""LowCpuScheduler: usage from NodeMetrics in the snapshot, Filter and Score
per the seed (custom-plugins-lowcpu.md, 7.1), missing and stale metrics, the
memory dimension, args and the seed's configuration, whole cycles."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.config import ConfigError, load_config, parse_config
from berth.framework.cycle_state import CycleState
from berth.framework.handle import Handle
from berth.framework.objects import ObjectKind
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.snapshot import Snapshot
from berth.framework.status import Code, Status
from berth.framework.testing import fresh_state, make_node, make_pod, snapshot_of
from berth.plugins.lowcpu import (
    METRICS_GROUP,
    REASON_CPU,
    REASON_MEMORY,
    REASON_MISSING,
    REASON_STALE,
    REASON_UNUSABLE,
    LowCpu,
    LowCpuSchedulerArgs,
    dimension_score,
)
from berth.plugins.registry import REGISTRY

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "examples" / "lowcpu"
NOW = 1_750_000_000.0

# The seed's configuration (custom-plugins-lowcpu.md, 7.3), as written there.
SEED_CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: lowcpu-scheduler
  plugins:
    filter:
      enabled:
      - name: LowCpuScheduler
    score:
      enabled:
      - name: LowCpuScheduler
"""


def rfc3339(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_metrics(
    node: str,
    cpu: str | None,
    memory: str | None = "1Gi",
    *,
    age: float = 10,
    timestamp: str | None = None,
    raw: bytes | None = None,
) -> pb.ClusterObject:
    """A metrics.k8s.io/v1beta1 NodeMetrics as metrics-server serves it, ``age``
    seconds old at NOW."""
    usage = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    data = {
        "kind": "NodeMetrics",
        "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": {"name": node, "creationTimestamp": rfc3339(NOW)},
        "timestamp": rfc3339(NOW - age) if timestamp is None else timestamp,
        "window": "20.035s",
        "usage": usage,
    }
    return pb.ClusterObject(
        ref=pb.ObjectRef(group=METRICS_GROUP, resource="nodes", name=node),
        version="v1beta1",
        kind="NodeMetrics",
        json=json.dumps(data).encode() if raw is None else raw,
    )


def cluster(
    nodes: list[pb.Node], metrics: list[pb.ClusterObject], pods: list[pb.Pod] | None = None
) -> Snapshot:
    snap = snapshot_of(nodes, pods or [])
    snap.apply(pb.ClusterDelta(upsert_objects=metrics))
    return snap


def plugin_on(snap: Snapshot, args: LowCpuSchedulerArgs | None = None) -> LowCpu:
    handle = Handle("test")
    handle.bind_snapshot(snap)
    return LowCpu(args, handle, clock=lambda: NOW)


def node4(name: str = "n1") -> pb.Node:
    return make_node(name).capacity(cpu="4", memory="16Gi").obj()


def verdict(plugin: LowCpu, snap: Snapshot, name: str = "n1") -> tuple[str, int]:
    """(Filter reason or "", Score) for one node."""
    ni = snap.nodes[name]
    pod = make_pod("web").info()
    st = plugin.filter(fresh_state(), pod, ni)
    reason = "" if st.is_success else st.message
    if not st.is_success:
        assert st.code is Code.UNSCHEDULABLE, st
    return reason, plugin.score(fresh_state(), pod, ni)


# -- CPU: the seed's Filter and Score ----------------------------------------------

# (id, usage.cpu, node allocatable cpu, Filter reason, Score)
CPU_CASES: list[tuple[str, str, str, str, int]] = [
    ("idle", "0", "4", "", 100),
    ("250m of 4 cores", "250m", "4", "", 93),
    ("nanocores as metrics-server reports them", "1500000n", "1", "", 99),
    ("microcores", "500000u", "1", "", 50),
    ("whole cores", "2", "4", "", 50),
    ("90% exactly scores 10, not the float 9", "3600m", "4", REASON_CPU, 10),
    ("80% is not above the threshold", "3200m", "4", "", 20),
    ("just above 80%", "3201m", "4", REASON_CPU, 19),
    ("above allocatable scores 0", "5", "4", REASON_CPU, 0),
    ("fractional allocatable", "1900m", "2500m", "", 24),
    ("exponent form", "1e3m", "2", "", 50),
]


@pytest.mark.parametrize(
    ("usage", "alloc", "reason", "score"),
    [pytest.param(u, a, r, s, id=name) for name, u, a, r, s in CPU_CASES],
)
def test_cpu_filter_and_score(usage: str, alloc: str, reason: str, score: int) -> None:
    node = make_node("n1").capacity(cpu=alloc, memory="16Gi").obj()
    snap = cluster([node], [node_metrics("n1", usage)])
    assert verdict(plugin_on(snap), snap) == (reason, score)


def test_usage_is_over_allocatable_not_capacity() -> None:
    node = make_node("n1").capacity(cpu="8", memory="16Gi").allocatable(cpu="4").obj()
    snap = cluster([node], [node_metrics("n1", "3600m")])
    assert verdict(plugin_on(snap), snap) == (REASON_CPU, 10)


@pytest.mark.parametrize(
    ("threshold", "usage", "reason"),
    [
        pytest.param(0.5, "2001m", REASON_CPU, id="0.5, just above"),
        pytest.param(0.5, "2", "", id="0.5, exactly"),
        pytest.param(1.0, "4", "", id="1.0 lets a full node in"),
        pytest.param(1, "4001m", REASON_CPU, id="1 (an int) rejects above allocatable"),
        pytest.param(0.9, "3600m", "", id="0.9 exactly, compared exactly"),
    ],
)
def test_cpu_threshold(threshold: float, usage: str, reason: str) -> None:
    snap = cluster([node4()], [node_metrics("n1", usage)])
    args = msgspec.convert({"cpuThreshold": threshold}, LowCpuSchedulerArgs)
    assert verdict(plugin_on(snap, args), snap)[0] == reason


@pytest.mark.parametrize(
    ("usage", "score"),
    [
        (Fraction(0), 100),
        (Fraction(1, 1000), 99),
        (Fraction(9, 10), 10),
        (Fraction(1), 0),
        (Fraction(3, 2), 0),
        (Fraction(-1, 10), 100),
    ],
)
def test_dimension_score(usage: Fraction, score: int) -> None:
    assert dimension_score(usage) == score


# -- missing, stale and unusable metrics ------------------------------------------------


def test_missing_metrics_allowed_with_a_neutral_score_by_default() -> None:
    snap = cluster([node4("n1"), node4("n2")], [node_metrics("n2", "1")])
    plugin = plugin_on(snap)
    assert verdict(plugin, snap, "n1") == ("", 50)
    assert verdict(plugin, snap, "n2") == ("", 75)


def test_missing_metrics_rejected_when_asked() -> None:
    snap = cluster([node4("n1")], [])
    args = LowCpuSchedulerArgs(missing_metrics="Reject")
    assert verdict(plugin_on(snap, args), snap) == (REASON_MISSING, 50)


def test_missing_metrics_score_is_configurable() -> None:
    snap = cluster([node4("n1")], [])
    args = LowCpuSchedulerArgs(missing_metrics_score=0)
    assert verdict(plugin_on(snap, args), snap) == ("", 0)


def test_metrics_of_another_node_do_not_count() -> None:
    snap = cluster([node4("n1"), node4("n2")], [node_metrics("n2", "4")])
    args = LowCpuSchedulerArgs(missing_metrics="Reject")
    plugin = plugin_on(snap, args)
    assert verdict(plugin, snap, "n1") == (REASON_MISSING, 50)
    assert verdict(plugin, snap, "n2") == (REASON_CPU, 0)


# (id, NodeMetrics, problem)
BAD_METRICS: list[tuple[str, pb.ClusterObject, str]] = [
    ("older than the max age", node_metrics("n1", "100m", age=121), REASON_STALE),
    ("much older", node_metrics("n1", "100m", age=3600), REASON_STALE),
    ("no usage.cpu", node_metrics("n1", None), REASON_UNUSABLE),
    ("usage.cpu not a quantity", node_metrics("n1", "lots"), REASON_UNUSABLE),
    ("no timestamp", node_metrics("n1", "100m", timestamp=""), REASON_UNUSABLE),
    ("timestamp not RFC 3339", node_metrics("n1", "100m", timestamp="yesterday"), REASON_UNUSABLE),
    (
        "timestamp without a zone",
        node_metrics("n1", "100m", timestamp="2025-06-15T15:06:40"),
        REASON_UNUSABLE,
    ),
    ("json does not decode", node_metrics("n1", "100m", raw=b"{not json"), REASON_UNUSABLE),
    ("json is a list", node_metrics("n1", "100m", raw=b"[]"), REASON_UNUSABLE),
    (
        "usage is not a mapping",
        node_metrics(
            "n1", "100m", raw=json.dumps({"timestamp": rfc3339(NOW), "usage": 3}).encode()
        ),
        REASON_UNUSABLE,
    ),
    (
        # Quoting it in the detail must not recurse through all 1000 levels.
        "usage.cpu nested 1000 levels deep",
        node_metrics(
            "n1",
            "100m",
            raw=(
                b'{"timestamp":"'
                + rfc3339(NOW).encode()
                + b'","usage":{"cpu":'
                + b"[" * 1000
                + b"]" * 1000
                + b"}}"
            ),
        ),
        REASON_UNUSABLE,
    ),
]


@pytest.mark.parametrize(
    ("metrics", "problem"), [pytest.param(m, p, id=name) for name, m, p in BAD_METRICS]
)
def test_stale_or_unusable_metrics(metrics: pb.ClusterObject, problem: str) -> None:
    snap = cluster([node4()], [metrics])
    assert verdict(plugin_on(snap), snap) == ("", 50)
    rejecting = LowCpuSchedulerArgs(missing_metrics="Reject", missing_metrics_score=7)
    assert verdict(plugin_on(snap, rejecting), snap) == (problem, 7)
    assert plugin_on(snap).usage(snap.nodes["n1"]).problem == problem


@pytest.mark.parametrize(
    ("age", "problem"),
    [
        pytest.param(120, "", id="exactly the max age is fresh"),
        pytest.param(120.5, REASON_STALE, id="half a second over"),
        pytest.param(-30, "", id="a timestamp ahead of the clock is fresh"),
    ],
)
def test_max_age_edge(age: float, problem: str) -> None:
    stamp = datetime.fromtimestamp(NOW - age, UTC).isoformat()
    snap = cluster([node4()], [node_metrics("n1", "1", timestamp=stamp)])
    assert plugin_on(snap).usage(snap.nodes["n1"]).problem == problem


def test_a_long_unreadable_timestamp_is_quoted_cut_short() -> None:
    snap = cluster([node4()], [node_metrics("n1", "100m", timestamp="x" * 100_000)])
    usage = plugin_on(snap).usage(snap.nodes["n1"])
    assert usage.problem == REASON_UNUSABLE
    assert "is not RFC 3339" in usage.detail and len(usage.detail) < 300, usage.detail[:300]


def test_max_age_is_configurable() -> None:
    snap = cluster([node4()], [node_metrics("n1", "1", age=50)])
    args = LowCpuSchedulerArgs(metrics_poll_seconds=10, metrics_max_age_seconds=30)
    assert plugin_on(snap, args).usage(snap.nodes["n1"]).problem == REASON_STALE
    assert plugin_on(snap).usage(snap.nodes["n1"]).problem == ""


def test_metrics_go_stale_as_the_clock_moves() -> None:
    snap = cluster([node4()], [node_metrics("n1", "3600m", age=0)])
    plugin = plugin_on(snap, LowCpuSchedulerArgs(missing_metrics="Reject"))
    assert verdict(plugin, snap) == (REASON_CPU, 10)
    plugin.clock = lambda: NOW + 121
    assert verdict(plugin, snap) == (REASON_STALE, 50)


def test_node_without_allocatable_cpu_is_unusable() -> None:
    node = make_node("n1").capacity(cpu="4", memory="1Gi").allocatable(memory="1Gi").obj()
    snap = cluster([node], [node_metrics("n1", "100m")])
    u = plugin_on(snap).usage(snap.nodes["n1"])
    assert (u.problem, u.detail) == (REASON_UNUSABLE, "node n1 has no allocatable cpu")


def test_metrics_update_and_delete_through_deltas() -> None:
    snap = cluster([node4()], [node_metrics("n1", "100m")])
    plugin = plugin_on(snap, LowCpuSchedulerArgs(missing_metrics="Reject"))
    assert verdict(plugin, snap) == ("", 97)
    snap.apply(pb.ClusterDelta(upsert_objects=[node_metrics("n1", "3900m")]))
    assert verdict(plugin, snap) == (REASON_CPU, 2)
    snap.apply(
        pb.ClusterDelta(
            delete_objects=[pb.ObjectRef(group=METRICS_GROUP, resource="nodes", name="n1")]
        )
    )
    assert verdict(plugin, snap) == (REASON_MISSING, 50)


# -- memory, the optional second dimension ------------------------------------------------

# (id, args, usage.cpu, usage.memory, Filter reason, Score); nodes have 4 cores, 16Gi.
MEMORY_CASES: list[tuple[str, dict[str, Any], str, str | None, str, int]] = [
    ("off by default: memory ignored", {}, "1", "15Gi", "", 75),
    ("off by default: no usage.memory needed", {}, "1", None, "", 75),
    ("threshold rejects", {"memoryThreshold": 0.9}, "1", "15Gi", REASON_MEMORY, 75),
    ("threshold passes", {"memoryThreshold": 0.9}, "1", "8Gi", "", 75),
    ("cpu is checked first", {"memoryThreshold": 0.5}, "4", "15Gi", REASON_CPU, 0),
    ("equal weights average", {"memoryWeight": 1}, "2", "3276.8Mi", "", 65),
    ("weights 1:3", {"memoryWeight": 3}, "2", "12Gi", "", 31),
    ("memory alone", {"cpuWeight": 0, "memoryWeight": 1}, "3", "4Gi", "", 75),
    ("bytes", {"cpuWeight": 0, "memoryWeight": 1}, "0", str(8 * 2**30), "", 50),
    ("cpu still filters", {"cpuWeight": 0, "memoryWeight": 1}, "4", "4Gi", REASON_CPU, 75),
]


@pytest.mark.parametrize(
    ("args", "cpu", "memory", "reason", "score"),
    [pytest.param(a, c, m, r, s, id=name) for name, a, c, m, r, s in MEMORY_CASES],
)
def test_memory_dimension(
    args: dict[str, Any], cpu: str, memory: str | None, reason: str, score: int
) -> None:
    snap = cluster([node4()], [node_metrics("n1", cpu, memory)])
    plugin = plugin_on(snap, msgspec.convert(args, LowCpuSchedulerArgs))
    assert verdict(plugin, snap) == (reason, score)


@pytest.mark.parametrize(
    "args", [pytest.param({"memoryThreshold": 0.9}, id="filter"), {"memoryWeight": 1}]
)
def test_memory_in_use_but_absent_is_unusable(args: dict[str, Any]) -> None:
    snap = cluster([node4()], [node_metrics("n1", "1", None)])
    plugin = plugin_on(snap, msgspec.convert(args, LowCpuSchedulerArgs))
    assert plugin.usage(snap.nodes["n1"]).problem == REASON_UNUSABLE


# -- what it reads ------------------------------------------------------------------------


def test_reads_node_metrics_polled() -> None:
    want = ObjectKind(
        group="metrics.k8s.io",
        version="v1beta1",
        resource="nodes",
        kind="NodeMetrics",
        namespaced=False,
        poll_seconds=15,
    )
    assert LowCpu.reads(None) == (want,)
    assert LowCpu.reads(LowCpuSchedulerArgs()) == (want,)
    faster = LowCpu.reads(LowCpuSchedulerArgs(metrics_poll_seconds=5))
    assert [k.poll_seconds for k in faster] == [5]


def test_profile_lists_what_it_reads() -> None:
    doc = yaml.safe_load(SEED_CONFIG)
    doc["profiles"][0]["pluginConfig"] = [
        {"name": "LowCpuScheduler", "args": {"metricsPollSeconds": 30}}
    ]
    fw = Framework(parse_config(doc, "<test>", REGISTRY).profiles[0], REGISTRY)
    assert [
        (r.kind.resource, r.kind.group, r.kind.poll_seconds, r.plugins)
        for r in fw.reads
        if "LowCpuScheduler" in r.plugins
    ] == [("nodes", "metrics.k8s.io", 30, ("LowCpuScheduler",))]


# -- args and configuration ------------------------------------------------------------


def test_default_args() -> None:
    args = msgspec.convert({}, LowCpuSchedulerArgs)
    args.validate()
    assert args == LowCpuSchedulerArgs(
        cpu_threshold=0.8,
        memory_threshold=None,
        cpu_weight=1,
        memory_weight=0,
        metrics_poll_seconds=15,
        metrics_max_age_seconds=120,
        missing_metrics="Allow",
        missing_metrics_score=50,
    )


ARGS = "profiles[0].pluginConfig[0].args"


@pytest.mark.parametrize(
    ("raw", "errors"),
    [
        pytest.param(
            {"cpuThreshold": 0},
            [
                (
                    "cpuThreshold",
                    "must be a fraction of allocatable in (0, 1], e.g. 0.8 for 80%, got 0.0",
                )
            ],
            id="threshold 0",
        ),
        pytest.param(
            {"cpuThreshold": 80},
            [
                (
                    "cpuThreshold",
                    "must be a fraction of allocatable in (0, 1], e.g. 0.8 for 80%, got 80.0",
                )
            ],
            id="a percentage is not a fraction",
        ),
        pytest.param(
            {"cpuThreshold": float("nan")},
            [
                (
                    "cpuThreshold",
                    "must be a fraction of allocatable in (0, 1], e.g. 0.8 for 80%, got nan",
                )
            ],
            id="nan",
        ),
        pytest.param(
            {"memoryThreshold": -0.5},
            [
                (
                    "memoryThreshold",
                    "must be a fraction of allocatable in (0, 1], e.g. 0.8 for 80%, got -0.5",
                )
            ],
            id="negative memory threshold",
        ),
        pytest.param(
            {"cpuThreshold": "80%"},
            [("cpuThreshold", "expected float, got str")],
            id="threshold as a string",
        ),
        pytest.param(
            {"memoryWeight": 101},
            [("memoryWeight", "must be in the range [0, 100], got 101")],
            id="memory weight too big",
        ),
        pytest.param(
            {"cpuWeight": -1},
            [("cpuWeight", "must be in the range [0, 100], got -1")],
            id="negative cpu weight",
        ),
        pytest.param(
            {"cpuWeight": 0},
            [
                (
                    "cpuWeight",
                    "cpuWeight and memoryWeight are both 0; at least one must be positive for "
                    "the score to mean anything",
                )
            ],
            id="both weights 0",
        ),
        pytest.param(
            {"metricsPollSeconds": 0},
            [
                (
                    "metricsPollSeconds",
                    "must be at least 1 (metrics.k8s.io is polled, it has no watch), got 0",
                )
            ],
            id="no polling",
        ),
        pytest.param(
            {"metricsPollSeconds": 60, "metricsMaxAgeSeconds": 30},
            [
                (
                    "metricsMaxAgeSeconds",
                    "must be at least metricsPollSeconds (60), or metrics would go stale between "
                    "two polls; got 30",
                )
            ],
            id="max age below the poll interval",
        ),
        pytest.param(
            {"metricsPollSeconds": "15s"},
            [("metricsPollSeconds", "expected int, got str")],
            id="a duration string is not seconds",
        ),
        pytest.param(
            {"missingMetrics": "Ignore"},
            [("missingMetrics", "invalid enum value 'Ignore'")],
            id="unknown missingMetrics",
        ),
        pytest.param(
            {"missingMetricsScore": 101},
            [("missingMetricsScore", "must be a score in the range [0, 100], got 101")],
            id="missing score above 100",
        ),
        pytest.param(
            {"threshold": 0.8},
            [("threshold", 'unknown field "threshold"')],
            id="unknown field",
        ),
        pytest.param(
            {"cpuThreshold": 2, "missingMetricsScore": -1},
            [
                (
                    "cpuThreshold",
                    "must be a fraction of allocatable in (0, 1], e.g. 0.8 for 80%, got 2.0",
                ),
                ("missingMetricsScore", "must be a score in the range [0, 100], got -1"),
            ],
            id="every problem reported",
        ),
    ],
)
def test_bad_args_are_config_errors(raw: dict[str, Any], errors: list[tuple[str, str]]) -> None:
    doc = yaml.safe_load(SEED_CONFIG)
    doc["profiles"][0]["pluginConfig"] = [{"name": "LowCpuScheduler", "args": raw}]
    with pytest.raises(ConfigError) as info:
        parse_config(doc, "<test>", REGISTRY)
    got = [(e.field, e.reason) for e in info.value.errors]
    assert got == [(f"{ARGS}.{field}", reason) for field, reason in errors]


def test_building_in_code_validates_too() -> None:
    with pytest.raises(ValueError, match=r"cpuThreshold: must be a fraction"):
        LowCpu(LowCpuSchedulerArgs(cpu_threshold=1.5))


def test_example_config_is_the_seeds_and_loads(tmp_path: Path) -> None:
    example = EXAMPLE / "scheduler-config.yaml"
    assert yaml.safe_load(example.read_text()) == yaml.safe_load(SEED_CONFIG)
    seed = tmp_path / "your-config.yaml"
    seed.write_text(SEED_CONFIG)
    for path in (example, seed):
        profile = load_config(path, REGISTRY).profiles[0]
        assert profile.scheduler_name == "lowcpu-scheduler"
        assert [r.name for r in profile.enabled("filter")][-1] == "LowCpuScheduler"
        score = {r.name: r.weight for r in profile.enabled("score")}
        assert score["LowCpuScheduler"] == 1
        assert "NodeResourcesFit" in score
        assert profile.plugin_args["LowCpuScheduler"] == LowCpuSchedulerArgs()


# -- whole cycles ---------------------------------------------------------------------


def example_framework() -> Framework:
    fw = Framework(load_config(EXAMPLE / "scheduler-config.yaml", REGISTRY).profiles[0], REGISTRY)
    plugin = fw.instances["LowCpuScheduler"]
    assert isinstance(plugin, LowCpu)
    plugin.clock = lambda: NOW
    return fw


def test_cycle_avoids_the_hot_node_the_default_scores_prefer() -> None:
    # "hot" is the roomier node (NodeResourcesFit would pick it) but its NodeMetrics
    # say 90% CPU; "cool" runs pods that request much and use little.
    hot = make_node("hot").capacity(cpu="32", memory="64Gi").obj()
    cool = make_node("cool").capacity(cpu="4", memory="8Gi").obj()
    busy = make_pod("busy").node("cool").req(cpu="3", memory="6Gi").obj()
    snap = cluster(
        [hot, cool], [node_metrics("hot", "28800m"), node_metrics("cool", "400m")], [busy]
    )
    pod = make_pod("web").req(cpu="100m", memory="128Mi").info()
    result = schedule_pod(example_framework(), snap, CycleState(), pod, rng=random.Random(0))
    assert result.status.is_success, result.message
    assert result.node == "cool"


def test_cycle_prefers_the_idler_of_two_passing_nodes() -> None:
    a = make_node("a").capacity(cpu="4", memory="8Gi").obj()
    b = make_node("b").capacity(cpu="4", memory="8Gi").obj()
    # NodeResourcesFit and BalancedAllocation tie; LowCpuScheduler gives a 70, b 30.
    snap = cluster([a, b], [node_metrics("a", "1200m"), node_metrics("b", "2800m")])
    pod = make_pod("web").req(cpu="100m", memory="128Mi").info()
    fw = example_framework()
    for seed in range(5):
        result = schedule_pod(fw, snap, CycleState(), pod, rng=random.Random(seed))
        assert result.node == "a", result


def test_cycle_all_nodes_hot_is_a_fit_error_naming_the_seed_reason() -> None:
    nodes = [make_node(n).capacity(cpu="4", memory="8Gi").obj() for n in ("a", "b", "c")]
    metrics = [node_metrics("a", "3600m"), node_metrics("b", "4"), node_metrics("c", "1")]
    snap = cluster(nodes, metrics)
    pod = make_pod("web").req(cpu="100m").info()
    fw = example_framework()
    result = schedule_pod(fw, snap, CycleState(), pod, rng=random.Random(0))
    assert (result.status.is_success, result.node) == (True, "c"), result.message
    # c heats up too: no node passes.
    snap.apply(pb.ClusterDelta(upsert_objects=[node_metrics("c", "3300m")]))
    result = schedule_pod(fw, snap, CycleState(), pod, rng=random.Random(0))
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.message == (
        "0/3 nodes are available: 3 cpu usage too high. "
        "no new claims to deallocate, preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
    )
    assert result.rejected["a"] == Status(Code.UNSCHEDULABLE, (REASON_CPU,), "LowCpuScheduler")
