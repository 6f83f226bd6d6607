"""The FitError a Reserve or Permit rejection makes (schedule_one.go
schedulingCycle and bindingCycle): the pod is Unschedulable over the one node
it was placed on, with the rejecting plugin recorded, so the events that
plugin registered retry it."""

from __future__ import annotations

from berth.api.v1 import scheduling_pb2 as pb
from berth.framework.status import Code, Status, fit_error_message

_REJECTED_CODES = frozenset(
    {pb.CODE_UNSCHEDULABLE, pb.CODE_UNSCHEDULABLE_AND_UNRESOLVABLE, pb.CODE_PENDING}
)


def is_rejected(st: pb.Status) -> bool:
    """Status.IsRejected: Unschedulable, UnschedulableAndUnresolvable or
    Pending."""
    return st.code in _REJECTED_CODES


def rejection(node: str, st: pb.Status) -> tuple[str, frozenset[str], frozenset[str]]:
    """The FitError upstream makes of a Reserve or Permit rejection, or of a
    pod rejected while waiting at Permit (schedule_one.go schedulingCycle,
    bindingCycle): one node, the plugin's status on it. Returns its message
    ("0/1 nodes are available: 1 <reason>."), the rejecting plugin
    (Diagnosis.UnschedulablePlugins) and, for Pending, PendingPlugins."""
    status = Status(Code(st.code), tuple(st.reasons), st.plugin)
    message = fit_error_message(1, {node: status})
    plugins = frozenset({st.plugin}) if st.plugin else frozenset()
    pending = plugins if st.code == pb.CODE_PENDING else frozenset()
    return message, plugins, pending


__all__ = ["is_rejected", "rejection"]
