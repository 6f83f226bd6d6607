"""DefaultBinder: bind the pod to the chosen node with a Binding object.

Upstream (pkg/scheduler/framework/plugins/defaultbinder/default_binder.go,
Bind) POSTs ``pods/<name>/binding`` with its own client. Berth's plugin server
holds no API credentials (the caller does every write), so this plugin sets
``caller_binds``: Success here means "bind it", and the caller (the shim)
POSTs the same Binding (namespace, name, UID of the pod; target Node
``node_name``) and handles conflicts.
"""

from __future__ import annotations

from typing import ClassVar

from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import BindPlugin
from berth.framework.model import PodInfo
from berth.framework.status import SUCCESS, Status

__all__ = ["DefaultBinder"]


class DefaultBinder(BindPlugin):
    name: ClassVar[str] = "DefaultBinder"
    caller_binds: ClassVar[bool] = True

    def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        # Never Skip: like upstream, DefaultBinder binds every pod it is asked
        # to, so it belongs last among the Bind plugins.
        return SUCCESS
