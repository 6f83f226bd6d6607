"""``berth bench cycle``'s workload options: the pods it draws and the
cluster it builds (figures are not asserted: benchmarks print them)."""

from __future__ import annotations

import contextlib
import io
from collections import Counter

import pytest

from berth.cli import main
from berth.dev.bench import ANTI, PLAIN, SPREAD, Workload, bench_cluster


def test_the_mix_follows_the_fractions_and_is_the_same_every_run() -> None:
    wl = Workload(spread_fraction=0.2, anti_affinity_fraction=0.1)
    draws = [next(p) for p in [wl.pods()] for _ in range(5000)]
    kinds = Counter(kind for kind, _ in draws)
    assert abs(kinds[SPREAD] / 5000 - 0.2) < 0.03
    assert abs(kinds[ANTI] / 5000 - 0.1) < 0.03
    assert kinds[PLAIN] == 5000 - kinds[SPREAD] - kinds[ANTI]
    again = wl.pods()
    assert [next(again)[1] for _ in range(50)] == [pod for _, pod in draws[:50]]
    spread = next(pod for kind, pod in draws if kind == SPREAD)
    (c,) = spread.topology_spread_constraints
    assert (c.max_skew, c.topology_key, c.when_unsatisfiable) == (
        5,
        "topology.kubernetes.io/zone",
        "DoNotSchedule",
    )
    anti = next(pod for kind, pod in draws if kind == ANTI)
    (t,) = anti.affinity.pod_anti_affinity.required
    assert t.topology_key == "kubernetes.io/hostname"
    assert dict(t.label_selector.match_labels) == {"anti-group": anti.labels["anti-group"]}


def test_existing_pods_keep_anti_affinity_groups_one_per_node() -> None:
    # 40 nodes, groups of 30 anti-affinity pods, every third pod one of them:
    # round robin alone would put two of a group on one node.
    wl = Workload(existing_pods=1200, anti_affinity_fraction=0.5, anti_affinity_group=30)
    log, rest = bench_cluster(40, wl)
    pods = list(log.pods.values())
    assert len(pods) == 1200 and all(p.node_name in log.nodes for p in pods)
    per_group_node = Counter(
        (p.labels["anti-group"], p.node_name) for p in pods if "anti-group" in p.labels
    )
    assert per_group_node and max(per_group_node.values()) == 1
    # Plain pods are spread evenly; the measured pods come after the existing ones.
    assert next(rest)[1].name == "pod-1200"


def test_a_group_larger_than_the_cluster_is_refused() -> None:
    with pytest.raises(ValueError, match="--anti-affinity-group: group g0 has more pods"):
        bench_cluster(3, Workload(existing_pods=10, anti_affinity_fraction=1.0))


def test_node_labels_go_to_their_share_of_the_nodes_one_value_per_key() -> None:
    wl = Workload(node_labels=(("pool", "general", 0.3), ("pool", "gpu", 0.1), ("x", "y", 1.0)))
    wl.validate()
    log, _ = bench_cluster(1000, wl)
    values = Counter(n.labels.get("pool") for n in log.nodes.values())
    assert set(values) == {"general", "gpu", None}
    assert abs(values["general"] - 300) <= 1 and abs(values["gpu"] - 100) <= 1
    assert all(n.labels["x"] == "y" for n in log.nodes.values())
    # Spread over the zones, not a run of consecutive nodes.
    zones = Counter(
        n.labels["topology.kubernetes.io/zone"]
        for n in log.nodes.values()
        if n.labels.get("pool") == "gpu"
    )
    assert len(zones) == 3 and min(zones.values()) >= 30


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--spread-fraction", "1.5"], "--spread-fraction: must lie in [0, 1], got 1.5"),
        (
            ["--spread-fraction", "0.6", "--anti-affinity-fraction", "0.6"],
            "--spread-fraction + --anti-affinity-fraction: must be at most 1",
        ),
        (["--existing-pods", "-1"], "--existing-pods: must be >= 0, got -1"),
        (
            ["--node-label", "pool=a:0.7", "--node-label", "pool=b:0.4"],
            "--node-label pool: the fractions of its values must add up to at most 1, got 1.1",
        ),
        (["--breakdown", "--transport", "stream"], "--breakdown: times plugins in-process only"),
    ],
)
def test_bad_workload_options_are_refused(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "cycle", "--nodes", "10", *flags]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "message"),
    [("pool=a", "'pool=a': want KEY=VALUE:F"), ("pool=a:lots", "F must be a number, got 'lots'")],
)
def test_a_malformed_node_label_is_refused(
    flag: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "cycle", "--nodes", "10", "--node-label", flag])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_a_small_mixed_run_reports_every_kind_and_places_every_pod() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(
            [
                "bench",
                "cycle",
                "--transport",
                "inprocess",
                "--nodes",
                "60",
                "--cycles",
                "60",
                "--warmup",
                "5",
                "--existing-pods",
                "300",
                "--spread-fraction",
                "0.3",
                "--anti-affinity-fraction",
                "0.3",
                "--anti-affinity-group",
                "20",
                "--breakdown",
            ]
        )
    assert code == 0
    rows = [line.split("|") for line in out.getvalue().splitlines()]
    by_kind = {r[4].strip(): r for r in rows if len(r) > 5 and r[1].strip().startswith("in-")}
    assert set(by_kind) >= {PLAIN, SPREAD, ANTI}
    # cycles == placed for every kind, and the counts add up to the run.
    assert all(r[5].strip() == r[11].strip() for r in by_kind.values())
    assert sum(int(by_kind[k][5]) for k in (PLAIN, SPREAD, ANTI)) == 60
    assert "| PreFilter | InterPodAffinity |" in out.getvalue()
