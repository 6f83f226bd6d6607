"""pytest fixtures for testing Berth plugins, registered in the ``pytest11``
entry-point group, so pytest loads them wherever Berth is installed (or name
them: ``pytest_plugins = ["berth.testing.pytest_plugin"]``).

``berth_cluster`` is an empty ``Cluster`` that schedules with
``berth_config`` and ``berth_plugins``; override those two in a conftest.py
to test a plugin of your own::

    @pytest.fixture
    def berth_plugins() -> list[type[Plugin]]:
        return [MyPlugin]

    @pytest.fixture
    def berth_config() -> ConfigSource:
        return Path(__file__).parent / "scheduler-config.yaml"

    def test_it(berth_cluster: BoundCluster) -> None:
        berth_cluster.add(nodes=[make_node("n1").capacity(cpu="4")])
        (result,) = berth_cluster.schedule([make_pod("p").req(cpu="1")])
        assert result.node == "n1"
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest

from berth.framework.interfaces import Plugin
from berth.testing.harness import Cluster, ConfigSource, PodLike, PodResult

__all__ = ["BoundCluster", "berth_cluster", "berth_config", "berth_plugins"]


class BoundCluster(Cluster):
    """A Cluster whose ``schedule`` defaults to the fixtures' configuration
    and plugins."""

    def __init__(self, config: ConfigSource, plugins: Sequence[type[Plugin]]) -> None:
        super().__init__()
        self.config = config
        self.plugins = tuple(plugins)

    def schedule(
        self,
        pods: Iterable[PodLike],
        config: ConfigSource = None,
        *,
        plugins: Iterable[type[Plugin]] = (),
        profile: str | None = None,
        seed: int = 1,
    ) -> list[PodResult]:
        return super().schedule(
            pods,
            self.config if config is None else config,
            plugins=(*self.plugins, *plugins),
            profile=profile,
            seed=seed,
        )


@pytest.fixture
def berth_config() -> ConfigSource:
    """The KubeSchedulerConfiguration ``berth_cluster`` schedules with
    (a path, YAML text, a mapping); None: upstream's default profile."""
    return None


@pytest.fixture
def berth_plugins() -> Sequence[type[Plugin]]:
    """Plugin classes ``berth_cluster`` can run besides the installed ones."""
    return ()


@pytest.fixture
def berth_cluster(
    berth_config: ConfigSource, berth_plugins: Sequence[type[Plugin]]
) -> BoundCluster:
    """An empty cluster: add nodes, bound pods and objects, then schedule."""
    return BoundCluster(berth_config, berth_plugins)
