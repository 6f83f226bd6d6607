"""Dynamic Resource Allocation at volume on a real API server: 100 nodes whose DRA driver
publishes 10 devices each (one ResourceSlice per node), 1000 pods with one ResourceClaim each,
all created at once. There are exactly as many devices as claims, so any device given twice
leaves some pod without one.

What must hold afterwards, for kube-scheduler (the reference: the test itself is right) and for
Berth: every pod is bound, exactly once (one Scheduled event, no series); every claim is
allocated one device, on the node its pod was bound to, and reserved for that pod; no device
is in two allocations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from berth.dev.localcluster import Cluster, objects, start_kube_scheduler
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi, segment
from tests.integration.shimtools import (
    Shim,
    profile_for,
    running,
    wait_all_bound,
    wait_scheduled_events,
    write_config,
)

pytestmark = pytest.mark.integration

NODES = 100
DEVICES_PER_NODE = 10
PODS = NODES * DEVICES_PER_NODE
RESOURCE = "/apis/resource.k8s.io/v1"
BIND_TIMEOUT = 900.0


def _driver(namespace: str) -> str:
    """A driver of this test alone, so no other test's slices count."""
    return f"scale-{namespace[-6:]}.example.com"


@pytest.fixture
def devices(kube: KubeApi, namespace: str, fake_nodes: NodeFactory) -> Iterator[str]:
    """The nodes, one ResourceSlice per node with its devices, and a DeviceClass of the
    test's driver; yields the class name. Slices and class are removed afterwards."""
    driver = _driver(namespace)
    nodes = fake_nodes(NODES, cpu="64", memory="256Gi", pods=DEVICES_PER_NODE + 5)
    slices: list[JSON] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node['metadata']['name']}-gpus"},
            "spec": {
                "driver": driver,
                "nodeName": node["metadata"]["name"],
                "pool": {
                    "name": node["metadata"]["name"],
                    "generation": 1,
                    "resourceSliceCount": 1,
                },
                "devices": [
                    {
                        "name": f"gpu-{i}",
                        "attributes": {"index": {"int": i}},
                        "capacity": {"memory": {"value": "40Gi"}},
                    }
                    for i in range(DEVICES_PER_NODE)
                ],
            },
        }
        for node in nodes
    ]
    device_class = f"{namespace}-gpu"
    kube.create(
        f"{RESOURCE}/deviceclasses",
        {
            "metadata": {"name": device_class},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
    )
    try:
        objects.run_concurrently(
            lambda s: kube.create(f"{RESOURCE}/resourceslices", s),
            slices,
            what="ResourceSlice creations",
            key=lambda s: str(s["metadata"]["name"]),
        )
        yield device_class
    finally:
        for s in slices:
            try:
                kube.delete(f"{RESOURCE}/resourceslices/{segment(s['metadata']['name'])}")
            except ApiError as err:
                if err.status != 404:
                    raise
        kube.delete(f"{RESOURCE}/deviceclasses/{segment(device_class)}")


def _claims_path(namespace: str) -> str:
    return f"{RESOURCE}/namespaces/{segment(namespace)}/resourceclaims"


def _make_claims_and_pods(kube: KubeApi, namespace: str, device_class: str, profile: str) -> None:
    claims: list[JSON] = [
        {
            "metadata": {"name": f"gpu-{i:04d}", "namespace": namespace},
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]
                }
            },
        }
        for i in range(PODS)
    ]
    objects.run_concurrently(
        lambda c: kube.create(_claims_path(namespace), c),
        claims,
        what="ResourceClaim creations",
        key=lambda c: str(c["metadata"]["name"]),
    )
    pods = []
    for i in range(PODS):
        pod = objects.pod(
            f"p-{i:04d}",
            namespace=namespace,
            cpu="100m",
            memory="64Mi",
            scheduler_name=profile,
            node_selector={TEST_LABEL: namespace},
        )
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"gpu-{i:04d}"}]
        pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
        pods.append(pod)
    objects.create_pods(kube, pods)


def _check(kube: KubeApi, namespace: str) -> None:
    bound = wait_all_bound(kube, namespace, PODS, timeout=BIND_TIMEOUT)
    node_of = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in bound}
    uid_of = {p["metadata"]["name"]: p["metadata"]["uid"] for p in bound}
    assert len(node_of) == PODS

    events = wait_scheduled_events(kube, namespace, PODS, timeout=120)
    twice = {pod: n for pod, n in events.items() if n != 1}
    assert len(events) == PODS and not twice, (len(events), twice)

    claims = {c["metadata"]["name"]: c for c in kube.get(_claims_path(namespace))["items"]}
    taken: Counter[tuple[str, str, str]] = Counter()
    wrong: list[str] = []
    for i in range(PODS):
        pod = f"p-{i:04d}"
        claim = claims[f"gpu-{i:04d}"]
        status: dict[str, Any] = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        reserved = [(r.get("name"), r.get("uid")) for r in status.get("reservedFor") or ()]
        if len(results) != 1 or reserved != [(pod, uid_of[pod])]:
            wrong.append(f"{claim['metadata']['name']}: {results} reserved for {reserved}")
            continue
        result = results[0]
        taken[(result["driver"], result["pool"], result["device"])] += 1
        # One slice per node, its pool named after the node: the device is on the pod's node.
        if result["pool"] != node_of[pod]:
            wrong.append(f"{pod} on {node_of[pod]} got {result['pool']}/{result['device']}")
    assert not wrong, wrong[:10]
    given_twice = {d: n for d, n in taken.items() if n > 1}
    assert not given_twice, given_twice
    assert len(taken) == PODS


@pytest.mark.parametrize("scheduler", ["kube-scheduler", "berth"])
def test_a_thousand_claims_on_a_hundred_nodes_get_a_device_each_once(
    scheduler: str,
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    devices: str,
    tmp_path: Path,
) -> None:
    profile = profile_for(namespace)
    if scheduler == "kube-scheduler":
        with start_kube_scheduler(
            cluster, tmp_path / "kube-scheduler", scheduler_name=profile, qps=1000, burst=1000
        ):
            _make_claims_and_pods(kube, namespace, devices, profile)
            _check(kube, namespace)
        return
    shim = Shim(
        write_config(tmp_path / "config.yaml", profile), cluster.kubeconfig, tmp_path / "shim.log"
    )
    with running(shim.start()):
        _make_claims_and_pods(kube, namespace, devices, profile)
        _check(kube, namespace)
