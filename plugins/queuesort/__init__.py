"""QueueSort plugin PrioritySort (upstream pkg/scheduler/framework/plugins/queuesort)."""

from berth.plugins.queuesort.priority_sort import PrioritySort

__all__ = ["PrioritySort"]
