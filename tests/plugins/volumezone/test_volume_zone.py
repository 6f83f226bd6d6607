"""VolumeZone, ported from upstream's volume_zone_test.go at v1.36 (TestSingleZone,
TestMultiZone, TestWithBinding), plus label parsing (LabelZonesToSet), Filter
without PreFilter (upstream's fallback), the batch form, CycleState over the
wire and whole cycles.

Its events and hints are tested in tests/plugins/test_events_to_register.py.
Not-found messages are those of the
real client-go listers kube-scheduler uses (``storageclass.storage.k8s.io``),
where upstream's test fakes say ``storageclasses.storage.k8s.io``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.config import load_config
from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import Plugin
from berth.framework.model import PodInfo
from berth.framework.profile import PluginRef, ProfileConfig
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.snapshot import Snapshot
from berth.framework.status import Code, Status
from berth.framework.storage import (
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
)
from berth.framework.testing import (
    batch_of,
    fresh_state,
    handle_for,
    make_node,
    make_object,
    snapshot_of,
)
from berth.plugins.defaultbinder import DefaultBinder
from berth.plugins.queuesort import PrioritySort
from berth.plugins.volumezone import ERR_REASON_CONFLICT, PRE_FILTER_STATE_KEY, VolumeZone
from berth.plugins.volumezone.volume_zone import label_zones_to_set

CONFLICT = Status.unresolvable(ERR_REASON_CONFLICT)
SKIP = Status.skip()
OK = Status()

BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"


def pv(name: str, **labels: str) -> pb.ClusterObject:
    return make_object(PERSISTENT_VOLUMES, name, labels=labels, spec={})


def pvc(name: str, volume: str = "", class_name: str | None = None) -> pb.ClusterObject:
    spec: dict[str, str] = {}
    if volume:
        spec["volumeName"] = volume
    if class_name is not None:
        spec["storageClassName"] = class_name
    return make_object(PERSISTENT_VOLUME_CLAIMS, name, "default", spec=spec)


def storage_class(name: str, mode: str | None = None) -> pb.ClusterObject:
    fields: dict[str, Any] = {"provisioner": "example.com/csi"}
    if mode is not None:
        fields["volumeBindingMode"] = mode
    return make_object(STORAGE_CLASSES, name, **fields)


def pod_with_volume(claim: str) -> pb.Pod:
    """createPodWithVolume."""
    p = pb.Pod(uid=f"uid-{claim}", name="pod_1", namespace="default")
    p.volumes.add(name="vol", claim_name=claim)
    return p


def node(labels: Mapping[str, str]) -> pb.Node:
    n = make_node("host1").obj()
    n.labels.update(labels)
    return n


def run(
    objects: list[pb.ClusterObject], p: pb.Pod, labels: Mapping[str, str]
) -> tuple[Status, Status]:
    """PreFilter, then Filter whatever PreFilter said (upstream's tests run
    both)."""
    snap = snapshot_of([node(labels)], [], objects)
    plugin = VolumeZone(None, handle_for(snap))
    state = fresh_state()
    _, pre = plugin.pre_filter(state, PodInfo(p), batch_of(snap))
    return pre, plugin.filter(state, PodInfo(p), snap.nodes["host1"])


# -- TestSingleZone -------------------------------------------------------------

SINGLE_ZONE_OBJECTS = [
    pv("Vol_1", **{BETA_ZONE: "us-west1-a"}),
    pv("Vol_2", **{BETA_REGION: "us-west1", "uselessLabel": "none"}),
    pv("Vol_3", **{BETA_REGION: "us-west1"}),
    pv("Vol_Stable_1", **{ZONE: "us-west1-a"}),
    pv("Vol_Stable_2", **{REGION: "us-west1", "uselessLabel": "none"}),
    pv("Vol_Stable_3", **{ZONE: "us-west1-a", REGION: "us-west1-a"}),
    pvc("PVC_1", "Vol_1"),
    pvc("PVC_2", "Vol_2"),
    pvc("PVC_3", "Vol_3"),
    pvc("PVC_4", "Vol_not_exist"),
    pvc("PVC_Stable_1", "Vol_Stable_1"),
    pvc("PVC_Stable_2", "Vol_Stable_2"),
    pvc("PVC_Stable_3", "Vol_Stable_3"),
]

USELESS = {"uselessLabel": "none"}


@pytest.mark.parametrize(
    ("claim", "labels", "want_pre", "want_filter"),
    [
        pytest.param("", {BETA_ZONE: "us-west1-a"}, SKIP, OK, id="pod without volume"),
        pytest.param("PVC_1", {}, OK, OK, id="node without labels"),
        pytest.param(
            "PVC_1", {BETA_ZONE: "us-west1-a", **USELESS}, OK, OK, id="beta zone label matched"
        ),
        pytest.param(
            "PVC_2", {BETA_REGION: "us-west1", **USELESS}, OK, OK, id="beta region label matched"
        ),
        pytest.param(
            "PVC_2",
            {BETA_REGION: "no_us-west1", **USELESS},
            OK,
            CONFLICT,
            id="beta region label doesn't match",
        ),
        pytest.param(
            "PVC_1",
            {BETA_ZONE: "no_us-west1-a", **USELESS},
            OK,
            CONFLICT,
            id="beta zone label doesn't match",
        ),
        pytest.param(
            "PVC_Stable_1", {ZONE: "us-west1-a", **USELESS}, OK, OK, id="zone label matched"
        ),
        pytest.param(
            "PVC_Stable_2", {REGION: "us-west1", **USELESS}, OK, OK, id="region label matched"
        ),
        pytest.param(
            "PVC_Stable_2",
            {REGION: "no_us-west1", **USELESS},
            OK,
            CONFLICT,
            id="region label doesn't match",
        ),
        pytest.param(
            "PVC_Stable_1",
            {ZONE: "no_us-west1-a", **USELESS},
            OK,
            CONFLICT,
            id="zone label doesn't match",
        ),
        pytest.param(
            "PVC_Stable_3",
            {ZONE: "us-west1-a"},
            OK,
            CONFLICT,
            id="pv with zone and region, node with only zone",
        ),
        pytest.param(
            "PVC_Stable_1",
            {BETA_ZONE: "us-west1-a"},
            OK,
            CONFLICT,
            id="pv with zone,node with beta zone",
        ),
        pytest.param(
            "PVC_1",
            {ZONE: "us-west1-a"},
            OK,
            OK,
            id="pv with beta label,node with ga label, matched",
        ),
        pytest.param(
            "PVC_1",
            {ZONE: "us-west1-b"},
            OK,
            CONFLICT,
            id="pv with beta label,node with ga label, don't match",
        ),
    ],
)
def test_single_zone(
    claim: str, labels: dict[str, str], want_pre: Status, want_filter: Status
) -> None:
    """volume_zone_test.go, TestSingleZone."""
    p = pod_with_volume(claim) if claim else pb.Pod(uid="u", name="pod_1", namespace="default")
    assert run(SINGLE_ZONE_OBJECTS, p, labels) == (want_pre, want_filter)


# -- TestMultiZone --------------------------------------------------------------

MULTI_ZONE_OBJECTS = [
    pv("Vol_1", **{BETA_ZONE: "us-west1-a"}),
    pv("Vol_2", **{BETA_ZONE: "us-west1-b", "uselessLabel": "none"}),
    pv("Vol_3", **{BETA_ZONE: "us-west1-c__us-west1-a"}),
    pv("Vol_Stable_1", **{ZONE: "us-west1-a"}),
    pv("Vol_Stable_2", **{ZONE: "us-west1-c__us-west1-a"}),
    pvc("PVC_1", "Vol_1"),
    pvc("PVC_2", "Vol_2"),
    pvc("PVC_3", "Vol_3"),
    pvc("PVC_4", "Vol_not_exist"),
    pvc("PVC_Stable_1", "Vol_Stable_1"),
    pvc("PVC_Stable_2", "Vol_Stable_2"),
]


@pytest.mark.parametrize(
    ("claim", "labels", "want_filter"),
    [
        pytest.param("PVC_3", {}, OK, id="node without labels"),
        pytest.param(
            "PVC_3", {BETA_ZONE: "us-west1-a", **USELESS}, OK, id="beta zone label matched"
        ),
        pytest.param(
            "PVC_1",
            {BETA_ZONE: "us-west1-b", **USELESS},
            CONFLICT,
            id="beta zone label doesn't match",
        ),
        pytest.param("PVC_Stable_2", {ZONE: "us-west1-a", **USELESS}, OK, id="zone label matched"),
        pytest.param(
            "PVC_Stable_1", {ZONE: "us-west1-b", **USELESS}, CONFLICT, id="zone label doesn't match"
        ),
    ],
)
def test_multi_zone(claim: str, labels: dict[str, str], want_filter: Status) -> None:
    """volume_zone_test.go, TestMultiZone."""
    assert run(MULTI_ZONE_OBJECTS, pod_with_volume(claim), labels) == (OK, want_filter)


def test_missing_pv_is_unresolvable() -> None:
    """PVC_4 of upstream's tables: bound to a PV that does not exist."""
    want = Status.unresolvable('persistentvolume "Vol_not_exist" not found')
    assert run(MULTI_ZONE_OBJECTS, pod_with_volume("PVC_4"), {ZONE: "a"}) == (want, want)


