"""VolumeZone: keep a pod off nodes outside the zones of its volumes.

Port of pkg/scheduler/framework/plugins/volumezone/volume_zone.go at v1.36
(PreFilter, Filter):

* PreFilter (getPVbyPod) follows each ``persistentVolumeClaim`` volume of the
  pod to its bound PersistentVolume and collects the PV's topology labels
  (``failure-domain.beta.kubernetes.io/zone``, ``.../region``,
  ``topology.kubernetes.io/zone``, ``.../region``; a value may list zones
  joined by ``__``). An unbound claim whose StorageClass binds
  WaitForFirstConsumer is left to VolumeBinding; any other unbound claim, or
  a claim, class or volume that does not exist, makes the pod
  UnschedulableAndUnresolvable with upstream's message. No labels: Skip.
* Filter passes a node without any of the four labels (a single-zone
  cluster); otherwise every PV label must be matched by the node's label of
  the same key (a beta PV label may be matched by the node's GA label), else
  ``node(s) had no available volume zone`` (UnschedulableAndUnresolvable).

Generic ephemeral volumes and inline volumes are not looked at, as upstream.
EventsToRegister is upstream's (queueing hints on), with the hints for a
StorageClass and a claim; a PersistentVolume added or changed moves the pods
it rejected without a hint (upstream's reads the pod's claims from a lister,
which a hint here has not). SignPod has no Berth extension point.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Final

import msgspec

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
from berth.framework.snapshot import (
    LABEL_REGION,
    LABEL_REGION_BETA,
    LABEL_ZONE,
    LABEL_ZONE_BETA,
    NodeBatch,
)
from berth.framework.status import SUCCESS, Status
from berth.framework.storage import (
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
    STORAGE_GROUP,
    claim_of_pod,
    claim_storage_class,
    is_claim,
    mapping,
    not_found,
    persistent_volume,
    persistent_volume_claim,
    storage_class,
    volumes_of,
)

__all__ = [
    "ERR_REASON_CONFLICT",
    "NAME",
    "PRE_FILTER_STATE_KEY",
    "PVTopology",
    "VolumeZone",
    "label_zones_to_set",
    "pv_topologies",
]

log = logging.getLogger(__name__)

NAME: Final = "VolumeZone"

# volume_zone.go, ErrReasonConflict.
ERR_REASON_CONFLICT: Final = "node(s) had no available volume zone"

_CONFLICT: Final = Status.unresolvable(ERR_REASON_CONFLICT)

# volume_zone.go, topologyLabels, in upstream's order.
TOPOLOGY_LABELS: Final = (LABEL_ZONE_BETA, LABEL_REGION_BETA, LABEL_ZONE, LABEL_REGION)

# k8s.io/cloud-provider/volume, LabelMultiZoneDelimiter.
LABEL_MULTI_ZONE_DELIMITER: Final = "__"

# storage/v1 VolumeBindingWaitForFirstConsumer.
WAIT_FOR_FIRST_CONSUMER: Final = "WaitForFirstConsumer"


class PVTopology(msgspec.Struct, frozen=True, array_like=True):
    """volume_zone.go, pvTopology: one topology label of a PV and the values
    it allows."""

    pv_name: str
    key: str
    values: frozenset[str]


class PreFilterState(msgspec.Struct, frozen=True):
    """volume_zone.go, stateData."""

    pod_pv_topologies: tuple[PVTopology, ...]


# Scheduling-only: upstream reads it only in Filter (volume_zone.go, Filter).
PRE_FILTER_STATE_KEY: Final = StateKey("PreFilter" + NAME, PreFilterState, scheduling_only=True)


def translate_to_ga_label(label: str) -> str:
    """translateToGALabel: the GA key of a beta zone or region key."""
    if label == LABEL_REGION_BETA:
        return LABEL_REGION
    if label == LABEL_ZONE_BETA:
        return LABEL_ZONE
    return label


def label_zones_to_set(value: str) -> frozenset[str]:
    """cloud-provider volume/helpers, LabelZonesToSet: the zones of a label
    value joined by ``__``, trimmed. ValueError when one is empty."""
    zones = [z.strip() for z in value.split(LABEL_MULTI_ZONE_DELIMITER)]
    if any(not z for z in zones):
        raise ValueError(
            f'"{LABEL_MULTI_ZONE_DELIMITER}" separated list ("{value}") must not contain '
            "an empty string"
        )
    return frozenset(zones)


def pv_topologies(pv: ClusterObject) -> list[PVTopology]:
    """getPVTopologies: the PV's topology labels; a label whose value does
    not parse is ignored (logged)."""
    out: list[PVTopology] = []
    labels = pv.labels
    for key in TOPOLOGY_LABELS:
        if key not in labels:
            continue
        try:
            values = label_zones_to_set(str(labels[key]))
        except ValueError as exc:
            log.debug("PV %s: ignoring topology label %s: %s", pv.name, key, exc)
            continue
        out.append(PVTopology(pv.name, key, values))
    return out


class VolumeZone(PreFilterPlugin, FilterPlugin, SignPlugin):
    """The VolumeZone plugin (upstream's volumezone.VolumeZone)."""

    name: ClassVar[str] = NAME

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """SignPod: the volumes the pod mounts (signers.go VolumesSigner)."""
        return [(signers.VOLUMES, signers.volumes(pod.proto))]

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """volume_zone.go, EventsToRegister (queueing hints on)."""
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.STORAGE_CLASS, ActionType.ADD),
                self.is_schedulable_after_storage_class_added,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD | ActionType.UPDATE
                ),
                self.is_schedulable_after_claim_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.PERSISTENT_VOLUME, ActionType.ADD | ActionType.UPDATE)
            ),
        ]

    def is_schedulable_after_storage_class_added(
        self, pod: PodInfo, old: None, new: ClusterObject
    ) -> QueueingHint:
        """isSchedulableAfterStorageClassAdded: a WaitForFirstConsumer class."""
        if new.data.get("volumeBindingMode") == "WaitForFirstConsumer":
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def is_schedulable_after_claim_change(
        self, pod: PodInfo, old: ClusterObject | None, new: ClusterObject
    ) -> QueueingHint:
        """isSchedulableAfterPersistentVolumeClaimChange: one of the pod's
        claims (isPVCRequestedFromPod)."""
        if claim_of_pod(pod.proto, new, ephemeral=False):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        """Claims, volumes and classes (upstream's pvcLister, pvLister,
        scLister)."""
        return (PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES, STORAGE_CLASSES)

    def _pv_topologies_of(self, pod: PodInfo) -> tuple[list[PVTopology], Status]:
        """getPVbyPod: the topologies of the PVs the pod's claims are bound
        to, or the status that rejects the pod."""
        snapshot = self.handle.snapshot
        out: list[PVTopology] = []
        for v in volumes_of(pod.proto):
            if not is_claim(v):
                continue
            name = v.claim_name
            pvc = persistent_volume_claim(snapshot, pod.namespace, name)
            if pvc is None:
                return [], Status.unresolvable(not_found("persistentvolumeclaim", name))
            pv_name = mapping(pvc.data, "spec").get("volumeName")
            if not isinstance(pv_name, str) or not pv_name:
                class_name = claim_storage_class(pvc)
                if not class_name:
                    return [], Status.unresolvable(
                        "PersistentVolumeClaim had no pv name and storageClass name"
                    )
                sc = storage_class(snapshot, class_name)
                if sc is None:
                    return [], Status.unresolvable(
                        not_found("storageclass", class_name, STORAGE_GROUP)
                    )
                mode = sc.data.get("volumeBindingMode")
                if not mode:
                    return [], Status.unresolvable(
                        f'VolumeBindingMode not set for StorageClass "{class_name}"'
                    )
                if mode == WAIT_FOR_FIRST_CONSUMER:
                    # Unbound, bound later by VolumeBinding: skipped.
                    continue
                return [], Status.unresolvable("PersistentVolume had no name")
            pv = persistent_volume(snapshot, pv_name)
            if pv is None:
                return [], Status.unresolvable(not_found("persistentvolume", pv_name))
            out.extend(pv_topologies(pv))
        return out, SUCCESS

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        """PreFilter: the PV topologies to CycleState; Skip when there are
        none."""
        topologies, status = self._pv_topologies_of(pod)
        if not status.is_success:
            return None, status
        if not topologies:
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, PreFilterState(tuple(topologies)))
        return None, SUCCESS

    def _state_topologies(
        self, state: CycleState, pod: PodInfo
    ) -> tuple[tuple[PVTopology, ...], Status]:
        pre = state.get(PRE_FILTER_STATE_KEY)
        if pre is not None:
            return pre.pod_pv_topologies, SUCCESS
        # Upstream falls back to computing the list when PreFilter did not
        # run.
        topologies, status = self._pv_topologies_of(pod)
        return tuple(topologies), status

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Filter: every PV topology label matched by the node, unless the
        node has no topology label at all."""
        if not volumes_of(pod.proto):
            return SUCCESS
        topologies, status = self._state_topologies(state, pod)
        if not status.is_success:
            return status
        return _node_status(topologies, node, pod)

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        """The batch form: the topologies are read once."""
        n = len(nodes)
        if not volumes_of(pod.proto):
            return NodeVerdicts.all_pass(n)
        topologies, status = self._state_topologies(state, pod)
        if not status.is_success:
            return NodeVerdicts.uniform(n, status)
        if not topologies:
            return NodeVerdicts.all_pass(n)
        return NodeVerdicts.from_statuses([_node_status(topologies, ni, pod) for ni in nodes])


def _node_status(topologies: tuple[PVTopology, ...], node: NodeInfo, pod: PodInfo) -> Status:
    labels = node.node.labels
    if not any(key in labels for key in TOPOLOGY_LABELS):
        # No zone constraint on the node (a single-zone cluster).
        return SUCCESS
    for t in topologies:
        if t.key in labels:
            value = labels[t.key]
        elif (ga := translate_to_ga_label(t.key)) in labels:
            # A beta PV label matched by the node's GA label.
            value = labels[ga]
        else:
            value = None
        if value is None or value not in t.values:
            log.debug(
                "pod %s does not fit node %s: PV %s label %s mismatch",
                pod.key,
                node.name,
                t.pv_name,
                t.key,
            )
            return _CONFLICT
    return SUCCESS
