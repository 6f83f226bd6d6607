"""Reading the plugin service's answers the same way whatever form the caller asked for."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from berth.api.v1 import scheduling_pb2 as pb


def rejected_by_status(d: pb.Diagnosis) -> Iterator[tuple[Sequence[str], pb.Status]]:
    """``d``'s rejected nodes with their status, a status at a time: each
    ``d.rejected_groups`` entry (ScheduleRequest.group_rejected) as it is, each
    ``d.rejected`` entry (one per node) as a group of one."""
    for ns in d.rejected:
        yield (ns.node,), ns.status
    for group in d.rejected_groups:
        yield group.nodes, group.status


def rejected_nodes(d: pb.Diagnosis) -> Iterator[tuple[str, pb.Status]]:
    """Each rejected node of ``d`` and its status, whichever form ``d`` carries
    (``rejected_by_status``); a group's nodes share one Status message."""
    for nodes, status in rejected_by_status(d):
        for node in nodes:
            yield node, status


def rejected_count(d: pb.Diagnosis) -> int:
    """How many nodes ``d`` lists as rejected, in either form."""
    return sum(len(nodes) for nodes, _ in rejected_by_status(d))


__all__ = ["rejected_by_status", "rejected_count", "rejected_nodes"]
