"""``berth bench SchedulingBasic``: the harness's own arithmetic and correctness check, and a
small run of all four schedulers on a real API server.

Figures are never asserted (they depend on the machine and its load): the smoke run checks
the records' shape and that every run was checked.
"""

from __future__ import annotations

import gzip
import json
import platform
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from berth.dev.bench_perf import (
    SCHEDULERS,
    RunFacts,
    ThroughputCollector,
    _add_ratios,
    _delete_pods,
    bound_timeline,
    check_run,
    format_creation,
    format_rounds,
    format_table,
    histogram_quantile,
    perf_node,
    perf_pod,
    round_order,
    summarize_rounds,
)
from berth.dev.localcluster import objects
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi

# --- the correctness check, on fake records ------------------------------------------------------


def _nodes(count: int, zones: bool = False) -> list[JSON]:
    return [perf_node(i, zones) for i in range(count)]


def _pod(kind: str, name: str, node: str, ns: str = "m") -> JSON:
    pod = perf_pod(kind, name, ns, scheduler="s", run="r", anti_affinity_namespaces=("m", "i"))
    pod["spec"]["nodeName"] = node
    return pod


def _facts(pods: list[JSON], nodes: list[JSON], **over: Any) -> RunFacts:
    keys = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods]
    history = {
        k: [p["spec"]["nodeName"]] for k, p in zip(keys, pods, strict=True) if p["spec"]["nodeName"]
    }
    facts = RunFacts(
        pods=pods,
        nodes=nodes,
        node_history=history,
        expected=keys,
        scheduled_reported=len(keys),
        conflicts_reported=0,
    )
    for k, v in over.items():
        setattr(facts, k, v)
    return facts


def test_a_correct_run_passes_the_check() -> None:
    nodes = _nodes(3)
    # 40 pods of 100m fill a 4-cpu node exactly: at the limit is not over it.
    pods = [_pod("default", f"p{i}", "perf-node-00000") for i in range(40)]
    pods += [_pod("default", f"q{i}", "perf-node-00001") for i in range(5)]
    assert check_run(_facts(pods, nodes)) == []


def test_the_check_flags_an_overcommitted_node_and_a_double_binding() -> None:
    nodes = _nodes(2)
    pods = [_pod("default", f"p{i}", "perf-node-00000") for i in range(41)]
    facts = _facts(pods, nodes)
    history = dict(facts.node_history)
    history["m/p3"] = ["perf-node-00001", "perf-node-00000"]  # moved between watch events
    facts.node_history = history

    problems = check_run(facts)

    assert any(
        "node perf-node-00000 is overcommitted: cpu 4100m requested by its pods, 4000m" in p
        for p in problems
    ), problems
    assert any(
        "m/p3 was bound more than once: perf-node-00001 -> perf-node-00000" in p for p in problems
    )
    assert len(problems) == 2, problems


def test_the_check_flags_unbound_pods_reported_double_binds_and_unknown_nodes() -> None:
    nodes = _nodes(1)
    pods = [_pod("default", "a", "perf-node-00000"), _pod("default", "b", "")]
    pods.append(_pod("default", "c", "no-such-node"))
    facts = _facts(pods, nodes, scheduled_reported=4, conflicts_reported=1)

    problems = check_run(facts)

    assert "1 pod(s) not bound at the end: m/b" in problems
    assert "the scheduler reported 4 successful bindings for 3 pods" in problems
    assert any("1 binding(s) of a pod that was already bound" in p for p in problems)
    assert "pod m/c is bound to no-such-node, which is not a node" in problems


def test_the_check_flags_pods_without_a_scheduled_event() -> None:
    """schedule_one.go bindingCycle records Scheduled for every binding; a run
    whose scheduler dropped some did less API work than it should have."""
    nodes = _nodes(1)
    pods = [_pod("default", f"p{i}", "perf-node-00000") for i in range(3)]
    assert check_run(_facts(pods, nodes, scheduled_events={"m/p0", "m/p1", "m/p2"})) == []
    assert check_run(_facts(pods, nodes, scheduled_events={"m/p1"})) == [
        "2 of 3 pod(s) have no Scheduled event: m/p0, m/p2"
    ]
    # None: a scheduler that writes no events (bind-only) is not asked for them.
    assert check_run(_facts(pods, nodes, scheduled_events=None)) == []