def test_missing_pvc_is_unresolvable() -> None:
    want = Status.unresolvable('persistentvolumeclaim "nope" not found')
    assert run(MULTI_ZONE_OBJECTS, pod_with_volume("nope"), {ZONE: "a"}) == (want, want)


# -- TestWithBinding ------------------------------------------------------------

BINDING_OBJECTS = [
    storage_class("Class_Immediate"),
    storage_class("Class_Wait", "WaitForFirstConsumer"),
    pv("Vol_1", **{BETA_ZONE: "us-west1-a"}),
    pvc("PVC_1", "Vol_1"),
    pvc("PVC_NoSC", class_name="Class_0"),
    pvc("PVC_EmptySC"),
    pvc("PVC_WaitSC", class_name="Class_Wait"),
    pvc("PVC_ImmediateSC", class_name="Class_Immediate"),
]
TEST_NODE = {BETA_ZONE: "us-west1-a", **USELESS}


@pytest.mark.parametrize(
    ("claim", "want_pre", "want_filter"),
    [
        pytest.param("PVC_1", OK, OK, id="label zone failure domain matched"),
        pytest.param(
            "PVC_EmptySC",
            Status.unresolvable("PersistentVolumeClaim had no pv name and storageClass name"),
            Status.unresolvable("PersistentVolumeClaim had no pv name and storageClass name"),
            id="unbound volume empty storage class",
        ),
        pytest.param(
            "PVC_NoSC",
            Status.unresolvable('storageclass.storage.k8s.io "Class_0" not found'),
            Status.unresolvable('storageclass.storage.k8s.io "Class_0" not found'),
            id="unbound volume no storage class",
        ),
        pytest.param(
            "PVC_ImmediateSC",
            Status.unresolvable('VolumeBindingMode not set for StorageClass "Class_Immediate"'),
            Status.unresolvable('VolumeBindingMode not set for StorageClass "Class_Immediate"'),
            id="unbound volume immediate binding mode",
        ),
        pytest.param("PVC_WaitSC", SKIP, OK, id="unbound volume wait binding mode"),
    ],
)
def test_with_binding(claim: str, want_pre: Status, want_filter: Status) -> None:
    """volume_zone_test.go, TestWithBinding."""
    assert run(BINDING_OBJECTS, pod_with_volume(claim), TEST_NODE) == (want_pre, want_filter)


