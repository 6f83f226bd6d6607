"""In-tree volume sources as the CSI volumes they migrated to.

The part of k8s.io/csi-translation-lib v0.36 (translate.go and plugins/*.go)
that the volume plugins use:

- NodeVolumeLimits counts a migrated in-tree volume under its CSI driver
  (nodevolumelimits/csi.go): which sources are migratable, the driver each
  migrated to, and the volume handle a translated volume gets. A handle
  decides whether two pods use the same volume, so it follows the library
  exactly (TranslateInTreeInlineVolumeToCSI, TranslateInTreePVToCSI).
- VolumeBinding checks a bound in-tree PV's node affinity as the CSI volume it
  becomes when its plugin is migrated on the node (volumebinding/binder.go,
  tryTranslatePVToCSI, isCSIMigrationOnForPlugin,
  isPluginMigratedToCSIOnNode): the node's CSINode lists the migrated plugins
  in ``storage.alpha.kubernetes.io/migrated-plugins``, and the translation
  rewrites the PV's zone topology to the CSI driver's topology key, which is
  what migrated nodes carry (plugins/in_tree_volume.go,
  translateTopologyFromInTreeToCSI). A PV that TranslateInTreePVToCSI refuses
  fails Filter with an Error, as upstream.

Only the plugins whose migration is on in v1.36 (AWS EBS, GCE PD, Azure Disk,
Cinder, Portworx: nodevolumelimits/utils.go isCSIMigrationOn, binder.go
isCSIMigrationOnForPlugin) are ever translated; Azure File and vSphere volumes
are migratable but never counted nor translated, as upstream. The CSI source
itself is not built: nothing here reads more of it than its handle.
"""

from __future__ import annotations

import copy
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "AWS_EBS",
    "AZURE_DISK",
    "AZURE_FILE",
    "CINDER",
    "GCE_PD",
    "IN_TREE_PLUGINS",
    "MIGRATED_PLUGINS_ANNOTATION",
    "MIGRATION_ON",
    "PORTWORX",
    "VSPHERE",
    "InTreePlugin",
    "TranslationError",
    "ebs_volume_id",
    "inline_plugin",
    "inline_volume_handle",
    "is_csi_migration_on",
    "migrated_plugins",
    "migration_on_pv_plugin",
    "plugin_by_name",
    "pv_plugin",
    "pv_volume_handle",
    "translated_node_affinity",
]


class TranslationError(ValueError):
    """An in-tree source that does not translate to CSI."""


@dataclass(frozen=True, slots=True)
class InTreePlugin:
    """An in-tree volume plugin that migrated to a CSI driver: the field of
    the volume source, the in-tree plugin name (a StorageClass provisioner),
    the CSI driver name, and the zone topology key a translated PV's node
    affinity gets (None where the translation leaves the topology alone)."""

    source_key: str
    plugin_name: str
    driver_name: str
    zone_topology_key: str | None = None


# plugins/*.go: <X>InTreePluginName, <X>DriverName and the drivers' zone
# topology keys (aws_ebs.go AWSEBSTopologyKey, gce_pd.go GCEPDTopologyKey,
# openstack_cinder.go CinderTopologyKey).
AWS_EBS: Final = InTreePlugin(
    "awsElasticBlockStore",
    "kubernetes.io/aws-ebs",
    "ebs.csi.aws.com",
    "topology.ebs.csi.aws.com/zone",
)
GCE_PD: Final = InTreePlugin(
    "gcePersistentDisk", "kubernetes.io/gce-pd", "pd.csi.storage.gke.io", "topology.gke.io/zone"
)
CINDER: Final = InTreePlugin(
    "cinder",
    "kubernetes.io/cinder",
    "cinder.csi.openstack.org",
    "topology.cinder.csi.openstack.org/zone",
)
AZURE_DISK: Final = InTreePlugin("azureDisk", "kubernetes.io/azure-disk", "disk.csi.azure.com")
AZURE_FILE: Final = InTreePlugin("azureFile", "kubernetes.io/azure-file", "file.csi.azure.com")
VSPHERE: Final = InTreePlugin(
    "vsphereVolume", "kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com"
)
PORTWORX: Final = InTreePlugin(
    "portworxVolume", "kubernetes.io/portworx-volume", "pxd.portworx.com"
)

# translate.go, inTreePlugins.
IN_TREE_PLUGINS: Final = (AWS_EBS, GCE_PD, CINDER, AZURE_DISK, AZURE_FILE, VSPHERE, PORTWORX)

# nodevolumelimits/utils.go isCSIMigrationOn, volumebinding/binder.go
# isCSIMigrationOnForPlugin: the plugins whose migration is on (GA) in v1.36.
MIGRATION_ON: Final = (AWS_EBS, GCE_PD, AZURE_DISK, CINDER, PORTWORX)

