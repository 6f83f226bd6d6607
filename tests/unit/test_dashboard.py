"""deploy/monitoring/berth-dashboard.json: a Grafana dashboard whose every PromQL
expression names only metrics Berth exports.

The expressions are taken from every panel's targets and the template variables'
queries; the metric names in them (identifiers that are neither functions, aggregations,
keywords nor labels: label matchers, ranges and by/without clauses are removed first) are
compared with the sample names of every metric family the shim's and the plugin server's
modules register (a labelled family exports its names even before its first sample).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "monitoring" / "berth-dashboard.json"

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names: set[str] = set()
    for m in _IDENT.finditer(text):
        name = m.group()
        if name.lower() in _KEYWORDS:
            continue
        if text[m.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        if m.start() > 0 and text[m.start() - 1] in "$.":
            continue  # a Grafana variable
        names.add(name)
    return names


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'histogram_quantile(0.99, sum by (le, plugin) (rate(a_seconds_bucket{x="y"}[5m])))',
            {"a_seconds_bucket"},
        ),
        (
            'sum by (code) (rate(b_total{code!="OK"}[$__rate_interval])) / on (job) c',
            {"b_total", "c"},
        ),
        ("max without (instance) (d) > bool 0", {"d"}),
        ("label_values(e_total, profile)", {"e_total", "profile"}),
    ],
)
def test_metric_names_are_read_from_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def exported_names() -> set[str]:
    """Every sample name the two processes' metrics can export."""
    # What each process imports when it runs: the shim (in-process plugins included)
    # and the plugin server.
    import berth.server.app
    import berth.shim.app

    del berth.server.app, berth.shim.app
    names: set[str] = set()
    suffixes = {
        "counter": ("_total", "_created"),
        "gauge": ("",),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
        "summary": ("", "_count", "_sum", "_created"),
        "info": ("_info",),
    }
    for family in REGISTRY.collect():
        for suffix in suffixes.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


def expressions(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expression) for every panel target and query variable."""
    out: list[tuple[str, str]] = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            out.append((f"panel {panel['title']!r} {target['refId']}", target["expr"]))
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]
            out.append(
                (f"variable {var['name']}", query["query"] if isinstance(query, dict) else query)
            )
    return out


def test_every_dashboard_expression_names_metrics_berth_exports() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_names()
    found = expressions(dashboard)
    assert len(found) >= 20
    missing = []
    for where, expr in found:
        names = metric_names(expr)
        if where.startswith("variable"):
            # label_values(metric, label): the second argument is a label.
            names = {expr.split("(", 1)[1].split(",", 1)[0].strip()}
        assert names, f"{where}: no metric in {expr!r}"
        missing += [f"{where}: {n}" for n in sorted(names - exported)]
    assert not missing, "\n".join(missing)


def test_the_golden_signals_are_on_it() -> None:
    """What the dashboard is for: attempts by result, attempt latency, pending pods by
    queue, plugin latency by extension point and by plugin, bind latency, and the plugin
    server's call rate, errors and latency."""
    dashboard = json.loads(DASHBOARD.read_text())
    used = set()
    for _, expr in expressions(dashboard):
        used |= metric_names(expr)
    assert {
        "scheduler_schedule_attempts_total",
        "scheduler_scheduling_attempt_duration_seconds_bucket",
        "scheduler_pending_pods",
        "scheduler_framework_extension_point_duration_seconds_bucket",
        "scheduler_plugin_execution_duration_seconds_bucket",
        "scheduler_unschedulable_pods",
        "berth_plugin_server_calls_total",
        "berth_plugin_server_call_duration_seconds_bucket",
    } <= used
    titles = [p["title"] for p in dashboard["panels"]]
    assert "Bind latency" in titles


def test_panels_are_well_formed() -> None:
    """Unique ids, every target on the dashboard's data source variable, no two panels on
    the same grid cell (Grafana would push one aside)."""
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "berth-scheduler"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, panel["title"]
                cells.add((x, y))
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"], panel["title"]
