"""DynamicResources: the cases of upstream's dynamicresources_test.go (TestPlugin,
TestIsSchedulableAfterClaimChange, TestIsSchedulableAfterPodChange,
Test_computesScore), named as upstream names them, over Berth's snapshot; the
allocations in flight that replace upstream's in-memory claim tracker; the
writes PreBind returns; args and configuration."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.cycle_state import CycleState
from berth.framework.events import ActionType, EventResource, QueueingHint
from berth.framework.handle import Handle
from berth.framework.model import PodInfo
from berth.framework.objects import ClusterObject
from berth.framework.snapshot import Snapshot
from berth.framework.status import SUCCESS, Status
from berth.framework.testing import (
    batch_of,
    fresh_state,
    handle_for,
    make_node,
    make_object,
    snapshot_of,
)
from berth.plugins.dynamicresources import (
    DEVICE_CLASSES,
    FINALIZER,
    IN_FLIGHT_ANNOTATION,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    DynamicResources,
    DynamicResourcesArgs,
)
from berth.plugins.dynamicresources.claims import Claim
from berth.plugins.dynamicresources.dynamicresources import (
    compute_score,
    is_schedulable_after_claim_change,
    is_schedulable_after_pod_change,
)
from berth.plugins.dynamicresources.inflight import InFlightClaim, encode, in_flight
from berth.testing import schedule

# The fixtures of dynamicresources_test.go.
NODE = "worker"
NODE2 = "worker-2"
DRIVER = "some-driver"
POD = "my-pod"
POD_UID = "1234"
RESOURCE = "my-resource"
CLAIM = f"{POD}-{RESOURCE}"
CLAIM2 = f"{POD}-{RESOURCE}-2"
CLASS = "my-resource-class"
NS = "default"


def pod_with_claim_name(*names: str) -> pb.Pod:
    pod = pb.Pod(uid=POD_UID, name=POD, namespace=NS, scheduler_name="default-scheduler")
    for i, name in enumerate(names or (CLAIM,)):
        pod.resource_claims.add(
            name=RESOURCE if i == 0 else f"{RESOURCE}-{i + 1}", resource_claim_name=name
        )
    return pod


def pod_with_claim_template(in_status: bool = True) -> pb.Pod:
    pod = pb.Pod(uid=POD_UID, name=POD, namespace=NS, scheduler_name="default-scheduler")
    pod.resource_claims.add(name=RESOURCE, resource_claim_template_name=CLAIM)
    if in_status:
        pod.resource_claim_statuses.add(name=RESOURCE, resource_claim_name=CLAIM)
    return pod


def request(
    name: str = "req-1",
    cls: str = CLASS,
    count: int = 1,
    selectors: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": cls,
        "allocationMode": "ExactCount",
        "count": count,
    }
    if selectors:
        exactly["selectors"] = list(selectors)
    return {"name": name, "exactly": exactly}


# dynamicresources_test.go brokenSelector: an attribute only some devices have.
BROKEN_SELECTOR = {"cel": {"expression": f'device.attributes["{DRIVER}"].healthy'}}


def prioritized(name: str, *subs: tuple[str, str, int]) -> dict[str, Any]:
    return {
        "name": name,
        "firstAvailable": [
            {"name": n, "deviceClassName": c, "allocationMode": "ExactCount", "count": k}
            for n, c, k in subs
        ],
    }


def allocation_result(
    node: str = NODE, device: str = "instance-1", req: str = "req-1"
) -> dict[str, Any]:
    return {
        "devices": {
            "results": [{"request": req, "driver": DRIVER, "pool": node, "device": device}]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }


def claim(
    name: str = CLAIM,
    *,
    requests: Sequence[Mapping[str, Any]] | None = None,
    owned: bool = True,
    finalizer: bool = False,
    allocation: Mapping[str, Any] | None = None,
    reserved_for: Sequence[Mapping[str, Any]] = (),
    deleting: bool = False,
    uid: str | None = None,
    rv: str = "10",
    devices_status: Sequence[Mapping[str, Any]] = (),
) -> pb.ClusterObject:
    meta: dict[str, Any] = {"uid": uid or f"uid-{name}", "resourceVersion": rv}
    if owned:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": POD, "uid": POD_UID, "controller": True}
        ]
    if finalizer:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T10:00:00Z"
    status: dict[str, Any] = {}
    if allocation is not None:
        status["allocation"] = dict(allocation)
    if reserved_for:
        status["reservedFor"] = list(reserved_for)
    if devices_status:
        status["devices"] = list(devices_status)
    obj = make_object(
        RESOURCE_CLAIMS,
        name,
        NS,
        spec={"devices": {"requests": list(requests if requests is not None else [request()])}},
        status=status,
    )
    data = json.loads(obj.json)
    data["metadata"].update(meta)
    obj.json = json.dumps(data).encode()
    return obj


POD_REF = {"resource": "pods", "name": POD, "uid": POD_UID}


def pending() -> pb.ClusterObject:
    return claim()


def allocated(**kw: Any) -> pb.ClusterObject:
    return claim(finalizer=True, allocation=allocation_result(), **kw)


def in_use() -> pb.ClusterObject:
    return allocated(reserved_for=[POD_REF])


def device_class(
    name: str = CLASS, selectors: Sequence[Mapping[str, Any]] = ()
) -> pb.ClusterObject:
    return make_object(
        DEVICE_CLASSES, name, spec={"selectors": list(selectors)} if selectors else {}
    )


def node_slice(node: str = NODE, *devices: str) -> pb.ClusterObject:
    return make_object(
        RESOURCE_SLICES,
        f"{node}-{DRIVER}",
        spec={
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": d} for d in (devices or ("instance-1",))],
        },
    )


def nodes(*names: str) -> list[pb.Node]:
    return [
        make_node(n)
        .capacity(cpu="8", memory="8Gi", pods=110)
        .label("kubernetes.io/hostname", n)
        .obj()
        for n in (names or (NODE,))
    ]


def plugin_for(
    snap: Snapshot, args: DynamicResourcesArgs | None = None, **kw: Any
) -> DynamicResources:
    """The plugin over ``snap``, with the structured allocator (structured/)."""
    return DynamicResources(args, handle_for(snap), **kw)


# -- TestPlugin ------------------------------------------------------------------------------


@dataclass
class Want:
    """What each extension point answers (None: not reached / not checked)."""

    pre_enqueue: Status = SUCCESS
    pre_filter: Status = SUCCESS
    # node -> status; nodes left out passed.
    filter: dict[str, Status] = field(default_factory=dict)
    post_filter: Status | None = None
    # The merge patches PostFilter returns (resourceclaims/status of the claim).
    post_filter_writes: list[dict[str, Any]] = field(default_factory=list)
    reserve: Status = SUCCESS
    # (claim name, allocation) entries of the in-flight annotation Reserve wrote.
    in_flight: list[str] = field(default_factory=list)
    pre_bind_pre_flight: Status = SUCCESS
    pre_bind: Status = SUCCESS
    # The merge patches PreBind returns: (subresource, claim, patch check).
    writes: list[tuple[str, str, Callable[[Mapping[str, Any]], bool]]] = field(default_factory=list)


@dataclass
class Case:
    pod: pb.Pod
    claims: list[pb.ClusterObject] = field(default_factory=list)
    classes: list[pb.ClusterObject] = field(default_factory=list)
    slices: list[pb.ClusterObject] = field(default_factory=list)
    node_names: tuple[str, ...] = (NODE,)
    other_pods: list[pb.Pod] = field(default_factory=list)
    want: Want = field(default_factory=Want)


def unresolvable(msg: str) -> Status:
    return Status.unresolvable(msg)


def status_only(patch: Mapping[str, Any], allocation: bool = False) -> bool:
    status = patch["status"]
    ok = status["reservedFor"][-1] == POD_REF and patch["metadata"]["resourceVersion"] == "10"
    if allocation:
        ok = ok and status["allocation"]["devices"] == allocation_result()["devices"]
    return ok and bool(status["allocation"]["allocationTimestamp"])


def adds_finalizer(patch: Mapping[str, Any]) -> bool:
    return patch == {"metadata": {"resourceVersion": "10", "finalizers": [FINALIZER]}}


# PostFilter's deallocation of the claim (dynamicresources.go PostFilter).
DEALLOCATE = {
    "metadata": {"resourceVersion": "10"},
    "status": {"reservedFor": None, "allocation": None, "devices": None},
}

CASES: dict[str, Case] = {
    "empty": Case(
        pod=pb.Pod(uid="foo", name="foo", namespace=NS),
        want=Want(
            pre_filter=Status.skip(),
            post_filter=Status.unschedulable("no new claims to deallocate"),
            pre_bind_pre_flight=Status.skip(),
        ),
    ),
    "claim-reference": Case(
        pod=pod_with_claim_name(),
        claims=[allocated(), claim("not-my-claim")],
        want=Want(writes=[("status", CLAIM, status_only)]),
    ),
    "claim-template": Case(
        pod=pod_with_claim_template(),
        claims=[allocated(), claim("not-my-claim")],
        want=Want(writes=[("status", CLAIM, status_only)]),
    ),
    "missing-claim": Case(
        pod=pod_with_claim_template(in_status=False),
        claims=[allocated()],
        want=Want(
            pre_enqueue=unresolvable('pod "default/my-pod": ResourceClaim not created yet'),
            pre_filter=unresolvable('pod "default/my-pod": ResourceClaim not created yet'),
        ),
    ),
    "deleted-claim": Case(
        pod=pod_with_claim_template(),
        claims=[allocated(deleting=True)],
        want=Want(
            pre_enqueue=unresolvable('resourceclaim "my-pod-my-resource" is being deleted'),
            pre_filter=unresolvable('resourceclaim "my-pod-my-resource" is being deleted'),
        ),
    ),
    "wrong-claim": Case(
        pod=pod_with_claim_template(),
        claims=[claim(owned=False, finalizer=True, allocation=allocation_result())],
        want=Want(
            pre_enqueue=unresolvable(
                "ResourceClaim default/my-pod-my-resource was not created for Pod "
                "default/my-pod (Pod is not owner)"
            ),
            pre_filter=unresolvable(
                "ResourceClaim default/my-pod-my-resource was not created for Pod "
                "default/my-pod (Pod is not owner)"
            ),
        ),
    ),
    "no-resources": Case(
        pod=pod_with_claim_name(),
        claims=[pending()],
        classes=[device_class()],
        want=Want(
            filter={NODE: unresolvable("cannot allocate all claims")},
            post_filter=Status.unschedulable("still not schedulable"),
        ),
    ),
    "with-resources": Case(
        pod=pod_with_claim_name(),
        claims=[pending()],
        classes=[device_class()],
        slices=[node_slice()],
        want=Want(
            in_flight=[CLAIM],
            writes=[
                ("", CLAIM, adds_finalizer),
                ("status", CLAIM, lambda p: status_only(p, allocation=True)),
            ],
        ),
    ),
    "with-resources-has-finalizer": Case(
        pod=pod_with_claim_name(),
        claims=[claim(finalizer=True)],
        classes=[device_class()],
        slices=[node_slice()],
        want=Want(
            in_flight=[CLAIM],
            writes=[("status", CLAIM, lambda p: status_only(p, allocation=True))],
        ),
    ),
    "skip-bind": Case(
        # reserved-okay: the claim is allocated and reserved for the pod already.
        pod=pod_with_claim_name(),
        claims=[in_use()],
        want=Want(),
    ),
    "exhausted-resources-in-informer-cache": Case(
        pod=pod_with_claim_name(),
        claims=[
            pending(),
            claim("other-claim", finalizer=True, allocation=allocation_result(), owned=False),
        ],
        classes=[device_class()],
        slices=[node_slice()],
        want=Want(
            filter={NODE: unresolvable("cannot allocate all claims")},
            post_filter=Status.unschedulable("still not schedulable"),
        ),
    ),
    "missing-class": Case(
        pod=pod_with_claim_name(),
        claims=[pending()],
        want=Want(pre_filter=unresolvable(f"request req-1: device class {CLASS} does not exist")),
    ),
    "claim-with-request-with-unknown-device-class": Case(
        pod=pod_with_claim_name(),
        claims=[claim(requests=[request(cls="does-not-exist")])],
        classes=[device_class()],
        want=Want(
            pre_filter=unresolvable("request req-1: device class does-not-exist does not exist")
        ),
    ),
    "claim-with-prioritized-list-unknown-device-class": Case(
        pod=pod_with_claim_name(),
        claims=[claim(requests=[prioritized("req-1", ("subreq-1", "does-not-exist", 1))])],
        classes=[device_class()],
        want=Want(
            pre_filter=unresolvable(
                "request req-1/subreq-1: device class does-not-exist does not exist"
            )
        ),
    ),
    "claim-with-prioritized-list": Case(
        pod=pod_with_claim_name(),
        claims=[claim(requests=[prioritized("req-1", ("subreq-1", CLASS, 1))])],
        classes=[device_class()],
        slices=[node_slice()],
        want=Want(
            in_flight=[CLAIM],
            writes=[("", CLAIM, adds_finalizer), ("status", CLAIM, lambda p: status_only(p))],
        ),
    ),
    "wrong-topology": Case(
        pod=pod_with_claim_name(),
        claims=[claim(finalizer=True, allocation=allocation_result(node=NODE2))],
        want=Want(
            filter={NODE: unresolvable("resourceclaim not available on the node")},
            # The claim is reserved for nobody: PostFilter deallocates it.
            post_filter=Status.unschedulable("deallocation of ResourceClaim completed"),
            post_filter_writes=[DEALLOCATE],
        ),
    ),
    "wrong-topology-reserved-for-another-pod": Case(
        pod=pod_with_claim_name(),
        claims=[
            claim(
                finalizer=True,
                allocation=allocation_result(node=NODE2),
                reserved_for=[{"resource": "pods", "name": "other", "uid": "other"}],
            )
        ],
        want=Want(
            filter={NODE: unresolvable("resourceclaim not available on the node")},
            post_filter=Status.unschedulable("still not schedulable"),
        ),
    ),
    "good-topology": Case(
        pod=pod_with_claim_name(),
        claims=[allocated()],
        want=Want(writes=[("status", CLAIM, status_only)]),
    ),
    "claim-parameters-CEL-runtime-error": Case(
        pod=pod_with_claim_name(),
        claims=[claim(requests=[request(selectors=[BROKEN_SELECTOR])])],
        classes=[device_class()],
        slices=[node_slice()],
        want=Want(
            filter={
                NODE: Status.error(
                    "claim default/my-pod-my-resource: selector #0: CEL runtime error: "
                    "no such key: healthy"
                )
            },
            post_filter=Status.unschedulable("still not schedulable"),
        ),
    ),
    "class-parameters-CEL-runtime-error": Case(
        pod=pod_with_claim_name(),
        claims=[pending()],
        classes=[device_class(selectors=[BROKEN_SELECTOR])],
        slices=[node_slice()],
        want=Want(
            filter={
                NODE: Status.error(
                    "class my-resource-class: selector #0: CEL runtime error: no such key: healthy"
                )
            },
            post_filter=Status.unschedulable("still not schedulable"),
        ),
    ),
    "unknown-request-type": Case(
        pod=pod_with_claim_name(),
        claims=[claim(requests=[{"name": "req-1"}])],
        classes=[device_class()],
        want=Want(
            pre_filter=unresolvable(
                "resource claim default/my-pod-my-resource, request req-1: unknown request type"
            )
        ),
    ),
    "bound-claim-with-failed-binding": Case(
        pod=pod_with_claim_name(),
        claims=[
            claim(
                finalizer=True,
                allocation={
                    **allocation_result(),
                    "devices": {
                        "results": [
                            {
                                **allocation_result()["devices"]["results"][0],
                                "bindingConditions": ["attached"],
                                "bindingFailureConditions": ["failed"],
                            }
                        ]
                    },
                },
                devices_status=[
                    {
                        "driver": DRIVER,
                        "pool": NODE,
                        "device": "instance-1",
                        "conditions": [{"type": "failed", "status": "True"}],
                    }
                ],
            )
        ],
        want=Want(
            filter={NODE: unresolvable("resourceclaim not available on the node")},
            post_filter=Status.unschedulable("deallocation of ResourceClaim completed"),
            post_filter_writes=[DEALLOCATE],
        ),
    ),
    "bound-claim-with-timed-out-binding": Case(
        pod=pod_with_claim_name(),
        claims=[
            claim(
                finalizer=True,
                allocation={
                    **allocation_result(),
                    "allocationTimestamp": "2026-01-01T00:00:00Z",
                    "devices": {
                        "results": [
                            {
                                **allocation_result()["devices"]["results"][0],
                                "bindingConditions": ["attached"],
                            }
                        ]
                    },
                },
            )
        ],
        want=Want(
            filter={NODE: unresolvable("resourceclaim not available on the node")},
            post_filter=Status.unschedulable("deallocation of ResourceClaim completed"),
            post_filter_writes=[DEALLOCATE],
        ),
    ),
}


def run_case(case: Case) -> None:
    snap = snapshot_of(
        nodes(*case.node_names), case.other_pods, [*case.claims, *case.classes, *case.slices]
    )
    pl = plugin_for(snap)
    pod = PodInfo(case.pod)
    want = case.want
    assert pl.pre_enqueue(pod) == want.pre_enqueue
    state = fresh_state()
    _, st = pl.pre_filter(state, pod, batch_of(snap))
    assert st == want.pre_filter
    if not (st.is_success or st.is_skip):
        return
    batch = batch_of(snap)
    verdicts = pl.filter_nodes(state, pod, batch) if st.is_success else None
    feasible: list[str] = []
    for k, name in enumerate(batch.names):
        got = verdicts.status_of(k) if verdicts is not None else SUCCESS
        assert got == want.filter.get(name, SUCCESS), name
        if got.is_success:
            feasible.append(name)
    if not feasible:
        rejected = {n: want.filter[n] for n in batch.names}
        _, post = pl.post_filter(state, pod, rejected)
        assert post == want.post_filter
        writes = state.writes
        assert [w.merge_patch for w in writes] == want.post_filter_writes
        for w in writes:
            assert (w.resource, w.namespace, w.name, w.subresource) == (
                "resourceclaims",
                NS,
                CLAIM,
                "status",
            )
        return
    if want.post_filter is not None:
        _, post = pl.post_filter(state, pod, {})
        assert post == want.post_filter
    node = feasible[0]
    assert pl.reserve(state, pod, node) == want.reserve
    raw = state.assume_annotations.get(IN_FLIGHT_ANNOTATION)
    entries = [] if raw is None else json.loads(raw)["claims"]
    assert [e["name"] for e in entries] == want.in_flight
    assert pl.pre_bind_pre_flight(state, pod, node) == want.pre_bind_pre_flight
    assert pl.pre_bind(state, pod, node) == want.pre_bind
    writes = state.writes
    assert [(w.subresource, w.name) for w in writes] == [
        (sub, name) for sub, name, _ in want.writes
    ]
    for w, (_, _, check) in zip(writes, want.writes, strict=True):
        assert (w.group, w.version, w.resource, w.namespace) == (
            "resource.k8s.io",
            "v1",
            "resourceclaims",
            NS,
        )
        assert check(w.merge_patch), w.merge_patch


@pytest.mark.parametrize("name", list(CASES))
def test_plugin(name: str) -> None:
    """TestPlugin (dynamicresources_test.go), case by case."""
    run_case(copy.deepcopy(CASES[name]))


# -- allocations in flight ---------------------------------------------------------------------


def schedule_one(snap: Snapshot, pod: pb.Pod) -> tuple[str | None, CycleState, Status]:
    """PreFilter, Filter, Reserve on the first feasible node, as a cycle does;
    (node, state, the status that stopped it)."""
    pl = plugin_for(snap)
    info = PodInfo(pod)
    state = fresh_state()
    _, st = pl.pre_filter(state, info, batch_of(snap))
    if not st.is_success:
        return None, state, st
    batch = batch_of(snap)
    verdicts = pl.filter_nodes(state, info, batch)
    for k, name in enumerate(batch.names):
        if verdicts.status_of(k).is_success:
            assert pl.reserve(state, info, name).is_success
            return name, state, SUCCESS
    return None, state, verdicts.status_of(0)


def assume(snap: Snapshot, pod: pb.Pod, node: str, state: CycleState, *, mark: bool = True) -> None:
    """What the caller does after Reserve: the assumed copy on the node, with
    Reserve's annotations, marked assumed (cluster.proto Pod.assumed)."""
    delta = pb.ClusterDelta()
    copy_ = delta.upsert_pods.add()
    copy_.CopyFrom(pod)
    copy_.node_name = node
    copy_.annotations.update(state.assume_annotations)
    copy_.assumed = mark
    snap.apply(delta)


