"""deploy/chart/berth, the Helm chart for running Berth as a second scheduler, against the
Kustomize base it mirrors.

Without a cluster: ``helm lint --strict`` is clean with the default values and with every
option on; the rendering has no duplicate key; with the default values the chart makes the
base's objects under the base's names, and its pod specs, Deployment strategies and RBAC rules
(the shim's ClusterRole, the leader-election Role, the auth-delegator binding, each plugin
component) are the base's; its configuration loads in Berth with leader election on the Lease
its Role grants; flags are ones ``berth`` has; TLS (existing Secrets, cert-manager, off), the
monitors (port ``metrics``, path ``/metrics``) and out-of-tree plugin images are wired
consistently; values it cannot honour are refused with the field named.

On the local API server (kube-apiserver and kube-controller-manager): the chart is installed
by ``helm install`` (server-side apply) with every option on (with cert-manager's and the
Prometheus Operator's own CRDs, from their Go modules, judging the Certificates, Issuers and
monitors), and deploy/base by ``kubectl apply --server-side -k``, each into a namespace enforcing the restricted Pod Security
Standard; kube-controller-manager's ReplicaSets then create every pod the Deployments ask
for, so the PodSecurity admission plugin accepted each pod spec (a spec it rejects leaves a
FailedCreate event, which a control with one setting removed shows). SubjectAccessReviews
show the chart's shim account may do everything the base's rules grant, on the real
authorizer, and no more than the samples of what it must not do.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.cli import build_parser
from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL
from berth.framework.config import parse_config
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi
from berth.plugins.registry import load_registry
from tests.integration.deploytools import (
    BASE,
    CHART,
    COMPONENTS,
    NAMESPACE,
    ROOT,
    berth_system,
    delete_objects,
    helm,
    helm_template,
    kubectl,
    one,
    render,
    render_chart,
)

# Every option on: cert-manager TLS, both monitors, every plugin RBAC component plus extra
# rules, an out-of-tree plugin image.
ALL_ON: dict[str, Any] = {
    "tls": {"source": "cert-manager"},
    "metrics": {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}},
    "rbac": {
        "plugins": {
            "nodeMetrics": True,
            "podGroups": True,
            "podPatch": True,
            "workloadPodGroups": True,
            "kubevirtOwners": True,
        },
        "extraRules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["list"]}],
    },
    "outOfTreePlugins": {
        "images": [{"name": "prefer-zone", "reference": "registry.example.com/pz:1.0.0"}]
    },
}
COMPONENT_VALUES = {
    "rbac-node-metrics": "nodeMetrics",
    "rbac-podgroups": "podGroups",
    "rbac-pod-patch": "podPatch",
    "rbac-workload-podgroups": "workloadPodGroups",
    "rbac-kubevirt-owners": "kubevirtOwners",
}
INSTANCE = "app.kubernetes.io/instance"


@pytest.fixture(scope="module")
def base() -> list[JSON]:
    return render(BASE)


@pytest.fixture(scope="module")
def chart() -> list[JSON]:
    return render_chart()


def _named(docs: list[JSON], kind: str, name: str) -> JSON:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"want one {kind} {name}, found {len(found)}"
    return found[0]


def _pod_spec(docs: list[JSON], name: str) -> JSON:
    spec: JSON = _named(docs, "Deployment", name)["spec"]["template"]["spec"]
    return spec


# -- helm lint, rendering ---------------------------------------------------------------------


@pytest.mark.parametrize("values", [None, ALL_ON], ids=["defaults", "all-on"])
def test_helm_lint_strict_is_clean(values: dict[str, Any] | None, tmp_path: Path) -> None:
    args = ["lint", "--strict", str(CHART), "--namespace", NAMESPACE]
    if values:
        (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
        args += ["--values", str(tmp_path / "values.yaml")]
    out = helm(args)
    assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout, out.stdout
    assert "[WARNING]" not in out.stdout and "[ERROR]" not in out.stdout, out.stdout


def test_default_values_make_the_base_objects_under_the_base_names(
    base: list[JSON], chart: list[JSON]
) -> None:
    """`helm install berth -n berth-system` and `kubectl apply -k deploy/base` make the same
    objects, except the Namespace (Helm installs into one) and the ConfigMap's hash suffix
    (Helm rolls the pods by a checksum annotation instead). The shim's metrics Service is
    in both (the chart has it whether or not the base has it yet)."""

    def names(docs: list[JSON]) -> set[tuple[str, str]]:
        return {(d["kind"], re.sub(r"-[a-z0-9]{10}$", "", d["metadata"]["name"])) for d in docs}

    assert names(chart) == (names(base) - {("Namespace", NAMESPACE)}) | {
        ("Service", "berth-scheduler-metrics")
    }
    for d in chart:
        if d["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert d["metadata"]["namespace"] == NAMESPACE, d["metadata"]["name"]
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "berth"


def _normalised(spec: JSON) -> JSON:
    """A pod or Deployment spec without what differs by construction: the chart's selectors
    also carry the release (app.kubernetes.io/instance), the base's ConfigMap has a hash
    suffix."""
    out = copy.deepcopy(spec)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            # matchLabels, and a Service's selector (a plain map).
            for key in ("matchLabels", "selector"):
                labels = node.get(key)
                if isinstance(labels, dict):
                    labels.pop(INSTANCE, None)
            if isinstance(node.get("configMap"), dict):
                node["configMap"]["name"] = "CONFIG"
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(out)
    return out


@pytest.mark.parametrize("name", ["berth-scheduler", "berth-plugin-server"])
def test_default_pod_specs_are_the_base_ones(
    base: list[JSON], chart: list[JSON], name: str
) -> None:
    """Security contexts, probes, args, ports, resources, volumes, affinity: the whole pod spec
    and the Deployment's replicas, strategy and selector."""
    ours = _named(chart, "Deployment", name)["spec"]
    theirs = one(base, "Deployment", name)["spec"]
    assert _normalised(ours["template"]["spec"]) == _normalised(theirs["template"]["spec"])
    for key in ("replicas", "strategy", "selector"):
        assert _normalised(ours).get(key) == _normalised(theirs).get(key), key
    # The pods are what the Services, budgets and policies select.
    labels = ours["template"]["metadata"]["labels"]
    assert ours["selector"]["matchLabels"].items() <= labels.items()
    assert labels["app.kubernetes.io/name"] == name


