"""Data beyond nodes and pods on a real API server (issue 10; protos/README.md "Data
beyond nodes and pods"; shim/objects.py).

A CRD (``Gate``) is created by the test. A test-only plugin, registered with the
shim's in-process plugin service, reads Gates (``Plugin.reads``, with a label
selector), rejects a pod unless its Gate (label ``gate``) says ``spec.open: true``,
writes an annotation on the pod at PreBind and records the node on the Gate at
PostBind, both as ObjectWrites the shim performs with its credentials. The test
shows: the shim watches the CRD (only the selected Gates), the filter sees a Gate
change and the waiting pod then binds, the PreBind write lands on the pod before
the binding, the PostBind write lands on the Gate, and a PreBind write that fails
fails the binding cycle (the pod stays unbound with a FailedScheduling event).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from berth.client import ClusterStateLog
from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.framework import (
    CycleState,
    FilterPlugin,
    NodeInfo,
    ObjectKind,
    ObjectWrite,
    PodInfo,
    PostBindPlugin,
    PreBindPlugin,
    Status,
    pod_write,
)
from berth.framework.config import parse_config
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi, segment
from berth.plugins.registry import REGISTRY
from berth.server.app import build_frameworks
from berth.server.service import SchedulingService
from berth.shim.scheduler import Scheduler
from berth.shim.service import PluginService
from tests.integration.shimtools import profile_for

pytestmark = pytest.mark.integration

GROUP = "objects.berth.dev"
PLURAL = "gates"
CRD_NAME = f"{PLURAL}.{GROUP}"
SELECTED = "objects.berth.dev/watched"
OPENED_BY = "objects.berth.dev/opened-by"
LAST_NODE = "objects.berth.dev/last-node"
GATES = ObjectKind(GROUP, "v1", PLURAL, "Gate", label_selector=f"{SELECTED}=yes")


class GatePlugin(FilterPlugin, PreBindPlugin, PostBindPlugin):
    """Filter: the pod's Gate must be open. PreBind: annotate the pod with the
    Gate that let it through (or write to the Gate named by label ``write-to``,
    to make a write fail). PostBind: record the node on the Gate."""

    name = "TestGate"

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        return (GATES,)

    @classmethod
    def writes(cls, args: Any) -> tuple[ObjectKind, ...]:
        return (GATES,)

    def _gate(self, pod: PodInfo) -> JSON | None:
        obj = self.handle.snapshot.object(GROUP, PLURAL, pod.namespace, pod.labels.get("gate", ""))
        return None if obj is None else dict(obj.data)

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        gate = self._gate(pod)
        if gate is None:
            return Status.unschedulable(f"gate {pod.labels.get('gate')} not found")
        if not (gate.get("spec") or {}).get("open"):
            return Status.unschedulable(f"gate {gate['metadata']['name']} is closed")
        return Status.success()

    def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        target = pod.labels.get("write-to")
        if target:
            state.add_write(
                ObjectWrite(GROUP, "v1", PLURAL, pod.namespace, target, {"spec": {"x": 1}})
            )
            return Status.success()
        gate = self._gate(pod) or {}
        version = (gate.get("metadata") or {}).get("resourceVersion", "?")
        annotation = {OPENED_BY: f"{pod.labels.get('gate')}@{version}"}
        state.add_write(
            pod_write(pod.namespace, pod.name, {"metadata": {"annotations": annotation}})
        )
        return Status.success()

    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        gate = pod.labels.get("gate", "")
        state.add_write(
            ObjectWrite(
                GROUP,
                "v1",
                PLURAL,
                pod.namespace,
                gate,
                {"metadata": {"annotations": {LAST_NODE: node_name}}},
            )
        )


def _crd() -> JSON:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": PLURAL, "singular": "gate", "kind": "Gate"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


def _until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} within {timeout:g}s")


@pytest.fixture
def gate_crd(kube: KubeApi) -> str:
    """The Gate CRD, created once per session (kept: a CRD deleted while a later test
    recreates it would race the API server's cleanup), established."""
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    with contextlib.suppress(ApiError):
        kube.create(path, _crd())

    def established() -> bool:
        crd = kube.get(f"{path}/{CRD_NAME}")
        conds = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

    _until(established, 30, f"CRD {CRD_NAME} established")
    return CRD_NAME


def gates_path(namespace: str, name: str = "") -> str:
    base = f"/apis/{GROUP}/v1/namespaces/{segment(namespace)}/{PLURAL}"
    return f"{base}/{segment(name)}" if name else base


def create_gate(kube: KubeApi, namespace: str, name: str, *, open_: bool, watched: bool) -> None:
    labels = {SELECTED: "yes"} if watched else {}
    body = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Gate",
        "metadata": {"name": name, "labels": labels},
        "spec": {"open": open_},
    }
    # A fresh CRD may need a moment before its REST endpoint serves.
    deadline = time.monotonic() + 30
    while True:
        try:
            kube.create(gates_path(namespace), body)
            return
        except ApiError as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def pod_json(kube: KubeApi, namespace: str, name: str) -> JSON:
    return kube.get(f"/api/v1/namespaces/{segment(namespace)}/pods/{segment(name)}")


def failed_scheduling(kube: KubeApi, namespace: str, name: str) -> list[str]:
    events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{segment(namespace)}/events")
    return [
        str(e.get("note") or "")
        for e in events["items"]
        if e.get("reason") == "FailedScheduling" and e["regarding"]["name"] == name
    ]


