from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from berth.framework.config import default_config
from berth.plugins.registry import REGISTRY as DEFAULT_REGISTRY
from berth.server.app import RunningServer, start_server
from tests.contract.fakes import CONFIG, REGISTRY

MAX_MESSAGE = 1024 * 1024


@pytest.fixture(params=[True, False], ids=["traced", "untraced"])
async def server(request: pytest.FixtureRequest) -> AsyncIterator[RunningServer]:
    """The contract profile, served with and without the tracing interceptor
    (the two register ScheduleStream differently)."""
    running = await start_server(
        CONFIG, REGISTRY, "127.0.0.1:0", max_message_bytes=MAX_MESSAGE, trace=request.param
    )
    try:
        yield running
    finally:
        await running.stop(0)


@pytest.fixture
async def traced_server() -> AsyncIterator[RunningServer]:
    running = await start_server(CONFIG, REGISTRY, "127.0.0.1:0", trace=True)
    try:
        yield running
    finally:
        await running.stop(0)


@pytest.fixture
async def channel(server: RunningServer) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        yield ch


@pytest.fixture
async def default_server() -> AsyncIterator[RunningServer]:
    """A server with the shipped plugins and the default profile."""
    running = await start_server(
        default_config(DEFAULT_REGISTRY), DEFAULT_REGISTRY, "127.0.0.1:0", trace=False
    )
    try:
        yield running
    finally:
        await running.stop(0)
