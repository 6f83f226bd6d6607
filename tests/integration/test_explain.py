"""``berth explain`` against a running ``berth shim`` on a real kube-apiserver, over the
shim's secure port (HTTPS, the caller authenticated by its kubeconfig's token and
authorized by the API server for ``get`` on /debug/explain).

For a pod pending on resources, on node affinity, as a member of a PodGroup short of
members, and in backoff after a failed binding, the explanation names the right
reasons (upstream's FitError words) and a fix; the test applies the fix (a smaller
request, the node label, the missing member, waiting out the backoff) and the pod is
scheduled where the fix said. Pods annotated ``explain.berth.dev/enabled: "true"``,
and only those, get ``explain.berth.dev/result``.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi
from tests.integration.faultproxy import BINDING, Fault, fault_proxy
from tests.integration.shimtools import (
    EXAMPLES,
    Shim,
    ensure_crds,
    example_config_as,
    kubeconfig_for,
    node_names,
    pod_path,
    profile_for,
    running,
    service_account,
    wait_for,
    wait_node_of,
    wait_unschedulable,
    write_config,
)

pytestmark = pytest.mark.integration

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1"


@pytest.fixture
def caller(cluster: Cluster, kube: KubeApi, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig whose token may ``get`` /debug/explain and nothing else."""
    role = f"{namespace}-explain"
    kube.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {
            "metadata": {"name": role},
            "rules": [{"nonResourceURLs": ["/debug/explain"], "verbs": ["get"]}],
        },
    )
    try:
        token = service_account(kube, namespace, "explainer", role)
        yield kubeconfig_for(cluster, tmp_path / "explain.kubeconfig", f"{{token: '{token}'}}")
    finally:
        for path in (
            f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{namespace}-explainer",
            f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}",
        ):
            with contextlib.suppress(ApiError):
                kube.delete(path)


def secure_shim(config: Path, kubeconfig: Path, log: Path) -> Shim:
    """A shim whose health, metrics and debug routes are served over HTTPS with
    delegated authentication (its default; the test harness's shims use plain HTTP)."""
    shim = Shim(config, kubeconfig, log)
    shim.argv.remove("--insecure-metrics")
    return shim


