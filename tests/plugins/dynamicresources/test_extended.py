"""Extended resources backed by DRA (DRAExtendedResource): upstream's cases of
extendeddynamicresources_test.go (Test_createRequestsAndMappings_requests,
Test_createRequestsAndMappings_mappings) and the extended-resource cases of
dynamicresources_test.go's TestPlugin, named as upstream names them; the
device class resolver (extendedresourcecache)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.deviceclasses import DEVICE_CLASS_PREFIX, DeviceClassResolver
from berth.framework.model import PodInfo
from berth.framework.objects import ClusterObject
from berth.framework.status import SUCCESS, Status
from berth.framework.testing import (
    batch_of,
    fresh_state,
    handle_for,
    make_node,
    make_object,
    resources,
    snapshot_of,
)
from berth.plugins.dynamicresources import (
    DEVICE_CLASSES,
    FINALIZER,
    IN_FLIGHT_ANNOTATION,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    DynamicResources,
)
from berth.plugins.dynamicresources.extended import (
    EXTENDED_CLAIM_ANNOTATION,
    create_requests_and_mappings,
    generate_claim_name,
)

# The fixtures of dynamicresources_test.go.
NODE = "worker"
DRIVER = "some-driver"
POD = "my-pod"
POD_UID = "1234"
NS = "default"
CLASS = "my-resource-class"
EXT = "example.com/gpu"
EXT2 = "example.com/gpu2"
IMPLICIT = DEVICE_CLASS_PREFIX + CLASS


def resolver(mapping: Mapping[str, str]) -> DeviceClassResolver:
    """mockDeviceClassResolver: extended resource name -> class name."""

    class _Mock(DeviceClassResolver):
        def __init__(self) -> None:
            super().__init__(())

        def get(self, resource_name: str) -> Mapping[str, Any] | None:
            name = mapping.get(resource_name)
            return None if name is None else {"metadata": {"name": name}}

    return _Mock()


def container(name: str, requests: Mapping[str, int], restartable: bool = False) -> pb.Container:
    return pb.Container(name=name, requests=resources(**requests), restartable=restartable)


def pod_of(containers: Sequence[pb.Container] = (), init: Sequence[pb.Container] = ()) -> pb.Pod:
    """st.MakePod(): Res/Req add containers con<N>, InitReq init-con<N>,
    SidecarReq sidecar-con<N> (N: the place among init containers)."""
    pod = pb.Pod(uid=POD_UID, name=POD, namespace=NS, scheduler_name="default-scheduler")
    pod.containers.extend(containers)
    pod.init_containers.extend(init)
    return pod


def con(n: int, **requests: int) -> pb.Container:
    return container(f"con{n}", requests)


def init_con(n: int, **requests: int) -> pb.Container:
    return container(f"init-con{n}", requests)


def sidecar_con(n: int, **requests: int) -> pb.Container:
    return container(f"sidecar-con{n}", requests, restartable=True)


def r(**kw: int) -> dict[str, int]:
    return kw


E, E1, EI = EXT, EXT + "1", EXT + "init"
POD1 = pod_of([con(0, **{E: 1, E1: 2})])
POD2 = pod_of([con(0, **{E: 1}), con(1, **{E1: 2})])
POD_INIT = pod_of([con(0, **{E: 1})], [init_con(0, **{EI: 2})])
POD_INIT2 = pod_of([con(0, **{E: 1})], [init_con(0, **{EI: 1}), init_con(1, **{EI: 2})])
POD_INIT3 = pod_of(
    [con(0, **{E: 1})],
    [init_con(0, **{EI: 1}), sidecar_con(1, **{EI: 1}), init_con(2, **{EI: 2})],
)
DEV_MAP = {E: "class"}
DEV_MAP2 = {E: "class", E1: "class1"}
DEV_MAP_INIT = {E: "class", EI: "classInit", DEVICE_CLASS_PREFIX + "classInit": "classInit"}


# (pod, extended resources, class mapping, [(request name, class, count)])
REQUEST_CASES: dict[
    str, tuple[pb.Pod, dict[str, int], dict[str, str], list[tuple[str, str, int]]]
] = {
    "nil": (POD1, {}, {}, []),
    "one resource match": (POD1, {E: 1}, DEV_MAP, [("container-0-request-0", "class", 1)]),
    "one resource match, one resource not match": (
        POD1,
        {E: 1, E1: 2},
        DEV_MAP,
        [("container-0-request-0", "class", 1)],
    ),
    "two resources match": (
        POD1,
        {E: 1, E1: 2},
        DEV_MAP2,
        [("container-0-request-0", "class", 1), ("container-0-request-1", "class1", 2)],
    ),
    "two containers match": (
        POD2,
        {E: 1, E1: 2},
        DEV_MAP2,
        [("container-0-request-0", "class", 1), ("container-1-request-0", "class1", 2)],
    ),
    "one init container, one regular container": (
        POD_INIT,
        {E: 1, EI: 2},
        DEV_MAP_INIT,
        [("container-0-request-0", "classInit", 2), ("container-1-request-0", "class", 1)],
    ),
    "two init containers, one regular container": (
        POD_INIT2,
        {E: 1, EI: 2},
        DEV_MAP_INIT,
        [("container-1-request-0", "classInit", 2), ("container-2-request-0", "class", 1)],
    ),
    "three init containers, one sidecar, one regular container": (
        POD_INIT3,
        {E: 1, EI: 2},
        DEV_MAP_INIT,
        [
            ("container-1-request-0", "classInit", 1),
            ("container-2-request-0", "classInit", 2),
            ("container-3-request-0", "class", 1),
        ],
    ),
}


@pytest.mark.parametrize("name", list(REQUEST_CASES))
def test_create_requests_and_mappings_requests(name: str) -> None:
    """Test_createRequestsAndMappings_requests (extendeddynamicresources_test.go)."""
    pod, extended, mapping, want = REQUEST_CASES[name]
    requests, _ = create_requests_and_mappings(pod, extended, resolver(mapping))
    got = [
        (
            q["name"],
            q["exactly"]["deviceClassName"],
            q["exactly"]["count"],
        )
        for q in requests
    ]
    assert got == want
    assert all(q["exactly"]["allocationMode"] == "ExactCount" for q in requests)


EI_IMPLICIT = DEVICE_CLASS_PREFIX + "classInit"
POD1_INIT_IMPLICIT = pod_of([], [init_con(0, **{EI: 1, EI_IMPLICIT: 2})])
POD_INIT_IMPLICIT = pod_of(
    [con(0, **{E: 1})], [init_con(0, **{EI: 1}), init_con(1, **{EI_IMPLICIT: 2})]
)
RES = {E: 1, E1: 2}
RES_INIT = {E: 1, EI: 2}
RES_INIT_IMPLICIT = {E: 1, EI: 2, EI_IMPLICIT: 2}

# (pod, extended resources, class mapping, [(request name, container, resource)])
MAPPING_CASES: dict[
    str, tuple[pb.Pod, dict[str, int], dict[str, str], list[tuple[str, str, str]]]
] = {
    "one container, two requests": (
        POD1,
        RES,
        DEV_MAP2,
        [("container-0-request-0", "con0", E), ("container-0-request-1", "con0", E1)],
    ),
    "one container, one explicit and one implicit request": (
        POD1_INIT_IMPLICIT,
        RES_INIT_IMPLICIT,
        DEV_MAP_INIT,
        [
            ("container-0-request-0", "init-con0", EI_IMPLICIT),
            ("container-0-request-1", "init-con0", EI),
        ],
    ),
    "two containers, two requests": (
        POD2,
        RES,
        DEV_MAP2,
        [("container-0-request-0", "con0", E), ("container-1-request-0", "con1", E1)],
    ),
    "one init container, one regular container, one request": (
        POD_INIT,
        RES_INIT,
        DEV_MAP_INIT,
        [("container-0-request-0", "init-con0", EI), ("container-1-request-0", "con0", E)],
    ),
    "three containers (two are init container), two requests": (
        POD_INIT2,
        RES_INIT,
        DEV_MAP_INIT,
        [
            ("container-1-request-0", "init-con0", EI),
            ("container-1-request-0", "init-con1", EI),
            ("container-2-request-0", "con0", E),
        ],
    ),
    "three containers (two are init container), both explicit and implicit resources": (
        POD_INIT_IMPLICIT,
        RES_INIT_IMPLICIT,
        DEV_MAP_INIT,
        [
            ("container-0-request-0", "init-con0", EI),
            ("container-1-request-0", "init-con1", EI_IMPLICIT),
            ("container-2-request-0", "con0", E),
        ],
    ),
    "four containers (two are init container, one sidecar), three requests": (
        POD_INIT3,
        RES_INIT,
        DEV_MAP_INIT,
        [
            ("container-1-request-0", "init-con0", EI),
            ("container-1-request-0", "sidecar-con1", EI),
            ("container-2-request-0", "init-con2", EI),
            ("container-3-request-0", "con0", E),
        ],
    ),
}


@pytest.mark.parametrize("name", list(MAPPING_CASES))
def test_create_requests_and_mappings_mappings(name: str) -> None:
    """Test_createRequestsAndMappings_mappings (extendeddynamicresources_test.go),
    sorted by request then container name as upstream compares them."""
    pod, extended, mapping, want = MAPPING_CASES[name]
    _, mappings = create_requests_and_mappings(pod, extended, resolver(mapping))
    got = sorted((m["requestName"], m["containerName"], m["resourceName"]) for m in mappings)
    assert got == want


# -- the resolver (extendedresourcecache) ------------------------------------------------------


def device_class(
    name: str = CLASS, extended: str | None = EXT, created: str = ""
) -> pb.ClusterObject:
    obj = make_object(
        DEVICE_CLASSES, name, spec={"extendedResourceName": extended} if extended else {}
    )
    if created:
        data = json.loads(obj.json)
        data["metadata"]["creationTimestamp"] = created
        obj.json = json.dumps(data).encode()
    return obj


def test_resolver_maps_explicit_and_implicit_names_the_newest_class_winning() -> None:
    old = ClusterObject.from_proto(device_class("a-old", created="2026-01-01T00:00:00Z"))
    new = ClusterObject.from_proto(device_class("b-new", created="2026-02-01T00:00:00Z"))
    tie = ClusterObject.from_proto(device_class("a-tie", created="2026-02-01T00:00:00Z"))
    plain = ClusterObject.from_proto(device_class("plain", extended=None))
    res = DeviceClassResolver([old, new, plain])
    assert res.get(EXT) is new.data
    assert res.get(DEVICE_CLASS_PREFIX + "a-old") is old.data
    assert res.get(DEVICE_CLASS_PREFIX + "plain") is plain.data
    assert res.get("example.com/other") is None
    # Same second: the name that sorts first, whatever the order seen.
    assert DeviceClassResolver([new, tie]).get(EXT) is tie.data
    assert DeviceClassResolver([tie, new]).get(EXT) is tie.data


def test_generated_names_follow_the_api_servers_generate_name() -> None:
    name = generate_claim_name(POD)
    assert (
        name.startswith("my-pod-extended-resources-")
        and len(name) == len("my-pod-extended-resources-") + 5
    )
    long = generate_claim_name("p" * 80)
    assert len(long) == 63 and long.startswith("p" * 58)


# -- TestPlugin's extended-resource cases -------------------------------------------------------


def node_slice(*devices: str) -> pb.ClusterObject:
    return make_object(
        RESOURCE_SLICES,
        f"{NODE}-{DRIVER}",
        spec={
            "driver": DRIVER,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": d} for d in (devices or ("instance-1",))],
        },
    )


def worker(**capacity: str) -> pb.Node:
    return (
        make_node(NODE)
        .capacity(cpu="8", memory="8Gi", pods=110, **capacity)
        .label("kubernetes.io/hostname", NODE)
        .obj()
    )


def ext_pod(*containers: Mapping[str, int]) -> pb.Pod:
    """podWithExtendedResourceName and friends: st.MakePod().Req(...) per
    container (named con<N>)."""
    return pod_of([con(i, **c) for i, c in enumerate(containers)])


def made_claim(
    requests: Sequence[Mapping[str, Any]],
    name: str = "my-pod-extended-resources-0",
    allocated: bool = False,
) -> pb.ClusterObject:
    """extendedResourceClaim: made in an earlier cycle (my-pod-extended-resources-0);
    ``allocated``: on another node, with the finalizer (extendedResourceClaimNode2)."""
    obj = make_object(
        RESOURCE_CLAIMS,
        name,
        NS,
        annotations={EXTENDED_CLAIM_ANNOTATION: "true"},
        spec={"devices": {"requests": list(requests)}},
    )
    data = json.loads(obj.json)
    data["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": POD, "uid": POD_UID, "controller": True}
    ]
    data["metadata"]["uid"] = "uid-made"
    data["metadata"]["resourceVersion"] = "7"
    if allocated:
        data["metadata"]["finalizers"] = ["other", FINALIZER]
        data["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "container-0-request-0",
                            "driver": DRIVER,
                            "pool": "worker-2",
                            "device": "instance-1",
                        }
                    ]
                }
            }
        }
    obj.json = json.dumps(data).encode()
    return obj


def req(name: str, cls: str = CLASS, count: int = 1) -> dict[str, Any]:
    return {
        "name": name,
        "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": count},
    }


@dataclass
class Case:
    pod: pb.Pod
    node: pb.Node = field(default_factory=worker)
    classes: list[pb.ClusterObject] = field(default_factory=list)
    objects: list[pb.ClusterObject] = field(default_factory=list)
    pre_filter: Status = SUCCESS
    filter: Status = SUCCESS
    post_filter: Status | None = None
    pre_bind_pre_flight: Status = SUCCESS
    # The claim's requests PreBind creates, as (name, class, count); and
    # the devices allocated; None: no claim made.
    requests: list[tuple[str, str, int]] | None = None
    devices: list[str] = field(default_factory=list)
    mappings: list[tuple[str, str, str]] = field(default_factory=list)
    # PostFilter's writes: (subresource, delete, patch).
    post_filter_writes: list[tuple[str, bool, dict[str, Any]]] = field(default_factory=list)


CLASS_EXT = device_class(CLASS, EXT)
CLASS_EXT2 = device_class(CLASS + "2", EXT2)
CLASS_PLAIN = device_class(CLASS, None)
UNRESOLVABLE_ALLOCATE = Status.unresolvable("cannot allocate all claims")

PLUGIN_CASES: dict[str, Case] = {
    "empty-with-extended-resources-enabled": Case(
        pod=pod_of(),
        pre_filter=Status.skip(),
        post_filter=Status.unschedulable("no new claims to deallocate"),
        pre_bind_pre_flight=Status.skip(),
    ),
    "extended-resource-name-with-node-resource": Case(
        pod=ext_pod({EXT: 1}),
        node=worker(**{EXT: "1"}),
        classes=[CLASS_EXT],
    ),
    "extended-resource-one-device-plugin-one-dra": Case(
        pod=ext_pod({EXT: 1, EXT2: 1}),
        node=worker(**{EXT: "1"}),
        classes=[CLASS_EXT, CLASS_EXT2],
        objects=[node_slice()],
        requests=[("container-0-request-1", CLASS + "2", 1)],
        devices=["instance-1"],
        mappings=[("con0", EXT2, "container-0-request-1")],
    ),
    "extended-resource-name-with-zero-allocatable": Case(
        pod=ext_pod({EXT: 1}),
        node=worker(**{EXT: "0"}),
        classes=[CLASS_EXT],
        objects=[node_slice()],
        requests=[("container-0-request-0", CLASS, 1)],
        devices=["instance-1"],
        mappings=[("con0", EXT, "container-0-request-0")],
    ),
    "non-DRA-extended-resource-name-with-zero-allocatable": Case(
        pod=ext_pod({EXT: 1}),
        node=worker(**{EXT: "0"}),
        classes=[CLASS_PLAIN],
        objects=[node_slice()],
        pre_filter=Status.skip(),
        pre_bind_pre_flight=Status.skip(),
    ),
    "extended-resource-name-no-resource": Case(
        pod=ext_pod({EXT: 1}),
        classes=[CLASS_EXT],
        filter=UNRESOLVABLE_ALLOCATE,
        post_filter=Status.unschedulable("still not schedulable"),
    ),
    "extended-resource-name-with-resources": Case(
        pod=ext_pod({EXT: 1}),
        classes=[CLASS_EXT],
        objects=[node_slice()],
        requests=[("container-0-request-0", CLASS, 1)],
        devices=["instance-1"],
        mappings=[("con0", EXT, "container-0-request-0")],
    ),
    "implicit-extended-resource-name-with-resources": Case(
        pod=ext_pod({IMPLICIT: 1, EXT: 2}),
        classes=[CLASS_EXT],
        objects=[node_slice("instance-1", "instance-2", "instance-3", "instance-4")],
        requests=[("container-0-request-0", CLASS, 1), ("container-0-request-1", CLASS, 2)],
        devices=["instance-1", "instance-2", "instance-3"],
        mappings=[
            ("con0", IMPLICIT, "container-0-request-0"),
            ("con0", EXT, "container-0-request-1"),
        ],
    ),
    "implicit-extended-resource-name-two-containers-with-resources": Case(
        pod=ext_pod({IMPLICIT: 1}, {EXT: 2}),
        classes=[CLASS_EXT],
        objects=[node_slice("instance-1", "instance-2", "instance-3", "instance-4")],
        requests=[("container-0-request-0", CLASS, 1), ("container-1-request-0", CLASS, 2)],
        devices=["instance-1", "instance-2", "instance-3"],
        mappings=[
            ("con0", IMPLICIT, "container-0-request-0"),
            ("con1", EXT, "container-1-request-0"),
        ],
    ),
    "extended-resource-name-with-resources-has-claim": Case(
        pod=ext_pod({EXT: 1}),
        classes=[CLASS_EXT],
        objects=[node_slice(), made_claim([req("container-0-request-0")])],
        filter=Status.unresolvable("cannot schedule extended resource claim"),
        post_filter=Status.unschedulable("deletion of ResourceClaim completed"),
        post_filter_writes=[("", True, {"metadata": {"uid": "uid-made"}})],
    ),
    # extendedResourceClaimNode2: allocated (on another node), with the
    # finalizer, which deleteClaim removes first.
    "extended-resource-name-with-resources-delete-claim": Case(
        pod=ext_pod({EXT: 1}),
        classes=[CLASS_EXT],
        objects=[node_slice(), made_claim([req("container-0-request-0")], allocated=True)],
        filter=Status.unresolvable("cannot schedule extended resource claim"),
        post_filter=Status.unschedulable("deletion of ResourceClaim completed"),
        post_filter_writes=[
            ("", False, {"metadata": {"resourceVersion": "7", "finalizers": ["other"]}}),
            ("", True, {"metadata": {"uid": "uid-made"}}),
        ],
    ),
}


def _written(writes: Sequence[Any]) -> list[tuple[str, str, str, bool]]:
    return [(w.resource, w.name, w.subresource, w.create) for w in writes]


@pytest.mark.parametrize("name", list(PLUGIN_CASES))
def test_plugin_extended_resources(name: str) -> None:
    """TestPlugin's extended-resource cases (dynamicresources_test.go)."""
    case = PLUGIN_CASES[name]
    snap = snapshot_of([case.node], [], [*case.classes, *case.objects])
    pl = DynamicResources(None, handle_for(snap))
    pod = PodInfo(case.pod)
    state = fresh_state()
    _, st = pl.pre_filter(state, pod, batch_of(snap))
    assert st == case.pre_filter
    verdicts = pl.filter_nodes(state, pod, batch_of(snap))
    got = verdicts.status_of(0)
    assert got == case.filter
    if case.post_filter is not None:
        _, post = pl.post_filter(state, pod, {NODE: got})
        assert post == case.post_filter
        assert [(w.subresource, w.delete, dict(w.merge_patch)) for w in state.writes] == (
            case.post_filter_writes
        )
        assert all(
            (w.resource, w.namespace, w.name)
            == ("resourceclaims", NS, "my-pod-extended-resources-0")
            for w in state.writes
        )
    if not got.is_success:
        return
    assert pl.reserve(state, pod, NODE) == SUCCESS
    assert pl.pre_bind_pre_flight(state, pod, NODE) == case.pre_bind_pre_flight
    assert pl.pre_bind(state, pod, NODE) == SUCCESS
    writes = state.writes
    raw = state.assume_annotations.get(IN_FLIGHT_ANNOTATION)
    if case.requests is None:
        assert writes == [] and raw is None
        return
    name_ = writes[0].name
    assert name_.startswith("my-pod-extended-resources-")
    assert _written(writes) == [
        ("resourceclaims", name_, "", True),
        ("resourceclaims", name_, "status", False),
        ("pods", POD, "status", False),
    ]
    # The allocation rides in flight under the claim's name until PreBind's writes land.
    assert raw is not None and [e["name"] for e in json.loads(raw)["claims"]] == [name_]
    created = writes[0].merge_patch
    meta = created["metadata"]
    assert meta["annotations"] == {EXTENDED_CLAIM_ANNOTATION: "true"}
    assert meta["generateName"] == "my-pod-extended-resources-"
    assert meta["finalizers"] == [FINALIZER]
    assert meta["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": POD, "uid": POD_UID, "controller": True}
    ]
    assert [
        (q["name"], q["exactly"]["deviceClassName"], q["exactly"]["count"])
        for q in created["spec"]["devices"]["requests"]
    ] == case.requests
    status = writes[1].merge_patch["status"]
    assert status["reservedFor"] == [{"resource": "pods", "name": POD, "uid": POD_UID}]
    assert status["allocation"]["allocationTimestamp"]
    results = status["allocation"]["devices"]["results"]
    assert sorted(r_["device"] for r_ in results) == case.devices
    assert {r_["request"] for r_ in results} == {q[0] for q in case.requests}
    pod_status = writes[2].merge_patch["status"]["extendedResourceClaimStatus"]
    assert pod_status["resourceClaimName"] == name_
    assert [
        (m["containerName"], m["resourceName"], m["requestName"])
        for m in pod_status["requestMappings"]
    ] == case.mappings


