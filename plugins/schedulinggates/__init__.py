"""PreEnqueue plugin SchedulingGates (upstream
pkg/scheduler/framework/plugins/schedulinggates)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.schedulinggates.scheduling_gates import (
        SchedulingGates,
        waiting_for_gates_message,
    )

__all__ = ["SchedulingGates", "waiting_for_gates_message"]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
