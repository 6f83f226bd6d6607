"""NodeVolumeLimits: keep a pod off nodes whose CSI attach limit it would
exceed.

Port of pkg/scheduler/framework/plugins/nodevolumelimits/csi.go at v1.36
(CSILimits: PreFilter, Filter) with the v1.36 default feature gates:

* A node's limits are its CSINode's ``spec.drivers[].allocatable.count``
  (getVolumeLimits). A node without a CSINode, or whose drivers report no
  count, has no limit.
* A volume counts as ``<driver>/<volume handle>``, once however many pods use
  it (filterAttachableVolumes): a claim bound to a CSI PersistentVolume; a
  claim bound to an in-tree PV that migrated to CSI (AWS EBS, GCE PD, Azure
  Disk, Cinder, Portworx), translated as csi-translation-lib does, when the
  node has a CSINode; an unbound claim (or one whose PV is missing) by its
  StorageClass's provisioner, with a handle private to the claim; a generic
  ephemeral volume through its claim, which must be owned by the pod; an
  inline in-tree volume of a migrated plugin, translated.
* The node's count is the volumes of the pods on it plus the VolumeAttachments
  of CSI PersistentVolumes attached to it that no pod there uses
  (getNodeVolumeAttachmentInfo). The incoming pod's volumes not already
  counted are added per driver; over a driver's limit:
  ``node(s) exceed max volume count`` (Unschedulable).
* The incoming pod's claim must exist (UnschedulableAndUnresolvable, the
  lister's NotFound message); an ephemeral claim not owned by the pod, or an
  inline volume that does not translate, is an Error, as upstream.

Not ported: the VolumeLimitScaling check of CSIDriver
``preventPodSchedulingIfMissing`` (alpha in v1.36, off by default) and
SignPod. EventsToRegister is upstream's, with the hints for a CSINode update
and an added claim; a pod's deletion and a VolumeAttachment's move the pods
it rejected without a hint (upstream's read listers, which a hint here has
not).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from typing import Any, ClassVar, Final

from berth.api.v1 import cluster_pb2 as pb
from berth.framework import signers
from berth.framework.csi_translation import (
    TranslationError,
    inline_plugin,
    inline_volume_handle,
    is_csi_migration_on,
    plugin_by_name,
    pv_plugin,
    pv_volume_handle,
)
from berth.framework.cycle_state import CycleState
from berth.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from berth.framework.handle import Handle
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
    CSI_NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
    STORAGE_GROUP,
    VOLUME_ATTACHMENTS,
    claim_of_pod,
    claim_storage_class,
    csi_node,
    ephemeral_claim_name,
    inline_source,
    is_controlled_by,
    mapping,
    not_found,
    persistent_volume,
    persistent_volume_claim,
    storage_class,
    volumes_of,
)

__all__ = ["ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED", "NAME", "CSILimits", "volume_limits"]

log = logging.getLogger(__name__)

# names.NodeVolumeLimits (csi.go, CSIName).
NAME: Final = "NodeVolumeLimits"

# csi.go, ErrReasonMaxVolumeCountExceeded.
ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED: Final = "node(s) exceed max volume count"

_EXCEEDED: Final = Status.unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED)

# volumeUniqueName ("<driver>/<handle>") -> driver.
Volumes = dict[str, str]


class _VolumeError(Exception):
    """Ends Filter with ``status`` (upstream's error returns)."""

    def __init__(self, status: Status) -> None:
        super().__init__(status.message)
        self.status = status


def volume_limits(csinode: ClusterObject | None) -> dict[str, int]:
    """getVolumeLimits: driver -> allocatable.count of the CSINode's drivers
    that report one."""
    out: dict[str, int] = {}
    if csinode is None:
        return out
    drivers = mapping(csinode.data, "spec").get("drivers")
    if not isinstance(drivers, list):
        return out
    for d in drivers:
        if not isinstance(d, dict):
            continue
        count = mapping(d, "allocatable").get("count")
        name = d.get("name")
        if isinstance(name, str) and isinstance(count, int) and not isinstance(count, bool):
            out[name] = count
    return out


def _unique_name(driver: str, handle: str) -> str:
    """getVolumeUniqueName."""
    return f"{driver}/{handle}"


class _Call:
    """What one Filter call reads, looked up once: the VolumeAttachments by
    node."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._attachments: dict[str, list[Mapping[str, Any]]] | None = None

    def attachments_on(self, node_name: str) -> list[Mapping[str, Any]]:
        """The specs of the VolumeAttachments to ``node_name`` (upstream's
        VolumeAttachment indexer by spec.nodeName)."""
        if self._attachments is None:
            by_node: dict[str, list[Mapping[str, Any]]] = {}
            for va in self.snapshot.objects(STORAGE_GROUP, VOLUME_ATTACHMENTS.resource).values():
                spec = mapping(va.data, "spec")
                node = spec.get("nodeName")
                if isinstance(node, str) and node:
                    by_node.setdefault(node, []).append(spec)
            self._attachments = by_node
        return self._attachments.get(node_name, [])


class CSILimits(PreFilterPlugin, FilterPlugin, SignPlugin):
    """The NodeVolumeLimits plugin (upstream's nodevolumelimits.CSILimits)."""

    name: ClassVar[str] = NAME

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """SignPod: the volumes the pod mounts (signers.go VolumesSigner)."""
        return [(signers.VOLUMES, signers.volumes(pod.proto))]

    def __init__(self, args: Any = None, handle: Handle | None = None) -> None:
        super().__init__(args, handle)
        # randomVolumeIDPrefix: keeps the handles made up for unbound claims
        # apart from real ones.
        self.random_volume_id_prefix = secrets.token_hex(16)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """csi.go, EventsToRegister."""
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.CSI_NODE, ActionType.ADD)),
            ClusterEventWithHint(
                ClusterEvent(EventResource.CSI_NODE, ActionType.UPDATE),
                self.is_schedulable_after_csi_node_updated,
            ),
            ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.DELETE)),
            ClusterEventWithHint(
                ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD),
                self.is_schedulable_after_claim_added,
            ),
            ClusterEventWithHint(ClusterEvent(EventResource.VOLUME_ATTACHMENT, ActionType.DELETE)),
        ]

    def is_schedulable_after_csi_node_updated(
        self, pod: PodInfo, old: ClusterObject, new: ClusterObject
    ) -> QueueingHint:
        """isSchedulableAfterCSINodeUpdated: some driver's allocatable count
        grew."""
        before = _driver_limits(old)
        for name, limit in _driver_limits(new).items():
            if limit > before.get(name, 0):
                return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def is_schedulable_after_claim_added(
        self, pod: PodInfo, old: None, new: ClusterObject
    ) -> QueueingHint:
        """isSchedulableAfterPVCAdded: one of the pod's claims, generic
        ephemeral volumes' included."""
        if claim_of_pod(pod.proto, new, ephemeral=True):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        """Upstream's listers: claims, volumes, classes, CSINodes (the
        SharedCSIManager) and VolumeAttachments."""
        return (
            PERSISTENT_VOLUME_CLAIMS,
            PERSISTENT_VOLUMES,
            STORAGE_CLASSES,
            CSI_NODES,
            VOLUME_ATTACHMENTS,
        )

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        """PreFilter: Skip unless the pod has a claim, a generic ephemeral
        volume or an inline volume of a migratable in-tree plugin."""
        try:
            for v in volumes_of(pod.proto):
                if v.claim_name or v.ephemeral:
                    return None, SUCCESS
                if v.source_json and inline_plugin(inline_source(pod.proto, v)) is not None:
                    return None, SUCCESS
        except ValueError as exc:
            return None, Status.error(str(exc))
        return None, Status.skip()

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Filter: ``node(s) exceed max volume count`` when the pod's new
        volumes would take a driver over the node's limit."""
        return self._filter(_Call(self.handle.snapshot), pod, node)

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        """The batch form: VolumeAttachments are indexed by node once."""
        if not volumes_of(pod.proto):
            return NodeVerdicts.all_pass(len(nodes))
        call = _Call(self.handle.snapshot)
        return NodeVerdicts.from_statuses([self._filter(call, pod, ni) for ni in nodes])

    def _filter(self, call: _Call, pod: PodInfo, node: NodeInfo) -> Status:
        if not volumes_of(pod.proto):
            return SUCCESS
        csinode = csi_node(call.snapshot, node.name)
        if csinode is None:
            log.debug("no CSINode for node %s", node.name)
        try:
            new_volumes: Volumes = {}
            self._attachable_volumes(call.snapshot, pod.proto, csinode, True, new_volumes)
            if not new_volumes:
                return SUCCESS
            limits = volume_limits(csinode)
            if not limits:
                return SUCCESS
            attached: Volumes = {}
            for existing in node.pods.values():
                self._attachable_volumes(call.snapshot, existing.proto, csinode, False, attached)
        except _VolumeError as exc:
            return exc.status
        except ValueError as exc:
            return Status.error(str(exc))

        attached_count: dict[str, int] = {}
        for unique, driver in attached.items():
            # A volume the node's pods already use is not new.
            new_volumes.pop(unique, None)
            attached_count[driver] = attached_count.get(driver, 0) + 1
        for unique, driver in self._node_attachments(call, node.name).items():
            if unique not in attached:
                attached_count[driver] = attached_count.get(driver, 0) + 1

        new_count: dict[str, int] = {}
        for driver in new_volumes.values():
            new_count[driver] = new_count.get(driver, 0) + 1
        for driver, count in new_count.items():
            limit = limits.get(driver)
            if limit is None:
                continue
            current = attached_count.get(driver, 0)
            log.debug(
                "pod %s on node %s: driver %s limit %d, attached %d, new %d",
                pod.key,
                node.name,
                driver,
                limit,
                current,
                count,
            )
            if current + count > limit:
                return _EXCEEDED
        return SUCCESS

    def _node_attachments(self, call: _Call, node_name: str) -> Volumes:
        """getNodeVolumeAttachmentInfo: the CSI volumes attached to the node
        by VolumeAttachments (attacher and PV set, the PV known and CSI)."""
        out: Volumes = {}
        for spec in call.attachments_on(node_name):
            attacher = spec.get("attacher")
            pv_name = mapping(spec, "source").get("persistentVolumeName")
            if not isinstance(attacher, str) or not attacher:
                continue
            if not isinstance(pv_name, str) or not pv_name:
                continue
            pv = persistent_volume(call.snapshot, pv_name)
            if pv is None:
                log.debug("VolumeAttachment on %s: PV %s not found", node_name, pv_name)
                continue
            csi = mapping(mapping(pv.data, "spec"), "csi")
            if not csi:
                continue
            handle = csi.get("volumeHandle")
            out[_unique_name(attacher, handle if isinstance(handle, str) else "")] = attacher
        return out

    def _attachable_volumes(
        self,
        snapshot: Snapshot,
        pod: pb.Pod,
        csinode: ClusterObject | None,
        new_pod: bool,
        result: Volumes,
    ) -> None:
        """filterAttachableVolumes: adds the pod's CSI volumes to ``result``.
        Raises _VolumeError (or ValueError for a malformed inline volume)."""
        for v in volumes_of(pod):
            if v.ephemeral:
                # A generic ephemeral volume uses the claim the API created
                # for it, checked below to belong to the pod.
                claim = ephemeral_claim_name(pod, v)
            elif v.claim_name:
                claim = v.claim_name
            else:
                if v.source_json:
                    self._inline_volume(pod, inline_source(pod, v), v.name, csinode, result)
                continue
            pvc = persistent_volume_claim(snapshot, pod.namespace, claim)
            if pvc is None:
                if new_pod:
                    # The pod cannot run without it.
                    raise _VolumeError(
                        Status.unresolvable(
                            f"looking up PVC {pod.namespace}/{claim}: "
                            + not_found("persistentvolumeclaim", claim)
                        )
                    )
                # No telling which volume a missing claim is: not counted.
                log.debug("pod %s/%s: PVC %s not found", pod.namespace, pod.name, claim)
                continue
            if v.ephemeral and not is_controlled_by(pvc, pod.uid):
                # ephemeral.VolumeIsForPod
                raise _VolumeError(
                    Status.error(
                        f"PVC {pvc.namespace}/{pvc.name} was not created for pod "
                        f"{pod.namespace}/{pod.name} (pod is not owner)"
                    )
                )
            driver, handle = self._csi_driver_info(snapshot, csinode, pvc)
            if not driver or not handle:
                continue
            result[_unique_name(driver, handle)] = driver

    @staticmethod
    def _inline_volume(
        pod: pb.Pod,
        volume: Mapping[str, Any],
        volume_name: str,
        csinode: ClusterObject | None,
        result: Volumes,
    ) -> None:
        """checkAttachableInlineVolume: an inline volume of a migrated
        in-tree plugin counts as its CSI driver's, when the node has a
        CSINode."""
        plugin = inline_plugin(volume)
        if plugin is None:
            return
        if not is_csi_migration_on(csinode is not None, plugin.plugin_name):
            log.debug(
                "pod %s/%s: CSI migration of %s is not on",
                pod.namespace,
                pod.name,
                plugin.plugin_name,
            )
            return
        try:
            handle = inline_volume_handle(plugin, volume)
        except TranslationError as exc:
            raise _VolumeError(
                Status.error(f"converting volume({volume_name}) from inline to csi: {exc}")
            ) from None
        result[_unique_name(plugin.driver_name, handle)] = plugin.driver_name

    def _csi_driver_info(
        self, snapshot: Snapshot, csinode: ClusterObject | None, pvc: ClusterObject
    ) -> tuple[str, str]:
        """getCSIDriverInfo: the driver and volume handle of a claim's PV
        (translated when in-tree and migrated); from the StorageClass when
        the claim is unbound or its PV is missing. ("", "") when it does not
        count."""
        pv_name = mapping(pvc.data, "spec").get("volumeName")
        if not isinstance(pv_name, str) or not pv_name:
            return self._csi_driver_info_from_class(snapshot, csinode, pvc)
        pv = persistent_volume(snapshot, pv_name)
        if pv is None:
            # Deleted, or the claim is pre-bound to a PV not yet created.
            return self._csi_driver_info_from_class(snapshot, csinode, pvc)
        spec = mapping(pv.data, "spec")
        csi = mapping(spec, "csi")
        if csi:
            driver, handle = csi.get("driver"), csi.get("volumeHandle")
            return (
                driver if isinstance(driver, str) else "",
                handle if isinstance(handle, str) else "",
            )
        plugin = pv_plugin(spec)
        if plugin is None or not is_csi_migration_on(csinode is not None, plugin.plugin_name):
            return "", ""
        try:
            return plugin.driver_name, pv_volume_handle(plugin, pv.data)
        except TranslationError as exc:
            log.debug("PV %s does not translate to CSI: %s", pv.name, exc)
            return "", ""

    def _csi_driver_info_from_class(
        self, snapshot: Snapshot, csinode: ClusterObject | None, pvc: ClusterObject
    ) -> tuple[str, str]:
        """getCSIDriverInfoFromSC: the class's provisioner (its CSI driver
        when an in-tree plugin migrated) and a handle made up for the claim,
        so every pod using the claim counts it once."""
        class_name = claim_storage_class(pvc)
        if not class_name:
            # Immediate binding: bound before scheduling, not counted.
            return "", ""
        sc = storage_class(snapshot, class_name)
        if sc is None:
            log.debug("PVC %s/%s: StorageClass %s not found", pvc.namespace, pvc.name, class_name)
            return "", ""
        handle = f"{self.random_volume_id_prefix}-{pvc.namespace}/{pvc.name}"
        provisioner = sc.data.get("provisioner")
        provisioner = provisioner if isinstance(provisioner, str) else ""
        plugin = plugin_by_name(provisioner)
        if plugin is not None:
            if not is_csi_migration_on(csinode is not None, provisioner):
                return "", ""
            return plugin.driver_name, handle
        return provisioner, handle


def _driver_limits(csi_node: ClusterObject) -> dict[str, int]:
    """A CSINode's spec.drivers[].allocatable.count by driver name (0 when
    unset), as isSchedulableAfterCSINodeUpdated reads them; malformed
    entries count 0."""
    out: dict[str, int] = {}
    spec = csi_node.data.get("spec")
    drivers = spec.get("drivers") if isinstance(spec, dict) else None
    for d in drivers if isinstance(drivers, list) else ():
        if not isinstance(d, dict):
            continue
        alloc = d.get("allocatable")
        count = alloc.get("count") if isinstance(alloc, dict) else None
        out[str(d.get("name", ""))] = count if isinstance(count, int) else 0
    return out
