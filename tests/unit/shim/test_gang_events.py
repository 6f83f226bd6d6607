"""shim/eventhandlers.py under GangScheduling: a pod added unbound moves the pods
whose plugins registered a pod add (eventhandlers.go addPodToSchedulingQueue with
the GangScheduling gate on: MoveAllToActiveOrBackoffQueue(EventUnscheduledPodAdd)),
once the pod's object reaches the state the plugin counts; without the plugin,
pod objects move nothing (the pod informer's events already did)."""

from __future__ import annotations

from typing import Any, cast

import orjson

from berth.api.v1 import cluster_pb2 as cpb
from berth.framework.events import EVENT_UNSCHEDULED_POD_ADD
from berth.shim.binding import WaitingPods
from berth.shim.cache import SchedulerCache
from berth.shim.eventhandlers import EventHandlers
from berth.shim.informer import ADDED, DELETED, MODIFIED
from berth.shim.objects import Source
from berth.shim.podstatus import PodStatusWriter

PODS = Source("", "v1", "pods", "Pod", 0, "", frozenset({"GangScheduling"}))


class RecordingQueue:
    def __init__(self) -> None:
        self.moves: list[tuple[Any, Any, Any]] = []

    def move(self, event: Any, old: Any = None, new: Any = None, **_: Any) -> int:
        self.moves.append((event, old, new))
        return 0


def handlers(gang: bool) -> tuple[EventHandlers, RecordingQueue]:
    queue = RecordingQueue()
    h = EventHandlers(
        profiles={"p"},
        cache=SchedulerCache(),
        queue=cast(Any, queue),
        waiting=WaitingPods(),
        status=PodStatusWriter(cast(Any, None), cast(Any, None)),
        binding_nominations={},
    )
    h.move_on_unscheduled_add = gang
    return h, queue


def pod_object(name: str, node: str = "") -> cpb.ClusterObject:
    spec: dict[str, Any] = {"schedulingGroup": {"podGroupName": "team"}, "containers": []}
    if node:
        spec["nodeName"] = node
    body = {"metadata": {"name": name, "namespace": "ns", "uid": name}, "spec": spec}
    return cpb.ClusterObject(
        ref=cpb.ObjectRef(resource="pods", namespace="ns", name=name),
        version="v1",
        kind="Pod",
        json=orjson.dumps(body),
    )


def test_an_unbound_pod_added_moves_pods_as_an_unscheduled_pod_add() -> None:
    h, queue = handlers(gang=True)
    h.on_object_change(PODS, [(ADDED, None, pod_object("a"))])
    [(event, old, new)] = queue.moves
    assert event == EVENT_UNSCHEDULED_POD_ADD and old is None
    assert isinstance(new, cpb.Pod)
    assert (new.namespace, new.name, new.scheduling_group) == ("ns", "a", "team")


def test_bound_updated_deleted_or_malformed_pods_move_nothing() -> None:
    h, queue = handlers(gang=True)
    broken = pod_object("x")
    broken.json = b"{not json"
    h.on_object_change(
        PODS,
        [
            (ADDED, None, pod_object("b", node="n1")),
            (MODIFIED, pod_object("a"), pod_object("a")),
            (DELETED, pod_object("a"), None),
            (ADDED, None, broken),
        ],
    )
    assert queue.moves == []


def test_without_gang_scheduling_pod_objects_move_nothing() -> None:
    h, queue = handlers(gang=False)
    h.on_object_change(PODS, [(ADDED, None, pod_object("a"))])
    assert queue.moves == []
