"""Berth's test kit for plugin authors: build nodes, pods and objects, run
pods through a profile's real plugin chain in-process, and read where each
went and why::

    from berth.testing import make_node, make_pod, schedule

    results = schedule(
        "scheduler-config.yaml",
        nodes=[make_node("n1").capacity(cpu="4", memory="8Gi").label("pool", "general")],
        pods=[make_pod("p").req(cpu="500m")],
        plugins=[MyPlugin],  # a plugin class not installed yet
    )
    assert results[0].node == "n1"
    assert results[0].rejected == {}

The builders follow upstream's pkg/scheduler/testing/wrappers.go; a plugin
tested on its own gets a snapshot (``snapshot_of``), a handle bound to it
(``handle_for``) and a fresh ``CycleState``. pytest fixtures come with the
pytest plugin ``berth.testing.pytest_plugin`` (loaded automatically where
Berth is installed): ``berth_cluster``, ``berth_config``, ``berth_plugins``.
A configuration Berth would refuse raises ``ConfigError`` with the file, the
field and the reason, as ``berth serve`` reports it.
"""

from berth.framework.config import ConfigError
from berth.framework.testing import (
    NodeWrapper,
    PodWrapper,
    apply_objects,
    batch_of,
    fresh_state,
    handle_for,
    make_node,
    make_object,
    make_pod,
    object_ref,
    resources,
    snapshot_of,
)
from berth.testing.harness import Cluster, ConfigSource, PodResult, registry_with, schedule

__all__ = [
    "Cluster",
    "ConfigError",
    "ConfigSource",
    "NodeWrapper",
    "PodResult",
    "PodWrapper",
    "apply_objects",
    "batch_of",
    "fresh_state",
    "handle_for",
    "make_node",
    "make_object",
    "make_pod",
    "object_ref",
    "registry_with",
    "resources",
    "schedule",
    "snapshot_of",
]