def two_pods() -> tuple[Snapshot, pb.Pod, pb.Pod]:
    first = pod_with_claim_name("claim-a")
    first.uid, first.name = "uid-a", "pod-a"
    second = pod_with_claim_name("claim-b")
    second.uid, second.name = "uid-b", "pod-b"
    claims = []
    for pod, name in ((first, "claim-a"), (second, "claim-b")):
        c = claim(name)
        data = json.loads(c.json)
        data["metadata"]["ownerReferences"][0].update(name=pod.name, uid=pod.uid)
        c.json = json.dumps(data).encode()
        claims.append(c)
    snap = snapshot_of(
        nodes(NODE, NODE2), [], [*claims, device_class(), node_slice(NODE), node_slice(NODE2)]
    )
    return snap, first, second


def test_two_pods_in_a_row_never_get_one_device() -> None:
    """Reserve's allocation rides on the assumed pod (inflight.py), and the next
    pod's allocator counts it as allocated (upstream's inFlightAllocations,
    GatherAllocatedState): two pods, one device per node, two nodes."""
    snap, first, second = two_pods()
    node_a, state_a, _ = schedule_one(snap, first)
    assert node_a == NODE
    assume(snap, first, node_a, state_a)
    node_b, state_b, st = schedule_one(snap, second)
    assert st.is_success and node_b == NODE2
    device_a = json.loads(state_a.assume_annotations[IN_FLIGHT_ANNOTATION])["claims"][0]
    device_b = json.loads(state_b.assume_annotations[IN_FLIGHT_ANNOTATION])["claims"][0]
    assert device_a["allocation"]["devices"]["results"][0]["pool"] == NODE
    assert device_b["allocation"]["devices"]["results"][0]["pool"] == NODE2
    # A third pod finds no device anywhere.
    assume(snap, second, node_b, state_b)
    _, _, st = schedule_one(snap, pod_with_claim_name("claim-b"))
    assert st == Status.unresolvable(
        "resource claim default/claim-b is in the process of being allocated"
    )


