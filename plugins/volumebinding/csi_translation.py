"""In-tree PersistentVolumes seen as the CSI volumes they migrate to, for the
node affinity check of bound claims.

Upstream's binder translates a bound in-tree PV to CSI before checking its
node affinity when the in-tree plugin is migrated on the node
(pkg/scheduler/framework/plugins/volumebinding/binder.go,
tryTranslatePVToCSI, isCSIMigrationOnForPlugin, isPluginMigratedToCSIOnNode):
the node's CSINode lists the migrated plugins in the annotation
``storage.alpha.kubernetes.io/migrated-plugins``, and the translation
(k8s.io/csi-translation-lib) rewrites the PV's zone topology to the CSI
driver's topology key, which is what migrated nodes carry.

Only what changes the node affinity is ported: per plugin, the checks that
make TranslateInTreePVToCSI fail (an error fails Filter, as upstream), and
translateTopologyFromInTreeToCSI (plugins/in_tree_volume.go: getTopologyLabel,
getTopologyValues, replaceTopology, addTopology). The CSI source itself is
not built: nothing here reads it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

__all__ = [
    "MIGRATED_PLUGINS_ANNOTATION",
    "TranslationError",
    "in_tree_plugin",
    "migrated_plugins",
    "translated_node_affinity",
]

# k8s.io/api/core/v1: MigratedPluginsAnnotationKey.
MIGRATED_PLUGINS_ANNOTATION: Final = "storage.alpha.kubernetes.io/migrated-plugins"

# k8s.io/api/core/v1 well-known labels.
_ZONE_GA: Final = "topology.kubernetes.io/zone"
_REGION_GA: Final = "topology.kubernetes.io/region"
_ZONE_BETA: Final = "failure-domain.beta.kubernetes.io/zone"
_REGION_BETA: Final = "failure-domain.beta.kubernetes.io/region"
# csi-translation-lib plugins/const.go: labelMultiZoneDelimiter.
_ZONE_DELIMITER: Final = "__"

# (PV source field, in-tree plugin name, the CSI driver's zone topology key or
# None when the translation leaves the topology alone) for the plugins whose
# migration isCSIMigrationOnForPlugin reports on: AWS EBS, GCE PD, Azure Disk,
# Cinder, Portworx. (Azure File and vSphere PVs are migratable too, but the
# binder never translates them.)
_PLUGINS: Final = (
    ("awsElasticBlockStore", "kubernetes.io/aws-ebs", "topology.ebs.csi.aws.com/zone"),
    ("gcePersistentDisk", "kubernetes.io/gce-pd", "topology.gke.io/zone"),
    ("azureDisk", "kubernetes.io/azure-disk", None),
    ("cinder", "kubernetes.io/cinder", "topology.cinder.csi.openstack.org/zone"),
    ("portworxVolume", "kubernetes.io/portworx-volume", None),
)

# plugins/aws_ebs.go: awsVolumeRegMatch.
_AWS_VOLUME_ID: Final = re.compile(r"^vol-[^/]*$")


class TranslationError(ValueError):
    """TranslateInTreePVToCSI failed (upstream's Filter then returns Error)."""


def migrated_plugins(csi_node: Mapping[str, Any] | None) -> frozenset[str]:
    """isPluginMigratedToCSIOnNode's set: the CSINode's migrated-plugins
    annotation split at commas (empty without a CSINode)."""
    if csi_node is None:
        return frozenset()
    meta = csi_node.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict):
        return frozenset()
    value = annotations.get(MIGRATED_PLUGINS_ANNOTATION)
    if not isinstance(value, str) or not value:
        return frozenset()
    return frozenset(value.split(","))


def in_tree_plugin(spec: Mapping[str, Any]) -> tuple[str, str, str | None] | None:
    """(source field, plugin name, topology key) of the migratable in-tree
    source the PV spec uses (GetInTreePluginNameFromSpec), None for any other
    source."""
    for source, plugin, key in _PLUGINS:
        if isinstance(spec.get(source), dict):
            return source, plugin, key
    return None


def translated_node_affinity(
    pv: Mapping[str, Any], migrated: frozenset[str]
) -> Mapping[str, Any] | None:
    """The PV's ``spec.nodeAffinity`` as tryTranslatePVToCSI leaves it: the
    same object when the PV's plugin is not migrated on the node, else the
    translated copy. TranslationError when the translation fails."""
    spec = pv.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    affinity = spec.get("nodeAffinity")
    affinity = affinity if isinstance(affinity, dict) else None
    found = in_tree_plugin(spec)
    if found is None:
        return affinity
    source, plugin, key = found
    if plugin not in migrated:
        return affinity
    meta = pv.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    labels = labels if isinstance(labels, dict) else {}
    _check_source(source, spec[source], labels)
    if key is None:
        return affinity
    out: dict[str, Any] = copy.deepcopy(affinity) if affinity is not None else {}
    _topology_to_csi(out, labels, key)
    return out or None


