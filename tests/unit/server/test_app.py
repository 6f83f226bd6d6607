"""Profiles from a configuration become frameworks with the right settings."""

from __future__ import annotations

from berth.framework.config import parse_config
from berth.framework.cycle_state import CycleState
from berth.framework.schedule_one import schedule_pod
from berth.framework.testing import make_node, make_pod, snapshot_of
from berth.plugins.registry import REGISTRY
from berth.server.app import build_frameworks


def test_percentage_of_nodes_to_score_reaches_the_cycle() -> None:
    """Top-level percentageOfNodesToScore applies to profiles that set none;
    a profile's own value wins (upstream: profile first, then global)."""
    config = parse_config(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "percentageOfNodesToScore": 100,
            "profiles": [
                {"schedulerName": "all"},
                {"schedulerName": "some", "percentageOfNodesToScore": 20},
            ],
        },
        "<test>",
        REGISTRY,
    )
    frameworks = build_frameworks(config, REGISTRY)
    snap = snapshot_of([make_node(f"n{i}").capacity(cpu="4").obj() for i in range(1000)])
    pod = make_pod().req(cpu="100m").info()
    assert schedule_pod(frameworks["all"], snap, CycleState(), pod).feasible == 1000
    assert schedule_pod(frameworks["some"], snap, CycleState(), pod).feasible == 200
