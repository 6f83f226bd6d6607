"""berth serve's command line: what it sets up before the server answers."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

import berth.server.app
from berth.cli import main


@pytest.fixture
def collector() -> Iterator[None]:
    yield
    gc.unfreeze()
    gc.enable()


def test_the_server_starts_with_the_collector_paused_then_freezes_and_resumes_it(
    monkeypatch: pytest.MonkeyPatch, collector: None
) -> None:
    """As in berth shim: the cyclic collector is off while start-up creates the
    objects that live as long as the process, and once the server listens they are
    frozen (no collection traverses them again) and the collector is on."""
    seen: dict[str, tuple[bool, int]] = {}
    start_server = berth.server.app.start_server

    async def watched_start(*args: Any, **kwargs: Any) -> Any:
        seen["starting"] = (gc.isenabled(), gc.get_freeze_count())
        return await start_server(*args, **kwargs)

    async def serve_forever(running: Any, grace: float) -> None:
        seen["serving"] = (gc.isenabled(), gc.get_freeze_count())
        await running.stop(0)

    monkeypatch.setattr(berth.server.app, "start_server", watched_start)
    monkeypatch.setattr(berth.server.app, "serve_forever", serve_forever)
    gc.unfreeze()
    assert main(["serve", "--listen", "127.0.0.1:0", "--insecure-plaintext"]) == 0
    assert seen["starting"] == (False, 0)
    enabled, frozen = seen["serving"]
    assert enabled
    assert frozen > 10_000  # the modules' objects, not a handful
    assert gc.isenabled()
