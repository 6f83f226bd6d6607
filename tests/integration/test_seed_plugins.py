"""The seed documents' plugins through ``berth shim`` on a real kube-apiserver, following
their verification steps with the configurations of deploy/examples/ (profile
``custom-scheduler`` renamed per test, so tests do not collide):

* AvoidNodePlugin (scheduler-framework-plugins.txt): ``kubectl label node ... avoid=true``,
  ``kubectl run test --image=nginx --overrides=...schedulerName...``, ``kubectl describe
  pod test`` shows ``FailedScheduling`` with ``node <name> is labeled avoid=true``; with one
  node not avoided the pod lands there.
* GPUPriorityPlugin (same document): the pod lands on the node with the most free GPUs.
* SameLabelSpread (score-plugin-spread-and-gpu-card.txt): the pod lands on the node with
  fewer pods carrying its labels.

Upstream's default plugins are merged into each profile (NodeResourcesFit, ...), as
kube-scheduler does; the clusters are laid out so that those scores favour the other
node, and only the seed plugin explains where the pod goes. Pods select this test's
nodes (``berth.dev/test=<namespace>``): nodes are cluster-wide.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.rest import JSON, KubeApi
from tests.integration.shimtools import (
    Shim,
    described_failed_scheduling,
    example_config_as,
    kubectl,
    node_names,
    profile_for,
    running,
    wait_node_of,
    wait_unschedulable,
)

pytestmark = pytest.mark.integration

SEED_PROFILE = "custom-scheduler"
GPU = "nvidia.com/gpu"


def example_config(folder: str, profile: str, path: Path) -> Path:
    """deploy/examples/<folder>/scheduler-config.yaml with its profile renamed."""
    return example_config_as(folder, SEED_PROFILE, profile, path)


def our_pod(
    namespace: str,
    name: str,
    profile: str,
    *,
    cpu: str = "100m",
    labels: dict[str, str] | None = None,
    extended: dict[str, str] | None = None,
) -> JSON:
    """A pod for the test's profile that selects the test's nodes."""
    return objects.pod(
        name,
        namespace=namespace,
        cpu=cpu,
        labels=labels,
        extended=extended,
        scheduler_name=profile,
        node_selector={TEST_LABEL: namespace},
    )


# -- AvoidNodePlugin ------------------------------------------------------------------


def test_avoid_node_seed_steps_failed_scheduling_then_the_unlabelled_node(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    k8s_bin_dir: Path,
) -> None:
    profile = profile_for(namespace)
    nodes = node_names(fake_nodes(2, cpu="4", memory="8Gi"))
    # kubectl label node node01 avoid=true (every node of this test).
    for node in nodes:
        kubectl(cluster, k8s_bin_dir, "label", "node", node, "avoid=true")
    config = example_config("avoidnode", profile, tmp_path / "scheduler-config.yaml")
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log")
    with running(shim.start()):
        # kubectl run test --image=nginx --overrides='{"spec":{"schedulerName":"custom-scheduler"}}',
        # plus a nodeSelector for this test's nodes.
        overrides = {"spec": {"schedulerName": profile, "nodeSelector": {TEST_LABEL: namespace}}}
        kubectl(
            cluster,
            k8s_bin_dir,
            "run",
            "test",
            "-n",
            namespace,
            "--image=nginx",
            f"--overrides={json.dumps(overrides)}",
        )
        cond = wait_unschedulable(kube, namespace, "test", shim)
        for node in nodes:
            assert f"1 node {node} is labeled avoid=true" in cond["message"]

        # kubectl describe pod test | grep -A2 Events
        failed = described_failed_scheduling(cluster, k8s_bin_dir, namespace, "test")
        assert len(failed) == 1, failed
        assert failed[0].split()[:2] == ["Warning", "FailedScheduling"]
        for node in nodes:
            assert f"node {node} is labeled avoid=true" in failed[0]

        # One node no longer avoided (a NodeUpdate moves the pending pod): it lands there.
        kubectl(cluster, k8s_bin_dir, "label", "node", nodes[1], "avoid-")
        assert wait_node_of(kube, namespace, "test", shim) == nodes[1]


def test_avoid_node_every_pod_lands_on_the_one_good_node(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    profile = profile_for(namespace)
    # The avoided nodes are the roomy ones: NodeResourcesFit alone would pick them.
    avoided = node_names(
        fake_nodes(2, prefix="big", cpu="64", memory="256Gi", labels={"avoid": "true"})
    )
    good = node_names(fake_nodes(1, prefix="small", cpu="4", memory="8Gi"))[0]
    config = example_config("avoidnode", profile, tmp_path / "scheduler-config.yaml")
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log")
    with running(shim.start()):
        objects.create_pods(
            kube, [our_pod(namespace, f"p-{i}", profile, cpu="200m") for i in range(5)]
        )
        for i in range(5):
            assert wait_node_of(kube, namespace, f"p-{i}", shim) == good
        for node in avoided:
            assert kube.get(f"/api/v1/nodes/{node}")["metadata"]["labels"]["avoid"] == "true"


# -- GPUPriorityPlugin ---------------------------------------------------------------


def test_gpu_priority_pod_lands_on_the_node_with_most_free_gpus(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    profile = profile_for(namespace)
    size = {"cpu": "64", "memory": "256Gi"}
    # big: 8 GPUs, 6 taken (2 free); small: 4 GPUs, all free; plain: none. The seed's
    # capacity score would pick big; free GPUs pick small.
    big = node_names(fake_nodes(1, prefix="big", extended={GPU: "8"}, **size))[0]
    small = node_names(fake_nodes(1, prefix="small", extended={GPU: "4"}, **size))[0]
    fake_nodes(1, prefix="plain", **size)
    objects.create_pods(
        kube,
        [
            objects.pod(
                "gpu-hog",
                namespace=namespace,
                cpu=None,
                memory=None,
                extended={GPU: "6"},
                node_name=big,
            ),
            # CPU load on small, so that NodeResourcesFit's LeastAllocated prefers big.
            objects.pod("cpu-load", namespace=namespace, cpu="16", memory="16Gi", node_name=small),
        ],
    )
    config = example_config("gpupriority", profile, tmp_path / "scheduler-config.yaml")
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log")
    with running(shim.start()):
        objects.create_pods(kube, [our_pod(namespace, "train-0", profile, extended={GPU: "1"})])
        assert wait_node_of(kube, namespace, "train-0", shim) == small
        # small now has 3 free, big 2: the next one goes to small too (the shim counts
        # the pod it bound).
        objects.create_pods(kube, [our_pod(namespace, "train-1", profile, extended={GPU: "1"})])
        assert wait_node_of(kube, namespace, "train-1", shim) == small


# -- SameLabelSpread -----------------------------------------------------------------


def test_same_label_spread_pod_lands_on_the_node_with_fewer_same_label_pods(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    profile = profile_for(namespace)
    crowded, spread = node_names(fake_nodes(2, cpu="64", memory="256Gi"))
    # crowded: 2 web pods (score 80); spread: no web pod but 3 db pods (100), so it has
    # more pods and more requests: NodeResourcesFit would prefer crowded.
    objects.create_pods(
        kube,
        [
            objects.pod(f"web-{i}", namespace=namespace, labels={"app": "web"}, node_name=crowded)
            for i in range(2)
        ]
        + [
            objects.pod(
                f"db-{i}", namespace=namespace, cpu="2", labels={"app": "db"}, node_name=spread
            )
            for i in range(3)
        ],
    )
    config = example_config("samelabelspread", profile, tmp_path / "scheduler-config.yaml")
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log")
    with running(shim.start()):
        objects.create_pods(kube, [our_pod(namespace, "web-new-0", profile, labels={"app": "web"})])
        assert wait_node_of(kube, namespace, "web-new-0", shim) == spread
        # spread now has 1 web pod (90), crowded 2 (80): the next one goes there too.
        objects.create_pods(kube, [our_pod(namespace, "web-new-1", profile, labels={"app": "web"})])
        assert wait_node_of(kube, namespace, "web-new-1", shim) == spread
