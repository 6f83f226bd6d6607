"""shim/scheduler.py: the bindings and the scheduler's events share one pool of
connections (berth.kube.asynchttp), the events as background requests, against
the small HTTP/1.1 server of tests/unit/kube/test_asynchttp.py."""

from __future__ import annotations

import asyncio
from typing import cast

import urllib3
from kubernetes import client as kclient

from berth.framework.testing import make_node, make_pod
from berth.kube.rest import KubeApi
from berth.shim.events import ObjectRef
from berth.shim.scheduler import Scheduler, ShimOptions
from berth.shim.service import PluginService
from tests.unit.kube.test_asynchttp import FakeServer, created
from tests.unit.shim.test_preemption import PROFILE, FakeService


async def test_the_events_go_over_the_bindings_connections() -> None:
    server = FakeServer(created)
    srv = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    cfg = kclient.Configuration()
    cfg.host = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    api = KubeApi(cfg.host, urllib3.PoolManager(), lambda: None, qps=0, configuration=(cfg, None))
    s = Scheduler(
        api,
        cast(PluginService, FakeService()),
        [PROFILE],
        options=ShimOptions(bind_connections=2),
    )
    s.cache.upsert_node(make_node("n1").obj())
    recorder = s.recorders[PROFILE]
    recorder.start()
    try:
        pods = [make_pod(f"p{i}").obj() for i in range(2)]
        assert await s.binding._binder.bind(pods[0], "n1") is None
        p0 = ObjectRef(kind="Pod", namespace="default", name="p0", uid=pods[0].uid)
        recorder.record(p0, "Normal", "Scheduled", "Binding", "Assigned default/p0 to n1")
        await recorder.stop()  # written
        assert await s.binding._binder.bind(pods[1], "n1") is None
    finally:
        await s.stop()
        srv.close()
        await srv.wait_closed()
    # One connection for the three: the event reused the bindings' connection.
    assert server.connections == 1
    assert [path.rsplit("/", 1)[-1] for _, path, _, _ in server.requests] == [
        "binding",
        "events",
        "binding",
    ]