_BY_NAME: Final = {p.plugin_name: p for p in IN_TREE_PLUGINS}
_MIGRATION_ON_NAMES: Final = frozenset(p.plugin_name for p in MIGRATION_ON)

# k8s.io/api/core/v1: MigratedPluginsAnnotationKey.
MIGRATED_PLUGINS_ANNOTATION: Final = "storage.alpha.kubernetes.io/migrated-plugins"

# gce_pd.go: volIDZonalFmt, volIDRegionalFmt, UnspecifiedValue.
_GCE_UNSPECIFIED: Final = "UNSPECIFIED"
# plugins/const.go, labelMultiZoneDelimiter.
_MULTI_ZONE_DELIMITER: Final = "__"
# aws_ebs.go, awsVolumeRegMatch.
_AWS_VOLUME_ID: Final = re.compile(r"vol-[^/]*")
# azure_disk.go: the only kind CSI migration supports (v1.AzureManagedDisk).
_AZURE_MANAGED: Final = "Managed"

# k8s.io/api/core/v1 well-known labels.
_ZONE_GA: Final = "topology.kubernetes.io/zone"
_REGION_GA: Final = "topology.kubernetes.io/region"
_ZONE_BETA: Final = "failure-domain.beta.kubernetes.io/zone"
_REGION_BETA: Final = "failure-domain.beta.kubernetes.io/region"