def test_the_check_counts_pods_per_node_against_allocatable_pods() -> None:
    [node] = _nodes(1)
    node["status"]["allocatable"]["pods"] = "2"
    pods = [_pod("default", f"p{i}", "perf-node-00000") for i in range(3)]
    assert check_run(_facts(pods, [node])) == [
        "node perf-node-00000 is overcommitted: pods 3 requested by its pods, 2 allocatable"
    ]


def test_the_check_flags_two_anti_affinity_pods_on_one_host_across_namespaces() -> None:
    nodes = _nodes(3)
    pods = [
        _pod("anti-affinity", "a", "perf-node-00000", ns="i"),
        _pod("anti-affinity", "b", "perf-node-00001"),
        _pod("anti-affinity", "c", "perf-node-00000"),  # shares a host with i/a
        _pod("default", "d", "perf-node-00001"),  # not selected by the term
    ]
    problems = check_run(_facts(pods, nodes))
    assert problems
    assert all("pod anti-affinity broken" in p for p in problems)
    assert {frozenset(("i/a", "m/c"))} == {
        frozenset(w for w in p.split() if w in ("i/a", "m/c")) for p in problems
    }


def test_the_check_flags_a_zone_skew_above_max_skew() -> None:
    nodes = _nodes(3, zones=True)  # perf-node-0000{0,1,2} in moon-1, moon-2, moon-3
    balanced = [_pod("spreading", f"s{i}", f"perf-node-0000{i % 3}") for i in range(9)]
    assert check_run(_facts(balanced, nodes)) == []
    # moon-1 gets 6 more: counts 9 / 3 / 3, skew 6 > maxSkew 5.
    skewed = balanced + [_pod("spreading", f"t{i}", "perf-node-00000") for i in range(6)]
    problems = check_run(_facts(skewed, nodes))
    assert len(problems) == 1
    assert "topology.kubernetes.io/zone skew 6 > maxSkew 5" in problems[0]
    # Pods without the constraint's label do not count.
    others = balanced + [_pod("default", f"u{i}", "perf-node-00000") for i in range(6)]
    assert check_run(_facts(others, nodes)) == []


# --- the figures' arithmetic ---------------------------------------------------------------------


def test_throughput_collector_follows_upstreams_sampling() -> None:
    """util.go throughputCollector.run: no sample before the first bound pod, the first sample
    only starts the clock, an empty interval is skipped and the next rate repeated over it;
    collect() takes values[ceil(n*q/100)-1] of the sorted rates."""
    c = ThroughputCollector(began=0.0)
    assert c.tick(1.0, 0) is None
    assert c.tick(2.0, 10) is None  # starts the clock
    assert c.tick(3.0, 10) is None  # nothing new: skipped
    assert c.tick(4.0, 50) == pytest.approx(20.0)  # 40 pods over 2 s, recorded twice
    assert c.tick(5.0, 80) == pytest.approx(30.0)
    assert c.result.rates == pytest.approx([20.0, 20.0, 30.0])
    assert [t for t, _ in c.result.points] == [4.0, 5.0]
    assert [r for _, r in c.result.points] == pytest.approx([20.0, 30.0])
    s = c.result.summary()
    assert s["avg"] == pytest.approx(70 / 3)
    assert (s["p50"], s["p90"], s["p99"]) == (20.0, 30.0, 30.0)


