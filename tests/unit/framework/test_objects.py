"""Objects beyond nodes and pods (issue 10, protos/README.md "Data beyond nodes
and pods"): ObjectKind/ClusterObject/ObjectWrite, the snapshot's objects,
CycleState's writes/annotations/signals, Plugin.reads collected per profile,
and the runtime attributing what plugins ask of the caller."""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec
import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.framework import (
    ClusterObject,
    CycleState,
    FilterPlugin,
    NodeInfo,
    ObjectKind,
    ObjectWrite,
    PermitPlugin,
    PodInfo,
    PostBindPlugin,
    PreBindPlugin,
    ReservePlugin,
    Status,
    pod_write,
)
from berth.framework.objects import ProfileRead, merge_reads
from berth.framework.profile import PluginRef, ProfileConfig
from berth.framework.runtime import Framework, ProfileError
from berth.framework.schedule_one import schedule_pod
from berth.framework.snapshot import SnapshotError
from berth.framework.testing import (
    apply_objects,
    fresh_state,
    handle_for,
    make_node,
    make_object,
    make_pod,
    object_ref,
    snapshot_of,
)
from tests.unit.framework.fakes import Binder, Sort

PODGROUP = ObjectKind("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")
METRICS = ObjectKind("metrics.k8s.io", "v1beta1", "nodes", "NodeMetrics", False, poll_seconds=15)


# -- the types ---------------------------------------------------------------------------


def test_object_kind_refuses_missing_version_resource_and_negative_poll() -> None:
    with pytest.raises(ValueError, match="version must not be empty"):
        ObjectKind("g", "", "things", "Thing")
    with pytest.raises(ValueError, match="resource must not be empty"):
        ObjectKind("g", "v1", "", "Thing")
    with pytest.raises(ValueError, match="poll_seconds must be >= 0, got -1"):
        ObjectKind("g", "v1", "things", "Thing", poll_seconds=-1)


def test_cluster_object_decodes_json_once_and_exposes_metadata() -> None:
    msg = make_object(PODGROUP, "pg", labels={"team": "a"}, annotations={"x": "1"}, spec={"m": 3})
    obj = ClusterObject.from_proto(msg)
    assert (obj.group, obj.resource, obj.namespace, obj.name) == (
        "scheduling.x-k8s.io",
        "podgroups",
        "default",
        "pg",
    )
    assert (obj.version, obj.kind) == ("v1alpha1", "PodGroup")
    assert obj.data["spec"] == {"m": 3}
    assert obj.data is obj.data  # decoded once
    assert obj.labels == {"team": "a"}
    assert obj.annotations == {"x": "1"}
    assert obj.to_proto() == msg


def test_cluster_object_without_metadata_has_empty_labels() -> None:
    obj = ClusterObject("", "things", "", "t", raw=b'{"spec": {}}')
    assert obj.labels == {}
    assert obj.annotations == {}


@pytest.mark.parametrize(
    ("raw", "message"),
    [(b"{not json", "json does not decode"), (b"[1, 2]", "json is a list, not an object")],
)
def test_cluster_object_with_bad_json_names_the_object(raw: bytes, message: str) -> None:
    obj = ClusterObject("g.io", "things", "ns", "t1", raw=raw)
    with pytest.raises(ValueError, match=f"object things.g.io ns/t1: {message}"):
        _ = obj.data


def test_object_write_to_proto_encodes_the_merge_patch() -> None:
    w = ObjectWrite("apps", "v1", "deployments", "ns", "d", {"metadata": {"labels": {"a": "b"}}})
    msg = w.to_proto("Sticky")
    assert (msg.ref.group, msg.ref.resource, msg.ref.namespace, msg.ref.name) == (
        "apps",
        "deployments",
        "ns",
        "d",
    )
    assert msg.version == "v1"
    assert msg.plugin == "Sticky"
    assert json.loads(msg.merge_patch) == {"metadata": {"labels": {"a": "b"}}}
    assert pod_write("ns", "p", {"a": 1}) == ObjectWrite("", "v1", "pods", "ns", "p", {"a": 1})


# -- the snapshot --------------------------------------------------------------------------


