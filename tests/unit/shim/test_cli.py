"""berth shim's command line: what it sets up before the scheduler runs."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

import berth.shim.app
from berth.cli import main
from berth.shim.cli import GIL_SWITCH_INTERVAL


@pytest.fixture
def switch_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def test_the_shim_runs_with_a_short_gil_switch_interval(
    monkeypatch: pytest.MonkeyPatch, switch_interval: None
) -> None:
    """The event writers and informers wait on the API server from threads; each
    answer needs the GIL back from the event loop, which CPython hands over after
    its switch interval. The shim runs with 1 ms instead of 5 ms."""
    seen: list[float] = []

    async def fake_run(settings: Any) -> int:
        seen.append(sys.getswitchinterval())
        return 0

    monkeypatch.setattr(berth.shim.app, "run", fake_run)
    sys.setswitchinterval(0.005)

    assert main(["shim"]) == 0
    assert seen == [0.001]
    assert seen == [GIL_SWITCH_INTERVAL]
