"""kube-scheduler's operational surface on a real ``berth shim`` and a real API server:

- ``--v=2`` logs schedule_one.go's per-pod lines ("Successfully bound pod to node" with pod,
  node, evaluatedNodes, feasibleNodes; "Unable to schedule pod; no fit; waiting" with pod and
  err), and ``--logging-format=json`` writes them one JSON object per line
  (component-base logs/json);
- SIGUSR2 writes the cache and the queue to the log (backend/cache/debugger signal.go,
  dumper.go);
- the secure port serves /configz, /debug/cache and, with enableProfiling, the profiling
  routes, to callers the API server authenticates (TokenReview) and authorizes
  (SubjectAccessReview of get on the path), as kube-scheduler's handler chain does
  (cmd/kube-scheduler/app/server.go buildHandlerChain, newEndpointsHandler)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import berth
from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.errors import ApiError
from berth.kube.rest import KubeApi
from tests.integration.shimtools import (
    Shim,
    profile_for,
    running,
    service_account,
    wait_all_decided,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.integration


class SplitShim(Shim):
    """A shim whose stderr (its log) goes to a file of its own, apart from stdout."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stderr = self.log.with_suffix(".stderr")

    def start(self) -> SplitShim:
        out = open(self.log, "ab")  # noqa: SIM115 - the child has its own copies
        err = open(self.stderr, "ab")  # noqa: SIM115
        import os

        self.proc = subprocess.Popen(
            self.argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=dict(os.environ)
        )
        out.close()
        err.close()
        wait_for(
            lambda: self.get("/readyz")[0] == 200 or not self.running,
            60,
            "berth shim ready",
            self.stderr,
        )
        assert self.running, self.stderr.read_text()[-3000:]
        return self

    def log_text(self) -> str:
        return self.stderr.read_text(errors="replace")


def _pods(namespace: str, profile: str, fitting: int) -> list[dict[str, Any]]:
    """``fitting`` pods that fit this test's nodes and one that fits none."""
    selector = {TEST_LABEL: namespace}
    pods = [
        objects.pod(f"p-{i}", namespace=namespace, scheduler_name=profile, node_selector=selector)
        for i in range(fitting)
    ]
    pods.append(
        objects.pod(
            "huge", namespace=namespace, cpu="64", scheduler_name=profile, node_selector=selector
        )
    )
    return pods


def test_v2_json_logs_a_line_per_scheduled_and_unschedulable_pod(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    profile = profile_for(namespace)
    nodes = {n["metadata"]["name"] for n in fake_nodes(2, cpu="4")}
    shim = SplitShim(
        write_config(tmp_path / "c.yaml", profile),
        cluster.kubeconfig,
        tmp_path / "shim.log",
        extra=["--v=2", "--logging-format=json"],
    )
    with running(shim.start()):
        objects.create_pods(kube, _pods(namespace, profile, 3))
        bound, unschedulable = wait_all_decided(kube, namespace, 4, shim)
        assert (len(bound), unschedulable) == (3, ["huge"])

        def lines() -> list[dict[str, Any]]:
            # Every line of the log is one JSON object.
            return [json.loads(line) for line in shim.log_text().splitlines()]

        wait_for(
            lambda: any(r["msg"] == "Unable to schedule pod; no fit; waiting" for r in lines()),
            30,
            "the unschedulable pod's line",
            shim.stderr,
        )
        records = lines()
    scheduled = [r for r in records if r["msg"] == "Successfully bound pod to node"]
    assert sorted(r["pod"] for r in scheduled) == [f"{namespace}/p-{i}" for i in range(3)]
    for r in scheduled:
        assert r["v"] == 2 and r["node"] in nodes and r["profile"] == profile
        assert r["evaluatedNodes"] >= 2 and 1 <= r["feasibleNodes"] <= r["evaluatedNodes"]
        assert isinstance(r["ts"], float) and r["logger"] == "berth.shim.binding"
    (failed, *_) = [r for r in records if r["msg"] == "Unable to schedule pod; no fit; waiting"]
    assert failed["pod"] == f"{namespace}/huge" and failed["v"] == 2
    assert "Insufficient cpu" in failed["err"]
    assert failed["plugin"] == "NodeResourcesFit" and failed["profile"] == profile
    # V(3) lines stay out at --v=2.
    assert not [r for r in records if r["msg"] == "Attempting to schedule pod"]
    # Its first lines: the version, then the interpreter (as kube-scheduler's server.go Run).
    started, settings = [r for r in records if r["logger"] == "berth.shim"][:2]
    assert (started["msg"], started["version"]) == ("Starting berth shim", berth.__version__)
    assert (settings["msg"], settings["executable"]) == ("Python settings", sys.executable)


def test_sigusr2_dumps_the_cache_and_the_queue_to_the_log(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    profile = profile_for(namespace)
    nodes = sorted(n["metadata"]["name"] for n in fake_nodes(2, cpu="4"))
    shim = SplitShim(
        write_config(tmp_path / "c.yaml", profile),
        cluster.kubeconfig,
        tmp_path / "shim.log",
        extra=["--v=2"],
    )
    with running(shim.start()):
        objects.create_pods(kube, _pods(namespace, profile, 2))
        bound, unschedulable = wait_all_decided(kube, namespace, 3, shim)
        assert unschedulable == ["huge"]
        # Text format: key="value" pairs after the message.
        assert f'Successfully bound pod to node pod="{namespace}/p-0" node="' in shim.log_text()
        assert shim.proc is not None
        shim.proc.send_signal(signal.SIGUSR2)
        wait_for(
            lambda: "Dump of scheduling queue" in shim.log_text(),
            30,
            "the dump after SIGUSR2",
            shim.stderr,
        )
        assert shim.running
        text = shim.log_text()
    dump = text[text.index("Dump of cached NodeInfo") :]
    for node in nodes:
        assert f"\tNode name: {node}\n" in dump
    for name in bound:
        assert f"\tname: {name}, namespace: {namespace}, uid: " in dump
    queue = dump[dump.index("Dump of scheduling queue") :]
    assert 'summary="activeQ:' in queue and "unschedulablePods:1;" in queue
    assert f"\tunschedulable:\n\tname: huge, namespace: {namespace}, uid: " in queue


def _grant(kube: KubeApi, namespace: str, user: str, paths: list[str]) -> list[str]:
    """A ClusterRole allowing get on ``paths`` (non-resource URLs), bound to the
    ServiceAccount ``user`` of ``namespace``; returns what to delete."""
    name = f"{namespace}-debug"
    kube.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {"metadata": {"name": name}, "rules": [{"nonResourceURLs": paths, "verbs": ["get"]}]},
    )
    kube.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": user, "namespace": namespace}],
        },
    )
    return [
        f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}",
        f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}",
    ]


