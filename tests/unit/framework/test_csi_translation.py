"""In-tree volumes as the CSI volumes they migrated to, as
k8s.io/csi-translation-lib translates them (translate.go, plugins/*.go): the
volume handles NodeVolumeLimits counts by, and the node affinity VolumeBinding
checks a migrated PV by."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from berth.framework.csi_translation import (
    AWS_EBS,
    AZURE_DISK,
    AZURE_FILE,
    CINDER,
    GCE_PD,
    IN_TREE_PLUGINS,
    MIGRATED_PLUGINS_ANNOTATION,
    MIGRATION_ON,
    PORTWORX,
    VSPHERE,
    InTreePlugin,
    TranslationError,
    ebs_volume_id,
    inline_volume_handle,
    is_csi_migration_on,
    migrated_plugins,
    migration_on_pv_plugin,
    plugin_by_name,
    pv_volume_handle,
    translated_node_affinity,
)

# -- which plugins ---------------------------------------------------------------


def test_the_migration_on_plugins_are_the_five_ga_ones() -> None:
    """isCSIMigrationOn (nodevolumelimits) and isCSIMigrationOnForPlugin
    (volumebinding) agree: Azure File and vSphere are migratable, never on."""
    assert {p.plugin_name for p in MIGRATION_ON} == {
        "kubernetes.io/aws-ebs",
        "kubernetes.io/gce-pd",
        "kubernetes.io/azure-disk",
        "kubernetes.io/cinder",
        "kubernetes.io/portworx-volume",
    }
    assert set(IN_TREE_PLUGINS) - set(MIGRATION_ON) == {AZURE_FILE, VSPHERE}
    assert not is_csi_migration_on(True, AZURE_FILE.plugin_name)
    assert not is_csi_migration_on(False, AWS_EBS.plugin_name)
    assert is_csi_migration_on(True, AWS_EBS.plugin_name)


@pytest.mark.parametrize("plugin", IN_TREE_PLUGINS, ids=lambda p: p.source_key)
def test_a_pv_source_names_its_plugin(plugin: InTreePlugin) -> None:
    spec: dict[str, Any] = {plugin.source_key: {}}
    assert plugin_by_name(plugin.plugin_name) is plugin
    want = plugin if plugin in MIGRATION_ON else None
    assert migration_on_pv_plugin(spec) is want
    assert migration_on_pv_plugin({"hostPath": {"path": "/x"}}) is None


def test_the_migrated_plugins_come_from_the_csinode_annotation() -> None:
    annotated = {
        "metadata": {"annotations": {MIGRATED_PLUGINS_ANNOTATION: "kubernetes.io/gce-pd,x"}}
    }
    assert migrated_plugins(annotated) == {"kubernetes.io/gce-pd", "x"}
    assert migrated_plugins({"metadata": {}}) == frozenset()
    assert migrated_plugins(None) == frozenset()


def test_the_drivers_zone_topology_keys() -> None:
    """The keys a translated PV's zone requirement moves to; Azure Disk and
    Portworx PVs keep their topology."""
    keys = {p: p.zone_topology_key for p in (AWS_EBS, GCE_PD, CINDER, AZURE_DISK, PORTWORX)}
    assert keys == {
        AWS_EBS: "topology.ebs.csi.aws.com/zone",
        GCE_PD: "topology.gke.io/zone",
        CINDER: "topology.cinder.csi.openstack.org/zone",
        AZURE_DISK: None,
        PORTWORX: None,
    }


def test_a_pv_the_handle_refuses_is_refused_by_the_node_affinity_translation() -> None:
    """One TranslateInTreePVToCSI: a regional GCE PD whose zones span two
    regions fails both, with upstream's wrapping."""
    pv = {
        "metadata": {"labels": {"topology.kubernetes.io/zone": "us-central1-a__europe-west1-b"}},
        "spec": {"gcePersistentDisk": {"pdName": "pd"}},
    }
    message = "failed to get region from zones: multiple or no regions gotten from zones"
    with pytest.raises(TranslationError, match=message):
        pv_volume_handle(GCE_PD, pv)
    with pytest.raises(TranslationError, match=message):
        translated_node_affinity(pv, frozenset({GCE_PD.plugin_name}))


# -- volume handles (NodeVolumeLimits) --------------------------------------------


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ("vol-123", "vol-123"),
        ("aws://us-east-1a/vol-123", "vol-123"),
        ("aws:///vol-abc", "vol-abc"),
        ("anything", "anything"),
    ],
)
def test_ebs_volume_id(given: str, want: str) -> None:
    """aws_ebs.go, KubernetesVolumeIDToEBSVolumeID."""
    assert ebs_volume_id(given) == want


def test_ebs_volume_id_refuses_other_shapes() -> None:
    with pytest.raises(TranslationError, match="Invalid format for AWS volume"):
        ebs_volume_id("aws://us-east-1a/disk-1")


def pv_with(labels: dict[str, str], source: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "pv", "labels": labels}, "spec": source}