@pytest.mark.parametrize(
    "kind,name",
    [
        ("PodDisruptionBudget", "berth-scheduler"),
        ("PodDisruptionBudget", "berth-plugin-server"),
        ("HorizontalPodAutoscaler", "berth-plugin-server"),
        ("NetworkPolicy", "berth-plugin-server"),
        ("Service", "berth-plugin-server"),
    ],
)
def test_default_budgets_autoscaler_policy_and_service_are_the_base_ones(
    base: list[JSON], chart: list[JSON], kind: str, name: str
) -> None:
    assert _normalised(_named(chart, kind, name)["spec"]) == _normalised(
        one(base, kind, name)["spec"]
    )


def _shim_args(docs: list[JSON], name: str = "berth-scheduler") -> list[str]:
    args: list[str] = _pod_spec(docs, name)["containers"][0]["args"]
    return args


def _config(docs: list[JSON], name: str = "berth-scheduler-config") -> JSON:
    text = _named(docs, "ConfigMap", name)["data"]["scheduler-config.yaml"]
    loaded: JSON = yaml.safe_load(text)
    return loaded


@pytest.mark.parametrize(
    "release,namespace", [("berth", NAMESPACE), ("sched", "platform")], ids=["berth", "other"]
)
def test_config_loads_in_berth_with_the_lease_its_role_grants(release: str, namespace: str) -> None:
    docs = render_chart(
        {
            "config": {
                "profiles": [{"schedulerName": "gpu-scheduler"}],
                "percentageOfNodesToScore": 50,
            }
        },
        release=release,
        namespace=namespace,
    )
    fullname = "berth" if release == "berth" else f"{release}-berth"
    raw = _config(docs, f"{fullname}-scheduler-config")
    config = parse_config(raw, "chart ConfigMap", load_registry())
    assert [p.scheduler_name for p in config.profiles] == ["gpu-scheduler"]
    assert raw["percentageOfNodesToScore"] == 50
    le = config.leader_election
    assert le.leader_elect
    assert (le.resource_namespace, le.resource_name) == (namespace, f"{fullname}-scheduler")
    role = _named(docs, "Role", f"{fullname}-scheduler-leader-election")
    assert role["metadata"]["namespace"] == namespace
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named and all(r["resourceNames"] == [le.resource_name] for r in named)
    # The shim dials the plugin servers' Service in the release's namespace.
    parser = build_parser()
    args = parser.parse_args(_shim_args(docs, f"{fullname}-scheduler"))
    assert args.server == f"dns:///{fullname}-plugin-server.{namespace}.svc.cluster.local:50051"
    _named(docs, "Service", f"{fullname}-plugin-server")
    # A config change rolls both Deployments: their pods carry its checksum.
    other = render_chart(
        {"config": {"profiles": [{"schedulerName": "gpu-scheduler"}]}},
        release=release,
        namespace=namespace,
    )
    for name in (f"{fullname}-scheduler", f"{fullname}-plugin-server"):
        sums = {
            _named(d, "Deployment", name)["spec"]["template"]["metadata"]["annotations"][
                "checksum/config"
            ]
            for d in (docs, other)
        }
        assert len(sums) == 2, name