def test_unbound_claim_of_an_immediate_class_waits_for_its_volume() -> None:
    """The API server defaults volumeBindingMode to Immediate: such an
    unbound claim is not bound yet, getPVbyPod's "PersistentVolume had no
    name"."""
    objects = [storage_class("fast", "Immediate"), pvc("data", class_name="fast")]
    want = Status.unresolvable("PersistentVolume had no name")
    assert run(objects, pod_with_volume("data"), TEST_NODE) == (want, want)


def test_beta_storage_class_annotation_wins() -> None:
    """GetPersistentVolumeClaimClass reads the beta annotation first."""
    claim = make_object(
        PERSISTENT_VOLUME_CLAIMS,
        "data",
        "default",
        annotations={"volume.beta.kubernetes.io/storage-class": "Class_Wait"},
        spec={"storageClassName": "Class_0"},
    )
    assert run([*BINDING_OBJECTS, claim], pod_with_volume("data"), TEST_NODE) == (SKIP, OK)


def test_ephemeral_volumes_are_not_looked_at() -> None:
    p = pb.Pod(uid="u", name="p", namespace="default")
    p.volumes.add(name="scratch", claim_name="p-scratch", ephemeral=True)
    assert run([], p, TEST_NODE) == (SKIP, OK)


# -- label values ---------------------------------------------------------------


def test_label_zones_to_set() -> None:
    assert label_zones_to_set("us-west1-c__us-west1-a") == {"us-west1-c", "us-west1-a"}
    assert label_zones_to_set(" a __b ") == {"a", "b"}
    with pytest.raises(ValueError, match="must not contain an empty string"):
        label_zones_to_set("a____b")


def test_unparsable_pv_label_is_ignored() -> None:
    """getPVTopologies logs and skips a label whose value does not parse."""
    objects = [pv("v", **{ZONE: "a__", REGION: "r"}), pvc("c", "v")]
    assert run(objects, pod_with_volume("c"), {ZONE: "b", REGION: "r"}) == (OK, OK)
    assert run(objects, pod_with_volume("c"), {ZONE: "b", REGION: "x"}) == (OK, CONFLICT)


