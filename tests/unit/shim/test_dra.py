"""A pod with spec.resourceClaims is scheduled like any other pod: the shim
sends it to the plugin service, whose DynamicResources plugin allocates its
claims (plugins/dynamicresources), and binds it where the profile places it.
The shim keeps no DRA rule of its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog
from berth.framework.testing import make_node, make_pod
from berth.kube.errors import ApiError
from berth.kube.rest import KubeApi
from berth.plugins.dynamicresources import RESOURCE_CLAIMS
from berth.shim.events import EventRecorder, ObjectRef
from berth.shim.queue import QueuedPod
from berth.shim.scheduler import Scheduler
from berth.shim.service import PluginService, SortKey

PROFILE = "any"


class PlaceEverywhere:
    """A plugin service whose profile places every pod it is asked about on n1,
    but a pod named "stuck": no node, and its PostFilter deallocates its claim."""

    def __init__(self) -> None:
        self.state = ClusterStateLog()
        self.profiles: dict[str, Any] = {}
        self.address = "fake"
        self.asked: list[str] = []
        self.calls: list[tuple[str, str]] = []
        self.unreserve_writes: list[pb.ObjectWrite] = []
        self.declared_writes = {PROFILE: {"DynamicResources": (RESOURCE_CLAIMS,)}}

    async def sort_keys(self, profile: str, pods: Sequence[pb.QueuedPod]) -> list[SortKey]:
        return [(-qp.pod.priority, qp.enqueued_unix_micros) for qp in pods]

    async def pre_enqueue(self, profile: str, pod: cpb.Pod) -> pb.Status:
        return pb.Status()

    def _placed(self, pod: cpb.Pod) -> pb.ScheduleResponse:
        self.asked.append(pod.name)
        if pod.name == "stuck":
            resp = pb.ScheduleResponse(
                status=pb.Status(code=pb.CODE_UNSCHEDULABLE, reasons=["no"]),
                diagnosis=pb.Diagnosis(message="0/1 nodes are available: no."),
            )
            resp.post_filter.status.code = pb.CODE_UNSCHEDULABLE
            resp.post_filter.writes.add(
                ref=cpb.ObjectRef(
                    group="resource.k8s.io",
                    resource="resourceclaims",
                    namespace=pod.namespace,
                    name="stuck-gpu",
                ),
                version="v1",
                subresource="status",
                merge_patch=b'{"metadata":{"resourceVersion":"7"},"status":{"allocation":null}}',
                plugin="DynamicResources",
            )
            return resp
        return pb.ScheduleResponse(
            status=pb.Status(),
            node="n1",
            reserve_status=pb.Status(),
            permit=pb.PermitResponse(status=pb.Status()),
            pre_bind_skip=not pod.name.startswith("unbindable"),
        )

    async def schedule(
        self,
        profile: str,
        pod: cpb.Pod,
        start: int,
        cycle: int = 0,
        *,
        explain: bool = False,
        seed: int = 0,
        preemption_candidates: bool = False,
    ) -> pb.ScheduleResponse:
        return self._placed(pod)

    async def schedule_batch(
        self,
        profile: str,
        pods: Sequence[cpb.Pod],
        start: int,
        cycle: int = 0,
        *,
        explain: bool = False,
        seed: int = 0,
    ) -> pb.ScheduleBatchResponse:
        return pb.ScheduleBatchResponse(results=[self._placed(p) for p in pods])

    async def node_call(
        self, method: str, profile: str, pod: cpb.Pod, node: str, cycle: pb.CycleState
    ) -> Any:
        self.calls.append((method, pod.name))
        if method == "Bind":
            if pod.name.startswith("unbindable"):
                return pb.BindResponse(status=pb.Status(code=pb.CODE_ERROR, reasons=["refused"]))
            return pb.BindResponse(bound_by="DefaultBinder", caller_binds=True, node=node)
        if method == "PreBind" and pod.name.startswith("unbindable"):
            return pb.StatusResponse(writes=[claim_write(pod, "reserve", "gpu")])
        if method == "Unreserve" and pod.name.startswith("unbindable"):
            return pb.StatusResponse(writes=list(self.unreserve_writes))
        return pb.StatusResponse()


def claim_write(
    pod: cpb.Pod,
    tag: str,
    claim: str,
    resource: str = "resourceclaims",
    group: str = "resource.k8s.io",
) -> pb.ObjectWrite:
    """A status merge patch on a claim of ``pod``'s, ``tag`` telling writes apart."""
    return pb.ObjectWrite(
        ref=cpb.ObjectRef(
            group=group, resource=resource, namespace=pod.namespace, name=f"{pod.name}-{claim}"
        ),
        version="v1",
        subresource="status",
        merge_patch=b'{"status":{"tag":"' + tag.encode() + b'"}}',
        plugin="DynamicResources",
    )


class Api:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        self.conditions: dict[str, Any] = {}
        self.patches: list[tuple[str, Any]] = []

    def merge_patch(self, path: str, patch: Any) -> Any:
        self.patches.append((path, patch))
        if "broken" in path:
            raise ApiError("PATCH", path, 409, b'{"reason":"Conflict"}')
        return {"metadata": {"name": path.rsplit("/", 2)[-2], "resourceVersion": "8"}}

    def strategic_patch(self, path: str, patch: Any) -> None:
        if "conditions" in patch.get("status", {}):
            self.conditions[path] = patch["status"]["conditions"][0]

    def wait_for_token(self) -> None:
        return None

    def request(self, method: str, path: str, **_: Any) -> None:
        self.requests.append((method, path))


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def record(self, regarding: ObjectRef, type_: str, reason: str, action: str, note: str) -> None:
        self.events.append((regarding.name, reason, note))


