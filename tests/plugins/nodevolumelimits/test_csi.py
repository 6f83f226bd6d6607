"""NodeVolumeLimits (CSILimits), ported from upstream's nodevolumelimits/csi_test.go
at v1.36: TestCSILimits (every case, same names) and TestVolumeLimitScalingGate's
gate-off case (the gate is alpha and off in v1.36), with the same fixtures
(getFakeCSIPVLister, getFakeCSIPVCLister, getFakeCSIStorageClassLister,
getNodeWithPodAndVolumeLimits, buildFakeClientWithVALister) as cluster objects.
Plus the CSI translation of in-tree volumes (csi-translation-lib's handles),
VolumeAttachment details, the batch form and whole cycles.

Not-found messages are those of the client-go listers kube-scheduler runs
with (``persistentvolumeclaim "x" not found``); upstream's test fakes spell
the resource in the plural. Its events and hints are tested in
tests/plugins/test_events_to_register.py."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.config import load_config
from berth.framework.csi_translation import (
    AWS_EBS,
)
from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import Plugin
from berth.framework.model import PodInfo
from berth.framework.profile import PluginRef, ProfileConfig
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.snapshot import Snapshot
from berth.framework.status import Code, Status
from berth.framework.storage import (
    CSI_NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
    VOLUME_ATTACHMENTS,
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
from berth.plugins.nodevolumelimits import ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED, CSILimits
from berth.plugins.queuesort import PrioritySort

EBS = "ebs.csi.aws.com"
GCE = "pd.csi.storage.gke.io"
AWS_IN_TREE = "kubernetes.io/aws-ebs"
HOSTPATH_IN_TREE = "kubernetes.io/hostpath"
SC_NAME = "csi-sc"
NODE = "node-for-max-pd-test-1"

EXCEEDED = Status.unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED)
OK = Status()
SKIP = Status.skip()

_uids = itertools.count(1)


# -- pods -----------------------------------------------------------------------


def pvc_pod(*claims: str, namespace: str = "default") -> pb.Pod:
    """st.MakePod().PVC(...)."""
    uid = next(_uids)
    p = pb.Pod(uid=f"uid-{uid}", name=f"pod-{uid}", namespace=namespace)
    for c in claims:
        p.volumes.add(name=f"v-{c}", claim_name=c)
    return p


def inline_volume(kind: str, **source: Any) -> pb.Volume:
    name = f"inline-{next(_uids)}"
    return pb.Volume(name=name, source_json=json.dumps({"name": name, kind: source}).encode())


def other_volume(name: str) -> pb.Volume:
    """A configMap or secret volume: nothing the plugin reads."""
    return pb.Volume(name=name)


def pod_of(
    *volumes: pb.Volume, name: str = "", namespace: str = "default", uid: str = ""
) -> pb.Pod:
    n = next(_uids)
    p = pb.Pod(uid=uid or f"uid-{n}", name=name or f"pod-{n}", namespace=namespace)
    p.volumes.extend(volumes)
    return p


def ephemeral(pod_name: str, volume: str) -> pb.Volume:
    return pb.Volume(name=volume, claim_name=f"{pod_name}-{volume}", ephemeral=True)


def running_pod() -> pb.Pod:
    return pvc_pod("csi-ebs.csi.aws.com-3")


def pending_volume_pod() -> pb.Pod:
    return pvc_pod("csi-4")


def missing_pv_pod() -> pb.Pod:
    return pvc_pod("csi-6")


def no_sc_pvc_pod() -> pb.Pod:
    return pvc_pod("csi-5")


def gce_two_vol_pod() -> pb.Pod:
    return pvc_pod("csi-pd.csi.storage.gke.io-1", "csi-pd.csi.storage.gke.io-2")


def in_tree_one_vol_pod() -> pb.Pod:
    return pvc_pod("csi-kubernetes.io/aws-ebs-0")


def in_tree_two_vol_pod() -> pb.Pod:
    return pvc_pod("csi-kubernetes.io/aws-ebs-1", "csi-kubernetes.io/aws-ebs-2")


def csi_ebs_one_vol_pod() -> pb.Pod:
    return pvc_pod("csi-ebs.csi.aws.com-0")


def csi_ebs_two_vol_pod() -> pb.Pod:
    return pvc_pod("csi-ebs.csi.aws.com-1", "csi-ebs.csi.aws.com-2")


def in_tree_non_migratable_one_vol_pod() -> pb.Pod:
    return pvc_pod("csi-kubernetes.io/hostpath-0")


def ephemeral_volume_pod() -> pb.Pod:
    return pod_of(ephemeral("abc", "xyz"), name="abc", namespace="test", uid="12345")


def ephemeral_two_volume_pod() -> pb.Pod:
    return pod_of(
        ephemeral("abc", "x"), ephemeral("abc", "y"), name="abc", namespace="test", uid="12345II"
    )


def in_tree_inline_vol_pod() -> pb.Pod:
    return pod_of(inline_volume("awsElasticBlockStore", volumeID="aws-inline1"))


def in_tree_inline_vol_pod_with_same_csi_volume_id() -> pb.Pod:
    return pod_of(inline_volume("awsElasticBlockStore", volumeID="csi-ebs.csi.aws.com-1"))


def only_configmap_and_secret_vol_pod() -> pb.Pod:
    return pod_of(other_volume("cm"), other_volume("secret"))


def pvc_pod_with_configmap_and_secret() -> pb.Pod:
    return pod_of(
        other_volume("cm"),
        other_volume("secret"),
        pb.Volume(name="data", claim_name="csi-ebs.csi.aws.com-0"),
    )


def ephemeral_pod_with_configmap_and_secret() -> pb.Pod:
    return pod_of(
        other_volume("cm"),
        other_volume("secret"),
        ephemeral("abc", "xyz"),
        name="abc",
        namespace="test",
    )


def inline_migratable_pod_with_configmap_and_secret() -> pb.Pod:
    return pod_of(
        other_volume("cm"),
        other_volume("secret"),
        inline_volume("awsElasticBlockStore", volumeID="aws-inline1"),
    )


# -- objects --------------------------------------------------------------------


def ephemeral_claim(pod_name: str, volume: str, owner_uid: str | None) -> pb.ClusterObject:
    owners = (
        [{"kind": "Pod", "name": pod_name, "uid": owner_uid, "controller": True}]
        if owner_uid
        else None
    )
    meta_extra = {"ownerReferences": owners} if owners else {}
    obj = make_object(
        PERSISTENT_VOLUME_CLAIMS, f"{pod_name}-{volume}", "test", spec={"storageClassName": SC_NAME}
    )
    if meta_extra:
        body = json.loads(obj.json)
        body["metadata"].update(meta_extra)
        obj.json = json.dumps(body).encode()
    return obj


EPHEMERAL_CLAIM = ephemeral_claim("abc", "xyz", "12345")
CONFLICTING_CLAIM = ephemeral_claim("abc", "xyz", None)
EPHEMERAL_CLAIM_X = ephemeral_claim("abc", "x", "12345II")
EPHEMERAL_CLAIM_Y = ephemeral_claim("abc", "y", "12345II")


def fake_pvs(volume_name: str, drivers: Sequence[str]) -> list[pb.ClusterObject]:
    """getFakeCSIPVLister: four PVs per driver, CSI unless the driver is the
    in-tree AWS EBS or hostPath plugin."""
    out = []
    for driver in drivers:
        for j in range(4):
            handle = f"{volume_name}-{driver}-{j}"
            if driver == AWS_IN_TREE:
                spec: dict[str, Any] = {"awsElasticBlockStore": {"volumeID": handle}}
            elif driver == HOSTPATH_IN_TREE:
                spec = {"hostPath": {"path": "/tmp"}}
            else:
                spec = {"csi": {"driver": driver, "volumeHandle": handle}}
            out.append(make_object(PERSISTENT_VOLUMES, handle, spec=spec))
    return out


def fake_pvcs(volume_name: str, drivers: Sequence[str]) -> list[pb.ClusterObject]:
    """getFakeCSIPVCLister: a claim bound to each PV, then -4 (unbound, with
    the class), -5 (unbound, no class) and -6 (the class and a PV that does
    not exist)."""
    out = []
    for driver in drivers:
        for j in range(4):
            name = f"{volume_name}-{driver}-{j}"
            out.append(make_object(PERSISTENT_VOLUME_CLAIMS, name, spec={"volumeName": name}))
    out.append(
        make_object(
            PERSISTENT_VOLUME_CLAIMS, f"{volume_name}-4", spec={"storageClassName": SC_NAME}
        )
    )
    out.append(make_object(PERSISTENT_VOLUME_CLAIMS, f"{volume_name}-5", spec={}))
    out.append(
        make_object(
            PERSISTENT_VOLUME_CLAIMS,
            f"{volume_name}-6",
            spec={"storageClassName": SC_NAME, "volumeName": "missing-in-action"},
        )
    )
    return out


def fake_storage_class(provisioner: str) -> pb.ClusterObject:
    """getFakeCSIStorageClassLister."""
    return make_object(STORAGE_CLASSES, SC_NAME, provisioner=provisioner)


def fake_csi_node(limit_source: str, limit: int, drivers: Sequence[str]) -> pb.ClusterObject | None:
    """getNodeWithPodAndVolumeLimits's CSINode: drivers with limits
    ("csinode"), without ("csinode-with-no-limit"), none ("no-csi-driver"),
    or no CSINode at all ("")."""
    if not limit_source:
        return None
    entries: list[dict[str, Any]] = []
    if limit_source != "no-csi-driver":
        for d in drivers:
            entry: dict[str, Any] = {"name": d, "nodeID": NODE}
            if limit_source == "csinode":
                entry["allocatable"] = {"count": limit}
            entries.append(entry)
    return make_object(CSI_NODES, NODE, spec={"drivers": entries})


def csi_node_with(limit: int, drivers: Sequence[str]) -> pb.ClusterObject:
    """A CSINode whose drivers all report ``limit``."""
    obj = fake_csi_node("csinode", limit, drivers)
    assert obj is not None
    return obj


def fake_volume_attachments(count: int, drivers: Sequence[str]) -> list[pb.ClusterObject]:
    """buildFakeClientWithVALister: ``count`` VolumeAttachments per driver to
    the node, of the PVs csi-<driver>-<j>."""
    return [
        make_object(
            VOLUME_ATTACHMENTS,
            f"va-{driver}-{j}",
            spec={
                "nodeName": NODE,
                "attacher": driver,
                "source": {"persistentVolumeName": f"csi-{driver}-{j}"},
            },
        )
        for driver in drivers
        for j in range(count)
    ]


def on_node(pods: Sequence[pb.Pod], node: str = NODE) -> list[pb.Pod]:
    out = []
    for p in pods:
        q = pb.Pod()
        q.CopyFrom(p)
        q.node_name = node
        out.append(q)
    return out


@dataclass
class LimitsCase:
    new_pod: pb.Pod
    existing: list[pb.Pod] = field(default_factory=list)
    extra_claims: list[pb.ClusterObject] = field(default_factory=list)
    max_vols: int = 0
    va_count: int = 0
    drivers: list[str] = field(default_factory=list)
    limit_source: str = ""
    want: Status = OK
    want_pre_filter: Status = OK

    def snapshot(self) -> Snapshot:
        objects = [
            *fake_pvs("csi", self.drivers),
            *fake_pvcs("csi", self.drivers),
            *self.extra_claims,
            fake_storage_class(self.drivers[0]),
            *fake_volume_attachments(self.va_count, self.drivers),
        ]
        csinode = fake_csi_node(self.limit_source, self.max_vols, self.drivers)
        if csinode is not None:
            objects.append(csinode)
        return snapshot_of([make_node(NODE).obj()], on_node(self.existing), objects)


def c(test: str, **kwargs: Any) -> Any:
    return pytest.param(LimitsCase(**kwargs), id=test)


CSI_LIMITS_CASES = [
    c(
        "should count VolumeAttachments towards volume limit when no pods exist",
        new_pod=csi_ebs_one_vol_pod(),
        max_vols=2,
        drivers=[EBS],
        va_count=2,
        limit_source="csinode",
        want=EXCEEDED,
    ),
    c(
        "should schedule pod when VolumeAttachments count does not exceed limit",
        new_pod=csi_ebs_one_vol_pod(),
        max_vols=2,
        drivers=[EBS],
        va_count=1,
        limit_source="csinode",
    ),
    c(
        "fits when node volume limit >= new pods CSI volume",
        new_pod=csi_ebs_one_vol_pod(),
        existing=[running_pod(), csi_ebs_two_vol_pod()],
        max_vols=4,
        drivers=[EBS],
        limit_source="csinode",
    ),
    c(
        "doesn't when node volume limit <= pods CSI volume",
        new_pod=csi_ebs_one_vol_pod(),
        existing=[running_pod(), csi_ebs_two_vol_pod()],
        max_vols=2,
        drivers=[EBS],
        limit_source="csinode",
        want=EXCEEDED,
    ),
    c(
        "should when driver does not support volume limits",
        new_pod=csi_ebs_one_vol_pod(),
        existing=[running_pod(), csi_ebs_two_vol_pod()],
        max_vols=2,
        drivers=[EBS],
        limit_source="csinode-with-no-limit",
    ),
    c(
        "count pending PVCs towards volume limit <= pods CSI volume",
        new_pod=csi_ebs_one_vol_pod(),
        existing=[pending_volume_pod(), csi_ebs_two_vol_pod()],
        max_vols=2,
        drivers=[EBS],
        limit_source="csinode",
        want=EXCEEDED,
    ),
    c(
        "count multiple pending pvcs towards volume limit >= pods CSI volume",
        new_pod=csi_ebs_one_vol_pod(),
        existing=[pending_volume_pod(), pending_volume_pod(), csi_ebs_two_vol_pod()],
        max_vols=4,
        drivers=[EBS],
        limit_source="csinode",
    ),
    c(
        "should count PVCs with invalid PV name but valid SC",
        new_pod=csi_ebs_one_vol_pod(),
        existing=[missing_pv_pod(), csi_ebs_two_vol_pod()],
        max_vols=2,
        drivers=[EBS],
        limit_source="csinode",
        want=EXCEEDED,
    ),
    c(
        "don't count pvcs with missing SC towards volume limit",
        new_pod=csi_ebs_one_vol_pod(),
        existing=[running_pod(), no_sc_pvc_pod()],
        max_vols=2,
        drivers=[EBS],
        limit_source="csinode",
    ),
    c(
        "count pvcs with the same type towards volume limit",
        new_pod=csi_ebs_one_vol_pod(),
        existing=[gce_two_vol_pod(), csi_ebs_two_vol_pod()],
        max_vols=2,
        drivers=[EBS, GCE],
        limit_source="csinode",
        want=EXCEEDED,
    ),
    c(
        "don't count pvcs with different type towards volume limit",
        new_pod=gce_two_vol_pod(),
        existing=[csi_ebs_two_vol_pod(), running_pod()],
        max_vols=2,
        drivers=[EBS, GCE],
        limit_source="csinode",
    ),
    c(
        "should count in-tree volumes if migration is enabled",
        new_pod=in_tree_one_vol_pod(),
        existing=[in_tree_two_vol_pod()],
        max_vols=2,
        drivers=[AWS_IN_TREE, EBS],
        limit_source="csinode",
        want=EXCEEDED,
    ),
    c(
        "nil csi node",
        new_pod=in_tree_inline_vol_pod(),
        existing=[in_tree_two_vol_pod()],
        drivers=[AWS_IN_TREE, EBS],
    ),
    c(
        "should count unbound in-tree volumes if migration is enabled",
        new_pod=pending_volume_pod(),
        existing=[in_tree_two_vol_pod()],
        max_vols=2,
        drivers=[AWS_IN_TREE, EBS],
        limit_source="csinode",
        want=EXCEEDED,
    ),
    c(
        "should not limit pod if volume used does not report limits",
        new_pod=in_tree_one_vol_pod(),
        existing=[in_tree_two_vol_pod()],
        max_vols=2,
        drivers=[AWS_IN_TREE, EBS],
        limit_source="csinode-with-no-limit",
    ),
    c(
        "should not count non-migratable in-tree volumes",
        new_pod=in_tree_non_migratable_one_vol_pod(),
        existing=[csi_ebs_two_vol_pod()],
        max_vols=2,
        drivers=[HOSTPATH_IN_TREE, EBS],
        limit_source="csinode",
    ),
    c(
        "should count in-tree inline volumes if migration is enabled",
        new_pod=in_tree_inline_vol_pod(),
        existing=[in_tree_two_vol_pod()],
        max_vols=2,
        drivers=[AWS_IN_TREE, EBS],
        limit_source="csinode",
        want=EXCEEDED,
    ),
    c(
        "should count in-tree and csi volumes if migration is enabled "
        "(when scheduling in-tree volumes)",
        new_pod=in_tree_one_vol_pod(),
        existing=[csi_ebs_two_vol_pod()],
        max_vols=2,
        drivers=[AWS_IN_TREE, EBS],
        limit_source="csinode",
        want=EXCEEDED,
    ),
    c(
        "should count in-tree, inline and csi volumes if migration is enabled "
        "(when scheduling in-tree volumes)",
        new_pod=in_tree_inline_vol_pod(),
        existing=[csi_ebs_two_vol_pod(), in_tree_one_vol_pod()],
        max_vols=3,
        drivers=[AWS_IN_TREE, EBS],
        limit_source="csinode",
        want=EXCEEDED,
    ),
    c(
        "should not count in-tree, inline and csi volumes if migration is enabled "
        "(when scheduling in-tree volumes)",
        new_pod=in_tree_inline_vol_pod_with_same_csi_volume_id(),
        existing=[csi_ebs_two_vol_pod(), in_tree_one_vol_pod()],
        max_vols=3,
        drivers=[AWS_IN_TREE, EBS],
        limit_source="csinode",
    ),
    c(
        "should count in-tree and csi volumes if migration is enabled "
        "(when scheduling csi volumes)",
        new_pod=csi_ebs_one_vol_pod(),
        existing=[in_tree_two_vol_pod()],
        max_vols=2,
        drivers=[AWS_IN_TREE, EBS],
        limit_source="csinode",
        want=EXCEEDED,
    ),
    c(
        "ephemeral volume missing",
        new_pod=ephemeral_volume_pod(),
        drivers=[EBS],
        limit_source="csinode-with-no-limit",
        want=Status.unresolvable(
            'looking up PVC test/abc-xyz: persistentvolumeclaim "abc-xyz" not found'
        ),
    ),
    c(
        "ephemeral volume not owned",
        new_pod=ephemeral_volume_pod(),
        extra_claims=[CONFLICTING_CLAIM],
        drivers=[EBS],
        limit_source="csinode-with-no-limit",
        want=Status.error("PVC test/abc-xyz was not created for pod test/abc (pod is not owner)"),
    ),
    c(
        "ephemeral volume unbound",
        new_pod=ephemeral_volume_pod(),
        extra_claims=[EPHEMERAL_CLAIM],
        drivers=[EBS],
        limit_source="csinode-with-no-limit",
    ),
    c(
        "ephemeral doesn't when node volume limit <= pods CSI volume",
        new_pod=ephemeral_volume_pod(),
        extra_claims=[EPHEMERAL_CLAIM],
        drivers=[EBS],
        existing=[running_pod(), csi_ebs_two_vol_pod()],
        max_vols=2,
        limit_source="csinode",
        want=EXCEEDED,
    ),
    c(
        "ephemeral doesn't when node volume limit <= pods ephemeral CSI volume",
        new_pod=csi_ebs_one_vol_pod(),
        extra_claims=[EPHEMERAL_CLAIM_X, EPHEMERAL_CLAIM_Y],
        drivers=[EBS],
        existing=[running_pod(), ephemeral_two_volume_pod()],
        max_vols=2,
        limit_source="csinode",
        want=EXCEEDED,
    ),
    # Upstream's "ephemeral disabled" variant: the generic ephemeral volume
    # gate no longer exists, the plugin behaves the same either way.
    c(
        "persistent doesn't when node volume limit <= pods ephemeral CSI volume + "
        "persistent volume, ephemeral disabled",
        new_pod=csi_ebs_one_vol_pod(),
        extra_claims=[EPHEMERAL_CLAIM],
        drivers=[EBS],
        existing=[running_pod(), ephemeral_volume_pod(), csi_ebs_two_vol_pod()],
        max_vols=3,
        limit_source="csinode",
        want=EXCEEDED,
    ),
    c(
        "persistent doesn't when node volume limit <= pods ephemeral CSI volume + persistent volume",
        new_pod=csi_ebs_one_vol_pod(),
        extra_claims=[EPHEMERAL_CLAIM],
        drivers=[EBS],
        existing=[running_pod(), ephemeral_volume_pod(), csi_ebs_two_vol_pod()],
        max_vols=3,
        limit_source="csinode",
        want=EXCEEDED,
    ),
    c(
        "persistent okay when node volume limit > pods ephemeral CSI volume + persistent volume",
        new_pod=csi_ebs_one_vol_pod(),
        extra_claims=[EPHEMERAL_CLAIM],
        drivers=[EBS],
        existing=[running_pod(), ephemeral_volume_pod(), csi_ebs_two_vol_pod()],
        max_vols=5,
        limit_source="csinode",
    ),
    c(
        "skip Filter when the pod only uses secrets and configmaps",
        new_pod=only_configmap_and_secret_vol_pod(),
        max_vols=2,
        drivers=[EBS],
        limit_source="csinode",
        want_pre_filter=SKIP,
    ),
    c(
        "don't skip Filter when the pod has pvcs",
        new_pod=pvc_pod_with_configmap_and_secret(),
        max_vols=2,
        drivers=[EBS],
        limit_source="csinode",
    ),
    c(
        "don't skip Filter when the pod has ephemeral volumes",
        new_pod=ephemeral_pod_with_configmap_and_secret(),
        drivers=[EBS],
        limit_source="csinode-with-no-limit",
        want=Status.unresolvable(
            'looking up PVC test/abc-xyz: persistentvolumeclaim "abc-xyz" not found'
        ),
    ),
    c(
        "don't skip Filter when the pod has inline migratable volumes",
        new_pod=inline_migratable_pod_with_configmap_and_secret(),
        existing=[in_tree_two_vol_pod()],
        max_vols=2,
        drivers=[AWS_IN_TREE, EBS],
        limit_source="csinode",
        want=EXCEEDED,
    ),
    # TestVolumeLimitScalingGate, the gate's default (off): no CSIDriver
    # check, a node whose CSINode lists no driver takes the pod.
    c(
        "gate disabled - skip driver presence check (regardless of CSIDriver presence)",
        new_pod=csi_ebs_one_vol_pod(),
        drivers=[EBS],
        limit_source="no-csi-driver",
    ),
]


@pytest.mark.parametrize("case", CSI_LIMITS_CASES)
def test_csi_limits(case: LimitsCase) -> None:
    """csi_test.go, TestCSILimits: PreFilter, then Filter unless skipped."""
    snap = case.snapshot()
    plugin = CSILimits(None, handle_for(snap))
    state = fresh_state()
    pod = PodInfo(case.new_pod)
    _, pre = plugin.pre_filter(state, pod, batch_of(snap))
    assert pre == case.want_pre_filter
    if not pre.is_skip:
        assert plugin.filter(state, pod, snap.nodes[NODE]) == case.want
        # The batch form agrees.
        verdicts = plugin.filter_nodes(state, pod, batch_of(snap))
        assert verdicts.status_of(0) == case.want


# -- VolumeAttachments ----------------------------------------------------------


def va(name: str, pv: str | None, attacher: str = EBS, node: str = NODE) -> pb.ClusterObject:
    spec: dict[str, Any] = {"nodeName": node, "attacher": attacher, "source": {}}
    if pv is not None:
        spec["source"]["persistentVolumeName"] = pv
    return make_object(VOLUME_ATTACHMENTS, name, spec=spec)


def limits_snapshot(
    objects: list[pb.ClusterObject], existing: Sequence[pb.Pod] = (), limit: int = 2
) -> Snapshot:
    base = [
        *fake_pvs("csi", [EBS]),
        *fake_pvcs("csi", [EBS]),
        fake_storage_class(EBS),
        csi_node_with(limit, [EBS]),
    ]
    nodes = [make_node(NODE).obj(), make_node("other").obj()]
    return snapshot_of(nodes, on_node(existing), [*base, *objects])


def filter_on(snap: Snapshot, p: pb.Pod, node: str = NODE) -> Status:
    plugin = CSILimits(None, handle_for(snap))
    return plugin.filter(fresh_state(), PodInfo(p), snap.nodes[node])


def test_attachment_of_a_volume_a_pod_uses_counts_once() -> None:
    """getNodeVolumeAttachmentInfo's volumes already used by the node's pods
    are not counted again."""
    snap = limits_snapshot(
        [va("va-1", "csi-ebs.csi.aws.com-1")], [pvc_pod("csi-ebs.csi.aws.com-1")]
    )
    assert filter_on(snap, csi_ebs_one_vol_pod()) == OK
    snap = limits_snapshot(
        [va("va-1", "csi-ebs.csi.aws.com-2")], [pvc_pod("csi-ebs.csi.aws.com-1")]
    )
    assert filter_on(snap, csi_ebs_one_vol_pod()) == EXCEEDED


@pytest.mark.parametrize(
    "attachment",
    [
        pytest.param(va("va-x", "csi-ebs.csi.aws.com-1", attacher=""), id="no attacher"),
        pytest.param(va("va-x", None), id="no PV name"),
        pytest.param(va("va-x", "not-there"), id="PV missing"),
        pytest.param(va("va-x", "csi-ebs.csi.aws.com-1", node="other"), id="other node"),
    ],
)
def test_attachments_that_do_not_count(attachment: pb.ClusterObject) -> None:
    snap = limits_snapshot([attachment, va("va-y", "csi-ebs.csi.aws.com-2")])
    assert filter_on(snap, csi_ebs_one_vol_pod()) == OK


def test_attachment_of_a_non_csi_pv_does_not_count() -> None:
    in_tree = make_object(
        PERSISTENT_VOLUMES, "intree", spec={"awsElasticBlockStore": {"volumeID": "vol-1"}}
    )
    snap = limits_snapshot([in_tree, va("va-x", "intree"), va("va-y", "csi-ebs.csi.aws.com-2")])
    assert filter_on(snap, csi_ebs_one_vol_pod()) == OK


def test_a_volume_the_node_already_has_is_not_new() -> None:
    """The incoming pod's volume already used on the node does not count
    against the limit again."""
    snap = limits_snapshot([], [csi_ebs_two_vol_pod()])
    assert filter_on(snap, pvc_pod("csi-ebs.csi.aws.com-1")) == OK
    assert filter_on(snap, pvc_pod("csi-ebs.csi.aws.com-3")) == EXCEEDED


def test_missing_claim_of_an_existing_pod_is_not_counted() -> None:
    snap = limits_snapshot([], [pvc_pod("gone"), pvc_pod("csi-ebs.csi.aws.com-1")])
    assert filter_on(snap, csi_ebs_one_vol_pod()) == OK


def test_existing_pod_with_a_foreign_ephemeral_claim_is_an_error() -> None:
    """filterAttachableVolumes checks ownership for the node's pods too."""
    snap = limits_snapshot([CONFLICTING_CLAIM], [ephemeral_volume_pod()])
    got = filter_on(snap, csi_ebs_one_vol_pod())
    assert got.code is Code.ERROR
    assert "was not created for pod test/abc" in got.message


