"""shim/debug.py and framework/configz.py: the cache and queue dump (kube-scheduler's
backend/cache/debugger dumper.go), /configz (component-base configz), and the profiling
routes that enableProfiling turns on (cmd/kube-scheduler/app/server.go
newEndpointsHandler). tests/integration/test_shim_debug.py runs them in a real shim."""

from __future__ import annotations

import asyncio
import io
import logging
import threading
import time
from collections.abc import Sequence

import orjson
import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog
from berth.framework.config import default_config, parse_config_text
from berth.framework.configz import configz, go_duration
from berth.framework.testing import make_node, make_pod
from berth.logs import configure
from berth.plugins.registry import REGISTRY
from berth.shim.cache import SchedulerCache
from berth.shim.debug import CacheDumper, CpuProfiler, install, thread_stacks
from berth.shim.queue import SchedulingQueue
from berth.shim.service import SortKey
from berth.shim.serving import DebugRequest, DebugRoutes


async def _sort(profile: str, pods: Sequence[pb.QueuedPod]) -> list[SortKey]:
    del profile
    return [(qp.enqueued_unix_micros,) for qp in pods]


async def _admit(profile: str, pod: cpb.Pod) -> pb.Status:
    del profile
    if pod.scheduling_gates:
        return pb.Status(code=pb.CODE_UNSCHEDULABLE_AND_UNRESOLVABLE, plugin="SchedulingGates")
    return pb.Status()


async def _dumper() -> CacheDumper:
    cache = SchedulerCache(ClusterStateLog("c1"))
    cache.upsert_node(make_node("n1").capacity(cpu="4", memory="8Gi", pods=110).obj())
    cache.upsert_node(make_node("n2").capacity(cpu="2", memory="4Gi", pods=10).obj())
    on_n1 = make_pod("web", "shop").uid("u-web").req(cpu="500m", memory="1Gi").obj()
    on_n1.node_name, on_n1.phase = "n1", "Running"
    cache.add_or_update_pod(on_n1)
    nominee = make_pod("big", "shop").uid("u-big").req(cpu="1").obj()
    cache.nominate(nominee, "n2")
    queue = SchedulingQueue(_sort, _admit)
    queue.add(make_pod("waiting", "shop").uid("u-wait").obj(), "berth")
    gated = make_pod("gated", "shop").uid("u-gated").obj()
    gated.scheduling_gates.append("example.com/hold")
    queue.add(gated, "berth")
    await queue.admit_incoming()
    return CacheDumper(cache, queue)


async def test_the_dump_has_nodes_with_their_pods_and_the_queue_by_place() -> None:
    """dumper.go printNodeInfo and printPod: name, deleted, requested and allocatable
    resources, the scheduled pods, the nominated ones; dumpSchedulingQueue's summary and
    pods."""
    dumper = await _dumper()
    nodes = dumper.nodes()
    n1, n2 = nodes.split("\n\n")
    assert n1.startswith("Node name: n1\nDeleted: False\nRequested Resources: {MilliCPU:500 ")
    assert "Allocatable Resources:{MilliCPU:4000 Memory:8589934592 " in n1
    assert (
        "Scheduled Pods(number: 1):\nname: web, namespace: shop, uid: u-web, phase: Running, "
        "nominated node: "
    ) in n1
    assert "Scheduled Pods(number: 0):\nNominated Pods(number: 1):\nname: big" in n2
    assert "nominated node: n2" in n2
    summary, pods = dumper.queue()
    assert summary == "activeQ:1; backoffQ:0; unschedulablePods:0; gated:1; inFlight:0"
    assert pods.startswith("active:\nname: waiting, namespace: shop, uid: u-wait")
    assert "gated:\nname: gated, namespace: shop" in pods


async def test_sigusr2s_dump_goes_to_the_log_as_two_lines_with_multi_line_values() -> None:
    dumper = await _dumper()
    out = io.StringIO()
    root, berth_logger = logging.getLogger(), logging.getLogger("berth")
    saved = list(root.handlers), root.level, berth_logger.level
    try:
        configure(0, "text", out)
        dumper.log_all()
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        berth_logger.setLevel(saved[2])
    text = out.getvalue()
    assert "] Dump of cached NodeInfo nodes=<\n\tNode name: n1\n" in text
    assert '] Dump of scheduling queue summary="activeQ:1; backoffQ:0;' in text
    assert "pods=<\n\tactive:\n\tname: waiting" in text


