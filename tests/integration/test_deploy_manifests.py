"""deploy/: the Kustomize base, every overlay and every RBAC component are accepted by a real
kube-apiserver (``kubectl apply -k --dry-run=server``: validation, defaulting and admission,
Pod Security included, nothing persisted), and what they say holds together: the config both
Deployments load is one Berth accepts, flags are ones ``berth`` has, probes, ports, labels and
selectors agree, the containers are locked down, the plugin server gets no API access, and the
Dockerfile copies every package and runs as the manifests' user."""

from __future__ import annotations

import copy
import fnmatch
import os
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import berth
from berth.cli import build_parser
from berth.dev.localcluster import Cluster
from berth.framework.config import parse_config
from berth.kube.rest import JSON, KubeApi
from berth.plugins.registry import load_registry
from berth.server.app import build_frameworks
from tests.integration.deploytools import (
    BASE,
    DEPLOY,
    EXAMPLES,
    LEASE,
    NAMESPACE,
    OVERLAYS,
    ROOT,
    SERVER_SA,
    SHIM_SA,
    berth_system,
    component_dirs,
    containers,
    kubectl,
    kustomization_dirs,
    one,
    render,
    scheduler_config,
)

KUSTOMIZATIONS = kustomization_dirs()
IDS = [str(p.relative_to(DEPLOY)) for p in KUSTOMIZATIONS]
DOCKERFILE = DEPLOY / "Dockerfile"
IMAGE_UID = 65532


@pytest.fixture(scope="module")
def base() -> list[JSON]:
    return render(BASE)


@pytest.fixture(scope="module")
def namespace_ready(kube: KubeApi, cluster: Cluster, base: list[JSON]) -> Iterator[str]:
    with berth_system(kube, cluster.kubeconfig, one(base, "Namespace")) as ns:
        yield ns


def dry_run_apply(
    cluster: Cluster, args: list[str], stdin: str | None = None
) -> tuple[list[str], str]:
    """``kubectl apply --dry-run=server`` (nothing persisted); its "(server dry run)" lines
    and its stderr (where warnings go)."""
    out = kubectl(["apply", "--dry-run=server", *args], kubeconfig=cluster.kubeconfig, stdin=stdin)
    lines = [ln for ln in out.stdout.splitlines() if ln.endswith("(server dry run)")]
    return lines, out.stderr


def assert_all_accepted(cluster: Cluster, directory: Path) -> None:
    docs = render(directory)
    lines, stderr = dry_run_apply(cluster, ["-k", str(directory)])
    # Every object is reported once, e.g. "deployment.apps/berth-scheduler created (server
    # dry run)" or "namespace/berth-system configured (server dry run)".
    reported = sorted(ln.split(" ", 1)[0].split("/", 1)[1] for ln in lines)
    assert reported == sorted(d["metadata"]["name"] for d in docs), lines
    # Warnings would include Pod Security ("would violate PodSecurity ...") and deprecated
    # API versions.
    assert "Warning" not in stderr, stderr


# -- the API server accepts them ------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=IDS)
def test_kustomization_passes_server_side_dry_run(
    cluster: Cluster, namespace_ready: str, directory: Path
) -> None:
    assert_all_accepted(cluster, directory)