# -- CSI translation ------------------------------------------------------------


def test_inline_and_pv_of_the_same_gce_disk_count_once() -> None:
    """An inline GCE PD and a claim bound to an in-tree PV of the same disk
    (no zone label) translate to the same handle."""
    gce_pv = make_object(
        PERSISTENT_VOLUMES, "gce-pv", spec={"gcePersistentDisk": {"pdName": "foo"}}
    )
    gce_pvc = make_object(PERSISTENT_VOLUME_CLAIMS, "gce-claim", spec={"volumeName": "gce-pv"})
    csinode = csi_node_with(1, [GCE])
    snap = snapshot_of(
        [make_node(NODE).obj()], on_node([pvc_pod("gce-claim")]), [gce_pv, gce_pvc, csinode]
    )
    same = pod_of(inline_volume("gcePersistentDisk", pdName="foo"))
    other = pod_of(inline_volume("gcePersistentDisk", pdName="bar"))
    assert filter_on(snap, same) == OK
    assert filter_on(snap, other) == EXCEEDED


def test_inline_volume_that_does_not_translate_is_an_error() -> None:
    snap = limits_snapshot([])
    bad = pod_of(inline_volume("awsElasticBlockStore", volumeID="aws://zone/not-a-vol"))
    got = filter_on(snap, bad)
    assert got.code is Code.ERROR
    assert "from inline to csi: failed to translate Kubernetes ID to EBS Volume ID" in got.message