def test_debug_endpoints_answer_only_callers_the_api_server_authorizes(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    profile = profile_for(namespace)
    (node,) = [n["metadata"]["name"] for n in fake_nodes(1, cpu="4")]
    cleanup: list[str] = [
        f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{namespace}-nobody"
    ]
    try:
        # A role with nothing on these paths: the view ClusterRole has no non-resource URLs.
        nobody = service_account(kube, namespace, "nobody", "view")
        kube.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "debugger"}}
        )
        cleanup += _grant(kube, namespace, "debugger", ["/configz", "/debug/*"])
        debugger: str = kube.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/debugger/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )["status"]["token"]
        shim = Shim(
            write_config(tmp_path / "c.yaml", profile), cluster.kubeconfig, tmp_path / "shim.log"
        )
        # The secure port: HTTPS, delegated authentication and authorization.
        shim.argv.remove("--insecure-metrics")
        with running(shim.start()):
            for path in ("/configz", "/debug/cache", "/debug/pprof/goroutine"):
                assert shim.get(path)[0] == 403, path  # anonymous
                assert shim.get(path, "not-a-token")[0] == 401, path
                status, body = shim.get(path, nobody)
                assert status == 403 and "cannot get path" in body, (path, body)
            assert shim.get("/healthz")[0] == 200  # probes stay open

            status, body = shim.get("/configz", debugger)
            assert status == 200, body
            config = json.loads(body)["componentconfig"]
            assert config["profiles"][0]["schedulerName"] == profile
            assert config["parallelism"] == 16 and config["enableProfiling"] is True

            status, body = shim.get("/debug/cache", debugger)
            assert status == 200 and f"Node name: {node}\n" in body, body
            assert "Dump of scheduling queue\nsummary: activeQ:0;" in body

            status, body = shim.get("/debug/pprof/goroutine", debugger)
            assert status == 200 and "thread MainThread" in body and "berth-health" in body
            status, body = shim.get("/debug/pprof/profile?seconds=1", debugger)
            assert status == 200 and "time profile of every thread over 1s" in body, body
    finally:
        for path in cleanup:
            with contextlib.suppress(ApiError):
                kube.delete(path)


def test_profiling_routes_are_absent_without_enable_profiling(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    profile = profile_for(namespace)
    config = write_config(tmp_path / "c.yaml", profile)
    config.write_text(config.read_text() + "enableProfiling: false\n")
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log")
    with running(shim.start()):
        status, body = shim.get("/configz")
        assert status == 200 and json.loads(body)["componentconfig"]["enableProfiling"] is False
        for path in ("/debug/pprof/goroutine", "/debug/pprof/profile?seconds=1"):
            status, body = shim.get(path)
            assert status == 404 and "/debug/cache" in body, (path, body)


@pytest.mark.parametrize("delay", [False, True], ids=["warm-standby", "delay-cache"])
def test_delay_cache_until_active_decides_whether_a_standby_fills_its_cache(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    delay: bool,
) -> None:
    """server.go Run: without delayCacheUntilActive the informers start and sync before
    the election, so a standby holds the cluster in its cache; with it, they start only
    once the replica leads. The lease here is held by another holder for an hour, so the
    shim stands by throughout."""
    (node,) = [n["metadata"]["name"] for n in fake_nodes(1, cpu="4")]
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    kube.create(
        f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
        {
            "metadata": {"name": "berth-test"},
            "spec": {
                "holderIdentity": "another-scheduler",
                "leaseDurationSeconds": 3600,
                "acquireTime": now,
                "renewTime": now,
            },
        },
    )
    extra = (
        f"delayCacheUntilActive: {str(delay).lower()}\n"
        "leaderElection:\n  leaderElect: true\n  resourceName: berth-test\n"
        f"  resourceNamespace: {namespace}\n"
    )
    config = write_config(tmp_path / "c.yaml", profile_for(namespace), extra=extra)
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log", leader_elect=True)
    with running(shim.start()):
        # The elector has read the lease: the campaign is under way, which without
        # delayCacheUntilActive begins only after the caches synced.
        wait_for(
            lambda: "lease held by another-scheduler" in shim.get("/readyz")[1],
            60,
            "the standby to see the lease's holder",
            shim.log,
        )
        status, body = shim.get("/debug/cache")
        assert status == 200
        assert (f"Node name: {node}\n" in body) is not delay, body
        assert ("caches synced" in shim.text()) is not delay