def test_an_in_flight_annotation_on_a_pod_that_is_not_an_assumed_copy_counts_for_nothing() -> None:
    """A user can write the annotation on a pod of theirs; only the caller's
    assumed copies (Pod.assumed) are believed."""
    snap, first, second = two_pods()
    _node_a, state_a, _ = schedule_one(snap, first)
    assume(snap, first, NODE, state_a, mark=False)
    node_b, _, st = schedule_one(snap, second)
    assert st.is_success and node_b == NODE  # the device on worker looks free


def test_in_flight_entries_for_claims_that_are_not_the_pods_own_are_ignored() -> None:
    snap, _first, second = two_pods()
    forged = pb.Pod(uid="uid-x", name="x", namespace=NS, node_name=NODE, assumed=True)
    forged.resource_claims.add(name="mine", resource_claim_name="claim-x")
    forged.annotations[IN_FLIGHT_ANNOTATION] = encode(
        [InFlightClaim("claim-b", "uid-claim-b", allocation_result(NODE))]
    )
    delta = pb.ClusterDelta()
    delta.upsert_pods.append(forged)
    snap.apply(delta)
    assert in_flight(snap).by_claim == {}
    node_b, _, st = schedule_one(snap, second)
    assert st.is_success and node_b == NODE


def test_an_allocated_claim_wins_over_its_in_flight_entry() -> None:
    """Once PreBind's write reached the snapshot, the claim itself is the truth
    (upstream's assume cache takes over from the in-flight map)."""
    snap, first, second = two_pods()
    node_a, state_a, _ = schedule_one(snap, first)
    assert node_a == NODE
    assume(snap, first, node_a, state_a)
    assert set(in_flight(snap).by_claim) == {"default/claim-a"}
    done = claim(
        "claim-a",
        finalizer=True,
        allocation=allocation_result(NODE),
        reserved_for=[POD_REF],
        uid="uid-claim-a",
    )
    delta = pb.ClusterDelta()
    delta.upsert_objects.append(done)
    snap.apply(delta)
    assert in_flight(snap).by_claim == {}
    node_b, _, st = schedule_one(snap, second)
    assert st.is_success and node_b == NODE2