def test_in_tree_pv_without_csinode_is_not_counted() -> None:
    """isCSIMigrationOn needs the node's CSINode; without one there are no
    limits anyway, and the translation is never tried."""
    assert AWS_EBS.driver_name == EBS
    snap = snapshot_of(
        [make_node(NODE).obj()],
        on_node([in_tree_two_vol_pod()]),
        [*fake_pvs("csi", [AWS_IN_TREE]), *fake_pvcs("csi", [AWS_IN_TREE])],
    )
    assert filter_on(snap, in_tree_one_vol_pod()) == OK


# -- the rest -------------------------------------------------------------------


def test_reads() -> None:
    assert CSILimits.reads(None) == (
        PERSISTENT_VOLUME_CLAIMS,
        PERSISTENT_VOLUMES,
        STORAGE_CLASSES,
        CSI_NODES,
        VOLUME_ATTACHMENTS,
    )


def test_no_extensions() -> None:
    """PreFilterExtensions() returns nil upstream."""
    assert not CSILimits.has_extensions()


def test_malformed_inline_volume_is_an_error() -> None:
    snap = limits_snapshot([])
    plugin = CSILimits(None, handle_for(snap))
    bad = pod_of(pb.Volume(name="broken", source_json=b"[1]"), name="p9")
    _, pre = plugin.pre_filter(fresh_state(), PodInfo(bad), batch_of(snap))
    assert pre.code is Code.ERROR
    assert "pod default/p9" in pre.message


