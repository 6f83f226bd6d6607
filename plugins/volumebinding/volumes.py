"""PersistentVolumes, PersistentVolumeClaims and storage classes as the
VolumeBinding plugin reads them from the snapshot, and the matching rules of
component-helpers storage/volume (helpers.go, pv_helpers.go):
GetPersistentVolumeClaimClass, GetPersistentVolumeClass, CheckNodeAffinity,
IsDelayBindingMode, IsVolumeBoundToClaim, GetBindVolumeToClaim,
FindMatchingVolume, CheckVolumeModeMismatches, CheckAccessModes; and of
pkg/apis/core/v1/helper, MatchTopologySelectorTerms.

Objects are read from their JSON as the API server serves it (defaults
applied). Each record keeps only what the binder reads, parsed once per call.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

import msgspec

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.labels import Selector, SelectorError, selector_from_json
from berth.framework.nodeaffinity import (
    SelectorTerm,
    compile_node_selector,
    selector_matches,
)
from berth.framework.objects import ClusterObject
from berth.framework.storage import BETA_STORAGE_CLASS_ANNOTATION, mapping
from berth.framework.units import QuantityError, parse_quantity

__all__ = [
    "ANN_BIND_COMPLETED",
    "ANN_BOUND_BY_CONTROLLER",
    "ANN_SELECTED_NODE",
    "NOT_SUPPORTED_PROVISIONER",
    "WAIT_FOR_FIRST_CONSUMER",
    "Assumed",
    "AssumedClaim",
    "AssumedVolume",
    "AssumedVolumes",
    "Claim",
    "ClaimRef",
    "Volume",
    "check_access_modes",
    "find_matching_volume",
    "match_topology_selector_terms",
    "node_affinity_terms",
    "quantity_of",
]

log = logging.getLogger(__name__)

# component-helpers storage/volume/pv_helpers.go.
ANN_BIND_COMPLETED: Final = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER: Final = "pv.kubernetes.io/bound-by-controller"
ANN_SELECTED_NODE: Final = "volume.kubernetes.io/selected-node"
NOT_SUPPORTED_PROVISIONER: Final = "kubernetes.io/no-provisioner"

# k8s.io/api values.
WAIT_FOR_FIRST_CONSUMER: Final = "WaitForFirstConsumer"
VOLUME_AVAILABLE: Final = "Available"
CLAIM_LOST: Final = "Lost"
FILESYSTEM: Final = "Filesystem"
STORAGE: Final = "storage"

_ZERO: Final = Fraction(0)


def quantity_of(resources: Mapping[str, Any], name: str, where: str) -> Fraction | None:
    """The exact quantity ``resources[name]``, None when absent; ValueError
    naming ``where`` when it does not parse."""
    raw = resources.get(name)
    if raw is None:
        return None
    try:
        return parse_quantity(str(raw)).exact
    except QuantityError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _value(q: Fraction) -> int:
    """resource.Quantity.Value: rounded up to an integer."""
    return -((-q.numerator) // q.denominator)


def _str(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    return value if isinstance(value, str) else ""


def _strings(obj: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = obj.get(key)
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, str))


# -- what other pods' Reserve assumed ---------------------------------------------


class AssumedVolume(msgspec.Struct, frozen=True, rename="camel"):
    """A PV another pod's Reserve assumed bound to its claim (upstream's
    pvCache.Assume): honoured while the PV is still at ``resource_version``."""

    name: str
    resource_version: str
    claim_namespace: str
    claim_name: str
    claim_uid: str


class AssumedClaim(msgspec.Struct, frozen=True, rename="camel"):
    """A claim another pod's Reserve assumed to be provisioned on ``node``
    (pvcCache.Assume of the claim with the selected-node annotation):
    honoured while the claim is still at ``resource_version``."""

    namespace: str
    name: str
    resource_version: str
    node: str


class AssumedVolumes(msgspec.Struct, frozen=True, rename="camel"):
    """The assume annotation's value (JSON)."""

    volumes: tuple[AssumedVolume, ...] = ()
    claims: tuple[AssumedClaim, ...] = ()


