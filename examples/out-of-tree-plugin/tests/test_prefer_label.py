"""PreferLabel on its own (args, Filter, Score) and in whole scheduling
cycles of the profile in scheduler-config.yaml, with Berth's test kit
(berth.testing). Runs with Berth's venv, the package installed or not:
``python -m pytest examples/out-of-tree-plugin``."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest
from berth_example_plugin import PreferLabel, PreferLabelArgs

from berth.api.v1 import cluster_pb2 as pb
from berth.framework import Code, CycleState, NodeInfo
from berth.testing import ConfigError, make_node, make_pod, schedule, snapshot_of

CONFIG = Path(__file__).resolve().parents[1] / "scheduler-config.yaml"
KEY = "example.com/pool"


def plugin(key: str = KEY, value: str = "general") -> PreferLabel:
    return PreferLabel(PreferLabelArgs(label_key=key, label_value=value))


# -- args ---------------------------------------------------------------------


def test_args_decode_from_camel_case_and_validate() -> None:
    args = msgspec.convert({"labelKey": KEY, "labelValue": "general"}, PreferLabelArgs)
    assert (args.label_key, args.label_value) == (KEY, "general")
    args.validate()


@pytest.mark.parametrize(
    ("key", "value", "want"),
    [
        ("", "x", "labelKey: required value"),
        ("-pool", "x", "labelKey: Invalid value: '-pool': name part must consist of"),
        ("Example.com/pool", "x", "labelKey: Invalid value: 'Example.com/pool': prefix part"),
        ("/pool", "x", "labelKey: Invalid value: '/pool': prefix part must be non-empty"),
        ("example.com/", "x", "labelKey: Invalid value: 'example.com/': name part must be non"),
        ("a" * 64, "x", "labelKey: Invalid value: '" + "a" * 64 + "': name part must be no more"),
        (KEY, "not ok", "labelValue: Invalid value: 'not ok': must consist of"),
        (KEY, "v" * 64, "labelValue: Invalid value: '" + "v" * 64 + "': must be no more than 63"),
    ],
)
def test_args_refuse_invalid_label_keys_and_values(key: str, value: str, want: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(want)):
        PreferLabelArgs(label_key=key, label_value=value).validate()


def test_an_empty_label_value_is_valid_as_in_kubernetes() -> None:
    PreferLabelArgs(label_key=KEY, label_value="").validate()


def test_the_plugin_needs_its_args() -> None:
    with pytest.raises(TypeError, match="PreferLabel needs PreferLabelArgs"):
        PreferLabel()


# -- Filter and Score ---------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "want"),
    [
        ({KEY: "general"}, Code.SUCCESS),
        ({}, Code.SUCCESS),
        ({"other": "gpu"}, Code.SUCCESS),
        ({KEY: "gpu"}, Code.UNSCHEDULABLE_AND_UNRESOLVABLE),
        ({KEY: ""}, Code.UNSCHEDULABLE_AND_UNRESOLVABLE),
    ],
)
def test_filter_keeps_pods_off_nodes_of_another_value(labels: dict[str, str], want: Code) -> None:
    node = make_node("n")
    for k, v in labels.items():
        node.label(k, v)
    st = plugin().filter(CycleState(), make_pod().info(), NodeInfo(node.obj()))
    assert st.code is want
    if want is not Code.SUCCESS:
        assert st.reasons == (
            "node(s) had label example.com/pool with a value other than 'general'",
        )


def test_score_prefers_the_labelled_nodes() -> None:
    nodes = [
        make_node("match").label(KEY, "general").obj(),
        make_node("other").label(KEY, "gpu").obj(),
        make_node("none").obj(),
    ]
    pl = plugin()
    pod = make_pod().info()
    assert [pl.score(CycleState(), pod, NodeInfo(n)) for n in nodes] == [100, 0, 0]


# -- the batch forms give the per-node forms' answers --------------------------

LABELS = [{KEY: "general"}, {KEY: "gpu"}, {}, {KEY: ""}, {"other": "general"}, {KEY: "General"}]


def labelled(name: str, labels: dict[str, str]) -> pb.Node:
    node = make_node(name)
    for k, v in labels.items():
        node.label(k, v)
    return node.obj()


def both_forms(pl: PreferLabel, nodes: list[pb.Node]) -> None:
    """filter_nodes and score_nodes over every node, and over a reordered
    subset, agree with filter and score node by node."""
    snap = snapshot_of(nodes)
    state, pod = CycleState(), make_pod().info()
    names = [n.name for n in nodes]
    for batch in (snap.batch(names), snap.batch(names[::-2])):
        verdicts = pl.filter_nodes(state, pod, batch)
        scores = pl.score_nodes(state, pod, batch)
        assert len(verdicts.status_index) == len(scores) == len(batch)
        for k, ni in enumerate(batch):
            assert verdicts.status_of(k) == pl.filter(state, pod, ni), ni.name
            assert int(scores[k]) == pl.score(state, pod, ni), ni.name


@pytest.mark.parametrize("value", ["general", ""])
def test_the_batch_forms_agree_with_the_per_node_forms(value: str) -> None:
    both_forms(plugin(value=value), [labelled(f"n{i}", lb) for i, lb in enumerate(LABELS)])


def test_the_batch_forms_follow_nodes_relabelled_added_and_removed() -> None:
    pl = plugin()
    nodes = [labelled(f"n{i}", lb) for i, lb in enumerate(LABELS)]
    snap = snapshot_of(nodes)
    state, pod = CycleState(), make_pod().info()
    assert pl.score_nodes(state, pod, snap.all_nodes()).tolist() == [100, 0, 0, 0, 0, 0]
    # n0 moves to the gpu pool, n2 joins the general one, n1 goes, n9 comes.
    snap.apply(
        pb.ClusterDelta(
            upsert_nodes=[
                labelled("n0", {KEY: "gpu"}),
                labelled("n2", {KEY: "general"}),
                labelled("n9", {KEY: "general"}),
            ],
            delete_nodes=["n1"],
        )
    )
    batch = snap.all_nodes()
    scores = dict(zip(batch.names, pl.score_nodes(state, pod, batch).tolist(), strict=True))
    assert scores == {"n0": 0, "n2": 100, "n3": 0, "n4": 0, "n5": 0, "n9": 100}
    passed = dict(
        zip(batch.names, pl.filter_nodes(state, pod, batch).passed().tolist(), strict=True)
    )
    assert passed == {"n0": False, "n2": True, "n3": False, "n4": True, "n5": False, "n9": True}
    for ni in batch:
        assert pl.filter(state, pod, ni).is_success is passed[ni.name]
        assert pl.score(state, pod, ni) == scores[ni.name]


# -- the shipped configuration ------------------------------------------------
# ``plugins=[PreferLabel]``: what Berth finds through the entry point once
# the package is installed; explicit here, so the tests need no installation.

CLUSTER = [
    make_node("big-1").capacity(cpu="16", memory="64Gi"),
    make_node("general-1").capacity(cpu="4", memory="16Gi").label(KEY, "general"),
    make_node("gpu-1").capacity(cpu="32", memory="128Gi").label(KEY, "gpu"),
]


def test_a_cycle_with_the_shipped_profile_places_on_the_labelled_node() -> None:
    """The cluster of cluster.yaml: the default plugins alone would pick
    gpu-1 (most free capacity); PreferLabel rejects it and prefers
    general-1 over big-1."""
    (alone,) = schedule(None, CLUSTER, [make_pod("report").req(cpu="500m", memory="1Gi")])
    assert alone.node == "gpu-1"
    (result,) = schedule(
        CONFIG, CLUSTER, [make_pod("report").req(cpu="500m", memory="1Gi")], plugins=[PreferLabel]
    )
    assert result.status.is_success, result.message
    assert result.node == "general-1"
    assert result.rejected["gpu-1"].code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert result.rejected_by("gpu-1") == "PreferLabel"
    # Normalised 100 x weight 5 for the labelled node, 0 for the other.
    assert {node: s["PreferLabel"] for node, s in result.scores.items()} == {
        "general-1": 500,
        "big-1": 0,
    }


def test_pods_fill_the_preferred_node_before_the_others() -> None:
    pods = [make_pod(f"p{i}").req(cpu="2") for i in range(3)]
    results = schedule(CONFIG, CLUSTER, pods, plugins=[PreferLabel])
    # general-1 has 4 CPUs: two pods fit there, the third goes to big-1.
    assert [r.node for r in results] == ["general-1", "general-1", "big-1"]


def test_a_profile_without_args_for_it_is_refused() -> None:
    doc = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"plugins": {"multiPoint": {"enabled": [{"name": "PreferLabel"}]}}}],
    }
    with pytest.raises(ConfigError, match=r"no default for args\.labelKey: required value"):
        schedule(doc, CLUSTER, [make_pod()], plugins=[PreferLabel])


def test_invalid_args_are_refused_with_their_field() -> None:
    doc = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "plugins": {"multiPoint": {"enabled": [{"name": "PreferLabel"}]}},
                "pluginConfig": [
                    {"name": "PreferLabel", "args": {"labelKey": "bad key", "labelValue": "x"}}
                ],
            }
        ],
    }
    with pytest.raises(ConfigError) as err:
        schedule(doc, CLUSTER, [make_pod()], plugins=[PreferLabel])
    assert err.value.field == "profiles[0].pluginConfig[0].args.labelKey"
    assert "Invalid value: 'bad key'" in err.value.reason


# -- events and hint ---------------------------------------------------------------


def test_it_registers_node_adds_and_label_changes_with_a_hint() -> None:
    from berth.framework import ActionType, ClusterEvent, EventResource, QueueingHint

    pl = plugin()
    (reg,) = pl.events_to_register()
    assert reg.event == ClusterEvent(
        EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL
    )
    assert reg.hint is not None
    pod = make_pod("p").info()
    gpu = NodeInfo(make_node("n").label(KEY, "gpu").obj())
    general = NodeInfo(make_node("n").label(KEY, "general").obj())
    plain = NodeInfo(make_node("n").obj())
    assert reg.hint(pod, gpu, general) == QueueingHint.QUEUE
    assert reg.hint(pod, gpu, plain) == QueueingHint.QUEUE
    assert reg.hint(pod, None, gpu) == QueueingHint.QUEUE_SKIP