@pytest.mark.parametrize(
    ("labels", "want"),
    [
        ({}, "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/pd"),
        (
            {"topology.kubernetes.io/zone": "us-central1-a"},
            "projects/UNSPECIFIED/zones/us-central1-a/disks/pd",
        ),
        (
            {
                "failure-domain.beta.kubernetes.io/zone": "us-central1-b",
                "topology.kubernetes.io/zone": "us-central1-a",
            },
            "projects/UNSPECIFIED/zones/us-central1-b/disks/pd",
        ),
        (
            {"topology.kubernetes.io/zone": "us-central1-a__us-central1-c"},
            "projects/UNSPECIFIED/regions/us-central1/disks/pd",
        ),
    ],
)
def test_gce_pd_pv_handle(labels: dict[str, str], want: str) -> None:
    """gce_pd.go, TranslateInTreePVToCSI: zonal, regional or unspecified."""
    assert (
        pv_volume_handle(GCE_PD, pv_with(labels, {"gcePersistentDisk": {"pdName": "pd"}})) == want
    )


def test_gce_pd_pv_in_two_regions_does_not_translate() -> None:
    labels = {"topology.kubernetes.io/zone": "us-central1-a__europe-west1-b"}
    with pytest.raises(TranslationError, match="multiple or no regions"):
        pv_volume_handle(GCE_PD, pv_with(labels, {"gcePersistentDisk": {"pdName": "pd"}}))


def test_azure_disk_needs_a_managed_kind() -> None:
    source = {"azureDisk": {"diskName": "d", "diskURI": "/subs/x/disks/d"}}
    assert inline_volume_handle(AZURE_DISK, source) == "/subs/x/disks/d"
    managed = {"azureDisk": {**source["azureDisk"], "kind": "managed"}}
    assert inline_volume_handle(AZURE_DISK, managed) == "/subs/x/disks/d"
    shared = {"azureDisk": {**source["azureDisk"], "kind": "Shared"}}
    with pytest.raises(TranslationError, match=r"kind\(Shared\) is not supported"):
        inline_volume_handle(AZURE_DISK, shared)


# -- node affinity of a migrated PV (VolumeBinding) --------------------------------


def _terms(affinity: Mapping[str, Any] | None) -> list[list[tuple[str, list[str]]]]:
    assert affinity is not None
    return [
        [(e["key"], e["values"]) for e in t.get("matchExpressions", [])]
        for t in affinity["required"]["nodeSelectorTerms"]
    ]


def test_translation_renames_zone_and_beta_region() -> None:
    """translateTopologyFromInTreeToCSI: zone requirements go under the CSI key, a
    beta region requirement under the GA one; the PV object is not changed."""
    affinity: dict[str, Any] = {
        "required": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {
                            "key": "failure-domain.beta.kubernetes.io/zone",
                            "operator": "In",
                            "values": ["z1"],
                        },
                        {
                            "key": "failure-domain.beta.kubernetes.io/region",
                            "operator": "In",
                            "values": ["r1"],
                        },
                    ]
                }
            ]
        }
    }
    volume = {"spec": {"awsElasticBlockStore": {"volumeID": "vol-1"}, "nodeAffinity": affinity}}
    got = translated_node_affinity(volume, frozenset({"kubernetes.io/aws-ebs"}))
    assert _terms(got) == [
        [("topology.ebs.csi.aws.com/zone", ["z1"]), ("topology.kubernetes.io/region", ["r1"])]
    ]
    assert affinity["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["key"].startswith(
        "failure"
    )
    # Not migrated on the node: unchanged.
    assert translated_node_affinity(volume, frozenset({"kubernetes.io/gce-pd"})) is affinity


def test_translation_adds_zones_from_the_label() -> None:
    """addTopology: zones of a multi-zone label, trimmed, distinct and sorted, to every term."""
    volume = {
        "metadata": {"labels": {"topology.kubernetes.io/zone": "us-b-1__us-a-1__us-a-1"}},
        "spec": {"cinder": {"volumeID": "v"}},
    }
    got = translated_node_affinity(volume, frozenset({"kubernetes.io/cinder"}))
    assert _terms(got) == [[("topology.cinder.csi.openstack.org/zone", ["us-a-1", "us-b-1"])]]


@pytest.mark.parametrize(
    ("spec", "labels", "message"),
    [
        (
            {"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/bogus"}},
            {},
            "Invalid format for AWS volume",
        ),
        ({"azureDisk": {"diskName": "d", "kind": "Shared"}}, {}, "kind(Shared) is not supported"),
        (
            {"gcePersistentDisk": {"pdName": "d"}},
            {"topology.kubernetes.io/zone": "us-central1-a__europe-west1-b"},
            "multiple or no regions",
        ),
        (
            {"gcePersistentDisk": {"pdName": "d"}},
            {"topology.kubernetes.io/zone": "a__b"},
            "unexpected format",
        ),
    ],
)
def test_translation_failures(spec: dict[str, Any], labels: dict[str, str], message: str) -> None:
    plugin = {
        "awsElasticBlockStore": "kubernetes.io/aws-ebs",
        "azureDisk": "kubernetes.io/azure-disk",
        "gcePersistentDisk": "kubernetes.io/gce-pd",
    }[next(iter(spec))]
    with pytest.raises(TranslationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        translated_node_affinity(
            {"metadata": {"labels": labels}, "spec": spec}, frozenset({plugin})
        )
