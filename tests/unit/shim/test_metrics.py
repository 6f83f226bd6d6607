"""The shim's metrics that moved here from kube-scheduler's pkg/scheduler/metrics/
metrics.go: each recorded where upstream records it, with its labels.

- scheduler_permit_wait_duration_seconds{result}: framework.go WaitOnPermit observes
  the wait with its status code: Success (allowed), Unschedulable (rejected, or the
  timer rejected it: waiting_pods_map.go), Error (Preempt).
- scheduler_event_handling_duration_seconds{event}: eventhandlers.go, one
  observation per handled event under its ClusterEvent label.
- scheduler_goroutines{operation="binding"}: runBindingCycle's gauge.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from prometheus_client import REGISTRY

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.framework.testing import make_node, make_pod
from berth.shim import metrics
from berth.shim.binding import WaitingPod, WaitingPods, _wait_permit
from berth.shim.cache import SchedulerCache
from berth.shim.eventhandlers import EventHandlers
from berth.shim.informer import ADDED, DELETED, MODIFIED, Event
from berth.shim.podstatus import PodStatusWriter
from berth.shim.queue import QueuedPod, SchedulingQueue
from berth.shim.service import SortKey

PROFILE = "berth-test"


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def permit_waits(result: str) -> float:
    return sample("scheduler_permit_wait_duration_seconds_count", result=result)


def waiting(uid: str, timeout: float = 5.0) -> WaitingPod:
    pod = make_pod(uid).uid(uid).obj()
    qp = QueuedPod(pod=pod, profile=PROFILE, timestamp=0.0, first_seen=0.0)
    return WaitingPod(qp, "n1", {"Gang": timeout})


@pytest.mark.parametrize(
    ("end", "result", "rejected"),
    [
        ("allow", "Success", False),
        ("reject", "Unschedulable", True),
        ("preempt", "Error", True),
        ("timeout", "Unschedulable", True),
    ],
)
async def test_permit_wait_is_observed_with_the_status_it_ended_with(
    end: str, result: str, rejected: bool
) -> None:
    before = permit_waits(result)
    others = {r: permit_waits(r) for r in ("Success", "Unschedulable", "Error") if r != result}
    w = waiting(f"p-{end}", timeout=0.05 if end == "timeout" else 5.0)
    wait = asyncio.create_task(_wait_permit(w))
    await asyncio.sleep(0)
    if end == "allow":
        w.allow("Gang")
    elif end == "reject":
        w.reject("Gang", "gang rejected")
    elif end == "preempt":
        w.preempted = True
        w.reject("DefaultPreemption", "preempted")
    outcome = await asyncio.wait_for(wait, 5.0)
    assert (outcome is not None) == rejected
    assert permit_waits(result) == before + 1
    assert {r: permit_waits(r) for r in others} == others


async def test_waiting_pods_are_counted_in_the_berth_gauge() -> None:
    pods = WaitingPods()
    pods.add(waiting("w1"))
    pods.add(waiting("w2"))
    assert sample("berth_shim_permit_waiting_pods") == 2
    # A binding cycle of a pod that never waited leaves the count as it is.
    pods.remove("never-waited")
    assert sample("berth_shim_permit_waiting_pods") == 2
    pods.remove("w1")
    assert sample("berth_shim_permit_waiting_pods") == 1
    pods.remove("w2")
    assert sample("berth_shim_permit_waiting_pods") == 0


async def _sort(profile: str, pods: Any) -> list[SortKey]:
    return [(0,) for _ in pods]


async def _pre_enqueue(profile: str, pod: cpb.Pod) -> pb.Status:
    return pb.Status()


def handlers() -> EventHandlers:
    return EventHandlers(
        profiles={PROFILE},
        cache=SchedulerCache(),
        queue=SchedulingQueue(_sort, _pre_enqueue),
        waiting=WaitingPods(),
        status=PodStatusWriter(cast(Any, None), cast(Any, None)),
        binding_nominations={},
    )


def handled(event: str) -> float:
    return sample("scheduler_event_handling_duration_seconds_count", event=event)


def test_each_handled_event_is_observed_under_its_cluster_event_label() -> None:
    """eventhandlers.go: addNodeToCache (NodeAdd), updateNodeInCache (a label per change
    NodeSchedulingPropertiesChange finds, here NodeUpdateNodeLabel),
    deleteNodeFromCache (NodeDelete), addPodToSchedulingQueue (UnschedulablePodAdd),
    updatePodInSchedulingQueue (UnschedulablePodUpdate),
    deletePodFromSchedulingQueue (UnschedulablePodDelete), addPodToCache
    (AssignedPodAdd), deletePodFromCache (AssignedPodDelete)."""
    h = handlers()
    labels = (
        "NodeAdd",
        "NodeUpdateNodeLabel",
        "NodeDelete",
        "UnschedulablePodAdd",
        "UnschedulablePodUpdate",
        "UnschedulablePodDelete",
        "AssignedPodAdd",
        "AssignedPodDelete",
    )
    before = {label: handled(label) for label in labels}

    node = make_node("n1").obj()
    h.on_node_events([Event(ADDED, "n1", node, "1")])
    relabelled = cpb.Node()
    relabelled.CopyFrom(node)
    relabelled.labels["zone"] = "a"
    h.on_node_events([Event(MODIFIED, "n1", relabelled, "2")])

    pending = make_pod("p").uid("p").obj()
    pending.scheduler_name = PROFILE
    h.on_pod_events([Event(ADDED, "p", pending, "3")])
    changed = cpb.Pod()
    changed.CopyFrom(pending)
    changed.labels["a"] = "b"
    h.on_pod_events([Event(MODIFIED, "p", changed, "4")])
    h.on_pod_events([Event(DELETED, "p", changed, "5")])

    bound = make_pod("b").uid("b").node("n1").obj()
    h.on_pod_events([Event(ADDED, "b", bound, "6")])
    h.on_pod_events([Event(DELETED, "b", bound, "7")])
    h.on_node_events([Event(DELETED, "n1", relabelled, "8")])

    assert {label: handled(label) - before[label] for label in labels} == dict.fromkeys(labels, 1.0)


def test_a_pod_of_another_scheduler_is_no_event_of_ours() -> None:
    h = handlers()
    before = handled("UnschedulablePodAdd")
    other = make_pod("o").uid("o").obj()
    other.scheduler_name = "default-scheduler"
    h.on_pod_events([Event(ADDED, "o", other, "1")])
    assert handled("UnschedulablePodAdd") == before


def test_binding_goroutines_gauge_is_upstreams_operation_label() -> None:
    assert metrics.BINDING_GOROUTINES is metrics.GOROUTINES.labels("binding")
