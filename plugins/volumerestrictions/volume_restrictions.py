"""VolumeRestrictions: keep a pod off nodes where its disks are already in use.

Port of pkg/scheduler/framework/plugins/volumerestrictions/
volume_restrictions.go at v1.36 (PreFilter, AddPod, RemovePod, Filter):

* In-tree disks (isVolumeConflict): the same GCE PD mounted by two pods
  unless both mount it read-only; the same AWS EBS volume ID; the same iSCSI
  IQN unless both are read-only; an RBD image (a shared Ceph monitor, the same
  pool and image) unless both are read-only. Read from the volumes'
  ``source_json`` (the whole ``spec.volumes`` entry).
* ReadWriteOncePod claims: PreFilter finds the pod's claims whose
  PersistentVolumeClaim has the ReadWriteOncePod access mode and counts how
  many of them a pod bound to a node already uses (upstream's
  StorageInfos().IsPVCUsedByPods over the snapshot). Any such use rejects
  every node (preempting the user can help: Unschedulable). AddPod/RemovePod
  adjust the count for nominated pods and preemption's dry runs.

EventsToRegister is upstream's (queueing hints on), with the hint for an
added claim; a pod's deletion moves the pods it rejected without a hint (the
upstream hint reads the deleted pod's claims from a lister, which a hint here
has not). SignPod has no Berth extension point.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Final

import msgspec

from berth.api.v1 import cluster_pb2 as pb
from berth.framework import signers
from berth.framework.cycle_state import CycleState, StateKey
from berth.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from berth.framework.interfaces import (
    FilterPlugin,
    NodeVerdicts,
    PreFilterPlugin,
    PreFilterResult,
    SignFragment,
    SignPlugin,
)
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.objects import ClusterObject, ObjectKind
from berth.framework.snapshot import NodeBatch, Snapshot
from berth.framework.status import SUCCESS, Status
from berth.framework.storage import (
    PERSISTENT_VOLUME_CLAIMS,
    READ_WRITE_ONCE_POD,
    access_modes,
    claim_of_pod,
    inline_source,
    is_claim,
    mapping,
    not_found,
    persistent_volume_claim,
    volumes_of,
)

__all__ = [
    "ERR_REASON_DISK_CONFLICT",
    "ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT",
    "NAME",
    "PRE_FILTER_STATE_KEY",
    "PreFilterState",
    "VolumeRestrictions",
    "is_volume_conflict",
]

log = logging.getLogger(__name__)

NAME: Final = "VolumeRestrictions"

# volume_restrictions.go, ErrReasonDiskConflict and
# ErrReasonReadWriteOncePodConflict.
ERR_REASON_DISK_CONFLICT: Final = "node(s) had no available disk"
ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT: Final = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
    "already in-use by another pod"
)

_DISK_CONFLICT: Final = Status.unschedulable(ERR_REASON_DISK_CONFLICT)
_RWOP_CONFLICT: Final = Status.unschedulable(ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT)

# The in-tree sources Filter compares (needsRestrictionsCheck).
_GCE_PD: Final = "gcePersistentDisk"
_AWS_EBS: Final = "awsElasticBlockStore"
_ISCSI: Final = "iscsi"
_RBD: Final = "rbd"
_RESTRICTED: Final = (_GCE_PD, _AWS_EBS, _ISCSI, _RBD)

Source = Mapping[str, Any]


class PreFilterState(msgspec.Struct, frozen=True):
    """volume_restrictions.go, preFilterState: the names of the pod's claims
    with the ReadWriteOncePod access mode, and how many references to them
    pods on nodes hold."""

    read_write_once_pod_pvcs: tuple[str, ...]
    conflicting_pvc_ref_count: int

    def updated_with(self, pod: pb.Pod, multiplier: int) -> PreFilterState:
        """updateWithPod: the count plus ``multiplier`` times the pod's
        references. As upstream (conflictingPVCRefCountForPod), a claim
        counts by name whatever the pod's namespace."""
        names = set(self.read_write_once_pod_pvcs)
        refs = sum(1 for v in volumes_of(pod) if is_claim(v) and v.claim_name in names)
        if not refs:
            return self
        return PreFilterState(
            self.read_write_once_pod_pvcs, self.conflicting_pvc_ref_count + multiplier * refs
        )


# Upstream's key: "PreFilter" + the plugin name.
# Scheduling-only: upstream reads it only in Filter, AddPod and RemovePod
# (volume_restrictions.go, getPreFilterState).
PRE_FILTER_STATE_KEY: Final = StateKey("PreFilter" + NAME, PreFilterState, scheduling_only=True)


