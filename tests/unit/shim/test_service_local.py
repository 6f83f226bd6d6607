"""berth.shim.service: what the shim answers itself instead of asking the plugin
service (PreEnqueue when only SchedulingGates runs there, QueueSort when only
PrioritySort does, Bind when DefaultBinder is the only Bind plugin): the
same answers the service gives, and a call whenever another plugin is
configured at that point."""

from __future__ import annotations

from collections import Counter
from typing import Any

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog, SchedulingClient
from berth.framework.config import API_VERSION, KIND, default_config, parse_config
from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import PostBindPlugin, PreEnqueuePlugin
from berth.framework.model import PodInfo
from berth.framework.resourceapi import RESOURCE_CLAIMS
from berth.framework.status import SUCCESS, Status
from berth.framework.testing import make_object
from berth.plugins.registry import load_registry
from berth.server.app import build_frameworks
from berth.server.service import SchedulingService
from berth.shim.service import InProcessStub, PluginService, ProfileInfo


class CountingStub(InProcessStub):
    def __init__(self, service: Any) -> None:
        super().__init__(service)
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        call = super().__getattr__(name)

        async def counted(request: Any, **options: Any) -> Any:
            self.calls[name] += 1
            return await call(request, **options)

        return counted


class NoWhitespace(PreEnqueuePlugin):
    """A PreEnqueue plugin the shim does not know: it must be asked."""

    name = "NoWhitespace"

    def pre_enqueue(self, pod: PodInfo) -> Status:
        return Status.unresolvable("no") if " " in pod.name else SUCCESS


class Audit(PostBindPlugin):
    name = "Audit"

    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        return None


def service_for(doc: dict[str, Any] | None = None) -> tuple[PluginService, CountingStub]:
    registry = {**load_registry(), "NoWhitespace": NoWhitespace, "Audit": Audit}
    config = (
        default_config(registry)
        if doc is None
        else parse_config({"apiVersion": API_VERSION, "kind": KIND, **doc}, "<test>", registry)
    )
    server = SchedulingService(config, build_frameworks(config, registry))
    stub = CountingStub(server)
    svc = PluginService(SchedulingClient(None, ClusterStateLog(), stub=stub), remote=False)
    return svc, stub


def pod(name: str, *gates: str, priority: int = 0) -> cpb.Pod:
    p = cpb.Pod(uid=f"uid-{name}", name=name, namespace="ns", priority=priority)
    p.scheduling_gates.extend(gates)
    return p


async def asked(svc: PluginService, stub: CountingStub, method: str, request: Any) -> Any:
    before = stub.calls[method]
    resp = await getattr(stub, method)(request)
    stub.calls[method] = before
    return resp


async def test_default_profile_answers_pre_enqueue_and_queue_sort_in_the_shim() -> None:
    svc, stub = service_for()
    profiles = await svc.describe()
    info = profiles["default-scheduler"]
    # SchedulingGates and DynamicResources, whose PreEnqueue reads only the pod
    # for a pod without claims.
    assert info.points["preEnqueue"] == ("SchedulingGates", "DynamicResources")
    # The default profile has upstream's PreBind plugins VolumeBinding and
    # DynamicResources; its Bind plugin is DefaultBinder alone, so the shim POSTs the
    # binding itself, and asks PreBind only when the scheduling cycle's
    # PreBindPreFlight says one of them has work (ScheduleResponse.pre_bind_skip
    # false; tests/unit/shim/test_pre_bind_skip.py).
    assert info.points["preBind"] == ("VolumeBinding", "DynamicResources")
    assert info.points["bind"] == ("DefaultBinder",)
    assert info.shim_binds
    pods = [pod("a"), pod("b", "example.com/quota", "z"), pod("c", "one")]
    for p in pods:
        local = await svc.pre_enqueue("default-scheduler", p)
        remote = await asked(
            svc, stub, "PreEnqueue", pb.PreEnqueueRequest(profile="default-scheduler", pod=p)
        )
        # The service's own answer, field for field (code, reasons, plugin).
        assert local == remote.status
    assert (await svc.pre_enqueue("default-scheduler", pods[1])).reasons == [
        "waiting for scheduling gates: [example.com/quota z]"
    ]
    queued = [
        pb.QueuedPod(pod=pod("x", priority=5), enqueued_unix_micros=30, attempts=1),
        pb.QueuedPod(pod=pod("y"), enqueued_unix_micros=10),
        pb.QueuedPod(pod=pod("w", priority=-1), enqueued_unix_micros=5),
    ]
    local_keys = await svc.sort_keys("default-scheduler", queued)
    remote = await asked(
        svc, stub, "QueueSort", pb.QueueSortRequest(profile="default-scheduler", pods=queued)
    )
    remote_keys = [
        tuple(getattr(p, str(p.WhichOneof("value"))) for p in k.parts) for k in remote.keys
    ]
    assert local_keys == remote_keys == [(-5, 30), (0, 10), (1, 5)]
    assert stub.calls["PreEnqueue"] == 0 and stub.calls["QueueSort"] == 0
    assert stub.calls["DescribeProfiles"] == 1  # the counting stub is the one in use


