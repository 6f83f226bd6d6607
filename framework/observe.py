"""Metrics and traces around plugin calls.

Metric names and labels are kube-scheduler's (pkg/scheduler/metrics/
metrics.go): ``scheduler_framework_extension_point_duration_seconds`` with
extension_point/status/profile, ``scheduler_plugin_execution_duration_seconds``
with plugin/extension_point/status (sampled: 10% of cycles, as upstream),
``scheduler_plugin_evaluation_total`` with plugin/extension_point/profile, and
``scheduler_scheduling_algorithm_duration_seconds``, and opportunistic
batching's ``scheduler_batch_attempts_total`` and
``scheduler_batch_cache_flushed_total``. They are exported by the process that
runs the plugins: ``berth serve``, or the shim in-process. Spans: one per
extension point, a child per plugin, under whatever span is current (the
server's RPC span).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry import trace
from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from berth.framework.status import Code

# Code.String() in upstream's framework.
CODE_LABEL = {
    Code.SUCCESS: "Success",
    Code.ERROR: "Error",
    Code.UNSCHEDULABLE: "Unschedulable",
    Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable",
    Code.WAIT: "Wait",
    Code.SKIP: "Skip",
    Code.PENDING: "Pending",
}


def _exponential(start: float, factor: float, count: int) -> list[float]:
    return [start * factor**i for i in range(count)]


FRAMEWORK_EXTENSION_POINT_DURATION = Histogram(
    "scheduler_framework_extension_point_duration_seconds",
    "Latency for running all plugins of a specific extension point.",
    ["extension_point", "status", "profile"],
    buckets=_exponential(0.0001, 2, 12),
)
PLUGIN_EXECUTION_DURATION = Histogram(
    "scheduler_plugin_execution_duration_seconds",
    "Duration for running a plugin at a specific extension point.",
    ["plugin", "extension_point", "status"],
    buckets=_exponential(0.00001, 1.5, 20),
)
# Opportunistic batching (framework/batch.py), as metrics.go names them.
BATCH_ATTEMPTS = Counter(
    "scheduler_batch_attempts",
    "Counts of results when we attempt to use batching.",
    ["profile", "result"],
)
BATCH_CACHE_FLUSHED = Counter(
    "scheduler_batch_cache_flushed",
    "Counts of cache flushes by reason.",
    ["profile", "reason"],
)

# metrics.go: PluginEvaluationTotal, counted on every cycle (not sampled)
# by the instrumented plugins (framework/runtime/instrumented_plugins.go):
# once per PreFilter and PreScore call, once per node a Filter or Score
# plugin is run on.
#
# Counted on the hot path (about 25 increments per cycle), so not with a
# prometheus_client Counter, whose inc takes a lock and checks its argument
# (about 1.5 µs each): each series is an ``EvaluationCount`` cell, a plain
# integer added to by the one thread that runs a profile's cycles (the
# server's worker, or the in-process shim's scheduling loop), and read at
# scrape time by ``_EvaluationCollector``, which exposes the same series
# (``_total`` and ``_created``) as a Counter would.
_EVALUATION_NAME = "scheduler_plugin_evaluation"
_EVALUATION_HELP = (
    "Number of attempts to schedule pods by each plugin and the extension point (available "
    "only in PreFilter, Filter, PreScore, and Score)."
)
_EVALUATION_LABELS = ("plugin", "extension_point", "profile")


class EvaluationCount:
    """One scheduler_plugin_evaluation_total series: ``inc(n)`` adds n."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0
        self.created = time.time()

    def inc(self, amount: int = 1) -> None:
        self.value += amount


class _EvaluationCollector(Collector):
    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(_EVALUATION_NAME, _EVALUATION_HELP, labels=_EVALUATION_LABELS)
        for labels, cell in list(_evaluation_children.items()):
            family.add_metric(labels, cell.value, created=cell.created)
        yield family

    def describe(self) -> Iterable[Metric]:
        yield CounterMetricFamily(_EVALUATION_NAME, _EVALUATION_HELP, labels=_EVALUATION_LABELS)


# metrics.go: SchedulingAlgorithmLatency, ExponentialBuckets(0.001, 2, 15):
# SchedulePod and PostFilter, before Reserve (schedule_one.go
# schedulingAlgorithm).
SCHEDULING_ALGORITHM_DURATION = Histogram(
    "scheduler_scheduling_algorithm_duration_seconds",
    "Scheduling algorithm latency in seconds",
    buckets=_exponential(0.001, 2, 15),
)

_tracer = trace.get_tracer("berth.plugins")


# Labelled children, looked up once: .labels() costs a lock and a dict
# lookup per call, on the hot path.
_plugin_children: dict[tuple[str, str, Code], Any] = {}
_point_children: dict[tuple[str, str, Code], Any] = {}


def observe_plugin(point: str, plugin: str, code: Code, seconds: float) -> None:
    key = (point, plugin, code)
    child = _plugin_children.get(key)
    if child is None:
        child = PLUGIN_EXECUTION_DURATION.labels(plugin, point, CODE_LABEL[code])
        _plugin_children[key] = child
    child.observe(seconds)


def observe_extension_point(point: str, profile: str, code: Code, seconds: float) -> None:
    key = (point, profile, code)
    child = _point_children.get(key)
    if child is None:
        child = FRAMEWORK_EXTENSION_POINT_DURATION.labels(point, CODE_LABEL[code], profile)
        _point_children[key] = child
    child.observe(seconds)


_evaluation_children: dict[tuple[str, str, str], EvaluationCount] = {}
REGISTRY.register(_EvaluationCollector())


def evaluation_counter(plugin: str, point: str, profile: str) -> EvaluationCount:
    """The scheduler_plugin_evaluation_total series of one plugin at one
    extension point of one profile, made once (setInstrumentedPlugins)."""
    key = (plugin, point, profile)
    child = _evaluation_children.get(key)
    if child is None:
        child = _evaluation_children[key] = EvaluationCount()
    return child


def observe_algorithm(seconds: float) -> None:
    SCHEDULING_ALGORITHM_DURATION.observe(seconds)


def tracing_active() -> bool:
    """Is the current span recorded? Plugin spans under an unrecorded (or
    absent) parent would cost time and show nowhere."""
    return trace.get_current_span().is_recording()


def extension_point_span(point: str, profile: str) -> AbstractContextManager[Any]:
    return _tracer.start_as_current_span(
        point, attributes={"berth.extension_point": point, "berth.profile": profile}
    )


def plugin_span(point: str, plugin: str) -> AbstractContextManager[Any]:
    return _tracer.start_as_current_span(
        f"{point}/{plugin}", attributes={"berth.extension_point": point, "berth.plugin": plugin}
    )
