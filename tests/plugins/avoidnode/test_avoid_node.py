"""AvoidNodePlugin: the seed's Filter (scheduler-framework-plugins.txt), its
args, its configuration and a whole cycle with upstream's default plugins."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.framework.config import ConfigError, default_config, load_config, parse_config
from berth.framework.cycle_state import CycleState
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.status import Code, Status
from berth.framework.testing import batch_of, fresh_state, make_node, make_pod, snapshot_of
from berth.plugins.avoidnode import AvoidNode, AvoidNodePluginArgs, reason_for
from berth.plugins.registry import REGISTRY

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "examples" / "avoidnode"


@pytest.mark.parametrize(
    ("labels", "want"),
    [
        pytest.param({}, Status(), id="no labels"),
        pytest.param({"avoid": "true"}, Status.unschedulable(reason_for("n")), id="avoid=true"),
        pytest.param({"avoid": "false"}, Status(), id="avoid=false"),
        pytest.param({"avoid": ""}, Status(), id="avoid with an empty value"),
        pytest.param({"avoid": "True"}, Status(), id="value is case-sensitive, as Go's =="),
        pytest.param({"avoid": "yes"}, Status(), id="other values do not count"),
        pytest.param({"example.com/avoid": "true"}, Status(), id="prefixed key is another key"),
        pytest.param(
            {"avoid": "true", "zone": "a"},
            Status.unschedulable(reason_for("n")),
            id="other labels do not matter",
        ),
    ],
)
def test_filter(labels: dict[str, str], want: Status) -> None:
    snap = snapshot_of([make_node("n").labels(**labels).capacity(cpu="1").obj()])
    got = AvoidNode().filter(fresh_state(), make_pod().info(), snap.nodes["n"])
    assert got == want


def test_reason_is_the_seeds_message_and_code_unschedulable() -> None:
    snap = snapshot_of([make_node("node01").label("avoid", "true").obj()])
    st = AvoidNode().filter(fresh_state(), make_pod().info(), snap.nodes["node01"])
    assert st.code is Code.UNSCHEDULABLE
    assert st.message == "node node01 is labeled avoid=true"


def test_filter_does_not_add_the_label_key_to_the_node() -> None:
    snap = snapshot_of([make_node("n").obj()])
    AvoidNode().filter(fresh_state(), make_pod().info(), snap.nodes["n"])
    assert "avoid" not in snap.nodes["n"].node.labels


def test_batch_form_names_each_rejected_node() -> None:
    nodes = [make_node(f"n{i}").label("avoid", "true" if i % 2 else "no").obj() for i in range(6)]
    batch = batch_of(snapshot_of(nodes))
    verdicts = AvoidNode().filter_nodes(fresh_state(), make_pod().info(), batch)
    for k, name in enumerate(batch.names):
        want = Status.unschedulable(reason_for(name)) if int(name[1:]) % 2 else Status()
        assert verdicts.status_of(k) == want


# -- args and configuration ---------------------------------------------------


def _config(args: Any = None, *, with_entry: bool = True) -> dict[str, Any]:
    profile: dict[str, Any] = {
        "schedulerName": "custom-scheduler",
        "plugins": {"filter": {"enabled": [{"name": "AvoidNodePlugin"}]}},
    }
    if with_entry:
        profile["pluginConfig"] = [{"name": "AvoidNodePlugin", "args": args}]
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [profile],
    }


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(_config({}), id="args: {} as in the seed"),
        pytest.param(_config(None), id="args left empty"),
        pytest.param(_config(with_entry=False), id="no pluginConfig entry"),
        pytest.param(_config({"kind": "AvoidNodePluginArgs"}), id="typed args"),
    ],
)
def test_config_accepts_empty_args(doc: dict[str, Any]) -> None:
    cfg = parse_config(doc, "<test>", REGISTRY)
    profile = cfg.profiles[0]
    assert "AvoidNodePlugin" in [r.name for r in profile.enabled("filter")]
    assert profile.plugin_args["AvoidNodePlugin"] == AvoidNodePluginArgs()


@pytest.mark.parametrize(
    ("args", "field", "reason"),
    [
        pytest.param(
            {"label": "avoid"},
            "profiles[0].pluginConfig[0].args.label",
            'unknown field "label"',
            id="unknown field",
        ),
        pytest.param(
            ["avoid"],
            "profiles[0].pluginConfig[0].args",
            "must be a mapping, got a list",
            id="not a mapping",
        ),
        pytest.param(
            {"kind": "GPUPriorityPluginArgs"},
            "profiles[0].pluginConfig[0].args.kind",
            'must be "AvoidNodePluginArgs" for plugin "AvoidNodePlugin", got '
            "'GPUPriorityPluginArgs'",
            id="wrong kind",
        ),
    ],
)
def test_config_refuses_bad_args(args: Any, field: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(_config(args), "<test>", REGISTRY)
    assert (info.value.field, info.value.reason) == (field, reason)


def test_example_config_is_the_seeds_and_loads() -> None:
    path = EXAMPLE / "scheduler-config.yaml"
    doc = yaml.safe_load(path.read_text())
    assert doc["profiles"] == [
        {
            "schedulerName": "custom-scheduler",
            "plugins": {"filter": {"enabled": [{"name": "AvoidNodePlugin"}]}},
            "pluginConfig": [{"name": "AvoidNodePlugin", "args": {}}],
        }
    ]
    profile = load_config(path, REGISTRY).profiles[0]
    filters = [r.name for r in profile.enabled("filter")]
    # Upstream's defaults are merged in (mergePlugins), the custom plugin last.
    assert filters[-1] == "AvoidNodePlugin"
    assert {"NodeUnschedulable", "NodeResourcesFit", "TaintToleration"} <= set(filters)


def test_not_in_the_default_profile() -> None:
    profile = default_config(REGISTRY).profiles[0]
    names = {r.name for refs in profile.plugins.values() for r in refs}
    assert "AvoidNodePlugin" not in names


# -- a whole cycle -------------------------------------------------------------


def _framework() -> Framework:
    return Framework(load_config(EXAMPLE / "scheduler-config.yaml", REGISTRY).profiles[0], REGISTRY)


def test_cycle_every_node_avoided_gives_a_fit_error_naming_each_node() -> None:
    nodes = [make_node(f"node0{i}").capacity(cpu="4").label("avoid", "true").obj() for i in (1, 2)]
    result = schedule_pod(_framework(), snapshot_of(nodes), CycleState(), make_pod("test").info())
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.message == (
        "0/2 nodes are available: 1 node node01 is labeled avoid=true, "
        "1 node node02 is labeled avoid=true. "
        # Unschedulable, so the default profile's DefaultPreemption tries.
        "no new claims to deallocate, preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    )


def test_cycle_lands_on_the_one_node_not_avoided() -> None:
    nodes = [
        make_node("big-avoided").capacity(cpu="64", memory="256Gi").label("avoid", "true").obj(),
        make_node("small").capacity(cpu="2", memory="4Gi").obj(),
        make_node("big-avoided-2").capacity(cpu="64", memory="256Gi").label("avoid", "true").obj(),
    ]
    pod = make_pod("test").req(cpu="500m").info()
    result = schedule_pod(_framework(), snapshot_of(nodes), CycleState(), pod, rng=random.Random(0))
    assert result.status.is_success, result.message
    assert result.node == "small"