async def test_any_other_plugin_at_a_point_is_asked() -> None:
    svc, stub = service_for(
        {
            "profiles": [
                {
                    "schedulerName": "custom",
                    "plugins": {
                        "preEnqueue": {"enabled": [{"name": "NoWhitespace"}]},
                        "postBind": {"enabled": [{"name": "Audit"}]},
                    },
                }
            ]
        }
    )
    info = (await svc.describe())["custom"]
    assert info.points["preEnqueue"] == ("SchedulingGates", "DynamicResources", "NoWhitespace")
    # DefaultBinder is still the only Bind plugin: PostBind runs after the shim's POST.
    assert info.shim_binds
    st = await svc.pre_enqueue("custom", pod("a"))
    assert st.code == 0
    assert stub.calls["PreEnqueue"] == 1


async def test_a_pod_with_resource_claims_is_asked_about_with_the_cluster_state() -> None:
    """DynamicResources' PreEnqueue (foreachPodResourceClaim) looks each claim up:
    a pod that names claims is asked about with the state (PreEnqueueRequest.state),
    gated with upstream's message while a claim is missing, let in once it exists."""
    svc, stub = service_for()
    info = (await svc.describe())["default-scheduler"]
    assert info.pre_enqueue_reads
    p = pod("gpu")
    p.resource_claims.add(name="gpu", resource_claim_name="gpu-claim")
    st = await svc.pre_enqueue("default-scheduler", p)
    assert (st.code, list(st.reasons), st.plugin) == (
        pb.CODE_UNSCHEDULABLE_AND_UNRESOLVABLE,
        ['could not find ResourceClaim "ns/gpu-claim"'],
        "DynamicResources",
    )
    assert stub.calls["PreEnqueue"] == 1
    svc.state.upsert_object(make_object(RESOURCE_CLAIMS, "gpu-claim", "ns"))
    st = await svc.pre_enqueue("default-scheduler", p)
    assert st.code == pb.CODE_SUCCESS
    assert stub.calls["PreEnqueue"] == 2
    # A pod without claims is still answered in the shim.
    assert (await svc.pre_enqueue("default-scheduler", pod("web"))).code == pb.CODE_SUCCESS
    assert stub.calls["PreEnqueue"] == 2


