"""What the framework lends a plugin: upstream's framework.Handle, reduced to
what a stateless server can honestly offer."""

from __future__ import annotations

from typing import Protocol

from berth.framework.cycle_state import CycleState
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.snapshot import Snapshot
from berth.framework.status import Status


class FrameworkRunner(Protocol):
    """What the runtime lends plugins that evaluate what-ifs (preemption):
    upstream's Handle methods of the same names (framework.go)."""

    def run_filter_with_nominated_pods(
        self, state: CycleState, pod: PodInfo, node: NodeInfo
    ) -> Status: ...

    def run_pre_filter_extension_add_pod(
        self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo
    ) -> Status: ...

    def run_pre_filter_extension_remove_pod(
        self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo
    ) -> Status: ...


class Handle:
    """Per-profile handle. ``snapshot`` is the snapshot of the request being
    served (upstream's SnapshotSharedLister); plugins must not keep it.
    ``framework`` runs the profile's plugins on a NodeInfo the plugin built
    (set by the runtime that owns the handle)."""

    def __init__(self, profile_name: str) -> None:
        self.profile_name = profile_name
        self._snapshot: Snapshot | None = None
        self._framework: FrameworkRunner | None = None

    @property
    def framework(self) -> FrameworkRunner:
        if self._framework is None:
            raise RuntimeError("this handle belongs to no framework: plugins run outside a profile")
        return self._framework

    def bind_framework(self, framework: FrameworkRunner | None) -> None:
        self._framework = framework

    @property
    def snapshot(self) -> Snapshot:
        if self._snapshot is None:
            raise RuntimeError("no snapshot: plugins may read it only while serving a request")
        return self._snapshot

    @property
    def has_snapshot(self) -> bool:
        """Is a snapshot bound? Always while serving a scheduling or binding
        call; at PreEnqueue only when the call carried cluster state."""
        return self._snapshot is not None

    def bind_snapshot(self, snapshot: Snapshot | None) -> None:
        self._snapshot = snapshot
