"""GPUCardFit with GPUs described the way clusters describe them, through ``berth
shim`` on a real kube-apiserver (resource.k8s.io/v1 served):

* a node described by DRA ResourceSlices (NVIDIA's DRA driver's shape: driver
  ``gpu.nvidia.com``, devices with a ``memory`` capacity, ``productName``, ``uuid``), one of
  whose two 80Gi devices a ResourceClaim's ``status.allocation`` already holds;
* a node labelled by NVIDIA GPU Feature Discovery (``nvidia.com/gpu.count: 2``,
  ``nvidia.com/gpu.memory: 40960`` MiB per card).

A pod needing 60Gi on one card fits only the free DRA device and gets it (PreBind writes
``berth.dev/gpu-card: gpu.nvidia.com/<pool>/gpu-0``); a 30Gi pod then fits only a GFD
card (the DRA device went whole to the first pod) and gets card ``0``; another 60Gi pod
fits nowhere and waits with both sources named in its FailedScheduling message. The
claim's allocation released, it binds to the DRA node.

GPUPriorityPlugin on the same two kinds of node: a pod lands on the node with more free GPUs
by its source (4 free DRA devices over 2 GFD cards), and once claims hold 3 of the devices,
on the GFD node.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.rest import JSON, KubeApi
from tests.gpu_objects import device, slice_json
from tests.integration.shimtools import (
    Server,
    Shim,
    example_config_as,
    node_names,
    pod_path,
    pods_of,
    profile_for,
    running,
    wait_for,
    wait_node_of,
    wait_unschedulable,
)

pytestmark = pytest.mark.integration

GPU_MEMORY = "berth.dev/gpu-memory"
GPU_CARD = "berth.dev/gpu-card"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def claims_path(namespace: str) -> str:
    return f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"


@pytest.fixture
def slices(kube: KubeApi) -> Iterator[list[str]]:
    """The ResourceSlices a test creates (cluster-scoped), deleted at its end."""
    names: list[str] = []
    yield names
    for name in names:
        kube.delete(f"{SLICES}/{name}")


def gpu_pod(namespace: str, name: str, profile: str, need: str) -> JSON:
    pod = objects.pod(
        name,
        namespace=namespace,
        cpu="100m",
        scheduler_name=profile,
        node_selector={TEST_LABEL: namespace, "group": "gpu"},
    )
    pod["metadata"]["annotations"] = {GPU_MEMORY: need}
    return pod


def allocated_claim(kube: KubeApi, namespace: str, pool: str, dev: str, name: str = "held") -> str:
    """A ResourceClaim allocated to ``dev`` of ``pool`` (status written as the scheduler
    writes it, through the status subresource); returns its path."""
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    kube.create(claims_path(namespace), claim)
    path = f"{claims_path(namespace)}/{name}"
    result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": pool, "device": dev}
    kube.merge_patch(
        f"{path}/status", {"status": {"allocation": {"devices": {"results": [result]}}}}
    )
    return path


def test_pods_land_where_resource_slices_and_gfd_labels_say(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    slices: list[str],
    tmp_path: Path,
) -> None:
    profile = profile_for(namespace)
    size: dict[str, Any] = {"cpu": "32", "memory": "128Gi", "labels": {"group": "gpu"}}
    dra_node = node_names(fake_nodes(1, prefix="dra", **size))[0]
    gfd_node = node_names(fake_nodes(1, prefix="gfd", **size))[0]
    kube.merge_patch(
        f"/api/v1/nodes/{gfd_node}",
        {
            "metadata": {
                "labels": {
                    "nvidia.com/gpu.count": "2",
                    "nvidia.com/gpu.memory": "40960",
                    "nvidia.com/gpu.product": "NVIDIA-A100-PCIE-40GB",
                }
            }
        },
    )
    name = f"{dra_node}-gpu.nvidia.com"
    kube.create(SLICES, slice_json(name, dra_node, [device("gpu-0"), device("gpu-1")]))
    slices.append(name)
    held = allocated_claim(kube, namespace, dra_node, "gpu-1")

    config = example_config_as("gpucard", "my-scheduler", profile, tmp_path / "config.yaml")
    server = Server(config, tmp_path / "server.log")
    with running(server.start()):
        shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log", server=server.address)
        with running(shim.start()):
            objects.create_pods(kube, [gpu_pod(namespace, "big", profile, "60Gi")])
            assert wait_node_of(kube, namespace, "big", shim) == dra_node
            big = kube.get(pod_path(namespace, "big"))
            assert big["metadata"]["annotations"][GPU_CARD] == f"gpu.nvidia.com/{dra_node}/gpu-0"

            objects.create_pods(kube, [gpu_pod(namespace, "small", profile, "30Gi")])
            assert wait_node_of(kube, namespace, "small", shim) == gfd_node
            small = kube.get(pod_path(namespace, "small"))
            assert small["metadata"]["annotations"][GPU_CARD] == "0"

            objects.create_pods(kube, [gpu_pod(namespace, "waits", profile, "60Gi")])
            cond = wait_unschedulable(kube, namespace, "waits", shim)
            assert "1 no free GPU card (ResourceSlices)" in cond["message"], cond
            assert "1 no free GPU card (GFD labels)" in cond["message"], cond

            # The claim lets go of gpu-1: the waiting pod is tried again and gets it.
            kube.merge_patch(f"{held}/status", {"status": {"allocation": None}})
            assert wait_node_of(kube, namespace, "waits", shim) == dra_node
            waits = kube.get(pod_path(namespace, "waits"))
            assert waits["metadata"]["annotations"][GPU_CARD] == f"gpu.nvidia.com/{dra_node}/gpu-1"

            def all_bound() -> bool:
                return all(p["spec"].get("nodeName") for p in pods_of(kube, namespace))

            wait_for(all_bound, 30, "every pod bound", shim.log)
    assert "Traceback" not in server.text() + shim.text()
    # The shim names where the cards came from when it reserves one.
    assert "cards from ResourceSlices" in server.text() + shim.text()


def test_gpu_priority_counts_free_gpus_from_slices_and_gfd_labels(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    slices: list[str],
    tmp_path: Path,
) -> None:
    profile = profile_for(namespace)
    size: dict[str, Any] = {"cpu": "32", "memory": "128Gi", "labels": {"group": "gpu"}}
    dra_node = node_names(fake_nodes(1, prefix="dra", **size))[0]
    gfd_node = node_names(fake_nodes(1, prefix="gfd", **size))[0]
    gfd = {"nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "40960"}
    kube.merge_patch(f"/api/v1/nodes/{gfd_node}", {"metadata": {"labels": gfd}})
    name = f"{dra_node}-gpu.nvidia.com"
    kube.create(SLICES, slice_json(name, dra_node, [device(f"gpu-{i}") for i in range(4)]))
    slices.append(name)

    config = example_config_as("gpupriority", "custom-scheduler", profile, tmp_path / "config.yaml")
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log")
    with running(shim.start()):
        objects.create_pods(kube, [gpu_pod(namespace, "first", profile, "1Gi")])
        assert wait_node_of(kube, namespace, "first", shim) == dra_node
    assert "Traceback" not in shim.text()
    # Claims hold three of the four devices: 1 free there, 2 on the GFD node. A shim started
    # now lists the claims before it schedules (no race with their watch events).
    for i in range(3):
        allocated_claim(kube, namespace, dra_node, f"gpu-{i}", name=f"held-{i}")
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim-2.log")
    with running(shim.start()):
        objects.create_pods(kube, [gpu_pod(namespace, "second", profile, "1Gi")])
        assert wait_node_of(kube, namespace, "second", shim) == gfd_node
    assert "Traceback" not in shim.text()
