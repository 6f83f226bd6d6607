"""deploy/ manifests are accepted by a real kube-apiserver (server-side dry
run: validation and defaulting, nothing persisted), and the ConfigMap's
KubeSchedulerConfiguration is one Berth loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.localcluster import KubeClient
from plugins.framework.config import parse_config

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "plugin-server.yaml"

# kind -> collection path under a namespace.
PATHS = {
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "Service": "/api/v1/namespaces/{ns}/services",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
}


def documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


@pytest.mark.integration
def test_every_manifest_passes_server_side_validation(kube: KubeClient, namespace: str) -> None:
    kinds = []
    for doc in documents():
        kinds.append(doc["kind"])
        if doc["kind"] == "Namespace":
            continue  # the test's own namespace stands in for berth-system
        assert doc["kind"] in PATHS, f"add a path for {doc['kind']} to this test"
        doc["metadata"]["namespace"] = namespace
        out = kube.request(
            "POST", PATHS[doc["kind"]].format(ns=namespace), params={"dryRun": "All"}, body=doc
        )
        assert out["metadata"]["name"] == doc["metadata"]["name"]
    assert kinds == ["Namespace", "ConfigMap", "Deployment", "Service"]


def test_configmap_holds_a_config_berth_loads() -> None:
    (cm,) = [d for d in documents() if d["kind"] == "ConfigMap"]
    config = parse_config(yaml.safe_load(cm["data"]["scheduler-config.yaml"]), str(MANIFEST))
    assert [p.scheduler_name for p in config.profiles] == ["berth-scheduler"]
