"""berth.testing.schedule: pods through a profile's real plugin chain, in
order, each placed pod counting on its node for the next; typed results with
every node's Filter verdict and every feasible node's scores."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import pytest

import berth.testing
from berth.framework import CycleState, FilterPlugin, NodeInfo, PodInfo, Status
from berth.framework.config import ConfigError
from berth.framework.status import Code
from berth.testing import Cluster, make_node, make_pod, schedule

API = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}


class ZoneArgs(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    zone: str = "a"


class OnlyZone(FilterPlugin[ZoneArgs]):
    """Rejects nodes whose ``zone`` label differs from the args' zone."""

    name: ClassVar[str] = "OnlyZone"
    Args = ZoneArgs

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if node.node.labels.get("zone") != self.args.zone:
            return Status.unresolvable(f"node(s) not in zone {self.args.zone}")
        return Status.success()


def only_zone(zone: str) -> dict[str, Any]:
    return {
        **API,
        "profiles": [
            {
                "schedulerName": "zoned",
                "plugins": {"multiPoint": {"enabled": [{"name": "OnlyZone"}]}},
                "pluginConfig": [{"name": "OnlyZone", "args": {"zone": zone}}],
            }
        ],
    }


def test_the_default_profile_places_a_pod_and_explains_every_node() -> None:
    (result,) = schedule(
        None,
        nodes=[
            make_node("small").capacity(cpu="1", memory="1Gi"),
            make_node("big").capacity(cpu="8", memory="16Gi"),
            make_node("cordoned").capacity(cpu="8", memory="16Gi").unschedulable(),
        ],
        pods=[make_pod("p").req(cpu="2", memory="1Gi")],
    )
    assert result.pod == "default/p"
    assert result.scheduled and result.node == "big"
    assert result.status.is_success
    assert result.filter_reasons == {
        "small": ("Insufficient cpu",),
        "cordoned": ("node(s) were unschedulable",),
    }
    assert result.rejected_by("small") == "NodeResourcesFit"
    assert result.rejected_by("big") is None
    assert set(result.scores) == {"big"}
    assert result.totals["big"] == sum(result.scores["big"].values())
    assert "NodeResourcesFit" in result.scores["big"]


def test_each_placed_pod_counts_on_its_node_for_the_next() -> None:
    results = schedule(
        None,
        nodes=[make_node("n1").capacity(cpu="2", memory="4Gi")],
        pods=[make_pod(f"p{i}").req(cpu="1") for i in range(3)],
    )
    assert [r.node for r in results] == ["n1", "n1", None]
    last = results[2]
    assert last.status.code is Code.UNSCHEDULABLE
    assert last.message.startswith("0/1 nodes are available: 1 Insufficient cpu.")
    assert last.filter_reasons == {"n1": ("Insufficient cpu",)}


def test_existing_pods_take_their_nodes_capacity() -> None:
    (result,) = schedule(
        None,
        nodes=[
            make_node("full").capacity(cpu="2"),
            make_node("free").capacity(cpu="2"),
        ],
        existing=[make_pod("old").req(cpu="2").node("full")],
        pods=[make_pod("new").req(cpu="1")],
    )
    assert result.node == "free"


def test_a_gated_pod_stops_at_pre_enqueue() -> None:
    gated = make_pod("gated").obj()
    gated.scheduling_gates.append("example.com/wait")
    (result,) = schedule(None, nodes=[make_node("n").capacity(cpu="1")], pods=[gated])
    assert result.node is None
    assert result.status.plugin == "SchedulingGates"
    assert not result.scheduled