def test_oversized_or_malformed_annotations_are_ignored() -> None:
    snap, _first, _second = two_pods()
    for i, value in enumerate(("{not json", "x" * (256 * 1024 + 1), json.dumps({"claims": 3}))):
        p = pb.Pod(uid=f"uid-{i}", name=f"p{i}", namespace=NS, node_name=NODE, assumed=True)
        p.resource_claims.add(name="r", resource_claim_name="claim-b")
        p.annotations[IN_FLIGHT_ANNOTATION] = value
        delta = pb.ClusterDelta()
        delta.upsert_pods.append(p)
        snap.apply(delta)
    assert in_flight(snap).by_claim == {}


# -- Score ------------------------------------------------------------------------------------


def test_compute_score_multiple_claims_prioritized_list_scoring() -> None:
    """Test_computesScore, multiple-claims-with-top-subrequests-allocated: each
    picked subrequest scores FirstAvailableDeviceRequestMaxSize (8) minus its
    place."""
    c1 = Claim(
        ClusterObject.from_proto(
            claim(requests=[prioritized("req-1", ("subreq-1", CLASS, 2), ("subreq-2", CLASS, 1))])
        )
    )
    c2 = Claim(
        ClusterObject.from_proto(
            claim(
                CLAIM2,
                requests=[prioritized("req-1", *((f"subreq-{i}", CLASS, 1) for i in range(1, 5)))],
            )
        )
    )
    results = [
        allocation_result(req="req-1/subreq-1"),
        allocation_result(req="req-1/subreq-4"),
    ]
    assert compute_score([c1, c2], [0, 1], results) == (8 - 0) + (8 - 3)
    # An exact request scores nothing.
    c3 = Claim(ClusterObject.from_proto(claim()))
    assert compute_score([c3], [0], [allocation_result()]) == 0


