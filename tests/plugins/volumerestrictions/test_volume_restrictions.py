"""VolumeRestrictions, ported from upstream's volume_restrictions_test.go at v1.36
(TestGCEDiskConflicts, TestAWSDiskConflicts, TestRBDDiskConflicts,
TestISCSIDiskConflicts, TestAccessModeConflicts), plus read-only mounts, the
PreFilterExtensions (AddPod/RemovePod), the batch form against the per-node
form, bad input, and whole cycles through the Framework.

Its events and hints are tested in tests/plugins/test_events_to_register.py."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
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
from berth.framework.storage import PERSISTENT_VOLUME_CLAIMS
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
from berth.plugins.volumerestrictions import (
    ERR_REASON_DISK_CONFLICT,
    ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT,
    PRE_FILTER_STATE_KEY,
    PreFilterState,
    VolumeRestrictions,
)
from berth.plugins.volumerestrictions.volume_restrictions import is_volume_conflict

DISK_CONFLICT = Status.unschedulable(ERR_REASON_DISK_CONFLICT)
RWOP_CONFLICT = Status.unschedulable(ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT)
SKIP = Status.skip()
OK = Status()
NODE = "node-1"

_uids = itertools.count(1)


def inline(kind: str, **source: Any) -> pb.Volume:
    """A ``spec.volumes`` entry with an inline source, as the caller sends
    it (the whole entry as JSON)."""
    name = f"vol-{next(_uids)}"
    return pb.Volume(name=name, source_json=json.dumps({"name": name, kind: source}).encode())


def claim(name: str) -> pb.Volume:
    return pb.Volume(name=f"v-{name}", claim_name=name)


def pod(*volumes: pb.Volume, name: str = "", node: str = "", namespace: str = "default") -> pb.Pod:
    uid = next(_uids)
    p = pb.Pod(uid=f"uid-{uid}", name=name or f"pod-{uid}", namespace=namespace, node_name=node)
    p.volumes.extend(volumes)
    return p


def pvc(name: str, *modes: str, namespace: str = "default") -> pb.ClusterObject:
    return make_object(PERSISTENT_VOLUME_CLAIMS, name, namespace, spec={"accessModes": list(modes)})


def cluster(existing: Sequence[pb.Pod] = (), objects: Sequence[pb.ClusterObject] = ()) -> Snapshot:
    """One node holding ``existing`` (upstream's framework.NewNodeInfo(pods...))."""
    bound = []
    for p in existing:
        q = pb.Pod()
        q.CopyFrom(p)
        q.node_name = q.node_name or NODE
        bound.append(q)
    return snapshot_of([make_node(NODE).obj()], bound, objects)


def run(snap: Snapshot, p: pb.Pod) -> tuple[Status, Status | None, CycleState]:
    """PreFilter, then (unless it failed or skipped) Filter on the node."""
    plugin = VolumeRestrictions(None, handle_for(snap))
    state = fresh_state()
    _, pre = plugin.pre_filter(state, PodInfo(p), batch_of(snap))
    if not pre.is_success:
        return pre, None, state
    return pre, plugin.filter(state, PodInfo(p), snap.nodes[NODE]), state


@dataclass
class Case:
    pod: pb.Pod
    existing: list[pb.Pod] = field(default_factory=list)
    want_pre_filter: Status = OK
    want_filter: Status | None = OK


def disk_cases(state1: pb.Volume, state2: pb.Volume) -> list[Any]:
    """The four cases upstream's Test<Kind>DiskConflicts share."""
    return [
        pytest.param(Case(pod(), [], SKIP, None), id="nothing"),
        pytest.param(Case(pod(), [pod(state1)], SKIP, None), id="one state"),
        pytest.param(Case(pod(state1), [pod(state1)], OK, DISK_CONFLICT), id="same state"),
        pytest.param(Case(pod(state2), [pod(state1)], OK, OK), id="different state"),
    ]


def check(case: Case) -> None:
    pre, filt, _ = run(cluster(case.existing), case.pod)
    assert pre == case.want_pre_filter
    assert filt == (case.want_filter if pre.is_success else None)


# -- TestGCEDiskConflicts -------------------------------------------------------


GCE_FOO = inline("gcePersistentDisk", pdName="foo")
GCE_BAR = inline("gcePersistentDisk", pdName="bar")


@pytest.mark.parametrize(
    "case",
    [
        *disk_cases(GCE_FOO, GCE_BAR),
        pytest.param(
            Case(pod(pb.Volume(name="volume with no restriction")), [], SKIP, None),
            id="pod with a volume that doesn't have restrictions",
        ),
    ],
)
def test_gce_disk_conflicts(case: Case) -> None:
    """volume_restrictions_test.go, TestGCEDiskConflicts."""
    check(case)


def test_gce_disk_shared_only_when_every_mount_is_read_only() -> None:
    """isVolumeConflict: the same PD read-only on both sides is fine; one
    read-write mount conflicts."""
    ro = inline("gcePersistentDisk", pdName="foo", readOnly=True)
    rw = inline("gcePersistentDisk", pdName="foo")
    assert run(cluster([pod(ro)]), pod(ro))[1] == OK
    assert run(cluster([pod(rw)]), pod(ro))[1] == DISK_CONFLICT
    assert run(cluster([pod(ro)]), pod(rw))[1] == DISK_CONFLICT


# -- TestAWSDiskConflicts -------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    disk_cases(
        inline("awsElasticBlockStore", volumeID="foo"),
        inline("awsElasticBlockStore", volumeID="bar"),
    ),
)
def test_aws_disk_conflicts(case: Case) -> None:
    """volume_restrictions_test.go, TestAWSDiskConflicts."""
    check(case)


