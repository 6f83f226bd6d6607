"""deploy/components/monitoring: the Prometheus Operator ServiceMonitors for the shim and
the plugin servers, on the base's Services (port ``metrics``, path /metrics).

- Rendered on the base, each monitor selects one Service whose ``metrics`` port leads to
  the port the process serves its metrics on (``--metrics-listen``), with the scheme that
  process speaks (the shim HTTPS, the plugin server HTTP).
- The base and the overlays hold no monitoring.coreos.com object, so a cluster without the
  Prometheus Operator's CRDs takes them.
- On the local API server, with the operator's own ServiceMonitor CRD (from the
  prometheus-operator Go module at OPERATOR_VERSION, fetched through the Go module proxy
  like the Kubernetes binaries): the base with the component passes a server-side dry
  run (as test_deploy_manifests.py runs the base's), the monitors apply for real
  (server-side apply), and a misspelt field is refused (the check can fail).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from berth.dev.localcluster import Cluster
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi
from tests.integration.deploytools import (
    BASE,
    DEPLOY,
    MONITORING,
    berth_system,
    containers,
    flag_value,
    kubectl,
    kustomization_dirs,
    one,
    render,
)
from tests.integration.shimtools import ensure_crd_objects

OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
OPERATOR_VERSION = "v0.85.0"
CRD_FILE = "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"
GROUP = "monitoring.coreos.com"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def operator_crd() -> JSON:
    """The ServiceMonitor CRD the Prometheus Operator ships, from its Go module (the Go
    module cache, else the proxy); fails with the command when it cannot be had."""
    argv = ["go", "mod", "download", "-json", f"{OPERATOR_MODULE}@{OPERATOR_VERSION}"]
    try:
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=300, check=False, cwd=os.getcwd()
        )
    except FileNotFoundError as exc:
        raise AssertionError(f"{' '.join(argv)}: no go on PATH") from exc
    info = json.loads(out.stdout or "{}")
    if out.returncode != 0 or "Dir" not in info:
        raise AssertionError(
            f"{' '.join(argv)} failed (is the Go module proxy reachable?): "
            f"{info.get('Error') or out.stderr[-2000:]}"
        )
    crd: JSON = yaml.safe_load((Path(info["Dir"]) / CRD_FILE).read_text())
    return crd


def with_monitoring(tmp_path: Path) -> Path:
    """A kustomization of the base with the monitoring component, as a user writes it."""
    rel = os.path.relpath(DEPLOY, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [f"{rel}/base"],
                "components": [f"{rel}/components/monitoring"],
            }
        )
    )
    return tmp_path


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _listen_port(args: list[str]) -> int:
    listen = flag_value(args, "--metrics-listen")
    assert listen, f"no --metrics-listen in {args}"
    return int(listen.rpartition(":")[2])


# Deployment, the scheme its metrics are served in.
SCRAPED = {"berth-scheduler": "https", "berth-plugin-server": "http"}


def test_each_monitor_reaches_its_process_metrics_port(tmp_path: Path) -> None:
    docs = render(with_monitoring(tmp_path))
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert sorted(m["metadata"]["name"] for m in monitors) == sorted(SCRAPED)
    services = [d for d in docs if d["kind"] == "Service"]
    pods = {name: (spec, c) for name, spec, c in containers(docs)}
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    for monitor in monitors:
        name = monitor["metadata"]["name"]
        assert monitor["apiVersion"] == f"{GROUP}/v1"
        assert monitor["metadata"]["namespace"] == "berth-system"
        selected = [
            s
            for s in services
            if _matches(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
        ]
        assert len(selected) == 1, (name, [s["metadata"]["name"] for s in selected])
        service = selected[0]
        [endpoint] = monitor["spec"]["endpoints"]
        assert (endpoint["port"], endpoint["path"], endpoint["scheme"]) == (
            "metrics",
            "/metrics",
            SCRAPED[name],
        )
        port = next(p for p in service["spec"]["ports"] if p["name"] == "metrics")
        # The Service leads to the Deployment's pods, on the port named "metrics", which is
        # where the process serves /metrics.
        template = deployments[name]["spec"]["template"]
        assert _matches(service["spec"]["selector"], template["metadata"]["labels"])
        spec, container = pods[name]
        declared = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert port["targetPort"] == "metrics"
        assert declared["metrics"] == port["port"] == _listen_port(container["args"])
        del spec
    # The shim's /metrics is authenticated: the monitor sends its ServiceAccount token,
    # and the component carries the role that lets a scraper get /metrics.
    shim = one(monitors, "ServiceMonitor", "berth-scheduler")["spec"]["endpoints"][0]
    assert shim["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    reader = one(docs, "ClusterRole", "berth-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    # Nothing in the component grants anyone anything by itself, nor adds an account.
    assert not [d for d in render(MONITORING) if d["kind"].endswith("Binding")]
    assert not [d for d in render(MONITORING) if d["kind"] == "ServiceAccount"]


@pytest.mark.parametrize("directory", kustomization_dirs(), ids=lambda p: p.name)
def test_base_and_overlays_need_no_prometheus_operator(directory: Path) -> None:
    assert not [d for d in render(directory) if d["apiVersion"].startswith(f"{GROUP}/")]


def test_both_services_name_their_metrics_port_metrics() -> None:
    docs = render(BASE)
    for name in ("berth-scheduler-metrics", "berth-plugin-server"):
        service = one(docs, "Service", name)
        assert "metrics" in [p["name"] for p in service["spec"]["ports"]], name


@pytest.fixture(scope="module")
def servicemonitor_crd(kube: KubeApi) -> Iterator[JSON]:
    """The operator's ServiceMonitor CRD, installed for this module and removed after
    (unless it was there before: a cluster of BERTH_KUBECONFIG may run the operator)."""
    crd = operator_crd()
    name = crd["metadata"]["name"]
    try:
        kube.get(f"{CRDS}/{name}")
        existed = True
    except ApiError as exc:
        if exc.status != 404:
            raise
        existed = False
    ensure_crd_objects(kube, [crd], timeout=60)
    try:
        yield crd
    finally:
        if not existed:
            kube.delete(f"{CRDS}/{name}")


@pytest.fixture(scope="module")
def namespace_ready(kube: KubeApi, cluster: Cluster) -> Iterator[str]:
    with berth_system(kube, cluster.kubeconfig, one(render(BASE), "Namespace")) as ns:
        yield ns


@pytest.mark.integration
def test_base_with_monitoring_applies_on_the_api_server(
    cluster: Cluster, kube: KubeApi, namespace_ready: str, servicemonitor_crd: JSON, tmp_path: Path
) -> None:
    directory = with_monitoring(tmp_path)
    docs = render(directory)
    out = kubectl(
        ["apply", "--dry-run=server", "-k", str(directory)],
        kubeconfig=cluster.kubeconfig,
    )
    reported = sorted(
        ln.split(" ", 1)[0].split("/", 1)[1]
        for ln in out.stdout.splitlines()
        if ln.endswith("(server dry run)")
    )
    assert reported == sorted(d["metadata"]["name"] for d in docs), out.stdout
    assert "Warning" not in out.stderr, out.stderr
    # The monitors for real (server-side apply), read back as the operator would see them.
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    kubectl(
        ["apply", "--server-side", "-f", "-"],
        kubeconfig=cluster.kubeconfig,
        stdin=yaml.safe_dump_all(monitors),
    )
    path = f"/apis/{GROUP}/v1/namespaces/{namespace_ready}/servicemonitors"
    stored = {m["metadata"]["name"]: m for m in kube.get(path)["items"]}
    assert set(stored) == set(SCRAPED)
    for monitor in monitors:
        got = stored[monitor["metadata"]["name"]]["spec"]
        assert got["endpoints"] == monitor["spec"]["endpoints"]
        assert got["selector"] == monitor["spec"]["selector"]


@pytest.mark.integration
def test_a_misspelt_monitor_field_is_refused(
    cluster: Cluster, namespace_ready: str, servicemonitor_crd: JSON, tmp_path: Path
) -> None:
    """The check above can fail: the CRD's schema refuses a field it does not know."""
    monitor = copy.deepcopy(
        one(render(with_monitoring(tmp_path)), "ServiceMonitor", "berth-scheduler")
    )
    endpoint = monitor["spec"]["endpoints"][0]
    endpoint["bearerTokenFil"] = endpoint.pop("bearerTokenFile")
    out = kubectl(
        ["apply", "--server-side", "--dry-run=server", "-f", "-"],
        kubeconfig=cluster.kubeconfig,
        stdin=yaml.safe_dump(monitor),
        check=False,
    )
    assert out.returncode != 0, out.stdout
    assert "bearerTokenFil" in out.stderr, out.stderr
