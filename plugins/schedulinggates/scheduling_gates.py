"""SchedulingGates: hold back pods that still carry scheduling gates.

Port of pkg/scheduler/framework/plugins/schedulinggates/scheduling_gates.go at
v1.36 (PreEnqueue). A pod with ``spec.schedulingGates`` does not enter the
active queue; whoever added a gate removes it when the pod may be scheduled.
Its EventsToRegister is upstream's (queueing hints on): the pod's own last
gate removed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from berth.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from berth.framework.interfaces import PreEnqueuePlugin
from berth.framework.model import PodInfo
from berth.framework.status import SUCCESS, Status

__all__ = ["NAME", "SchedulingGates", "waiting_for_gates_message"]

NAME = "SchedulingGates"


def waiting_for_gates_message(gates: Iterable[str]) -> str:
    """scheduling_gates.go, PreEnqueue: "waiting for scheduling gates: " and the
    gate names as Go's %v prints a []string: in brackets, space separated, in
    the pod's order."""
    return f"waiting for scheduling gates: [{' '.join(gates)}]"


class SchedulingGates(PreEnqueuePlugin):
    name: ClassVar[str] = NAME

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """scheduling_gates.go, EventsToRegister (queueing hints on)."""
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED),
                self.is_schedulable_after_gates_eliminated,
            )
        ]

    def is_schedulable_after_gates_eliminated(
        self, pod: PodInfo, old: PodInfo | None, new: PodInfo
    ) -> QueueingHint:
        """isSchedulableAfterUpdatePodSchedulingGatesEliminated: only the
        gated pod's own update."""
        return QueueingHint.QUEUE if new.uid == pod.uid else QueueingHint.QUEUE_SKIP

    def pre_enqueue(self, pod: PodInfo) -> Status:
        """Success for a pod without gates; UnschedulableAndUnresolvable
        naming every gate otherwise."""
        gates = pod.proto.scheduling_gates
        if not gates:
            return SUCCESS
        return Status.unresolvable(waiting_for_gates_message(gates))
