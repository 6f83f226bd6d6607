"""client-go's request metrics for Berth's API requests, with component-base's
names, labels and buckets (k8s.io/component-base/metrics/prometheus/restclient/
metrics.go), as kube-scheduler exports them:

- ``rest_client_requests_total{code,method,host}``: one per request that got
  an answer or failed; ``code`` is the HTTP status, or ``<error>`` when no
  answer came (client-go rest/request.go ``sanitize``);
- ``rest_client_request_duration_seconds{verb,host}``: from the request's
  start (the client-side rate limiter's wait included, as client-go's
  ``Request.request`` times it) to its answer's headers.

``method`` and ``verb`` are the HTTP method (client-go's ``Request.verb``: a
watch is a GET); ``host`` is the API server's host:port (``url.Host``). Both
KubeApi (urllib3, worker threads) and AsyncApi (the event loop) record here.

Both are recorded on every request (the shim makes two a pod: its binding and its
Scheduled event), so they are per-thread cells (``ThreadCellCounter``,
``ThreadCellHistogram``) summed at scrape time rather than prometheus_client's
Counter and Histogram, whose ``inc`` and ``observe`` take a lock each (a histogram
one per bucket it walks). The exposition is the same as theirs
(tests/unit/kube/test_metrics.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from itertools import accumulate
from typing import Final, Generic, TypeVar
from urllib.parse import urlsplit

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from berth.framework.observe import CounterCell, HistogramCell

# restclient/metrics.go requestLatency's buckets.
_LATENCY_BUCKETS: Final = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)


class GaugeCell:
    """One thread's part of a ``ThreadCellGauge`` series: what it added and took away."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount


_Cell = TypeVar("_Cell", CounterCell, HistogramCell, GaugeCell)


class _PerThread(Generic[_Cell]):
    """The cells of one metric, one per (thread, series): a thread takes its own
    cell for a series the first time it records to it (a dict lookup on a
    ``threading.local`` from then on) and adds to it alone, so no lock is
    taken per observation. Cells outlive their threads (a finished worker's
    counts stay in the sums). ``series`` is the list scrapes sum over, appended
    to under a lock."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        # (label values, cell), every thread's, in the order they were made.
        self.series: list[tuple[tuple[str, ...], _Cell]] = []
        # Each series' first creation time, any thread's: its _created.
        self.created: dict[tuple[str, ...], float] = {}

    def cells(self) -> dict[tuple[str, ...], _Cell]:
        try:
            mine: dict[tuple[str, ...], _Cell] = self._local.cells
        except AttributeError:
            mine = self._local.cells = {}
        return mine

    def add(self, values: tuple[str, ...], cell: _Cell) -> None:
        self.cells()[values] = cell
        with self._lock:
            self.series.append((values, cell))
            self.created.setdefault(values, cell.created)


class _ThreadCells(Collector, Generic[_Cell]):
    """What the per-thread cell metrics share: their name, help and label names,
    each thread's cell per series (``labels``), an unlabelled series shown from
    creation on (as prometheus_client does), and registration. A subclass says
    how a cell is made (``_new_cell``), how the cells add up (``collect``) and
    which family it exposes (``_family``)."""

    _family: type[Metric]

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: list[str],
        registry: CollectorRegistry | None = REGISTRY,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._cells: _PerThread[_Cell] = _PerThread()
        if not self.labelnames:
            self.labels()
        if registry is not None:
            registry.register(self)

    def _new_cell(self) -> _Cell:
        raise NotImplementedError

    def labels(self, *values: str) -> _Cell:
        """The calling thread's cell of this series."""
        cell = self._cells.cells().get(values)
        if cell is None:
            cell = self._new_cell()
            self._cells.add(values, cell)
        return cell

    def describe(self) -> Iterable[Metric]:
        yield self._family(self.name, self.documentation, labels=self.labelnames)  # type: ignore[call-arg]


class ThreadCellCounter(_ThreadCells[CounterCell]):
    """A labelled counter any thread may increment without a lock: per-thread
    ``CounterCell``s (berth.framework.observe), summed at scrape time. Exposes
    what a prometheus_client Counter would: ``_total`` and ``_created``."""

    _family = CounterMetricFamily

    def _new_cell(self) -> CounterCell:
        return CounterCell()

    def collect(self) -> Iterable[Metric]:
        totals: dict[tuple[str, ...], int] = {}
        for values, cell in list(self._cells.series):
            totals[values] = totals.get(values, 0) + cell.value
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, total in totals.items():
            family.add_metric(values, total, created=self._cells.created[values])
        yield family