@dataclass(slots=True)
class Assumed:
    """Every assumption in flight, from the pods the snapshot holds: PV name
    to its assumed binding, (namespace, claim) to its assumed node."""

    volumes: dict[str, AssumedVolume] = field(default_factory=dict)
    claims: dict[tuple[str, str], AssumedClaim] = field(default_factory=dict)

    def add(self, value: AssumedVolumes) -> None:
        for v in value.volumes:
            self.volumes[v.name] = v
        for c in value.claims:
            self.claims[(c.namespace, c.name)] = c


# -- records -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """The parts of a PV's spec.claimRef that binding reads."""

    namespace: str
    name: str
    uid: str


class Claim:
    """A PersistentVolumeClaim (with another pod's assumed selected node
    applied, as upstream's pvcCache.Get returns the assumed object)."""

    __slots__ = (
        "access_modes",
        "annotations",
        "deleting",
        "has_class",
        "name",
        "namespace",
        "obj",
        "phase",
        "request",
        "resource_version",
        "selector",
        "storage_class",
        "storage_class_name",
        "uid",
        "volume_attributes_class",
        "volume_mode",
        "volume_name",
    )

    def __init__(self, obj: ClusterObject, assumed: Assumed | None = None) -> None:
        data = obj.data
        meta = obj.metadata
        spec = mapping(data, "spec")
        self.obj = obj
        self.namespace = obj.namespace
        self.name = obj.name
        self.uid = _str(meta, "uid")
        self.resource_version = _str(meta, "resourceVersion")
        annotations = dict(obj.annotations)
        if assumed is not None:
            a = assumed.claims.get((obj.namespace, obj.name))
            if a is not None and a.resource_version == self.resource_version:
                annotations[ANN_SELECTED_NODE] = a.node
        self.annotations: Mapping[str, str] = annotations
        self.deleting = bool(meta.get("deletionTimestamp"))
        # spec.storageClassName as written (the pointer; "" when unset), and
        # GetPersistentVolumeClaimClass (the beta annotation first).
        raw_class = spec.get("storageClassName")
        self.storage_class_name = raw_class if isinstance(raw_class, str) else ""
        if BETA_STORAGE_CLASS_ANNOTATION in annotations:
            self.storage_class = str(annotations[BETA_STORAGE_CLASS_ANNOTATION])
            self.has_class = True
        else:
            self.storage_class = self.storage_class_name
            self.has_class = isinstance(raw_class, str)
        self.volume_name = _str(spec, "volumeName")
        self.phase = _str(mapping(data, "status"), "phase")
        requests = mapping(mapping(spec, "resources"), "requests")
        self.request = quantity_of(
            requests, STORAGE, f"{self.key}: spec.resources.requests.storage"
        )
        self.access_modes = _strings(spec, "accessModes")
        self.volume_mode = _str(spec, "volumeMode") or FILESYSTEM
        selector = spec.get("selector")
        self.selector: Mapping[str, Any] | None = selector if isinstance(selector, dict) else None
        self.volume_attributes_class = _str(spec, "volumeAttributesClassName")

    @property
    def key(self) -> str:
        """getPVCName: ``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @property
    def request_exact(self) -> Fraction:
        """spec.resources.requests.storage, 0 when absent."""
        return self.request if self.request is not None else _ZERO

    @property
    def request_value(self) -> int:
        return _value(self.request_exact)

    def fully_bound(self) -> bool:
        """isPVCFullyBound: a volume name and the bind-completed annotation."""
        return bool(self.volume_name) and ANN_BIND_COMPLETED in self.annotations

    def selected_node(self) -> str | None:
        """The selected-node annotation (None when absent)."""
        return self.annotations.get(ANN_SELECTED_NODE)

    def label_selector(self) -> Selector | None:
        """spec.selector as a selector, None when unset; ValueError as
        FindMatchingVolume words it when it does not parse."""
        if self.selector is None:
            return None
        try:
            return selector_from_json(self.selector, "spec.selector")
        except SelectorError as exc:
            raise ValueError(
                f"error creating internal label selector for claim: {self.key}: {exc}"
            ) from None

    def __repr__(self) -> str:
        return f"Claim({self.key})"


class Volume:
    """A PersistentVolume (with another pod's assumed binding applied, as
    upstream's pvCache returns the assumed object)."""

    __slots__ = (
        "_parsed",
        "_terms",
        "access_modes",
        "annotations",
        "assumed",
        "capacity",
        "claim_ref",
        "deleting",
        "labels",
        "name",
        "obj",
        "phase",
        "resource_version",
        "storage_class",
        "storage_class_name",
        "volume_attributes_class",
        "volume_mode",
    )

    def __init__(self, obj: ClusterObject, assumed: Assumed | None = None) -> None:
        data = obj.data
        meta = obj.metadata
        spec = mapping(data, "spec")
        self.obj = obj
        self.name = obj.name
        self.resource_version = _str(meta, "resourceVersion")
        self.labels: Mapping[str, str] = obj.labels
        annotations = obj.annotations
        self.deleting = bool(meta.get("deletionTimestamp"))
        # spec.storageClassName, and GetPersistentVolumeClass (the beta
        # annotation first).
        self.storage_class_name = _str(spec, "storageClassName")
        if BETA_STORAGE_CLASS_ANNOTATION in annotations:
            self.storage_class = str(annotations[BETA_STORAGE_CLASS_ANNOTATION])
        else:
            self.storage_class = self.storage_class_name
        capacity = quantity_of(
            mapping(spec, "capacity"), STORAGE, f"persistentvolume {self.name}: spec.capacity"
        )
        self.capacity = capacity if capacity is not None else _ZERO
        self.volume_mode = _str(spec, "volumeMode") or FILESYSTEM
        self.volume_attributes_class = _str(spec, "volumeAttributesClassName")
        self.access_modes = _strings(spec, "accessModes")
        self.phase = _str(mapping(data, "status"), "phase")
        ref = spec.get("claimRef")
        self.claim_ref = (
            ClaimRef(_str(ref, "namespace"), _str(ref, "name"), _str(ref, "uid"))
            if isinstance(ref, dict)
            else None
        )
        self.assumed = False
        if assumed is not None:
            a = assumed.volumes.get(obj.name)
            if a is not None and a.resource_version == self.resource_version:
                self.claim_ref = ClaimRef(a.claim_namespace, a.claim_name, a.claim_uid)
                annotations = {**annotations, ANN_BOUND_BY_CONTROLLER: "yes"}
                self.assumed = True
        self.annotations: Mapping[str, str] = annotations
        self._terms: tuple[SelectorTerm, ...] | None = None
        self._parsed = False

    @property
    def capacity_value(self) -> int:
        return _value(self.capacity)

    def node_affinity_terms(self) -> tuple[SelectorTerm, ...] | None:
        """The PV's spec.nodeAffinity.required, parsed once (None when it has
        no required node affinity)."""
        if not self._parsed:
            self._terms = node_affinity_terms(mapping(self.obj.data, "spec").get("nodeAffinity"))
            self._parsed = True
        return self._terms

    def check_node_affinity(self, node_labels: Mapping[str, str]) -> bool:
        """CheckNodeAffinity: no required node affinity, or a term the node's
        labels match. The node is built from its labels only, so matchFields
        are not checked; a term that does not parse matches nothing."""
        terms = self.node_affinity_terms()
        return terms is None or selector_matches(terms, node_labels, "")

    def bound_to(self, claim: Claim) -> bool:
        """IsVolumeBoundToClaim: claimRef names the claim (and its uid, when
        the claimRef has one)."""
        ref = self.claim_ref
        if ref is None or ref.name != claim.name or ref.namespace != claim.namespace:
            return False
        return not ref.uid or ref.uid == claim.uid

    def __repr__(self) -> str:
        return f"Volume({self.name})"


def node_affinity_terms(affinity: object) -> tuple[SelectorTerm, ...] | None:
    """A VolumeNodeAffinity (JSON) parsed with the node selector rules of
    NewLazyErrorNodeSelector; None when it has no ``required``."""
    if not isinstance(affinity, dict):
        return None
    required = affinity.get("required")
    if not isinstance(required, dict):
        return None
    terms = required.get("nodeSelectorTerms")
    selector = pb.NodeSelector()
    for t in terms if isinstance(terms, list) else []:
        term = selector.terms.add()
        if not isinstance(t, dict):
            continue
        for src, dst in (
            (t.get("matchExpressions"), term.match_expressions),
            (t.get("matchFields"), term.match_fields),
        ):
            for r in src if isinstance(src, list) else []:
                if isinstance(r, dict):
                    dst.add(
                        key=str(r.get("key") or ""),
                        operator=str(r.get("operator") or ""),
                        values=[str(v) for v in r.get("values") or []],
                    )
    parsed, _errors = compile_node_selector(selector.terms)
    return parsed


def check_access_modes(claim: Claim, volume: Volume) -> bool:
    """CheckAccessModes: the PV offers every access mode the claim asks."""
    offered = set(volume.access_modes)
    return all(mode in offered for mode in claim.access_modes)


def find_matching_volume(
    claim: Claim,
    volumes: Sequence[Volume],
    node_labels: Mapping[str, str],
    excluded: set[str],
) -> Volume | None:
    """FindMatchingVolume on the scheduler path (node set, delayBinding true,
    VolumeAttributesClass on: GA and locked in v1.36): a PV pre-bound to the
    claim if its node affinity fits the node (else no match at all), or the
    smallest Available PV of the claim's class that is big enough, of the
    claim's volume mode and attributes class, not being deleted, matching the
    claim's selector, fitting the node and offering the claim's access modes.
    ``excluded`` are PVs already chosen for the pod's other claims.
    ValueError when the claim's selector does not parse."""
    selector = claim.label_selector()
    requested = claim.request_exact
    smallest: Volume | None = None
    for volume in volumes:
        if volume.name in excluded:
            continue
        bound_to_claim = volume.bound_to(claim)
        if volume.claim_ref is not None and not bound_to_claim:
            continue
        if volume.capacity < requested:
            continue
        if claim.volume_mode != volume.volume_mode:
            continue
        if claim.volume_attributes_class != volume.volume_attributes_class:
            continue
        if volume.deleting:
            continue
        fits_node = volume.check_node_affinity(node_labels)
        if bound_to_claim:
            # A pre-bound PV that does not fit the node: the claim fits no
            # PV on this node.
            return volume if fits_node else None
        if volume.phase != VOLUME_AVAILABLE:
            continue
        if selector is not None and not selector.matches(volume.labels):
            continue
        if volume.storage_class != claim.storage_class:
            continue
        if not fits_node:
            continue
        if not check_access_modes(claim, volume):
            continue
        if smallest is None or smallest.capacity > volume.capacity:
            smallest = volume
    return smallest


def match_topology_selector_terms(terms: object, labels: Mapping[str, str]) -> bool:
    """MatchTopologySelectorTerms over a StorageClass's allowedTopologies
    (JSON): no terms match everything; terms are ORed; a term without
    expressions, or with one that does not parse, matches nothing; each
    expression is ``key In values``."""
    if not isinstance(terms, list) or not terms:
        return True
    for term in terms:
        exprs = term.get("matchLabelExpressions") if isinstance(term, dict) else None
        if not isinstance(exprs, list) or not exprs:
            continue
        selector_json = {
            "matchExpressions": [
                {
                    "key": e.get("key", "") if isinstance(e, dict) else "",
                    "operator": "In",
                    "values": e.get("values") or [] if isinstance(e, dict) else [],
                }
                for e in exprs
            ]
        }
        try:
            selector = selector_from_json(selector_json, "allowedTopologies")
        except SelectorError:
            continue
        if selector.matches(labels):
            return True
    return False


def label_selector_matches(selector: object, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelectorAsSelector(selector).Matches(labels), false when
    it does not parse (nodeHasAccess)."""
    try:
        return selector_from_json(selector, "nodeTopology").matches(labels)
    except SelectorError as exc:
        log.debug("VolumeBinding: a CSIStorageCapacity nodeTopology does not parse: %s", exc)
        return False
