"""NodeVolumeLimits, VolumeZone and VolumeRestrictions in the default profile through
``berth shim`` on a real kube-apiserver:

* a CSINode's attach limit keeps a pod off the node whose limit its volumes would
  exceed, though the scores favour that node; with every node full the pod is reported
  unschedulable with upstream's ``node(s) exceed max volume count``, and deleting the pod
  that holds a volume lets it in;
* a pod whose claim is bound to a PersistentVolume in one zone lands in that zone, though
  the scores favour the other; a volume in a zone no node has makes it unschedulable with
  ``node(s) had no available volume zone``;
* a ReadWriteOncePod claim in use keeps its second user pending, and an inline GCE PD
  mounted by a pod keeps the next pod mounting it off that node.

There is no PV controller or kubelet: claims are created pre-bound (``spec.volumeName``),
which is what the plugins read. VolumeBinding is disabled in the profile, since it would
want to bind those claims itself; the other default plugins run. Pods select this test's
nodes (``berth.dev/test=<namespace>``); cluster-scoped objects (PVs, CSINodes) are named
after the namespace and deleted afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi, segment
from tests.integration.shimtools import (
    Shim,
    node_names,
    pod_path,
    profile_for,
    running,
    wait_node_of,
    wait_unschedulable,
    write_config,
)

pytestmark = pytest.mark.integration

DRIVER = "ebs.csi.aws.com"
ZONE = "topology.kubernetes.io/zone"
# The default plugins, less VolumeBinding (see the module docstring).
WITHOUT_VOLUME_BINDING = (
    "    plugins:\n      multiPoint:\n        disabled:\n          - name: VolumeBinding\n"
)

ClusterObjects = Callable[[str, JSON], JSON]


@pytest.fixture
def cluster_objects(kube: KubeApi) -> Iterator[ClusterObjects]:
    """``create(collection_path, body)`` for cluster-scoped objects, deleted afterwards."""
    created: list[str] = []

    def create(path: str, body: JSON) -> JSON:
        obj = kube.create(path, body)
        created.append(f"{path}/{segment(obj['metadata']['name'])}")
        return obj

    yield create
    for path in reversed(created):
        try:
            kube.delete(path)
        except ApiError as err:
            if err.status != 404:
                raise


def csi_pv(name: str, handle: str, labels: dict[str, str] | None = None) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "csi": {"driver": DRIVER, "volumeHandle": handle},
        },
    }


def claim(name: str, volume: str, modes: tuple[str, ...] = ("ReadWriteOnce",)) -> JSON:
    """A claim pre-bound to ``volume`` (no class, so no default class is put on it)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "accessModes": list(modes),
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "",
            "volumeName": volume,
        },
    }


def csi_node(node: str, limit: int) -> JSON:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": node},
        "spec": {"drivers": [{"name": DRIVER, "nodeID": node, "allocatable": {"count": limit}}]},
    }


def volume_pod(
    namespace: str, name: str, claim_name: str, profile: str, node_name: str | None = None
) -> JSON:
    """A pod of the test's profile that mounts ``claim_name`` and selects the test's nodes
    (or is bound to ``node_name`` at creation)."""
    pod = objects.pod(
        name,
        namespace=namespace,
        scheduler_name=profile,
        node_selector={TEST_LABEL: namespace},
        node_name=node_name,
    )
    pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
    return pod


def create_pv_and_claim(
    kube: KubeApi,
    cluster_objects: ClusterObjects,
    namespace: str,
    name: str,
    *,
    labels: dict[str, str] | None = None,
    modes: tuple[str, ...] = ("ReadWriteOnce",),
) -> str:
    """A CSI PV ``<namespace>-<name>`` and the claim ``name`` bound to it."""
    pv = f"{namespace}-{name}"
    cluster_objects("/api/v1/persistentvolumes", csi_pv(pv, f"handle-{pv}", labels))
    kube.create(
        f"/api/v1/namespaces/{segment(namespace)}/persistentvolumeclaims",
        claim(name, pv, modes),
    )
    return name


def start_shim(cluster: Cluster, namespace: str, tmp_path: Path) -> tuple[Shim, str]:
    profile = profile_for(namespace)
    config = write_config(tmp_path / "config.yaml", profile, extra=WITHOUT_VOLUME_BINDING)
    return Shim(config, cluster.kubeconfig, tmp_path / "shim.log").start(), profile


def test_csinode_limit_keeps_a_pod_off_a_full_node(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    cluster_objects: ClusterObjects,
    tmp_path: Path,
) -> None:
    # The roomy node wins every score; its CSI driver can attach one volume.
    roomy = node_names(fake_nodes(1, prefix="roomy", cpu="64", memory="256Gi"))[0]
    small = node_names(fake_nodes(1, prefix="small", cpu="4", memory="8Gi"))[0]
    cluster_objects("/apis/storage.k8s.io/v1/csinodes", csi_node(roomy, 1))
    cluster_objects("/apis/storage.k8s.io/v1/csinodes", csi_node(small, 1))
    for i in range(3):
        create_pv_and_claim(kube, cluster_objects, namespace, f"data-{i}")

    shim, profile = start_shim(cluster, namespace, tmp_path)
    with running(shim):
        # The roomy node's one volume slot is taken by a pod already running there.
        objects.create_pods(
            kube, [volume_pod(namespace, "holder", "data-0", profile, node_name=roomy)]
        )
        objects.create_pods(kube, [volume_pod(namespace, "second", "data-1", profile)])
        assert wait_node_of(kube, namespace, "second", shim) == small

        # Both nodes are at their limit now.
        objects.create_pods(kube, [volume_pod(namespace, "third", "data-2", profile)])
        cond = wait_unschedulable(kube, namespace, "third", shim)
        assert "0/2 nodes are available: 2 node(s) exceed max volume count." in cond["message"]

        # Deleting the holder frees the roomy node's slot: the pod goes there.
        objects.delete_pods(kube, namespace, ["holder"])
        assert wait_node_of(kube, namespace, "third", shim) == roomy