def test_score_prefers_the_node_whose_allocation_picks_the_first_subrequest() -> None:
    """single-claim-prioritized-list-scoring: worker has 1 device, worker-2 has
    2; the claim prefers 2 devices (subreq-1) over 1 (subreq-2)."""
    pod = pod_with_claim_name()
    c = claim(requests=[prioritized("req-1", ("subreq-1", CLASS, 2), ("subreq-2", CLASS, 1))])
    snap = snapshot_of(
        nodes(NODE, NODE2),
        [],
        [c, device_class(), node_slice(NODE), node_slice(NODE2, "instance-1", "instance-2")],
    )
    pl = plugin_for(snap)
    info = PodInfo(pod)
    state = fresh_state()
    pl.pre_filter(state, info, batch_of(snap))
    batch = batch_of(snap)
    assert pl.filter_nodes(state, info, batch).passed().all()
    scores = pl.score_nodes(state, info, batch)
    assert dict(zip(batch.names, scores.tolist(), strict=True)) == {NODE: 7, NODE2: 8}
    pl.normalize_score(state, info, batch, scores)
    assert dict(zip(batch.names, scores.tolist(), strict=True)) == {NODE: 87, NODE2: 100}


# -- queueing hints (TestIsSchedulableAfterClaimChange, TestIsSchedulableAfterPodChange) -----