def test_extended_resource_name_skip_bind() -> None:
    """extended-resource-name-skip-bind: Unreserve before PreBind forgets the
    claim, so nothing is written."""
    snap = snapshot_of([worker()], [], [CLASS_EXT, node_slice()])
    pl = DynamicResources(None, handle_for(snap))
    pod = PodInfo(ext_pod({EXT: 1}))
    state = fresh_state()
    pl.pre_filter(state, pod, batch_of(snap))
    assert pl.filter_nodes(state, pod, batch_of(snap)).status_of(0) == SUCCESS
    assert pl.reserve(state, pod, NODE) == SUCCESS
    pl.unreserve(state, pod, NODE)
    assert pl.pre_bind(state, pod, NODE) == SUCCESS
    assert state.writes == []


def test_a_second_pod_does_not_get_the_devices_in_flight() -> None:
    """The in-memory claim's allocation counts as allocated for the next pod
    once the first is assumed (upstream's SignalClaimPendingAllocation)."""
    snap = snapshot_of([worker()], [], [CLASS_EXT, node_slice()])
    pl = DynamicResources(None, handle_for(snap))
    first = ext_pod({EXT: 1})
    state = fresh_state()
    pl.pre_filter(state, PodInfo(first), batch_of(snap))
    assert pl.filter_nodes(state, PodInfo(first), batch_of(snap)).status_of(0) == SUCCESS
    assert pl.reserve(state, PodInfo(first), NODE) == SUCCESS
    delta = pb.ClusterDelta()
    assumed = delta.upsert_pods.add()
    assumed.CopyFrom(first)
    assumed.node_name = NODE
    assumed.annotations.update(state.assume_annotations)
    assumed.assumed = True
    snap.apply(delta)
    second = ext_pod({EXT: 1})
    second.uid, second.name = "uid-2", "other-pod"
    state2 = fresh_state()
    pl.pre_filter(state2, PodInfo(second), batch_of(snap))
    got = pl.filter_nodes(state2, PodInfo(second), batch_of(snap)).status_of(0)
    assert got == UNRESOLVABLE_ALLOCATE


