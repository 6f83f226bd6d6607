"""The volume binder: a port of pkg/scheduler/framework/plugins/volumebinding/
binder.go (volumeBinder) over the plugin server's snapshot.

Upstream keeps assume caches of PVs and PVCs in the scheduler process. Berth's
plugin server keeps nothing between calls, so what a pod's Reserve assumes
travels on the caller's assumed copy of that pod (an assume annotation, see
``ASSUMED_ANNOTATION``) and is read back from the snapshot's pods by later
cycles, with upstream's passiveAssumeCache rule: an assumed PV or PVC counts
while the object is still at the resourceVersion it was assumed at; once the
caller ships a newer version (the binding landed, or anything else changed
it), the object as it is wins. Since a pod's user can write the annotation
too, only entries the annotated pod's own Reserve could have written count
(``_reservable``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.csi_translation import (
    TranslationError,
    migrated_plugins,
    migration_on_pv_plugin,
    translated_node_affinity,
)
from berth.framework.goquote import go_quote
from berth.framework.nodeaffinity import SelectorTerm
from berth.framework.objects import ClusterObject, ObjectKind, ObjectWrite
from berth.framework.snapshot import Snapshot
from berth.framework.storage import (
    BETA_STORAGE_CLASS_ANNOTATION,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
    STORAGE_GROUP,
    csi_node,
    ephemeral_claim_name,
    is_controlled_by,
    mapping,
    not_found,
    volumes_of,
)
from berth.plugins.volumebinding.volumes import (
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    CLAIM_LOST,
    NOT_SUPPORTED_PROVISIONER,
    WAIT_FOR_FIRST_CONSUMER,
    Assumed,
    AssumedClaim,
    AssumedVolume,
    AssumedVolumes,
    Claim,
    Volume,
    find_matching_volume,
    label_selector_matches,
    match_topology_selector_terms,
    node_affinity_terms,
    quantity_of,
)

__all__ = [
    "ASSUMED_ANNOTATION",
    "CSI_DRIVERS",
    "CSI_STORAGE_CAPACITIES",
    "ERR_REASON_BIND_CONFLICT",
    "ERR_REASON_NODE_CONFLICT",
    "ERR_REASON_NOT_ENOUGH_SPACE",
    "ERR_REASON_PV_NOT_EXIST",
    "BinderError",
    "Binding",
    "ChosenVolumes",
    "ClaimCheck",
    "DynamicProvision",
    "PodVolumeClaims",
    "PodVolumes",
    "Provisioning",
    "StaticBinding",
    "VolumeBinder",
    "assume_pod_volumes",
    "assumed_in_flight",
    "bind_volume_to_claim",
    "binding_writes",
    "capacity_value",
    "class_resources",
    "describe_writes",
    "encode_assumed",
    "pod_claims",
]

log = logging.getLogger(__name__)

# binder.go, ConflictReason values.
ERR_REASON_BIND_CONFLICT: Final = "node(s) didn't find available persistent volumes to bind"
ERR_REASON_NODE_CONFLICT: Final = "node(s) didn't match PersistentVolume's node affinity"
ERR_REASON_NOT_ENOUGH_SPACE: Final = "node(s) did not have enough free storage"
ERR_REASON_PV_NOT_EXIST: Final = (
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
)

# The kinds beyond those in framework/storage.py that the capacity
# check reads (hasEnoughCapacity): CSI drivers that opt into storage capacity
# tracking, and the capacities they publish.
CSI_DRIVERS: Final = ObjectKind(STORAGE_GROUP, "v1", "csidrivers", "CSIDriver", namespaced=False)
CSI_STORAGE_CAPACITIES: Final = ObjectKind(
    STORAGE_GROUP, "v1", "csistoragecapacities", "CSIStorageCapacity", namespaced=True
)

# The assume annotation Reserve puts on the caller's assumed copy of the pod:
# the PVs it assumed bound and the claims it assumed provisioned on its node
# (JSON, AssumedVolumes). Not written on the real pod: once the binding writes
# land, the objects themselves say it.
ASSUMED_ANNOTATION: Final = "volumebinding.berth.dev/assumed"

_ASSUMED_DECODER = msgspec.json.Decoder(AssumedVolumes)
_ASSUMED_ENCODER = msgspec.json.Encoder()

# Longest assume annotation read. Reserve writes one entry per volume (about
# 150 bytes each); a longer value is no Reserve's and is ignored, so a pod
# annotated by hand costs no cycle more than this to read.
MAX_ASSUMED_TEXT: Final = 16 * 1024


def _decode_assumed(raw: str) -> AssumedVolumes | None:
    """An assume annotation's value, None when it is not one. Every cycle of
    a pod with claims reads every pod's: each distinct value is decoded (and
    logged) once, and a long one is not read at all."""
    if len(raw) > MAX_ASSUMED_TEXT:
        log.debug(
            "VolumeBinding: an annotation %s of %d characters ignored (at most %d are read)",
            ASSUMED_ANNOTATION,
            len(raw),
            MAX_ASSUMED_TEXT,
        )
        return None
    return _decode_short(raw)


# At most 1024 values of at most MAX_ASSUMED_TEXT each (16 MiB) are kept.
@functools.lru_cache(maxsize=1024)
def _decode_short(raw: str) -> AssumedVolumes | None:
    try:
        return _ASSUMED_DECODER.decode(raw)
    except msgspec.DecodeError as exc:
        log.warning(
            "VolumeBinding: an annotation %s does not decode, ignored: %s",
            ASSUMED_ANNOTATION,
            str(exc)[:200],
        )
        return None


class BinderError(Exception):
    """Something the binder cannot work with (upstream returns an error: the
    plugin answers Error, and the pod is retried)."""


@dataclass(frozen=True, slots=True)
class ClaimCheck:
    """podHasPVCs: does the pod use claims, and why it cannot be scheduled
    when one of them is unusable (None when all are usable)."""

    has_claims: bool
    problem: str | None = None


@dataclass(slots=True)
class PodVolumeClaims:
    """GetPodVolumeClaims: the pod's claims, fully bound, unbound with
    delayed binding (WaitForFirstConsumer, not pre-bound) and unbound that
    should have been bound already (Immediate, or pre-bound to a PV)."""

    bound: list[Claim] = field(default_factory=list)
    delay: list[Claim] = field(default_factory=list)
    immediate: list[Claim] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Binding:
    """BindingInfo: a claim and the PV chosen for it."""

    claim: Claim
    volume: Volume


@dataclass(frozen=True, slots=True)
class Provisioning:
    """DynamicProvision: a claim to provision on the node, and the
    CSIStorageCapacity that showed room for it (None when not checked)."""

    claim: Claim
    capacity: ClusterObject | None = None


@dataclass(slots=True)
class PodVolumes:
    """What a node needs done for the pod's claims (upstream's PodVolumes),
    and the reasons the node does not fit (ConflictReasons)."""

    static_bindings: list[Binding] = field(default_factory=list)
    dynamic_provisions: list[Provisioning] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


def pod_claims(pod: pb.Pod) -> list[tuple[str, bool]]:
    """The pod's claims in spec.volumes order: (claim name, generic
    ephemeral?). Other volumes are not claims."""
    out: list[tuple[str, bool]] = []
    for v in volumes_of(pod):
        if v.ephemeral:
            out.append((ephemeral_claim_name(pod, v), True))
        elif v.claim_name:
            out.append((v.claim_name, False))
    return out


def assumed_in_flight(snapshot: Snapshot, exclude_uid: str = "") -> Assumed:
    """What the Reserve of pods in flight assumed: the assume annotations of
    the snapshot's pods on a node (the caller's assumed copies). A value that
    does not decode, or is longer than MAX_ASSUMED_TEXT, is ignored (logged
    once per value).

    The annotation is data on a pod, and whoever may edit a pod may write it
    (``kubectl annotate`` on a bound pod of theirs): only entries that the
    annotated pod's own Reserve could have written count (``_reservable``),
    so a hand-written one reserves nothing its author could not take anyway
    by binding their own claims. Pods are read in uid order and the first
    entry for a PV, or for a claim, wins, so every replica reads alike and a
    PV or claim is never counted twice."""
    annotated: list[tuple[str, pb.Pod, AssumedVolumes]] = []
    for info in snapshot.pods.values():
        pod = info.proto
        raw = pod.annotations.get(ASSUMED_ANNOTATION)
        if raw is None or pod.uid == exclude_uid or not pod.node_name:
            continue
        value = _decode_assumed(raw)
        if value is not None:
            annotated.append((pod.uid, pod, value))
    out = Assumed()
    claims_with_volume: set[tuple[str, str]] = set()
    for _uid, pod, value in sorted(annotated, key=lambda a: a[0]):
        out.add(_reservable(snapshot, pod, value, out, claims_with_volume))
    return out


def _reservable(
    snapshot: Snapshot,
    pod: pb.Pod,
    value: AssumedVolumes,
    taken: Assumed,
    claims_with_volume: set[tuple[str, str]],
) -> AssumedVolumes:
    """The entries of ``pod``'s assume annotation that its own Reserve
    (assume_pod_volumes) could have written, not already taken by an
    earlier pod's; the rest are dropped (logged at debug).

    * A claim entry names one of the pod's own claims (its namespace, its
      spec.volumes) and the node the pod is on: Reserve assumes provisioning
      only for the pod's claims, on the node chosen for it.
    * A PV entry names one of the pod's own claims, that claim as the
      snapshot has it (its uid) and still without spec.volumeName (Reserve
      binds only claims waiting for their first consumer), and a PV that
      FindMatchingVolume for that claim on the pod's node accepts as the API
      shows it: Available and unclaimed, or pre-bound to that very claim, of
      the claim's class, size, modes and selector, fitting the node. A PV the
      API shows bound to another claim is not taken a second time. At most
      one PV per claim, as Reserve chooses one.

    What a pod's user could assume this way, they could as well take by
    pre-binding their claim to the PV (spec.volumeName, which the PV
    controller honours for a PV that satisfies the claim: pkg/controller/
    volume/persistentvolume/pv_controller.go syncUnboundClaim,
    checkVolumeSatisfyClaim, a subset of the checks here); upstream keeps
    assumptions in the scheduler's memory (assume_cache.go), where no user
    writes."""
    own = {name for name, _ephemeral in pod_claims(pod)}
    namespace = pod.namespace
    claims = tuple(
        c
        for c in value.claims
        if c.namespace == namespace
        and c.name in own
        and c.node == pod.node_name
        and (c.namespace, c.name) not in taken.claims
    )
    ni = snapshot.nodes.get(pod.node_name)
    labels: Mapping[str, str] = ni.node.labels if ni is not None else {}
    volumes: list[AssumedVolume] = []
    for v in value.volumes:
        key = (v.claim_namespace, v.claim_name)
        if (
            ni is not None
            and v.claim_namespace == namespace
            and v.claim_name in own
            and key not in claims_with_volume
            and v.name not in taken.volumes
            and _could_reserve(snapshot, v, labels)
        ):
            claims_with_volume.add(key)
            volumes.append(v)
    dropped = len(value.claims) - len(claims) + len(value.volumes) - len(volumes)
    if dropped:
        log.debug(
            "VolumeBinding: %d entries of pod %s/%s's annotation %s ignored "
            "(not its claims, not what its Reserve could assume, or assumed already)",
            dropped,
            namespace,
            pod.name,
            ASSUMED_ANNOTATION,
        )
    return AssumedVolumes(volumes=tuple(volumes), claims=claims)


def _could_reserve(snapshot: Snapshot, entry: AssumedVolume, labels: Mapping[str, str]) -> bool:
    """Could a Reserve on the node with ``labels`` have assumed the PV of
    ``entry`` for its claim? Objects as the API shows them, no assumption
    applied."""
    volume_obj = snapshot.object("", PERSISTENT_VOLUMES.resource, "", entry.name)
    if volume_obj is None or volume_obj.metadata.get("resourceVersion") != entry.resource_version:
        # Not honoured in any case (passiveAssumeCache), nothing to check.
        return False
    claim_obj = snapshot.object(
        "", PERSISTENT_VOLUME_CLAIMS.resource, entry.claim_namespace, entry.claim_name
    )
    if claim_obj is None:
        return False
    try:
        claim = Claim(claim_obj)
        if claim.uid != entry.claim_uid or claim.volume_name:
            return False
        volume = Volume(volume_obj)
        return find_matching_volume(claim, (volume,), labels, set()) is volume
    except ValueError:
        return False


def encode_assumed(value: AssumedVolumes) -> str:
    return _ASSUMED_ENCODER.encode(value).decode()


class VolumeBinder:
    """The binder over one snapshot, for one pod's cycle."""

    def __init__(self, snapshot: Snapshot, pod: pb.Pod) -> None:
        self.snapshot = snapshot
        self.pod = pod
        self._assumed: Assumed | None = None
        self._volumes_by_class: dict[str, list[Volume]] | None = None
        self._bound_volumes: dict[str, Volume | None] = {}
        self._capacities: dict[str, list[tuple[ClusterObject, int | None]]] | None = None
        # (PV, plugins migrated on the node) -> the translated node affinity.
        self._translated: dict[tuple[str, frozenset[str]], tuple[SelectorTerm, ...] | None] = {}

    # -- reading objects ----------------------------------------------------------

    def _claim_object(self, name: str) -> ClusterObject | None:
        return self.snapshot.object("", PERSISTENT_VOLUME_CLAIMS.resource, self.pod.namespace, name)

    @property
    def assumed(self) -> Assumed:
        if self._assumed is None:
            self._assumed = assumed_in_flight(self.snapshot, self.pod.uid)
        return self._assumed

    def claim(self, name: str, *, assumed: bool = False) -> Claim:
        """The pod's claim ``name`` (with assumptions in flight applied when
        ``assumed``); BinderError when the snapshot lacks it."""
        obj = self._claim_object(name)
        if obj is None:
            key = f"{self.pod.namespace}/{name}"
            raise BinderError(
                f"error getting PVC {go_quote(key)}: {not_found('persistentvolumeclaims', key)}"
            )
        try:
            return Claim(obj, self.assumed if assumed else None)
        except ValueError as exc:
            raise BinderError(str(exc)) from None

    def storage_class(self, name: str) -> Mapping[str, Any] | None:
        obj = self.snapshot.object(STORAGE_GROUP, STORAGE_CLASSES.resource, "", name)
        return None if obj is None else obj.data

    # -- PreFilter -----------------------------------------------------------------

    def check_claims(self) -> ClaimCheck:
        """VolumeBinding.podHasPVCs: every claim exists, is not lost, not
        being deleted, and a generic ephemeral volume's claim was made for
        this pod."""
        claims = pod_claims(self.pod)
        if not claims:
            return ClaimCheck(False)
        for name, ephemeral in claims:
            obj = self._claim_object(name)
            if obj is None:
                if ephemeral:
                    # Normal right after the pod was created.
                    return ClaimCheck(
                        True,
                        "waiting for ephemeral volume controller to create the "
                        f"persistentvolumeclaim {go_quote(name)}",
                    )
                return ClaimCheck(True, not_found("persistentvolumeclaim", name))
            status = mapping(obj.data, "status")
            if status.get("phase") == CLAIM_LOST:
                volume = mapping(obj.data, "spec").get("volumeName") or ""
                return ClaimCheck(
                    True,
                    f"persistentvolumeclaim {go_quote(name)} bound to non-existent "
                    f"persistentvolume {go_quote(str(volume))}",
                )
            if obj.metadata.get("deletionTimestamp"):
                return ClaimCheck(True, f"persistentvolumeclaim {go_quote(name)} is being deleted")
            if ephemeral and not self._owned(obj):
                return ClaimCheck(True, self._not_owner(obj))
        return ClaimCheck(True)

    def _owned(self, obj: ClusterObject) -> bool:
        """ephemeral.VolumeIsForPod."""
        return obj.namespace == self.pod.namespace and is_controlled_by(obj, self.pod.uid)

    def _not_owner(self, obj: ClusterObject) -> str:
        return (
            f"PVC {obj.namespace}/{obj.name} was not created for pod "
            f"{self.pod.namespace}/{self.pod.name} (pod is not owner)"
        )

    def is_delay_binding_mode(self, claim: Claim) -> bool:
        """IsDelayBindingMode: the claim's class exists and binds at the
        first consumer. A class without volumeBindingMode is an error."""
        name = claim.storage_class
        if not name:
            return False
        sc = self.storage_class(name)
        if sc is None:
            return False
        mode = sc.get("volumeBindingMode")
        if not isinstance(mode, str):
            raise BinderError(f"VolumeBindingMode not set for StorageClass {go_quote(name)}")
        return mode == WAIT_FOR_FIRST_CONSUMER

    def get_pod_volume_claims(self) -> PodVolumeClaims:
        """GetPodVolumeClaims (isVolumeBound over spec.volumes): each claim
        sorted into bound, delayed or immediate."""
        out = PodVolumeClaims()
        for name, ephemeral in pod_claims(self.pod):
            # Assumptions in flight only add a selected node: they change
            # nothing here, so the pods are not scanned for them.
            claim = self.claim(name)
            if ephemeral and not self._owned(claim.obj):
                raise BinderError(self._not_owner(claim.obj))
            if claim.fully_bound():
                out.bound.append(claim)
            elif self.is_delay_binding_mode(claim) and not claim.volume_name:
                out.delay.append(claim)
            else:
                # Prebound claims are treated as unbound immediate binding.
                out.immediate.append(claim)
        return out

    def are_pod_volumes_bound(self) -> bool:
        """arePodVolumesBound: every claim of the pod is fully bound."""
        for name, _ephemeral in pod_claims(self.pod):
            obj = self._claim_object(name)
            if obj is None:
                return False
            try:
                if not Claim(obj).fully_bound():
                    return False
            except ValueError:
                return False
        return True

    # -- Filter -----------------------------------------------------------------------

    def volumes_of_class(self, storage_class: str) -> list[Volume]:
        """PVAssumeCache.ListPVs: the PVs of a class (GetPersistentVolumeClass
        of the object as stored), assumptions in flight applied, in name
        order so every replica chooses alike."""
        if self._volumes_by_class is None:
            self._volumes_by_class = {}
        found = self._volumes_by_class.get(storage_class)
        if found is not None:
            return found
        out: list[Volume] = []
        objects = self.snapshot.objects("", PERSISTENT_VOLUMES.resource)
        for key in sorted(objects):
            obj = objects[key]
            if _volume_class(obj) != storage_class:
                continue
            try:
                out.append(Volume(obj, self.assumed))
            except ValueError as exc:
                log.warning("VolumeBinding: %s, left out", exc)
        self._volumes_by_class[storage_class] = out
        return out

    def _bound_volume(self, name: str) -> Volume | None:
        if name not in self._bound_volumes:
            obj = self.snapshot.object("", PERSISTENT_VOLUMES.resource, "", name)
            try:
                self._bound_volumes[name] = None if obj is None else Volume(obj)
            except ValueError as exc:
                raise BinderError(str(exc)) from None
        return self._bound_volumes[name]

    def _node_affinity_fits(
        self, volume: Volume, node_name: str, labels: Mapping[str, str]
    ) -> bool:
        """CheckNodeAffinity on the PV as tryTranslatePVToCSI leaves it for
        the node (in-tree PVs whose plugin the node's CSINode lists as
        migrated get their zone topology under the CSI driver's key)."""
        spec = mapping(volume.obj.data, "spec")
        if migration_on_pv_plugin(spec) is not None:
            migrated = migrated_plugins(self._csi_node(node_name))
            if migrated:
                key = (volume.name, migrated)
                if key not in self._translated:
                    try:
                        affinity = translated_node_affinity(volume.obj.data, migrated)
                    except TranslationError as exc:
                        raise BinderError(f"could not translate pv: {exc}") from None
                    self._translated[key] = node_affinity_terms(affinity)
                terms = self._translated[key]
                return terms is None or any(t.matches(labels, "") for t in terms)
        return volume.check_node_affinity(labels)

    def _csi_node(self, node_name: str) -> Mapping[str, Any] | None:
        obj = csi_node(self.snapshot, node_name)
        return None if obj is None else obj.data

    def check_bound_claims(
        self, claims: Sequence[Claim], node_name: str, labels: Mapping[str, str]
    ) -> tuple[bool, bool]:
        """checkBoundClaims: (every bound PV fits the node, every bound PV
        exists); the first PV that is missing or does not fit decides."""
        for claim in claims:
            volume = self._bound_volume(claim.volume_name)
            if volume is None:
                return True, False
            if not self._node_affinity_fits(volume, node_name, labels):
                log.debug(
                    "VolumeBinding: PV %s does not fit node %s for pod %s/%s",
                    volume.name,
                    node_name,
                    self.pod.namespace,
                    self.pod.name,
                )
                return False, True
        return True, True

    def find_matching_volumes(
        self, claims: Sequence[Claim], labels: Mapping[str, str]
    ) -> tuple[bool, list[Binding], list[Claim]]:
        """findMatchingVolumes: claims in increasing size each take the
        smallest fitting PV not taken by the pod's other claims; (all found,
        bindings, claims left for provisioning)."""
        chosen: set[str] = set()
        bindings: list[Binding] = []
        unbound: list[Claim] = []
        found_all = True
        for claim in sorted(claims, key=lambda c: c.request_exact):
            try:
                volume = find_matching_volume(
                    claim, self.volumes_of_class(claim.storage_class), labels, chosen
                )
            except ValueError as exc:
                raise BinderError(str(exc)) from None
            if volume is None:
                unbound.append(claim)
                found_all = False
                continue
            chosen.add(volume.name)
            bindings.append(Binding(claim, volume))
        return found_all, bindings, unbound

    def check_volume_provisions(
        self, claims: Sequence[Claim], labels: Mapping[str, str]
    ) -> tuple[bool, bool, list[Provisioning]]:
        """checkVolumeProvisions: (every claim can be provisioned here,
        there is storage for it, the provisions); the first claim that
        cannot decides."""
        provisions: list[Provisioning] = []
        for claim in claims:
            class_name = claim.storage_class
            if not class_name:
                raise BinderError(f"no class for claim {go_quote(claim.key)}")
            sc = self.storage_class(class_name)
            if sc is None:
                raise BinderError(f"failed to find storage class {go_quote(class_name)}")
            provisioner = sc.get("provisioner")
            if not isinstance(provisioner, str) or provisioner in ("", NOT_SUPPORTED_PROVISIONER):
                return False, True, []
            if not match_topology_selector_terms(sc.get("allowedTopologies"), labels):
                return False, True, []
            sufficient, capacity = self.has_enough_capacity(provisioner, claim, labels)
            if not sufficient:
                return True, False, []
            provisions.append(Provisioning(claim, capacity))
        return True, True, provisions

    def _capacities_of(self, storage_class: str) -> list[tuple[ClusterObject, int | None]]:
        """The CSIStorageCapacities of a class with their volumeLimit
        (maximumVolumeSize, else capacity; None when neither), in
        (namespace, name) order."""
        if self._capacities is None:
            grouped: dict[str, list[tuple[ClusterObject, int | None]]] = {}
            objects = self.snapshot.objects(STORAGE_GROUP, CSI_STORAGE_CAPACITIES.resource)
            for key in sorted(objects):
                obj = objects[key]
                class_name = obj.data.get("storageClassName")
                if isinstance(class_name, str):
                    grouped.setdefault(class_name, []).append((obj, _volume_limit(obj)))
            self._capacities = grouped
        return self._capacities.get(storage_class, [])

    def has_enough_capacity(
        self, provisioner: str, claim: Claim, labels: Mapping[str, str]
    ) -> tuple[bool, ClusterObject | None]:
        """hasEnoughCapacity: only for a CSI driver that opts into storage
        capacity tracking, and only for a claim with a storage request: some
        CSIStorageCapacity of the claim's class, reachable from the node,
        has a volume limit of at least the request."""
        if claim.request is None:
            return True, None
        driver = self.snapshot.object(STORAGE_GROUP, CSI_DRIVERS.resource, "", provisioner)
        if driver is None:
            return True, None
        if mapping(driver.data, "spec").get("storageCapacity") is not True:
            return True, None
        size = claim.request_value
        for capacity, limit in self._capacities_of(claim.storage_class):
            if limit is None or limit < size:
                continue
            topology = capacity.data.get("nodeTopology")
            if topology is None:
                continue
            if label_selector_matches(topology, labels):
                return True, capacity
        log.debug(
            "VolumeBinding: no CSIStorageCapacity with room for %s (%d bytes, class %s)",
            claim.key,
            size,
            claim.storage_class,
        )
        return False, None

    def find_pod_volumes(
        self, claims: PodVolumeClaims, node_name: str, labels: Mapping[str, str]
    ) -> PodVolumes:
        """FindPodVolumes: the PVs to bind and the claims to provision for
        the pod on this node, or the reasons it does not fit. BinderError
        for what upstream returns as an error."""
        out = PodVolumes()
        bound_ok = unbound_ok = enough_storage = pvs_found = True
        if claims.bound:
            bound_ok, pvs_found = self.check_bound_claims(claims.bound, node_name, labels)
        if claims.delay:
            to_match: list[Claim] = []
            to_provision: list[Claim] = []
            fast_fail = False
            for claim in claims.delay:
                selected = claim.selected_node()
                if selected is not None:
                    if selected != node_name:
                        # Being provisioned for another node.
                        unbound_ok = False
                        fast_fail = True
                        break
                    to_provision.append(claim)
                else:
                    to_match.append(claim)
            if not fast_fail:
                if to_match:
                    unbound_ok, out.static_bindings, unbound = self.find_matching_volumes(
                        to_match, labels
                    )
                    to_provision += unbound
                if to_provision:
                    unbound_ok, enough_storage, out.dynamic_provisions = (
                        self.check_volume_provisions(to_provision, labels)
                    )
        if not bound_ok:
            out.reasons.append(ERR_REASON_NODE_CONFLICT)
        if not unbound_ok:
            out.reasons.append(ERR_REASON_BIND_CONFLICT)
        if not enough_storage:
            out.reasons.append(ERR_REASON_NOT_ENOUGH_SPACE)
        if not pvs_found:
            out.reasons.append(ERR_REASON_PV_NOT_EXIST)
        return out


