"""SameLabelSpread: the seed's spreadPlugin.Score
(score-plugin-spread-and-gpu-card.txt): pods on the node matching
SelectorFromSet(pod.Labels), score max(100 - 10 * count, 0)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.config import ConfigError, default_config, load_config, parse_config
from berth.framework.cycle_state import CycleState
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.testing import batch_of, fresh_state, make_node, make_pod, snapshot_of
from berth.plugins.registry import REGISTRY
from berth.plugins.samelabelspread import (
    SameLabelSpread,
    SameLabelSpreadArgs,
    matches_all,
    spread_score,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "examples" / "samelabelspread"

Labels = dict[str, str]


@pytest.mark.parametrize(
    ("selector", "labels", "want"),
    [
        pytest.param({}, {}, True, id="empty set is Everything(): matches no labels"),
        pytest.param({}, {"app": "web"}, True, id="empty set is Everything(): matches any"),
        pytest.param({"app": "web"}, {"app": "web"}, True, id="same labels"),
        pytest.param({"app": "web"}, {"app": "web", "tier": "fe"}, True, id="extra labels ok"),
        pytest.param({"app": "web"}, {"app": "db"}, False, id="other value"),
        pytest.param({"app": "web"}, {}, False, id="key missing"),
        pytest.param({"app": "web", "tier": "fe"}, {"app": "web"}, False, id="all must match"),
        pytest.param({"app": ""}, {"app": ""}, True, id="empty value matches present empty"),
        pytest.param({"app": ""}, {}, False, id="empty value needs the key present"),
        pytest.param({"app": "Web"}, {"app": "web"}, False, id="values are case-sensitive"),
    ],
)
def test_matches_all_is_selector_from_set(selector: Labels, labels: Labels, want: bool) -> None:
    existing = make_pod().labels(**labels).obj()
    assert matches_all(tuple(selector.items()), existing.labels) is want
    # The check never adds keys to the pod's labels.
    assert dict(existing.labels) == labels


@pytest.mark.parametrize(
    ("count", "want"),
    [(0, 100), (1, 90), (3, 70), (9, 10), (10, 0), (11, 0), (50, 0)],
)
def test_spread_score(count: int, want: int) -> None:
    assert spread_score(count) == want


def _pod_on(node: str, labels: Labels, namespace: str = "default") -> pb.Pod:
    return make_pod(namespace=namespace).node(node).labels(**labels).obj()


# (name, incoming pod's labels, {node: [labels of each pod on it]}, expected scores)
CASES: list[tuple[str, Labels, dict[str, list[Labels]], list[int]]] = [
    ("empty nodes score 100", {"app": "web"}, {"a": [], "b": []}, [100, 100]),
    (
        "each matching pod costs 10",
        {"app": "web"},
        {"a": [{"app": "web"}], "b": [{"app": "web"}] * 3, "c": [{"app": "db"}] * 5},
        [90, 70, 100],
    ),
    (
        "every label of the pod must match",
        {"app": "web", "tier": "fe"},
        {"a": [{"app": "web"}, {"app": "web", "tier": "fe", "x": "1"}], "b": [{"tier": "fe"}]},
        [90, 100],
    ),
    (
        "floored at 0 from 10 pods on",
        {"app": "web"},
        {"a": [{"app": "web"}] * 10, "b": [{"app": "web"}] * 14, "c": [{"app": "web"}] * 9},
        [0, 0, 10],
    ),
    (
        "a pod without labels counts every pod (Everything())",
        {},
        {"a": [{}, {"app": "web"}], "b": [], "c": [{"x": "y"}] * 4},
        [80, 100, 60],
    ),
    (
        "an empty label value must be present",
        {"canary": ""},
        {"a": [{"canary": ""}, {"canary": "yes"}, {}], "b": []},
        [90, 100],
    ),
]


@pytest.mark.parametrize(
    ("labels", "layout", "want"),
    [pytest.param(labels, layout, want, id=name) for name, labels, layout, want in CASES],
)
def test_score(labels: Labels, layout: dict[str, list[Labels]], want: list[int]) -> None:
    nodes = [make_node(n).capacity(cpu="8").obj() for n in layout]
    pods = [_pod_on(n, lbls) for n, pod_labels in layout.items() for lbls in pod_labels]
    snap = snapshot_of(nodes, pods)
    batch = batch_of(snap, list(layout))
    plugin = SameLabelSpread()
    pod = make_pod("incoming").labels(**labels).info()
    assert [plugin.score(fresh_state(), pod, ni) for ni in batch] == want
    assert plugin.score_nodes(fresh_state(), pod, batch).tolist() == want
    assert not SameLabelSpread.has_normalize()


def test_pods_of_other_namespaces_count_as_in_the_seed() -> None:
    snap = snapshot_of(
        [make_node("a").obj()],
        [_pod_on("a", {"app": "web"}, "other"), _pod_on("a", {"app": "web"}, "default")],
    )
    pod = make_pod("incoming", "default").labels(app="web").info()
    assert SameLabelSpread().score(fresh_state(), pod, snap.nodes["a"]) == 80


def test_batch_agrees_with_per_node_on_random_clusters() -> None:
    rng = random.Random(3)
    values = ["web", "db", ""]
    for _ in range(40):
        layout = {f"n{i}": rng.randint(0, 14) for i in range(rng.randint(1, 8))}
        pods = []
        for node, count in layout.items():
            for _ in range(count):
                labels = {k: rng.choice(values) for k in ("app", "tier") if rng.random() < 0.6}
                pods.append(_pod_on(node, labels))
        snap = snapshot_of([make_node(n).obj() for n in layout], pods)
        batch = batch_of(snap, rng.sample(list(layout), rng.randint(1, len(layout))))
        incoming = {k: rng.choice(values) for k in ("app", "tier") if rng.random() < 0.5}
        pod = make_pod().labels(**incoming).info()
        plugin = SameLabelSpread()
        assert plugin.score_nodes(fresh_state(), pod, batch).tolist() == [
            plugin.score(fresh_state(), pod, ni) for ni in batch
        ]


def test_a_deleted_pod_no_longer_counts() -> None:
    gone = _pod_on("a", {"app": "web"})
    snap = snapshot_of([make_node("a").obj()], [gone, _pod_on("a", {"app": "web"})])
    pod = make_pod().labels(app="web").info()
    assert SameLabelSpread().score(fresh_state(), pod, snap.nodes["a"]) == 80
    snap.apply(pb.ClusterDelta(delete_pods=[gone.uid]))
    assert SameLabelSpread().score_nodes(fresh_state(), pod, batch_of(snap)).tolist() == [90]


# -- args and configuration ---------------------------------------------------


def _doc(args: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "custom-scheduler",
                "plugins": {"score": {"enabled": [{"name": "SameLabelSpread", "weight": 5}]}},
                "pluginConfig": [{"name": "SameLabelSpread", "args": args}],
            }
        ],
    }


def test_empty_args_are_accepted() -> None:
    profile = parse_config(_doc({}), "<test>", REGISTRY).profiles[0]
    assert profile.plugin_args["SameLabelSpread"] == SameLabelSpreadArgs()


@pytest.mark.parametrize(
    ("args", "field", "reason"),
    [
        pytest.param(
            {"scorePerPod": 5},
            "profiles[0].pluginConfig[0].args.scorePerPod",
            'unknown field "scorePerPod"',
            id="unknown field",
        ),
        pytest.param(
            "x", "profiles[0].pluginConfig[0].args", "must be a mapping, got a string", id="string"
        ),
    ],
)
def test_bad_args_are_config_errors(args: Any, field: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(_doc(args), "<test>", REGISTRY)
    assert (info.value.field, info.value.reason) == (field, reason)


def test_example_config_loads_with_weight_5() -> None:
    path = EXAMPLE / "scheduler-config.yaml"
    doc = yaml.safe_load(path.read_text())
    assert doc["profiles"][0]["schedulerName"] == "custom-scheduler"
    profile = load_config(path, REGISTRY).profiles[0]
    score = {r.name: r.weight for r in profile.enabled("score")}
    assert score["SameLabelSpread"] == 5
    assert "NodeResourcesFit" in score


def test_not_in_the_default_profile() -> None:
    profile = default_config(REGISTRY).profiles[0]
    names = {r.name for refs in profile.plugins.values() for r in refs}
    assert "SameLabelSpread" not in names


# -- a whole cycle -------------------------------------------------------------


def test_cycle_lands_on_the_node_with_fewer_same_label_pods() -> None:
    fw = Framework(load_config(EXAMPLE / "scheduler-config.yaml", REGISTRY).profiles[0], REGISTRY)
    nodes = [make_node(n).capacity(cpu="64", memory="256Gi").obj() for n in ("a", "b")]
    pods = [
        # a: one web pod; b: no web pod but three others (so NodeResourcesFit prefers a).
        make_pod("web-0").node("a").labels(app="web").req(cpu="100m").obj(),
        *(make_pod(f"db-{i}").node("b").labels(app="db").req(cpu="100m").obj() for i in range(3)),
    ]
    incoming = make_pod("web-1").labels(app="web").req(cpu="100m").info()
    result = schedule_pod(
        fw, snapshot_of(nodes, pods), CycleState(), incoming, rng=random.Random(0)
    )
    assert result.status.is_success, result.message
    assert result.node == "b"
