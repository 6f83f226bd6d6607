"""NodeResourcesFit with DRA-backed extended resources (DRAExtendedResource,
beta and on in v1.36): upstream's fit_test.go cases of TestEnoughRequests
("extended resource backed by DRA", ...), Test_isSchedulableAfterDeviceClassChange
and TestEventsToRegister's DeviceClass event, named as upstream names them."""

from __future__ import annotations

from typing import Any

import pytest

from berth.framework import ActionType, ClusterEvent, EventResource, PodInfo, QueueingHint
from berth.framework.deviceclasses import DEVICE_CLASS_PREFIX, DEVICE_CLASSES
from berth.framework.objects import ClusterObject
from berth.framework.status import SUCCESS, Status
from berth.framework.testing import (
    batch_of,
    fresh_state,
    handle_for,
    make_node,
    make_object,
    make_pod,
    snapshot_of,
)
from berth.plugins.noderesources import Fit
from berth.plugins.noderesources.fit import is_schedulable_after_device_class_event

Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
EXT_A, EXT_B = "example.com/aaa", "example.com/bbb"
DRA = "extended.resource.dra.io/something"
CLASS = "device-class-name"


def device_class(name: str = CLASS, extended: str | None = DRA) -> ClusterObject:
    return ClusterObject.from_proto(
        make_object(
            DEVICE_CLASSES, name, spec={"extendedResourceName": extended} if extended else {}
        )
    )


def insufficient(name: str) -> Status:
    return Status.unresolvable(f"Insufficient {name}")


# (pod's requests, node's allocatable of the resource or None, want)
ENOUGH_CASES: dict[str, tuple[dict[str, Any], dict[str, Any], Status]] = {
    "extended resource backed by DRA": ({"cpu": "1m", "memory": "1", DRA: 1}, {}, SUCCESS),
    "extended resource NOT backed by DRA": (
        {"cpu": "1m", "memory": "1", EXT_B: 1},
        {},
        insufficient(EXT_B),
    ),
    "extended resource was backed by Device Plugin (Allocatable: 0)": ({DRA: 1}, {DRA: 0}, SUCCESS),
    # Berth's own: a node whose device plugin advertises it is checked as always.
    "extended resource backed by DRA on a node advertising too little": (
        {DRA: 2},
        {DRA: 1},
        insufficient(DRA),
    ),
    "extended resource backed by DRA on a node advertising enough": ({DRA: 2}, {DRA: 2}, SUCCESS),
}


@pytest.mark.parametrize("name", list(ENOUGH_CASES))
def test_enough_requests_dra_extended_resources(name: str) -> None:
    """TestEnoughRequests' DRA cases, over Filter per node and in batch."""
    requests, allocatable, want = ENOUGH_CASES[name]
    node = make_node("n").capacity(cpu="10m", memory="20", pods=32, **allocatable).obj()
    snap = snapshot_of([node], [], [device_class().to_proto()])
    pl = Fit(None, handle_for(snap))
    pod = PodInfo(make_pod("p").req(**requests).obj())
    state = fresh_state()
    _, st = pl.pre_filter(state, pod, batch_of(snap))
    assert st == SUCCESS
    ni = snap.nodes["n"]
    assert pl.filter(state, pod, ni) == want
    assert pl.filter_nodes(state, pod, batch_of(snap)).status_of(0) == want


def test_extended_resource_backed_by_dra_not_enabled() -> None:
    """ "extended resource backed by DRA not enabled": without a class (the
    gate's effect here) the resource is checked against allocatable."""
    node = make_node("n").capacity(cpu="10m", memory="20", pods=32).obj()
    snap = snapshot_of([node])
    pl = Fit(None, handle_for(snap))
    pod = PodInfo(make_pod("p").req(cpu="1m", memory="1", **{DRA: 1}).obj())
    state = fresh_state()
    pl.pre_filter(state, pod, batch_of(snap))
    assert pl.filter_nodes(state, pod, batch_of(snap)).status_of(0) == insufficient(DRA)


def test_events_to_register_with_dra_extended_resource() -> None:
    """TestEventsToRegister, "Register events with DRAExtendedResource feature enabled"."""
    events = [e.event for e in Fit().events_to_register()]
    assert events[-1] == ClusterEvent(
        EventResource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE
    )


ERN = "example.com/gpu"


def pod_requesting(**scalar: int) -> PodInfo:
    return PodInfo(make_pod("p").req(**scalar).obj())


MEMORY_POD = PodInfo(make_pod("p").req(memory="2").obj())

# Test_isSchedulableAfterDeviceClassChange: (pod, old, new, want); the
# "backoff-wrong-*-object" cases have no counterpart (a hint here is given
# the objects its event is about).
DEVICE_CLASS_CASES: dict[str, tuple[PodInfo, ClusterObject | None, ClusterObject, QueueingHint]] = {
    "skip-queue-on-class-nil-extended-resource-name-pointer": (
        MEMORY_POD,
        device_class("", None),
        device_class("", None),
        SKIP,
    ),
    "skip-queue-on-class-same-extended-resource-name-pointer": (
        MEMORY_POD,
        device_class("", ERN),
        device_class("", ERN),
        SKIP,
    ),
    "skip-queue-on-class-same-extended-resource-name": (
        MEMORY_POD,
        device_class("", ERN),
        device_class("", ERN),
        SKIP,
    ),
    "queue-on-class-add-with-implicit-extended-resource-name": (
        pod_requesting(**{DEVICE_CLASS_PREFIX + "gpuclass": 1}),
        None,
        device_class("gpuclass", ERN),
        Q,
    ),
    "skip-on-class-add-with-implicit-extended-resource-name-not-matching": (
        pod_requesting(**{DEVICE_CLASS_PREFIX + "gpuclass": 1}),
        None,
        device_class("myclass", ERN),
        SKIP,
    ),
    "skip-on-class-add-with-explicit-extended-resource-name-not-matching": (
        pod_requesting(**{"example.com/othergpu": 1}),
        None,
        device_class("myclass", ERN),
        SKIP,
    ),
    "skip-on-class-update-with-implicit-extended-resource-name": (
        pod_requesting(**{DEVICE_CLASS_PREFIX + "gpuclass": 1}),
        device_class("gpuclass", None),
        device_class("gpuclass", ERN),
        SKIP,
    ),
    "queue-on-class-add-with-extended-resource-name": (
        pod_requesting(**{ERN: 1}),
        None,
        device_class("", ERN),
        Q,
    ),
    "queue-on-class-update-with-extended-resource-name": (
        pod_requesting(**{ERN: 1}),
        device_class("", ERN + "1"),
        device_class("", ERN),
        Q,
    ),
}


@pytest.mark.parametrize("name", list(DEVICE_CLASS_CASES))
def test_is_schedulable_after_device_class_change(name: str) -> None:
    pod, old, new, want = DEVICE_CLASS_CASES[name]
    assert is_schedulable_after_device_class_event(pod, old, new) == want
