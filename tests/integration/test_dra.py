"""DynamicResources through ``berth shim`` on a real kube-apiserver: a DeviceClass
(a CEL selector), a ResourceSlice publishing one device on one of two nodes, and
ResourceClaims by name.

* the pod whose claim the device satisfies is bound to the node that has it, and the
  claim's ``status.allocation`` (that device, the node selector) and ``reservedFor``
  (the pod) are written, with the allocation finalizer;
* a second pod whose claim asks for the same (now taken) device stays pending with
  upstream's FailedScheduling text, and is never bound;
* run with the plugins inside the shim and behind ``berth serve`` (gRPC);
* a binding that fails after PreBind's writes (refused by a fault-injecting proxy)
  leaves the claim allocated but without the pod in ``reservedFor`` (Unreserve).

Pods select this test's nodes (``berth.dev/test=<namespace>``): nodes, classes and
slices are cluster-wide, so they carry the namespace in their names.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi
from tests.integration.faultproxy import BINDING, Fault, fault_proxy
from tests.integration.shimtools import (
    Server,
    Shim,
    failed_scheduling_notes,
    pod_path,
    profile_for,
    running,
    wait_for,
    wait_unschedulable,
    write_config,
)

pytestmark = pytest.mark.integration

RESOURCE = "/apis/resource.k8s.io/v1"
DRIVER = "gpu.berth.dev"
FINALIZER = "resource.kubernetes.io/delete-protection"


def claims_path(namespace: str, name: str = "") -> str:
    base = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
    return f"{base}/{name}" if name else base


def claim(name: str, device_class: str) -> JSON:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {"deviceClassName": device_class, "count": 1},
                    }
                ]
            }
        },
    }


def pod_with_claim(namespace: str, name: str, profile: str, claim_name: str) -> JSON:
    pod = objects.pod(
        name,
        namespace=namespace,
        scheduler_name=profile,
        node_selector={TEST_LABEL: namespace},
    )
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    return pod


@contextlib.contextmanager
def device_on_second_node(
    kube: KubeApi, namespace: str, fake_nodes: NodeFactory, device: JSON, slice_suffix: str
) -> Iterator[str]:
    """Two nodes; a DeviceClass selecting this test's driver by CEL; one ResourceSlice
    on the second node publishing ``device``. Yields the DeviceClass name; the class and
    the slice are deleted afterwards."""
    nodes = fake_nodes(2, cpu="8", memory="16Gi")
    node = nodes[1]["metadata"]["name"]
    device_class = f"gpu-{namespace}"
    slice_name = f"{node}-{slice_suffix}"
    kube.create(
        f"{RESOURCE}/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": device_class},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
    )
    kube.create(
        f"{RESOURCE}/resourceslices",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": slice_name},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [device],
            },
        },
    )
    try:
        yield device_class
    finally:
        for path in (
            f"{RESOURCE}/resourceslices/{slice_name}",
            f"{RESOURCE}/deviceclasses/{device_class}",
        ):
            with contextlib.suppress(ApiError):
                kube.delete(path)


@pytest.fixture
def gpu_on_one_node(kube: KubeApi, namespace: str, fake_nodes: NodeFactory) -> Iterator[str]:
    """One plain device (16Gi of memory) on the second of two nodes."""
    device = {
        "name": "gpu-0",
        "attributes": {"model": {"string": "test"}},
        "capacity": {"memory": {"value": "16Gi"}},
    }
    with device_on_second_node(kube, namespace, fake_nodes, device, "gpu") as device_class:
        yield device_class


def bound_node(kube: KubeApi, namespace: str, name: str) -> str:
    return str(kube.get(pod_path(namespace, name))["spec"].get("nodeName") or "")


@pytest.mark.parametrize("mode", ["in-process", "grpc"])
@pytest.mark.timeout(240)
def test_claim_is_allocated_on_the_one_node_with_the_device_and_a_second_claim_waits(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    gpu_on_one_node: str,
    tmp_path: Path,
    mode: str,
) -> None:
    device_class = gpu_on_one_node
    profile = profile_for(namespace)
    config = write_config(tmp_path / "scheduler-config.yaml", profile)
    want_node = f"{namespace}-node-1"
    for name in ("gpu-claim", "gpu-claim-2"):
        kube.create(claims_path(namespace), claim(name, device_class))
    server = Server(config, tmp_path / "server.log").start() if mode == "grpc" else None
    with running(*([server] if server is not None else [])):
        shim = Shim(
            config,
            cluster.kubeconfig,
            tmp_path / "shim.log",
            server=server.address if server is not None else None,
        )
        with running(shim.start()):
            objects.create_pods(kube, [pod_with_claim(namespace, "dra", profile, "gpu-claim")])
            wait_for(lambda: bool(bound_node(kube, namespace, "dra")), 90, "dra bound", shim.log)
            assert bound_node(kube, namespace, "dra") == want_node
            pod_uid = kube.get(pod_path(namespace, "dra"))["metadata"]["uid"]
            got = kube.get(claims_path(namespace, "gpu-claim"))
            allocation = got["status"]["allocation"]
            (result,) = allocation["devices"]["results"]
            assert (result["driver"], result["pool"], result["device"], result["request"]) == (
                DRIVER,
                want_node,
                "gpu-0",
                "gpu",
            )
            terms = allocation["nodeSelector"]["nodeSelectorTerms"]
            assert terms == [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [want_node]}]}
            ]
            assert allocation.get("allocationTimestamp")
            assert got["status"]["reservedFor"] == [
                {"resource": "pods", "name": "dra", "uid": pod_uid}
            ]
            assert FINALIZER in got["metadata"]["finalizers"]

            # The one device is taken: the second claim fits nowhere.
            objects.create_pods(kube, [pod_with_claim(namespace, "dra-2", profile, "gpu-claim-2")])
            cond = wait_unschedulable(kube, namespace, "dra-2", shim)
            message = cond["message"]
            # FitError: both of this test's nodes are rejected by the allocator
            # (other tests' nodes, if any, by NodeAffinity), then
            # DynamicResources' PostFilter and DefaultPreemption's.
            assert "2 cannot allocate all claims" in message, message
            assert ". still not schedulable, preemption: " in message, message
            notes = failed_scheduling_notes(kube, namespace, "dra-2")
            assert notes and "2 cannot allocate all claims" in notes[0], notes
            assert not bound_node(kube, namespace, "dra-2")
            assert "allocation" not in kube.get(claims_path(namespace, "gpu-claim-2")).get(
                "status", {}
            )


@pytest.mark.timeout(180)
def test_a_binding_that_fails_after_pre_bind_unreserves_the_claim(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    gpu_on_one_node: str,
    tmp_path: Path,
) -> None:
    """dynamicresources.go Unreserve: every binding of the pod is refused (403) after
    PreBind reserved the claim for it; Unreserve takes the pod out of the claim's
    reservedFor (the shim performs the write), so while the pod waits for its retry the
    claim is allocated and reserved for nobody. Once bindings go through, the pod is
    bound and the claim reserved for it again."""
    profile = profile_for(namespace)
    config = write_config(tmp_path / "scheduler-config.yaml", profile)
    kube.create(claims_path(namespace), claim("gpu-claim", gpu_on_one_node))
    with fault_proxy(cluster, tmp_path / "proxy") as proxy:
        refused = proxy.add(Fault("POST", BINDING, "answer", 403, times=2))
        shim = Shim(config, proxy.kubeconfig, tmp_path / "shim.log")
        with running(shim.start()):
            objects.create_pods(kube, [pod_with_claim(namespace, "dra", profile, "gpu-claim")])
            pod_uid = kube.get(pod_path(namespace, "dra"))["metadata"]["uid"]

            def status() -> JSON:
                return dict(kube.get(claims_path(namespace, "gpu-claim")).get("status") or {})

            wait_for(lambda: len(refused.hits) >= 1, 60, "a binding refused", shim.log)
            wait_for(
                lambda: "allocation" in status() and not status().get("reservedFor"),
                30,
                "the claim unreserved after the failed binding",
                shim.log,
            )
            assert not bound_node(kube, namespace, "dra")
            wait_for(lambda: bool(bound_node(kube, namespace, "dra")), 90, "dra bound", shim.log)
            assert status()["reservedFor"] == [{"resource": "pods", "name": "dra", "uid": pod_uid}]


@pytest.mark.timeout(180)
def test_a_pod_created_before_its_claim_stays_gated_until_the_claim_exists(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    gpu_on_one_node: str,
    tmp_path: Path,
) -> None:
    """dynamicresources.go PreEnqueue (foreachPodResourceClaim): a pod whose
    ResourceClaim does not exist yet is kept out of the active queue with upstream's
    message (the shim asks PreEnqueue with the cluster state), not tried and reported
    unschedulable; creating the claim (a ResourceClaim add event, whose hint names the
    pod's claim) moves it, and it is scheduled."""
    profile = profile_for(namespace)
    config = write_config(tmp_path / "scheduler-config.yaml", profile)
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log")
    with running(shim.start()):
        objects.create_pods(kube, [pod_with_claim(namespace, "early", profile, "late-claim")])
        gated = (
            f"pod {namespace}/early gated by DynamicResources: "
            f'could not find ResourceClaim "{namespace}/late-claim"'
        )
        wait_for(lambda: gated in shim.text(), 60, "the pod gated by PreEnqueue", shim.log)
        time.sleep(2)
        pod = kube.get(pod_path(namespace, "early"))
        assert not pod["spec"].get("nodeName")
        # Gated, not tried: no FailedScheduling, no PodScheduled condition from the shim.
        assert not failed_scheduling_notes(kube, namespace, "early")
        assert shim.metric("scheduler_pending_pods", queue="gated") >= 1

        kube.create(claims_path(namespace), claim("late-claim", gpu_on_one_node))
        wait_for(lambda: bool(bound_node(kube, namespace, "early")), 60, "early bound", shim.log)
        assert bound_node(kube, namespace, "early") == f"{namespace}-node-1"
        assert not failed_scheduling_notes(kube, namespace, "early")
