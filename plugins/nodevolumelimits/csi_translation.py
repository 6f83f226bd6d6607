"""In-tree volume sources as the CSI drivers they migrated to.

The part of k8s.io/csi-translation-lib v0.36 (translate.go and plugins/*.go)
that NodeVolumeLimits uses: which in-tree sources are migratable, the CSI
driver each migrated to, and the volume handle a translated volume gets.
A handle decides whether two pods use the same volume, so it follows the
library exactly (TranslateInTreeInlineVolumeToCSI, TranslateInTreePVToCSI).

Only the drivers nodevolumelimits' isCSIMigrationOn turns on (AWS EBS, GCE
PD, Azure Disk, Cinder, Portworx) are ever translated; Azure File and
vSphere volumes are migratable but never counted, as upstream.
"""

from __future__ import annotations

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
    "PORTWORX",
    "VSPHERE",
    "InTreePlugin",
    "TranslationError",
    "ebs_volume_id",
    "inline_plugin",
    "inline_volume_handle",
    "is_csi_migration_on",
    "plugin_by_name",
    "pv_plugin",
    "pv_volume_handle",
]


class TranslationError(ValueError):
    """An in-tree source that does not translate to CSI."""


@dataclass(frozen=True, slots=True)
class InTreePlugin:
    """An in-tree volume plugin that migrated to a CSI driver: the field of
    the volume source, the in-tree plugin name (a StorageClass provisioner)
    and the CSI driver name."""

    source_key: str
    plugin_name: str
    driver_name: str


# plugins/*.go: <X>InTreePluginName and <X>DriverName.
AWS_EBS: Final = InTreePlugin("awsElasticBlockStore", "kubernetes.io/aws-ebs", "ebs.csi.aws.com")
GCE_PD: Final = InTreePlugin("gcePersistentDisk", "kubernetes.io/gce-pd", "pd.csi.storage.gke.io")
CINDER: Final = InTreePlugin("cinder", "kubernetes.io/cinder", "cinder.csi.openstack.org")
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

_BY_NAME: Final = {p.plugin_name: p for p in IN_TREE_PLUGINS}

# nodevolumelimits/utils.go, isCSIMigrationOn: the plugins whose migration is
# on (GA) in v1.36.
_MIGRATION_ON: Final = frozenset(
    p.plugin_name for p in (AWS_EBS, PORTWORX, GCE_PD, AZURE_DISK, CINDER)
)

# gce_pd.go: volIDZonalFmt, volIDRegionalFmt, UnspecifiedValue.
_GCE_UNSPECIFIED: Final = "UNSPECIFIED"
# plugins/const.go, labelMultiZoneDelimiter.
_MULTI_ZONE_DELIMITER: Final = "__"
# aws_ebs.go, awsVolumeRegMatch.
_AWS_VOLUME_ID: Final = re.compile(r"vol-[^/]*")
# azure_disk.go: the only kind CSI migration supports (v1.AzureManagedDisk).
_AZURE_MANAGED: Final = "Managed"

_LABEL_ZONE_BETA: Final = "failure-domain.beta.kubernetes.io/zone"
_LABEL_ZONE: Final = "topology.kubernetes.io/zone"


def _source(spec: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    value = spec.get(key)
    return value if isinstance(value, dict) else None


def _str(source: Mapping[str, Any], key: str) -> str:
    value = source.get(key)
    return value if isinstance(value, str) else ""


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


def plugin_by_name(name: str) -> InTreePlugin | None:
    """IsMigratableIntreePluginByName / GetCSINameFromInTreeName."""
    return _BY_NAME.get(name)


def is_csi_migration_on(has_csi_node: bool, plugin_name: str) -> bool:
    """nodevolumelimits/utils.go, isCSIMigrationOn: the node has a CSINode
    and the plugin is one whose migration is on."""
    return has_csi_node and plugin_name in _MIGRATION_ON


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
        meta = pv.get("metadata")
        labels = meta.get("labels") if isinstance(meta, dict) else None
        labels = labels if isinstance(labels, dict) else {}
        # The beta label when set, else the GA one.
        zones_label = str(labels.get(_LABEL_ZONE_BETA) or labels.get(_LABEL_ZONE) or "")
        zones = zones_label.split(_MULTI_ZONE_DELIMITER)
        if len(zones) == 1 and zones[0]:
            return _gce_zonal(zones[0], pd_name)
        if len(zones) > 1:
            region = _gce_region_from_zones(zones)
            return f"projects/{_GCE_UNSPECIFIED}/regions/{region}/disks/{pd_name}"
        return _gce_zonal(_GCE_UNSPECIFIED, pd_name)
    if plugin is AZURE_DISK:
        return _azure_disk_handle(source)
    if plugin in (CINDER, PORTWORX):
        return _str(source, "volumeID")
    raise TranslationError(f"no volume handle translation for {plugin.plugin_name}")