def test_shared_volume_counts_once_against_the_limit(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    cluster_objects: ClusterObjects,
    tmp_path: Path,
) -> None:
    """A second pod of a volume already attached to the node adds nothing to its count."""
    node = node_names(fake_nodes(1, prefix="n", cpu="8", memory="16Gi"))[0]
    cluster_objects("/apis/storage.k8s.io/v1/csinodes", csi_node(node, 1))
    create_pv_and_claim(kube, cluster_objects, namespace, "shared", modes=("ReadWriteMany",))
    shim, profile = start_shim(cluster, namespace, tmp_path)
    with running(shim):
        objects.create_pods(
            kube, [volume_pod(namespace, "first", "shared", profile, node_name=node)]
        )
        objects.create_pods(kube, [volume_pod(namespace, "again", "shared", profile)])
        assert wait_node_of(kube, namespace, "again", shim) == node


def test_volume_zone_keeps_a_pod_in_its_volume_zone(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    cluster_objects: ClusterObjects,
    tmp_path: Path,
) -> None:
    # Zone a's node wins every score.
    fake_nodes(1, prefix="zone-a", cpu="64", memory="256Gi", labels={ZONE: "zone-a"})
    in_b = node_names(
        fake_nodes(1, prefix="zone-b", cpu="4", memory="8Gi", labels={ZONE: "zone-b"})
    )[0]
    create_pv_and_claim(kube, cluster_objects, namespace, "in-b", labels={ZONE: "zone-b"})
    create_pv_and_claim(kube, cluster_objects, namespace, "in-c", labels={ZONE: "zone-c"})

    shim, profile = start_shim(cluster, namespace, tmp_path)
    with running(shim):
        objects.create_pods(kube, [volume_pod(namespace, "follows-b", "in-b", profile)])
        assert wait_node_of(kube, namespace, "follows-b", shim) == in_b

        objects.create_pods(kube, [volume_pod(namespace, "wants-c", "in-c", profile)])
        cond = wait_unschedulable(kube, namespace, "wants-c", shim)
        assert (
            "0/2 nodes are available: 2 node(s) had no available volume zone." in (cond["message"])
        )


def test_read_write_once_pod_claim_in_use_keeps_the_second_user_pending(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    cluster_objects: ClusterObjects,
    tmp_path: Path,
) -> None:
    nodes = node_names(fake_nodes(2, cpu="8", memory="16Gi"))
    create_pv_and_claim(kube, cluster_objects, namespace, "exclusive", modes=("ReadWriteOncePod",))
    shim, profile = start_shim(cluster, namespace, tmp_path)
    with running(shim):
        objects.create_pods(kube, [volume_pod(namespace, "owner", "exclusive", profile)])
        assert wait_node_of(kube, namespace, "owner", shim) in nodes

        objects.create_pods(kube, [volume_pod(namespace, "intruder", "exclusive", profile)])
        cond = wait_unschedulable(kube, namespace, "intruder", shim)
        assert (
            "0/2 nodes are available: 2 node(s) unavailable due to PersistentVolumeClaim with "
            "ReadWriteOncePod access mode already in-use by another pod." in cond["message"]
        )
        assert not kube.get(pod_path(namespace, "intruder"))["spec"].get("nodeName")


def test_inline_disk_in_use_keeps_the_second_pod_off_its_node(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
) -> None:
    """VolumeRestrictions on an inline GCE PD (Pod.volumes[].source_json end to end)."""
    roomy = node_names(fake_nodes(1, prefix="roomy", cpu="64", memory="256Gi"))[0]
    small = node_names(fake_nodes(1, prefix="small", cpu="4", memory="8Gi"))[0]
    shim, profile = start_shim(cluster, namespace, tmp_path)

    def disk_pod(name: str, node_name: str | None = None) -> JSON:
        pod = volume_pod(namespace, name, "unused", profile, node_name=node_name)
        pod["spec"]["volumes"] = [
            {"name": "disk", "gcePersistentDisk": {"pdName": f"{namespace}-disk"}}
        ]
        return pod

    with running(shim):
        objects.create_pods(kube, [disk_pod("holder", roomy)])
        objects.create_pods(kube, [disk_pod("second")])
        assert wait_node_of(kube, namespace, "second", shim) == small
        objects.create_pods(kube, [disk_pod("third")])
        cond = wait_unschedulable(kube, namespace, "third", shim)
        assert "0/2 nodes are available: 2 node(s) had no available disk." in cond["message"]
