"""Helpers for tests that use the local cluster (the pytest fixtures live in
tests/integration/conftest.py and use these)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from berth.kube.rest import JSON

# Label on every fake node a test creates, value = the test's namespace: pods select their
# test's nodes with it, since nodes are cluster-wide.
TEST_LABEL = "berth.dev/test"


class NodeFactory(Protocol):
    """``fake_nodes(count, prefix="node", **objects.node kwargs) -> created nodes``."""

    def __call__(self, count: int, prefix: str = "node", **kwargs: Any) -> list[JSON]: ...


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """Live processes whose command line contains ``text`` (e.g. a test's state dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()  # empty for zombies and kernel threads
        except OSError:
            continue
        line = raw.replace(b"\0", b" ").decode(errors="replace")
        if text in line:
            found.append((int(entry.name), line))
    return found
