"""framework/observe.py's counters and histograms as the runtime records them:

- scheduler_plugin_evaluation_total{plugin,extension_point,profile}
  (framework/runtime/instrumented_plugins.go): every cycle, once per PreFilter and
  PreScore call, once per node a Filter or Score plugin is run on; a plugin its
  PreFilter or PreScore told to Skip is not run and not counted;
- scheduler_scheduling_algorithm_duration_seconds (schedule_one.go
  schedulingAlgorithm): one observation per schedule_pod, whatever its outcome.
"""

from __future__ import annotations

import re

from prometheus_client import REGISTRY as METRICS
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from berth.api.v1 import cluster_pb2 as cpb
from berth.framework import CycleState, observe
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.testing import make_node, make_pod, snapshot_of
from tests.unit.framework.fakes import REGISTRY, profile


def evaluations(plugin: str, point: str, profile_name: str) -> float:
    value = METRICS.get_sample_value(
        "scheduler_plugin_evaluation_total",
        {"plugin": plugin, "extension_point": point, "profile": profile_name},
    )
    return value or 0.0


def algorithm_runs() -> float:
    return METRICS.get_sample_value("scheduler_scheduling_algorithm_duration_seconds_count") or 0.0


def nodes(*specs: tuple[str, dict[str, str]]) -> list[cpb.Node]:
    return [
        make_node(name).capacity(cpu="4", memory="8Gi").labels(**labels).obj()
        for name, labels in specs
    ]


def test_plugin_evaluations_count_calls_and_nodes_at_the_four_instrumented_points() -> None:
    name = "evaluations"
    f = Framework(
        profile(
            name=name,
            pre_filter=("SkipPreFilter",),
            filter=("RejectLabel", "RejectLabel2"),
            pre_score=("SkipPreScore",),
            score=(("LabelScore", 1),),
        ),
        REGISTRY,
    )
    keys = [
        ("SkipPreFilter", "PreFilter"),
        ("RejectLabel", "Filter"),
        ("RejectLabel2", "Filter"),
        ("SkipPreScore", "PreScore"),
        ("LabelScore", "Score"),
    ]
    before = {k: evaluations(*k, name) for k in keys}
    runs = algorithm_runs()
    # Three nodes; RejectLabel turns one away, so RejectLabel2 runs on two, and the
    # two left are scored.
    snap = snapshot_of(
        nodes(("a", {"reject": "RejectLabel", "score": "1"}), ("b", {"score": "2"}), ("c", {}))
    )
    result = schedule_pod(f, snap, CycleState(), make_pod().info())
    assert result.status.is_success
    assert {k: evaluations(*k, name) - before[k] for k in keys} == {
        ("SkipPreFilter", "PreFilter"): 1,
        ("RejectLabel", "Filter"): 3,
        ("RejectLabel2", "Filter"): 2,
        ("SkipPreScore", "PreScore"): 1,
        ("LabelScore", "Score"): 2,
    }
    assert algorithm_runs() == runs + 1


def test_a_skipped_filter_plugin_is_not_evaluated() -> None:
    """RunFilterPlugins skips the plugins in SkipFilterPlugins before calling them."""
    name = "skipped"
    f = Framework(
        profile(name=name, pre_filter=("SkipPreFilter",), filter=("SkipPreFilter",)), REGISTRY
    )
    snap = snapshot_of(nodes(("a", {}), ("b", {})))
    before = evaluations("SkipPreFilter", "Filter", name)
    pod = make_pod().labels(skip="yes").info()
    state = CycleState()
    f.run_pre_filter(state, pod, snap.all_nodes())
    f.run_filter(state, pod, snap.all_nodes())
    assert evaluations("SkipPreFilter", "Filter", name) == before


def test_an_unschedulable_pod_is_one_algorithm_observation_too() -> None:
    f = Framework(profile(name="none-fit", filter=("RejectLabel",)), REGISTRY)
    snap = snapshot_of(nodes(("a", {"reject": "RejectLabel"})))
    runs = algorithm_runs()
    result = schedule_pod(f, snap, CycleState(), make_pod().info())
    assert not result.status.is_success
    assert algorithm_runs() == runs + 1


def _exposition(registry: CollectorRegistry, name: str) -> list[str]:
    """The text lines of ``name``'s series, creation times blanked."""
    lines = generate_latest(registry).decode().splitlines()
    return sorted(
        re.sub(r"(_created\{.*\}) .*", r"\1 T", line)
        for line in lines
        if name in line and not line.startswith("#")
    )


def test_cell_histogram_exposes_what_a_prometheus_histogram_would() -> None:
    """observe.CellHistogram (the extension point and plugin durations) shows
    the same _bucket (cumulative, le on a bound counts), _count, _sum and
    _created series as prometheus_client's Histogram given the same
    observations."""
    name = "berth_test_cell_histogram_seconds"
    bounds = [0.0001 * 2**i for i in range(12)]
    theirs_registry = CollectorRegistry()
    theirs = Histogram(name, "h", ["point"], buckets=bounds, registry=theirs_registry)
    ours = observe.CellHistogram(name, "h", ["point"], bounds)
    try:
        for point, seconds in [
            ("A", 0.00005),
            ("A", 0.0002),
            ("A", 0.0002),
            ("B", 9.0),
            ("A", 0.1),
        ]:
            theirs.labels(point).observe(seconds)
            ours.labels(point).observe(seconds)
        ours_registry = CollectorRegistry()
        ours_registry.register(ours)
        assert _exposition(ours_registry, name) == _exposition(theirs_registry, name)
        assert any(
            'le="0.0002"' in line and line.endswith(" 3.0")
            for line in _exposition(ours_registry, name)
        )
    finally:
        METRICS.unregister(ours)


def test_evaluation_counts_are_exposed_as_a_counter() -> None:
    """scheduler_plugin_evaluation_total from observe's cells: _total with the
    plugin/extension_point/profile labels, and _created, as a Counter."""
    cell = observe.evaluation_counter("P", "Filter", "exposed")
    cell.inc(3)
    cell.inc()
    lines = _exposition(METRICS, 'profile="exposed"')
    assert (
        'scheduler_plugin_evaluation_total{extension_point="Filter",plugin="P",profile="exposed"} 4.0'
        in lines
    )
    assert any(line.startswith("scheduler_plugin_evaluation_created{") for line in lines)
