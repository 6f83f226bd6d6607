"""``berth shim`` without --server runs the plugins in-process: those of the
registry it was given (the CLI passes plugins.registry.load_registry(), with
out-of-tree plugins), else load_registry()'s."""

from __future__ import annotations

from typing import ClassVar

import pytest

from berth.client import ClusterStateLog
from berth.framework import CycleState, FilterPlugin, NodeInfo, PodInfo, Status
from berth.framework.config import API_VERSION, KIND, parse_config
from berth.framework.interfaces import Plugin
from berth.framework.testing import make_node, make_pod
from berth.plugins.registry import REGISTRY
from berth.shim.app import ShimSettings, build_service


class OnlyB(FilterPlugin):
    name: ClassVar[str] = "OnlyB"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.success() if node.name == "b" else Status.unschedulable("not b")


WITH_ONLY_B: dict[str, type[Plugin]] = {**REGISTRY, OnlyB.name: OnlyB}
CONFIG = parse_config(
    {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "profiles": [
            {"schedulerName": "s", "plugins": {"filter": {"enabled": [{"name": "OnlyB"}]}}}
        ],
    },
    "<test>",
    WITH_ONLY_B,
)


def cluster() -> ClusterStateLog:
    state = ClusterStateLog()
    state.upsert_node(make_node("a").capacity(cpu="64", memory="256Gi").obj())
    state.upsert_node(make_node("b").capacity(cpu="2", memory="4Gi").obj())
    state.commit()
    return state


async def test_the_in_process_service_runs_the_registry_it_is_given() -> None:
    state = cluster()
    service = build_service(ShimSettings(config=CONFIG, registry=WITH_ONLY_B), state)
    resp = await service.client.schedule("s", make_pod().req(cpu="100m").obj())
    assert resp.node == "b"


async def test_without_one_it_loads_the_registry_with_installed_plugins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    import berth.plugins.registry

    monkeypatch.setattr(berth.plugins.registry, "load_registry", lambda: WITH_ONLY_B)
    state = cluster()
    service = build_service(ShimSettings(config=CONFIG), state)
    resp = await service.client.schedule("s", make_pod().req(cpu="100m").obj())
    assert resp.node == "b"