def test_the_bound_timeline_keeps_the_first_and_the_last_pod_and_evenly_spaced_ranks() -> None:
    """What --plot draws in drain mode: [seconds, pods bound by then]."""
    assert bound_timeline([0.3, 0.1, 0.2]) == [[0.1, 1], [0.2, 2], [0.3, 3]]
    assert bound_timeline([]) == []
    line = bound_timeline([i / 1000 for i in range(1000)], points=11)
    assert [n for _, n in line] == [1, 101, 201, 301, 401, 501, 600, 700, 800, 900, 1000]
    assert line[0] == [0.0, 1] and line[-1] == [0.999, 1000]


def test_histogram_quantile_interpolates_within_buckets_like_prometheus() -> None:
    buckets = [(0.001, 0.0), (0.002, 50.0), (0.004, 100.0), (float("inf"), 100.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.002)
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.0015)
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.00396)
    # A rank in +Inf gives the highest finite bound; no observations gives None.
    assert histogram_quantile(0.99, [(0.001, 1.0), (float("inf"), 10.0)]) == 0.001
    assert histogram_quantile(0.5, [(0.001, 0.0), (float("inf"), 0.0)]) is None


def test_the_creation_table_says_which_runs_were_creation_limited() -> None:
    rows: list[dict[str, Any]] = [
        {
            "scheduler": "kube-scheduler",
            "status": "ok",
            "pods": 2000,
            "creation_seconds": 4.0,
            "measured_seconds": 9.0,
            "backlog_p50": 700,
            "backlog_max": 1200,
            "creation_limited": False,
        },
        {
            "scheduler": "berth",
            "status": "ok",
            "pods": 2000,
            "creation_seconds": 8.0,
            "measured_seconds": 8.1,
            "backlog_p50": 3,
            "backlog_max": 20,
            "caught_up_at_end": True,
            "creation_limited": True,
        },
        {
            "scheduler": "berth-inprocess",
            "status": "ok",
            "pods": 2000,
            "creation_seconds": 7.9,
            "measured_seconds": 8.0,
            "backlog_p50": 400,
            "backlog_max": 900,
            "caught_up_at_end": True,
            "creation_limited": False,
        },
        {"scheduler": "bind-only", "status": "failed: x"},
    ]
    table = format_creation(rows).splitlines()
    assert table[2] == "| kube-scheduler | 4.0 | 500 | 9.0 | 700 / 1200 | no |"
    assert table[3] == "| berth | 8.0 | 250 | 8.1 | 3 / 20 | yes |"
    assert (
        table[4] == "| berth-inprocess | 7.9 | 253 | 8.0 | 400 / 900 | caught up at the end only |"
    )
    assert len(table) == 5  # the failed run has no row
    assert format_creation([rows[3]]) == ""


# --- rounds: the order reversed every other round, ratios within a round ----------------------


def test_rounds_reverse_the_order_every_other_round() -> None:
    order = ("kube-scheduler", "berth", "bind-only")
    assert round_order(order, 1) == order
    assert round_order(order, 2) == ("bind-only", "berth", "kube-scheduler")
    assert round_order(order, 3) == order


def _run(scheduler: str, rnd: int, avg: float, cpu: float) -> dict[str, Any]:
    return {
        "workload": "SchedulingBasic",
        "scheduler": scheduler,
        "round": rnd,
        "status": "ok",
        "nodes": 10,
        "init_pods": 0,
        "pods": 100,
        "pods_per_second_avg": avg,
        "pods_per_second_p50": avg,
        "pods_per_second_p90": avg,
        "pods_per_second_p99": avg,
        "cpu_seconds_per_1000_pods": {"shim": cpu / 2, "serve": cpu / 2, "total": cpu}
        if scheduler.startswith("berth")
        else {scheduler: cpu},
        "peak_rss_mib": {scheduler: 100.0 + rnd},
        "ready_cpu_seconds": {"shim": 0.5 + rnd / 10, "serve": 0.0, "total": 0.5 + rnd / 10}
        if scheduler.startswith("berth")
        else {scheduler: 0.25},
    }


