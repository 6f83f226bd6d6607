"""The shim checks what it performs for the plugin service (shim/guard.py):

- victims: only pods in its cache, on the nominated node, of lower priority than the
  preemptor, and not the preemptor, as upstream's DefaultPreemption can only pick
  (plugins/defaultpreemption/default_preemption.go SelectVictimsOnNode and
  isPreemptionAllowed); one victim refused refuses the preemption whole and the pod stays
  unschedulable, its nomination as it was (preemption.go Preempt: a failed
  prepareCandidate gives PostFilter no NominatingInfo);
- nominations to clear: only lower-priority pods nominated to that node
  (framework/preemption/executor.go getLowerPriorityNominatedPods);
- writes: a merge patch on the object or its status, to the pod being scheduled or to a
  kind the asking plugin declares (Plugin.writes, from the configuration the shim loaded).

Each refusal is logged at WARNING and counted in berth_shim_refused_writes_total.
Fake plugin service and API server from test_preemption.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson
import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog
from berth.framework.config import default_config
from berth.framework.objects import ObjectKind
from berth.framework.storage import PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES
from berth.plugins.dynamicresources import RESOURCE_CLAIMS
from berth.plugins.registry import load_registry
from berth.shim import guard
from berth.shim.app import ShimSettings, build_service
from berth.shim.binding import WaitingPod
from berth.shim.queue import BACKOFF, UNSCHEDULABLE
from berth.shim.scheduler import Scheduler
from berth.shim.service import ProfileInfo
from tests.unit.shim.test_preemption import (
    PROFILE,
    FakeApi,
    FakeRecorder,
    FakeService,
    handle,
    metric,
    no_fit,
    pending,
    popped,
    running,
    settled,
    two_node_scheduler,
    until,
    victims_on,
    where,
)

REFUSED = "berth_shim_refused_writes_total"
WRITER = "Writer"


def refused(kind: str, reason: str) -> float:
    return metric(REFUSED, {"kind": kind, "reason": reason})


class WritingService(FakeService):
    """Answers PreBind and PostBind with the writes a test sets; ``Writer`` declares
    writes to PersistentVolumes and PersistentVolumeClaims."""

    def __init__(self) -> None:
        super().__init__()
        self.pre_bind: list[pb.ObjectWrite] = []
        self.post_bind: list[pb.ObjectWrite] = []
        self.profiles = {
            PROFILE: ProfileInfo(
                PROFILE,
                {"preBind": (WRITER,), "bind": ("DefaultBinder",), "postBind": (WRITER,)},
            )
        }
        self.declared_writes = {PROFILE: {WRITER: (PERSISTENT_VOLUMES, PERSISTENT_VOLUME_CLAIMS)}}

    async def node_call(
        self, method: str, profile: str, pod: cpb.Pod, node: str, cycle: pb.CycleState
    ) -> Any:
        if method == "PreBind":
            self.calls.append((method, pod.name))
            return pb.StatusResponse(writes=self.pre_bind)
        if method == "PostBind":
            self.calls.append((method, pod.name))
            return pb.StatusResponse(writes=self.post_bind)
        return await super().node_call(method, profile, pod, node, cycle)


class PatchingApi(FakeApi):
    """FakeApi that also takes merge patches (the plugins' writes) on any path."""

    def __init__(self) -> None:
        super().__init__()
        self.merge_patches: list[tuple[str, Any]] = []

    def merge_patch(self, path: str, patch: Any) -> dict[str, Any]:
        self.merge_patches.append((path, patch))
        return {}

    def bound(self, name: str) -> bool:
        return any(v == "post" and p.endswith(f"/pods/{name}/binding") for v, p, _ in self.writes)


Env = tuple[Scheduler, WritingService, PatchingApi, FakeRecorder]


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    service = WritingService()
    api = PatchingApi()
    recorder = FakeRecorder()
    s = two_node_scheduler(service, api, recorder)
    try:
        yield s, service, api, recorder
    finally:
        api.hold.set()
        await s.stop()


# -- victims -------------------------------------------------------------------------------


def nominated_pending(s: Scheduler, name: str) -> cpb.Pod:
    """A pending pod nominated to n1: in the cluster state, on no node."""
    pod = pending(name, nominated="n1")
    s.event_handlers.on_pod_events([_added(pod)])
    assert s.cache.state.pods[name].node_name == ""
    return pod


def _victim(pod: cpb.Pod, **changes: str) -> cpb.Pod:
    out = cpb.Pod()
    out.CopyFrom(pod)
    for k, v in changes.items():
        setattr(out, k, v)
    return out


@pytest.mark.parametrize(
    ("case", "reason", "why"),
    [
        ("unknown uid", guard.UNKNOWN_POD, "no pod with that uid is in the shim's cache"),
        ("on another node", guard.NOT_ON_NODE, "is on node n2, not on the nominated node n1"),
        ("pending", guard.NOT_ON_NODE, "is not on any node"),
        ("same priority", guard.NOT_LOWER_PRIORITY, "its priority 100 is not lower than"),
        ("higher priority", guard.NOT_LOWER_PRIORITY, "its priority 1000 is not lower than"),
        ("the preemptor", guard.PREEMPTOR, "is the preemptor itself"),
        ("another name", guard.NAME_MISMATCH, "that uid is pod default/v1"),
    ],
)
async def test_SelectVictimsOnNode_only_lower_priority_pods_of_the_node_are_preempted(
    env: Env, caplog: pytest.LogCaptureFixture, case: str, reason: str, why: str
) -> None:
    s, _, api, recorder = env
    (v1,) = victims_on(s, "n1", "v1")
    high = pending("high", priority=100)
    victim = {
        "unknown uid": lambda: running("ghost", "n1"),
        "on another node": lambda: victims_on(s, "n2", "elsewhere")[0],
        "pending": lambda: nominated_pending(s, "waiting-pod"),
        "same priority": lambda: victims_on(s, "n1", "peer", priority=100)[0],
        "higher priority": lambda: victims_on(s, "n1", "critical", priority=1000)[0],
        "the preemptor": lambda: high,
        "another name": lambda: _victim(v1, namespace="kube-system", name="coredns"),
    }[case]()
    (qp,) = await popped(s, high)
    before = refused(guard.VICTIM, reason)
    with caplog.at_level(logging.WARNING, logger="berth.shim.guard"):
        handle(s, qp, no_fit("n1", [victim]))
    await settled(s)
    # Nothing preempted: no DisruptionTarget, no delete, no Preempted event, nothing held.
    for name in (victim.name, "v1"):
        assert api.of("delete", name) == []
        assert not [b for b in api.of("patch", name) if "DisruptionTarget" in str(b)]
    assert [e for e in recorder.events if e[1] == "Preempted"] == []
    assert s.preemption.preempting == {}
    # The pod is not lost: unschedulable, not nominated by the refused answer.
    assert where(s, "high") == UNSCHEDULABLE
    assert "high" not in s.cache.nominated
    assert [e[1] for e in recorder.events if e[0] == "high"] == ["FailedScheduling"]
    assert refused(guard.VICTIM, reason) == before + 1
    (warning,) = [r for r in caplog.records if r.name == "berth.shim.guard"]
    assert warning.levelno == logging.WARNING
    text = warning.getMessage()
    assert f"refused victim {victim.namespace}/{victim.name} (uid {victim.uid})" in text
    assert why in text


async def test_one_victim_refused_refuses_the_preemption_whole(env: Env) -> None:
    s, _, api, _ = env
    ok, low = victims_on(s, "n1", "ok", "low")
    (qp,) = await popped(s, pending("high", priority=100))
    handle(s, qp, no_fit("n1", [ok, running("ghost", "n1"), low], clear=[]))
    await settled(s)
    assert api.of("patch", "ok") == api.of("delete", "ok") == []
    assert api.of("patch", "low") == api.of("delete", "low") == []
    assert where(s, "high") == UNSCHEDULABLE


async def test_a_victim_waiting_at_Permit_is_rejected_only_with_lower_priority(env: Env) -> None:
    s, _, _, _ = env
    (waiter,) = await popped(s, pending("waiter", priority=100))
    handle(
        s,
        waiter,
        pb.ScheduleResponse(
            status=pb.Status(),
            node="n1",
            reserve_status=pb.Status(),
            permit=pb.PermitResponse(
                status=pb.Status(code=pb.CODE_WAIT), wait_timeout_millis={"Gang": 60_000}
            ),
        ),
    )
    w = s.waiting["waiter"]
    assert isinstance(w, WaitingPod)
    (qp,) = await popped(s, pending("high", priority=100))
    handle(s, qp, no_fit("n1", [s.cache.state.pods["waiter"]]))
    await settled(s)
    assert not w.done.done() and not w.preempted
    assert s.waiting["waiter"] is w


async def test_getLowerPriorityNominatedPods_only_those_nominations_are_cleared(
    env: Env,
) -> None:
    s, _, api, _ = env
    (v1,) = victims_on(s, "n1", "v1")
    (qp,) = await popped(s, pending("high", priority=100))
    for pod in (
        pending("low", nominated="n1"),
        pending("low-elsewhere", nominated="n2"),
        pending("peer", priority=100, nominated="n1"),
    ):
        s.event_handlers.on_pod_events([_added(pod)])
    there = refused(guard.NOMINATION, guard.NOT_NOMINATED_THERE)
    priority = refused(guard.NOMINATION, guard.NOT_LOWER_PRIORITY)
    handle(s, qp, no_fit("n1", [v1], clear=["low", "low-elsewhere", "peer"]))
    await settled(s)
    assert api.of("patch", "low") == [
        {"metadata": {"uid": "low"}, "status": {"nominatedNodeName": None}}
    ]
    assert api.of("patch", "low-elsewhere") == [] and api.of("patch", "peer") == []
    # The preemption itself goes on.
    assert api.of("delete", "v1") == [{"uid": "v1"}]
    assert refused(guard.NOMINATION, guard.NOT_NOMINATED_THERE) == there + 1
    assert refused(guard.NOMINATION, guard.NOT_LOWER_PRIORITY) == priority + 1


def _added(pod: cpb.Pod) -> Any:
    from berth.shim.informer import ADDED, Event

    return Event(ADDED, pod.uid, pod, "1")


# -- writes ----------------------------------------------------------------------------------


def write(
    resource: str,
    name: str,
    *,
    namespace: str = "",
    plugin: str = WRITER,
    group: str = "",
    version: str = "v1",
    subresource: str = "",
    patch: bytes = b'{"metadata":{"annotations":{"a":"b"}}}',
) -> pb.ObjectWrite:
    return pb.ObjectWrite(
        ref=cpb.ObjectRef(group=group, resource=resource, namespace=namespace, name=name),
        version=version,
        subresource=subresource,
        merge_patch=patch,
        plugin=plugin,
    )


def with_unknown_field(w: pb.ObjectWrite) -> pb.ObjectWrite:
    # Field 15, varint 1: what a newer server might send to ask for another verb.
    return pb.ObjectWrite.FromString(w.SerializeToString() + bytes([0x78, 0x01]))


def placed() -> pb.ScheduleResponse:
    return pb.ScheduleResponse(
        status=pb.Status(), node="n1", reserve_status=pb.Status(), permit=pb.PermitResponse()
    )


POD_IN_HAND = write("pods", "p", namespace="default")
REFUSED_WRITES = [
    pytest.param(
        write("persistentvolumes", "pv-1", plugin="Other"), guard.UNDECLARED, id="undeclared-plugin"
    ),
    pytest.param(
        write("secrets", "s", namespace="default"), guard.UNDECLARED, id="undeclared-kind"
    ),
    pytest.param(
        write("persistentvolumes", "pv-1", version="v2"), guard.UNDECLARED, id="other-version"
    ),
    pytest.param(write("pods", "other", namespace="default"), guard.UNDECLARED, id="other-pod"),
    pytest.param(
        write("persistentvolumeclaims", "c", namespace="kube-system"),
        guard.OTHER_NAMESPACE,
        id="claim-elsewhere",
    ),
    pytest.param(
        write("persistentvolumes", "pv-1", namespace="default"),
        guard.OTHER_NAMESPACE,
        id="cluster-scoped-in-a-namespace",
    ),
    pytest.param(write("pods", "p", namespace="kube-system"), guard.UNDECLARED, id="pod-elsewhere"),
    pytest.param(
        write("pods", "p", namespace="default", subresource="eviction"),
        guard.SUBRESOURCE,
        id="subresource",
    ),
    # The API server decodes %2F before routing: a write to StatefulSet "web/scale" set
    # the replicas of StatefulSet web (its scale subresource) on kube-apiserver v1.36.
    pytest.param(
        write("persistentvolumeclaims", "c/status", namespace="default"),
        guard.MALFORMED,
        id="name-with-a-slash-reaches-a-subresource",
    ),
    pytest.param(write("persistentvolumes", ".."), guard.MALFORMED, id="name-dot-dot"),
    pytest.param(write("persistentvolumes", "pv%2F1"), guard.MALFORMED, id="name-with-percent"),
    pytest.param(with_unknown_field(POD_IN_HAND), guard.VERB, id="unknown-verb"),
    pytest.param(
        write("pods", "p", namespace="default", patch=b"[1]"), guard.MALFORMED, id="not-object"
    ),
    pytest.param(
        write("pods", "p", namespace="default", patch=b"{"), guard.MALFORMED, id="not-json"
    ),
]


@pytest.mark.parametrize(("bad", "reason"), REFUSED_WRITES)
async def test_PreBind_writes_to_the_pod_or_declared_kinds_only(
    env: Env, caplog: pytest.LogCaptureFixture, bad: pb.ObjectWrite, reason: str
) -> None:
    s, service, api, recorder = env
    # Allowed: the pod being scheduled (and its status), and a kind its plugin declares.
    service.pre_bind = [
        POD_IN_HAND,
        write("pods", "p", namespace="default", subresource="status"),
        write("persistentvolumes", "pv-1"),
        write("persistentvolumeclaims", "c", namespace="default"),
    ]
    (qp,) = await popped(s, pending("p"))
    handle(s, qp, placed())
    await until(lambda: api.bound("p"), "p bound")
    assert [p for p, _ in api.merge_patches] == [
        "/api/v1/namespaces/default/pods/p",
        "/api/v1/namespaces/default/pods/p/status",
        "/api/v1/persistentvolumes/pv-1",
        "/api/v1/namespaces/default/persistentvolumeclaims/c",
    ]
    # One write refused: none of the answer's writes is performed, the pod is not bound
    # and goes back to the queue with backoff.
    api.merge_patches.clear()
    service.pre_bind = [POD_IN_HAND, bad]
    before = refused(guard.WRITE, reason)
    q = pending("q")
    service.pre_bind = [_retarget(w, q) for w in service.pre_bind]
    (qp,) = await popped(s, q)
    with caplog.at_level(logging.WARNING, logger="berth.shim.guard"):
        handle(s, qp, placed())
        await until(lambda: where(s, "q") == BACKOFF, "q back in the queue")
    assert api.merge_patches == [] and not api.bound("q")
    assert not s.cache.is_assumed("q")
    assert refused(guard.WRITE, reason) == before + 1
    (note,) = [e[3] for e in recorder.events if e[:2] == ("q", "FailedScheduling")]
    assert note.startswith("PreBind writes refused by the scheduler: write by plugin")
    (warning,) = [r for r in caplog.records if r.name == "berth.shim.guard"]
    assert warning.levelno == logging.WARNING
    assert "refused write by plugin" in warning.getMessage()


async def test_writes_to_the_pod_being_scheduled_carry_its_uid(env: Env) -> None:
    """A write to the pod in hand names it by namespace and name; the pod may have been
    replaced by another of the same name (a StatefulSet's) while its binding cycle ran.
    Like the shim's own pod patches, the plugins' carry the uid as a precondition (the
    API server answers 422 on metadata.uid for another pod), PreBind's and PostBind's;
    writes to other objects are sent as the plugin wrote them."""
    s, service, api, _ = env
    service.pre_bind = [POD_IN_HAND, write("persistentvolumes", "pv-1")]
    service.post_bind = [write("pods", "p", namespace="default", subresource="status")]
    (qp,) = await popped(s, pending("p"))
    handle(s, qp, placed())
    await until(lambda: len(api.merge_patches) == 3, "p's writes")
    assert api.merge_patches == [
        (
            "/api/v1/namespaces/default/pods/p",
            {"metadata": {"annotations": {"a": "b"}, "uid": "p"}},
        ),
        ("/api/v1/persistentvolumes/pv-1", {"metadata": {"annotations": {"a": "b"}}}),
        (
            "/api/v1/namespaces/default/pods/p/status",
            {"metadata": {"annotations": {"a": "b"}, "uid": "p"}},
        ),
    ]


def _retarget(w: pb.ObjectWrite, pod: cpb.Pod) -> pb.ObjectWrite:
    """``w`` with the pod ``p`` it names replaced by ``pod`` (other targets unchanged)."""
    out = pb.ObjectWrite()
    out.CopyFrom(w)
    if out.ref.resource == "pods" and out.ref.name == "p":
        out.ref.name = pod.name
    return out


async def test_PostBind_writes_refused_leave_the_pod_bound(env: Env) -> None:
    s, service, api, recorder = env
    service.post_bind = [
        write("pods", "p", namespace="default"),
        write("secrets", "s", namespace="default"),
    ]
    before = refused(guard.WRITE, guard.UNDECLARED)
    (qp,) = await popped(s, pending("p"))
    handle(s, qp, placed())
    await until(lambda: ("p", "Scheduled") in [(e[0], e[1]) for e in recorder.events], "p bound")
    assert api.bound("p") and api.merge_patches == []
    (note,) = [e[3] for e in recorder.events if e[:2] == ("p", "FailedPostBindWrite")]
    assert "secrets default/s" in note
    assert refused(guard.WRITE, guard.UNDECLARED) == before + 1


async def test_a_remote_plugin_server_gets_its_declarations_from_the_shims_config() -> None:
    """The shim works out what plugins may write from the configuration it loaded, not
    from what a server says: a server's answers cannot widen it."""
    registry = load_registry()
    settings = ShimSettings(
        config=default_config(registry), registry=registry, server="127.0.0.1:9"
    )
    service = build_service(settings, ClusterStateLog())
    try:
        assert service.declared_writes == {
            "default-scheduler": {
                "VolumeBinding": (PERSISTENT_VOLUMES, PERSISTENT_VOLUME_CLAIMS),
                "DynamicResources": (RESOURCE_CLAIMS,),
            }
        }
    finally:
        await service.close()


# -- the checks alone ------------------------------------------------------------------------


def test_check_writes_names_what_a_plugin_declares() -> None:
    pod = pending("p")
    declared: dict[str, tuple[ObjectKind, ...]] = {WRITER: (PERSISTENT_VOLUMES,)}
    (r,) = guard.check_writes(pod, [write("persistentvolumeclaims", "c", namespace="ns")], declared)
    assert (r.kind, r.reason) == (guard.WRITE, guard.UNDECLARED)
    assert str(r) == (
        "write by plugin Writer to persistentvolumeclaims ns/c: plugin declares writes to "
        "persistentvolumes (v1), not to persistentvolumeclaims (version v1)"
    )
    ok: Sequence[pb.ObjectWrite] = [POD_IN_HAND, write("persistentvolumes", "x")]
    assert guard.check_writes(pod, ok, declared) == []
    assert orjson.loads(POD_IN_HAND.merge_patch) == {"metadata": {"annotations": {"a": "b"}}}


def _create(
    resource: str,
    name: str,
    namespace: str,
    *,
    group: str = "",
    subresource: str = "",
    delete: bool = False,
) -> pb.ObjectWrite:
    """A write with create (or with delete, ``delete``)."""
    w = write(
        resource,
        name,
        namespace=namespace,
        group=group,
        subresource=subresource,
        patch=b'{"metadata":{}}',
    )
    if delete:
        w.delete = True
    else:
        w.create = True
    return w


def _both(resource: str, name: str, namespace: str, *, group: str = "") -> pb.ObjectWrite:
    w = _create(resource, name, namespace, group=group)
    w.delete = True
    return w


@pytest.mark.parametrize(
    ("w", "reason"),
    [
        pytest.param(
            _create("resourceclaims", "c", "default", group="resource.k8s.io"),
            None,
            id="declared-kind-in-the-pods-namespace",
        ),
        pytest.param(
            _create("resourceclaims", "c", "kube-system", group="resource.k8s.io"),
            guard.OTHER_NAMESPACE,
            id="elsewhere",
        ),
        pytest.param(
            _create(
                "resourceclaims", "c", "default", group="resource.k8s.io", subresource="status"
            ),
            guard.SUBRESOURCE,
            id="a-subresource",
        ),
        # Writes to the pod being scheduled are patches only: a create of the pod's own
        # name is no patch of it.
        pytest.param(_create("pods", "p", "default"), guard.UNDECLARED, id="the-pod-itself"),
        pytest.param(_create("secrets", "s", "default"), guard.UNDECLARED, id="undeclared-kind"),
        pytest.param(
            _create("resourceclaims", "c", "default", group="resource.k8s.io", delete=True),
            None,
            id="delete-declared-kind-in-the-pods-namespace",
        ),
        pytest.param(
            _create("resourceclaims", "c", "other", group="resource.k8s.io", delete=True),
            guard.OTHER_NAMESPACE,
            id="delete-elsewhere",
        ),
        pytest.param(
            _create("pods", "p", "default", delete=True), guard.UNDECLARED, id="delete-the-pod"
        ),
        pytest.param(
            _both("resourceclaims", "c", "default", group="resource.k8s.io"),
            guard.MALFORMED,
            id="create-and-delete",
        ),
    ],
)
def test_check_writes_creates_and_deletes_only_declared_kinds_in_the_pods_namespace(
    w: pb.ObjectWrite, reason: str | None
) -> None:
    """ObjectWrite.create and .delete (protos/README.md, "Writes"):
    DynamicResources' claim for a pod's extended resources."""
    pod = pending("p")
    declared: dict[str, tuple[ObjectKind, ...]] = {WRITER: (RESOURCE_CLAIMS,)}
    got = guard.check_writes(pod, [w], declared)
    assert [r.reason for r in got] == ([] if reason is None else [reason])