@pytest.mark.integration
def test_base_with_every_rbac_component_passes_server_side_dry_run(
    cluster: Cluster, namespace_ready: str, tmp_path: Path
) -> None:
    """The components under deploy/components/ (extra RBAC for plugins that read or write
    more) are used by overlays of plugins that need them; all together on the base here."""
    comps = component_dirs()
    assert comps, "deploy/components/ has no component"
    rel = os.path.relpath(DEPLOY, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [f"{rel}/base"],
                "components": [f"{rel}/components/{c.name}" for c in comps],
            }
        )
    )
    docs = render(tmp_path)
    roles = {d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRole"}
    assert roles == {"berth-scheduler"} | {
        f"berth-scheduler:plugin-{c.name.removeprefix('rbac-')}" for c in comps
    }
    assert_all_accepted(cluster, tmp_path)


@pytest.mark.integration
def test_pod_security_violation_is_reported(
    cluster: Cluster, namespace_ready: str, base: list[JSON]
) -> None:
    """The warning check above can fail: berth-system warns on (and enforces) the restricted
    Pod Security Standard, so a pod template that drops a required setting is reported."""
    server = copy.deepcopy(one(base, "Deployment", "berth-plugin-server"))
    del server["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]
    _, stderr = dry_run_apply(cluster, ["-f", "-"], stdin=yaml.safe_dump(server))
    assert "would violate PodSecurity" in stderr and "capabilities" in stderr, stderr


# -- the configuration both Deployments load --------------------------------------------


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=IDS)
def test_configmap_holds_a_config_berth_loads(directory: Path) -> None:
    docs = render(directory)
    text = scheduler_config(docs)
    config = parse_config(yaml.safe_load(text), f"{directory}/ConfigMap", load_registry())
    assert config.profiles
    # Leader election on the Lease the shim's Role lets it get and update.
    le = config.leader_election
    assert le.leader_elect
    assert (le.resource_namespace, le.resource_name) == (NAMESPACE, LEASE)
    role = one(docs, "Role", "berth-scheduler-leader-election")
    assert role["metadata"]["namespace"] == le.resource_namespace
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named and all(r["resourceNames"] == [le.resource_name] for r in named)
    # Both Deployments mount the generated (hash-suffixed) ConfigMap.
    cm = one(docs, "ConfigMap", "berth-scheduler-config")["metadata"]["name"]
    for name, spec, _ in containers(docs):
        mounted = [v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v]
        assert mounted == [cm], name


@pytest.mark.parametrize("overlay", sorted(OVERLAYS.glob("*/")), ids=lambda p: p.name)
def test_overlay_config_is_its_example_plus_leader_election(overlay: Path) -> None:
    """Kustomize reads files only inside an overlay, so each overlay holds a copy of
    deploy/examples/<name>/scheduler-config.yaml with the in-cluster leaderElection block
    (and no clientConnection.kubeconfig: in the cluster the ServiceAccount's token is used);
    the copy must not drift from the example."""
    example_file = EXAMPLES / overlay.name / "scheduler-config.yaml"
    assert example_file.is_file(), f"overlay {overlay.name} has no example at {example_file}"
    ours = yaml.safe_load((overlay / "scheduler-config.yaml").read_text())
    example = yaml.safe_load(example_file.read_text())
    base_le = yaml.safe_load((BASE / "scheduler-config.yaml").read_text())["leaderElection"]
    assert ours.pop("leaderElection") == base_le
    assert not ours.pop("clientConnection", {}).get("kubeconfig")
    example.pop("clientConnection", None)
    assert ours == example


def _grants(rules: list[JSON], verb: str, group: str, resource: str) -> bool:
    return any(
        not r.get("resourceNames")
        and ({group, "*"} & set(r.get("apiGroups", [])))
        and ({resource, "*"} & set(r.get("resources", [])))
        and ({verb, "*"} & set(r.get("verbs", [])))
        for r in rules
    )


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=IDS)
def test_shim_may_read_every_kind_the_profiles_plugins_declare(directory: Path) -> None:
    """A plugin that reads more than nodes and pods declares it (Plugin.reads); the shim
    lists it cluster-wide, and watches it unless the kind is polled. The overlay that
    enables the plugin must grant that (a component under deploy/components/)."""
    docs = render(directory)
    config = parse_config(
        yaml.safe_load(scheduler_config(docs)), f"{directory}/ConfigMap", load_registry()
    )
    bound = {
        d["roleRef"]["name"]
        for d in docs
        if d["kind"] == "ClusterRoleBinding"
        and {"kind": "ServiceAccount", "name": SHIM_SA, "namespace": NAMESPACE} in d["subjects"]
    }
    rules = [
        r
        for d in docs
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] in bound
        for r in d["rules"]
    ]
    missing = []
    for name, framework in build_frameworks(config, load_registry()).items():
        for read in framework.reads:
            k = read.kind
            for verb in ("list",) if k.poll_seconds > 0 else ("list", "watch"):
                if not _grants(rules, verb, k.group, k.resource):
                    missing.append(f"profile {name}: {verb} {k.resource}.{k.group or 'core'}")
    assert not missing, missing


def test_every_example_has_an_overlay() -> None:
    examples = sorted(p.parent.name for p in EXAMPLES.glob("*/scheduler-config.yaml"))
    missing = [e for e in examples if not (OVERLAYS / e / "kustomization.yaml").is_file()]
    assert not missing, (
        f"deploy/examples/{{{','.join(missing)}}} have no overlay: copy deploy/overlays/avoidnode "
        "to deploy/overlays/<name>, put the example's configuration plus the leaderElection "
        "block in its scheduler-config.yaml, and add a deploy/components/ entry if its plugins "
        "read or write more than nodes and pods (deploy/README.md)"
    )


# -- the workloads -----------------------------------------------------------------------