def test_each_ratio_is_taken_against_kube_scheduler_in_the_same_round() -> None:
    # Round 1: kube-scheduler first; round 2: berth first. The machine got slower in round 2.
    records = [
        _run("kube-scheduler", 1, 300.0, 2.0),
        _run("berth", 1, 330.0, 1.9),
        _run("berth", 2, 280.0, 2.1),
        _run("kube-scheduler", 2, 200.0, 2.6),
        _run("bind-only", 2, 400.0, 0.7),
    ]
    _add_ratios(records)
    assert records[1]["ratio_to_kube_scheduler"] == pytest.approx(1.1)
    assert records[2]["ratio_to_kube_scheduler"] == pytest.approx(1.4)
    # CPU per pod, the shim's and the server's together, against kube-scheduler's.
    assert records[1]["cpu_ratio_to_kube_scheduler"] == pytest.approx(0.95)
    assert records[2]["cpu_ratio_to_kube_scheduler"] == pytest.approx(2.1 / 2.6)
    assert records[4]["cpu_ratio_to_kube_scheduler"] == pytest.approx(0.7 / 2.6)
    assert "cpu_ratio_to_kube_scheduler" not in records[0]
    # bind-only ran in round 2 only: round 1 has no ceiling.
    assert records[0]["share_of_bind_only"] is None
    assert records[2]["share_of_bind_only"] == pytest.approx(0.7)

    summaries = {s["scheduler"]: s for s in summarize_rounds(records)}
    berth = summaries["berth"]
    assert berth["round"] == "median" and berth["rounds"] == 2
    assert berth["ratio_to_kube_scheduler_by_round"] == pytest.approx([1.1, 1.4])
    assert berth["ratio_to_kube_scheduler"] == pytest.approx(1.25)
    assert berth["cpu_ratio_to_kube_scheduler_by_round"] == pytest.approx([0.95, 2.1 / 2.6])
    assert berth["cpu_ratio_to_kube_scheduler"] == pytest.approx((0.95 + 2.1 / 2.6) / 2)
    assert berth["share_of_bind_only_by_round"] == [None, pytest.approx(0.7)]
    assert berth["share_of_bind_only"] == pytest.approx(0.7)
    assert berth["pods_per_second_avg"] == pytest.approx(305.0)
    assert berth["cpu_seconds_per_1000_pods"] == pytest.approx(
        {"shim": 1.0, "serve": 1.0, "total": 2.0}
    )
    assert berth["peak_rss_mib"] == {"berth": 102.0}
    assert "ratio_to_kube_scheduler" not in summaries["kube-scheduler"]
    assert summaries["bind-only"]["rounds"] == 1

    table = format_rounds(list(summaries.values())).splitlines()
    assert table[2] == (
        "| kube-scheduler | 300, 200 | 250 | - | - | -, 50% | kube-scheduler 2.3 | - | - "
        "| kube-scheduler 0.25 | kube-scheduler 102 |"
    )
    assert table[3] == (
        "| berth | 330, 280 | 305 | 1.10, 1.40 | 1.25 | -, 70% | shim 1.0 + serve 1.0 = 2.0 "
        "| 0.95, 0.81 | 0.88 | shim 0.65 + serve 0.00 = 0.65 | berth 102 |"
    )
    # Per-run rows name their round, and carry both ratios.
    assert "| SchedulingBasic | berth #2 | 280 |" in format_table(records, rounds=2)
    assert "| 1.40 | 70% | shim 1.1 + serve 1.1 = 2.1 | 0.81 |" in format_table(records, rounds=2)
    assert "| SchedulingBasic | berth | 330 |" in format_table(records[:2])


def test_one_round_has_no_summary() -> None:
    records = [_run("kube-scheduler", 1, 300.0, 2.0), _run("berth", 1, 330.0, 1.9)]
    _add_ratios(records)
    assert summarize_rounds(records) == []
    assert format_rounds([]) == ""


# --- a small run of every scheduler --------------------------------------------------------------

REQUIRED: dict[str, type | tuple[type, ...]] = {
    "workload": str,
    "scheduler": str,
    "nodes": int,
    "pods": int,
    "pods_per_second_avg": (float, type(None)),
    "pods_per_second_p50": (float, type(None)),
    "pods_per_second_p99": (float, type(None)),
}