@pytest.fixture
async def sched() -> AsyncIterator[tuple[Scheduler, PlaceEverywhere, Api, Recorder]]:
    service, api, recorder = PlaceEverywhere(), Api(), Recorder()
    s = Scheduler(
        cast(KubeApi, api),
        cast(PluginService, service),
        [PROFILE],
        recorder=cast(EventRecorder, recorder),
        initial_backoff=60.0,
        max_backoff=60.0,
    )
    s.cache.upsert_node(make_node("n1").capacity(cpu="8").obj())
    try:
        yield s, service, api, recorder
    finally:
        await s.stop()


async def popped(s: Scheduler, *pods: cpb.Pod) -> list[QueuedPod]:
    for pod in pods:
        pod.scheduler_name = PROFILE
        s.queue.add(pod, PROFILE)
    await s.queue.admit_incoming()
    return await asyncio.wait_for(s.queue.pop_batch(len(pods)), 5.0)


def with_claims(name: str, *claims: str) -> cpb.Pod:
    pod: cpb.Pod = make_pod(name).uid(name).obj()
    for claim in claims:
        pod.resource_claims.add(name=claim, resource_claim_name=f"{name}-{claim}")
    return pod


async def test_pod_with_resource_claims_goes_to_the_plugin_service_and_is_bound(
    sched: tuple[Scheduler, PlaceEverywhere, Api, Recorder],
) -> None:
    s, service, api, recorder = sched
    plain: cpb.Pod = make_pod("plain").uid("plain").obj()
    batch = await popped(s, with_claims("dra", "gpu", "nic"), plain)
    await s.scheduling_cycle.schedule(batch)
    assert sorted(service.asked) == ["dra", "plain"]
    assert s.cache.is_assumed("dra")
    await asyncio.wait_for(asyncio.gather(*s.tasks), 5.0)
    assert ("POST", "/api/v1/namespaces/default/pods/dra/binding") in api.requests
    assert not [e for e in recorder.events if e[1] == "FailedScheduling"]


async def test_a_failed_cycles_post_filter_writes_are_performed(
    sched: tuple[Scheduler, PlaceEverywhere, Api, Recorder],
) -> None:
    """PostFilterResponse.writes (DynamicResources deallocating a claim that keeps
    the pod off every node): checked as PreBind's and applied after the failed
    cycle; the pod is unschedulable either way."""
    s, _, api, recorder = sched
    await s.scheduling_cycle.schedule(await popped(s, with_claims("stuck", "gpu")))
    await asyncio.wait_for(asyncio.gather(*s.tasks), 5.0)
    assert api.patches == [
        (
            "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/stuck-gpu/status",
            {"metadata": {"resourceVersion": "7"}, "status": {"allocation": None}},
        )
    ]
    assert [e[1] for e in recorder.events if e[0] == "stuck"] == ["FailedScheduling"]
    assert not s.cache.is_assumed("stuck")


CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"


async def bind_and_fail(
    sched: tuple[Scheduler, PlaceEverywhere, Api, Recorder], writes: Sequence[pb.ObjectWrite]
) -> None:
    s, service, _, _ = sched
    service.unreserve_writes = list(writes)
    await s.scheduling_cycle.schedule(await popped(s, with_claims("unbindable", "gpu")))
    await asyncio.wait_for(asyncio.gather(*s.tasks), 5.0)
    assert [m for m, p in service.calls if p == "unbindable"] == ["PreBind", "Bind", "Unreserve"]
    assert not s.cache.is_assumed("unbindable")


async def test_unreserve_writes_are_performed_after_a_failed_binding(
    sched: tuple[Scheduler, PlaceEverywhere, Api, Recorder],
) -> None:
    """StatusResponse.writes of the binding cycle's Unreserve (DynamicResources
    taking the pod out of reservedFor, dynamicresources.go Unreserve): applied
    after PreBind's, best effort: a failed write is reported on the pod and the
    writes after it are still tried."""
    _, _, api, recorder = sched
    pod = with_claims("unbindable", "gpu")
    await bind_and_fail(sched, [claim_write(pod, "a", "broken"), claim_write(pod, "b", "gpu")])
    assert api.patches == [
        (f"{CLAIMS}/unbindable-gpu/status", {"status": {"tag": "reserve"}}),
        (f"{CLAIMS}/unbindable-broken/status", {"status": {"tag": "a"}}),
        (f"{CLAIMS}/unbindable-gpu/status", {"status": {"tag": "b"}}),
    ]
    failed = [e for e in recorder.events if e[1] == "FailedUnreserveWrite"]
    assert len(failed) == 1 and "unbindable-broken" in failed[0][2]


async def test_unreserve_writes_are_guarded(
    sched: tuple[Scheduler, PlaceEverywhere, Api, Recorder],
) -> None:
    """Unreserve's writes are checked as PreBind's (shim/guard.py): a kind the
    plugin does not declare refuses the whole list, nothing is written."""
    _, _, api, recorder = sched
    pod = with_claims("unbindable", "gpu")
    await bind_and_fail(
        sched,
        [claim_write(pod, "a", "gpu"), claim_write(pod, "b", "pv", "persistentvolumes", "")],
    )
    assert api.patches == [(f"{CLAIMS}/unbindable-gpu/status", {"status": {"tag": "reserve"}})]
    refused = [e for e in recorder.events if e[1] == "FailedUnreserveWrite"]
    assert len(refused) == 1 and "refused by the scheduler" in refused[0][2]
