"""The local control plane's kube-controller-manager does what a cluster's does, for the
controllers tests rely on (berth.dev.localcluster.controllers.DEFAULT_CONTROLLERS):

* resourceclaim-controller: a pod naming a ResourceClaimTemplate gets a generated claim made
  from the template, owned by the pod, and named in ``pod.status.resourceClaimStatuses``
  (pkg/controller/resourceclaim/controller.go handleClaim); the garbage collector deletes it
  with the pod;
* replicaset-controller: a ReplicaSet creates its pods, which go with it;
* persistentvolume-binder-controller: an Immediate claim binds to a matching volume.

No scheduler runs here: none of this needs a pod to be bound.
"""

from __future__ import annotations

from typing import Any

import pytest

from berth.dev.localcluster import objects
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi, segment
from tests.integration.shimtools import wait_for

pytestmark = pytest.mark.integration

RESOURCE = "/apis/resource.k8s.io/v1"
NOBODY = "no-such-scheduler"  # pods stay pending: nothing here should depend on binding


def _ns(namespace: str) -> str:
    return f"/api/v1/namespaces/{segment(namespace)}"


def _gone(kube: KubeApi, path: str) -> bool:
    try:
        kube.get(path)
    except ApiError as err:
        if err.status == 404:
            return True
        raise
    return False


def test_a_claim_template_in_a_pod_gives_a_generated_claim_named_in_its_status(
    kube: KubeApi, namespace: str
) -> None:
    devices: dict[str, Any] = {
        "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 2}}]
    }
    template = kube.create(
        f"{RESOURCE}/namespaces/{segment(namespace)}/resourceclaimtemplates",
        {"metadata": {"name": "two-gpus"}, "spec": {"spec": {"devices": devices}}},
    )
    pod = objects.pod("trainer", namespace=namespace, scheduler_name=NOBODY)
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    made = kube.create(f"{_ns(namespace)}/pods", pod)

    def statuses() -> list[JSON]:
        current = kube.get(f"{_ns(namespace)}/pods/trainer")
        return list((current.get("status") or {}).get("resourceClaimStatuses") or [])

    wait_for(lambda: bool(statuses()), 30, "pod.status.resourceClaimStatuses")
    (status,) = statuses()
    assert status["name"] == "gpus"
    claim_name = status["resourceClaimName"]
    assert claim_name.startswith("trainer-gpus-"), status
    claim_path = f"{RESOURCE}/namespaces/{segment(namespace)}/resourceclaims/{claim_name}"
    claim = kube.get(claim_path)
    # The template as stored (the API server defaulted allocationMode), copied as it is.
    assert claim["spec"] == template["spec"]["spec"]
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2
    # Which pod claim it was made for, and by whom it goes (controller.go handleClaim).
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpus"
    (owner,) = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Pod",
        "trainer",
        made["metadata"]["uid"],
        True,
    )

    kube.delete(f"{_ns(namespace)}/pods/trainer", gracePeriodSeconds=0)
    wait_for(lambda: _gone(kube, claim_path), 30, f"generated claim {claim_name} deleted")


def test_a_replica_set_creates_its_pods_and_they_go_with_it(kube: KubeApi, namespace: str) -> None:
    template = objects.pod("unused", namespace=namespace, scheduler_name=NOBODY)
    rs_path = f"/apis/apps/v1/namespaces/{segment(namespace)}/replicasets"
    kube.create(
        rs_path,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": template["spec"],
                },
            },
        },
    )
    pods = objects.wait_for_pods(
        kube, namespace, lambda p: True, count=3, label_selector="app=web", timeout=30
    )
    assert all(p["metadata"]["ownerReferences"][0]["name"] == "web" for p in pods.values()), pods
    assert all(not objects.is_bound(p) for p in pods.values())

    kube.delete(f"{rs_path}/web", propagationPolicy="Background")

    def pods_left() -> int:
        listed = kube.get(f"{_ns(namespace)}/pods", labelSelector="app=web")
        return len(listed["items"])

    wait_for(lambda: pods_left() == 0, 30, "the ReplicaSet's pods deleted with it")


def test_an_immediate_claim_binds_to_a_matching_volume(kube: KubeApi, namespace: str) -> None:
    storage_class = f"{namespace}-immediate"
    volume = f"{namespace}-pv"
    kube.create(
        "/apis/storage.k8s.io/v1/storageclasses",
        {
            "metadata": {"name": storage_class},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "Immediate",
        },
    )
    try:
        kube.create(
            "/api/v1/persistentvolumes",
            {
                "metadata": {"name": volume},
                "spec": {
                    "capacity": {"storage": "2Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": storage_class,
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": f"/tmp/{volume}"},
                },
            },
        )
        kube.create(
            f"{_ns(namespace)}/persistentvolumeclaims",
            {
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": storage_class,
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
        )

        def phases() -> tuple[str, str, str]:
            claim = kube.get(f"{_ns(namespace)}/persistentvolumeclaims/data")
            pv = kube.get(f"/api/v1/persistentvolumes/{volume}")
            return (
                str(claim["spec"].get("volumeName") or ""),
                str((claim.get("status") or {}).get("phase")),
                str((pv.get("status") or {}).get("phase")),
            )

        wait_for(lambda: phases() == (volume, "Bound", "Bound"), 30, "claim bound to the PV")
    finally:
        kube.delete(f"{_ns(namespace)}/persistentvolumeclaims/data")
        kube.delete(f"/api/v1/persistentvolumes/{volume}")
        kube.delete(f"/apis/storage.k8s.io/v1/storageclasses/{storage_class}")
        # The protection controllers release both once nothing uses them.
        wait_for(
            lambda: _gone(kube, f"/api/v1/persistentvolumes/{volume}"),
            30,
            f"volume {volume} deleted (pv-protection finalizer removed)",
        )
