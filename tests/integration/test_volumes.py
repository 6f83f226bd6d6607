"""VolumeBinding through ``berth shim`` on a real kube-apiserver + etcd, with the
default profile (VolumeBinding is one of upstream's default plugins):

* a pod whose claim is bound to a PV with node affinity goes to the node the PV allows,
  though NodeResourcesFit alone would prefer the other, roomier node;
* a pod with an unbound claim of an Immediate StorageClass stays unschedulable with
  upstream's message, ``pod has unbound immediate PersistentVolumeClaims``;
* a pod with a WaitForFirstConsumer claim and a matching static PV: PreBind's write
  lands (the PV's ``spec.claimRef`` names the claim, with its uid, and the PV carries
  ``pv.kubernetes.io/bound-by-controller``) and the pod is bound to the node the PV
  allows; two pods with a claim each never get the same PV (Reserve's assumption).

The local cluster's kube-controller-manager runs the PV controller, which completes the
claims' binding after the scheduler's writes (Berth does not wait for it;
plugins/volumebinding/README.md); the tests set a PV's ``status.phase`` themselves as well,
so a pod never waits for the controller's first pass. What they check holds either way: the
Immediate claim has no volume it could bind to, and the scheduler's own writes (claimRef,
bound-by-controller) stay as it made them. PVs, StorageClasses and the protection finalizers
the API server adds are cleaned up by the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi, segment
from tests.integration.shimtools import (
    Shim,
    node_names,
    profile_for,
    running,
    wait_for,
    wait_node_of,
    wait_unschedulable,
    write_config,
)

pytestmark = pytest.mark.integration

PVS = "/api/v1/persistentvolumes"
CLASSES = "/apis/storage.k8s.io/v1/storageclasses"
NO_PROVISIONER = "kubernetes.io/no-provisioner"


def claims_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{segment(namespace)}/persistentvolumeclaims"


def _drop(kube: KubeApi, path: str) -> None:
    """Delete an object at once, clearing the finalizers (kubernetes.io/pv-protection,
    kubernetes.io/pvc-protection) rather than waiting for the protection controllers."""
    try:
        kube.merge_patch(path, {"metadata": {"finalizers": None}})
        kube.delete(path)
    except ApiError as err:
        if err.status != 404:
            raise


Made = Callable[..., JSON]


@pytest.fixture
def storage(kube: KubeApi, namespace: str) -> Iterator[dict[str, Made]]:
    """Builders for the test's StorageClasses, PVs and claims; all removed afterwards."""
    made: list[str] = []

    def storage_class(suffix: str, mode: str) -> JSON:
        body = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": f"{namespace}-{suffix}"},
            "provisioner": NO_PROVISIONER,
            "volumeBindingMode": mode,
        }
        out = kube.create(CLASSES, body)
        made.append(f"{CLASSES}/{out['metadata']['name']}")
        return out

    def volume(
        name: str,
        storage_class: str,
        node: str,
        size: str = "1Gi",
        claim: JSON | None = None,
        available: bool = True,
    ) -> JSON:
        spec: dict[str, Any] = {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "persistentVolumeReclaimPolicy": "Retain",
            "local": {"path": f"/mnt/{name}"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": [node],
                                }
                            ]
                        }
                    ]
                }
            },
        }
        if claim is not None:
            meta = claim["metadata"]
            spec["claimRef"] = {
                "kind": "PersistentVolumeClaim",
                "apiVersion": "v1",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            }
        full = f"{namespace}-{name}"
        body = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": full}}
        body["spec"] = spec
        kube.create(PVS, body)
        made.append(f"{PVS}/{full}")
        if available:
            # The PV controller's job, done here so the scheduler sees the phase at once.
            kube.merge_patch(
                f"{PVS}/{full}/status", {"status": {"phase": "Bound" if claim else "Available"}}
            )
        return kube.get(f"{PVS}/{full}")

    def claim(
        name: str,
        storage_class: str,
        size: str = "1Gi",
        volume_name: str = "",
        annotations: Mapping[str, str] | None = None,
    ) -> JSON:
        spec: dict[str, Any] = {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": size}},
        }
        if volume_name:
            spec["volumeName"] = volume_name
        body = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "annotations": dict(annotations or {})},
            "spec": spec,
        }
        out = kube.create(claims_path(namespace), body)
        made.append(f"{claims_path(namespace)}/{name}")
        return out

    yield {"class": storage_class, "volume": volume, "claim": claim}
    for path in reversed(made):
        _drop(kube, path)


def pod_with_claims(namespace: str, name: str, profile: str, *claims: str) -> JSON:
    pod = objects.pod(
        name,
        namespace=namespace,
        scheduler_name=profile,
        node_selector={TEST_LABEL: namespace},
    )
    pod["spec"]["volumes"] = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)
    ]
    pod["spec"]["containers"][0]["volumeMounts"] = [
        {"name": f"v{i}", "mountPath": f"/data/{i}"} for i in range(len(claims))
    ]
    return pod


def start_shim(cluster: Cluster, namespace: str, tmp_path: Path) -> tuple[str, Shim]:
    profile = profile_for(namespace)
    config = write_config(tmp_path / "scheduler-config.yaml", profile)
    return profile, Shim(config, cluster.kubeconfig, tmp_path / "shim.log")