def test_a_resource_neither_the_node_nor_a_class_offers_is_rejected() -> None:
    """filterExtendedResources: "cannot fit resource" for a requested DRA
    extended resource the node lacks and no class backs, when another is
    backed."""
    snap = snapshot_of([worker()], [], [CLASS_EXT, node_slice()])
    pl = DynamicResources(None, handle_for(snap))
    pod = PodInfo(ext_pod({EXT: 1, "example.com/other": 1}))
    state = fresh_state()
    pl.pre_filter(state, pod, batch_of(snap))
    got = pl.filter_nodes(state, pod, batch_of(snap)).status_of(0)
    assert got == Status.unresolvable("cannot fit resource")


@pytest.mark.parametrize(
    ("entry_name", "counts"),
    [
        pytest.param("my-pod-extended-resources-abcde", True, id="the-name-reserve-gives"),
        pytest.param("other-pod-extended-resources-abcde", False, id="another-pods-name"),
        pytest.param("my-pod-extended-resources-abcdef", False, id="not-a-generated-name"),
        pytest.param("my-pod-extended-resources-bcdfg", True, id="created-for-the-pod"),
        pytest.param("my-pod-extended-resources-allcd", False, id="created-and-allocated"),
        pytest.param("someone-elses", False, id="an-unrelated-claim"),
    ],
)
def test_extended_in_flight_entries_count_only_for_the_pods_own_claim(
    entry_name: str, counts: bool
) -> None:
    """An ``extended`` in-flight entry counts for a name Reserve gives this pod's
    claim, not created yet or created for the pod and unallocated; any other
    name counts for nothing, so an entry cannot hide another claim's devices."""
    from berth.plugins.dynamicresources.inflight import InFlightClaim, encode, in_flight

    created = made_claim([req("container-0-request-0")], "my-pod-extended-resources-bcdfg")
    allocated = made_claim([req("container-0-request-0")], "my-pod-extended-resources-allcd")
    data = json.loads(allocated.json)
    data["status"] = {"allocation": {"devices": {"results": []}}}
    allocated.json = json.dumps(data).encode()
    unrelated = make_object(RESOURCE_CLAIMS, "someone-elses", NS, spec={})
    holder = ext_pod({EXT: 1})
    holder.node_name = NODE
    holder.assumed = True
    holder.annotations[IN_FLIGHT_ANNOTATION] = encode(
        [InFlightClaim(entry_name, "tmp-uid", {"devices": {"results": []}}, extended=True)]
    )
    snap = snapshot_of([worker()], [holder], [created, allocated, unrelated])
    got = in_flight(snap).holder(NS, entry_name)
    assert (got == POD_UID) is counts


