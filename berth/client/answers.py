"""Reading the plugin service's answers the same way whatever form the caller asked for."""

from __future__ import annotations

from collections.abc import Iterator

from berth.api.v1 import scheduling_pb2 as pb


def rejected_nodes(d: pb.Diagnosis) -> Iterator[tuple[str, pb.Status]]:
    """Each rejected node of ``d`` and its status, from ``d.rejected`` (one
    entry per node) or ``d.rejected_groups`` (ScheduleRequest.group_rejected:
    a status once, then its nodes); a group's nodes share one Status message."""
    for ns in d.rejected:
        yield ns.node, ns.status
    for group in d.rejected_groups:
        status = group.status
        for node in group.nodes:
            yield node, status


def rejected_count(d: pb.Diagnosis) -> int:
    """How many nodes ``d`` lists as rejected, in either form."""
    return len(d.rejected) + sum(len(g.nodes) for g in d.rejected_groups)


__all__ = ["rejected_count", "rejected_nodes"]
