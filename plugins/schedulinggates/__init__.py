"""PreEnqueue plugin SchedulingGates (upstream
pkg/scheduler/framework/plugins/schedulinggates)."""

from berth.plugins.schedulinggates.scheduling_gates import (
    SchedulingGates,
    waiting_for_gates_message,
)

__all__ = ["SchedulingGates", "waiting_for_gates_message"]