def obj(c: pb.ClusterObject) -> ClusterObject:
    return ClusterObject.from_proto(c)


@pytest.mark.parametrize(
    ("name", "pod", "old", "new", "want"),
    [
        (
            "skip-unrelated-claim",
            pod_with_claim_name(),
            claim("other"),
            claim("other", rv="11"),
            QueueingHint.QUEUE_SKIP,
        ),
        ("queue-on-add", pod_with_claim_name(), None, pending(), QueueingHint.QUEUE),
        (
            "skip-adding-finalizer",
            pod_with_claim_name(),
            pending(),
            claim(finalizer=True),
            QueueingHint.QUEUE_SKIP,
        ),
        (
            "queue-on-status-change",
            pod_with_claim_name(),
            pending(),
            allocated(),
            QueueingHint.QUEUE,
        ),
        (
            "claim-deallocate",
            pod_with_claim_name(),
            claim("other", allocation=allocation_result()),
            claim("other"),
            QueueingHint.QUEUE,
        ),
        (
            "skip-wrong-claim-template-not-created",
            pod_with_claim_template(in_status=False),
            None,
            pending(),
            QueueingHint.QUEUE_SKIP,
        ),
    ],
)
def test_is_schedulable_after_claim_change(
    name: str, pod: pb.Pod, old: pb.ClusterObject | None, new: pb.ClusterObject, want: QueueingHint
) -> None:
    got = is_schedulable_after_claim_change(
        PodInfo(pod), None if old is None else obj(old), obj(new)
    )
    assert got == want


