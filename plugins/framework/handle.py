"""What the framework lends a plugin: upstream's framework.Handle, reduced to
what a stateless server can honestly offer."""

from __future__ import annotations

from plugins.framework.snapshot import Snapshot


class Handle:
    """Per-profile handle. ``snapshot`` is the snapshot of the request being
    served (upstream's SnapshotSharedLister); plugins must not keep it."""

    def __init__(self, profile_name: str) -> None:
        self.profile_name = profile_name
        self._snapshot: Snapshot | None = None

    @property
    def snapshot(self) -> Snapshot:
        if self._snapshot is None:
            raise RuntimeError("no snapshot: plugins may read it only while serving a request")
        return self._snapshot

    def bind_snapshot(self, snapshot: Snapshot | None) -> None:
        self._snapshot = snapshot
