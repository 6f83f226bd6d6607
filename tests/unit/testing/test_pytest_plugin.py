"""The pytest plugin (entry point ``pytest11``): ``berth_cluster`` schedules
with ``berth_config`` and ``berth_plugins``, which a test module overrides."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from berth.framework import Plugin
from berth.testing import ConfigSource, make_node, make_pod
from berth.testing.pytest_plugin import BoundCluster
from tests.unit.testing.test_harness import OnlyZone, only_zone


@pytest.fixture
def berth_plugins() -> Sequence[type[Plugin]]:
    return [OnlyZone]


@pytest.fixture
def berth_config() -> ConfigSource:
    return only_zone("b")


def test_berth_cluster_uses_the_overridden_config_and_plugins(berth_cluster: BoundCluster) -> None:
    berth_cluster.add(
        nodes=[
            make_node("a1").capacity(cpu="4").label("zone", "a"),
            make_node("b1").capacity(cpu="4").label("zone", "b"),
        ]
    )
    (result,) = berth_cluster.schedule([make_pod("p")])
    assert result.node == "b1"
    assert result.rejected_by("a1") == "OnlyZone"


def test_the_plugin_is_registered_with_pytest(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.pluginmanager.has_plugin("berth")