class ThreadCellHistogram(_ThreadCells[HistogramCell]):
    """A labelled histogram any thread may observe without a lock, as
    ``ThreadCellCounter``: per-thread ``HistogramCell``s summed bucket by bucket
    at scrape time. Exposes what a prometheus_client Histogram would:
    ``_bucket`` (cumulative, ``le`` as it formats it), ``_count``, ``_sum`` and
    ``_created``. A scrape while another thread observes may see an
    observation's bucket without its sum (never a count that disagrees with the
    buckets: both come from the same copy)."""

    _family = HistogramMetricFamily

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: list[str],
        buckets: Iterable[float],
        registry: CollectorRegistry | None = REGISTRY,
    ) -> None:
        self.bounds = list(buckets)
        # floatToGoString is untyped in prometheus_client.
        self._le = [floatToGoString(b) for b in self.bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        super().__init__(name, documentation, labelnames, registry)

    def _new_cell(self) -> HistogramCell:
        return HistogramCell(self.bounds)

    def collect(self) -> Iterable[Metric]:
        sums: dict[tuple[str, ...], tuple[list[int], float]] = {}
        for values, cell in list(self._cells.series):
            counts, total = list(cell.counts), cell.total
            seen = sums.get(values)
            if seen is not None:
                counts = [a + b for a, b in zip(seen[0], counts, strict=True)]
                total += seen[1]
            sums[values] = (counts, total)
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, (counts, total) in sums.items():
            cumulative = list(accumulate(counts))
            family.add_metric(values, list(zip(self._le, cumulative, strict=True)), total)
            family.samples.append(
                Sample(
                    self.name + "_created",
                    dict(zip(self.labelnames, values, strict=True)),
                    self._cells.created[values],
                )
            )
        yield family


class ThreadCellGauge(_ThreadCells[GaugeCell]):
    """A labelled gauge any thread may ``inc`` and ``dec`` without a lock, as
    ``ThreadCellCounter``: each thread's cell holds what that thread added and
    took away, and the scrape shows their sum (a pod counted in by one thread
    and out by another nets to zero). No ``set``: a gauge that is set
    stays a prometheus_client Gauge. Exposes what a prometheus_client Gauge would."""

    _family = GaugeMetricFamily

    def _new_cell(self) -> GaugeCell:
        return GaugeCell()

    def collect(self) -> Iterable[Metric]:
        totals: dict[tuple[str, ...], float] = {}
        for values, cell in list(self._cells.series):
            totals[values] = totals.get(values, 0.0) + cell.value
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, total in totals.items():
            family.add_metric(values, total)
        yield family


REQUESTS_TOTAL = ThreadCellCounter(
    "rest_client_requests_total",
    "Number of HTTP requests, partitioned by status code, method, and host.",
    ["code", "method", "host"],
)
REQUEST_DURATION = ThreadCellHistogram(
    "rest_client_request_duration_seconds",
    "Request latency in seconds. Broken down by verb, and host.",
    ["verb", "host"],
    buckets=_LATENCY_BUCKETS,
)

# client-go's code label for a request that got no answer.
NO_ANSWER: Final = "<error>"


def host_label(url: str) -> str:
    """client-go's ``host`` label of a server URL: its host:port as written
    (``https://10.0.0.1:6443`` -> ``10.0.0.1:6443``); ``none`` without one."""
    return urlsplit(url).netloc.rpartition("@")[2] or "none"


def request_done(method: str, host: str, status: int, seconds: float) -> None:
    """One request ended: ``status`` 0 when no answer came."""
    code = str(status) if status > 0 else NO_ANSWER
    REQUESTS_TOTAL.labels(code, method, host).value += 1
    REQUEST_DURATION.labels(method, host).observe(seconds)


__all__ = [
    "NO_ANSWER",
    "REQUESTS_TOTAL",
    "REQUEST_DURATION",
    "GaugeCell",
    "ThreadCellCounter",
    "ThreadCellGauge",
    "ThreadCellHistogram",
    "host_label",
    "request_done",
]
