"""berth.client's public surface: the names its callers import from the package,
each the object its module defines, and one logger for the whole client."""

from __future__ import annotations

import importlib

import pytest

import berth.client

# What callers (the shim, berth place, the dev tools, tests) import from berth.client.
PUBLIC = {
    "BATCH_TOO_LARGE": "errors",
    "CHANNEL_OPTIONS": "channel",
    "DEFAULT_MAX_MESSAGE_BYTES": "channel",
    "DEFAULT_TIMEOUT_SECONDS": "client",
    "OVERLOADED": "errors",
    "RPC_NAMES": "channel",
    "SERVICE_NAME": "channel",
    "SNAPSHOT_PASSED": "errors",
    "STALE_SNAPSHOT": "errors",
    "TOKEN_ENV": "statelog",
    "TOKEN_METADATA": "client",
    "ClusterStateLog": "statelog",
    "Endpoint": "endpoints",
    "EndpointStats": "endpoints",
    "ErrorDetail": "errors",
    "EventHook": "endpoints",
    "Mode": "client",
    "ReplicaTracker": "replicas",
    "RequestRefused": "errors",
    "SchedulingClient": "client",
    "SnapshotPassed": "errors",
    "Target": "endpoints",
    "channel_options": "channel",
    "load_service_config": "channel",
    "open_channel": "channel",
    "parse_target": "endpoints",
    "rejected_by_status": "answers",
    "rejected_count": "answers",
    "rejected_nodes": "answers",
    "replica_generation": "errors",
    "resolve_dns": "endpoints",
}


def test_all_is_the_public_surface() -> None:
    assert sorted(berth.client.__all__) == sorted(PUBLIC)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_each_name_is_its_module_s_object(name: str) -> None:
    module = importlib.import_module(f"berth.client.{PUBLIC[name]}")
    assert getattr(berth.client, name) is getattr(module, name)


@pytest.mark.parametrize("module", ["client", "endpoints", "replicas"])
def test_the_client_logs_as_berth_client(module: str) -> None:
    # Log lines keep one logger name whichever module of the package writes them.
    log = importlib.import_module(f"berth.client.{module}").log
    assert log.name == "berth.client"