def test_aws_disk_conflicts_even_read_only() -> None:
    vol = inline("awsElasticBlockStore", volumeID="foo", readOnly=True)
    assert run(cluster([pod(vol)]), pod(vol))[1] == DISK_CONFLICT


# -- TestRBDDiskConflicts -------------------------------------------------------


def rbd(monitors: list[str], read_only: bool = False, pool: str = "foo") -> pb.Volume:
    return inline(
        "rbd", monitors=monitors, pool=pool, image="bar", fsType="ext4", readOnly=read_only
    )


@pytest.mark.parametrize("case", disk_cases(rbd(["a", "b"]), rbd(["c", "d"])))
def test_rbd_disk_conflicts(case: Case) -> None:
    """volume_restrictions_test.go, TestRBDDiskConflicts."""
    check(case)


@pytest.mark.parametrize(
    ("mine", "theirs", "want"),
    [
        pytest.param(rbd(["b", "c"]), rbd(["a", "b"]), DISK_CONFLICT, id="one monitor shared"),
        pytest.param(rbd(["a"], pool="x"), rbd(["a"]), OK, id="other pool"),
        pytest.param(rbd(["a"], True), rbd(["a"], True), OK, id="both read-only"),
        pytest.param(rbd(["a"], True), rbd(["a"]), DISK_CONFLICT, id="one read-write"),
    ],
)
def test_rbd_image_identity_and_read_only(mine: pb.Volume, theirs: pb.Volume, want: Status) -> None:
    assert run(cluster([pod(theirs)]), pod(mine))[1] == want


# -- TestISCSIDiskConflicts -----------------------------------------------------


def iscsi(iqn: str, read_only: bool = False) -> pb.Volume:
    return inline(
        "iscsi", targetPortal="127.0.0.1:3260", iqn=iqn, fsType="ext4", lun=0, readOnly=read_only
    )


@pytest.mark.parametrize(
    "case",
    disk_cases(
        iscsi("iqn.2016-12.server:storage.target01"), iscsi("iqn.2017-12.server:storage.target01")
    ),
)
def test_iscsi_disk_conflicts(case: Case) -> None:
    """volume_restrictions_test.go, TestISCSIDiskConflicts."""
    check(case)


def test_iscsi_shared_read_only() -> None:
    iqn = "iqn.2016-12.server:storage.target01"
    assert run(cluster([pod(iscsi(iqn, True))]), pod(iscsi(iqn, True)))[1] == OK
    assert run(cluster([pod(iscsi(iqn))]), pod(iscsi(iqn, True)))[1] == DISK_CONFLICT


def test_different_kinds_never_conflict() -> None:
    gce = {"gcePersistentDisk": {"pdName": "foo"}}
    aws = {"awsElasticBlockStore": {"volumeID": "foo"}}
    assert not is_volume_conflict(gce, [aws])
    assert is_volume_conflict(gce, [aws, gce])


# -- TestAccessModeConflicts ----------------------------------------------------

RWOP = "ReadWriteOncePod"
RWOP_1 = pvc("claim-with-rwop-1", RWOP)
RWOP_2 = pvc("claim-with-rwop-2", RWOP)
RWX = pvc("claim-with-rwx", "ReadWriteMany")


def with_one_pvc() -> pb.Pod:
    return pod(claim("claim-with-rwop-1"), name="pod-with-one-pvc", node=NODE)


