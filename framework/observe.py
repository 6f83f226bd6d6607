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
from bisect import bisect_left
from collections.abc import Iterable
from contextlib import AbstractContextManager
from itertools import accumulate
from typing import Any

from opentelemetry import trace
from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

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


class HistogramCell:
    """One series of a ``CellHistogram``: per-bucket counts (the last one
    +Inf) and the sum of the observations."""

    __slots__ = ("bounds", "counts", "created", "total")

    def __init__(self, bounds: list[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        # The first bucket whose upper bound is >= amount (le).
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.total += amount


class CellHistogram(Collector):
    """A labelled histogram observed on the hot path (every extension point
    of every cycle): a prometheus_client Histogram's observe takes two locks
    and walks the buckets in Python (about 3 µs); a ``HistogramCell`` is
    plain integers and a bisect, added to by the one thread that runs a
    profile's cycles (the shim's binding loop for Bind), read at scrape time.
    Exposes what a prometheus_client Histogram would: ``_bucket`` (cumulative,
    ``le`` as it formats it), ``_count``, ``_sum`` and ``_created``."""

    def __init__(
        self, name: str, documentation: str, labelnames: list[str], buckets: list[float]
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = list(buckets)
        # floatToGoString is untyped in prometheus_client.
        self._le = [floatToGoString(b) for b in self.bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        self._cells: dict[tuple[str, ...], HistogramCell] = {}
        REGISTRY.register(self)

    def labels(self, *values: str) -> HistogramCell:
        cell = self._cells.get(values)
        if cell is None:
            cell = self._cells[values] = HistogramCell(self.bounds)
        return cell

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, cell in list(self._cells.items()):
            cumulative = list(accumulate(cell.counts))
            family.add_metric(values, list(zip(self._le, cumulative, strict=True)), cell.total)
            family.samples.append(
                Sample(
                    self.name + "_created",
                    dict(zip(self.labelnames, values, strict=True)),
                    cell.created,
                )
            )
        yield family

    def describe(self) -> Iterable[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)


class CounterCell:
    """One series of a ``CellCounter``: ``inc(n)`` adds n."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0
        self.created = time.time()

    def inc(self, amount: int = 1) -> None:
        self.value += amount


class CellCounter(Collector):
    """A labelled counter incremented on the hot path, as ``CellHistogram``
    is for histograms: each series a ``CounterCell`` added to by the one
    thread that runs a profile's cycles, read at scrape time. Exposes what a
    prometheus_client Counter would: ``_total`` and ``_created``."""

    def __init__(self, name: str, documentation: str, labelnames: list[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._cells: dict[tuple[str, ...], CounterCell] = {}
        REGISTRY.register(self)

    def labels(self, *values: str) -> CounterCell:
        cell = self._cells.get(values)
        if cell is None:
            cell = self._cells[values] = CounterCell()
        return cell

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, cell in list(self._cells.items()):
            family.add_metric(values, cell.value, created=cell.created)
        yield family

    def describe(self) -> Iterable[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)


FRAMEWORK_EXTENSION_POINT_DURATION = CellHistogram(
    "scheduler_framework_extension_point_duration_seconds",
    "Latency for running all plugins of a specific extension point.",
    ["extension_point", "status", "profile"],
    buckets=_exponential(0.0001, 2, 12),
)
PLUGIN_EXECUTION_DURATION = CellHistogram(
    "scheduler_plugin_execution_duration_seconds",
    "Duration for running a plugin at a specific extension point.",
    ["plugin", "extension_point", "status"],
    buckets=_exponential(0.00001, 1.5, 20),
)

# metrics.go: PluginEvaluationTotal, counted on every cycle (not sampled)
# by the instrumented plugins (framework/runtime/instrumented_plugins.go):
# once per PreFilter and PreScore call, once per node a Filter or Score
# plugin is run on.
#
# Counted on the hot path (about 25 increments per cycle), so not with a
# prometheus_client Counter, whose inc takes a lock and checks its argument
# (about 1.5 µs each): a ``CellCounter``, whose series are plain integers.
PLUGIN_EVALUATION_TOTAL = CellCounter(
    "scheduler_plugin_evaluation_total",
    "Number of attempts to schedule pods by each plugin and the extension point (available "
    "only in PreFilter, Filter, PreScore, and Score).",
    ["plugin", "extension_point", "profile"],
)
# Opportunistic batching (framework/batch.py), as metrics.go names them;
# counted on every cycle of a profile that batches, so cells as above.
BATCH_ATTEMPTS = CellCounter(
    "scheduler_batch_attempts",
    "Counts of results when we attempt to use batching.",
    ["profile", "result"],
)
BATCH_CACHE_FLUSHED = CellCounter(
    "scheduler_batch_cache_flushed",
    "Counts of cache flushes by reason.",
    ["profile", "reason"],
)
# metrics.go: SchedulingAlgorithmLatency, ExponentialBuckets(0.001, 2, 15):
# SchedulePod and PostFilter, before Reserve (schedule_one.go
# schedulingAlgorithm). Observed once per cycle: a cell, no labels.
SCHEDULING_ALGORITHM_DURATION = CellHistogram(
    "scheduler_scheduling_algorithm_duration_seconds",
    "Scheduling algorithm latency in seconds",
    [],
    buckets=_exponential(0.001, 2, 15),
)
_algorithm_cell = SCHEDULING_ALGORITHM_DURATION.labels()

_tracer = trace.get_tracer("berth.plugins")


# Each series' cell by the caller's own key (the status Code itself, not its
# label text), looked up once per key.
_plugin_children: dict[tuple[str, str, Code], HistogramCell] = {}
_point_children: dict[tuple[str, str, Code], HistogramCell] = {}


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


def evaluation_counter(plugin: str, point: str, profile: str) -> CounterCell:
    """The scheduler_plugin_evaluation_total series of one plugin at one
    extension point of one profile, made once (setInstrumentedPlugins)."""
    return PLUGIN_EVALUATION_TOTAL.labels(plugin, point, profile)


def observe_algorithm(seconds: float) -> None:
    _algorithm_cell.observe(seconds)


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