async def test_a_pod_of_a_gang_is_asked_about_with_the_state_others_answered_locally() -> None:
    """GangScheduling's PreEnqueue counts the gang's pods: a pod with
    spec.schedulingGroup is asked about with the state (gated with upstream's
    message while its PodGroup is missing); a pod without one is answered in
    the shim, Success."""
    svc, stub = service_for(
        {
            "profiles": [
                {
                    "schedulerName": "gang",
                    "plugins": {"multiPoint": {"enabled": [{"name": "GangScheduling"}]}},
                }
            ]
        }
    )
    info = (await svc.describe())["gang"]
    assert "GangScheduling" in info.points["preEnqueue"] and info.pre_enqueue_reads
    assert (await svc.pre_enqueue("gang", pod("web"))).code == pb.CODE_SUCCESS
    assert stub.calls["PreEnqueue"] == 0
    p = pod("member")
    p.scheduling_group = "team"
    st = await svc.pre_enqueue("gang", p)
    assert (st.code, list(st.reasons), st.plugin) == (
        pb.CODE_UNSCHEDULABLE_AND_UNRESOLVABLE,
        ['waiting for pods\'s pod group "team" to appear in scheduling queue'],
        "GangScheduling",
    )
    assert stub.calls["PreEnqueue"] == 1


async def test_pre_enqueue_without_state_answers_from_the_pod_alone() -> None:
    """A caller that sends no state (as before PreEnqueueRequest.state): the
    server's DynamicResources checks only what the pod says."""
    svc, stub = service_for()
    await svc.describe()
    p = pod("gpu")
    p.resource_claims.add(name="gpu", resource_claim_name="gpu-claim")
    resp = await asked(
        svc, stub, "PreEnqueue", pb.PreEnqueueRequest(profile="default-scheduler", pod=p)
    )
    assert resp.status.code == pb.CODE_SUCCESS and resp.generation == 0


def test_shim_binds_only_for_default_binder_alone() -> None:
    """Only the Bind plugins decide: PreBind and PostBind plugins run around the
    shim's POST (PreBind only when its pre-flight found work)."""

    def info(**points: tuple[str, ...]) -> ProfileInfo:
        return ProfileInfo("p", dict(points))

    assert info(bind=("DefaultBinder",)).shim_binds
    assert info(bind=("DefaultBinder",), reserve=("X",), permit=("Y",)).shim_binds
    assert info(bind=("DefaultBinder",), preBind=("VolumeBinding",)).shim_binds
    assert info(bind=("DefaultBinder",), postBind=("Audit",)).shim_binds
    assert not info(bind=("Other", "DefaultBinder")).shim_binds
    assert not info(bind=("Other",), preBind=("VolumeBinding",)).shim_binds
    assert not info().shim_binds


def test_pre_enqueue_gates_answer_as_their_plugins_for_the_pods_the_shim_keeps() -> None:
    """shim/service.py answers DynamicResources' and GangScheduling's PreEnqueue
    itself (Success) for the pods LOCAL_PRE_ENQUEUE_UNLESS keeps in the shim, without
    loading either plugin: the plugins answer the same for those pods
    (dynamicresources.go and gangscheduling.go PreEnqueue return early)."""
    from berth.plugins.dynamicresources import DynamicResources
    from berth.plugins.gangscheduling import GangScheduling
    from berth.shim.service import LOCAL_PRE_ENQUEUE, LOCAL_PRE_ENQUEUE_UNLESS

    plain = pod("plain", priority=5)
    gated = pod("gated", "example.com/gate")
    labelled = pod("labelled")
    labelled.labels["pod-group.scheduling.sigs.k8s.io"] = "g"
    with_claim = pod("claims")
    with_claim.resource_claims.add(name="gpu", resource_claim_name="claim-1")
    in_gang = pod("gang")
    in_gang.scheduling_group = "g"
    for plugin in (DynamicResources, GangScheduling):
        gate = LOCAL_PRE_ENQUEUE[plugin.name]
        unless = LOCAL_PRE_ENQUEUE_UNLESS[plugin.name]
        assert gate.name == plugin.name
        kept = [p for p in (plain, gated, labelled, with_claim, in_gang) if not unless(p)]
        assert len(kept) == 4, [p.name for p in kept]
        for p in kept:
            assert plugin().pre_enqueue(PodInfo(p)) == SUCCESS
            assert gate().pre_enqueue(PodInfo(p)) == SUCCESS