# -- state, batch, cycles -------------------------------------------------------


def test_filter_without_prefilter_computes_the_topologies() -> None:
    """Filter's fallback when PreFilter did not run."""
    snap = snapshot_of([node({ZONE: "us-west1-b"})], [], SINGLE_ZONE_OBJECTS)
    plugin = VolumeZone(None, handle_for(snap))
    got = plugin.filter(
        fresh_state(), PodInfo(pod_with_volume("PVC_Stable_1")), snap.nodes["host1"]
    )
    assert got == CONFLICT


def test_state_travels_over_the_wire() -> None:
    snap = snapshot_of([node({ZONE: "us-west1-b"})], [], SINGLE_ZONE_OBJECTS)
    plugin = VolumeZone(None, handle_for(snap))
    p = PodInfo(pod_with_volume("PVC_Stable_1"))
    state = fresh_state()
    plugin.pre_filter(state, p, batch_of(snap))
    again = CycleState.decode(state.encode())
    assert again.read(PRE_FILTER_STATE_KEY).pod_pv_topologies[0].values == {"us-west1-a"}
    # The PV's objects are gone from a later snapshot: Filter uses the state.
    later = VolumeZone(None, handle_for(snapshot_of([node({ZONE: "us-west1-b"})])))
    assert later.filter(again, p, snap.nodes["host1"]) == CONFLICT


def zoned_cluster() -> Snapshot:
    nodes = [
        make_node("a1").label(ZONE, "us-west1-a").obj(),
        make_node("b1").label(ZONE, "us-west1-b").obj(),
        make_node("plain").obj(),
        make_node("a2").label(ZONE, "us-west1-a").obj(),
    ]
    return snapshot_of(nodes, [], SINGLE_ZONE_OBJECTS)


def test_batch_form_agrees_with_per_node_form() -> None:
    snap = zoned_cluster()
    plugin = VolumeZone(None, handle_for(snap))
    p = PodInfo(pod_with_volume("PVC_Stable_1"))
    state = fresh_state()
    plugin.pre_filter(state, p, batch_of(snap))
    batch = batch_of(snap)
    verdicts = plugin.filter_nodes(state, p, batch)
    got = {ni.name: verdicts.status_of(k) for k, ni in enumerate(batch)}
    assert got == {ni.name: plugin.filter(state, p, ni) for ni in batch}
    assert got == {"a1": OK, "b1": CONFLICT, "plain": OK, "a2": OK}


def test_reads() -> None:
    assert VolumeZone.reads(None) == (PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES, STORAGE_CLASSES)


REGISTRY: dict[str, type[Plugin]] = {
    "PrioritySort": PrioritySort,
    "VolumeZone": VolumeZone,
    "DefaultBinder": DefaultBinder,
}


def framework() -> Framework:
    refs = (PluginRef("VolumeZone"),)
    return Framework(
        ProfileConfig(
            "test",
            {
                "queueSort": (PluginRef("PrioritySort"),),
                "preFilter": refs,
                "filter": refs,
                "bind": (PluginRef("DefaultBinder"),),
            },
        ),
        REGISTRY,
    )


def test_cycle_failure_message() -> None:
    snap = snapshot_of(
        [make_node(n).label(ZONE, "us-west1-b").obj() for n in ("b1", "b2")],
        [],
        SINGLE_ZONE_OBJECTS,
    )
    result = schedule_pod(framework(), snap, CycleState(), PodInfo(pod_with_volume("PVC_Stable_1")))
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.rejected["b1"].code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert result.message == "0/2 nodes are available: 2 node(s) had no available volume zone."


def test_cycle_places_the_pod_in_its_volume_zone() -> None:
    snap = snapshot_of(
        [
            make_node("b1").label(ZONE, "us-west1-b").obj(),
            make_node("a1").label(ZONE, "us-west1-a").obj(),
        ],
        [],
        SINGLE_ZONE_OBJECTS,
    )
    result = schedule_pod(framework(), snap, CycleState(), PodInfo(pod_with_volume("PVC_Stable_1")))
    assert result.node == "a1", result.message


def test_readme_configuration_loads(tmp_path: Path) -> None:
    readme = (
        Path(__file__).resolve().parents[3] / "plugins" / "volumezone" / "README.md"
    ).read_text()
    path = tmp_path / "scheduler-config.yaml"
    path.write_text(readme.split("```yaml\n", 1)[1].split("```", 1)[0])
    (profile,) = load_config(path, REGISTRY).profiles
    assert [r.name for r in profile.enabled("preFilter")] == ["VolumeZone"]
    assert [r.name for r in profile.enabled("filter")] == ["VolumeZone"]