@pytest.mark.parametrize("form", ["dict", "yaml", "path", "str-path"])
def test_config_as_a_mapping_yaml_text_or_a_file(form: str, tmp_path: Path) -> None:
    text = textwrap.dedent(
        """\
        apiVersion: kubescheduler.config.k8s.io/v1
        kind: KubeSchedulerConfiguration
        profiles:
        - schedulerName: zoned
          plugins:
            multiPoint:
              enabled:
              - name: OnlyZone
          pluginConfig:
          - name: OnlyZone
            args:
              zone: b
        """
    )
    file = tmp_path / "config.yaml"
    file.write_text(text)
    forms: dict[str, berth.testing.ConfigSource] = {
        "dict": only_zone("b"),
        "yaml": text,
        "path": file,
        "str-path": str(file),
    }
    config = forms[form]
    (result,) = schedule(
        config,
        nodes=[
            make_node("a1").capacity(cpu="4").label("zone", "a"),
            make_node("b1").capacity(cpu="4").label("zone", "b"),
        ],
        pods=[make_pod("p")],
        plugins=[OnlyZone],
    )
    # The configuration's only profile serves the pod of another schedulerName.
    assert result.node == "b1"
    assert result.rejected["a1"] == Status.unresolvable("node(s) not in zone b", plugin="OnlyZone")


def test_a_bad_config_is_refused_as_berth_serve_refuses_it() -> None:
    bad = only_zone("b")
    bad["profiles"][0]["pluginConfig"][0]["args"] = {"zone": 1}
    with pytest.raises(ConfigError, match=r"pluginConfig\[0\]\.args\.zone"):
        schedule(
            bad, nodes=[make_node("n").capacity(cpu="1")], pods=[make_pod("p")], plugins=[OnlyZone]
        )


def test_yaml_text_is_read_as_strictly_as_a_file() -> None:
    """A repeated key is refused in YAML text as ``berth serve`` refuses it in a file
    (framework/config.py's loader), not silently resolved to the last value."""
    text = textwrap.dedent(
        """\
        apiVersion: kubescheduler.config.k8s.io/v1
        kind: KubeSchedulerConfiguration
        kind: KubeSchedulerConfiguration
        """
    )
    with pytest.raises(ConfigError, match=r"<yaml>.*kind"):
        schedule(text, nodes=[make_node("n").capacity(cpu="1")], pods=[make_pod("p")])


def test_a_pod_whose_profile_is_missing_is_refused_with_the_profiles() -> None:
    two = {**API, "profiles": [{"schedulerName": "a"}, {"schedulerName": "b"}]}
    with pytest.raises(ValueError, match=r"no profile 'default-scheduler' .*profiles: a, b"):
        schedule(two, nodes=[make_node("n").capacity(cpu="1")], pods=[make_pod("p")])
    (result,) = schedule(
        two, nodes=[make_node("n").capacity(cpu="1")], pods=[make_pod("p")], profile="b"
    )
    assert result.node == "n"


def test_a_plugin_class_may_not_take_an_in_tree_name() -> None:
    class Impostor(OnlyZone):
        name: ClassVar[str] = "NodeResourcesFit"

    with pytest.raises(ValueError, match="in-tree plugin"):
        schedule(
            None, nodes=[make_node("n").capacity(cpu="1")], pods=[make_pod("p")], plugins=[Impostor]
        )


def test_a_cluster_keeps_its_placements_between_calls() -> None:
    cluster = Cluster(nodes=[make_node("n1").capacity(cpu="1")])
    assert cluster.schedule([make_pod("a").req(cpu="1")])[0].node == "n1"
    assert cluster.schedule([make_pod("b").req(cpu="1")])[0].node is None
    cluster.add(nodes=[make_node("n2").capacity(cpu="1")])
    assert cluster.schedule([make_pod("c").req(cpu="1")])[0].node == "n2"


def test_the_public_surface_is_what_a_plugin_author_needs() -> None:
    assert set(berth.testing.__all__) >= {
        "schedule",
        "Cluster",
        "PodResult",
        "make_pod",
        "make_node",
        "make_object",
        "snapshot_of",
        "handle_for",
        "fresh_state",
    }
    for name in berth.testing.__all__:
        assert getattr(berth.testing, name) is not None