@pytest.mark.parametrize("values", [None, ALL_ON, {"tls": {"enabled": False}}])
def test_flags_are_ones_berth_has(values: dict[str, Any] | None) -> None:
    docs = render_chart(values)
    parser = build_parser()
    shim = parser.parse_args(_shim_args(docs))
    assert shim.command == "shim" and shim.leader_elect is True
    server = parser.parse_args(_pod_spec(docs, "berth-plugin-server")["containers"][0]["args"])
    assert server.command == "serve"


# -- TLS --------------------------------------------------------------------------------------


def _mounted_secret(docs: list[JSON], deployment: str) -> str:
    spec = _pod_spec(docs, deployment)
    name: str = next(v["secret"]["secretName"] for v in spec["volumes"] if v["name"] == "tls")
    return name


def test_cert_manager_certificates_name_the_host_the_shim_dials() -> None:
    docs = render_chart({"tls": {"source": "cert-manager"}}, release="b2", namespace="sched")
    server_cert = _named(docs, "Certificate", "b2-berth-plugin-server")["spec"]
    shim_cert = _named(docs, "Certificate", "b2-berth-scheduler")["spec"]
    host = build_parser().parse_args(_shim_args(docs, "b2-berth-scheduler")).server
    assert host == f"dns:///{server_cert['dnsNames'][0]}:50051"
    assert server_cert["usages"] == ["server auth", "digital signature"]
    assert shim_cert["usages"] == ["client auth", "digital signature"]
    # Each side mounts the Secret its certificate is written to; one CA signs both.
    assert server_cert["secretName"] == _mounted_secret(docs, "b2-berth-plugin-server")
    assert shim_cert["secretName"] == _mounted_secret(docs, "b2-berth-scheduler")
    assert (
        server_cert["issuerRef"]
        == shim_cert["issuerRef"]
        == {"kind": "Issuer", "name": "b2-berth-ca"}
    )
    ca = _named(docs, "Certificate", "b2-berth-ca")["spec"]
    assert ca["isCA"] is True
    assert _named(docs, "Issuer", "b2-berth-ca")["spec"] == {"ca": {"secretName": ca["secretName"]}}
    # An issuer of the user's own replaces the chart's CA.
    own = render_chart(
        {
            "tls": {
                "source": "cert-manager",
                "certManager": {"issuerRef": {"kind": "ClusterIssuer", "name": "corp"}},
            }
        }
    )
    assert {d["kind"] for d in own if d["kind"] in ("Issuer", "Certificate")} == {"Certificate"}
    assert {c["spec"]["issuerRef"]["name"] for c in own if c["kind"] == "Certificate"} == {"corp"}


def test_existing_secrets_are_the_ones_berth_certs_makes(chart: list[JSON]) -> None:
    assert _mounted_secret(chart, "berth-plugin-server") == "berth-plugin-server-tls"
    assert _mounted_secret(chart, "berth-scheduler") == "berth-scheduler-tls"
    assert not [d for d in chart if d["kind"] in ("Certificate", "Issuer")]
    notes = (
        helm_template().stdout
        + helm(["install", "berth", str(CHART), "-n", NAMESPACE, "--dry-run=client"]).stdout
    )
    assert (
        "berth certs --namespace berth-system --service berth-plugin-server | kubectl apply -f -"
        in notes
    )


