"""DynamicResources' binding conditions (DRADeviceBindingConditions, beta and on in
v1.36) through ``berth shim`` on a real kube-apiserver: the one device of the test's
ResourceSlice binds to its node and has the binding condition ``attached`` and the
failure condition ``failed`` (what a fabric-attached device's driver publishes).

* PreBind writes the claim's allocation and reservation, then the pod stays unbound,
  nominated to the node, while the shim calls PreBind again every 5 s (upstream's
  PreBind polls as often); once the test, standing in for the driver, sets
  ``attached`` True in the claim's ``status.devices``, the pod is bound there;
* with ``failed`` True instead, PreBind fails with upstream's message, the shim
  unreserves, the next attempt's Filter finds the claim unavailable and PostFilter
  deallocates it, and the pod is retried: its claim allocated again (without the old
  device status) and, once ``attached`` is True, the pod is bound;
* in-process and behind ``berth serve`` (gRPC).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import NodeFactory
from berth.kube.rest import JSON, KubeApi
from tests.integration.shimtools import (
    Server,
    Shim,
    failed_scheduling_notes,
    pod_path,
    profile_for,
    running,
    wait_for,
    write_config,
)
from tests.integration.test_dra import (
    DRIVER,
    bound_node,
    claim,
    claims_path,
    device_on_second_node,
    pod_with_claim,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def attachable_gpu(kube: KubeApi, namespace: str, fake_nodes: NodeFactory) -> Iterator[str]:
    """One device with binding conditions on the second of two nodes."""
    device = {
        "name": "gpu-0",
        "bindsToNode": True,
        "bindingConditions": ["attached"],
        "bindingFailureConditions": ["failed"],
    }
    with device_on_second_node(kube, namespace, fake_nodes, device, "fabric") as device_class:
        yield device_class


def claim_status(kube: KubeApi, namespace: str) -> JSON:
    return dict(kube.get(claims_path(namespace, "gpu-claim")).get("status") or {})


def reserved_for(status: JSON) -> list[str]:
    return [str(r.get("name")) for r in status.get("reservedFor") or []]


def set_conditions(kube: KubeApi, namespace: str, node: str, **conditions: str) -> None:
    """What the device's driver would write: the device's conditions in the claim's
    status.devices."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube.merge_patch(
        claims_path(namespace, "gpu-claim") + "/status",
        {
            "status": {
                "devices": [
                    {
                        "driver": DRIVER,
                        "pool": node,
                        "device": "gpu-0",
                        "conditions": [
                            {
                                "type": kind,
                                "status": value,
                                "reason": kind.capitalize() + value,
                                "message": f"{kind} is {value}",
                                "lastTransitionTime": now,
                            }
                            for kind, value in conditions.items()
                        ],
                    }
                ]
            }
        },
    )


def wait_reserved_and_unbound(kube: KubeApi, namespace: str, shim: Shim) -> None:
    """PreBind wrote the allocation and the reservation; the pod waits, unbound."""
    wait_for(
        lambda: (
            "allocation" in claim_status(kube, namespace)
            and reserved_for(claim_status(kube, namespace)) == ["dra"]
        ),
        90,
        "the claim allocated and reserved for the pod",
        shim.log,
    )
    # Two of the shim's rechecks (every 5 s): the pod is still not bound.
    time.sleep(11)
    assert not bound_node(kube, namespace, "dra")
    assert reserved_for(claim_status(kube, namespace)) == ["dra"]


@pytest.mark.parametrize("mode", ["in-process", "grpc"])
@pytest.mark.timeout(240)
def test_the_pod_is_bound_once_its_devices_binding_conditions_are_true(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    attachable_gpu: str,
    tmp_path: Path,
    mode: str,
) -> None:
    profile = profile_for(namespace)
    config = write_config(tmp_path / "scheduler-config.yaml", profile)
    node = f"{namespace}-node-1"
    kube.create(claims_path(namespace), claim("gpu-claim", attachable_gpu))
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
            wait_reserved_and_unbound(kube, namespace, shim)
            pod = kube.get(pod_path(namespace, "dra"))
            # bindingCycle's NominatedNodeNameForExpectation: PreBind has work.
            assert pod["status"].get("nominatedNodeName") == node, pod["status"]
            (result,) = claim_status(kube, namespace)["allocation"]["devices"]["results"]
            assert result["bindingConditions"] == ["attached"], result
            assert result["bindingFailureConditions"] == ["failed"], result

            set_conditions(kube, namespace, node, attached="True", failed="False")
            wait_for(lambda: bool(bound_node(kube, namespace, "dra")), 30, "dra bound", shim.log)
            assert bound_node(kube, namespace, "dra") == node
            assert reserved_for(claim_status(kube, namespace)) == ["dra"]
            assert not failed_scheduling_notes(kube, namespace, "dra")


@pytest.mark.timeout(240)
def test_a_failed_binding_condition_deallocates_the_claim_and_the_pod_is_retried(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    attachable_gpu: str,
    tmp_path: Path,
) -> None:
    profile = profile_for(namespace)
    config = write_config(tmp_path / "scheduler-config.yaml", profile)
    node = f"{namespace}-node-1"
    kube.create(claims_path(namespace), claim("gpu-claim", attachable_gpu))
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log")
    with running(shim.start()):
        objects.create_pods(kube, [pod_with_claim(namespace, "dra", profile, "gpu-claim")])
        wait_reserved_and_unbound(kube, namespace, shim)
        first = claim_status(kube, namespace)["allocation"]
        set_conditions(kube, namespace, node, attached="False", failed="True")

        # PreBind's next check fails the binding cycle with upstream's message.
        want = (
            'running PreBind plugin "DynamicResources": device binding failed: '
            'claim=gpu-claim, reason=FailedTrue, message="failed is True"'
        )
        wait_for(
            lambda: any(want in n for n in failed_scheduling_notes(kube, namespace, "dra")),
            30,
            "FailedScheduling for the failed binding",
            shim.log,
        )
        assert not bound_node(kube, namespace, "dra")

        # The retry: Filter finds the claim unavailable, PostFilter deallocates it
        # (its device status goes with the allocation, which Unreserve alone would
        # leave); the attempt after that allocates it anew and waits again.
        def allocated_again() -> bool:
            status = claim_status(kube, namespace)
            allocation = status.get("allocation")
            return (
                isinstance(allocation, dict)
                and not status.get("devices")
                and reserved_for(status) == ["dra"]
            )

        wait_for(allocated_again, 60, "the claim deallocated, then allocated again", shim.log)
        assert claim_status(kube, namespace)["allocation"]["devices"] == first["devices"]
        assert not bound_node(kube, namespace, "dra")

        set_conditions(kube, namespace, node, attached="True", failed="False")
        wait_for(lambda: bool(bound_node(kube, namespace, "dra")), 30, "dra bound", shim.log)
        assert bound_node(kube, namespace, "dra") == node