def _source(spec: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    value = spec.get(key)
    return value if isinstance(value, dict) else None


def _str(source: Mapping[str, Any], key: str) -> str:
    value = source.get(key)
    return value if isinstance(value, str) else ""


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


# -- which plugin -----------------------------------------------------------------


def inline_plugin(volume: Mapping[str, Any]) -> InTreePlugin | None:
    """IsInlineMigratable / GetInTreePluginNameFromSpec(nil, vol): the
    plugin of a ``spec.volumes`` entry, None when not migratable."""
    for p in IN_TREE_PLUGINS:
        if _source(volume, p.source_key) is not None:
            return p
    return None


def pv_plugin(pv_spec: Mapping[str, Any]) -> InTreePlugin | None:
    """IsPVMigratable / GetInTreePluginNameFromSpec(pv, nil), from a PV's
    spec."""
    return inline_plugin(pv_spec)


def migration_on_pv_plugin(pv_spec: Mapping[str, Any]) -> InTreePlugin | None:
    """The plugin of a PV's spec among those whose migration is on
    (MIGRATION_ON), None for any other source."""
    for p in MIGRATION_ON:
        if _source(pv_spec, p.source_key) is not None:
            return p
    return None


def plugin_by_name(name: str) -> InTreePlugin | None:
    """IsMigratableIntreePluginByName / GetCSINameFromInTreeName."""
    return _BY_NAME.get(name)


def is_csi_migration_on(has_csi_node: bool, plugin_name: str) -> bool:
    """nodevolumelimits/utils.go, isCSIMigrationOn: the node has a CSINode
    and the plugin is one whose migration is on."""
    return has_csi_node and plugin_name in _MIGRATION_ON_NAMES


def migrated_plugins(csi_node: Mapping[str, Any] | None) -> frozenset[str]:
    """binder.go, isPluginMigratedToCSIOnNode's set: the CSINode's
    migrated-plugins annotation split at commas (empty without a CSINode)."""
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


# -- volume handles -------------------------------------------------------------------


def ebs_volume_id(kubernetes_id: str) -> str:
    """aws_ebs.go, KubernetesVolumeIDToEBSVolumeID: ``aws://<zone>/vol-...``
    or a bare volume id to the bare id."""
    if not kubernetes_id.startswith("aws://"):
        return kubernetes_id
    try:
        url = urllib.parse.urlsplit(kubernetes_id)
    except ValueError as exc:
        raise TranslationError(f"Invalid disk name ({kubernetes_id}): {exc}") from None
    if url.scheme != "aws":
        raise TranslationError(f"Invalid scheme for AWS volume ({kubernetes_id})")
    aws_id = url.path.strip("/")
    if not _AWS_VOLUME_ID.fullmatch(aws_id):
        raise TranslationError(f"Invalid format for AWS volume ({kubernetes_id})")
    return aws_id


def _aws_handle(source: Mapping[str, Any]) -> str:
    try:
        return ebs_volume_id(_str(source, "volumeID"))
    except TranslationError as exc:
        raise TranslationError(
            f"failed to translate Kubernetes ID to EBS Volume ID {exc}"
        ) from None


def _azure_disk_handle(source: Mapping[str, Any]) -> str:
    kind = source.get("kind")
    if isinstance(kind, str) and kind.lower() != _AZURE_MANAGED.lower():
        raise TranslationError(f"kind({kind}) is not supported in csi migration")
    return _str(source, "diskURI")


def _gce_zonal(zone: str, pd_name: str) -> str:
    return f"projects/{_GCE_UNSPECIFIED}/zones/{zone}/disks/{pd_name}"


def _gce_region_from_zones(zones: list[str]) -> str:
    """gce_pd.go, gceGetRegionFromZones: zones ``{locale}-{region}-{zone}``
    of one region."""
    regions: set[str] = set()
    for zone in zones:
        parts = zone.split("-")
        if len(parts) != 3:
            raise TranslationError(
                f"zone in unexpected format, expected: {{locale}}-{{region}}-{{zone}}, got: {zone}"
            )
        regions.add("-".join(parts[:2]))
    if len(regions) != 1:
        raise TranslationError(f"multiple or no regions gotten from zones, got: {sorted(regions)}")
    return regions.pop()


def inline_volume_handle(plugin: InTreePlugin, volume: Mapping[str, Any]) -> str:
    """TranslateInTreeInlineVolumeToCSI's volume handle for a ``spec.volumes``
    entry of ``plugin``. TranslationError when it does not translate."""
    source = _source(volume, plugin.source_key)
    if source is None:
        raise TranslationError(f"volume is nil or {plugin.source_key} not defined on volume")
    if plugin is AWS_EBS:
        return _aws_handle(source)
    if plugin is GCE_PD:
        return _gce_zonal(_GCE_UNSPECIFIED, _str(source, "pdName"))
    if plugin is AZURE_DISK:
        return _azure_disk_handle(source)
    if plugin in (CINDER, PORTWORX):
        return _str(source, "volumeID")
    raise TranslationError(f"no volume handle translation for {plugin.plugin_name}")


def pv_volume_handle(plugin: InTreePlugin, pv: Mapping[str, Any]) -> str:
    """TranslateInTreePVToCSI's volume handle for a PersistentVolume (the
    whole object: GCE PD reads its zone labels). TranslationError when it
    does not translate."""
    spec = pv.get("spec")
    source = _source(spec, plugin.source_key) if isinstance(spec, dict) else None
    if source is None:
        raise TranslationError(f"pv is nil or {plugin.source_key} not defined on pv")
    if plugin is AWS_EBS:
        return _aws_handle(source)
    if plugin is GCE_PD:
        pd_name = _str(source, "pdName")
        labels = _labels(pv)
        # The beta label when set, else the GA one.
        zones_label = str(labels.get(_ZONE_BETA) or labels.get(_ZONE_GA) or "")
        zones = zones_label.split(_MULTI_ZONE_DELIMITER)
        if len(zones) == 1 and zones[0]:
            return _gce_zonal(zones[0], pd_name)
        if len(zones) > 1:
            try:
                region = _gce_region_from_zones(zones)
            except TranslationError as exc:
                raise TranslationError(f"failed to get region from zones: {exc}") from None
            return f"projects/{_GCE_UNSPECIFIED}/regions/{region}/disks/{pd_name}"
        return _gce_zonal(_GCE_UNSPECIFIED, pd_name)
    if plugin is AZURE_DISK:
        return _azure_disk_handle(source)
    if plugin in (CINDER, PORTWORX):
        return _str(source, "volumeID")
    raise TranslationError(f"no volume handle translation for {plugin.plugin_name}")


# -- node affinity ------------------------------------------------------------------


def translated_node_affinity(
    pv: Mapping[str, Any], migrated: frozenset[str]
) -> Mapping[str, Any] | None:
    """The PV's ``spec.nodeAffinity`` as binder.go tryTranslatePVToCSI leaves
    it: the same object when the PV's plugin is not migrated on the node
    (``migrated``, from migrated_plugins), else the translated copy.
    TranslationError when TranslateInTreePVToCSI fails."""
    spec = pv.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    affinity = spec.get("nodeAffinity")
    affinity = affinity if isinstance(affinity, dict) else None
    plugin = migration_on_pv_plugin(spec)
    if plugin is None or plugin.plugin_name not in migrated:
        return affinity
    # The handle is not needed; making it raises where the translation fails.
    pv_volume_handle(plugin, pv)
    key = plugin.zone_topology_key
    if key is None:
        return affinity
    out: dict[str, Any] = copy.deepcopy(affinity) if affinity is not None else {}
    _topology_to_csi(out, _labels(pv), key)
    return out or None


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
        _add(affinity, key, str(labels[zone_label]).split(_MULTI_ZONE_DELIMITER))
    if region_label == _REGION_BETA and _values(affinity, region_label):
        _replace(affinity, region_label, _REGION_GA)