def berth_bench(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``berth bench ARGS`` in a process of its own, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "berth", "bench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.integration
def test_scheduling_basic_runs_all_four_schedulers_and_checks_each_run(tmp_path: Path) -> None:
    out_json = tmp_path / "records.json"
    plot = tmp_path / "plot.png"
    proc = berth_bench(
        "SchedulingBasic",
        *("--nodes", "50", "--init-pods", "100", "--pods", "300"),
        *("--stall-timeout", "45", "--settle", "0.5"),
        *("--json", str(out_json), "--plot", str(plot)),
        timeout=480,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "client QPS 5000 and burst 5000 for every scheduler" in proc.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    records = json.loads(out_json.read_text())
    assert [r["scheduler"] for r in records] == list(SCHEDULERS)
    # Every run after the first met a freshly restarted kube-apiserver (same etcd, flags).
    assert [r["apiserver_restarted"] for r in records] == [False, True, True, True]
    assert proc.stdout.count("kube-apiserver restarted for the next run") == 3
    for r in records:
        for key, kind in REQUIRED.items():
            assert isinstance(r[key], kind), (r["scheduler"], key, r[key])
        assert (r["workload"], r["nodes"], r["pods"], r["init_pods"]) == (
            "SchedulingBasic",
            50,
            300,
            100,
        )
        assert r["status"] == "ok", r
        assert r["pods_per_second_overall"] > 0
        # The checks ran over every pod of the run and found nothing.
        checks = r["checks"]
        assert (checks["pods"], checks["nodes"], checks["violations"]) == (400, 50, [])
        assert checks["conflicts_reported"] == 0
        assert checks["scheduled_reported"] == 400
        # Every scheduler, bind-only included (the API work any scheduler does), wrote a
        # Scheduled event for each pod.
        assert checks["scheduled_events"] == 400, r["scheduler"]
        assert r["e2e_latency_ms_p50"] is not None
        # The measured pods came from the creator process, which reported its CPU.
        assert r["creation"] == {"processes": 1, "connections": 30, "qps": 5000.0, "burst": 5000}
        assert 0 < r["creation_seconds"] <= r["measured_seconds"]
        assert isinstance(r["creation_limited"], bool)
        assert r["caught_up_at_end"] or not r["creation_limited"]
        assert r["other_cpu_seconds_per_1000_pods"]["creator"] > 0
        assert r["backlog_max"] is None or r["backlog_max"] >= r["backlog_p50"] >= 0
        assert set(r["cpu_seconds_per_1000_pods"]) >= set(r["peak_rss_mib"]) - {"total"}
        if r["scheduler"] != "kube-scheduler":
            assert "ratio_to_kube_scheduler" in r
    by = {r["scheduler"]: r for r in records}
    assert set(by["berth"]["peak_rss_mib"]) == {"shim", "serve", "total"}
    assert set(by["berth-inprocess"]["peak_rss_mib"]) == {"shim"}
    # The schedulers export the attempt histogram; bind-only has none.
    for name in ("kube-scheduler", "berth", "berth-inprocess"):
        assert by[name]["attempt_latency_ms_p50"] is not None, name
    assert by["bind-only"]["attempt_latency_ms_p50"] is None
    # The interpreter of the Python processes is named in the header and on their records
    # (its build moves their figures); kube-scheduler's record has none.
    python = f"{platform.python_version()} at {sys.executable} ("
    assert f"Python processes on CPython {python}" in proc.stdout
    assert by["kube-scheduler"]["python"] is None
    for name in ("berth", "berth-inprocess", "bind-only"):
        assert python in by[name]["python"], name
    assert "| SchedulingBasic | berth |" in proc.stdout
    assert "Creating the measured pods (measured pods created by 1 process(es) x 30" in proc.stdout


@pytest.mark.integration
def test_drain_mode_times_a_fresh_scheduler_draining_a_backlog(tmp_path: Path) -> None:
    """--drain: the measured pods are created with no scheduler running, then a fresh
    process of each scheduler drains them; the rate is the measured pods over the window
    from its start to the last binding, and the checks still cover every pod and event."""
    out_json = tmp_path / "records.json"
    proc = berth_bench(
        "SchedulingBasic",
        *("--drain", "--schedulers", "kube-scheduler,berth,berth-noexplain,bind-only"),
        *("--variant", "noexplain=--explain-max-pods 0 -v=2"),
        *("--work-dir", str(tmp_path / "work")),
        *("--nodes", "30", "--init-pods", "60", "--pods", "240"),
        *("--stall-timeout", "45", "--settle", "0.5", "--json", str(out_json)),
        *("--plot", str(tmp_path / "drain.png")),
        timeout=480,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert (tmp_path / "drain.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    records = json.loads(out_json.read_text())
    assert [r["scheduler"] for r in records] == [
        "kube-scheduler",
        "berth",
        "berth-noexplain",
        "bind-only",
    ]
    for r in records:
        assert (r["status"], r["mode"]) == ("ok", "drain"), r
        checks = r["checks"]
        assert (checks["pods"], checks["violations"], checks["conflicts_reported"]) == (300, [], 0)
        # Both processes' bindings (initial pods, then the drained backlog) are counted.
        assert checks["scheduled_reported"] == 300, r["scheduler"]
        assert checks["scheduled_events"] == 300, r["scheduler"]
        assert r["pods_per_second_overall"] == pytest.approx(240 / r["measured_seconds"])
        assert r["creation_limited"] is False
        # What --plot draws: every measured pod bound, in order, within the window.
        line = r["bound_timeline"]
        assert line[-1][1] == 240 and len(line) <= 200
        assert [n for _, n in line] == sorted(n for _, n in line)
        assert 0 < line[0][0] <= line[-1][0] <= r["measured_seconds"] + 0.01
        # The drain window holds the scheduler's start-up: its CPU counts from its start.
        assert r["cpu_seconds_per_1000_pods"], r
        assert f"starting a fresh {r['scheduler']} to drain them" in proc.stdout
    by = {r["scheduler"]: r for r in records}
    # Berth over gRPC restarts its shim only: the plugin server that bound the initial pods
    # serves the drain (its own Deployment in deploy/base), and its CPU counts from the
    # window's start.
    for name in ("berth", "berth-noexplain"):
        assert by[name]["server_kept"] is True
        assert set(by[name]["cpu_seconds_per_1000_pods"]) == {"shim", "serve", "total"}
        assert by[name]["ready_seconds"] > 0
        # Start-up CPU apart: the shim's own, and the kept server's from the window's start.
        ready_cpu = by[name]["ready_cpu_seconds"]
        assert set(ready_cpu) == {"shim", "serve", "total"} and ready_cpu["shim"] > 0
        assert 0 <= ready_cpu["serve"] < ready_cpu["shim"]
        assert ready_cpu["shim"] / 0.24 < by[name]["cpu_seconds_per_1000_pods"]["shim"] * 1.001
    assert "stopped the shim (berth serve keeps running)" in proc.stdout
    # The variant's shim got its arguments: -v=2 logs a line per scheduled pod.
    assert by["berth-noexplain"]["shim_args"] == ["--explain-max-pods", "0", "-v=2"]
    shim_log = Path(by["berth-noexplain"]["logs"][0])
    assert shim_log.name == "shim.log" and shim_log.parent.name == "drain"
    assert "Successfully bound pod to node" in shim_log.read_text()
    assert "Successfully bound pod to node" not in Path(by["berth"]["logs"][0]).read_text()
    # Ratios compare the drain rates of the same round.
    assert by["berth"]["ratio_to_kube_scheduler"] == pytest.approx(
        by["berth"]["pods_per_second_overall"] / by["kube-scheduler"]["pods_per_second_overall"]
    )
    assert "pods/s drained, start-up incl." in proc.stdout
    assert "Creating the measured pods" not in proc.stdout


@pytest.mark.integration
def test_apiserver_pprof_writes_a_cpu_profile_of_each_measured_window(tmp_path: Path) -> None:
    """--apiserver-pprof turns on kube-apiserver's profiling (berth.dev.localcluster turns it
    off) and saves one pprof CPU profile per run, named after the run."""
    out_json = tmp_path / "records.json"
    profiles = tmp_path / "pprof"
    proc = berth_bench(
        "SchedulingBasic",
        *("--schedulers", "bind-only", "--nodes", "20", "--init-pods", "0", "--pods", "200"),
        *("--settle", "0.5", "--json", str(out_json)),
        *("--apiserver-pprof", str(profiles), "--apiserver-pprof-seconds", "1"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (record,) = json.loads(out_json.read_text())
    path = profiles / "SchedulingBasic-bind-only-round1.pprof"
    assert record["apiserver_pprof"] == str(path)
    assert f"kube-apiserver CPU profile (1s) written to {path}" in proc.stdout
    # pprof's format: a gzipped profile.proto whose string table names the sample type.
    profile = gzip.decompress(path.read_bytes())
    assert b"cpu" in profile and b"nanoseconds" in profile and b"samples" in profile


@pytest.mark.integration
def test_a_runs_clean_up_deletes_its_pods_its_events_and_its_namespaces(kube: KubeApi) -> None:
    """What a run leaves behind slows the next one: its Scheduled events (an hour's TTL)
    go with its pods and namespaces, in both event APIs' views."""
    namespaces = [f"bench-clean-{i}-{uuid.uuid4().hex[:6]}" for i in range(2)]
    for ns in namespaces:
        objects.create_namespace(kube, ns)
        objects.create_pods(
            kube,
            [
                objects.pod(f"p{i}", namespace=ns, scheduler_name="nobody", labels={"run": "r1"})
                for i in range(3)
            ],
        )
        for i in range(3):
            kube.create(
                f"/apis/events.k8s.io/v1/namespaces/{ns}/events",
                {
                    "apiVersion": "events.k8s.io/v1",
                    "kind": "Event",
                    "metadata": {"name": f"p{i}.scheduled", "namespace": ns},
                    "eventTime": "2026-11-27T08:00:00.000000Z",
                    "reportingController": "perf-berth",
                    "reportingInstance": "perf-berth-x",
                    "action": "Binding",
                    "reason": "Scheduled",
                    "type": "Normal",
                    "regarding": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "namespace": ns,
                        "name": f"p{i}",
                    },
                    "note": "Successfully assigned",
                },
            )
        assert len(kube.get(f"/api/v1/namespaces/{ns}/events")["items"]) == 3

    _delete_pods(kube, namespaces, "run=r1")

    for ns in namespaces:
        assert kube.get(f"/api/v1/namespaces/{ns}/events")["items"] == []
        assert kube.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")["items"] == []
        assert kube.get("/api/v1/pods", labelSelector="run=r1")["items"] == []
        with pytest.raises(ApiError) as gone:
            kube.get(f"/api/v1/namespaces/{ns}")
        assert gone.value.status == 404


def test_workloads_berth_cannot_run_are_reported_not_measured() -> None:
    """TopologySpreading and PodAntiAffinity need plugins Berth may not have yet: those rows say
    so instead of timing a scheduler that ignores the constraint."""
    from berth.dev.bench_perf import WORKLOADS, berth_missing_plugins
    from berth.plugins.registry import load_registry

    registry = load_registry(strict=False)
    assert berth_missing_plugins(WORKLOADS["SchedulingBasic"]) == []
    for name, plugin in (
        ("TopologySpreading", "PodTopologySpread"),
        ("PodAntiAffinity", "InterPodAffinity"),
    ):
        missing = berth_missing_plugins(WORKLOADS[name])
        assert missing == ([] if plugin in registry else [plugin])


@pytest.mark.parametrize(
    ("flags", "restart"), [((), True), (("--no-restart-apiserver",), False)], ids=["default", "off"]
)
def test_the_api_server_is_restarted_between_runs_unless_asked_not_to(
    flags: tuple[str, ...], restart: bool
) -> None:
    from berth.cli import build_parser
    from berth.dev.bench_perf import options_from

    args = build_parser().parse_args(["bench", "SchedulingBasic", *flags])
    assert options_from(args).restart_apiserver is restart


def test_apiserver_pprof_is_off_unless_asked_for() -> None:
    from berth.cli import build_parser
    from berth.dev.bench_perf import options_from

    parse = build_parser().parse_args
    assert options_from(parse(["bench", "SchedulingBasic"])).apiserver_pprof is None
    opts = options_from(
        parse(
            [
                "bench",
                "TopologySpreading",
                "--apiserver-pprof",
                "out",
                "--apiserver-pprof-seconds",
                "5",
            ]
        )
    )
    assert (opts.apiserver_pprof, opts.apiserver_pprof_seconds) == (Path("out"), 5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("PodAntiAffinity", "--nodes", "10", "--init-pods", "5", "--pods", "6"),
            "--init-pods + --pods (11) must not exceed --nodes (10)",
        ),
        (
            ("SchedulingBasic", "--schedulers", "kube-scheduler,volcano"),
            "--schedulers: unknown volcano",
        ),
        (
            ("SchedulingBasic", "--nodes", "1", "--init-pods", "0", "--pods", "41"),
            "41 pods do not fit on 1 nodes",
        ),
        (("SchedulingBasic", "--qps", "0"), "--qps must be > 0, got 0"),
        (("SchedulingBasic", "--create-burst", "0"), "--create-burst must be at least 1, got 0"),
        (("SchedulingBasic", "--rounds", "0"), "--rounds must be at least 1, got 0"),
        (
            ("SchedulingBasic", "--apiserver-pprof-seconds", "0"),
            "--apiserver-pprof-seconds must be at least 1, got 0",
        ),
        (
            ("SchedulingBasic", "--create-connections", "0"),
            "--create-connections must be at least 1, got 0",
        ),
        (
            ("SchedulingBasic", "--berth-config", "/nonexistent/berth.yaml"),
            "--berth-config /nonexistent/berth.yaml: no such file",
        ),
        (("SchedulingBasic", "--variant", "noexplain"), "expected NAME=ARGS"),
        (("SchedulingBasic", "--variant", "No_Explain=-v 2"), "NAME must be 1-20 lowercase"),
        (
            ("SchedulingBasic", "--variant", "x=--kubeconfig /tmp/k"),
            "--variant x: --kubeconfig is set by the harness",
        ),
        (
            ("SchedulingBasic", "--variant", "x=--config /nonexistent/c.yaml"),
            "--variant x: --config /nonexistent/c.yaml: no such file",
        ),
        (
            ("SchedulingBasic", "--variant", "x=-v 2", "--variant", "x=-v 4"),
            "--variant names one twice: berth-x",
        ),
        (
            ("SchedulingBasic", "--variant", "x=-v 2", "--schedulers", "berth,berth-y"),
            "--schedulers: unknown berth-y; choose from kube-scheduler, berth, berth-x, ",
        ),
        (("SchedulingBasic", "--drain-cold-server"), "--drain-cold-server goes with --drain"),
    ],
    ids=[
        "anti-affinity-pods",
        "unknown-scheduler",
        "pods-do-not-fit",
        "qps",
        "create-burst",
        "rounds",
        "apiserver-pprof-seconds",
        "create-connections",
        "berth-config",
        "variant-without-args",
        "variant-bad-name",
        "variant-reserved-flag",
        "variant-missing-config",
        "variant-twice",
        "variant-unknown-scheduler",
        "cold-server-without-drain",
    ],
)
def test_bad_flags_are_refused_naming_the_flag(args: tuple[str, ...], message: str) -> None:
    out = berth_bench(*args, timeout=60)
    assert out.returncode == 2
    assert message in out.stderr