def test_bound_claim_goes_where_its_pv_is(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    storage: dict[str, Made],
    tmp_path: Path,
) -> None:
    """checkBoundClaims: the PV's node affinity decides; NodeResourcesFit would pick
    the roomy node."""
    roomy = node_names(fake_nodes(1, prefix="roomy", cpu="64", memory="256Gi"))[0]
    small = node_names(fake_nodes(1, prefix="small", cpu="2", memory="4Gi"))[0]
    wait_mode = storage["class"]("local", "WaitForFirstConsumer")["metadata"]["name"]
    # A claim bound by the PV controller: volumeName and bind-completed.
    claim = storage["claim"](
        "data",
        wait_mode,
        volume_name=f"{namespace}-pv-small",
        annotations={"pv.kubernetes.io/bind-completed": "yes"},
    )
    storage["volume"]("pv-small", wait_mode, small, claim=claim)
    profile, shim = start_shim(cluster, namespace, tmp_path)
    with running(shim.start()):
        objects.create_pods(kube, [pod_with_claims(namespace, "app", profile, "data")])
        assert wait_node_of(kube, namespace, "app", shim) == small
        # A pod without claims still prefers the roomy node: the choice above was the PV's.
        objects.create_pods(
            kube,
            [
                objects.pod(
                    "plain",
                    namespace=namespace,
                    scheduler_name=profile,
                    node_selector={TEST_LABEL: namespace},
                )
            ],
        )
        assert wait_node_of(kube, namespace, "plain", shim) == roomy


def test_unbound_immediate_claim_leaves_the_pod_unschedulable(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    storage: dict[str, Made],
    tmp_path: Path,
) -> None:
    """PreFilter: an Immediate claim the PV controller has not bound yet."""
    fake_nodes(2)
    immediate = storage["class"]("immediate", "Immediate")["metadata"]["name"]
    storage["claim"]("data", immediate)
    profile, shim = start_shim(cluster, namespace, tmp_path)
    with running(shim.start()):
        objects.create_pods(kube, [pod_with_claims(namespace, "app", profile, "data")])
        cond = wait_unschedulable(kube, namespace, "app", shim)
        assert "pod has unbound immediate PersistentVolumeClaims" in cond["message"], cond
        # A claim that does not exist: upstream's lister message.
        objects.create_pods(kube, [pod_with_claims(namespace, "lost", profile, "nope")])
        cond = wait_unschedulable(kube, namespace, "lost", shim)
        assert 'persistentvolumeclaim "nope" not found' in cond["message"], cond


def test_wait_for_first_consumer_claim_gets_a_static_pv_at_pre_bind(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    storage: dict[str, Made],
    tmp_path: Path,
) -> None:
    """findMatchingVolumes + bindAPIUpdate: the only PV big enough is on one node; the
    pod goes there and the PV's claimRef names the claim."""
    roomy = node_names(fake_nodes(1, prefix="roomy", cpu="64", memory="256Gi"))[0]
    small = node_names(fake_nodes(1, prefix="small", cpu="2", memory="4Gi"))[0]
    wait_mode = storage["class"]("local", "WaitForFirstConsumer")["metadata"]["name"]
    storage["volume"]("pv-too-small", wait_mode, roomy, size="1Gi")
    storage["volume"]("pv-fits", wait_mode, small, size="5Gi")
    claim = storage["claim"]("data", wait_mode, size="2Gi")
    profile, shim = start_shim(cluster, namespace, tmp_path)
    with running(shim.start()):
        objects.create_pods(kube, [pod_with_claims(namespace, "app", profile, "data")])
        assert wait_node_of(kube, namespace, "app", shim) == small
        pv = kube.get(f"{PVS}/{namespace}-pv-fits")
        ref = pv["spec"].get("claimRef") or {}
        assert (ref.get("namespace"), ref.get("name"), ref.get("uid")) == (
            namespace,
            "data",
            claim["metadata"]["uid"],
        ), pv["spec"]
        assert ref.get("kind") == "PersistentVolumeClaim"
        assert pv["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"
        untouched = kube.get(f"{PVS}/{namespace}-pv-too-small")
        assert "claimRef" not in untouched["spec"]
        assert "VolumeBinding: pod " in shim.text() and "persistentvolumes" in shim.text()


def test_two_claims_never_get_the_same_pv(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    storage: dict[str, Made],
    tmp_path: Path,
) -> None:
    """Reserve's assumption: pods scheduled one right after the other each take a PV
    of their own, though the smallest fitting PV is the same for both until the
    first one's claimRef lands."""
    only = node_names(fake_nodes(1, cpu="8", memory="16Gi"))[0]
    wait_mode = storage["class"]("local", "WaitForFirstConsumer")["metadata"]["name"]
    for i in range(3):
        storage["volume"](f"pv-{i}", wait_mode, only, size=f"{i + 1}Gi")
    for i in range(2):
        storage["claim"](f"data-{i}", wait_mode, size="1Gi")
    profile, shim = start_shim(cluster, namespace, tmp_path)
    with running(shim.start()):
        objects.create_pods(
            kube, [pod_with_claims(namespace, f"app-{i}", profile, f"data-{i}") for i in range(2)]
        )
        for i in range(2):
            assert wait_node_of(kube, namespace, f"app-{i}", shim) == only

        def refs() -> dict[str, str]:
            out = {}
            for i in range(3):
                ref = kube.get(f"{PVS}/{namespace}-pv-{i}")["spec"].get("claimRef")
                if ref:
                    out[ref["name"]] = f"pv-{i}"
            return out

        wait_for(lambda: len(refs()) == 2, 10, "two PVs with a claimRef", shim.log)
        got = refs()
        assert sorted(got) == ["data-0", "data-1"] and len(set(got.values())) == 2, got
        # The smallest two were taken.
        assert sorted(got.values()) == ["pv-0", "pv-1"], got
        # Each on the first try: the second pod did not pick the first one's PV and
        # lose the race at PreBind (the resourceVersion in the patch would make the
        # API server refuse it with 409, and the pod would be retried).
        text = shim.text()
        assert 'running PreBind plugin "VolumeBinding"' not in text, text[-3000:]
        assert "409 Conflict" not in text, text[-3000:]
