"""PrioritySort: the default order of the scheduling queue.

Port of pkg/scheduler/framework/plugins/queuesort/priority_sort.go. Upstream's
``Less(a, b)`` puts the pod with the higher priority first and, on equal
priority, the one that entered the queue earlier. Berth's QueueSort is a key
(the smallest key pops first), so the caller can order a whole batch from one
RPC: ``(-priority, enqueued_unix_micros)`` orders exactly as ``Less`` does.
"""

from __future__ import annotations

from typing import ClassVar

from berth.framework.interfaces import QueuedPodInfo, QueueSortPlugin, SortKey

__all__ = ["PrioritySort"]


class PrioritySort(QueueSortPlugin):
    name: ClassVar[str] = "PrioritySort"

    def sort_key(self, pod: QueuedPodInfo) -> SortKey:
        # pod.Spec.Priority is nil-able upstream (GetPodPriority reads nil as
        # 0); the wire record already carries 0 for "no priority".
        return (-pod.pod.priority, pod.enqueued_unix_micros)

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        """Upstream's Less, for callers that compare two pods."""
        return self.sort_key(a) < self.sort_key(b)
