"""PreferLabel on its own (args, Filter, Score) and in a whole scheduling
cycle of the profile in scheduler-config.yaml. Runs with Berth's venv, the
package installed or not: ``python -m pytest examples/out-of-tree-plugin``."""

from __future__ import annotations

import random
import re
from pathlib import Path

import msgspec
import pytest
from berth_example_plugin import PreferLabel, PreferLabelArgs

from berth.framework.config import ConfigError, load_config, parse_config
from berth.framework.cycle_state import CycleState
from berth.framework.model import NodeInfo
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.status import Code
from berth.framework.testing import make_node, make_pod, snapshot_of
from berth.plugins.registry import REGISTRY

HERE = Path(__file__).resolve().parents[1]
# What Berth builds from the entry point once the package is installed;
# explicit here, so the tests need no installation.
WITH_PLUGIN = {**REGISTRY, PreferLabel.name: PreferLabel}
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


# -- the shipped configuration ------------------------------------------------


def test_scheduler_config_loads_with_the_plugin() -> None:
    config = load_config(HERE / "scheduler-config.yaml", WITH_PLUGIN)
    (profile,) = config.profiles
    assert profile.scheduler_name == "berth-example"
    assert "PreferLabel" in [r.name for r in profile.enabled("filter")]
    assert {r.name: r.weight for r in profile.enabled("score")}["PreferLabel"] == 5
    assert profile.plugin_args["PreferLabel"] == PreferLabelArgs(KEY, "general")


def test_a_profile_without_args_for_it_is_refused() -> None:
    doc = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"plugins": {"multiPoint": {"enabled": [{"name": "PreferLabel"}]}}}],
    }
    with pytest.raises(ConfigError, match=r"no default for args\.labelKey: required value"):
        parse_config(doc, "<test>", WITH_PLUGIN)


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
        parse_config(doc, "<test>", WITH_PLUGIN)
    assert err.value.field == "profiles[0].pluginConfig[0].args.labelKey"
    assert "Invalid value: 'bad key'" in err.value.reason


def test_a_cycle_with_the_shipped_profile_places_on_the_labelled_node() -> None:
    """The cluster of cluster.yaml: the default plugins alone would pick
    gpu-1 (most free capacity); PreferLabel rejects it and prefers
    general-1 over big-1."""
    config = load_config(HERE / "scheduler-config.yaml", WITH_PLUGIN)
    fw = Framework(config.profiles[0], WITH_PLUGIN)
    snap = snapshot_of(
        [
            make_node("big-1").capacity(cpu="16", memory="64Gi").obj(),
            make_node("general-1").capacity(cpu="4", memory="16Gi").label(KEY, "general").obj(),
            make_node("gpu-1").capacity(cpu="32", memory="128Gi").label(KEY, "gpu").obj(),
        ]
    )
    pod = make_pod("report").req(cpu="500m", memory="1Gi").info()
    result = schedule_pod(fw, snap, CycleState(), pod, rng=random.Random(1), explain=True)
    assert result.status.is_success, result.message
    assert result.node == "general-1"
    assert result.rejected["gpu-1"].code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