def test_flags_are_ones_berth_has(base: list[JSON]) -> None:
    parser = build_parser()
    shim = one(base, "Deployment", "berth-scheduler")["spec"]["template"]["spec"]
    args = parser.parse_args(shim["containers"][0]["args"])
    assert args.command == "shim" and args.leader_elect is True
    assert args.server.startswith("dns:///berth-plugin-server.berth-system.svc."), args.server
    assert args.server.endswith(":50051")
    assert args.config == "/etc/berth/scheduler-config.yaml"
    shim_port = shim["containers"][0]["ports"][0]["containerPort"]
    assert args.metrics_listen == f"0.0.0.0:{shim_port}"

    server = one(base, "Deployment", "berth-plugin-server")["spec"]["template"]["spec"]
    sargs = parser.parse_args(server["containers"][0]["args"])
    assert sargs.command == "serve" and sargs.config == "/etc/berth/scheduler-config.yaml"
    ports = {p["name"]: p["containerPort"] for p in server["containers"][0]["ports"]}
    assert sargs.listen == f"0.0.0.0:{ports['grpc']}"
    assert sargs.metrics_listen == f"0.0.0.0:{ports['metrics']}"
    # In-flight calls finish within the pod's grace period, after the preStop pause.
    pre_stop = server["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pre_stop + sargs.grace < server["terminationGracePeriodSeconds"]


def _probes(c: JSON) -> dict[str, JSON]:
    return {k: c[k] for k in ("startupProbe", "livenessProbe", "readinessProbe") if k in c}


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=IDS)
def test_containers_are_locked_down_with_probes_and_resources(directory: Path) -> None:
    docs = render(directory)
    seen = set()
    for name, spec, c in containers(docs):
        seen.add(name)
        pod_sc = spec["securityContext"]
        assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] == IMAGE_UID, name
        assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}, name
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True, name
        assert sc["allowPrivilegeEscalation"] is False, name
        assert sc["capabilities"] == {"drop": ["ALL"]}, name
        for kind in ("requests", "limits"):
            assert set(c["resources"][kind]) == {"cpu", "memory"}, (name, kind)
        probes = _probes(c)
        assert set(probes) == {"startupProbe", "livenessProbe", "readinessProbe"}, name
        for kind, probe in probes.items():
            assert probe.get("timeoutSeconds", 0) >= 1, (name, kind)
            assert probe.get("periodSeconds", 0) >= 1, (name, kind)
        # Python writes nothing to the image; /tmp is the one writable place.
        mounts = {m["mountPath"] for m in c["volumeMounts"]}
        assert "/tmp" in mounts, name
    assert seen == {"berth-scheduler", "berth-plugin-server"}

    shim = one(docs, "Deployment", "berth-scheduler")
    assert shim["spec"]["replicas"] == 2
    sc = shim["spec"]["template"]["spec"]["containers"][0]
    paths = {k: p["httpGet"]["path"] for k, p in _probes(sc).items()}
    assert paths == {
        "startupProbe": "/healthz",
        "livenessProbe": "/healthz",
        "readinessProbe": "/readyz",
    }
    assert {p["httpGet"]["scheme"] for p in _probes(sc).values()} == {"HTTPS"}
    server = one(docs, "Deployment", "berth-plugin-server")
    # The HorizontalPodAutoscaler owns the replica count.
    assert "replicas" not in server["spec"]
    sc = server["spec"]["template"]["spec"]["containers"][0]
    grpc = {k: p["grpc"] for k, p in _probes(sc).items()}
    # The gRPC API is mTLS only; the probes use the plaintext health-only port.
    health = {p["name"]: p["containerPort"] for p in sc["ports"]}["health"]
    assert grpc["readinessProbe"] == {"port": health, "service": "berth.v1.SchedulingService"}
    assert grpc["livenessProbe"]["port"] == health


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_service_autoscaler_budgets_and_network_policy_select_the_right_pods(
    base: list[JSON],
) -> None:
    shim = one(base, "Deployment", "berth-scheduler")
    shim_labels = shim["spec"]["template"]["metadata"]["labels"]
    server = one(base, "Deployment", "berth-plugin-server")
    server_labels = server["spec"]["template"]["metadata"]["labels"]
    assert not _matches(server["spec"]["selector"]["matchLabels"], shim_labels)

    svc = one(base, "Service", "berth-plugin-server")
    assert svc["spec"]["clusterIP"] == "None"  # headless: DNS lists every replica
    assert _matches(svc["spec"]["selector"], server_labels)
    grpc = next(p for p in svc["spec"]["ports"] if p["name"] == "grpc")
    assert grpc["port"] == 50051 and grpc["targetPort"] == "grpc"

    hpa = one(base, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "berth-plugin-server",
    }
    assert hpa["spec"]["minReplicas"] >= 2
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]

    pdbs = {d["metadata"]["name"]: d for d in base if d["kind"] == "PodDisruptionBudget"}
    assert _matches(pdbs["berth-plugin-server"]["spec"]["selector"]["matchLabels"], server_labels)
    assert _matches(pdbs["berth-scheduler"]["spec"]["selector"]["matchLabels"], shim_labels)

    np = one(base, "NetworkPolicy")
    assert _matches(np["spec"]["podSelector"]["matchLabels"], server_labels)
    assert np["spec"]["policyTypes"] == ["Ingress"]
    grpc_rules = [r for r in np["spec"]["ingress"] if any(p["port"] == "grpc" for p in r["ports"])]
    assert len(grpc_rules) == 1
    peers = grpc_rules[0]["from"]
    # The shim's pods (same namespace) get through; nothing else unlabelled does.
    assert any(
        set(p) == {"podSelector"} and _matches(p["podSelector"]["matchLabels"], shim_labels)
        for p in peers
    )
    for p in peers:
        assert p.get("podSelector", {}).get("matchLabels"), f"peer {p} lets any pod through"
        if "namespaceSelector" in p:
            assert p["namespaceSelector"].get("matchLabels"), f"peer {p} opens every namespace"