def test_tls_off_is_plaintext_on_both_sides_explicitly() -> None:
    docs = render_chart({"tls": {"enabled": False}})
    for name in ("berth-scheduler", "berth-plugin-server"):
        spec = _pod_spec(docs, name)
        args = spec["containers"][0]["args"]
        assert "--insecure-plaintext" in args, name
        assert not [a for a in args if "/etc/berth/tls" in a], name
        assert "tls" not in {v["name"] for v in spec["volumes"]}, name
    svc = _named(docs, "Service", "berth-plugin-server")
    assert {p["name"]: p.get("appProtocol") for p in svc["spec"]["ports"]}["grpc"] == "http"


# -- monitors, plugins ------------------------------------------------------------------------


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_monitors_scrape_port_metrics_at_path_metrics() -> None:
    docs = render_chart(ALL_ON)
    services = {
        d["metadata"]["name"].removesuffix("-metrics"): d for d in docs if d["kind"] == "Service"
    }
    reader = _named(docs, "Secret", "berth-metrics-reader")
    assert reader["type"] == "kubernetes.io/service-account-token"
    for name, scheme in (("berth-scheduler", "https"), ("berth-plugin-server", "http")):
        pod = _named(docs, "Deployment", name)["spec"]["template"]
        assert "metrics" in {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
        sm = _named(docs, "ServiceMonitor", name)["spec"]
        pm = _named(docs, "PodMonitor", name)["spec"]
        svc = services[name]
        assert _matches(sm["selector"]["matchLabels"], svc["metadata"]["labels"])
        assert _matches(svc["spec"]["selector"], pod["metadata"]["labels"])
        assert "metrics" in {p["name"] for p in svc["spec"]["ports"]}
        assert _matches(pm["selector"]["matchLabels"], pod["metadata"]["labels"])
        for endpoint in (sm["endpoints"][0], pm["podMetricsEndpoints"][0]):
            assert (endpoint["port"], endpoint["path"], endpoint["scheme"]) == (
                "metrics",
                "/metrics",
                scheme,
            )
            if scheme == "https":
                # The shim's /metrics needs a token allowed get on it.
                assert endpoint["authorization"]["credentials"]["name"] == "berth-metrics-reader"
    role = _named(docs, "ClusterRole", "berth-metrics-reader")
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


def test_out_of_tree_plugin_images_are_mounted_read_only_and_on_pythonpath() -> None:
    docs = render_chart(ALL_ON)
    for name in ("berth-scheduler", "berth-plugin-server"):
        spec = _pod_spec(docs, name)
        volume = next(v for v in spec["volumes"] if v["name"] == "plugin-prefer-zone")
        assert volume["image"] == {
            "reference": "registry.example.com/pz:1.0.0",
            "pullPolicy": "IfNotPresent",
        }
        c = spec["containers"][0]
        mount = next(m for m in c["volumeMounts"] if m["name"] == "plugin-prefer-zone")
        assert mount == {
            "name": "plugin-prefer-zone",
            "mountPath": "/opt/berth-plugins/prefer-zone",
            "readOnly": True,
        }
        assert c["env"] == [{"name": "PYTHONPATH", "value": "/opt/berth-plugins/prefer-zone"}]


# -- values the chart refuses -----------------------------------------------------------------


@pytest.mark.parametrize(
    "values,message",
    [
        ({"config": {"leaderElection": {"leaderElect": False}}}, "config.leaderElection is set by the chart"),
        ({"config": {"profiles": []}}, "at '/config/profiles': minItems: got 0, want 1"),
        ({"config": {"profiles": [{"schedulerName": "default-scheduler"}]}}, "other than default-scheduler"),
        ({"scheduler": {"leaderElection": {"enabled": False}}}, "scheduler.replicas > 1 needs"),
        ({"tls": {"source": "vault"}}, "at '/tls/source': value must be one of 'existing', 'cert-manager'"),
        ({"scheduler": {"replica": 3}}, "at '/scheduler': additional properties 'replica' not allowed"),
        ({"pluginServer": {"autoscaling": {"maxReplicas": "ten"}}}, "at '/pluginServer/autoscaling/maxReplicas'"),
        ({"outOfTreePlugins": {"images": [{"name": "x"}]}}, "reference (the image) is required"),
        ({"outOfTreePlugins": {"images": [{"name": "Bad_Name", "reference": "r"}]}}, 'name "Bad_Name"'),
    ],
    ids=["leader-election", "no-profiles", "default-scheduler", "replicas-without-election", "tls-source", "misspelt", "not-a-number", "no-reference", "bad-name"],
)  # fmt: skip
def test_values_it_cannot_honour_are_refused(values: dict[str, Any], message: str) -> None:
    out = helm_template(values, check=False)
    assert out.returncode != 0
    assert message in out.stderr, out.stderr


def test_one_replica_without_leader_election_is_allowed() -> None:
    docs = render_chart({"scheduler": {"replicas": 1, "leaderElection": {"enabled": False}}})
    assert "--no-leader-elect" in _shim_args(docs)
    assert _config(docs)["leaderElection"]["leaderElect"] is False
    assert not [d for d in docs if d["kind"] == "Role"]


# -- RBAC -------------------------------------------------------------------------------------


def _rule_set(rules: list[JSON]) -> set[tuple[str, str, str, str]]:
    """(group, resource, resourceName, verb) for every combination a rule list grants."""
    return {
        (g, r, n, v)
        for rule in rules
        for g in rule.get("apiGroups", [])
        for r in rule.get("resources", [])
        for n in rule.get("resourceNames", [""])
        for v in rule["verbs"]
    }


def test_chart_rbac_is_the_base_rbac(base: list[JSON], chart: list[JSON]) -> None:
    assert _rule_set(_named(chart, "ClusterRole", "berth-scheduler")["rules"]) == _rule_set(
        one(base, "ClusterRole", "berth-scheduler")["rules"]
    )
    assert _rule_set(
        _named(chart, "Role", "berth-scheduler-leader-election")["rules"]
    ) == _rule_set(one(base, "Role", "berth-scheduler-leader-election")["rules"])
    for kind, name in (
        ("ClusterRoleBinding", "berth-scheduler"),
        ("ClusterRoleBinding", "berth-scheduler:auth-delegator"),
        ("RoleBinding", "berth-scheduler-leader-election"),
    ):
        ours, theirs = _named(chart, kind, name), _named(base, kind, name)
        assert ours["roleRef"] == theirs["roleRef"], name
        assert ours["subjects"] == theirs["subjects"], name


@pytest.mark.parametrize("component", sorted(COMPONENT_VALUES))
def test_chart_plugin_rbac_is_the_component_rbac(component: str) -> None:
    assert (COMPONENTS / component).is_dir()
    theirs = _component_docs(component)
    docs = render_chart({"rbac": {"plugins": {COMPONENT_VALUES[component]: True}}})
    name = f"berth-scheduler:plugin-{component.removeprefix('rbac-')}"
    assert _rule_set(_named(docs, "ClusterRole", name)["rules"]) == _rule_set(
        one(theirs, "ClusterRole", name)["rules"]
    )
    ours_binding = _named(docs, "ClusterRoleBinding", name)
    assert ours_binding["subjects"] == one(theirs, "ClusterRoleBinding", name)["subjects"]
    # Off by default.
    assert not [d for d in render_chart() if d["metadata"]["name"] == name]


def _component_docs(component: str) -> list[JSON]:
    """A component's objects (a Kustomize Component cannot be rendered alone)."""
    return [d for d in yaml.safe_load_all((COMPONENTS / component / "rbac.yaml").read_text()) if d]


def test_every_component_has_a_chart_value() -> None:
    assert sorted(p.name for p in COMPONENTS.glob("rbac-*")) == sorted(COMPONENT_VALUES)


# -- on the local API server ------------------------------------------------------------------

# The CRDs the chart's optional kinds need, as cert-manager and the Prometheus Operator ship
# them (their schemas judge what the chart sets), from their Go modules: the Go module cache,
# else the module proxy.
OPERATOR_CRDS = (
    (
        "github.com/cert-manager/cert-manager@v1.21.2",
        (
            "deploy/crds/cert-manager.io_certificates.yaml",
            "deploy/crds/cert-manager.io_issuers.yaml",
        ),
    ),
    (
        "github.com/prometheus-operator/prometheus-operator@v0.85.0",
        (
            "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
            "example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml",
        ),
    ),
)
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
OPERATED = ("cert-manager.io", "monitoring.coreos.com")


def operator_crds() -> list[JSON]:
    crds: list[JSON] = []
    for module, files in OPERATOR_CRDS:
        argv = ["go", "mod", "download", "-json", module]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        info = json.loads(out.stdout or "{}")
        if out.returncode != 0 or "Dir" not in info:
            raise AssertionError(
                f"{' '.join(argv)} failed (is the Go module proxy reachable?): "
                f"{info.get('Error') or out.stderr[-2000:]}"
            )
        for name in files:
            crd: JSON = yaml.safe_load((Path(info["Dir"]) / name).read_text())
            crds.append(crd)
    return crds


def _wait(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


def _failed_creates(kube: KubeApi, namespace: str) -> list[str]:
    events = kube.list(f"/api/v1/namespaces/{namespace}/events").items
    return [e.get("message", "") for e in events if e.get("reason") == "FailedCreate"]


def _pods_of(kube: KubeApi, namespace: str, deployment: JSON) -> list[JSON]:
    selector = ",".join(
        f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items()
    )
    return kube.list(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector).items


def assert_every_pod_is_created(kube: KubeApi, namespace: str, docs: list[JSON]) -> None:
    """kube-controller-manager creates each Deployment's pods through a ReplicaSet; the
    restricted namespace's PodSecurity admission judges every one. A Deployment without
    replicas (the HPA owns the count; no HPA controller runs here) gets 1."""
    for d in (d for d in docs if d["kind"] == "Deployment"):
        want = d["spec"].get("replicas", 1)
        name = d["metadata"]["name"]

        def created(d: JSON = d, want: int = want) -> bool:
            failed = _failed_creates(kube, namespace)
            assert not failed, (
                f"ReplicaSet of {d['metadata']['name']} could not create pods: {failed}"
            )
            return len(_pods_of(kube, namespace, d)) == want

        _wait(f"{want} pod(s) of {name} in {namespace}", created)
        for pod in _pods_of(kube, namespace, d):
            # The pod as admitted: the Deployment's spec, not something defaulted around it.
            assert pod["spec"]["securityContext"]["runAsNonRoot"] is True, name
            assert pod["spec"]["containers"][0]["securityContext"]["capabilities"] == {
                "drop": ["ALL"]
            }


def assert_a_violation_is_refused(
    kube: KubeApi, kubeconfig: Path, namespace: str, docs: list[JSON]
) -> None:
    """The control: the same shim Deployment with its capabilities no longer dropped gets no
    pod, and its ReplicaSet reports PodSecurity's refusal."""
    bad = copy.deepcopy(next(d for d in docs if d["kind"] == "Deployment"))
    bad["metadata"] = {"name": "restricted-control", "namespace": namespace}
    labels = {"app.kubernetes.io/name": "restricted-control"}
    bad["spec"]["selector"] = {"matchLabels": labels}
    bad["spec"]["replicas"] = 1
    template = bad["spec"]["template"]
    template["metadata"] = {"labels": labels}
    template["spec"]["affinity"] = {}
    del template["spec"]["containers"][0]["securityContext"]["capabilities"]
    kubectl(["apply", "--server-side", "-f", "-"], kubeconfig=kubeconfig, stdin=yaml.safe_dump(bad))
    try:
        failed = _wait(
            "FailedCreate of restricted-control", lambda: _failed_creates(kube, namespace)
        )
        assert any("violates PodSecurity" in m and "capabilities" in m for m in failed), failed
        assert not _pods_of(kube, namespace, bad)
    finally:
        kubectl(
            ["delete", "deployment", "restricted-control", "-n", namespace, "--wait=false"],
            kubeconfig=kubeconfig,
        )
        _wait("restricted-control's events gone", lambda: _clear_events(kube, namespace))


def _clear_events(kube: KubeApi, namespace: str) -> bool:
    for e in kube.list(f"/api/v1/namespaces/{namespace}/events").items:
        if e.get("reason") == "FailedCreate":
            try:
                kube.delete(f"/api/v1/namespaces/{namespace}/events/{e['metadata']['name']}")
            except ApiError as err:
                if err.status != 404:
                    raise
    return not _failed_creates(kube, namespace)


@dataclass(frozen=True)
class Installed:
    release: str
    namespace: str
    docs: list[JSON]


@pytest.fixture(scope="module")
def installed_chart(kube: KubeApi, cluster: Cluster) -> Iterator[Installed]:
    """The chart with every option on, installed by helm (server-side apply) into a fresh
    namespace that enforces the restricted Pod Security Standard."""
    suffix = uuid.uuid4().hex[:6]
    release, namespace = f"t-{suffix}", f"t-chart-{suffix}"
    # Only the CRDs this fixture adds are removed afterwards.
    wanted = operator_crds()
    crds = []
    for crd in wanted:
        try:
            kube.get(f"{CRDS}/{crd['metadata']['name']}")
        except ApiError as err:
            if err.status != 404:
                raise
            crds.append(crd)
    if crds:
        kubectl(
            ["apply", "--server-side", "-f", "-"],
            kubeconfig=cluster.kubeconfig,
            stdin=yaml.safe_dump_all(crds),
        )
    for crd in wanted:
        kubectl(
            ["wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}"],
            kubeconfig=cluster.kubeconfig,
        )
    objects.create_namespace(
        kube,
        namespace,
        labels={
            TEST_LABEL: "true",
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
        },
    )
    values = Path(cluster.kubeconfig).parent / f"values-{suffix}.yaml"
    values.write_text(yaml.safe_dump(ALL_ON))
    try:
        out = helm(
            [
                "install",
                release,
                str(CHART),
                "--namespace",
                namespace,
                "--values",
                str(values),
                "--server-side=true",
            ],
            kubeconfig=cluster.kubeconfig,
        )
        assert "STATUS: deployed" in out.stdout, out.stdout
        yield Installed(
            release, namespace, render_chart(ALL_ON, release=release, namespace=namespace)
        )
    finally:
        helm(
            ["uninstall", release, "--namespace", namespace],
            kubeconfig=cluster.kubeconfig,
            check=False,
        )
        objects.delete_namespace(kube, namespace)
        delete_objects(kube, cluster.kubeconfig, crds)


@pytest.mark.integration
def test_chart_installs_and_its_pods_pass_the_restricted_level(
    kube: KubeApi, cluster: Cluster, installed_chart: Installed
) -> None:
    ns = installed_chart.namespace
    # Every object the chart renders is on the server, as helm applied it.
    listed = kubectl(
        ["get", "-f", "-", "-o", "name"],
        kubeconfig=cluster.kubeconfig,
        stdin=yaml.safe_dump_all(installed_chart.docs),
    ).stdout.split()
    assert len(listed) == len(installed_chart.docs), listed
    # By server-side apply: helm's field manager owns the fields by an Apply operation.
    shim = kube.get(
        f"/apis/apps/v1/namespaces/{ns}/deployments/{installed_chart.release}-berth-scheduler"
    )
    assert {(m["manager"], m["operation"]) for m in shim["metadata"]["managedFields"]} >= {
        ("helm", "Apply")
    }, shim["metadata"]["managedFields"]
    # The operators' kinds against their CRDs' schemas, strictly: an unknown field is an error
    # (pruning would drop it silently), as a misspelt one shows.
    operated = [d for d in installed_chart.docs if d["apiVersion"].split("/")[0] in OPERATED]
    assert {d["kind"] for d in operated} == {
        "Certificate",
        "Issuer",
        "ServiceMonitor",
        "PodMonitor",
    }
    strict = ["apply", "--server-side", "--dry-run=server", "--validate=strict", "-f", "-"]
    kubectl(strict, kubeconfig=cluster.kubeconfig, stdin=yaml.safe_dump_all(operated))
    misspelt = copy.deepcopy(next(d for d in operated if d["kind"] == "PodMonitor"))
    misspelt["spec"]["podMetricsEndpoints"][0]["bearerTokenFile"] = "/token"
    refused = kubectl(
        strict, kubeconfig=cluster.kubeconfig, stdin=yaml.safe_dump(misspelt), check=False
    )
    assert refused.returncode != 0 and "bearerTokenFile" in refused.stderr, refused.stderr
    assert_every_pod_is_created(kube, ns, installed_chart.docs)
    # The monitors' token: the API server's token controller fills the Secret.
    reader = f"{installed_chart.release}-berth-metrics-reader"
    _wait(
        f"a token in Secret {reader}",
        lambda: kube.get(f"/api/v1/namespaces/{ns}/secrets/{reader}").get("data", {}).get("token"),
    )
    assert_a_violation_is_refused(kube, cluster.kubeconfig, ns, installed_chart.docs)


@pytest.mark.integration
def test_kustomize_base_installs_and_its_pods_pass_the_restricted_level(
    kube: KubeApi, cluster: Cluster, base: list[JSON]
) -> None:
    with berth_system(kube, cluster.kubeconfig, one(base, "Namespace")) as ns:
        labels = kube.get(f"/api/v1/namespaces/{ns}")["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
        try:
            kubectl(["apply", "--server-side", "-k", str(BASE)], kubeconfig=cluster.kubeconfig)
            assert_every_pod_is_created(kube, ns, base)
            assert_a_violation_is_refused(kube, cluster.kubeconfig, ns, base)
        finally:
            delete_objects(kube, cluster.kubeconfig, [d for d in base if d["kind"] != "Namespace"])


def _allowed(kube: KubeApi, user: str, attrs: JSON) -> bool:
    review = kube.create(
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": [
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{user.split(':')[2]}",
                ],
                "resourceAttributes": attrs,
            },
        },
    )
    return bool(review["status"].get("allowed"))


