"""Callers own their state (issue 22): a real ``berth shim`` schedules on a
plugin server while a second caller, which has learnt the shim's cluster_id,
sends that id a full state far ahead of the shim's holding only a node of its
own. Nothing the shim sees changes: every pod still binds to a real node,
exactly once, with no node overcommitted, and the shim never has to resend
its state.

The plugin server runs in this process (on a thread of its own) so the test
can read the shim's cluster_id from its cache, as an attacker would have read
it from a log before ids stopped being logged."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import grpc
import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import NodeFactory
from berth.framework.config import load_config
from berth.framework.testing import make_node
from berth.kube.rest import KubeApi
from berth.plugins.registry import load_registry
from berth.server.app import RunningServer, start_server
from tests.integration.shimtools import (
    Shim,
    assert_no_overcommit,
    profile_for,
    running,
    wait_all_bound,
    wait_for,
    wait_scheduled_events,
    write_config,
)

pytestmark = pytest.mark.integration


class ThreadServer:
    """``start_server`` on an event loop of its own thread."""

    def __init__(self, config: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        registry = load_registry()
        started: Future[RunningServer] = asyncio.run_coroutine_threadsafe(
            start_server(load_config(str(config), registry), registry, "127.0.0.1:0", trace=False),
            self.loop,
        )
        self.server = started.result(30)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def keys(self) -> list[tuple[str, str]]:
        """(caller, cluster_id) of every snapshot held, read on the server's loop."""

        async def read() -> list[tuple[str, str]]:
            return list(self.server.service.store._entries)

        return asyncio.run_coroutine_threadsafe(read(), self.loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(0), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def plugin_server(tmp_path: Path, namespace: str) -> Iterator[tuple[ThreadServer, Path]]:
    config = write_config(tmp_path / "c.yaml", profile_for(namespace))
    server = ThreadServer(config)
    try:
        yield server, config
    finally:
        server.stop()


def poison(cluster_id: str, incarnation: int) -> pb.SyncRequest:
    st = cpb.ClusterState(
        cluster_id=cluster_id, generation=10**15, full=True, incarnation=incarnation
    )
    st.delta.upsert_nodes.append(
        make_node("attacker-node").capacity(cpu="640", memory="1Ti", pods=1000).obj()
    )
    return pb.SyncRequest(state=st)


def test_a_second_caller_with_the_shims_cluster_id_changes_nothing_the_shim_sees(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    plugin_server: tuple[ThreadServer, Path],
) -> None:
    server, config = plugin_server
    profile = profile_for(namespace)
    # 4 nodes of 2 CPUs; 38 pods of 200m fill them to 95%.
    nodes = [n["metadata"]["name"] for n in fake_nodes(4, cpu="2")]
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log", server=server.address).start()

    def pods(prefix: str, n: int) -> list[dict[str, object]]:
        return [
            objects.pod(
                f"{prefix}-{i}",
                namespace=namespace,
                cpu="200m",
                memory="32Mi",
                scheduler_name=profile,
            )
            for i in range(n)
        ]

    with running(shim):
        objects.create_pods(kube, pods("before", 10))
        wait_all_bound(kube, namespace, 10, timeout=120)
        wait_for(lambda: bool(server.keys()), 30, "the shim's snapshot on the server", shim.log)
        [(caller, cluster_id)] = server.keys()
        assert caller.startswith("token:"), caller
        entry = server.server.service.store.entry(cluster_id, caller)
        assert entry is not None
        with grpc.insecure_channel(server.address) as ch:
            stub = pb_grpc.SchedulingServiceStub(ch)
            for metadata in ((), (("berth-caller-token", "attacker-token-0123456789"),)):
                resp = stub.Sync(
                    poison(cluster_id, entry.incarnation), metadata=metadata, timeout=10
                )
                assert resp.generation == 10**15
        objects.create_pods(kube, pods("after", 28))
        bound = wait_all_bound(kube, namespace, 38, timeout=120)
        on = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in bound}
        assert set(on.values()) <= set(nodes), {k: v for k, v in on.items() if v not in nodes}
        counts = wait_scheduled_events(kube, namespace, 38, timeout=60)
        assert set(counts.values()) == {1}
        assert_no_overcommit(kube, nodes)
        # The shim's own snapshot was never disturbed: one full state, at the start.
        assert shim.metric("berth_plugin_server_full_states_total", endpoint=server.address) == 1