def test_batch_form_agrees_across_nodes() -> None:
    nodes = [make_node(f"n{i}").obj() for i in range(5)]
    csinodes = [
        make_object(
            CSI_NODES, f"n{i}", spec={"drivers": [{"name": EBS, "allocatable": {"count": i}}]}
        )
        for i in range(4)
    ]
    pods = on_node([csi_ebs_two_vol_pod()], "n3") + on_node([running_pod()], "n2")
    objects = [
        *fake_pvs("csi", [EBS]),
        *fake_pvcs("csi", [EBS]),
        fake_storage_class(EBS),
        *csinodes,
    ]
    snap = snapshot_of(nodes, pods, objects)
    plugin = CSILimits(None, handle_for(snap))
    incoming = PodInfo(pvc_pod("csi-ebs.csi.aws.com-0", "csi-4"))
    batch = batch_of(snap)
    verdicts = plugin.filter_nodes(fresh_state(), incoming, batch)
    got = {ni.name: verdicts.status_of(k) for k, ni in enumerate(batch)}
    assert got == {ni.name: plugin.filter(fresh_state(), incoming, ni) for ni in batch}
    # n0, n1: 2 new > limit; n2: 1 + 2 > 2; n3: 2 + 2 > 3; n4: no CSINode.
    assert got == {"n0": EXCEEDED, "n1": EXCEEDED, "n2": EXCEEDED, "n3": EXCEEDED, "n4": OK}