@pytest.mark.integration
def test_chart_rbac_grants_the_shim_what_the_base_grants_and_no_more(
    kube: KubeApi, base: list[JSON], installed_chart: Installed
) -> None:
    ns, release = installed_chart.namespace, installed_chart.release
    user = f"system:serviceaccount:{ns}:{release}-berth-scheduler"
    missing = []
    for group, resource, _, verb in sorted(
        _rule_set(one(base, "ClusterRole", "berth-scheduler")["rules"])
    ):
        resource, _, sub = resource.partition("/")
        attrs = {
            "group": group,
            "resource": resource,
            "subresource": sub,
            "verb": verb,
            "namespace": "default",
        }
        if not _allowed(kube, user, attrs):
            missing.append(f"{verb} {resource}{'/' + sub if sub else ''}.{group or 'core'}")
    lease = {"group": "coordination.k8s.io", "resource": "leases", "namespace": ns}
    for verb in ("get", "update"):
        if not _allowed(kube, user, {**lease, "verb": verb, "name": f"{release}-berth-scheduler"}):
            missing.append(f"{verb} its Lease")
    if not _allowed(kube, user, {**lease, "verb": "create"}):
        missing.append("create a Lease")
    for verb in ("create",):
        for group, resource in (
            ("authentication.k8s.io", "tokenreviews"),
            ("authorization.k8s.io", "subjectaccessreviews"),
        ):
            if not _allowed(kube, user, {"group": group, "resource": resource, "verb": verb}):
                missing.append(f"{verb} {resource}")
    assert not missing, f"the chart's shim account lacks what the base grants: {missing}"
    # The plugin components the chart turned on (ALL_ON), and the extra rule.
    assert _allowed(kube, user, {"group": "metrics.k8s.io", "resource": "nodes", "verb": "list"})
    assert _allowed(kube, user, {"group": "example.com", "resource": "widgets", "verb": "list"})
    # Samples of what it must not do.
    for attrs in (
        {"group": "", "resource": "nodes", "verb": "delete"},
        {"group": "", "resource": "secrets", "verb": "get", "namespace": ns},
        {"group": "", "resource": "pods", "verb": "update", "namespace": "default"},
        {
            "group": "coordination.k8s.io",
            "resource": "leases",
            "verb": "update",
            "namespace": ns,
            "name": "other",
        },
        {
            "group": "coordination.k8s.io",
            "resource": "leases",
            "verb": "create",
            "namespace": "default",
        },
    ):
        assert not _allowed(kube, user, attrs), attrs
    # The plugin servers' account may do nothing.
    server = f"system:serviceaccount:{ns}:{release}-berth-plugin-server"
    assert not _allowed(kube, server, {"group": "", "resource": "pods", "verb": "list"})


def test_a_pip_install_target_tree_on_pythonpath_adds_its_plugins(tmp_path: Path) -> None:
    """What outOfTreePlugins.images mounts: a ``pip install --target`` tree, found through
    PYTHONPATH by Berth's entry-point discovery (here from the dev venv, which does not have
    the example plugin installed)."""
    berth = Path(sys.executable).parent / "berth"
    root = tmp_path / "plugin-root"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(root), str(ROOT / "examples" / "out-of-tree-plugin")],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    without = subprocess.run(
        [berth, "plugins"], capture_output=True, text=True, env=env, check=True
    )
    assert "PreferLabel" not in without.stdout
    with_tree = subprocess.run(
        [berth, "plugins"],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(root)},
        check=True,
    )
    assert "PreferLabel" in with_tree.stdout, with_tree.stdout + with_tree.stderr
