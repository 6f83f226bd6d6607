"""QueueSort plugin PrioritySort (upstream pkg/scheduler/framework/plugins/queuesort)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.queuesort.priority_sort import PrioritySort

__all__ = ["PrioritySort"]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