@pytest.fixture
async def shim(cluster: Cluster, namespace: str, gate_crd: str) -> AsyncIterator[Scheduler]:
    profile = profile_for(namespace)
    registry = {**REGISTRY, GatePlugin.name: GatePlugin}
    config = parse_config(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [
                {
                    "schedulerName": profile,
                    "plugins": {
                        "filter": {"enabled": [{"name": GatePlugin.name}]},
                        "preBind": {"enabled": [{"name": GatePlugin.name}]},
                        "postBind": {"enabled": [{"name": GatePlugin.name}]},
                    },
                }
            ],
        },
        "test_shim_objects",
        registry,
    )
    service = SchedulingService(config, build_frameworks(config, registry))
    api = KubeApi.from_kubeconfig(str(cluster.kubeconfig))
    sched = Scheduler(
        api,
        PluginService.in_process(service, ClusterStateLog()),
        [profile],
        initial_backoff=0.2,
        max_backoff=1.0,
    )
    task = asyncio.create_task(sched.run())
    deadline = time.monotonic() + 40
    while not sched.ready:
        assert not task.done(), task
        assert time.monotonic() < deadline, "shim not ready"
        await asyncio.sleep(0.05)
    try:
        yield sched
    finally:
        await sched.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        api.close()


async def wait(check: Callable[[], bool], within: float, what: str) -> None:
    await asyncio.to_thread(_until, check, within, what)


async def test_filter_follows_the_crd_and_writes_land(
    kube: KubeApi, namespace: str, fake_nodes: NodeFactory, shim: Scheduler
) -> None:
    (node,) = fake_nodes(1, cpu="4", memory="8Gi")
    node_name = node["metadata"]["name"]
    profile = profile_for(namespace)
    create_gate(kube, namespace, "g", open_=False, watched=True)
    # Open, but without the label the plugin's read selects: the shim never ships it.
    create_gate(kube, namespace, "hidden", open_=True, watched=False)

    def make(name: str, gate: str, **labels: str) -> None:
        pod = objects.pod(
            name,
            namespace=namespace,
            scheduler_name=profile,
            labels={"gate": gate, **labels},
            node_selector={TEST_LABEL: namespace},
        )
        kube.create(f"/api/v1/namespaces/{segment(namespace)}/pods", pod)

    make("waits", "g")
    make("hidden", "hidden")
    await wait(
        lambda: any("gate g is closed" in n for n in failed_scheduling(kube, namespace, "waits")),
        30,
        "FailedScheduling 'gate g is closed' for pod waits",
    )
    await wait(
        lambda: any(
            "gate hidden not found" in n for n in failed_scheduling(kube, namespace, "hidden")
        ),
        30,
        "FailedScheduling 'gate hidden not found' for pod hidden",
    )
    assert ("objects.berth.dev", "gates", namespace, "g") in shim.cache.state.objects
    assert ("objects.berth.dev", "gates", namespace, "hidden") not in shim.cache.state.objects

    # Open the gate: the watch brings the change, the pod is retried and binds.
    opened = kube.merge_patch(gates_path(namespace, "g"), {"spec": {"open": True}})
    version = opened["metadata"]["resourceVersion"]
    await wait(
        lambda: pod_json(kube, namespace, "waits")["spec"].get("nodeName") == node_name,
        60,
        "pod waits bound after its gate opened",
    )
    pod = pod_json(kube, namespace, "waits")
    # PreBind's write, performed by the shim before the binding.
    assert pod["metadata"]["annotations"][OPENED_BY] == f"g@{version}"
    # PostBind's write on the Gate.
    await wait(
        lambda: (
            (kube.get(gates_path(namespace, "g"))["metadata"].get("annotations") or {}).get(
                LAST_NODE
            )
            == node_name
        ),
        30,
        "PostBind's write on gate g",
    )
    assert not pod_json(kube, namespace, "hidden")["spec"].get("nodeName")


async def test_failed_pre_bind_write_fails_the_binding_cycle(
    kube: KubeApi, namespace: str, fake_nodes: NodeFactory, shim: Scheduler
) -> None:
    fake_nodes(1, cpu="4", memory="8Gi")
    create_gate(kube, namespace, "g", open_=True, watched=True)
    await wait(
        lambda: ("objects.berth.dev", "gates", namespace, "g") in shim.cache.state.objects,
        30,
        "gate g in the shim's state",
    )
    pod = objects.pod(
        "doomed",
        namespace=namespace,
        scheduler_name=profile_for(namespace),
        labels={"gate": "g", "write-to": "missing"},
        node_selector={TEST_LABEL: namespace},
    )
    kube.create(f"/api/v1/namespaces/{segment(namespace)}/pods", pod)
    await wait(
        lambda: any(
            "write by plugin 'TestGate' to gates.objects.berth.dev" in n and "missing" in n
            for n in failed_scheduling(kube, namespace, "doomed")
        ),
        30,
        "FailedScheduling naming the failed write",
    )
    assert not pod_json(kube, namespace, "doomed")["spec"].get("nodeName")
    # Unreserved and forgotten: nothing assumed on the node.
    assert not shim.cache.is_assumed(pod_json(kube, namespace, "doomed")["metadata"]["uid"])