REGISTRY: dict[str, type[Plugin]] = {
    "PrioritySort": PrioritySort,
    "NodeVolumeLimits": CSILimits,
    "DefaultBinder": DefaultBinder,
}


def framework() -> Framework:
    refs = (PluginRef("NodeVolumeLimits"),)
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


def test_cycle_places_the_pod_on_the_node_with_room() -> None:
    snap = limits_snapshot([], [csi_ebs_two_vol_pod()])
    result = schedule_pod(framework(), snap, CycleState(), PodInfo(csi_ebs_one_vol_pod()))
    assert result.node == "other", result.message


def test_cycle_failure_message() -> None:
    snap = snapshot_of(
        [make_node(NODE).obj()],
        on_node([csi_ebs_two_vol_pod()]),
        [*fake_pvs("csi", [EBS]), *fake_pvcs("csi", [EBS]), csi_node_with(2, [EBS])],
    )
    result = schedule_pod(framework(), snap, CycleState(), PodInfo(csi_ebs_one_vol_pod()))
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.message == "0/1 nodes are available: 1 node(s) exceed max volume count."


def test_readme_configuration_loads(tmp_path: Path) -> None:
    readme = (
        Path(__file__).resolve().parents[3] / "plugins" / "nodevolumelimits" / "README.md"
    ).read_text()
    path = tmp_path / "scheduler-config.yaml"
    path.write_text(readme.split("```yaml\n", 1)[1].split("```", 1)[0])
    (profile,) = load_config(path, REGISTRY).profiles
    assert [r.name for r in profile.enabled("preFilter")] == ["NodeVolumeLimits"]
    assert [r.name for r in profile.enabled("filter")] == ["NodeVolumeLimits"]