def explain(shim: Shim, kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "berth",
            "explain",
            *args,
            "--server",
            f"https://127.0.0.1:{shim.metrics_port}",
            "--insecure-skip-tls-verify",
            "--kubeconfig",
            str(kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return out.returncode, out.stdout, out.stderr


def explain_json(shim: Shim, kubeconfig: Path, pod: str) -> Any:
    code, out, err = explain(shim, kubeconfig, pod, "-o", "json")
    assert code == 0, err
    return json.loads(out)


def pod(namespace: str, name: str, profile: str, **kwargs: Any) -> JSON:
    selector = {TEST_LABEL: namespace, **kwargs.pop("node_selector", {})}
    annotations = kwargs.pop("annotations", None)
    spec = objects.pod(
        name, namespace=namespace, scheduler_name=profile, node_selector=selector, **kwargs
    )
    if annotations:
        spec["metadata"]["annotations"] = annotations
    return spec


def recreate(kube: KubeApi, spec: JSON) -> None:
    """Deletes the pod and creates it again from ``spec`` (requests are immutable)."""
    ns, name = spec["metadata"]["namespace"], spec["metadata"]["name"]
    kube.delete(pod_path(ns, name), gracePeriodSeconds=0)

    def gone() -> bool:
        try:
            kube.get(pod_path(ns, name))
        except ApiError as exc:
            return exc.not_found
        return False

    wait_for(gone, 30, f"pod {name} deleted")
    objects.create_pods(kube, [spec])


def test_pending_on_resources_says_how_much_less_cpu_fits_and_it_does(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    caller: Path,
) -> None:
    profile = profile_for(namespace)
    nodes = node_names(fake_nodes(2, cpu="2"))
    shim = secure_shim(
        write_config(tmp_path / "c.yaml", profile), cluster.kubeconfig, tmp_path / "s.log"
    )
    big = pod(namespace, "big", profile, cpu="2500m")
    with running(shim.start()):
        objects.create_pods(kube, [big])
        wait_unschedulable(kube, namespace, "big", shim)
        doc = explain_json(shim, caller, f"{namespace}/big")
        assert doc["status"] == "pending"
        assert doc["queue"]["rejectedBy"] == ["NodeResourcesFit"]
        assert any(m["plugin"] == "NodeResourcesFit" for m in doc["queue"]["movedBy"])
        # Upstream's FitError words, from the last attempt and from the dry run now.
        assert "2 Insufficient cpu" in doc["lastAttempt"]["message"]
        assert "2 Insufficient cpu" in doc["live"]["message"]
        rows = {r["node"]: (r["plugin"], r["reason"]) for r in doc["live"]["rejected"]}
        assert {n: rows[n] for n in nodes} == {
            n: ("NodeResourcesFit", "Insufficient cpu") for n in nodes
        }
        fix = doc["fixes"][0]
        assert fix.startswith("2 nodes would fit with 500m less cpu (checked: a cycle"), fix
        code, table, err = explain(shim, caller, f"{namespace}/big")
        assert code == 0, err
        assert "2 Insufficient cpu" in table and "500m less cpu" in table, table
        # The fix applied: 500m less.
        recreate(kube, pod(namespace, "big", profile, cpu="2"))
        assert wait_node_of(kube, namespace, "big", shim) in nodes


def test_pending_on_affinity_names_the_label_to_add_and_the_pod_goes_there(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    caller: Path,
) -> None:
    profile = profile_for(namespace)
    nodes = node_names(fake_nodes(3, labels={"zone": "a"}))
    shim = secure_shim(
        write_config(tmp_path / "c.yaml", profile), cluster.kubeconfig, tmp_path / "s.log"
    )
    with running(shim.start()):
        objects.create_pods(kube, [pod(namespace, "picky", profile, node_selector={"zone": "b"})])
        wait_unschedulable(kube, namespace, "picky", shim)
        doc = explain_json(shim, caller, f"{namespace}/picky")
        assert "didn't match Pod's node affinity/selector" in doc["live"]["message"]
        assert doc["queue"]["queue"] == "unschedulable"
        assert doc["queue"]["rejectedBy"] == ["NodeAffinity"]
        [fix] = [f for f in doc["fixes"] if f.startswith("labelling node")]
        target = nodes[0]
        assert fix == (
            f"labelling node {target} zone=b would satisfy the pod's node affinity/selector "
            f"(kubectl label node {target} zone=b)"
        )
        kube.strategic_patch(f"/api/v1/nodes/{target}", {"metadata": {"labels": {"zone": "b"}}})
        assert wait_node_of(kube, namespace, "picky", shim) == target


@pytest.fixture
def podgroup_crd(kube: KubeApi) -> None:
    ensure_crds(kube, EXAMPLES / "coscheduling" / "podgroup-crd.yaml")


def test_gang_short_of_members_shows_each_member_and_the_missing_one_completes_it(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    caller: Path,
    podgroup_crd: None,
) -> None:
    profile = profile_for(namespace)
    fake_nodes(2, cpu="4")
    config = example_config_as(
        "coscheduling", "custom-scheduler", profile, tmp_path / "scheduler-config.yaml"
    )
    groups = f"{PODGROUPS}/namespaces/{namespace}/podgroups"
    kube.create(
        groups,
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "team"},
            "spec": {"minMember": 3},
        },
    )
    members = [pod(namespace, f"team-{i}", profile, labels={GROUP_LABEL: "team"}) for i in range(3)]
    shim = secure_shim(config, cluster.kubeconfig, tmp_path / "s.log")
    try:
        with running(shim.start()):
            objects.create_pods(kube, members[:2])
            wait_unschedulable(kube, namespace, "team-0", shim)
            wait_unschedulable(kube, namespace, "team-1", shim)
            doc = explain_json(shim, caller, f"{namespace}/team-0")
            group = doc["podGroup"]
            assert group["name"] == f"{namespace}/team"
            assert group["minMember"] == 3 and group["assigned"] == 0
            assert [m["pod"] for m in group["members"]] == ["team-0", "team-1"]
            assert all(m["state"] == "pending" for m in group["members"])
            # Node-level reasons summed over the members: the PreFilter rejection of each.
            # (Upstream's message names the member, so there is one line per member.)
            reasons = group["nodeReasons"]
            assert len(reasons) == 2, reasons
            for r in reasons:
                assert r["reason"].startswith("Coscheduling: "), r
                assert "minMember of group: 3" in r["reason"], r
                assert r["nodes"] >= 2, r
            assert (
                f"create 1 more pod(s) labelled {GROUP_LABEL}=team in namespace {namespace} "
                "(or lower the PodGroup's minMember to 2)"
            ) in doc["fixes"]
            code, table, err = explain(shim, caller, f"{namespace}/team-1")
            assert code == 0, err
            assert "PodGroup" in table and "minMember 3" in table, table
            objects.create_pods(kube, members[2:])
            for m in ("team-0", "team-1", "team-2"):
                wait_node_of(kube, namespace, m, shim)
    finally:
        with contextlib.suppress(ApiError):
            kube.delete(f"{groups}/team")


