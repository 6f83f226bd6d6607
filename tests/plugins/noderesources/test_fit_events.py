"""NodeResourcesFit's EventsToRegister and queueing hints, the cases of
upstream's fit_test.go (TestEventsToRegister, Test_isSchedulableAfterNodeChange,
Test_isSchedulableAfterPodChange) that do not depend on Go's types (the
"backoff-wrong-*-object" cases have no counterpart: a hint here is given the
objects its event is about)."""

from __future__ import annotations

import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.framework import (
    ActionType,
    ClusterEvent,
    EventResource,
    NodeInfo,
    PodInfo,
    QueueingHint,
)
from berth.framework.testing import make_node, make_pod
from berth.plugins.noderesources import Fit

Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
EXT_A, EXT_B = "example.com/aaa", "example.com/bbb"


def test_events_to_register() -> None:
    # TestEventsToRegister, with queueing hints and in-place scaling on.
    events = [e.event for e in Fit().events_to_register()]
    assert events == [
        ClusterEvent(EventResource.POD, ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN),
        ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE),
        # DRAExtendedResource is on (beta): test_fit_dra.py has its hint's cases.
        ClusterEvent(EventResource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE),
    ]


def node(**quantities: str | int) -> NodeInfo:
    return NodeInfo(make_node("n").capacity(**quantities).obj())


@pytest.mark.parametrize(
    ("requests", "old", "new", "want"),
    [
        pytest.param(
            {"memory": 2},
            None,
            {"memory": 1},
            SKIP,
            id="skip-queue-on-node-add-without-sufficient-resources",
        ),
        pytest.param(
            {EXT_A: 1},
            None,
            {EXT_B: 1},
            SKIP,
            id="skip-queue-on-node-add-without-required-resource-type",
        ),
        pytest.param(
            {"memory": 2, EXT_A: 1},
            None,
            {"memory": 4, EXT_A: 2},
            Q,
            id="queue-on-node-add-with-sufficient-resources",
        ),
        pytest.param(
            {"memory": 2, EXT_A: 1},
            {"memory": 2, EXT_A: 2},
            {"memory": 2, EXT_A: 1, EXT_B: 2},
            SKIP,
            id="skip-queue-on-node-unrelated-changes",
        ),
        pytest.param(
            {"memory": 2, EXT_A: 1},
            {"memory": 2, EXT_A: 1},
            {"memory": 2, EXT_A: 2},
            Q,
            id="queue-on-pod-requested-resources-increase",
        ),
        pytest.param(
            {"memory": 2, EXT_A: 1},
            {"memory": 4, EXT_A: 2},
            {"memory": 1, EXT_A: 2},
            SKIP,
            id="skip-queue-on-node-changes-from-suitable-to-unsuitable",
        ),
        pytest.param(
            {"memory": 2, EXT_A: 1},
            {"memory": 1, EXT_A: 2},
            {"memory": 4, EXT_A: 2},
            Q,
            id="queue-on-node-changes-from-unsuitable-to-suitable",
        ),
    ],
)
def test_is_schedulable_after_node_change(
    requests: dict[str, int],
    old: dict[str, int] | None,
    new: dict[str, int],
    want: QueueingHint,
) -> None:
    pod = make_pod("p").req(**requests).info()
    hint = Fit().is_schedulable_after_node_change(
        pod, None if old is None else node(**old), node(**new)
    )
    assert hint == want


@pytest.mark.parametrize(
    ("target", "old", "new", "want"),
    [
        pytest.param(
            make_pod("p").uid("p").req(cpu="1").obj(),
            make_pod("other").uid("o").node("n").req(cpu="1").obj(),
            None,
            Q,
            id="queue-on-deleted",
        ),
        pytest.param(
            make_pod("p").uid("p").req(cpu="1").obj(),
            make_pod("other").uid("o").req(cpu="1").obj(),
            None,
            SKIP,
            id="skip-queue-on-unscheduled-pod-deleted",
        ),
        pytest.param(
            make_pod("p").uid("p").req(cpu="1").obj(),
            make_pod("other").uid("o").node("n").req(cpu="2").obj(),
            make_pod("other").uid("o").node("n").req(cpu="1").obj(),
            Q,
            id="queue-on-other-pod-scale-down",
        ),
        pytest.param(
            make_pod("p").uid("p").req(cpu="1").obj(),
            make_pod("other").uid("o").node("n").req(cpu="1", memory="2").obj(),
            make_pod("other").uid("o").node("n").req(cpu="1", memory="1").obj(),
            SKIP,
            id="skip-queue-on-other-pod-unrelated-resource-scaled-down",
        ),
        pytest.param(
            make_pod("p").uid("p").req(cpu="1").obj(),
            make_pod("other").uid("o").req(cpu="2").obj(),
            make_pod("other").uid("o").req(cpu="1").obj(),
            SKIP,
            id="skip-queue-on-unscheduled-pod-scale-down",
        ),
        pytest.param(
            make_pod("p").uid("p").req(cpu="1").obj(),
            make_pod("p").uid("p").req(cpu="2").obj(),
            make_pod("p").uid("p").req(cpu="1").obj(),
            Q,
            id="queue-on-target-pod-scale-down",
        ),
    ],
)
def test_is_schedulable_after_pod_change(
    target: cpb.Pod, old: cpb.Pod, new: cpb.Pod | None, want: QueueingHint
) -> None:
    hint = Fit().is_schedulable_after_pod_event(
        PodInfo(target), PodInfo(old), None if new is None else PodInfo(new)
    )
    assert hint == want