def test_plugin_server_gets_no_api_access() -> None:
    everything: list[JSON] = []
    for directory in [*KUSTOMIZATIONS, *component_dirs()]:
        everything += render(directory)
    accounts = {
        (d["metadata"]["name"], d.get("automountServiceAccountToken"))
        for d in everything
        if d["kind"] == "ServiceAccount"
    }
    assert accounts == {(SHIM_SA, None), (SERVER_SA, False)}
    for d in everything:
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            subjects = {(s["kind"], s["name"]) for s in d["subjects"]}
            assert subjects == {("ServiceAccount", SHIM_SA)}, d["metadata"]["name"]
    server = one(render(BASE), "Deployment", "berth-plugin-server")["spec"]["template"]["spec"]
    assert server["serviceAccountName"] == SERVER_SA
    assert server["automountServiceAccountToken"] is False


# -- the image ------------------------------------------------------------------------------


def _stages() -> list[list[str]]:
    """The Dockerfile's stages, each a list of instructions (continuations joined)."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    stages: list[list[str]] = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    return stages


def test_dockerfile_copies_every_package_and_runs_as_the_manifests_user(
    base: list[JSON],
) -> None:
    build, runtime = _stages()
    assert build[0].lower().endswith(" as build")
    # ${NAME} in a COPY line is the build argument's default (ARG NAME=default).
    defaults = dict(i.split(None, 1)[1].split("=", 1) for i in build if re.match(r"ARG \w+=", i))
    copied = set()
    for ins in build:
        if ins.startswith("COPY "):
            ins = re.sub(r"\$\{(\w+)\}", lambda m: defaults[m[1]], ins)
            copied.update(ins.split()[1:-1])
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {
        p.parent.name
        for p in ROOT.glob("*/__init__.py")
        if any(fnmatch.fnmatch(p.parent.name, pat) for pat in patterns)
    }
    assert packages and packages <= copied, f"not copied: {packages - copied}"
    assert {"pyproject.toml", pyproject["project"]["readme"]} <= copied
    # The build context file lets through what the COPY lines use.
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    assert ignore[ignore.index("*") :].count("*") == 1
    assert {f"!{c}" for c in copied} <= set(ignore)

    # Runtime: only the built virtualenv, no installer, a numeric non-root user that is
    # the Deployments' runAsUser.
    copies = [i for i in runtime if i.startswith("COPY ")]
    assert copies and all(i.startswith("COPY --from=build ") for i in copies), copies
    text = " ".join(runtime)
    assert "pip install" not in text and "apt-get install" not in text
    assert "pip uninstall --yes --quiet pip setuptools wheel" in text
    users = [i.split()[1] for i in runtime if i.startswith("USER ")]
    assert users == [f"{IMAGE_UID}:{IMAGE_UID}"]
    for name, spec, _ in containers(base):
        assert spec["securityContext"]["runAsUser"] == IMAGE_UID, name
        assert spec["securityContext"]["runAsGroup"] == IMAGE_UID, name
    assert runtime[-2] == 'ENTRYPOINT ["berth"]'


def test_image_tag_is_the_package_version() -> None:
    # pyproject.toml takes the version from berth.__version__ (tool.setuptools.dynamic).
    assert 'version = {attr = "berth.__version__"}' in (ROOT / "pyproject.toml").read_text()
    version = berth.__version__
    kustomization: dict[str, Any] = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    assert kustomization["images"] == [{"name": "berth", "newTag": version}]
    images = {c["image"] for _, _, c in containers(render(BASE))}
    assert images == {f"berth:{version}"}