def test_is_schedulable_after_pod_change() -> None:
    waiting = PodInfo(pod_with_claim_template(in_status=False))
    complete = PodInfo(pod_with_claim_template(in_status=True))
    other = pb.Pod(uid="other", name="other", namespace=NS)
    assert is_schedulable_after_pod_change(waiting, waiting, complete) == QueueingHint.QUEUE
    assert is_schedulable_after_pod_change(waiting, waiting, waiting) == QueueingHint.QUEUE_SKIP
    assert is_schedulable_after_pod_change(waiting, None, PodInfo(other)) == QueueingHint.QUEUE_SKIP


def test_events_to_register() -> None:
    """EventsToRegister with queueing hints on: nodes (Add, labels,
    allocatable), claims (hinted), the pod's generated claims (hinted),
    classes and slices."""
    pl = DynamicResources()
    got = [
        (e.event.resource, e.event.action_type, e.hint is not None) for e in pl.events_to_register()
    ]
    assert got == [
        (
            EventResource.NODE,
            ActionType.ADD | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_ALLOCATABLE,
            False,
        ),
        (EventResource.RESOURCE_CLAIM, ActionType.ADD | ActionType.UPDATE, True),
        (EventResource.POD, ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM, True),
        (EventResource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE, False),
        (EventResource.RESOURCE_SLICE, ActionType.ADD | ActionType.UPDATE, False),
    ]


# -- args ------------------------------------------------------------------------------------


def test_args_defaults_and_validation() -> None:
    """SetDefaults_DynamicResourcesArgs and ValidateDynamicResourcesArgs with
    v1.36's gates (filter timeout and binding conditions on)."""
    args = DynamicResourcesArgs()
    assert (args.filter_timeout_seconds, args.binding_timeout_seconds) == (10.0, 600.0)
    DynamicResourcesArgs(filter_timeout="0s").validate()
    with pytest.raises(
        ValueError, match="filterTimeout: Invalid value: '-1s': must be zero or positive"
    ):
        DynamicResourcesArgs(filter_timeout="-1s").validate()
    with pytest.raises(
        ValueError, match="bindingTimeout: Invalid value: '500ms': must be at least 1 second"
    ):
        DynamicResourcesArgs(binding_timeout="500ms").validate()
    with pytest.raises(ValueError, match="bindingTimeout: Invalid value"):
        DynamicResourcesArgs(binding_timeout="soon").validate()


# -- the default profile, pod after pod (berth.testing.schedule) ------------------------------


def test_default_profile_gives_each_device_once_then_reports_upstreams_fit_error() -> None:
    """Three pods, each with its own claim, on two nodes with one device each, through
    the default profile's whole chain: Reserve's in-flight annotation on each placed
    pod (marked assumed, as a caller marks it) keeps the next pod off its device; the
    third pod gets kube-scheduler's FitError text."""
    _, first, second = two_pods()
    third = pod_with_claim_name("claim-c")
    third.uid, third.name = "uid-c", "pod-c"
    objs = [
        _with_owner(claim(name), pod)
        for name, pod in (("claim-a", first), ("claim-b", second), ("claim-c", third))
    ]
    results = schedule(
        None,
        nodes(NODE, NODE2),
        [first, second, third],
        objects=[*objs, device_class(), node_slice(NODE), node_slice(NODE2)],
    )
    assert sorted(r.node or "" for r in results[:2]) == [NODE, NODE2]
    assert results[2].node is None
    assert results[2].message == (
        "0/2 nodes are available: 2 cannot allocate all claims. still not schedulable, "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )


def _with_owner(c: pb.ClusterObject, pod: pb.Pod) -> pb.ClusterObject:
    data = json.loads(c.json)
    data["metadata"]["ownerReferences"][0].update(name=pod.name, uid=pod.uid)
    c.json = json.dumps(data).encode()
    return c