def test_snapshot_holds_objects_by_kind_and_key() -> None:
    node = make_node("n1").capacity(cpu="1").obj()
    snap = snapshot_of(
        [node],
        objects=[
            make_object(PODGROUP, "a"),
            make_object(PODGROUP, "b", namespace="other"),
            make_object(METRICS, "n1", usage={"cpu": "100m"}),
        ],
    )
    assert set(snap.objects(*PODGROUP.key)) == {("default", "a"), ("other", "b")}
    metrics = snap.object("metrics.k8s.io", "nodes", "", "n1")
    assert metrics is not None and metrics.data["usage"] == {"cpu": "100m"}
    assert snap.object(*PODGROUP.key, "default", "missing") is None
    assert snap.object("nope", "nothing", "", "x") is None
    assert snap.objects("nope", "nothing") == {}
    assert snap.object_count == 3


def test_snapshot_object_upsert_replaces_and_delete_removes() -> None:
    snap = snapshot_of([], objects=[make_object(PODGROUP, "a", spec={"minMember": 1})])
    apply_objects(snap, upsert=[make_object(PODGROUP, "a", spec={"minMember": 4})])
    obj = snap.object(*PODGROUP.key, "default", "a")
    assert obj is not None and obj.data["spec"] == {"minMember": 4}
    apply_objects(snap, delete=[object_ref(PODGROUP, "a")])
    assert snap.object(*PODGROUP.key, "default", "a") is None
    assert snap.object_kinds() == []
    # Deleting what is not there is a no-op (deltas are idempotent).
    apply_objects(snap, delete=[object_ref(PODGROUP, "a")])
    assert snap.object_count == 0


def test_objects_mapping_of_an_unknown_kind_cannot_be_written() -> None:
    snap = snapshot_of([])
    with pytest.raises(TypeError):
        snap.objects("g", "r")[("", "x")] = ClusterObject("g", "r", "", "x")  # type: ignore[index]


@pytest.mark.parametrize(
    ("delta", "field"),
    [
        (
            cpb.ClusterDelta(upsert_objects=[cpb.ClusterObject(ref=cpb.ObjectRef(name="x"))]),
            "delta.upsert_objects[0].ref.resource",
        ),
        (
            cpb.ClusterDelta(
                upsert_objects=[cpb.ClusterObject(ref=cpb.ObjectRef(resource="podgroups"))]
            ),
            "delta.upsert_objects[0].ref.name",
        ),
        (
            cpb.ClusterDelta(delete_objects=[cpb.ObjectRef(resource="r")]),
            "delta.delete_objects[0].name",
        ),
    ],
)
def test_bad_object_entry_refuses_the_whole_delta(delta: cpb.ClusterDelta, field: str) -> None:
    snap = snapshot_of([])
    delta.upsert_nodes.append(make_node("n1").obj())
    with pytest.raises(SnapshotError) as info:
        snap.apply(delta)
    assert info.value.field == field
    assert len(snap.nodes) == 0  # nothing applied


def test_handle_for_binds_the_snapshot() -> None:
    snap = snapshot_of([], objects=[make_object(PODGROUP, "a")])
    assert handle_for(snap).snapshot.object(*PODGROUP.key, "default", "a") is not None


# -- CycleState ----------------------------------------------------------------------------


def test_add_write_keeps_order_and_plugin() -> None:
    state = fresh_state()
    state.current_plugin = "P1"
    state.add_write(pod_write("ns", "a", {"x": 1}))
    state.current_plugin = "P2"
    state.add_write(pod_write("ns", "b", {"x": 2}))
    assert [w.name for w in state.writes] == ["a", "b"]
    assert [p for p, _ in state.plugin_writes] == ["P1", "P2"]
    assert [p for p, _ in state.take_writes()] == ["P1", "P2"]
    assert state.writes == []


