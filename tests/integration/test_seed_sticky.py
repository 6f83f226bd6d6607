"""StickyVM (framework-design-and-sticky-node-plugin.md, section 3) through ``berth shim``
on a real kube-apiserver, following the seed's test steps with its configuration
(deploy/examples/stickynode, profile ``stickyvm`` renamed per test):

* 3.4.1, first VM: a ``VirtualMachine`` owns a ``VirtualMachineInstance`` which owns
  the virt-launcher pod; the pod lands where the default plugins put it, and PostBind
  records that node on the VirtualMachine (annotation ``example.com/sticky-node``,
  written by the shim as a merge patch).
* 3.4.2, the pod deleted and created again: the new pod goes only to the recorded
  node, even when the other node scores better; when that node is full it stays
  pending with FailedScheduling naming the reason, and binds there once room is made.
* A VirtualMachine whose recorded node no longer exists: the pod waits, and the
  message names the node and the VirtualMachine.

KubeVirt itself is not installed: deploy/examples/stickynode/kubevirt-crds-for-tests.yaml
defines stand-in VirtualMachine and VirtualMachineInstance kinds (same group, version
and names). The plugin is not mocked: the shim watches those kinds, ships them to the
plugin, and applies the write PostBind returns.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from berth.dev.localcluster import objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi
from tests.integration.shimtools import (
    EXAMPLES,
    Cluster,
    Shim,
    ensure_crds,
    example_config_as,
    failed_scheduling_notes,
    pod_scheduled_condition,
    profile_for,
    running,
    wait_for,
)

pytestmark = pytest.mark.integration

SEED_PROFILE = "stickyvm"
KEY = "example.com/sticky-node"
KUBEVIRT = "/apis/kubevirt.io/v1"


@pytest.fixture(scope="module")
def kubevirt_kinds(kube: KubeApi) -> None:
    ensure_crds(kube, EXAMPLES / "stickynode" / "kubevirt-crds-for-tests.yaml")


class VMs:
    """VirtualMachines and their VirtualMachineInstances in a namespace, deleted at the
    end (no namespace controller runs to delete them)."""

    def __init__(self, kube: KubeApi, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.paths: list[str] = []

    def path(self, resource: str, name: str = "") -> str:
        base = f"{KUBEVIRT}/namespaces/{self.namespace}/{resource}"
        return f"{base}/{name}" if name else base

    def create(self, name: str, node: str | None = None) -> tuple[JSON, JSON]:
        """VirtualMachine ``name`` (recorded node ``node`` when given) and its running
        VirtualMachineInstance, which KubeVirt names after it."""
        meta: JSON = {"name": name}
        if node is not None:
            meta["annotations"] = {KEY: node}
        vm = self.kube.create(
            self.path("virtualmachines"),
            {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": meta},
        )
        self.paths.append(self.path("virtualmachines", name))
        vmi = self.kube.create(
            self.path("virtualmachineinstances"),
            {
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachineInstance",
                "metadata": {
                    "name": name,
                    "ownerReferences": [_controller(vm)],
                },
            },
        )
        self.paths.append(self.path("virtualmachineinstances", name))
        return vm, vmi

    def recorded_node(self, name: str) -> str | None:
        annotations = self.kube.get(self.path("virtualmachines", name))["metadata"].get(
            "annotations", {}
        )
        node = annotations.get(KEY)
        return None if node is None else str(node)

    def delete_all(self) -> None:
        for path in reversed(self.paths):
            with contextlib.suppress(ApiError):
                self.kube.delete(path)


@pytest.fixture
def vms(kube: KubeApi, namespace: str, kubevirt_kinds: None) -> Iterator[VMs]:
    v = VMs(kube, namespace)
    try:
        yield v
    finally:
        v.delete_all()


def _controller(owner: JSON) -> JSON:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def launcher_pod(namespace: str, name: str, profile: str, vmi: JSON, cpu: str = "1") -> JSON:
    """A virt-launcher pod of ``vmi`` for the test's profile on the test's nodes."""
    pod = objects.pod(
        name,
        namespace=namespace,
        cpu=cpu,
        scheduler_name=profile,
        labels={"kubevirt.io": "virt-launcher"},
        node_selector={TEST_LABEL: namespace},
    )
    pod["metadata"]["ownerReferences"] = [_controller(vmi)]
    return pod


def filler_pod(namespace: str, name: str, node: str, cpu: str) -> JSON:
    """A pod already bound to ``node`` (spec.nodeName), taking ``cpu`` of it."""
    return objects.pod(name, namespace=namespace, cpu=cpu, node_name=node)


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def wait_bound(kube: KubeApi, namespace: str, name: str, shim: Shim) -> str:
    path = pod_path(namespace, name)
    wait_for(lambda: bool(kube.get(path)["spec"].get("nodeName")), 60, f"{name} bound", shim.log)
    node: str = kube.get(path)["spec"]["nodeName"]
    return node


def wait_pending_with(kube: KubeApi, namespace: str, name: str, shim: Shim, *parts: str) -> str:
    """Waits until the pod's FailedScheduling event says all of ``parts`` and its
    PodScheduled condition is False/Unschedulable (both written by the shim, apart);
    returns the event's note."""
    found = ""

    def seen() -> bool:
        nonlocal found
        notes = [
            n for n in failed_scheduling_notes(kube, namespace, name) if all(p in n for p in parts)
        ]
        cond = pod_scheduled_condition(kube.get(pod_path(namespace, name)))
        if not notes or cond is None:
            return False
        assert (cond["status"], cond["reason"]) == ("False", "Unschedulable"), cond
        found = notes[0]
        return True

    wait_for(seen, 60, f"FailedScheduling of {name} saying {parts}", shim.log)
    assert not kube.get(pod_path(namespace, name))["spec"].get("nodeName")
    return found


