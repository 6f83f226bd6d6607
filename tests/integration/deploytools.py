"""Helpers for the tests of deploy/: the pinned kubectl and helm, kustomize and chart
rendering, and the ``berth-system`` namespace in the test cluster.

kubectl and helm are the ones hack/build-k8s.sh builds (kubectl's embedded kustomize renders
the kustomizations, helm the chart); a missing binary fails with the build command, as
conftest.py's fixtures do.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from berth.dev.localcluster import objects
from berth.dev.localcluster.binaries import default_bin_dir, require_binaries
from berth.dev.localcluster.testing import TEST_LABEL
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BASE = DEPLOY / "base"
OVERLAYS = DEPLOY / "overlays"
COMPONENTS = DEPLOY / "components"
MONITORING = COMPONENTS / "monitoring"
EXAMPLES = DEPLOY / "examples"
CHART = DEPLOY / "chart" / "berth"
NAMESPACE = "berth-system"
SHIM_SA = "berth-scheduler"
SERVER_SA = "berth-plugin-server"
LEASE = "berth-scheduler"


def kubectl_binary() -> Path:
    directory = default_bin_dir()
    require_binaries(directory, ("kubectl",))
    return directory / "kubectl"


def helm_binary() -> Path:
    directory = default_bin_dir()
    require_binaries(directory, ("helm",))
    return directory / "helm"


def _run(
    argv: list[str], stdin: str | None, check: bool, timeout: float
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and out.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv[1:])} exited {out.returncode}\n"
            f"stdout:\n{out.stdout[-4000:]}\nstderr:\n{out.stderr[-4000:]}"
        )
    return out


def helm(
    args: Sequence[str],
    *,
    kubeconfig: Path | None = None,
    check: bool = True,
    timeout: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """Runs helm; with ``check``, a non-zero exit is an AssertionError carrying its output."""
    argv = [str(helm_binary()), *args]
    if kubeconfig is not None:
        argv += ["--kubeconfig", str(kubeconfig)]
    return _run(argv, None, check, timeout)


def helm_template(
    values: dict[str, Any] | None = None,
    *,
    release: str = "berth",
    namespace: str = NAMESPACE,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``helm template`` of deploy/chart/berth with ``values`` on top of values.yaml."""
    argv = [str(helm_binary()), "template", release, str(CHART), "--namespace", namespace]
    stdin = None
    if values:
        argv += ["--values", "-"]
        stdin = yaml.safe_dump(values)
    return _run(argv, stdin, check, 120.0)