def test_a_requests_index_counts_the_containers_cpu_and_memory() -> None:
    """createResourceRequestAndMappings: the request's index is the resource's
    place among all of the container's request names, sorted (cpu,
    example.com/gpu, memory)."""
    pod = pod_of([pb.Container(name="c", requests=resources(cpu="1", memory="1Gi", **{EXT: 2}))])
    requests, mappings = create_requests_and_mappings(pod, {EXT: 2}, resolver({EXT: CLASS}))
    assert [q["name"] for q in requests] == ["container-0-request-1"]
    assert mappings == [
        {"containerName": "c", "resourceName": EXT, "requestName": "container-0-request-1"}
    ]


def test_unreserve_deletes_the_claim_prebind_made() -> None:
    """unreserveExtendedResourceClaim (extendeddynamicresources.go): a binding
    that failed after PreBind created the claim for the pod's extended
    resources deletes it: its finalizer removed (with the claim's
    resourceVersion), then a delete with its uid as precondition."""
    snap = snapshot_of([worker()], [], [CLASS_EXT, node_slice()])
    pl = DynamicResources(None, handle_for(snap))
    pod = PodInfo(ext_pod({EXT: 1}))
    state = fresh_state()
    pl.pre_filter(state, pod, batch_of(snap))
    assert pl.filter_nodes(state, pod, batch_of(snap)).status_of(0) == SUCCESS
    assert pl.reserve(state, pod, NODE) == SUCCESS
    assert pl.pre_bind(state, pod, NODE) == SUCCESS
    name = state.take_writes()[0][1].name
    # The API server's claim after PreBind's writes, as the Unreserve call's
    # snapshot carries it.
    made = make_object(
        RESOURCE_CLAIMS,
        name,
        NS,
        spec={"devices": {"requests": []}},
        status={"reservedFor": [{"resource": "pods", "name": POD, "uid": POD_UID}]},
    )
    data = json.loads(made.json)
    data["metadata"].update({"uid": "made", "resourceVersion": "7", "finalizers": [FINALIZER]})
    made.json = json.dumps(data).encode()
    after = snapshot_of([worker()], [], [CLASS_EXT, node_slice(), made])
    DynamicResources(None, handle_for(after)).unreserve(state, pod, NODE)
    assert [
        (w.resource, w.name, w.subresource, w.delete, dict(w.merge_patch)) for w in state.writes
    ] == [
        (
            "resourceclaims",
            name,
            "",
            False,
            {"metadata": {"resourceVersion": "7", "finalizers": []}},
        ),
        ("resourceclaims", name, "", True, {"metadata": {"uid": "made"}}),
    ]