def start_shim(cluster: Cluster, namespace: str, tmp_path: Path) -> Shim:
    config = example_config_as(
        "stickynode", SEED_PROFILE, profile_for(namespace), tmp_path / "scheduler-config.yaml"
    )
    return Shim(config, cluster.kubeconfig, tmp_path / "shim.log").start()


def test_seed_steps_first_vm_recorded_then_the_next_pod_goes_back_even_when_full(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    vms: VMs,
    tmp_path: Path,
) -> None:
    profile = profile_for(namespace)
    node_names = [n["metadata"]["name"] for n in fake_nodes(2, cpu="4", memory="16Gi")]
    _, vmi = vms.create("fedora")
    shim = start_shim(cluster, namespace, tmp_path)
    with running(shim):
        # 3.4.1: the first pod of the VM goes where the other plugins put it; PostBind
        # records that node on the VirtualMachine.
        kube.create(
            f"/api/v1/namespaces/{namespace}/pods",
            launcher_pod(namespace, "virt-launcher-fedora-a", profile, vmi),
        )
        first = wait_bound(kube, namespace, "virt-launcher-fedora-a", shim)
        assert first in node_names
        wait_for(
            lambda: vms.recorded_node("fedora") == first,
            30,
            f"VirtualMachine annotated with {first}",
            shim.log,
        )
        other = next(n for n in node_names if n != first)

        # 3.4.2: the pod is deleted; a busy pod now makes the recorded node the worse
        # one for every default score; the new pod still goes back to it.
        objects.delete_pods(kube, namespace, ["virt-launcher-fedora-a"])
        objects.create_pods(kube, [filler_pod(namespace, "busy", first, cpu="2")])
        kube.create(
            f"/api/v1/namespaces/{namespace}/pods",
            launcher_pod(namespace, "virt-launcher-fedora-b", profile, vmi),
        )
        assert wait_bound(kube, namespace, "virt-launcher-fedora-b", shim) == first
        assert vms.recorded_node("fedora") == first

        # The recorded node is full: the next pod waits, FailedScheduling says why,
        # and the other node, with room, is not used.
        objects.delete_pods(kube, namespace, ["virt-launcher-fedora-b"])
        objects.create_pods(kube, [filler_pod(namespace, "full", first, cpu="2")])
        kube.create(
            f"/api/v1/namespaces/{namespace}/pods",
            launcher_pod(namespace, "virt-launcher-fedora-c", profile, vmi),
        )
        note = wait_pending_with(
            kube,
            namespace,
            "virt-launcher-fedora-c",
            shim,
            "1 Insufficient cpu",
            "node(s) didn't satisfy plugin(s) [StickyVM]",
        )
        assert note.startswith("0/"), note
        # The other node has room all along, and stays unused.
        time.sleep(2)
        pod = kube.get(pod_path(namespace, "virt-launcher-fedora-c"))
        assert not pod["spec"].get("nodeName"), (other, pod["spec"])

        # Room on the recorded node: the pod binds there.
        objects.delete_pods(kube, namespace, ["full"])
        assert wait_bound(kube, namespace, "virt-launcher-fedora-c", shim) == first


def test_recorded_node_gone_the_pod_waits_naming_node_and_vm(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    vms: VMs,
    tmp_path: Path,
) -> None:
    profile = profile_for(namespace)
    fake_nodes(1, cpu="4")
    gone = f"{namespace}-decommissioned"
    _, vmi = vms.create("legacy", node=gone)
    shim = start_shim(cluster, namespace, tmp_path)
    with running(shim):
        kube.create(
            f"/api/v1/namespaces/{namespace}/pods",
            launcher_pod(namespace, "virt-launcher-legacy", profile, vmi),
        )
        wait_pending_with(
            kube,
            namespace,
            "virt-launcher-legacy",
            shim,
            f"sticky node {gone} of VirtualMachine {namespace}/legacy does not exist",
        )
        # Someone removes the record (the seed's "人工干预", a person intervening): the
        # shim sees the VirtualMachine change, the pod goes anywhere, and its node is
        # recorded.
        kube.merge_patch(
            vms.path("virtualmachines", "legacy"), {"metadata": {"annotations": {KEY: None}}}
        )
        node = wait_bound(kube, namespace, "virt-launcher-legacy", shim)
        wait_for(
            lambda: vms.recorded_node("legacy") == node,
            30,
            f"VirtualMachine annotated with {node}",
            shim.log,
        )
