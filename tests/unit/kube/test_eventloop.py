"""berth.kube.eventloop: the shim's loop is uvloop's where it is installed."""

from __future__ import annotations

import asyncio
import sys

import pytest
import uvloop

from berth.kube.eventloop import new_event_loop


def test_the_loop_is_uvloops_when_installed() -> None:
    loop = new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
        assert loop.run_until_complete(asyncio.sleep(0, "ran")) == "ran"
    finally:
        loop.close()


def test_without_uvloop_the_standard_loop_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    loop = new_event_loop()
    try:
        assert not isinstance(loop, uvloop.Loop)
        assert isinstance(loop, asyncio.BaseEventLoop)
    finally:
        loop.close()
