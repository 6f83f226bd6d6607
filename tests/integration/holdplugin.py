"""TestHold: a PreFilter plugin that holds a pod's scheduling cycle until the test lets it go.

A pod annotated ``berth.dev/test-hold: <path>`` makes PreFilter write ``<path>.held`` and
wait until ``<path>`` exists (at most ``HOLD_LIMIT`` seconds), so a test can act on the
cluster while that pod's cycle is in the plugin server: the window of a slow plugin.
Other pods pass at once.

``install(site)`` declares it as an out-of-tree plugin (a ``berth.plugins`` entry point
of a distribution in ``site``, as pip would install one) and returns the environment a
``berth serve`` or ``berth shim`` process needs to find it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import ClassVar

from berth.framework import CycleState, NodeBatch, PodInfo, PreFilterPlugin, PreFilterResult
from berth.framework.status import SUCCESS, Status

NAME = "TestHold"
ANNOTATION = "berth.dev/test-hold"
HOLD_LIMIT = 20.0
REPO = Path(__file__).resolve().parents[2]

# The profile's plugins: the defaults, and TestHold at PreFilter.
CONFIG = f"    plugins:\n      preFilter:\n        enabled:\n          - name: {NAME}\n"


class TestHold(PreFilterPlugin):
    name: ClassVar[str] = NAME
    __test__ = False  # not a pytest test class

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        gate = pod.proto.annotations.get(ANNOTATION)
        if gate:
            release = Path(gate)
            Path(f"{gate}.held").touch()
            deadline = time.monotonic() + HOLD_LIMIT
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        return None, SUCCESS


def install(site: Path) -> dict[str, str]:
    """A distribution in ``site`` whose entry point names TestHold; the environment
    (PYTHONPATH) under which berth finds it."""
    info = site / "berth_test_hold-0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: berth-test-hold\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(
        f"[berth.plugins]\n{NAME} = tests.integration.holdplugin:TestHold\n"
    )
    path = os.pathsep.join(p for p in (str(site), str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path}


__all__ = ["ANNOTATION", "CONFIG", "NAME", "TestHold", "install"]