def _volume_class(obj: ClusterObject) -> str:
    """GetPersistentVolumeClass without building the record."""
    annotations = obj.annotations
    if BETA_STORAGE_CLASS_ANNOTATION in annotations:
        return str(annotations[BETA_STORAGE_CLASS_ANNOTATION])
    name = mapping(obj.data, "spec").get("storageClassName")
    return name if isinstance(name, str) else ""


def _volume_limit(capacity: ClusterObject) -> int | None:
    """volumeLimit: maximumVolumeSize when set (more precise), else
    capacity; as Quantity.Value. None when neither is set or parses."""
    data = capacity.data
    for name in ("maximumVolumeSize", "capacity"):
        if data.get(name) is None:
            continue
        try:
            q = quantity_of(data, name, f"csistoragecapacity {capacity.namespace}/{capacity.name}")
        except ValueError as exc:
            log.warning("VolumeBinding: %s", exc)
            return None
        return None if q is None else -((-q.numerator) // q.denominator)
    return None


def capacity_value(capacity: ClusterObject) -> int:
    """A CSIStorageCapacity's ``capacity`` as Quantity.Value (0 when unset)."""
    try:
        q = quantity_of(capacity.data, "capacity", "csistoragecapacity")
    except ValueError:
        return 0
    return 0 if q is None else -((-q.numerator) // q.denominator)


# -- Reserve and PreBind -------------------------------------------------------------


class StaticBinding(msgspec.Struct, frozen=True, array_like=True):
    """A PV to bind to a claim, as Reserve assumed it and PreBind writes it
    (GetBindVolumeToClaim)."""

    volume: str
    volume_version: str
    claim: str
    claim_uid: str
    claim_version: str
    # The claimRef must be (re)written: it is unset or names another claim
    # or uid.
    set_claim_ref: bool
    # pv.kubernetes.io/bound-by-controller must be added.
    set_bound_by_controller: bool

    @property
    def dirty(self) -> bool:
        return self.set_claim_ref or self.set_bound_by_controller


class DynamicProvision(msgspec.Struct, frozen=True, array_like=True):
    """A claim to provision on the chosen node (its selected-node
    annotation), as Reserve assumed it and PreBind writes it."""

    claim: str
    claim_version: str


class ChosenVolumes(msgspec.Struct, frozen=True):
    """Reserve's outcome, read by PreBind (upstream's stateData.allBound and
    podVolumesByNode[node] after AssumePodVolumes)."""

    node: str
    all_bound: bool
    static_bindings: tuple[StaticBinding, ...] = ()
    dynamic_provisions: tuple[DynamicProvision, ...] = ()


def bind_volume_to_claim(volume: Volume, claim: Claim) -> StaticBinding:
    """GetBindVolumeToClaim: set the claimRef unless it already names the
    claim with its uid; add bound-by-controller unless the PV was already
    bound to the claim (by a user) or has it."""
    ref = volume.claim_ref
    set_claim_ref = (
        ref is None
        or ref.name != claim.name
        or ref.namespace != claim.namespace
        or ref.uid != claim.uid
    )
    set_bbc = not volume.bound_to(claim) and ANN_BOUND_BY_CONTROLLER not in volume.annotations
    return StaticBinding(
        volume.name,
        volume.resource_version,
        claim.name,
        claim.uid,
        claim.resource_version,
        set_claim_ref,
        set_bbc,
    )


def assume_pod_volumes(
    binder: VolumeBinder, node: str, volumes: PodVolumes
) -> tuple[ChosenVolumes, AssumedVolumes]:
    """AssumePodVolumes: nothing to do when every claim is fully bound;
    else each chosen PV bound to its claim and each claim to provision
    given the node, and the assumptions later cycles must see."""
    if binder.are_pod_volumes_bound():
        return ChosenVolumes(node, True), AssumedVolumes()
    namespace = binder.pod.namespace
    static = tuple(bind_volume_to_claim(b.volume, b.claim) for b in volumes.static_bindings)
    dynamic = tuple(
        DynamicProvision(p.claim.name, p.claim.resource_version) for p in volumes.dynamic_provisions
    )
    assumed = AssumedVolumes(
        volumes=tuple(
            AssumedVolume(s.volume, s.volume_version, namespace, s.claim, s.claim_uid)
            for s in static
            if s.dirty
        ),
        claims=tuple(AssumedClaim(namespace, d.claim, d.claim_version, node) for d in dynamic),
    )
    return ChosenVolumes(node, False, static, dynamic), assumed


def binding_writes(namespace: str, chosen: ChosenVolumes) -> list[ObjectWrite]:
    """bindAPIUpdate as merge patches: each PV with its claimRef (and the
    bound-by-controller annotation) first, then each claim to provision with
    the selected-node annotation. Each patch carries the resourceVersion the
    decision was made on, so the API server refuses it (409 Conflict) when
    the object changed meanwhile, as upstream's Update does."""
    writes: list[ObjectWrite] = []
    for s in chosen.static_bindings:
        meta: dict[str, Any] = {}
        if s.volume_version:
            meta["resourceVersion"] = s.volume_version
        if s.set_bound_by_controller:
            meta["annotations"] = {ANN_BOUND_BY_CONTROLLER: "yes"}
        patch: dict[str, Any] = {"metadata": meta} if meta else {}
        if s.set_claim_ref:
            # reference.GetReference of the claim.
            ref: dict[str, Any] = {
                "kind": PERSISTENT_VOLUME_CLAIMS.kind,
                "apiVersion": PERSISTENT_VOLUME_CLAIMS.version,
                "namespace": namespace,
                "name": s.claim,
                "uid": s.claim_uid or None,
                "resourceVersion": s.claim_version or None,
                "fieldPath": None,
            }
            patch["spec"] = {"claimRef": ref}
        writes.append(ObjectWrite("", "v1", PERSISTENT_VOLUMES.resource, "", s.volume, patch))
    for d in chosen.dynamic_provisions:
        meta = {"annotations": {ANN_SELECTED_NODE: chosen.node}}
        if d.claim_version:
            meta["resourceVersion"] = d.claim_version
        writes.append(
            ObjectWrite(
                "", "v1", PERSISTENT_VOLUME_CLAIMS.resource, namespace, d.claim, {"metadata": meta}
            )
        )
    return writes


def class_resources(volumes: PodVolumes, *, capacity_scoring: bool) -> dict[str, tuple[int, int]]:
    """VolumeBinding.Score's classResources: requested and capacity per
    storage class, from the static bindings (PV capacity summed) when there
    are any, else from the dynamic provisions with a known node capacity
    (the class's capacity on the node taken once)."""
    out: dict[str, tuple[int, int]] = {}
    if volumes.static_bindings or not capacity_scoring:
        for b in volumes.static_bindings:
            req, cap = out.get(b.volume.storage_class_name, (0, 0))
            out[b.volume.storage_class_name] = (
                req + b.claim.request_value,
                cap + b.volume.capacity_value,
            )
        return out
    for p in volumes.dynamic_provisions:
        if p.capacity is None:
            continue
        class_name = p.claim.storage_class_name
        req, _cap = out.get(class_name, (0, 0))
        out[class_name] = (req + p.claim.request_value, capacity_value(p.capacity))
    return out


def describe_writes(writes: Iterable[ObjectWrite]) -> str:
    return ", ".join(
        f"{w.resource} {w.namespace + '/' if w.namespace else ''}{w.name}" for w in writes
    )
