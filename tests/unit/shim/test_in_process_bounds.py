"""The plugins in-process (berth shim without --plugin-server) are bounded as
over gRPC (issue 22): a cycle that burns CPU runs on the service's worker
thread, so the shim's own event loop keeps running meanwhile, and the
client's timeout is the cycle's deadline: past it the cycle stops at the next
plugin and the pod goes back to the queue (ServiceUnavailable)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import ClassVar

import pytest

from berth.client import ClusterStateLog
from berth.framework import CycleState, FilterPlugin, NodeBatch, PodInfo, ScorePlugin
from berth.framework.interfaces import NodeVerdicts
from berth.framework.model import NodeInfo
from berth.framework.profile import PluginRef, ProfileConfig, SchedulerConfig
from berth.framework.testing import make_node, make_pod
from berth.server.app import build_frameworks
from berth.server.service import SchedulingService
from berth.shim.service import PluginService, ServiceUnavailable
from tests.unit.framework.fakes import REGISTRY as BASE

PROFILE = "burn"
BURN = "test.berth.dev/burn-seconds"


class BurnCPU(FilterPlugin, ScorePlugin):
    """Burns CPU in Filter for the seconds the pod's annotation says; Score
    records the pods it scores."""

    name: ClassVar[str] = "BurnCPU"
    scored: ClassVar[list[str]] = []

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        end = time.perf_counter() + float(pod.proto.annotations.get(BURN, "0"))
        x = 0
        while time.perf_counter() < end:
            for i in range(1000):
                x = (x * 31 + i) % 1000003
        return NodeVerdicts.all_pass(len(nodes))

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        BurnCPU.scored.append(pod.name)
        return 0


CONFIG = SchedulerConfig(
    profiles=(
        ProfileConfig(
            scheduler_name=PROFILE,
            plugins={
                "queueSort": (PluginRef("Sort"),),
                "filter": (PluginRef("BurnCPU"),),
                "score": (PluginRef("BurnCPU"),),
                "bind": (PluginRef("Binder"),),
            },
        ),
    ),
    source="<in-process>",
)


@pytest.fixture
def service() -> Iterator[SchedulingService]:
    BurnCPU.scored.clear()
    registry = {**BASE, BurnCPU.name: BurnCPU}
    svc = SchedulingService(CONFIG, build_frameworks(CONFIG, registry))
    try:
        yield svc
    finally:
        svc.close()


def plugins(svc: SchedulingService, timeout: float) -> PluginService:
    log = ClusterStateLog()
    # Two nodes: with one feasible node a cycle skips Score.
    for name in ("n1", "n2"):
        log.upsert_node(make_node(name).capacity(cpu="8", pods=10).obj())
    log.commit()
    out = PluginService.in_process(svc, log)
    out.client.timeout = timeout
    return out


def burning(name: str, seconds: float) -> PodInfo:
    pod = make_pod(name).scheduler(PROFILE).obj()
    pod.annotations[BURN] = str(seconds)
    return PodInfo(pod)


async def test_the_shims_event_loop_runs_while_an_in_process_cycle_burns_cpu(
    service: SchedulingService,
) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        resp = await plugins(service, 30).schedule(PROFILE, burning("burner", 1.0).proto, 0)
    finally:
        task.cancel()
    assert resp.node
    # A second of burning: the loop ticked all along (about 100 times).
    assert ticks >= 20, f"the shim's loop ticked {ticks} times during a 1 s cycle"


async def test_an_in_process_cycle_stops_at_the_clients_timeout(
    service: SchedulingService,
) -> None:
    svc = plugins(service, 0.3)
    with pytest.raises(ServiceUnavailable, match="DEADLINE_EXCEEDED"):
        await svc.schedule(PROFILE, burning("late", 1.0).proto, 0)
    assert "late" not in BurnCPU.scored
    svc.client.timeout = 30
    assert (await svc.schedule(PROFILE, burning("after", 0).proto, 0)).node
    assert set(BurnCPU.scored) == {"after"}
