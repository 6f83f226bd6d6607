"""Storage objects as the volume plugins read them.

VolumeRestrictions, VolumeZone and NodeVolumeLimits (and VolumeBinding) read
PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes and
VolumeAttachments. Each declares the kinds it needs with ``Plugin.reads``
using the ObjectKind constants below: one definition per resource, since a
profile whose plugins describe the same resource differently is refused
(objects.merge_reads).

A pod's volumes come on the wire as ``Pod.volumes`` (cluster.proto, Volume):
a claim (``claim_name``), a generic ephemeral volume (``ephemeral``, with the
claim the API creates for it), or an inline source kept whole as JSON
(``source_json``). ``volumes_of`` and ``inline_source`` read them; objects'
fields are read from their JSON as the API server serves it (defaults
applied), with upstream's helper semantics named per function.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import orjson

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.objects import ClusterObject, ObjectKind

if TYPE_CHECKING:
    from berth.framework.snapshot import Snapshot

__all__ = [
    "BETA_STORAGE_CLASS_ANNOTATION",
    "CSI_NODES",
    "PERSISTENT_VOLUMES",
    "PERSISTENT_VOLUME_CLAIMS",
    "READ_WRITE_ONCE_POD",
    "STORAGE_CLASSES",
    "STORAGE_GROUP",
    "VOLUME_ATTACHMENTS",
    "access_modes",
    "claim_storage_class",
    "csi_node",
    "ephemeral_claim_name",
    "inline_source",
    "is_claim",
    "is_controlled_by",
    "mapping",
    "not_found",
    "persistent_volume",
    "persistent_volume_claim",
    "storage_class",
    "volumes_of",
]

STORAGE_GROUP: Final = "storage.k8s.io"

PERSISTENT_VOLUME_CLAIMS: Final = ObjectKind(
    "", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", namespaced=True
)
PERSISTENT_VOLUMES: Final = ObjectKind(
    "", "v1", "persistentvolumes", "PersistentVolume", namespaced=False
)
STORAGE_CLASSES: Final = ObjectKind(
    STORAGE_GROUP, "v1", "storageclasses", "StorageClass", namespaced=False
)
CSI_NODES: Final = ObjectKind(STORAGE_GROUP, "v1", "csinodes", "CSINode", namespaced=False)
VOLUME_ATTACHMENTS: Final = ObjectKind(
    STORAGE_GROUP, "v1", "volumeattachments", "VolumeAttachment", namespaced=False
)

# k8s.io/api/core/v1: BetaStorageClassAnnotation, ReadWriteOncePod.
BETA_STORAGE_CLASS_ANNOTATION: Final = "volume.beta.kubernetes.io/storage-class"
READ_WRITE_ONCE_POD: Final = "ReadWriteOncePod"

_EMPTY: Mapping[str, Any] = {}


# -- the pod's volumes ------------------------------------------------------------


def volumes_of(pod: pb.Pod) -> Sequence[pb.Volume]:
    """The pod's ``volumes``. A caller that sends only ``pvc_names`` (the
    claim names, from before ``volumes`` existed) gets one claim volume per
    name, so claims still count."""
    if pod.volumes or not pod.pvc_names:
        return pod.volumes
    return tuple(pb.Volume(name=n, claim_name=n) for n in pod.pvc_names)


def ephemeral_claim_name(pod: pb.Pod, volume: pb.Volume) -> str:
    """component-helpers storage/ephemeral, VolumeClaimName: the claim of a
    generic ephemeral volume is ``<pod name>-<volume name>``. The caller sends
    it in ``claim_name``; computed here when it did not."""
    return volume.claim_name or f"{pod.name}-{volume.name}"


def claim_names(pod: pb.Pod, *, ephemeral: bool) -> set[str]:
    """The names of the claims the pod's volumes use: its
    ``persistentVolumeClaim`` volumes, and with ``ephemeral`` its generic
    ephemeral volumes' claims too (the volume loops of upstream's queueing
    hints)."""
    return {
        ephemeral_claim_name(pod, v) if v.ephemeral else v.claim_name
        for v in volumes_of(pod)
        if is_claim(v) or (ephemeral and v.ephemeral)
    }


def claim_of_pod(pod: pb.Pod, claim: Any, *, ephemeral: bool) -> bool:
    """Is ``claim`` (a PersistentVolumeClaim ClusterObject) one of the pod's
    (same namespace, a name ``claim_names`` lists)?"""
    if claim is None or claim.namespace != pod.namespace:
        return False
    return bool(claim.name in claim_names(pod, ephemeral=ephemeral))


def is_claim(volume: pb.Volume) -> bool:
    """Is this a ``persistentVolumeClaim`` volume (not a generic ephemeral
    one)?"""
    return bool(volume.claim_name) and not volume.ephemeral


@functools.lru_cache(maxsize=16384)
def _decode_source(raw: bytes) -> Mapping[str, Any]:
    # orjson: a bounded depth (1024 levels) whatever the stack, where Python's
    # json raises RecursionError (not a ValueError) near 1000.
    value = orjson.loads(raw)
    if not isinstance(value, dict):
        raise ValueError(f"is a JSON {type(value).__name__}, not an object")
    return value


def inline_source(pod: pb.Pod, volume: pb.Volume) -> Mapping[str, Any]:
    """The volume's ``spec.volumes`` entry decoded from ``source_json``
    (empty when the caller sent none). Decoded once per distinct JSON and
    shared: read-only. ValueError names the pod and the volume when the JSON
    is malformed."""
    raw = volume.source_json
    if not raw:
        return _EMPTY
    try:
        return _decode_source(raw)
    except ValueError as exc:
        raise ValueError(
            f"pod {pod.namespace}/{pod.name}: volumes[{volume.name!r}].source_json "
            f"does not decode: {exc}"
        ) from None


def mapping(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``obj[key]`` when it is a JSON object, else empty."""
    value = obj.get(key)
    return value if isinstance(value, dict) else _EMPTY