def test_a_pod_another_pre_filter_rejects_ends_its_fit_error_in_not_found() -> None:
    """PreFilter stops at VolumeBinding's rejection, so DynamicResources' PreFilter
    never wrote its state; its PostFilter's getStateData then fails with the cycle
    state's ErrNotFound, an Error that ends RunPostFilterPlugins (DefaultPreemption
    does not run): kube-scheduler's FitError reads "... not found" (issue 24)."""
    pod = pb.Pod(uid="u", name="p", namespace=NS, scheduler_name="default-scheduler")
    pod.volumes.add(name="data", claim_name="nowhere")
    pod.pvc_names.append("nowhere")
    (result,) = schedule(None, nodes(NODE), [pod])
    assert result.node is None
    assert result.message == (
        '0/1 nodes are available: persistentvolumeclaim "nowhere" not found. not found'
    )


# -- Unreserve ---------------------------------------------------------------------------------


OTHER_REF = {"resource": "pods", "name": "other", "uid": "5678"}


def test_unreserve_removes_the_pod_from_reserved_for() -> None:
    """Unreserve (dynamicresources.go): a binding that failed after PreBind's
    writes leaves the claim allocated and reserved for the pod; Unreserve
    takes the pod out of reservedFor (other consumers stay), with the claim's
    uid and resourceVersion as preconditions."""
    snap = snapshot_of(
        nodes(),
        [],
        [allocated(reserved_for=[OTHER_REF, POD_REF], rv="12"), device_class(), node_slice()],
    )
    pl = plugin_for(snap)
    pod = PodInfo(pod_with_claim_name(CLAIM))
    state = fresh_state()
    _, st = pl.pre_filter(state, pod, batch_of(snap))
    assert st == SUCCESS
    assert pl.filter_nodes(state, pod, batch_of(snap)).status_of(0) == SUCCESS
    assert pl.reserve(state, pod, NODE) == SUCCESS
    pl.unreserve(state, pod, NODE)
    writes = state.writes
    assert [(w.group, w.resource, w.namespace, w.name, w.subresource) for w in writes] == [
        ("resource.k8s.io", "resourceclaims", NS, CLAIM, "status")
    ]
    assert not writes[0].create and not writes[0].delete
    assert writes[0].merge_patch == {
        "metadata": {"uid": f"uid-{CLAIM}", "resourceVersion": "12"},
        "status": {"reservedFor": [OTHER_REF]},
    }


def test_unreserve_before_prebind_writes_nothing() -> None:
    """A claim not reserved for the pod (PreBind never wrote) gets no write."""
    snap = snapshot_of(nodes(), [], [allocated(), device_class(), node_slice()])
    pl = plugin_for(snap)
    pod = PodInfo(pod_with_claim_name(CLAIM))
    state = fresh_state()
    pl.pre_filter(state, pod, batch_of(snap))
    assert pl.filter_nodes(state, pod, batch_of(snap)).status_of(0) == SUCCESS
    assert pl.reserve(state, pod, NODE) == SUCCESS
    pl.unreserve(state, pod, NODE)
    assert state.writes == []


# -- PreEnqueue with and without cluster state ------------------------------------------------


@pytest.mark.parametrize(
    ("pod", "claims", "want"),
    [
        # foreachPodResourceClaim: the claims' lister answers NotFound.
        (
            pod_with_claim_name(),
            [],
            'could not find ResourceClaim "default/my-pod-my-resource"',
        ),
        (
            pod_with_claim_name(CLAIM, CLAIM2),
            [pending()],
            f'could not find ResourceClaim "{NS}/{CLAIM2}"',
        ),
        (
            pod_with_claim_template(in_status=False),
            [],
            'pod "default/my-pod": ResourceClaim not created yet',
        ),
        (pod_with_claim_name(), [pending()], ""),
        (pb.Pod(uid="foo", name="foo", namespace=NS), [], ""),
    ],
    ids=[
        "claim-missing",
        "second-claim-missing",
        "template-not-generated",
        "claim-exists",
        "no-claims",
    ],
)
def test_pre_enqueue_looks_up_the_claims_in_the_cluster_state(
    pod: pb.Pod, claims: list[pb.ClusterObject], want: str
) -> None:
    """PreEnqueue (foreachPodResourceClaim) over the snapshot a PreEnqueue call
    with cluster state binds: the pod stays out of the active queue until
    every claim it names exists."""
    pl = plugin_for(snapshot_of(nodes(), [], claims))
    assert pl.pre_enqueue(PodInfo(pod)) == (unresolvable(want) if want else SUCCESS)


def test_pre_enqueue_without_cluster_state_checks_the_pod_alone() -> None:
    """A PreEnqueue call without PreEnqueueRequest.state binds no snapshot:
    only what the pod says is checked (PreFilter finds a missing claim)."""
    pl = DynamicResources(None, Handle("p"))
    assert pl.pre_enqueue(PodInfo(pod_with_claim_name())) == SUCCESS
    assert pl.pre_enqueue(PodInfo(pod_with_claim_template(in_status=False))) == unresolvable(
        'pod "default/my-pod": ResourceClaim not created yet'
    )
    # Built without a handle (the shim's local PreEnqueue): the same.
    assert DynamicResources().pre_enqueue(PodInfo(pod_with_claim_name())) == SUCCESS
