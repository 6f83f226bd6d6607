"""berth.kube.metrics' per-thread cells: the rest_client_* series any thread records
to without a lock, exposed as prometheus_client's Counter and Histogram would be."""

from __future__ import annotations

import re
import threading

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from berth.kube import metrics
from berth.kube.metrics import ThreadCellCounter, ThreadCellGauge, ThreadCellHistogram

# k8s.io/component-base/metrics/prometheus/restclient/metrics.go requestLatency's buckets.
BUCKETS = [0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0]


def _exposition(registry: CollectorRegistry) -> list[str]:
    """The registry's text exposition, creation times blanked (HELP and TYPE kept)."""
    text = generate_latest(registry).decode()
    return [re.sub(r"(_created(\{.*\})?) .*", r"\1 T", line) for line in text.splitlines()]


def _in_threads(work: list[list[tuple[str, float]]], record: object) -> None:
    """Runs each list of ``work`` on a thread of its own, all at once."""
    assert callable(record)
    start = threading.Barrier(len(work))

    def run(items: list[tuple[str, float]]) -> None:
        start.wait()
        for label, value in items:
            record(label, value)

    threads = [threading.Thread(target=run, args=(items,)) for items in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_thread_cell_counter_exposes_what_a_prometheus_counter_would() -> None:
    theirs_registry, ours_registry = CollectorRegistry(), CollectorRegistry()
    name = "rest_client_requests_total"
    doc = "Number of HTTP requests, partitioned by status code, method, and host."
    theirs = Counter(name, doc, ["code", "method", "host"], registry=theirs_registry)
    ours = ThreadCellCounter(name, doc, ["code", "method", "host"], registry=ours_registry)
    for code in ["201", "201", "409", "<error>", "201"]:
        theirs.labels(code, "POST", "10.0.0.1:6443").inc()
        ours.labels(code, "POST", "10.0.0.1:6443").inc()
    theirs.labels("200", "GET", "10.0.0.1:6443").inc()
    ours.labels("200", "GET", "10.0.0.1:6443").inc()
    assert _exposition(ours_registry) == _exposition(theirs_registry)
    assert (
        'rest_client_requests_total{code="201",host="10.0.0.1:6443",method="POST"} 3.0'
        in _exposition(ours_registry)
    )


def test_thread_cell_histogram_exposes_what_a_prometheus_histogram_would() -> None:
    theirs_registry, ours_registry = CollectorRegistry(), CollectorRegistry()
    name = "rest_client_request_duration_seconds"
    doc = "Request latency in seconds. Broken down by verb, and host."
    theirs = Histogram(name, doc, ["verb", "host"], buckets=BUCKETS, registry=theirs_registry)
    ours = ThreadCellHistogram(name, doc, ["verb", "host"], BUCKETS, registry=ours_registry)
    # On a bound (le counts it), between bounds, past the last.
    for verb, seconds in [("POST", 0.005), ("POST", 0.004), ("GET", 0.3), ("POST", 61.0)]:
        theirs.labels(verb, "h:1").observe(seconds)
        ours.labels(verb, "h:1").observe(seconds)
    assert _exposition(ours_registry) == _exposition(theirs_registry)
    assert (
        'rest_client_request_duration_seconds_bucket{host="h:1",le="0.005",verb="POST"} 2.0'
        in _exposition(ours_registry)
    )


def test_per_thread_cells_sum_every_threads_records_exactly() -> None:
    """Eight threads recording at once to the same series (and one series each
    of their own) lose nothing: each has its own cells, and the scrape sums
    them, as prometheus_client's locked Counter and Histogram count them."""
    theirs_registry, ours_registry = CollectorRegistry(), CollectorRegistry()
    c_theirs = Counter("t_total", "t", ["k"], registry=theirs_registry)
    c_ours = ThreadCellCounter("t_total", "t", ["k"], registry=ours_registry)
    h_theirs = Histogram("t_seconds", "t", ["k"], buckets=BUCKETS, registry=theirs_registry)
    h_ours = ThreadCellHistogram("t_seconds", "t", ["k"], BUCKETS, registry=ours_registry)
    work = [
        [("shared", (i * 7 + n) % 50 / 10.0) for n in range(5000)] + [(f"own{i}", 0.01)]
        for i in range(8)
    ]

    def record(label: str, value: float) -> None:
        c_theirs.labels(label).inc()
        c_ours.labels(label).inc()
        h_theirs.labels(label).observe(value)
        h_ours.labels(label).observe(value)

    _in_threads(work, record)

    def without_sums(lines: list[str]) -> list[str]:
        return sorted(line for line in lines if not line.startswith("t_seconds_sum"))

    # Threads racing make their series in any order; float sums added in
    # another order may differ in the last bit.
    assert without_sums(_exposition(ours_registry)) == without_sums(_exposition(theirs_registry))
    for labels in [{"k": "shared"}, {"k": "own3"}]:
        assert ours_registry.get_sample_value("t_seconds_sum", labels) == pytest.approx(
            theirs_registry.get_sample_value("t_seconds_sum", labels)
        )
    assert 't_total{k="shared"} 40000.0' in _exposition(ours_registry)


def test_a_finished_threads_records_stay_counted() -> None:
    registry = CollectorRegistry()
    counter = ThreadCellCounter("gone_total", "g", ["k"], registry=registry)
    _in_threads([[("a", 0.0)] * 3], lambda label, _: counter.labels(label).inc())
    counter.labels("a").inc()
    assert registry.get_sample_value("gone_total", {"k": "a"}) == 4.0


def test_request_done_counts_code_method_host_and_the_duration() -> None:
    """client-go rest/request.go: the status as code (``<error>`` for no answer),
    the method as method and verb, the duration in the verb's histogram."""
    from prometheus_client import REGISTRY

    host = "test-metrics.invalid:6443"

    def sample(name: str, labels: dict[str, str]) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    metrics.request_done("POST", host, 201, 0.003)
    _in_threads([[("x", 0.0)]], lambda *_: metrics.request_done("POST", host, 0, 0.2))
    assert (
        sample("rest_client_requests_total", {"code": "201", "method": "POST", "host": host}) == 1
    )
    assert (
        sample("rest_client_requests_total", {"code": "<error>", "method": "POST", "host": host})
        == 1
    )
    assert (
        sample(
            "rest_client_request_duration_seconds_bucket",
            {"verb": "POST", "host": host, "le": "0.005"},
        )
        == 1
    )
    assert sample("rest_client_request_duration_seconds_count", {"verb": "POST", "host": host}) == 2


def test_thread_cell_gauge_exposes_what_a_prometheus_gauge_would() -> None:
    """scheduler_pending_pods: a pod counted into a queue on one thread and out
    of it on another nets to zero, as prometheus_client's Gauge shows it."""
    theirs_registry, ours_registry = CollectorRegistry(), CollectorRegistry()
    doc = "Number of pending pods, by the queue type."
    theirs = Gauge("scheduler_pending_pods", doc, ["queue"], registry=theirs_registry)
    ours = ThreadCellGauge("scheduler_pending_pods", doc, ["queue"], registry=ours_registry)
    for gauge in (theirs, ours):
        gauge.labels("active").inc()
        gauge.labels("active").inc()
        gauge.labels("backoff").inc()
    _in_threads([[("active", 0.0)]], lambda label, _: ours.labels(label).dec())
    theirs.labels("active").dec()
    assert _exposition(ours_registry) == _exposition(theirs_registry)
    assert 'scheduler_pending_pods{queue="active"} 1.0' in _exposition(ours_registry)


def test_unlabelled_cells_are_exposed_from_their_creation_as_prometheus_does() -> None:
    """scheduler_pod_scheduling_attempts has no labels: prometheus_client shows
    its series (zeros) before the first observation, and so do the cells."""
    theirs_registry, ours_registry = CollectorRegistry(), CollectorRegistry()
    bounds = [1.0, 2.0, 4.0, 8.0, 16.0]
    name, doc = "scheduler_pod_scheduling_attempts", "Number of attempts."
    theirs = Histogram(name, doc, buckets=bounds, registry=theirs_registry)
    ours = ThreadCellHistogram(name, doc, [], bounds, registry=ours_registry)
    assert _exposition(ours_registry) == _exposition(theirs_registry)
    theirs.observe(2)
    ours.labels().observe(2)
    _in_threads([[("", 3.0)]], lambda _, value: ours.labels().observe(value))
    theirs.observe(3)
    assert _exposition(ours_registry) == _exposition(theirs_registry)
    c_theirs = Counter("c", "c", registry=theirs_registry)
    c_ours = ThreadCellCounter("c", "c", [], registry=ours_registry)
    c_theirs.inc()
    c_ours.labels().inc()
    assert _exposition(ours_registry) == _exposition(theirs_registry)