def with_two_pvcs() -> pb.Pod:
    return pod(
        claim("claim-with-rwop-1"), claim("claim-with-rwop-2"), name="pod-with-two-pvcs", node=NODE
    )


def with_rwx() -> pb.Pod:
    return pod(claim("claim-with-rwx"), name="pod-with-rwx", node=NODE)


@dataclass
class AccessCase:
    pod: pb.Pod
    existing: list[pb.Pod]
    pvcs: list[pb.ClusterObject]
    want_pre_filter: Status
    want_filter: Status | None


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(AccessCase(pod(), [], [], SKIP, None), id="nothing"),
        pytest.param(
            AccessCase(
                with_one_pvc(),
                [],
                [],
                Status.unresolvable('persistentvolumeclaim "claim-with-rwop-1" not found'),
                None,
            ),
            id="failed to get PVC",
        ),
        pytest.param(
            AccessCase(with_one_pvc(), [with_rwx()], [RWOP_1, RWX], SKIP, None),
            id="no access mode conflict",
        ),
        pytest.param(
            AccessCase(
                pod(claim("claim-with-rwop-1"), name="pod-with-one-conflict"),
                [with_one_pvc(), with_rwx()],
                [RWOP_1, RWX],
                OK,
                RWOP_CONFLICT,
            ),
            id="access mode conflict, unschedulable",
        ),
        pytest.param(
            AccessCase(
                pod(
                    claim("claim-with-rwop-1"),
                    claim("claim-with-rwop-2"),
                    name="pod-with-two-conflicts",
                ),
                [with_two_pvcs(), with_rwx()],
                [RWOP_1, RWOP_2, RWX],
                OK,
                RWOP_CONFLICT,
            ),
            id="two conflicts, unschedulable",
        ),
    ],
)
def test_access_mode_conflicts(case: AccessCase) -> None:
    """volume_restrictions_test.go, TestAccessModeConflicts. A pending pod
    with the claim (the incoming one) is not in the cluster state, so
    upstream's existingPods are the node's pods here."""
    pre, filt, _ = run(cluster(case.existing, case.pvcs), case.pod)
    assert pre == case.want_pre_filter
    assert filt == case.want_filter


def test_prefilter_counts_claims_in_use_on_any_node() -> None:
    """calPreFilterState: IsPVCUsedByPods looks at every node, so every node
    is rejected, the node without the claim's user too."""
    other = pod(claim("claim-with-rwop-1"), node="node-2")
    snap = snapshot_of([make_node(NODE).obj(), make_node("node-2").obj()], [other], [RWOP_1])
    plugin = VolumeRestrictions(None, handle_for(snap))
    state = fresh_state()
    incoming = PodInfo(pod(claim("claim-with-rwop-1")))
    _, pre = plugin.pre_filter(state, incoming, batch_of(snap))
    assert pre == OK
    assert state.read(PRE_FILTER_STATE_KEY) == PreFilterState(("claim-with-rwop-1",), 1)
    verdicts = plugin.filter_nodes(state, incoming, batch_of(snap))
    assert [verdicts.status_of(k) for k in range(2)] == [RWOP_CONFLICT, RWOP_CONFLICT]


def test_claim_of_the_same_name_in_another_namespace_is_not_in_use() -> None:
    theirs = pod(claim("claim-with-rwop-1"), namespace="other")
    pre, _, _ = run(
        cluster([theirs], [RWOP_1, pvc("claim-with-rwop-1", RWOP, namespace="other")]),
        pod(claim("claim-with-rwop-1")),
    )
    assert pre == SKIP


def test_pending_pods_do_not_hold_claims() -> None:
    """createUsedPVCSet counts pods with a node name only."""
    snap = snapshot_of([make_node(NODE).obj()], [], [RWOP_1])
    pre, _, _ = run(snap, pod(claim("claim-with-rwop-1")))
    assert pre == SKIP


# -- PreFilterExtensions --------------------------------------------------------


def test_remove_pod_frees_the_claim_and_add_pod_takes_it_again() -> None:
    """AddPod/RemovePod (updateWithPod): preemption's dry run removes the
    claim's user, then puts it back."""
    user = with_one_pvc()
    snap = cluster([user], [RWOP_1])
    plugin = VolumeRestrictions(None, handle_for(snap))
    incoming = PodInfo(pod(claim("claim-with-rwop-1")))
    node = snap.nodes[NODE]
    state = fresh_state()
    plugin.pre_filter(state, incoming, batch_of(snap))
    assert plugin.filter(state, incoming, node) == RWOP_CONFLICT

    before = state.clone()
    assert plugin.remove_pod(state, incoming, PodInfo(user), node) == OK
    assert state.read(PRE_FILTER_STATE_KEY).conflicting_pvc_ref_count == 0
    assert plugin.filter(state, incoming, node) == OK
    # The clone taken before is untouched (values are written anew).
    assert before.read(PRE_FILTER_STATE_KEY).conflicting_pvc_ref_count == 1

    assert plugin.add_pod(state, incoming, PodInfo(user), node) == OK
    assert plugin.filter(state, incoming, node) == RWOP_CONFLICT


