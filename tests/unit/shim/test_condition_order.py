"""The PodScheduled condition the shim patches after failed cycles
(shim/podstatus.py PodStatusWriter; upstream schedule_one.go updatePod): two
failures of one pod in quick succession must leave the newer message on the
pod, however the API server orders the two requests' answers."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, cast

from berth.api.v1 import cluster_pb2 as cpb
from berth.client import ClusterStateLog
from berth.framework.testing import make_pod
from berth.kube.rest import KubeApi
from berth.shim.events import EventRecorder
from berth.shim.scheduler import Scheduler
from berth.shim.service import PluginService


class SlowFirstApi:
    """Applies status patches to one stored message; the first patch takes
    longer than the second, so without ordering the older one lands last."""

    def __init__(self) -> None:
        self.message = ""
        self.calls = 0
        self._lock = threading.Lock()

    def strategic_patch(self, path: str, patch: Any) -> dict[str, Any]:
        with self._lock:
            self.calls += 1
            first = self.calls == 1
        if first:
            time.sleep(0.3)
        with self._lock:
            self.message = patch["status"]["conditions"][0]["message"]
        return {}

    def wait_for_token(self) -> None:
        return None


class NoService:
    """The Scheduler reads only ``state`` of its service here."""

    def __init__(self) -> None:
        self.state = ClusterStateLog()
        self.profiles: dict[str, Any] = {}

    async def sort_keys(self, profile: str, pods: Any) -> list[Any]:
        return []

    async def pre_enqueue(self, profile: str, pod: cpb.Pod) -> Any:
        raise AssertionError("not called")


class NoRecorder:
    def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None


async def test_newer_condition_wins_when_the_older_patch_is_slower() -> None:
    api = SlowFirstApi()
    s = Scheduler(
        cast(KubeApi, api),
        cast(PluginService, NoService()),
        ["p"],
        recorder=cast(EventRecorder, NoRecorder()),
    )
    pod: cpb.Pod = make_pod("x").uid("x").obj()
    try:
        first = asyncio.create_task(s.pod_status.patch_condition(pod, "Unschedulable", "old", None))
        await asyncio.sleep(0.05)  # the first patch is on its way
        second = asyncio.create_task(
            s.pod_status.patch_condition(pod, "Unschedulable", "new", None)
        )
        await asyncio.gather(first, second)
        assert api.message == "new"
        assert api.calls == 2
        assert s.pod_status.locks == {}
        # The same status again is not re-sent.
        await s.pod_status.patch_condition(pod, "Unschedulable", "new", None)
        assert api.calls == 2
    finally:
        await s.stop()
