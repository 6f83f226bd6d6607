"""Preemption end to end on a real kube-apiserver: DefaultPreemption (plugins/defaultpreemption)
picks the victims, the shim nominates the preemptor and evicts them as upstream's
asynchronous preemption does (pkg/scheduler/framework/preemption/executor.go
prepareCandidateAsync, PreemptPod; schedule_one.go handleSchedulingFailure).

* The cluster has no kubelet: deleting a bound pod is graceful (it only gets a
  deletionTimestamp) unless its terminationGracePeriodSeconds is 0. A victim being deleted
  still occupies its node, as upstream's cache keeps it until it is gone: the preemptor
  stays nominated and unbound until the test finishes the deletion the way a kubelet would.
* Victims with terminationGracePeriodSeconds 0 go at once, and the preemptor binds; this
  case runs ``berth shim`` and ``berth serve`` as processes (the preemption crosses the
  gRPC wire).
* A PodDisruptionBudget steers the choice to the node where no budget is broken
  (pickOneNodeForPreemption).
* A victim waiting at Permit in the shim is rejected there, not deleted
  (PreemptPod: WaitingPod.Preempt, "in kube-scheduler memory").
* A pod with preemptionPolicy Never preempts nothing.

Every pod selects this test's nodes (``berth.dev/test=<namespace>``): nodes are
cluster-wide, and other nodes are no preemption candidates then.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY as METRICS

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog
from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.framework.config import parse_config
from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import PermitPlugin
from berth.framework.model import PodInfo
from berth.framework.status import SUCCESS, Code, Status
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi
from berth.plugins.registry import REGISTRY
from berth.server.app import build_frameworks
from berth.server.service import SchedulingService
from berth.shim.scheduler import Scheduler
from berth.shim.service import PluginService
from tests.integration.shimtools import (
    Server,
    Shim,
    pod_path,
    pod_scheduled_condition,
    pods_of,
    profile_for,
    running,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.integration

HOLD = "berth.dev/hold-at-permit"
LOW, MID, HIGH = 10, 20, 1000


class HoldAtPermit(PermitPlugin):
    """Pods labelled ``berth.dev/hold-at-permit`` wait at Permit for a minute."""

    name = "TestHoldAtPermit"

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        if HOLD in pod.proto.labels:
            return Status(Code.WAIT, ("held for the test",)), 60.0
        return SUCCESS, 0.0


@pytest.fixture
def classes(kube: KubeApi, namespace: str) -> Iterator[Callable[[str], str]]:
    """PriorityClasses of this test (cluster-wide objects): ``classes(kind)`` names the one
    for low, mid, high or never (high, preemptionPolicy Never)."""
    made: list[str] = []
    for kind, value in (("low", LOW), ("mid", MID), ("high", HIGH), ("never", HIGH)):
        body: JSON = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": f"{namespace}-{kind}"},
            "value": value,
        }
        if kind == "never":
            body["preemptionPolicy"] = "Never"
        kube.create("/apis/scheduling.k8s.io/v1/priorityclasses", body)
        made.append(f"{namespace}-{kind}")
    try:
        yield lambda kind: f"{namespace}-{kind}"
    finally:
        for name in made:
            with contextlib.suppress(ApiError):
                kube.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")


def make_pod(
    namespace: str,
    name: str,
    priority_class: str,
    *,
    cpu: str = "1",
    node: str | None = None,
    grace: int = 0,
    labels: dict[str, str] | None = None,
) -> JSON:
    """A pod of this test's profile on this test's nodes; ``node`` binds it directly (no
    scheduler); ``grace`` is its terminationGracePeriodSeconds."""
    pod = objects.pod(
        name,
        namespace=namespace,
        cpu=cpu,
        memory=None,
        scheduler_name=profile_for(namespace),
        node_selector={TEST_LABEL: namespace},
        node_name=node,
        priority_class_name=priority_class,
        labels=labels,
    )
    pod["spec"]["terminationGracePeriodSeconds"] = grace
    return pod


def get_pod(kube: KubeApi, namespace: str, name: str) -> JSON | None:
    try:
        return kube.get(pod_path(namespace, name))
    except ApiError as err:
        if err.status == 404:
            return None
        raise


def condition(pod: JSON, kind: str) -> JSON | None:
    conds = pod.get("status", {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == kind), None)


def preempted_events(kube: KubeApi, namespace: str) -> dict[str, JSON]:
    """The Preempted events by victim name."""
    events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    return {e["regarding"]["name"]: e for e in events if e.get("reason") == "Preempted"}


def metric(name: str) -> float:
    return METRICS.get_sample_value(name) or 0.0


@pytest.fixture
async def shim(cluster: Cluster, namespace: str) -> AsyncIterator[Scheduler]:
    """The shim in this event loop, plugins in-process: the default profile plus
    TestHoldAtPermit."""
    profile = profile_for(namespace)
    registry = {**REGISTRY, HoldAtPermit.name: HoldAtPermit}
    config = parse_config(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [
                {
                    "schedulerName": profile,
                    "plugins": {"permit": {"enabled": [{"name": HoldAtPermit.name}]}},
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
    deadline = time.monotonic() + 60
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


async def until(check: Callable[[], object], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"{what} within {within:g}s"
        await asyncio.sleep(0.1)


def node_of(kube: KubeApi, namespace: str, name: str) -> str:
    pod = get_pod(kube, namespace, name)
    return "" if pod is None else str(pod["spec"].get("nodeName") or "")


async def test_victims_being_deleted_hold_the_node_until_they_are_gone(
    shim: Scheduler,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    classes: Callable[[str], str],
) -> None:
    """executor.go PreemptPod on victims with a grace period: DisruptionTarget, a graceful
    deletion, the Preempted event; the preemptor is nominated (handleSchedulingFailure)
    and waits while the victim terminates; when the victim is gone it binds there."""
    (node,) = [n["metadata"]["name"] for n in fake_nodes(1, cpu="2")]
    attempts = metric("scheduler_preemption_attempts_total")
    objects.create_pods(
        kube, [make_pod(namespace, f"low-{i}", classes("low"), grace=30) for i in range(2)]
    )
    await until(
        lambda: all(node_of(kube, namespace, f"low-{i}") == node for i in range(2)),
        30,
        "the low-priority pods bound",
    )
    (high,) = objects.create_pods(kube, [make_pod(namespace, "high", classes("high"))])

    def victims() -> list[JSON]:
        return [
            p
            for p in pods_of(kube, namespace)
            if p["metadata"]["name"].startswith("low-") and p["metadata"].get("deletionTimestamp")
        ]

    await until(lambda: victims(), 30, "a victim being deleted")
    await until(
        lambda: (get_pod(kube, namespace, "high") or {})["status"].get("nominatedNodeName"),
        30,
        "the preemptor nominated",
    )
    (victim,) = victims()
    name = victim["metadata"]["name"]
    cond = condition(victim, "DisruptionTarget")
    assert cond is not None, victim["status"]
    assert (cond["status"], cond["reason"]) == ("True", "PreemptionByScheduler")
    assert cond["message"] == (
        f"{profile_for(namespace)}: preempting to accommodate a higher priority pod"
    )
    pod = get_pod(kube, namespace, "high")
    assert pod is not None
    assert pod["status"]["nominatedNodeName"] == node
    assert not pod["spec"].get("nodeName")
    await until(lambda: name in preempted_events(kube, namespace), 20, "the Preempted event")
    event = preempted_events(kube, namespace)[name]
    assert event["note"] == f"Preempted by pod {high['metadata']['uid']} on node {node}"
    assert event["action"] == "Preempting" and event["type"] == "Normal"
    assert event["related"]["name"] == "high"
    assert event["reportingController"] == profile_for(namespace)
    assert metric("scheduler_preemption_attempts_total") > attempts
    # Only one victim was needed; the other low-priority pod stays.
    spared = "low-1" if name == "low-0" else "low-0"
    spared_pod = get_pod(kube, namespace, spared)
    assert spared_pod is not None and not spared_pod["metadata"].get("deletionTimestamp")

    # While the victim terminates it still occupies the node: the preemptor waits,
    # nominated, and preempts nothing more; a pod of the same priority as the victims
    # arriving now finds no room either.
    objects.create_pods(kube, [make_pod(namespace, "late", classes("low"))])
    await asyncio.sleep(3)
    pod = get_pod(kube, namespace, "high")
    assert pod is not None and not pod["spec"].get("nodeName")
    assert pod["status"].get("nominatedNodeName") == node
    assert [v["metadata"]["name"] for v in victims()] == [name]
    assert shim.cache.nominated.get(high["metadata"]["uid"]) == node

    # The kubelet's part: the victim is gone. The preemptor binds to its nominated node.
    kube.delete(pod_path(namespace, name), gracePeriodSeconds=0)
    await until(lambda: node_of(kube, namespace, "high") == node, 30, "the preemptor bound")
    await asyncio.sleep(1)
    assert node_of(kube, namespace, "late") == ""
    assert high["metadata"]["uid"] not in shim.cache.nominated


def test_victims_without_grace_go_at_once_over_the_wire(
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    classes: Callable[[str], str],
    cluster: Cluster,
    tmp_path: Path,
) -> None:
    """berth shim + berth serve: a pod that needs the room of two lower-priority pods
    (terminationGracePeriodSeconds 0, bound without a scheduler) evicts both and binds;
    a higher-priority pod on the node is spared."""
    (node,) = [n["metadata"]["name"] for n in fake_nodes(1, cpu="3")]
    config = write_config(tmp_path / "config.yaml", profile_for(namespace))
    objects.create_pods(
        kube,
        [
            make_pod(namespace, "low-0", classes("low"), node=node),
            make_pod(namespace, "low-1", classes("low"), node=node),
            make_pod(namespace, "mid", classes("mid"), node=node),
        ],
    )
    server = Server(config, tmp_path / "serve.log").start()
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log", server=server.address)
    with running(shim, server):
        shim.start()
        (high,) = objects.create_pods(kube, [make_pod(namespace, "high", classes("high"), cpu="2")])
        wait_for(
            lambda: node_of(kube, namespace, "high") == node,
            60,
            "the preemptor bound",
            shim.log,
        )
        assert get_pod(kube, namespace, "low-0") is None
        assert get_pod(kube, namespace, "low-1") is None
        assert node_of(kube, namespace, "mid") == node
        wait_for(
            lambda: set(preempted_events(kube, namespace)) == {"low-0", "low-1"},
            20,
            "a Preempted event per victim",
            shim.log,
        )
        notes = {e["note"] for e in preempted_events(kube, namespace).values()}
        assert notes == {f"Preempted by pod {high['metadata']['uid']} on node {node}"}
        assert shim.metric("scheduler_preemption_attempts_total") >= 1
        assert shim.metric("scheduler_preemption_victims_sum") == 2
        assert shim.metric("scheduler_preemption_goroutines_execution_total", result="success") == 1
        assert "preemption for pod" in shim.text()


async def test_a_disruption_budget_steers_the_preemption_to_another_node(
    shim: Scheduler,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    classes: Callable[[str], str],
) -> None:
    """pickOneNodeForPreemption: the node whose victims break no PodDisruptionBudget wins
    (the budget allows no disruption: no disruption controller keeps its status here)."""
    guarded, free = sorted(n["metadata"]["name"] for n in fake_nodes(2, cpu="2"))
    kube.create(
        f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    objects.create_pods(
        kube,
        [
            make_pod(namespace, f"g-{i}", classes("low"), node=guarded, labels={"app": "guarded"})
            for i in range(2)
        ]
        + [make_pod(namespace, f"f-{i}", classes("low"), node=free) for i in range(2)],
    )
    await until(
        lambda: (
            len(shim.cache.state.objects) > 0
            and any(k[1] == "poddisruptionbudgets" for k in shim.cache.state.objects)
        ),
        20,
        "the PodDisruptionBudget in the cluster state",
    )
    objects.create_pods(kube, [make_pod(namespace, "high", classes("high"))])
    await until(lambda: node_of(kube, namespace, "high") == free, 30, "the preemptor bound")
    left = {p["metadata"]["name"] for p in pods_of(kube, namespace)}
    assert {"g-0", "g-1"} <= left
    assert len(left & {"f-0", "f-1"}) == 1
    assert set(preempted_events(kube, namespace)) == {"f-0", "f-1"} - left


async def test_a_victim_waiting_at_permit_is_rejected_not_deleted(
    shim: Scheduler,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    classes: Callable[[str], str],
) -> None:
    """PreemptPod: a victim that waits at Permit in this scheduler is preempted in memory
    (WaitingPod.Preempt), with no API call; the preemptor then binds."""
    (node,) = [n["metadata"]["name"] for n in fake_nodes(1, cpu="2")]
    objects.create_pods(kube, [make_pod(namespace, "mid", classes("mid"), node=node)])
    (held,) = objects.create_pods(
        kube, [make_pod(namespace, "held", classes("low"), labels={HOLD: "yes"})]
    )
    await until(lambda: held["metadata"]["uid"] in shim.waiting, 30, "a pod waiting at Permit")
    (high,) = objects.create_pods(kube, [make_pod(namespace, "high", classes("high"))])
    await until(lambda: node_of(kube, namespace, "high") == node, 30, "the preemptor bound")
    pod = get_pod(kube, namespace, "held")
    assert pod is not None, "the waiting victim was deleted"
    assert not pod["metadata"].get("deletionTimestamp")
    assert condition(pod, "DisruptionTarget") is None
    assert not pod["spec"].get("nodeName")
    await until(lambda: "held" in preempted_events(kube, namespace), 20, "the Preempted event")
    assert preempted_events(kube, namespace)["held"]["note"] == (
        f"Preempted by pod {high['metadata']['uid']} on node {node} (in kube-scheduler memory)."
    )
    assert node_of(kube, namespace, "mid") == node
    # The victim is queued again and finds no room now.
    await until(
        lambda: (
            (cond := pod_scheduled_condition(get_pod(kube, namespace, "held") or {})) is not None
            and cond["status"] == "False"
        ),
        20,
        "the victim's PodScheduled=False",
    )


async def test_preemption_policy_never_preempts_nothing(
    shim: Scheduler,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    classes: Callable[[str], str],
) -> None:
    """DefaultPreemption.PodEligibleToPreemptOthers: preemptionPolicy Never (from its
    PriorityClass) is not eligible; the pod stays pending and nobody is evicted."""
    (node,) = [n["metadata"]["name"] for n in fake_nodes(1, cpu="2")]
    objects.create_pods(
        kube, [make_pod(namespace, f"low-{i}", classes("low"), node=node) for i in range(2)]
    )
    (polite,) = objects.create_pods(kube, [make_pod(namespace, "polite", classes("never"))])
    assert polite["spec"]["preemptionPolicy"] == "Never"
    await until(
        lambda: pod_scheduled_condition(get_pod(kube, namespace, "polite") or {}) is not None,
        30,
        "polite found unschedulable",
    )
    await asyncio.sleep(2)
    pods = {p["metadata"]["name"]: p for p in pods_of(kube, namespace)}
    assert set(pods) == {"low-0", "low-1", "polite"}
    assert not any(p["metadata"].get("deletionTimestamp") for p in pods.values())
    assert not pods["polite"]["spec"].get("nodeName")
    assert not pods["polite"]["status"].get("nominatedNodeName")
    cond = pod_scheduled_condition(pods["polite"])
    assert cond is not None and "preemption: not eligible" in cond["message"], cond
    assert preempted_events(kube, namespace) == {}
    assert shim.preemption.preempting == {}


async def test_a_victim_replaced_by_a_pod_of_the_same_name_is_left_alone(
    shim: Scheduler,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    classes: Callable[[str], str],
) -> None:
    """PreemptPod with Berth's uid preconditions: the victim named by the plugin service is
    gone and a new pod took its name; neither the condition nor the deletion reaches the
    new pod, and that is no failure (no error, no event)."""
    (node,) = [n["metadata"]["name"] for n in fake_nodes(1, cpu="2")]
    (old,) = objects.create_pods(kube, [make_pod(namespace, "v", classes("low"), node=node)])
    kube.delete(pod_path(namespace, "v"), gracePeriodSeconds=0)
    await until(lambda: get_pod(kube, namespace, "v") is None, 10, "the old pod gone")
    (new,) = objects.create_pods(kube, [make_pod(namespace, "v", classes("low"), node=node)])
    preemptor = cpb.Pod(
        uid="preemptor-uid", namespace=namespace, name="p", scheduler_name=profile_for(namespace)
    )
    victim = pb.Victim(uid=old["metadata"]["uid"], namespace=namespace, name="v")
    await shim.preemption.preempt_pod(preemptor, node, "DefaultPreemption", victim)
    pod = get_pod(kube, namespace, "v")
    assert pod is not None and pod["metadata"]["uid"] == new["metadata"]["uid"]
    assert not pod["metadata"].get("deletionTimestamp")
    assert condition(pod, "DisruptionTarget") is None
    assert preempted_events(kube, namespace) == {}
