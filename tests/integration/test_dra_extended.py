"""DRA-backed extended resources (DRAExtendedResource) through ``berth shim`` on a real
kube-apiserver: a DeviceClass names an extended resource no node advertises, a
ResourceSlice publishes two devices on one of two nodes.

* a pod requesting two of that resource is bound to the node with the devices;
* the claim DynamicResources made for it exists, created by the shim (ObjectWrite
  ``create``): annotated as the scheduler's, controlled by the pod, one request for the
  container, both devices allocated, reserved for the pod, with the finalizer;
* the pod's ``status.extendedResourceClaimStatus`` names that claim and maps the
  container's resource to the request;
* run with the plugins inside the shim and behind ``berth serve`` (gRPC).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.errors import ApiError
from berth.kube.rest import KubeApi
from tests.integration.shimtools import (
    Server,
    Shim,
    pod_path,
    profile_for,
    running,
    wait_for,
    wait_unschedulable,
    write_config,
)
from tests.integration.test_dra import DRIVER, FINALIZER, RESOURCE, bound_node, claims_path

pytestmark = pytest.mark.integration


@pytest.fixture
def gpus_on_one_node(
    kube: KubeApi, namespace: str, fake_nodes: NodeFactory
) -> Iterator[tuple[str, str]]:
    """Two nodes; a DeviceClass backing ``<namespace>.berth.dev/gpu``; two devices on
    the second node. Yields (class name, extended resource name)."""
    nodes = fake_nodes(2, cpu="8", memory="16Gi")
    node = nodes[1]["metadata"]["name"]
    device_class = f"ext-gpu-{namespace}"
    resource = f"{namespace}.berth.dev/gpu"
    slice_name = f"{node}-ext-gpu"
    kube.create(
        f"{RESOURCE}/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": device_class},
            "spec": {
                "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}],
                "extendedResourceName": resource,
            },
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
                "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}],
            },
        },
    )
    try:
        yield device_class, resource
    finally:
        for path in (
            f"{RESOURCE}/resourceslices/{slice_name}",
            f"{RESOURCE}/deviceclasses/{device_class}",
        ):
            with contextlib.suppress(ApiError):
                kube.delete(path)


@pytest.mark.parametrize("mode", ["in-process", "grpc"])
@pytest.mark.timeout(240)
def test_the_scheduler_makes_the_claim_for_an_extended_resource_a_class_backs(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    gpus_on_one_node: tuple[str, str],
    tmp_path: Path,
    mode: str,
) -> None:
    device_class, resource = gpus_on_one_node
    profile = profile_for(namespace)
    config = write_config(tmp_path / "scheduler-config.yaml", profile)
    want_node = f"{namespace}-node-1"
    server = Server(config, tmp_path / "server.log").start() if mode == "grpc" else None
    with running(*([server] if server is not None else [])):
        shim = Shim(
            config,
            cluster.kubeconfig,
            tmp_path / "shim.log",
            server=server.address if server is not None else None,
        )
        with running(shim.start()):
            pod = objects.pod(
                "ext",
                namespace=namespace,
                scheduler_name=profile,
                node_selector={TEST_LABEL: namespace},
                extended={resource: "2"},
            )
            objects.create_pods(kube, [pod])
            wait_for(lambda: bool(bound_node(kube, namespace, "ext")), 90, "ext bound", shim.log)
            assert bound_node(kube, namespace, "ext") == want_node
            got_pod = kube.get(pod_path(namespace, "ext"))
            uid = got_pod["metadata"]["uid"]
            status = got_pod["status"]["extendedResourceClaimStatus"]
            name = status["resourceClaimName"]
            assert (
                name.startswith("ext-extended-resources-")
                and len(name) == len("ext-extended-resources-") + 5
            )
            # The request's place among the container's request names, sorted
            # (cpu, memory, the resource): createResourceRequestAndMappings.
            assert status["requestMappings"] == [
                {
                    "containerName": "pause",
                    "resourceName": resource,
                    "requestName": "container-0-request-2",
                }
            ]
            claim = kube.get(claims_path(namespace, name))
            meta = claim["metadata"]
            assert meta["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
            assert [
                (o["kind"], o["name"], o["uid"], o.get("controller"))
                for o in meta["ownerReferences"]
            ] == [("Pod", "ext", uid, True)]
            assert FINALIZER in meta["finalizers"]
            (request,) = claim["spec"]["devices"]["requests"]
            assert request["name"] == "container-0-request-2"
            assert (request["exactly"]["deviceClassName"], request["exactly"]["count"]) == (
                device_class,
                2,
            )
            results = claim["status"]["allocation"]["devices"]["results"]
            assert sorted((r["pool"], r["device"]) for r in results) == [
                (want_node, "gpu-0"),
                (want_node, "gpu-1"),
            ]
            assert claim["status"]["reservedFor"] == [
                {"resource": "pods", "name": "ext", "uid": uid}
            ]


def _gone(kube: KubeApi, path: str) -> bool:
    try:
        kube.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return True
        raise
    return False


@pytest.mark.timeout(240)
def test_a_claim_an_earlier_cycle_made_is_deleted_by_post_filter(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    gpus_on_one_node: tuple[str, str],
    tmp_path: Path,
) -> None:
    """extended-resource-name-with-resources-has-claim on the real API server: the
    pod's claim from an earlier cycle (with the finalizer) makes Filter reject every
    node; PostFilter removes the finalizer and deletes the claim (ObjectWrite
    ``delete``, its uid the precondition)."""
    device_class, resource = gpus_on_one_node
    profile = profile_for(namespace)
    config = write_config(tmp_path / "scheduler-config.yaml", profile)
    pod = objects.pod(
        "stale",
        namespace=namespace,
        scheduler_name=profile,
        node_selector={TEST_LABEL: namespace},
        extended={resource: "1"},
    )
    objects.create_pods(kube, [pod])
    uid = kube.get(pod_path(namespace, "stale"))["metadata"]["uid"]
    name = "stale-extended-resources-bcdfg"
    kube.create(
        claims_path(namespace),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": name,
                "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": "stale",
                        "uid": uid,
                        "controller": True,
                    }
                ],
                "finalizers": [FINALIZER],
            },
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "container-0-request-2",
                            "exactly": {"deviceClassName": device_class, "count": 1},
                        }
                    ]
                }
            },
        },
    )
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log")
    with running(shim.start()):
        path = claims_path(namespace, name)
        wait_for(lambda: _gone(kube, path), 90, "the earlier claim deleted", shim.log)
        cond = wait_unschedulable(kube, namespace, "stale", shim)
        assert "2 cannot schedule extended resource claim" in cond["message"], cond