def _missing_state() -> Status:
    # getPreFilterState's error, as fwk.AsStatus makes it.
    return Status.error(f'cannot read "{PRE_FILTER_STATE_KEY.name}" from cycleState')


def _bool(source: Source, key: str) -> bool:
    return source.get(key) is True


def _str(source: Source, key: str) -> str:
    value = source.get(key)
    return value if isinstance(value, str) else ""


def _have_overlap(a: Iterable[Any], b: Iterable[Any]) -> bool:
    """haveOverlap: at least one element in common."""
    return not set(a).isdisjoint(b)


def _shared_unless_read_only(a: Source, b: Source, same: bool) -> bool:
    """The same disk mounted twice conflicts unless both mounts are
    read-only."""
    return same and not (_bool(a, "readOnly") and _bool(b, "readOnly"))


def _gce_conflict(a: Source, b: Source) -> bool:
    # The same GCE PD, unless every mount is read-only.
    return _shared_unless_read_only(a, b, _str(a, "pdName") == _str(b, "pdName"))


def _aws_conflict(a: Source, b: Source) -> bool:
    # The same EBS volume, whatever the mode.
    return _str(a, "volumeID") == _str(b, "volumeID")


def _iscsi_conflict(a: Source, b: Source) -> bool:
    # The same IQN is the same volume; iSCSI is RWO or ROX, so only
    # read-only mounts may share it.
    return _shared_unless_read_only(a, b, _str(a, "iqn") == _str(b, "iqn"))


def _rbd_conflict(a: Source, b: Source) -> bool:
    # The same image: a Ceph monitor in common, the same pool and image
    # name; only read-only mounts may share it.
    monitors, other_monitors = a.get("monitors") or [], b.get("monitors") or []
    same = (
        isinstance(monitors, list)
        and isinstance(other_monitors, list)
        and _have_overlap(monitors, other_monitors)
        and _str(a, "pool") == _str(b, "pool")
        and _str(a, "image") == _str(b, "image")
    )
    return _shared_unless_read_only(a, b, same)


_CONFLICTS: Final = (
    (_GCE_PD, _gce_conflict),
    (_AWS_EBS, _aws_conflict),
    (_ISCSI, _iscsi_conflict),
    (_RBD, _rbd_conflict),
)


def is_volume_conflict(volume: Source, existing: Iterable[Source]) -> bool:
    """isVolumeConflict: does the inline ``volume`` (a ``spec.volumes``
    entry) conflict with any of an existing pod's volumes?"""
    mine = [(key, mapping(volume, key), check) for key, check in _CONFLICTS]
    mine = [m for m in mine if m[1]]
    for other in existing:
        for key, source, check in mine:
            theirs = mapping(other, key)
            if theirs and check(source, theirs):
                return True
    return False


def _needs_restrictions_check(source: Source) -> bool:
    """needsRestrictionsCheck: a GCE PD, AWS EBS, RBD or iSCSI volume."""
    return any(isinstance(source.get(k), dict) for k in _RESTRICTED)


def _restricted_volumes(pod: pb.Pod) -> list[Source]:
    """The pod's inline volumes that Filter compares. ValueError when a
    volume's JSON is malformed."""
    out: list[Source] = []
    for v in volumes_of(pod):
        if v.source_json:
            source = inline_source(pod, v)
            if _needs_restrictions_check(source):
                out.append(source)
    return out


def _inline_sources(pod: pb.Pod) -> list[Source]:
    return [inline_source(pod, v) for v in volumes_of(pod) if v.source_json]


def _satisfies_volume_conflicts(wanted: Sequence[Source], node: NodeInfo) -> bool:
    """satisfyVolumeConflicts: none of ``wanted`` conflicts with a volume of
    a pod on the node."""
    if not wanted:
        return True
    for existing in node.pods.values():
        sources = _inline_sources(existing.proto)
        if not sources:
            continue
        for volume in wanted:
            if is_volume_conflict(volume, sources):
                return False
    return True


def _claims_used_by_pods(snapshot: Snapshot, keys: set[tuple[str, str]]) -> int:
    """How many of ``keys`` (namespace, claim) a pod on a node of the
    snapshot uses: upstream's usedPVCSet (cache.UpdateSnapshot,
    createUsedPVCSet), asked per key with IsPVCUsedByPods. O(pods); only
    pods that ask for a ReadWriteOncePod claim pay it."""
    found: set[tuple[str, str]] = set()
    for ni in snapshot.nodes.values():
        for p in ni.pods.values():
            for v in volumes_of(p.proto):
                if is_claim(v):
                    key = (p.proto.namespace, v.claim_name)
                    if key in keys:
                        found.add(key)
            if len(found) == len(keys):
                return len(found)
    return len(found)