def render_chart(
    values: dict[str, Any] | None = None, *, release: str = "berth", namespace: str = NAMESPACE
) -> list[JSON]:
    """The chart rendered with ``values``, as objects; a duplicate key anywhere fails."""
    text = helm_template(values, release=release, namespace=namespace).stdout
    return [d for d in yaml.load_all(text, Loader=_UniqueKeyLoader) if d]


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a mapping with a repeated key (PyYAML keeps the last one;
    the API server's strict decoding refuses it)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def kubectl(
    args: Sequence[str],
    *,
    kubeconfig: Path | None = None,
    stdin: str | None = None,
    check: bool = True,
    timeout: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """Runs kubectl; with ``check``, a non-zero exit is an AssertionError carrying its
    output."""
    argv = [str(kubectl_binary()), *args]
    if kubeconfig is not None:
        argv += ["--kubeconfig", str(kubeconfig)]
    return _run(argv, stdin, check, timeout)


def kustomization_dirs() -> list[Path]:
    """The base and every overlay: each is something a user applies with -k."""
    overlays = sorted(p.parent for p in OVERLAYS.glob("*/kustomization.yaml"))
    return [BASE, *overlays]


def component_dirs() -> list[Path]:
    """The RBAC components (deploy/components/rbac-*), which overlays add for their
    plugins; deploy/components/monitoring (MONITORING) is not one of them."""
    return sorted(p.parent for p in COMPONENTS.glob("rbac-*/kustomization.yaml"))


def render(directory: Path) -> list[JSON]:
    """``kubectl kustomize`` of a kustomization, as objects."""
    text = kubectl(["kustomize", str(directory)]).stdout
    return [d for d in yaml.safe_load_all(text) if d]


def one(docs: Sequence[JSON], kind: str, name: str | None = None) -> JSON:
    """The single object of ``kind`` (named ``name``, if given) among ``docs``."""
    found = [
        d
        for d in docs
        if d["kind"] == kind and (name is None or d["metadata"]["name"].startswith(name))
    ]
    assert len(found) == 1, f"want one {kind} {name or ''}, found {len(found)}"
    return found[0]


def containers(docs: Sequence[JSON]) -> Iterator[tuple[str, JSON, JSON]]:
    """(deployment name, pod spec, container) for every container of every Deployment."""
    for d in docs:
        if d["kind"] == "Deployment":
            spec = d["spec"]["template"]["spec"]
            for c in spec["containers"]:
                yield d["metadata"]["name"], spec, c


def scheduler_config(docs: Sequence[JSON]) -> str:
    """The KubeSchedulerConfiguration text in a rendering's generated ConfigMap."""
    cm = one(docs, "ConfigMap", "berth-scheduler-config")
    text: str = cm["data"]["scheduler-config.yaml"]
    return text


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of ``--flag=value`` in a container's args (None if absent)."""
    for a in args:
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def replace_flags(args: Sequence[str], values: dict[str, str]) -> list[str]:
    """``args`` with each ``--flag=...`` named in ``values`` given the new value; every
    flag in ``values`` must be present (so a renamed flag fails the test, not the shim)."""
    out: list[str] = []
    seen: set[str] = set()
    for a in args:
        flag = a.split("=", 1)[0]
        if flag in values and "=" in a:
            out.append(f"{flag}={values[flag]}")
            seen.add(flag)
        else:
            out.append(a)
    missing = set(values) - seen
    assert not missing, f"args {list(args)} have no {sorted(missing)}"
    return out


@contextmanager
def berth_system(kube: KubeApi, kubeconfig: Path, namespace_doc: JSON) -> Iterator[str]:
    """Applies the ``berth-system`` namespace for real (server-side dry runs of namespaced
    objects need it to exist), the base's Namespace object so its Pod Security labels are
    in force, marked as the tests'. Deletes it afterwards. Refuses to touch a berth-system
    the tests did not create (e.g. a real install in BERTH_KUBECONFIG)."""
    try:
        existing = kube.get(f"/api/v1/namespaces/{NAMESPACE}")
    except ApiError as err:
        if err.status != 404:
            raise
        existing = None
    if existing is not None:
        labels = existing["metadata"].get("labels") or {}
        assert TEST_LABEL in labels, (
            f"namespace {NAMESPACE} exists and was not made by these tests (no {TEST_LABEL} "
            "label); the deploy tests will not touch it"
        )
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": NAMESPACE,
            "labels": {**namespace_doc["metadata"].get("labels", {}), TEST_LABEL: "deploy"},
        },
    }
    kubectl(["apply", "-f", "-"], kubeconfig=kubeconfig, stdin=yaml.safe_dump(doc))
    try:
        yield NAMESPACE
    finally:
        objects.delete_namespace(kube, NAMESPACE)


def delete_objects(kube: KubeApi, kubeconfig: Path, docs: Sequence[JSON]) -> None:
    """Deletes ``docs`` (as applied), ignoring those already gone."""
    if not docs:
        return
    kubectl(
        ["delete", "--ignore-not-found", "--wait=false", "-f", "-"],
        kubeconfig=kubeconfig,
        stdin=yaml.safe_dump_all(docs),
    )


__all__ = [
    "BASE",
    "CHART",
    "COMPONENTS",
    "DEPLOY",
    "EXAMPLES",
    "LEASE",
    "MONITORING",
    "NAMESPACE",
    "OVERLAYS",
    "ROOT",
    "SERVER_SA",
    "SHIM_SA",
    "berth_system",
    "component_dirs",
    "containers",
    "delete_objects",
    "flag_value",
    "helm",
    "helm_binary",
    "helm_template",
    "kubectl",
    "kubectl_binary",
    "kustomization_dirs",
    "one",
    "render",
    "render_chart",
    "replace_flags",
    "scheduler_config",
]