def test_pod_in_backoff_after_a_failed_binding_says_until_when_then_binds(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    caller: Path,
) -> None:
    """The binding POST answers 500 once: the pod goes to the error backoff (20 s here,
    podInitialBackoffSeconds), where an idle queue does not take it early. The
    explanation says so, with the binding's error as the last attempt, and that a cycle
    now would place it; once the backoff is over it is bound."""
    profile = profile_for(namespace)
    nodes = node_names(fake_nodes(1, cpu="4"))
    config = write_config(
        tmp_path / "c.yaml",
        profile,
        extra="podInitialBackoffSeconds: 20\npodMaxBackoffSeconds: 20\n",
    )
    with fault_proxy(cluster, tmp_path / "proxy") as proxy:
        fault = proxy.add(Fault("POST", BINDING, "answer", 500))
        shim = secure_shim(config, proxy.kubeconfig, tmp_path / "s.log")
        with running(shim.start()):
            objects.create_pods(kube, [pod(namespace, "later", profile)])
            wait_for(lambda: bool(fault.hits), 30, "the failed binding", shim.log)

            def in_backoff() -> bool:
                doc = explain_json(shim, caller, f"{namespace}/later")
                return bool(doc["queue"]["queue"] == "backoff" and "lastAttempt" in doc)

            wait_for(in_backoff, 15, "the pod in backoff", shim.log)
            doc = explain_json(shim, caller, f"{namespace}/later")
            q = doc["queue"]
            assert q["queue"] == "backoff" and 0 < q["backoffSeconds"] <= 20, q
            assert doc["lastAttempt"]["result"] == "error"
            assert (
                "500" in doc["lastAttempt"]["message"] or "binding" in doc["lastAttempt"]["message"]
            )
            assert doc["live"]["node"] == nodes[0]
            assert doc["fixes"] == [
                f"nothing to change: it is retried when its backoff ends at {q['backoffUntil']}"
            ]
            assert wait_node_of(kube, namespace, "later", shim, timeout=40) == nodes[0]


def test_result_annotation_only_on_pods_that_ask_and_the_endpoint_needs_credentials(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    caller: Path,
) -> None:
    profile = profile_for(namespace)
    nodes = node_names(fake_nodes(2, cpu="2"))
    ask = {"explain.berth.dev/enabled": "true"}
    shim = secure_shim(
        write_config(tmp_path / "c.yaml", profile), cluster.kubeconfig, tmp_path / "s.log"
    )
    with running(shim.start()):
        objects.create_pods(
            kube,
            [
                pod(namespace, "asks", profile, annotations=ask),
                pod(namespace, "quiet", profile),
                pod(namespace, "asks-too-big", profile, cpu="3", annotations=ask),
                pod(namespace, "quiet-too-big", profile, cpu="3"),
            ],
        )
        placed = wait_node_of(kube, namespace, "asks", shim)
        wait_node_of(kube, namespace, "quiet", shim)
        wait_unschedulable(kube, namespace, "asks-too-big", shim)
        wait_unschedulable(kube, namespace, "quiet-too-big", shim)

        def annotation(name: str) -> str | None:
            meta = kube.get(pod_path(namespace, name))["metadata"]
            value: str | None = (meta.get("annotations") or {}).get("explain.berth.dev/result")
            return value

        wait_for(lambda: annotation("asks") is not None, 20, "result on 'asks'", shim.log)
        wait_for(lambda: annotation("asks-too-big") is not None, 20, "result", shim.log)
        doc = json.loads(annotation("asks") or "")
        assert doc["result"] == "scheduled" and doc["selectedNode"] == placed
        assert set(doc["scores"]) == set(nodes), doc
        assert all("total" in s for s in doc["scores"].values())
        failed = json.loads(annotation("asks-too-big") or "")
        assert failed["result"] == "unschedulable"
        assert {failed["filter"][n] for n in nodes} == {"NodeResourcesFit: Insufficient cpu"}
        assert annotation("quiet") is None
        assert annotation("quiet-too-big") is None
        # The endpoint refuses a caller the API server does not authenticate.
        code, _, err = explain(shim, caller, f"{namespace}/quiet-too-big", "--token", "nobody")
        assert code == 1 and "401" in err, err