def test_add_pod_of_a_nominated_user_rejects() -> None:
    snap = cluster([], [RWOP_1])
    plugin = VolumeRestrictions(None, handle_for(snap))
    incoming = PodInfo(pod(claim("claim-with-rwop-1")))
    nominated = PodInfo(pod(claim("claim-with-rwop-1"), claim("unrelated")))
    state = fresh_state()
    plugin.pre_filter(state, incoming, batch_of(snap))
    # Nothing in use and no disks: PreFilter skips, and writes no state.
    assert PRE_FILTER_STATE_KEY not in state
    assert plugin.add_pod(state, incoming, nominated, snap.nodes[NODE]).code is Code.ERROR

    state = fresh_state()
    state.write(PRE_FILTER_STATE_KEY, PreFilterState(("claim-with-rwop-1",), 0))
    assert plugin.add_pod(state, incoming, nominated, snap.nodes[NODE]) == OK
    assert plugin.filter(state, incoming, snap.nodes[NODE]) == RWOP_CONFLICT


def test_extensions_are_declared() -> None:
    assert VolumeRestrictions.has_extensions()


def test_extensions_without_prefilter_state_are_an_error() -> None:
    snap = cluster()
    plugin = VolumeRestrictions(None, handle_for(snap))
    p = PodInfo(pod())
    status = plugin.remove_pod(fresh_state(), p, p, snap.nodes[NODE])
    assert status == Status.error('cannot read "PreFilterVolumeRestrictions" from cycleState')


def test_state_travels_over_the_wire() -> None:
    snap = cluster([with_one_pvc()], [RWOP_1])
    plugin = VolumeRestrictions(None, handle_for(snap))
    incoming = PodInfo(pod(claim("claim-with-rwop-1")))
    state = fresh_state()
    plugin.pre_filter(state, incoming, batch_of(snap))
    again = CycleState.decode(state.encode())
    assert plugin.filter(again, incoming, snap.nodes[NODE]) == RWOP_CONFLICT


# -- batch form, bad input ------------------------------------------------------


def test_batch_form_agrees_with_per_node_form() -> None:
    disks = [GCE_FOO, GCE_BAR, rbd(["a"]), iscsi("iqn.x")]
    nodes = [make_node(f"n{i}").obj() for i in range(6)]
    pods = [pod(disks[i % 4], node=f"n{i}") for i in range(4)]
    snap = snapshot_of(nodes, pods)
    plugin = VolumeRestrictions(None, handle_for(snap))
    for wanted in ([GCE_FOO], [rbd(["a"]), iscsi("iqn.x")], [GCE_BAR]):
        incoming = PodInfo(pod(*wanted))
        state = fresh_state()
        plugin.pre_filter(state, incoming, batch_of(snap))
        batch = batch_of(snap)
        verdicts = plugin.filter_nodes(state, incoming, batch)
        got = [verdicts.status_of(k) for k in range(len(batch))]
        assert got == [plugin.filter(state, incoming, ni) for ni in batch]
        assert DISK_CONFLICT in got and OK in got


def test_malformed_source_json_is_an_error_naming_pod_and_volume() -> None:
    bad = pb.Volume(name="broken", source_json=b"{not json")
    pre, _, _ = run(cluster(), pod(bad, name="p1"))
    assert pre.code is Code.ERROR
    assert "pod default/p1" in pre.message and "'broken'" in pre.message


def test_filter_without_prefilter_state_is_an_error() -> None:
    snap = cluster()
    plugin = VolumeRestrictions(None, handle_for(snap))
    got = plugin.filter(fresh_state(), PodInfo(pod(GCE_FOO)), snap.nodes[NODE])
    assert got == Status.error('cannot read "PreFilterVolumeRestrictions" from cycleState')


def test_reads_claims() -> None:
    assert VolumeRestrictions.reads(None) == (PERSISTENT_VOLUME_CLAIMS,)