def _check_source(source: str, src: Mapping[str, Any], labels: Mapping[str, Any]) -> None:
    """The failures of the plugins' TranslateInTreePVToCSI."""
    if source == "awsElasticBlockStore":
        # KubernetesVolumeIDToEBSVolumeID.
        volume_id = str(src.get("volumeID") or "")
        if volume_id.startswith("aws://"):
            try:
                parts = urlsplit(volume_id)
            except ValueError as exc:
                raise TranslationError(
                    "failed to translate Kubernetes ID to EBS Volume ID "
                    f"Invalid disk name ({volume_id}): {exc}"
                ) from None
            if not _AWS_VOLUME_ID.match(parts.path.strip("/")):
                raise TranslationError(
                    "failed to translate Kubernetes ID to EBS Volume ID "
                    f"Invalid format for AWS volume ({volume_id})"
                )
    elif source == "gcePersistentDisk":
        # The volume id of a regional disk needs the region of its zones.
        zones_label = str(labels.get(_ZONE_BETA) or labels.get(_ZONE_GA) or "")
        zones = zones_label.split(_ZONE_DELIMITER)
        if len(zones) > 1:
            _gce_region(zones)
    elif source == "azureDisk":
        kind = src.get("kind")
        if kind is not None and str(kind).lower() != "managed":
            raise TranslationError(f"kind({kind}) is not supported in csi migration")


def _gce_region(zones: list[str]) -> str:
    """gceGetRegionFromZones."""
    regions: set[str] = set()
    for zone in zones:
        parts = zone.split("-")
        if len(parts) != 3:
            raise TranslationError(
                "failed to get region from zones: zone in unexpected format, expected: "
                f"{{locale}}-{{region}}-{{zone}}, got: {zone}"
            )
        regions.add("-".join(parts[:2]))
    if len(regions) != 1:
        raise TranslationError(
            f"failed to get region from zones: multiple or no regions gotten from zones, "
            f"got: {sorted(regions)}"
        )
    return next(iter(regions))


def _terms(affinity: Mapping[str, Any]) -> list[dict[str, Any]]:
    required = affinity.get("required")
    if not isinstance(required, dict):
        return []
    terms = required.get("nodeSelectorTerms")
    return [t for t in terms if isinstance(t, dict)] if isinstance(terms, list) else []


def _expressions(term: Mapping[str, Any]) -> list[dict[str, Any]]:
    exprs = term.get("matchExpressions")
    return [e for e in exprs if isinstance(e, dict)] if isinstance(exprs, list) else []


def _key_exists(key: str, affinity: Mapping[str, Any]) -> bool:
    """TopologyKeyExist."""
    return any(e.get("key") == key for t in _terms(affinity) for e in _expressions(t))


def _topology_label(affinity: Mapping[str, Any], labels: Mapping[str, Any]) -> tuple[str, str]:
    """getTopologyLabel: the GA or beta (zone, region) labels the PV uses,
    from its node affinity first, then its labels; GA when neither says."""
    if _key_exists(_ZONE_GA, affinity):
        return _ZONE_GA, _REGION_GA
    if _key_exists(_ZONE_BETA, affinity):
        return _ZONE_BETA, _REGION_BETA
    if _ZONE_GA in labels:
        return _ZONE_GA, _REGION_GA
    if _ZONE_BETA in labels:
        return _ZONE_BETA, _REGION_BETA
    return _ZONE_GA, _REGION_GA


def _values(affinity: Mapping[str, Any], key: str) -> list[str]:
    """getTopologyValues: the distinct values of ``key`` over every term, sorted."""
    found: set[str] = set()
    for t in _terms(affinity):
        for e in _expressions(t):
            if e.get("key") == key and isinstance(e.get("values"), list):
                found.update(str(v) for v in e["values"])
    return sorted(found)


def _replace(affinity: Mapping[str, Any], old: str, new: str) -> None:
    """replaceTopology."""
    for t in _terms(affinity):
        for e in _expressions(t):
            if e.get("key") == old:
                e["key"] = new


def _add(affinity: dict[str, Any], key: str, zones: list[str]) -> None:
    """addTopology: ``key In zones`` (trimmed, distinct, sorted) added to
    every term, a term made if there is none; nothing when no zone is left
    (upstream returns an error its caller ignores)."""
    clean = sorted({z.strip() for z in zones if z.strip()})
    if not clean:
        return
    required = affinity.get("required")
    if not isinstance(required, dict):
        required = affinity["required"] = {}
    terms = required.get("nodeSelectorTerms")
    if not isinstance(terms, list) or not terms:
        terms = required["nodeSelectorTerms"] = [{}]
    for t in terms:
        if not isinstance(t, dict):
            continue
        exprs = t.get("matchExpressions")
        if not isinstance(exprs, list):
            exprs = t["matchExpressions"] = []
        exprs.append({"key": key, "operator": "In", "values": list(clean)})


def _topology_to_csi(affinity: dict[str, Any], labels: Mapping[str, Any], key: str) -> None:
    """translateTopologyFromInTreeToCSI: the zone topology (from the node
    affinity, else from the PV's zone label) under the CSI key; a beta region
    requirement renamed to the GA label."""
    zone_label, region_label = _topology_label(affinity, labels)
    if _values(affinity, zone_label):
        _replace(affinity, zone_label, key)
    elif zone_label in labels:
        _add(affinity, key, str(labels[zone_label]).split(_ZONE_DELIMITER))
    if region_label == _REGION_BETA and _values(affinity, region_label):
        _replace(affinity, region_label, _REGION_GA)