def test_pod_that_may_not_preempt_is_told_whom_preemption_would_evict(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    caller: Path,
) -> None:
    """A pod with preemptionPolicy Never fits nowhere: DefaultPreemption does nothing for
    it, and the explanation says whom it would evict were the pod allowed to preempt (a
    dry run of preemption.go Evaluator.Preempt). Deleting that victim lets it in."""
    profile = profile_for(namespace)
    [node] = node_names(fake_nodes(1, cpu="2"))
    high = f"{namespace}-high"
    kube.create(
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": high},
            "value": 1000,
            "preemptionPolicy": "Never",
        },
    )
    shim = secure_shim(
        write_config(tmp_path / "c.yaml", profile), cluster.kubeconfig, tmp_path / "s.log"
    )
    try:
        with running(shim.start()):
            objects.create_pods(
                kube, [pod(namespace, f"low-{i}", profile, cpu="1") for i in range(2)]
            )
            for i in range(2):
                wait_node_of(kube, namespace, f"low-{i}", shim)
            objects.create_pods(
                kube, [pod(namespace, "polite", profile, cpu="1", priority_class_name=high)]
            )
            wait_unschedulable(kube, namespace, "polite", shim)
            doc = explain_json(shim, caller, f"{namespace}/polite")
            assert "1 Insufficient cpu" in doc["live"]["message"]
            [fix] = [f for f in doc["fixes"] if "preemptionPolicy" in f]
            prefix = (
                "with preemptionPolicy PreemptLowerPriority (the pod has Never): evicting 1 pod "
                f"{namespace}/low-"
            )
            assert fix.startswith(prefix), fix
            assert fix.endswith(f" on node {node} (priority 0) would make room"), fix
            victim = fix[len(prefix) - len("low-") :].split(" ")[0]
            kube.delete(pod_path(namespace, victim), gracePeriodSeconds=0)
            assert wait_node_of(kube, namespace, "polite", shim) == node
    finally:
        with contextlib.suppress(ApiError):
            kube.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{high}")


def test_pod_no_gpu_card_holds_is_told_a_node_with_a_free_card_of_its_size_would_do(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    caller: Path,
) -> None:
    """GPUCardFit (deploy/examples/gpucard): the nodes' cards have 24Gi, the pod asks
    40Gi on one card. The fix names a node with a free 40Gi card; the test adds one and
    the pod goes there."""
    profile = profile_for(namespace)
    cards = "berth.dev/gpu-cards"
    small = node_names(fake_nodes(2, prefix="gpu24"))
    for n in small:
        kube.strategic_patch(
            f"/api/v1/nodes/{n}", {"metadata": {"annotations": {cards: '["24Gi"]'}}}
        )
    config = example_config_as("gpucard", "my-scheduler", profile, tmp_path / "c.yaml")
    shim = secure_shim(config, cluster.kubeconfig, tmp_path / "s.log")
    with running(shim.start()):
        objects.create_pods(
            kube, [pod(namespace, "trainer", profile, annotations={"berth.dev/gpu-memory": "40Gi"})]
        )
        wait_unschedulable(kube, namespace, "trainer", shim)
        doc = explain_json(shim, caller, f"{namespace}/trainer")
        rows = {r["node"]: (r["plugin"], r["reason"]) for r in doc["live"]["rejected"]}
        assert {n: rows[n][0] for n in small} == dict.fromkeys(small, "GPUCardFit")
        assert all(rows[n][1].startswith("no free GPU card") for n in small), rows
        assert (
            "one more node with a free 40Gi GPU card (GPUCardFit found none on 2 nodes)"
            in doc["fixes"]
        ), doc["fixes"]
        [big] = node_names(fake_nodes(1, prefix="gpu80"))
        kube.strategic_patch(
            f"/api/v1/nodes/{big}", {"metadata": {"annotations": {cards: '["80Gi"]'}}}
        )
        assert wait_node_of(kube, namespace, "trainer", shim) == big
