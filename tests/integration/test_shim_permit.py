"""Permit and PostFilter on a real API server: pods held at Permit (Wait) are bound only once allowed,
and a wait that times out rejects the pod the way upstream words it
(framework.go WaitOnPermit: "rejected due to timeout after waiting 1s at plugin ...", as
the FitError over the node that bindingCycle makes of it).

The shim runs in this test's event loop with the plugins in-process, so the test can
register a Permit plugin of its own: a small gang rule (a pod labelled ``gang=<name>``,
``gang-size=<n>`` waits until n pods of its gang are placed, activating the gang's pods
not placed yet, then the last one allows the others through
``CycleState.permit_signals``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest

from berth.client import ClusterStateLog
from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import NodeFactory
from berth.framework.config import parse_config
from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import PermitPlugin, PostFilterPlugin, PostFilterResult
from berth.framework.model import PodInfo
from berth.framework.objects import ObjectKind
from berth.framework.status import SUCCESS, Code, Status
from berth.kube.rest import JSON, KubeApi
from berth.plugins.registry import REGISTRY
from berth.server.app import build_frameworks
from berth.server.service import SchedulingService
from berth.shim.scheduler import Scheduler
from berth.shim.service import PluginService
from tests.integration.shimtools import pods_of, profile_for

pytestmark = pytest.mark.integration


# The gang's pods, read as objects, for the siblings a waiting member activates.
GANG_PODS = ObjectKind("", "v1", "pods", "Pod", label_selector="gang")


class GangPermit(PermitPlugin):
    name = "TestGang"

    @classmethod
    def reads(cls, args: object) -> tuple[ObjectKind, ...]:
        return (GANG_PODS,)

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        labels = pod.proto.labels
        gang = labels.get("gang")
        if not gang:
            return SUCCESS, 0.0
        size = int(labels.get("gang-size", "1"))
        timeout = float(labels.get("gang-timeout", "30"))
        # Members already placed (assumed while they wait, or bound) are in the snapshot.
        members = [
            p
            for p in self.handle.snapshot.pods.values()
            if p.proto.labels.get("gang") == gang and p.proto.node_name and p.uid != pod.uid
        ]
        if len(members) + 1 < size:
            # As Coscheduling's ActivateSiblings: the gang's pods not placed yet
            # leave the queue's waiting places (a member rejected at Permit is
            # Unschedulable by this plugin, and no other event retries it).
            state.activate_pods(
                str(o.data.get("metadata", {}).get("uid", ""))
                for o in self.handle.snapshot.objects("", "pods").values()
                if o.namespace == pod.namespace
                and o.data.get("metadata", {}).get("labels", {}).get("gang") == gang
                and not o.data.get("spec", {}).get("nodeName")
                and o.data.get("metadata", {}).get("uid") != pod.uid
            )
            return Status(Code.WAIT, (f"gang {gang}: {len(members) + 1}/{size} placed",)), timeout
        for m in members:
            state.permit_signals.append((m.uid, self.name, True, ""))
        return SUCCESS, 0.0


class NominateFirst(PostFilterPlugin):
    """Nominates the alphabetically first rejected node (what DefaultPreemption returns
    when it finds victims), without preempting anything."""

    name = "TestNominate"

    def post_filter(
        self, state: CycleState, pod: PodInfo, rejected: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        return PostFilterResult(min(rejected)), SUCCESS


def _gang_pod(
    namespace: str, profile: str, name: str, gang: str, size: int, timeout: float = 30
) -> JSON:
    pod = objects.pod(
        name,
        namespace=namespace,
        scheduler_name=profile,
        labels={"gang": gang, "gang-size": str(size), "gang-timeout": f"{timeout:g}"},
    )
    return pod


@pytest.fixture
async def shim(cluster: Cluster, namespace: str, tmp_path: Path) -> AsyncIterator[Scheduler]:
    profile = profile_for(namespace)
    registry = {**REGISTRY, "TestGang": GangPermit, "TestNominate": NominateFirst}
    config = parse_config(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [
                {
                    "schedulerName": profile,
                    "plugins": {
                        "permit": {"enabled": [{"name": "TestGang"}]},
                        "postFilter": {"enabled": [{"name": "TestNominate"}]},
                    },
                }
            ],
        },
        "test",
        registry,
    )
    service = SchedulingService(config, build_frameworks(config, registry))
    api = KubeApi.from_kubeconfig(str(cluster.kubeconfig))
    sched = Scheduler(api, PluginService.in_process(service, ClusterStateLog()), [profile])
    task = asyncio.create_task(sched.run())
    deadline = time.monotonic() + 30
    while not sched.ready:
        assert not task.done(), task
        assert time.monotonic() < deadline, "shim not ready"
        await asyncio.sleep(0.05)
    try:
        yield sched
    finally:
        await sched.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        api.close()


async def _until(check: object, within: float, what: str) -> None:
    assert callable(check)
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"{what} within {within:g}s"
        await asyncio.sleep(0.1)


def _bound(kube: KubeApi, namespace: str) -> set[str]:
    return {p["metadata"]["name"] for p in pods_of(kube, namespace) if p["spec"].get("nodeName")}


async def test_waiting_pods_are_bound_when_the_last_member_allows_them(
    shim: Scheduler, kube: KubeApi, namespace: str, fake_nodes: NodeFactory
) -> None:
    fake_nodes(2, cpu="8")
    profile = profile_for(namespace)
    objects.create_pods(kube, [_gang_pod(namespace, profile, f"g-{i}", "a", 3) for i in range(2)])
    await _until(lambda: len(shim.waiting) == 2, 20, "two pods waiting at Permit")
    await asyncio.sleep(1.0)
    assert _bound(kube, namespace) == set()
    objects.create_pods(kube, [_gang_pod(namespace, profile, "g-2", "a", 3)])
    await _until(lambda: _bound(kube, namespace) == {"g-0", "g-1", "g-2"}, 20, "the gang bound")
    # A binding cycle forgets its waiting pod and counts it bound after the API server's
    # answer (and PostBind): the API may show the pod bound a moment before.
    await _until(lambda: shim.counters.bound == 3, 20, "three binding cycles ended")
    assert shim.waiting == {}


async def test_permit_timeout_rejects_and_requeues_the_pod(
    shim: Scheduler, kube: KubeApi, namespace: str, fake_nodes: NodeFactory
) -> None:
    fake_nodes(1, cpu="8")
    profile = profile_for(namespace)
    objects.create_pods(kube, [_gang_pod(namespace, profile, "lonely", "b", 2, timeout=1)])
    # bindingCycle: the timeout is a FitError over the node, TestGang recorded.
    want = "0/1 nodes are available: 1 rejected due to timeout after waiting 1s at plugin TestGang."

    def rejected() -> bool:
        events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
        return any(e["reason"] == "FailedScheduling" and e["note"] == want for e in events)

    await _until(rejected, 20, "the timeout reported as FailedScheduling")
    assert _bound(kube, namespace) == set()
    # Unreserved and forgotten: the node holds no assumed pod, and the pod is queued again.
    await _until(
        lambda: (
            "lonely" not in {a.pod.name for a in shim.cache.assumed.values()} or bool(shim.waiting)
        ),
        10,
        "forgotten",
    )
    # Its partner arrives: both are bound.
    objects.create_pods(kube, [_gang_pod(namespace, profile, "partner", "b", 2, timeout=30)])
    await _until(lambda: _bound(kube, namespace) == {"lonely", "partner"}, 30, "both bound")


async def test_postfilter_nomination_sets_nominated_node_name(
    shim: Scheduler, kube: KubeApi, namespace: str, fake_nodes: NodeFactory
) -> None:
    """schedule_one.go handleSchedulingFailure: a PostFilter that nominates a node makes the
    scheduler set status.nominatedNodeName beside PodScheduled=False."""
    nodes = sorted(n["metadata"]["name"] for n in fake_nodes(2, cpu="1"))
    profile = profile_for(namespace)
    objects.create_pods(
        kube, [objects.pod("big", namespace=namespace, cpu="4", scheduler_name=profile)]
    )

    def nominated() -> str:
        pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/big")
        return str(pod["status"].get("nominatedNodeName") or "")

    await _until(lambda: nominated() != "", 20, "nominatedNodeName set")
    # Other tests' nodes may exist; the plugin picks the first rejected node of all.
    first = min(n["metadata"]["name"] for n in kube.get("/api/v1/nodes")["items"])
    assert nominated() == first
    assert first <= nodes[0]
    pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/big")
    cond = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert cond["status"] == "False" and "Insufficient cpu" in cond["message"]
