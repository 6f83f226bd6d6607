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
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import urlsplit

from prometheus_client import Counter, Histogram

# restclient/metrics.go requestLatency's buckets.
_LATENCY_BUCKETS: Final = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

REQUESTS_TOTAL = Counter(
    "rest_client_requests_total",
    "Number of HTTP requests, partitioned by status code, method, and host.",
    ["code", "method", "host"],
)
REQUEST_DURATION = Histogram(
    "rest_client_request_duration_seconds",
    "Request latency in seconds. Broken down by verb, and host.",
    ["verb", "host"],
    buckets=_LATENCY_BUCKETS,
)

# client-go's code label for a request that got no answer.
NO_ANSWER: Final = "<error>"

_counters: dict[tuple[str, str, str], Any] = {}
_histograms: dict[tuple[str, str], Any] = {}


def host_label(url: str) -> str:
    """client-go's ``host`` label of a server URL: its host:port as written
    (``https://10.0.0.1:6443`` -> ``10.0.0.1:6443``); ``none`` without one."""
    return urlsplit(url).netloc.rpartition("@")[2] or "none"


def request_done(method: str, host: str, status: int, seconds: float) -> None:
    """One request ended: ``status`` 0 when no answer came."""
    code = str(status) if status > 0 else NO_ANSWER
    key = (code, method, host)
    counter = _counters.get(key)
    if counter is None:
        counter = _counters[key] = REQUESTS_TOTAL.labels(code, method, host)
    counter.inc()
    hkey = (method, host)
    histogram = _histograms.get(hkey)
    if histogram is None:
        histogram = _histograms[hkey] = REQUEST_DURATION.labels(method, host)
    histogram.observe(seconds)


__all__ = ["NO_ANSWER", "REQUESTS_TOTAL", "REQUEST_DURATION", "host_label", "request_done"]