@pytest.mark.parametrize(
    ("write", "message"),
    [
        ("not a write", "add_write takes an ObjectWrite, got str"),
        (ObjectWrite("", "v1", "pods", "ns", "", {}), "resource, version and name must be set"),
        (ObjectWrite("", "v1", "pods", "ns", "p", [1]), "merge_patch must be a mapping"),  # type: ignore[arg-type]
        (ObjectWrite("", "v1", "pods", "ns", "p", {"a": {1, 2}}), "merge_patch is not JSON"),
    ],
)
def test_add_write_refuses_bad_writes(write: Any, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        fresh_state().add_write(write)


def test_annotations_and_signals_are_collected() -> None:
    state = fresh_state()
    state.current_plugin = "Gang"
    state.annotate_assumed_pod("gpu/card", "0")
    state.signal_waiting_pod("uid-1", False, "gang failed")
    assert state.assume_annotations == {"gpu/card": "0"}
    assert state.permit_signals == [("uid-1", "Gang", False, "gang failed")]
    with pytest.raises(ValueError, match="key must be a non-empty string"):
        state.annotate_assumed_pod("", "x")
    with pytest.raises(ValueError, match="value of 'k' must be a string"):
        state.annotate_assumed_pod("k", 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pod_uid must not be empty"):
        state.signal_waiting_pod("", True)


def test_what_plugins_ask_is_not_sent_back_as_cycle_data() -> None:
    state = fresh_state()
    state.add_write(pod_write("ns", "a", {}))
    state.annotate_assumed_pod("k", "v")
    assert state.encode() == {}


# -- reads per profile ---------------------------------------------------------------------


class ReadsArgs(msgspec.Struct):
    resource: str = "podgroups"


class GroupFilter(FilterPlugin):
    """Rejects nodes when the pod's PodGroup (label ``group``) has spec.allow false;
    Reserve annotates, PreBind writes, PostBind writes, Unreserve signals."""

    name = "GroupFilter"
    Args = ReadsArgs

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        resource = args.resource if args is not None else "podgroups"
        return (ObjectKind("scheduling.x-k8s.io", "v1alpha1", resource, "PodGroup"),)

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        group = pod.proto.labels.get("group", "")
        obj = self.handle.snapshot.object("scheduling.x-k8s.io", "podgroups", pod.namespace, group)
        if obj is None or not obj.data.get("spec", {}).get("allow"):
            return Status.unschedulable(f"podgroup {group} does not allow")
        return Status.success()


class Effects(ReservePlugin, PermitPlugin, PreBindPlugin, PostBindPlugin):
    name = "Effects"

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        return (
            ObjectKind("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", poll_seconds=0),
            METRICS,
        )

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        state.annotate_assumed_pod("effects/node", node_name)
        if pod.proto.labels.get("reserve") == "fail":
            return Status.unschedulable("no room")
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        state.signal_waiting_pod("waiting-uid", False, f"{pod.name} unreserved")

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        state.signal_waiting_pod("waiting-uid", True, "")
        return Status.success(), 0.0

    def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        state.add_write(pod_write(pod.namespace, pod.name, {"metadata": {"annotations": {}}}))
        if pod.proto.labels.get("prebind") == "fail":
            return Status.error("cannot")
        return Status.success()

    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        state.add_write(ObjectWrite("apps", "v1", "deployments", pod.namespace, "owner", {}))


class Other(PreBindPlugin):
    name = "Other"

    def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        state.add_write(pod_write(pod.namespace, pod.name, {"spec": {}}))
        return Status.success()


class Conflicting(FilterPlugin):
    name = "Conflicting"

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        return (ObjectKind("scheduling.x-k8s.io", "v1", "podgroups", "PodGroup"),)

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.success()


class BadReads(FilterPlugin):
    name = "BadReads"

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        return ("podgroups",)  # type: ignore[return-value]


REGISTRY = {c.name: c for c in (GroupFilter, Effects, Other, Conflicting, BadReads, Sort, Binder)}


def profile(
    filter: tuple[str, ...] = ("GroupFilter",),
    args: dict[str, Any] | None = None,
    pre_bind: tuple[str, ...] = ("Effects",),
) -> ProfileConfig:
    return ProfileConfig(
        scheduler_name="objects",
        plugins={
            "queueSort": (PluginRef("Sort"),),
            "filter": tuple(PluginRef(n) for n in filter),
            "reserve": (PluginRef("Effects"),),
            "permit": (PluginRef("Effects"),),
            "preBind": tuple(PluginRef(n) for n in pre_bind),
            "bind": (PluginRef("Binder"),),
            "postBind": (PluginRef("Effects"),),
        },
        plugin_args=args or {},
    )


def test_reads_are_collected_and_merged_per_profile() -> None:
    fw = Framework(profile(), REGISTRY)
    assert fw.reads == (
        ProfileRead(
            ObjectKind("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup"),
            ("GroupFilter", "Effects"),
        ),
        ProfileRead(METRICS, ("Effects",)),
    )
    assert not fw.queue_sort_reads


def test_reads_follow_the_plugin_args() -> None:
    fw = Framework(profile(args={"GroupFilter": ReadsArgs("podgroupz")}), REGISTRY)
    assert [r.kind.resource for r in fw.reads] == ["podgroupz", "podgroups", "nodes"]


def test_reads_that_disagree_on_version_refuse_the_profile() -> None:
    with pytest.raises(
        ProfileError,
        match=re.escape(
            "plugins GroupFilter and Conflicting both read podgroups.scheduling.x-k8s.io "
            "but with different version"
        ),
    ):
        Framework(profile(filter=("GroupFilter", "Conflicting")), REGISTRY)


def test_reads_returning_other_than_object_kinds_refuse_the_profile() -> None:
    with pytest.raises(
        ProfileError, match=r"plugin BadReads: reads\(\) must return ObjectKind values, got str"
    ):
        Framework(profile(filter=("BadReads",)), REGISTRY)


def test_merge_reads_widens_selectors_and_keeps_the_shortest_poll() -> None:
    a = ObjectKind("", "v1", "pods", "Pod", label_selector="x")
    b = ObjectKind("", "v1", "pods", "Pod", label_selector="y")
    c = ObjectKind("m", "v1", "nodes", "NodeMetrics", False, poll_seconds=30)
    d = ObjectKind("m", "v1", "nodes", "NodeMetrics", False, poll_seconds=10)
    merged = merge_reads([("A", a), ("B", b), ("A", c), ("B", d), ("B", a)])
    assert merged[0] == ProfileRead(ObjectKind("", "v1", "pods", "Pod"), ("A", "B"))
    assert merged[1].kind.poll_seconds == 10
    same = merge_reads([("A", a), ("B", a)])
    assert same[0].kind.label_selector == "x"


# -- the runtime ----------------------------------------------------------------------------


def test_filter_reads_objects_through_the_handle() -> None:
    fw = Framework(profile(), REGISTRY)
    node = make_node("n1").capacity(cpu="4").obj()
    pod = make_pod("p").label("group", "g").info()
    closed = snapshot_of([node], objects=[make_object(PODGROUP, "g", spec={"allow": False})])
    result = schedule_pod(fw, closed, CycleState(), pod)
    assert not result.status.is_success
    assert "podgroup g does not allow" in result.message
    opened = apply_objects(closed, upsert=[make_object(PODGROUP, "g", spec={"allow": True})])
    assert schedule_pod(fw, opened, CycleState(), pod).node == "n1"


def test_reserve_annotations_and_permit_signals_are_attributed() -> None:
    fw = Framework(profile(filter=()), REGISTRY)
    snap = snapshot_of([make_node("n1").capacity(cpu="4").obj()])
    state = CycleState()
    result = schedule_pod(fw, snap, state, make_pod("p").info(), reserve_and_permit=True)
    assert result.node == "n1"
    assert state.assume_annotations == {"effects/node": "n1"}
    assert state.permit_signals == [("waiting-uid", "Effects", True, "")]
    assert state.current_plugin == ""


def test_failed_reserve_drops_annotations_and_unreserve_signals() -> None:
    fw = Framework(profile(filter=()), REGISTRY)
    snap = snapshot_of([make_node("n1").capacity(cpu="4").obj()])
    state = CycleState()
    pod = make_pod("p").label("reserve", "fail").info()
    result = schedule_pod(fw, snap, state, pod, reserve_and_permit=True)
    assert result.reserve_status is not None and not result.reserve_status.is_success
    assert state.assume_annotations == {}
    assert state.permit_signals == [("waiting-uid", "Effects", False, "p unreserved")]


def test_pre_bind_writes_come_back_in_order_with_their_plugin() -> None:
    fw = Framework(profile(pre_bind=("Effects", "Other")), REGISTRY)
    snap = snapshot_of([make_node("n1").capacity(cpu="4").obj()])
    state = CycleState()
    fw.handle.bind_snapshot(snap)
    assert fw.run_pre_bind(state, make_pod("p").info(), "n1").is_success
    writes = state.take_writes()
    assert [(p, w.merge_patch) for p, w in writes] == [
        ("Effects", {"metadata": {"annotations": {}}}),
        ("Other", {"spec": {}}),
    ]


def test_failed_pre_bind_drops_its_writes() -> None:
    fw = Framework(profile(pre_bind=("Effects", "Other")), REGISTRY)
    state = CycleState()
    st = fw.run_pre_bind(state, make_pod("p").label("prebind", "fail").info(), "n1")
    assert not st.is_success
    assert state.writes == []


def test_post_bind_writes_are_collected() -> None:
    fw = Framework(profile(), REGISTRY)
    state = CycleState()
    fw.run_post_bind(state, make_pod("p").info(), "n1")
    assert [(p, w.resource, w.name) for p, w in state.plugin_writes] == [
        ("Effects", "deployments", "owner")
    ]
