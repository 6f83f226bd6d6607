"""Queueing hints through ``berth shim`` on a real kube-apiserver (the default
profile, in-process plugins): node updates that help none of the unschedulable
pods move none of them, and an event that helps them moves them all, as
``scheduler_queue_incoming_pods_total{event,queue}`` counts (upstream's
isPodWorthRequeuing with each plugin's EventsToRegister and hints)."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.rest import KubeApi
from tests.integration.shimtools import (
    Shim,
    pod_path,
    pod_scheduled_condition,
    pods_of,
    profile_for,
    running,
    wait_all_bound,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.integration

PODS = 40
QUEUES = ("Active", "Backoff")


def moved(shim: Shim, event: str) -> float:
    """Pods the shim moved towards a retry because of ``event``."""
    return sum(
        shim.metric("scheduler_queue_incoming_pods_total", event=event, queue=q) for q in QUEUES
    )


def test_node_updates_that_help_no_pod_move_none_and_a_node_that_helps_moves_them(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    profile = profile_for(namespace)
    (node,) = fake_nodes(1, cpu="2", memory="8Gi")
    name = node["metadata"]["name"]
    shim = Shim(
        write_config(tmp_path / "c.yaml", profile), cluster.kubeconfig, tmp_path / "shim.log"
    )
    with running(shim.start()):
        # Each pod asks for more cpu than the node has: NodeResourcesFit rejects
        # them all (NodeAffinity the other tests' nodes).
        objects.create_pods(
            kube,
            [
                objects.pod(
                    f"big-{i}",
                    namespace=namespace,
                    cpu="3",
                    scheduler_name=profile,
                    node_selector={TEST_LABEL: namespace},
                )
                for i in range(PODS)
            ],
        )

        def all_unschedulable() -> bool:
            return all(
                (c := pod_scheduled_condition(p)) is not None and c["reason"] == "Unschedulable"
                for p in pods_of(kube, namespace)
            )

        wait_for(all_unschedulable, 60, f"{PODS} pods Unschedulable", shim.log)
        wait_for(
            lambda: shim.metric("scheduler_pending_pods", queue="unschedulable") == PODS,
            30,
            f"{PODS} pods in the unschedulable pool",
            shim.log,
        )
        attempts = shim.metric(
            "scheduler_schedule_attempts_total", result="unschedulable", profile=profile
        )

        # Node updates that help none of them: labels (NodeAffinity's hint: the
        # node matched before and after), annotations (no plugin registers
        # them), a taint-free allocatable change that still fits none of them
        # (NodeResourcesFit's hint).
        path = f"/api/v1/nodes/{name}"
        for i in range(10):
            kube.merge_patch(
                path, {"metadata": {"labels": {"round": str(i)}, "annotations": {"note": str(i)}}}
            )
        kube.merge_patch(f"{path}/status", {"status": {"allocatable": {"cpu": "2500m"}}})

        # A node with room: NodeResourcesFit registered Node/Add and its hint
        # answers Queue. Node events arrive in order, so once it has moved the
        # pods every update above has been judged.
        fake_nodes(1, prefix="big", cpu="200", memory="64Gi")
        wait_for(lambda: moved(shim, "NodeAdd") >= PODS, 30, "the pods moved by NodeAdd", shim.log)

        for event in (
            "NodeUpdateNodeLabel",
            "NodeUpdateNodeAnnotation",
            "NodeUpdateNodeAllocatable",
        ):
            assert moved(shim, event) == 0, event
        assert moved(shim, "NodeAdd") == PODS
        wait_all_bound(kube, namespace, PODS, timeout=60)
        # Retried once each, after the node came: no attempt between.
        after = shim.metric(
            "scheduler_schedule_attempts_total", result="unschedulable", profile=profile
        )
        assert after == attempts
        assert pod_scheduled_condition(kube.get(pod_path(namespace, "big-0")))["status"] == "True"  # type: ignore[index]