def test_pvc_names_alone_still_count_as_claims() -> None:
    """A caller that sends only pvc_names (no volumes) still has its claims
    checked."""
    legacy = pb.Pod(uid="u", name="legacy", namespace="default", pvc_names=["claim-with-rwop-1"])
    pre, _, _ = run(cluster([], []), legacy)
    assert pre == Status.unresolvable('persistentvolumeclaim "claim-with-rwop-1" not found')


# -- whole cycles ---------------------------------------------------------------

REGISTRY: dict[str, type[Plugin]] = {
    "PrioritySort": PrioritySort,
    "VolumeRestrictions": VolumeRestrictions,
    "DefaultBinder": DefaultBinder,
}


def framework() -> Framework:
    refs = (PluginRef("VolumeRestrictions"),)
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


def test_cycle_places_the_pod_where_its_disk_is_free() -> None:
    snap = snapshot_of([make_node("a").obj(), make_node("b").obj()], [pod(GCE_FOO, node="a")])
    result = schedule_pod(framework(), snap, CycleState(), PodInfo(pod(GCE_FOO)))
    assert result.status.is_success, result.message
    assert result.node == "b"


def test_cycle_failure_messages() -> None:
    snap = snapshot_of(
        [make_node("a").obj(), make_node("b").obj()],
        [pod(GCE_FOO, node="a"), pod(GCE_FOO, node="b")],
    )
    result = schedule_pod(framework(), snap, CycleState(), PodInfo(pod(GCE_FOO)))
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.message == "0/2 nodes are available: 2 node(s) had no available disk."

    user = pod(claim("claim-with-rwop-1"), node="a")
    snap = snapshot_of([make_node("a").obj(), make_node("b").obj()], [user], [RWOP_1])
    result = schedule_pod(framework(), snap, CycleState(), PodInfo(pod(claim("claim-with-rwop-1"))))
    assert result.message == (
        "0/2 nodes are available: 2 node(s) unavailable due to PersistentVolumeClaim with "
        "ReadWriteOncePod access mode already in-use by another pod."
    )


def test_readme_configuration_loads(tmp_path: Path) -> None:
    readme = (
        Path(__file__).resolve().parents[3] / "plugins" / "volumerestrictions" / "README.md"
    ).read_text()
    path = tmp_path / "scheduler-config.yaml"
    path.write_text(readme.split("```yaml\n", 1)[1].split("```", 1)[0])
    (profile,) = load_config(path, REGISTRY).profiles
    assert [r.name for r in profile.enabled("preFilter")] == ["VolumeRestrictions"]
    assert [r.name for r in profile.enabled("filter")] == ["VolumeRestrictions"]


def nominated(p: pb.Pod, node: str, priority: int = 0) -> pb.Pod:
    p.nominated_node_name = node
    p.priority = priority
    return p


def test_cycle_counts_a_nominated_pods_claim_through_add_pod() -> None:
    """RunFilterPluginsWithNominatedPods: a pod nominated to node a with the
    ReadWriteOncePod claim is added to a's evaluation through AddPod; node b
    is evaluated without it. (The incoming pod also mounts a disk, so
    PreFilter does not skip: with nothing in use and no disk it would, and
    upstream would then not look at nominated pods for the claim either.)"""
    snap = snapshot_of(
        [make_node("a").obj(), make_node("b").obj()],
        [nominated(pod(claim("claim-with-rwop-1")), "a")],
        [RWOP_1],
    )
    incoming = PodInfo(pod(claim("claim-with-rwop-1"), GCE_BAR))
    fw = framework()
    for seed in range(8):
        result = schedule_pod(fw, snap, CycleState(), incoming, rng=random.Random(seed))
        assert result.node == "b", result.message
    # Without the nominated pod the cycle takes a.
    free = snapshot_of([make_node("a").obj(), make_node("b").obj()], [], [RWOP_1])
    placed = {
        schedule_pod(fw, free, CycleState(), incoming, rng=random.Random(seed)).node
        for seed in range(8)
    }
    assert placed == {"a"}


def test_cycle_sees_a_nominated_pods_disk() -> None:
    snap = snapshot_of(
        [make_node("a").obj(), make_node("b").obj()],
        [nominated(pod(GCE_FOO), "a", priority=10)],
    )
    result = schedule_pod(framework(), snap, CycleState(), PodInfo(pod(GCE_FOO)))
    assert result.node == "b", result.message
    # A nominated pod of lower priority does not count.
    snap = snapshot_of([make_node("a").obj()], [nominated(pod(GCE_FOO), "a", priority=-1)])
    assert schedule_pod(framework(), snap, CycleState(), PodInfo(pod(GCE_FOO))).node == "a"