# -- lookups ----------------------------------------------------------------------


def not_found(resource: str, name: str, group: str = "") -> str:
    """The message of the NotFound error a client-go lister returns
    (apimachinery errors.NewNotFound with the lister's singular resource),
    e.g. ``persistentvolumeclaim "data" not found`` or
    ``storageclass.storage.k8s.io "fast" not found``."""
    qualified = f"{resource}.{group}" if group else resource
    return f'{qualified} "{name}" not found'


def persistent_volume_claim(snapshot: Snapshot, namespace: str, name: str) -> ClusterObject | None:
    return snapshot.object("", PERSISTENT_VOLUME_CLAIMS.resource, namespace, name)


def persistent_volume(snapshot: Snapshot, name: str) -> ClusterObject | None:
    return snapshot.object("", PERSISTENT_VOLUMES.resource, "", name)


def storage_class(snapshot: Snapshot, name: str) -> ClusterObject | None:
    return snapshot.object(STORAGE_GROUP, STORAGE_CLASSES.resource, "", name)


def csi_node(snapshot: Snapshot, node_name: str) -> ClusterObject | None:
    return snapshot.object(STORAGE_GROUP, CSI_NODES.resource, "", node_name)


# -- object fields ----------------------------------------------------------------


def claim_storage_class(pvc: ClusterObject) -> str:
    """component-helpers storage/volume, GetPersistentVolumeClaimClass: the
    beta annotation first, then spec.storageClassName; "" when neither."""
    annotations = pvc.annotations
    if BETA_STORAGE_CLASS_ANNOTATION in annotations:
        return str(annotations[BETA_STORAGE_CLASS_ANNOTATION])
    name = mapping(pvc.data, "spec").get("storageClassName")
    return name if isinstance(name, str) else ""


def access_modes(pvc: ClusterObject) -> tuple[str, ...]:
    """spec.accessModes of a claim."""
    modes = mapping(pvc.data, "spec").get("accessModes")
    if not isinstance(modes, list):
        return ()
    return tuple(m for m in modes if isinstance(m, str))


def is_controlled_by(obj: ClusterObject, owner_uid: str) -> bool:
    """apimachinery metav1.IsControlledBy: the object's controller owner
    reference (controller: true) names ``owner_uid``."""
    refs = obj.metadata.get("ownerReferences")
    if not isinstance(refs, list):
        return False
    for ref in refs:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return bool(owner_uid) and ref.get("uid") == owner_uid
    return False
