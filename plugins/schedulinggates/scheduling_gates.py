"""SchedulingGates: hold back pods that still carry scheduling gates.

Port of pkg/scheduler/framework/plugins/schedulinggates/scheduling_gates.go at
v1.36 (PreEnqueue). A pod with ``spec.schedulingGates`` does not enter the
active queue; whoever added a gate removes it when the pod may be scheduled.
Upstream's EnqueueExtensions (requeue the pod once its gates are gone) belong
to the caller's queue and are not served here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

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

    def pre_enqueue(self, pod: PodInfo) -> Status:
        """Success for a pod without gates; UnschedulableAndUnresolvable
        naming every gate otherwise."""
        gates = pod.proto.scheduling_gates
        if not gates:
            return SUCCESS
        return Status.unresolvable(waiting_for_gates_message(gates))
