"""Whole scheduling cycles (the default profile) with pod-level resources
(PodLevelResources) and in-place resize (InPlacePodVerticalScaling), the pods
and nodes decoded from Kubernetes JSON by berth.kube.records as the shim decodes them.
The plugin-level cases are in tests/plugins/noderesources/test_pod_level_resources.py.
"""

from __future__ import annotations

from typing import Any

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.config import default_config
from berth.framework.cycle_state import CycleState
from berth.framework.model import PodInfo
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.status import Code
from berth.framework.testing import snapshot_of
from berth.kube.records import node_record, pod_record
from berth.plugins.registry import REGISTRY


def default_framework() -> Framework:
    """Upstream's default profile (every registered default plugin)."""
    (profile,) = default_config(REGISTRY).profiles
    return Framework(profile, REGISTRY)


def node_obj(name: str, cpu: str, memory: str) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "pods": "110"}
    return {
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "status": {"capacity": alloc, "allocatable": alloc},
    }


def pod_obj(name: str, spec: dict[str, Any], status: dict[str, Any] | None = None) -> pb.Pod:
    obj: dict[str, Any] = {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return pod_record(obj)


# spec.resources asks 4 CPU; the containers ask nothing (one asks memory).
FOUR_CPU_POD_LEVEL = {
    "resources": {"requests": {"cpu": "4"}},
    "containers": [
        {"name": "app", "image": "nginx"},
        {"name": "helper", "image": "busybox", "resources": {"requests": {"memory": "1Gi"}}},
    ],
}


def test_schedule_pod_level_4_cpu_pod_is_not_placed_on_a_2_cpu_node() -> None:
    """schedulePod with the default profile: NodeResourcesFit's Filter sees the
    pod-level 4 CPU, so the 2-CPU node is rejected."""
    pod = PodInfo(pod_obj("wants-4-cpu", FOUR_CPU_POD_LEVEL))
    small = node_record(node_obj("small", "2", "4Gi"))
    big = node_record(node_obj("big", "8", "16Gi"))

    result = schedule_pod(default_framework(), snapshot_of([small, big]), CycleState(), pod)
    assert result.status.is_success, result.message
    assert result.node == "big"

    alone = schedule_pod(default_framework(), snapshot_of([small]), CycleState(), pod)
    assert alone.status.code == Code.UNSCHEDULABLE
    assert alone.node == ""
    # Beyond allocatable: unresolvable, so preemption would not help.
    assert alone.message == (
        "0/1 nodes are available: 1 Insufficient cpu. "
        "no new claims to deallocate, preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )
    assert alone.rejected["small"].plugin == "NodeResourcesFit"


def test_schedule_counts_pod_level_and_resized_pods_on_their_nodes() -> None:
    """Both plugins through a whole cycle, scores checked against upstream's:
    "big" runs a pod asking 6 CPU at pod level; "medium" a pod whose spec asks
    500m CPU but which was resized to 1500m (allocated and applied). The new
    pod asks 2 CPU and 2Gi at pod level. Upstream v1.36.3 scores medium 58
    (Fit) + 69 (BalancedAllocation), big 54 + 72."""
    medium = node_record(node_obj("medium", "4", "8Gi"))
    big = node_record(node_obj("big", "8", "16Gi"))
    on_big = pod_obj(
        "six-cpu",
        {
            "nodeName": "big",
            "resources": {"requests": {"cpu": "6"}},
            "containers": [
                {"name": "a"},
                {"name": "b", "resources": {"requests": {"memory": "1Gi"}}},
            ],
        },
    )
    resized = pod_obj(
        "resized",
        {
            "nodeName": "medium",
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}}}
            ],
        },
        {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "a",
                    "allocatedResources": {"cpu": "1500m", "memory": "2Gi"},
                    "resources": {"requests": {"cpu": "1500m", "memory": "2Gi"}},
                }
            ],
        },
    )
    snap = snapshot_of([medium, big], [on_big, resized])
    assert snap.nodes["medium"].requested.milli_cpu == 1500
    assert snap.nodes["big"].requested.milli_cpu == 6000
    pod = PodInfo(
        pod_obj(
            "p",
            {
                "resources": {"requests": {"cpu": "2", "memory": "2Gi"}},
                "containers": [
                    {"name": "a"},
                    {"name": "b", "resources": {"requests": {"memory": "1Gi"}}},
                ],
            },
        )
    )
    result = schedule_pod(default_framework(), snap, CycleState(), pod, explain=True)
    assert result.status.is_success, result.message
    assert result.scores is not None
    names = list(result.scores.nodes.names)
    got = {
        plugin: dict(zip(names, result.scores.weighted[plugin].tolist(), strict=True))
        for plugin in ("NodeResourcesFit", "NodeResourcesBalancedAllocation")
    }
    assert got == {
        "NodeResourcesFit": {"medium": 58, "big": 54},
        "NodeResourcesBalancedAllocation": {"medium": 69, "big": 72},
    }
    assert result.node == "medium"


def test_schedule_resized_pod_fills_its_node() -> None:
    """A bound pod resized from 1 to 3 CPU (allocated and applied) leaves 1 CPU
    on a 4-CPU node: a 2-CPU pod no longer fits there. With the resize
    Infeasible and nothing applied above the spec, the node counts 1 CPU and
    the pod fits."""
    node = node_record(node_obj("n", "4", "8Gi"))
    spec = {
        "nodeName": "n",
        "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
    }
    grown = {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": "a",
                "allocatedResources": {"cpu": "3"},
                "resources": {"requests": {"cpu": "3"}},
            }
        ],
    }
    pod = PodInfo(
        pod_obj("p", {"containers": [{"name": "a", "resources": {"requests": {"cpu": "2"}}}]})
    )

    full = schedule_pod(
        default_framework(),
        snapshot_of([node], [pod_obj("resized", spec, grown)]),
        CycleState(),
        pod,
    )
    assert full.status.code == Code.UNSCHEDULABLE
    assert full.message == (
        "0/1 nodes are available: 1 Insufficient cpu. "
        "no new claims to deallocate, preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    )

    # The spec was raised to 3, the kubelet found it infeasible: 1 allocated and applied.
    infeasible = {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": "a",
                "allocatedResources": {"cpu": "1"},
                "resources": {"requests": {"cpu": "1"}},
            }
        ],
        "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}],
    }
    raised = {**spec, "containers": [{"name": "a", "resources": {"requests": {"cpu": "3"}}}]}
    fits_now = schedule_pod(
        default_framework(),
        snapshot_of([node], [pod_obj("resized", raised, infeasible)]),
        CycleState(),
        pod,
    )
    assert fits_now.status.is_success, fits_now.message
    assert fits_now.node == "n"
