"""Upstream kube-scheduler, built here, schedules on the real API server: the benchmark harness.

Each test runs its own kube-scheduler with a profile named after the test's namespace, so only
that scheduler can bind the test's pods, and the pods select the test's own fake nodes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from berth.dev.localcluster import Cluster, objects, start_kube_scheduler
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.rest import JSON, KubeApi

pytestmark = pytest.mark.integration


@pytest.fixture
def scheduler_name(
    cluster: Cluster, k8s_bin_dir: Path, namespace: str, tmp_path: Path
) -> Iterator[str]:
    """Start kube-scheduler with one profile, named ``upstream-<namespace>``; yield the name."""
    name = f"upstream-{namespace}"
    with start_kube_scheduler(
        cluster, tmp_path / "kube-scheduler", scheduler_name=name, bin_dir=k8s_bin_dir
    ):
        yield name


def _condition(pod: JSON, kind: str) -> JSON:
    return next(c for c in pod["status"].get("conditions", []) if c["type"] == kind)


def test_pod_is_bound_to_the_only_node_with_room(
    kube: KubeApi, namespace: str, fake_nodes: NodeFactory, scheduler_name: str
) -> None:
    fake_nodes(2, prefix="small", cpu="1")
    [big] = fake_nodes(1, prefix="big", cpu="8")
    before = kube.get(f"/api/v1/namespaces/{namespace}/pods")["metadata"]["resourceVersion"]
    objects.create_pods(
        kube,
        [
            objects.pod(
                "web",
                namespace=namespace,
                cpu="2",
                scheduler_name=scheduler_name,
                node_selector={TEST_LABEL: namespace},
            )
        ],
    )

    # Watch from before the pod existed: the binding is seen as a watch event.
    bound = objects.wait_for_pods(
        kube,
        namespace,
        objects.is_bound,
        field_selector="metadata.name=web",
        timeout=60,
        resource_version=before,
    )

    pod = bound["web"]
    assert pod["spec"]["nodeName"] == big["metadata"]["name"]
    assert _condition(pod, "PodScheduled")["status"] == "True"
    # The binding was made by our kube-scheduler: its Scheduled event names it.
    events = objects.wait_for_objects(
        kube,
        f"/apis/events.k8s.io/v1/namespaces/{namespace}/events",
        lambda e: e.get("reason") == "Scheduled" and e["regarding"]["name"] == "web",
        timeout=30,
    )
    [event] = events.values()
    assert event["reportingController"] == scheduler_name
    assert big["metadata"]["name"] in event["note"]


def test_pod_that_fits_nowhere_is_reported_unschedulable(
    kube: KubeApi, namespace: str, fake_nodes: NodeFactory, scheduler_name: str
) -> None:
    fake_nodes(3, cpu="2")
    objects.create_pods(
        kube,
        [
            objects.pod(
                "huge",
                namespace=namespace,
                cpu="64",
                scheduler_name=scheduler_name,
                node_selector={TEST_LABEL: namespace},
            )
        ],
    )

    def unschedulable(pod: JSON) -> bool:
        conditions = pod.get("status", {}).get("conditions", [])
        return any(
            c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
        )

    reported = objects.wait_for_pods(
        kube, namespace, unschedulable, field_selector="metadata.name=huge", timeout=60
    )

    pod = reported["huge"]
    assert not objects.is_bound(pod)
    message = _condition(pod, "PodScheduled")["message"]
    assert message.startswith("0/")
    assert "3 Insufficient cpu" in message


def test_many_pods_are_bound_across_nodes_and_deleted_without_a_kubelet(
    kube: KubeApi, namespace: str, fake_nodes: NodeFactory, scheduler_name: str
) -> None:
    nodes = fake_nodes(10, cpu="4", memory="8Gi", pods=110)
    node_names = {n["metadata"]["name"] for n in nodes}
    pods = [
        objects.pod(
            f"p-{i}",
            namespace=namespace,
            cpu="300m",
            memory="256Mi",
            scheduler_name=scheduler_name,
            node_selector={TEST_LABEL: namespace},
            labels={"app": "many"},
        )
        for i in range(100)
    ]
    objects.create_pods(kube, pods)

    bound = objects.wait_for_pods(
        kube, namespace, objects.is_bound, count=100, label_selector="app=many", timeout=120
    )

    per_node: dict[str, int] = {}
    for pod in bound.values():
        per_node[pod["spec"]["nodeName"]] = per_node.get(pod["spec"]["nodeName"], 0) + 1
    assert set(per_node) <= node_names
    # 4 CPUs / 300m = at most 13 pods per node: the scheduler respected allocatable.
    assert max(per_node.values()) <= 13
    assert len(per_node) >= 8  # and spread them (default scoring balances allocation)

    objects.delete_pods(kube, namespace, bound)
    remaining = kube.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector="app=many")
    assert remaining["items"] == []