class VolumeRestrictions(PreFilterPlugin, FilterPlugin, SignPlugin):
    """The VolumeRestrictions plugin (upstream's
    volumerestrictions.VolumeRestrictions)."""

    name: ClassVar[str] = NAME

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """SignPod: the volumes the pod mounts (signers.go VolumesSigner)."""
        return [(signers.VOLUMES, signers.volumes(pod.proto))]

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """volume_restrictions.go, EventsToRegister (queueing hints on)."""
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.DELETE)),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD)),
            ClusterEventWithHint(
                ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD),
                self.is_schedulable_after_claim_added,
            ),
        ]

    def is_schedulable_after_claim_added(
        self, pod: PodInfo, old: None, new: ClusterObject
    ) -> QueueingHint:
        """isSchedulableAfterPersistentVolumeClaimAdded: a claim one of the
        pod's persistentVolumeClaim volumes names."""
        if claim_of_pod(pod.proto, new, ephemeral=False):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        """The claims, for their access modes (upstream's pvcLister)."""
        return (PERSISTENT_VOLUME_CLAIMS,)

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        """PreFilter: the pod's ReadWriteOncePod claims and how many are in
        use to CycleState. Skip when the pod has neither an in-tree disk to
        compare nor a ReadWriteOncePod claim in use. A claim that does not
        exist: UnschedulableAndUnresolvable, upstream's NotFound message."""
        try:
            needs_check = bool(_restricted_volumes(pod.proto))
        except ValueError as exc:
            return None, Status.error(str(exc))
        snapshot = self.handle.snapshot
        rwop: dict[str, None] = {}
        for v in volumes_of(pod.proto):
            if not is_claim(v):
                continue
            # readWriteOncePodPVCsForPod
            pvc = persistent_volume_claim(snapshot, pod.namespace, v.claim_name)
            if pvc is None:
                return None, Status.unresolvable(not_found("persistentvolumeclaim", v.claim_name))
            if READ_WRITE_ONCE_POD in access_modes(pvc):
                rwop[pvc.name] = None
        count = 0
        if rwop:
            # calPreFilterState
            count = _claims_used_by_pods(snapshot, {(pod.namespace, n) for n in rwop})
        if not needs_check and count == 0:
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, PreFilterState(tuple(rwop), count))
        if count:
            log.debug(
                "pod %s: %d of its ReadWriteOncePod claims are in use by other pods", pod.key, count
            )
        return None, SUCCESS

    def add_pod(
        self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo
    ) -> Status:
        """AddPod: ``pod_to_add``'s references to the claims count."""
        return self._update(state, pod_to_add, 1)

    def remove_pod(
        self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo
    ) -> Status:
        """RemovePod: ``pod_to_remove``'s references no longer count."""
        return self._update(state, pod_to_remove, -1)

    @staticmethod
    def _update(state: CycleState, other: PodInfo, multiplier: int) -> Status:
        pre = state.get(PRE_FILTER_STATE_KEY)
        if pre is None:
            return _missing_state()
        updated = pre.updated_with(other.proto, multiplier)
        if updated is not pre:
            # Written anew: a cloned CycleState shares its values.
            state.write(PRE_FILTER_STATE_KEY, updated)
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Filter: ``node(s) had no available disk`` when an in-tree disk of
        the pod conflicts with one of a pod on the node; then
        ``node(s) unavailable due to PersistentVolumeClaim with
        ReadWriteOncePod access mode already in-use by another pod`` when a
        ReadWriteOncePod claim is in use. Both Unschedulable."""
        try:
            wanted = _restricted_volumes(pod.proto)
            fits = _satisfies_volume_conflicts(wanted, node)
        except ValueError as exc:
            return Status.error(str(exc))
        if not fits:
            return _DISK_CONFLICT
        return _rwop_status(state.get(PRE_FILTER_STATE_KEY))

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        """The batch form: the pod's disks are read once, then compared with
        each node's pods."""
        n = len(nodes)
        rest = _rwop_status(state.get(PRE_FILTER_STATE_KEY))
        try:
            wanted = _restricted_volumes(pod.proto)
            if not wanted:
                return NodeVerdicts.uniform(n, rest)
            statuses = [
                rest if _satisfies_volume_conflicts(wanted, ni) else _DISK_CONFLICT for ni in nodes
            ]
        except ValueError as exc:
            return NodeVerdicts.uniform(n, Status.error(str(exc)))
        return NodeVerdicts.from_statuses(statuses)


def _rwop_status(pre: PreFilterState | None) -> Status:
    """getPreFilterState, then satisfyReadWriteOncePod."""
    if pre is None:
        return _missing_state()
    return _RWOP_CONFLICT if pre.conflicting_pvc_ref_count > 0 else SUCCESS
