"""The shim's scheduling cycle with extenders (shim/schedule_one.py): the
calls it makes of the plugin service around the extenders' filter
(schedule_one.go findNodesThatFitPod, evaluateNominatedNode,
findNodesThatPassExtenders) with a fake plugin service and API, and a real
HTTP extender in this process."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog
from berth.framework.extenders import ExtenderConfig
from berth.framework.testing import make_node, make_pod
from berth.kube.rest import KubeApi
from berth.shim.events import EventRecorder, ObjectRef
from berth.shim.queue import QueuedPod
from berth.shim.scheduler import Scheduler
from berth.shim.service import PluginService, ProfileInfo, SortKey

PROFILE = "p"
TIMEOUT = 5.0


class FakeService:
    """The plugin service's answers: a stopped cycle feasible on ``feasible``
    (on the nominated node alone when the pod has one), a resumed one placed
    on the first node it is given."""

    def __init__(self) -> None:
        self.state = ClusterStateLog()
        self.profiles = {
            PROFILE: ProfileInfo(PROFILE, {"bind": ("DefaultBinder",), "postFilter": ("X",)})
        }
        self.address = "fake"
        self.feasible = ["n1", "n2"]
        self.calls: list[tuple[str, Any]] = []

    async def sort_keys(self, profile: str, pods: Sequence[pb.QueuedPod]) -> list[SortKey]:
        return [(0, qp.enqueued_unix_micros) for qp in pods]

    async def pre_enqueue(self, profile: str, pod: cpb.Pod) -> pb.Status:
        return pb.Status()

    async def schedule_stopped(
        self, profile: str, pod: cpb.Pod, start: int, preemption_candidates: bool = False
    ) -> pb.ScheduleResponse:
        self.calls.append(("stopped", pod.nominated_node_name))
        feasible = [pod.nominated_node_name] if pod.nominated_node_name else self.feasible
        resp = pb.ScheduleResponse(
            status=pb.Status(), evaluated_nodes=len(feasible), feasible=feasible
        )
        resp.diagnosis.num_all_nodes = 3
        resp.diagnosis.rejected.add(
            node="n3", status=pb.Status(code=pb.CODE_UNSCHEDULABLE, reasons=["Insufficient cpu"])
        )
        return resp

    async def schedule_resumed(
        self, profile: str, pod: cpb.Pod, start: int, resume: pb.ScheduleResume
    ) -> pb.ScheduleResponse:
        self.calls.append(("resumed", list(resume.nodes)))
        return pb.ScheduleResponse(
            status=pb.Status(),
            node=resume.nodes[0],
            reserve_status=pb.Status(),
            permit=pb.PermitResponse(status=pb.Status()),
            pre_bind_skip=True,
        )

    async def post_filter(
        self,
        profile: str,
        pod: cpb.Pod,
        cycle: pb.CycleState,
        rejected: Sequence[pb.NodeStatus],
        preemption_candidates: bool = False,
    ) -> pb.PostFilterResponse:
        self.calls.append(("postFilter", {r.node: list(r.status.reasons) for r in rejected}))
        return pb.PostFilterResponse(
            status=pb.Status(code=pb.CODE_UNSCHEDULABLE, reasons=["preemption: not helpful"])
        )

    async def node_call(self, method: str, *args: Any) -> Any:
        return pb.StatusResponse()


class FakeApi:
    def __init__(self) -> None:
        self.bound: list[str] = []
        self.patches: list[tuple[str, Any]] = []

    def wait_for_token(self) -> None:
        return None

    def request(self, method: str, path: str, **_: Any) -> None:
        self.bound.append(path.split("/")[-2])

    def strategic_patch(self, path: str, patch: Any) -> None:
        self.patches.append((path, patch))


class FakeRecorder:
    def __init__(self) -> None:
        self.notes: list[str] = []

    def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def record(self, regarding: ObjectRef, type_: str, reason: str, action: str, note: str) -> None:
        self.notes.append(note)


@pytest.fixture
def extender() -> Iterator[tuple[str, set[str]]]:
    """A filter extender rejecting the nodes in the returned set."""
    rejected: set[str] = set()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            args = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            names = args["NodeNames"]
            answer = {
                "NodeNames": [n for n in names if n not in rejected],
                "FailedNodes": {n: "busy" for n in names if n in rejected},
            }
            payload = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", rejected
    server.shutdown()
    server.server_close()


Harness = tuple[Scheduler, FakeService, FakeApi, FakeRecorder, set[str]]


def build(url: str) -> tuple[Scheduler, FakeService, FakeApi, FakeRecorder]:
    service, api, recorder = FakeService(), FakeApi(), FakeRecorder()
    s = Scheduler(
        cast(KubeApi, api),
        cast(PluginService, service),
        [PROFILE],
        recorder=cast(EventRecorder, recorder),
        initial_backoff=60.0,
        max_backoff=60.0,
        extenders=[ExtenderConfig(url_prefix=url, filter_verb="filter", node_cache_capable=True)],
    )
    for name in ("n1", "n2", "n3"):
        s.cache.upsert_node(make_node(name).capacity(cpu="8").obj())
    return s, service, api, recorder


@pytest.fixture
async def harness(extender: tuple[str, set[str]]) -> AsyncIterator[Harness]:
    url, rejected = extender
    s, service, api, recorder = build(url)
    try:
        yield s, service, api, recorder, rejected
    finally:
        await s.stop()


async def popped(s: Scheduler, nominated: str = "") -> QueuedPod:
    pod = make_pod("web").uid("web").obj()
    pod.scheduler_name = PROFILE
    pod.nominated_node_name = nominated
    assert s.extenders is not None
    # As the pod informer delivers it.
    s.extenders.objects.pod_decoder(lambda o: o)(
        {
            "metadata": {"uid": "web", "name": "web", "namespace": "default"},
            "spec": {"schedulerName": PROFILE},
        }
    )
    s.queue.add(pod, PROFILE)
    await s.queue.admit_incoming()
    (qp,) = await asyncio.wait_for(s.queue.pop_batch(1), TIMEOUT)
    return qp


async def until(check: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


async def test_the_extenders_narrow_the_nodes_the_cycle_resumes_with(harness: Harness) -> None:
    s, service, api, _, rejected = harness
    rejected.add("n1")
    await s.scheduling_cycle.schedule([await popped(s)])
    assert service.calls == [("stopped", ""), ("resumed", ["n2"])]
    await until(lambda: api.bound == ["web"], "bound")


async def test_a_nominated_node_the_extenders_reject_sends_the_cycle_over_every_node(
    harness: Harness,
) -> None:
    """evaluateNominatedNode: the nominated node passed Filter but not the
    extenders; findNodesThatFitPod then evaluates every node."""
    s, service, _, _, rejected = harness
    rejected.add("n2")
    await s.scheduling_cycle.schedule([await popped(s, nominated="n2")])
    assert service.calls == [("stopped", "n2"), ("stopped", ""), ("resumed", ["n1"])]


async def test_extenders_rejecting_every_node_give_upstreams_fit_error(harness: Harness) -> None:
    """The extenders' statuses join Filter's in the diagnosis PostFilter gets and
    in the FitError's histogram; Extender is among the rejecting plugins."""
    s, service, _, recorder, rejected = harness
    rejected.update({"n1", "n2"})
    qp = await popped(s)
    await s.scheduling_cycle.schedule([qp])
    assert service.calls[-1] == (
        "postFilter",
        {"n3": ["Insufficient cpu"], "n1": ["busy"], "n2": ["busy"]},
    )
    assert recorder.notes == [
        "0/3 nodes are available: 1 Insufficient cpu, 2 busy. preemption: not helpful"
    ]
    assert "Extender" in qp.unschedulable_plugins


async def test_a_failing_extender_makes_the_attempt_an_error() -> None:
    """findNodesThatFitPod returns a non-ignorable extender's error: the
    attempt is an error (FailedScheduling with net/http's words), backed off."""
    s, service, _, recorder = build("http://127.0.0.1:1/x")
    try:
        qp = await popped(s)
        await s.scheduling_cycle.schedule([qp])
        assert service.calls == [("stopped", "")]
        assert recorder.notes == [
            'Post "http://127.0.0.1:1/x/filter": dial tcp 127.0.0.1:1: connect: connection refused'
        ]
        assert qp.consecutive_errors == 1 and qp.where != "in_flight"
    finally:
        await s.stop()