def test_configz_is_the_effective_v1_configuration() -> None:
    """configz.go write: {"componentconfig": <KubeSchedulerConfiguration v1>}, defaults
    applied (SetDefaults_KubeSchedulerConfiguration), durations as Go prints them."""
    config = parse_config_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "parallelism: 8\nprofiles:\n- schedulerName: berth\n"
        "  pluginConfig:\n  - name: NodeResourcesFit\n"
        "    args: {scoringStrategy: {type: MostAllocated}}\n",
        "c.yaml",
        REGISTRY,
    )
    body = orjson.loads(orjson.dumps(configz(config)))
    cc = body["componentconfig"]
    assert (cc["kind"], cc["apiVersion"]) == (
        "KubeSchedulerConfiguration",
        "kubescheduler.config.k8s.io/v1",
    )
    assert cc["parallelism"] == 8 and cc["podMaxBackoffSeconds"] == 10
    assert cc["leaderElection"]["leaseDuration"] == "15s"
    assert cc["leaderElection"]["resourceName"] == "kube-scheduler"
    assert cc["clientConnection"] == {
        "kubeconfig": "",
        "acceptContentTypes": "",
        "contentType": "application/vnd.kubernetes.protobuf",
        "qps": 50.0,
        "burst": 100,
    }
    assert cc["enableProfiling"] is True and cc["delayCacheUntilActive"] is False
    (profile,) = cc["profiles"]
    assert profile["schedulerName"] == "berth"
    assert {"name": "NodeResourcesFit", "weight": 1} in profile["plugins"]["score"]["enabled"]
    assert {"name": "DefaultBinder", "weight": 0} in profile["plugins"]["bind"]["enabled"]
    fit = next(p for p in profile["pluginConfig"] if p["name"] == "NodeResourcesFit")
    assert fit["args"]["kind"] == "NodeResourcesFitArgs"
    assert fit["args"]["scoringStrategy"]["type"] == "MostAllocated"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(15, "15s"), (2.5, "2.5s"), (90, "1m30s"), (3600, "1h0m0s"), (0.5, "500ms"), (0, "0s")],
)
def test_durations_print_as_go_prints_them(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


def _config(profiling: bool) -> str:
    return (
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        f"enableProfiling: {str(profiling).lower()}\nprofiles:\n- schedulerName: berth\n"
    )


@pytest.mark.parametrize("profiling", [True, False], ids=["profiling", "no-profiling"])
async def test_profiling_routes_only_with_enable_profiling(profiling: bool) -> None:
    """server.go newEndpointsHandler: routes.Profiling only when EnableProfiling."""
    routes = DebugRoutes(asyncio.get_running_loop())
    install(routes, parse_config_text(_config(profiling), "c.yaml", REGISTRY), await _dumper())
    expected = {"/configz", "/debug/cache"}
    if profiling:
        expected |= {"/debug/pprof/goroutine", "/debug/pprof/profile"}
    assert set(routes.paths()) == expected


def test_thread_stacks_name_every_thread_and_task() -> None:
    started, release = threading.Event(), threading.Event()

    def parked() -> None:
        started.set()
        release.wait(10)

    thread = threading.Thread(target=parked, name="parked-thread", daemon=True)
    thread.start()
    started.wait(5)
    loop = asyncio.new_event_loop()
    task = loop.create_task(asyncio.sleep(10), name="sleeping-task")
    loop.run_until_complete(asyncio.sleep(0))
    try:
        text = thread_stacks(loop)
    finally:
        release.set()
        task.cancel()
        loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
        loop.close()
    assert "thread parked-thread (id" in text and "in parked\n" in text
    assert "thread MainThread" in text and "in test_thread_stacks_name_every_thread" in text
    assert "sleeping-task" in text


def test_cpu_profile_sees_other_threads_and_bounds_its_input() -> None:
    """yappi profiles every thread: a busy thread's function shows up though the profile
    runs on the request's thread."""
    stop = threading.Event()

    def spin_in_other_thread() -> int:
        return sum(i * i for i in range(1000))

    def busy() -> None:
        while not stop.is_set():
            spin_in_other_thread()

    thread = threading.Thread(target=busy, daemon=True)
    thread.start()
    try:
        answer = CpuProfiler().profile(DebugRequest("/debug/pprof/profile", {"seconds": ("0.5",)}))
    finally:
        stop.set()
        thread.join(5)
    assert answer.code == 200, answer.body
    assert b"spin_in_other_thread" in answer.body
    for bad in ("0", "-1", "301", "x"):
        refused = CpuProfiler().profile(DebugRequest("/p", {"seconds": (bad,)}))
        assert refused.code == 400 and b"give a number of seconds" in refused.body
    refused = CpuProfiler().profile(DebugRequest("/p", {"seconds": ("1",), "clock": ("gpu",)}))
    assert refused.code == 400


def test_one_cpu_profile_at_a_time() -> None:
    entered, release = threading.Event(), threading.Event()

    def sleep(_seconds: float) -> None:
        entered.set()
        release.wait(10)

    profiler = CpuProfiler(sleep=sleep)
    results: list[int] = []
    first = threading.Thread(
        target=lambda: results.append(
            profiler.profile(DebugRequest("/p", {"seconds": ("1",)})).code
        )
    )
    first.start()
    assert entered.wait(5)
    assert profiler.profile(DebugRequest("/p", {"seconds": ("1",)})).code == 409
    release.set()
    first.join(10)
    assert results == [200]
    time.sleep(0)


def test_default_config_dumps_too() -> None:
    body = configz(default_config(REGISTRY))
    assert body["componentconfig"]["profiles"][0]["schedulerName"] == "default-scheduler"


def test_configz_shows_extenders_as_upstream_spells_them_without_key_data() -> None:
    config = parse_config_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "profiles:\n- schedulerName: x\nextenders:\n- urlPrefix: https://e:8888\n"
        "  filterVerb: filter\n  enableHTTPS: true\n  httpTimeout: 90s\n"
        "  tlsConfig: {insecure: true, keyData: c2VjcmV0, certData: Y2VydA==}\n"
        "  managedResources: [{name: example.com/gpu, ignoredByScheduler: true}]\n",
        "c.yaml",
        REGISTRY,
    )
    (ext,) = configz(config)["componentconfig"]["extenders"]
    assert ext["urlPrefix"] == "https://e:8888" and ext["enableHTTPS"] is True
    assert ext["httpTimeout"] == "1m30s" and ext["filterVerb"] == "filter"
    assert ext["managedResources"] == [{"name": "example.com/gpu", "ignoredByScheduler": True}]
    assert ext["tlsConfig"]["insecure"] is True and ext["tlsConfig"]["keyData"] == "<redacted>"
    assert b"secret" not in orjson.dumps(configz(config))
