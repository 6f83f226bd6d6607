"""Errors raised by the local control plane.

Each error's message says what happened and what to do next; the class says who can fix it:
the user's machine (`BinaryMissingError`, `PortInUseError`), the cluster's start-up
(`NotReadyError`, `ProcessExitedError`), or the recorded state (`StateError`).
"""

from __future__ import annotations


class LocalClusterError(Exception):
    """Base class: the local control plane could not do what was asked."""


class BinaryMissingError(LocalClusterError):
    """An upstream binary (etcd, kube-apiserver, ...) is not built yet or not executable."""


class PortInUseError(LocalClusterError):
    """A port that was asked for explicitly is already taken by another process."""


class NotReadyError(LocalClusterError):
    """A component did not become ready within its timeout (it has been stopped)."""


class ProcessExitedError(LocalClusterError):
    """A component exited while it was starting (it has been cleaned up)."""


class StateError(LocalClusterError):
    """The recorded cluster state is missing, unreadable or does not match what is running."""
