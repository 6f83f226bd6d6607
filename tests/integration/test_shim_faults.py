"""Faults the shim must survive without losing a pod or binding one twice (issue: the shim).

After each fault every pod that can run is bound exactly once: its Scheduled event has no
repeat, and no node is overcommitted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from berth.localcluster import Cluster, KubeClient, LocalCluster, objects
from berth.localcluster.binaries import default_bin_dir
from berth.localcluster.cluster import ClusterConfig
from berth.localcluster.rest import JSON
from berth.localcluster.testing import NodeFactory
from tests.integration.shimtools import (
    Server,
    Shim,
    assert_no_overcommit,
    kubeconfig_for,
    pods_of,
    profile_for,
    running,
    service_account,
    wait_all_bound,
    wait_for,
    wait_scheduled_events,
    write_config,
)

pytestmark = pytest.mark.integration


def _pods(
    namespace: str, profile: str, count: int, prefix: str = "p", cpu: str = "250m"
) -> list[JSON]:
    return [
        objects.pod(
            f"{prefix}-{i}", namespace=namespace, cpu=cpu, memory="32Mi", scheduler_name=profile
        )
        for i in range(count)
    ]


def _bound_once(kube: KubeClient, namespace: str, count: int, *, all_events: bool = True) -> None:
    """No pod has two Scheduled events. ``all_events``: each of ``count`` pods has one
    (a shim killed right after a bind may die before writing its event, as
    kube-scheduler may: events are best effort)."""
    counts = wait_scheduled_events(kube, namespace, count, timeout=60 if all_events else 5)
    if all_events:
        assert len(counts) == count
    assert set(counts.values()) <= {1}, {k: v for k, v in counts.items() if v != 1}


def test_plugin_server_killed_mid_run_and_restarted(
    cluster: Cluster, kube: KubeClient, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    profile = profile_for(namespace)
    config = write_config(tmp_path / "c.yaml", profile)
    nodes = [n["metadata"]["name"] for n in fake_nodes(20, cpu="4")]
    server = Server(config, tmp_path / "serve.log").start()
    # A low API rate keeps binding going while the server dies.
    shim = Shim(
        config,
        cluster.kubeconfig,
        tmp_path / "shim.log",
        server=server.address,
        extra=["--kube-api-qps", "40", "--kube-api-burst", "10"],
    ).start()
    with running(shim, server):
        objects.create_pods(kube, _pods(namespace, profile, 20, prefix="a"))
        wait_all_bound(kube, namespace, 20, timeout=60)
        server.kill()
        # Pods arrive while no plugin server answers: their cycles fail, they wait in
        # backoff, none is dropped.
        objects.create_pods(kube, _pods(namespace, profile, 180, prefix="b"))
        wait_for(
            lambda: (
                shim.metric("berth_plugin_service_errors_total", call="Schedule") > 0
                or shim.metric("berth_plugin_service_errors_total", call="QueueSort") > 0
            ),
            30,
            "cycles failing while the server is down",
        )
        time.sleep(1.0)
        assert shim.running
        restarted = Server(config, tmp_path / "serve2.log", port=server.port).start()
        with running(restarted):
            wait_all_bound(kube, namespace, 200, timeout=120)
            _bound_once(kube, namespace, 200)
            assert_no_overcommit(kube, nodes)
            assert (
                "resending" in shim.text()
                or "replica behind" in shim.text()
                or (shim.metric("berth_plugin_service_errors_total", call="Schedule") > 0)
            )


def test_pod_deleted_while_being_bound(
    cluster: Cluster, kube: KubeClient, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    """Binds trail the cycles (API rate 5/s); half the pods are deleted while theirs are
    queued: the bind answers 404, the pod is forgotten, nothing crashes or leaks."""
    profile = profile_for(namespace)
    fake_nodes(4, cpu="8")
    shim = Shim(
        write_config(tmp_path / "c.yaml", profile),
        cluster.kubeconfig,
        tmp_path / "shim.log",
        extra=["--kube-api-qps", "5", "--kube-api-burst", "1"],
    ).start()
    with running(shim):
        objects.create_pods(kube, _pods(namespace, profile, 20))
        wait_for(
            lambda: shim.metric("scheduler_cache_size", type="assumed_pods") >= 10,
            30,
            "pods assumed",
        )
        doomed = [f"p-{i}" for i in range(0, 20, 2)]
        objects.delete_pods(kube, namespace, doomed)
        wait_all_bound(kube, namespace, 10, timeout=60)
        wait_for(lambda: len(pods_of(kube, namespace)) == 10, 60, "deleted pods gone")
        wait_for(
            lambda: shim.metric("scheduler_cache_size", type="assumed_pods") == 0,
            30,
            "no assumed pod left",
        )
        left = {p["metadata"]["name"] for p in pods_of(kube, namespace)}
        assert left == {f"p-{i}" for i in range(1, 20, 2)}
        assert all(p["spec"].get("nodeName") for p in pods_of(kube, namespace))
        assert shim.running


def test_node_deleted_while_pods_are_assumed_on_it(
    cluster: Cluster, kube: KubeClient, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    """Pods assumed on a node that disappears before their bind are not bound there:
    the binding cycle fails, the pods are scheduled again and land on the node that is left."""
    profile = profile_for(namespace)
    doomed = fake_nodes(1, prefix="doomed", cpu="32")[0]["metadata"]["name"]
    shim = Shim(
        write_config(tmp_path / "c.yaml", profile),
        cluster.kubeconfig,
        tmp_path / "shim.log",
        extra=["--kube-api-qps", "3", "--kube-api-burst", "1"],
    ).start()
    with running(shim):
        objects.create_pods(kube, _pods(namespace, profile, 12))
        wait_for(
            lambda: shim.metric("scheduler_cache_size", type="assumed_pods") >= 8,
            30,
            "pods assumed",
        )
        deleted_at = time.time()
        objects.delete_nodes(kube, [doomed])
        survivor = fake_nodes(1, prefix="survivor", cpu="32")[0]["metadata"]["name"]
        pods = wait_all_bound(kube, namespace, 12, timeout=90)
        on_doomed = [p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == doomed]
        on_survivor = [p for p in pods if p["spec"]["nodeName"] == survivor]
        # Those bound to the doomed node were bound before it went (at most the burst
        # allowed in flight); everything else went to the survivor.
        assert len(on_survivor) >= 12 - 4, on_doomed
        events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
        for e in events:
            if e["reason"] == "Scheduled" and e["regarding"]["name"] in on_doomed:
                t = e["eventTime"]
                assert t < time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(deleted_at + 1)), e
        _bound_once(kube, namespace, 12)


def test_bind_refused_by_the_api_server_is_retried_until_allowed(
    cluster: Cluster, kube: KubeClient, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    """The shim's identity may not create pods/binding (403): each bind fails, the pods
    back off and are retried; once RBAC allows it they are bound, each once."""
    profile = profile_for(namespace)
    fake_nodes(2, cpu="4")
    role = f"{namespace}-shim"
    rules: list[JSON] = [
        {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch", "update"]},
        {
            "apiGroups": ["events.k8s.io", ""],
            "resources": ["events"],
            "verbs": ["create", "patch", "update"],
        },
    ]
    kube.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {"metadata": {"name": role}, "rules": rules},
    )
    try:
        token = service_account(kube, namespace, "shim", role)
        kubeconfig = kubeconfig_for(cluster, tmp_path / "sa.kubeconfig", f"{{token: '{token}'}}")
        shim = Shim(
            write_config(tmp_path / "c.yaml", profile), kubeconfig, tmp_path / "shim.log"
        ).start()
        with running(shim):
            objects.create_pods(kube, _pods(namespace, profile, 5))
            wait_for(
                lambda: (
                    shim.metric(
                        "scheduler_schedule_attempts_total", result="error", profile=profile
                    )
                    >= 5
                ),
                30,
                "binds refused",
            )
            assert not any(p["spec"].get("nodeName") for p in pods_of(kube, namespace))
            failed = kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
            assert any(
                "forbidden" in e["note"].lower()
                for e in failed
                if e["reason"] == "FailedScheduling"
            )
            rules.append({"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]})
            kube.request(
                "PUT",
                f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}",
                body={"metadata": {"name": role}, "rules": rules},
            )
            wait_all_bound(kube, namespace, 5, timeout=60)
            _bound_once(kube, namespace, 5)
    finally:
        kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{namespace}-shim")
        kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}")


def test_leader_failover_the_standby_finishes_the_work(
    cluster: Cluster, kube: KubeClient, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    profile = profile_for(namespace)
    config = write_config(
        tmp_path / "c.yaml",
        profile,
        extra=(
            "leaderElection:\n  leaderElect: true\n  leaseDuration: 4s\n  renewDeadline: 3s\n"
            f"  retryPeriod: 500ms\n  resourceName: {profile}\n  resourceNamespace: {namespace}\n"
        ),
    )
    fake_nodes(10, cpu="8")
    first = Shim(config, cluster.kubeconfig, tmp_path / "a.log", leader_elect=True).start()
    second = Shim(config, cluster.kubeconfig, tmp_path / "b.log", leader_elect=True).start()
    with running(first, second):
        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{profile}"
        wait_for(lambda: bool(_holder(kube, lease_path)), 30, "a leader elected")
        holder = _holder(kube, lease_path)
        leader, standby = (
            (first, second) if "scheduling" in first.get("/readyz")[1] else (second, first)
        )
        objects.create_pods(kube, _pods(namespace, profile, 40, prefix="a"))
        wait_all_bound(kube, namespace, 40, timeout=60)
        leader.kill()
        objects.create_pods(kube, _pods(namespace, profile, 40, prefix="b"))
        wait_all_bound(kube, namespace, 80, timeout=60)
        assert _holder(kube, lease_path) != holder
        assert "scheduling" in standby.get("/readyz")[1]
        _bound_once(kube, namespace, 80, all_events=False)


def _holder(kube: KubeClient, path: str) -> str:
    try:
        return str(kube.get(path)["spec"].get("holderIdentity") or "")
    except Exception:
        return ""


def _compact_etcd(port: int) -> None:
    """etcd's gRPC gateway: read the current revision, compact everything before it."""
    import base64
    import json
    import urllib.request

    def post(path: str, body: dict[str, object]) -> dict[str, object]:
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            out: dict[str, object] = json.loads(r.read())
            return out

    def b64(x: bytes) -> str:
        return base64.b64encode(x).decode()

    # Two writes: a watch from revision r sends what comes after r, so the history must
    # lose at least the revision after the shim's last one.
    post("/v3/kv/put", {"key": b64(b"/berth-test/bump"), "value": b64(b"x")})
    post("/v3/kv/put", {"key": b64(b"/berth-test/bump"), "value": b64(b"y")})
    header = post("/v3/kv/range", {"key": b64(b"/berth-test/bump")})["header"]
    assert isinstance(header, dict)
    post("/v3/kv/compaction", {"revision": int(header["revision"]), "physical": True})


@pytest.fixture(scope="module")
def private_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster of its own: this module restarts its API server."""
    local = LocalCluster(
        ClusterConfig(
            state_dir=tmp_path_factory.mktemp("restart-cluster"),
            bin_dir=default_bin_dir(),
            die_with_parent=True,
        )
    )
    local.start()
    try:
        yield local
    finally:
        local.stop()


def test_api_server_restart_and_expired_watch(
    private_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The API server goes away and comes back (watches break, binds fail meanwhile); the
    shim was frozen while pods came and went, so its watch resumes from a resourceVersion
    the restarted server no longer serves (410 Gone) and it must list again: pods deleted
    meanwhile are dropped, pods created meanwhile are scheduled, none twice."""
    cluster = private_cluster.cluster
    namespace = "faults"
    profile = "berth-faults"
    with cluster.client() as kube:
        objects.create_namespace(kube, namespace)
        nodes = [
            n["metadata"]["name"]
            for n in objects.create_nodes(kube, [objects.node(f"n{i}", cpu="8") for i in range(5)])
        ]
        shim = Shim(
            write_config(tmp_path / "c.yaml", profile), cluster.kubeconfig, tmp_path / "shim.log"
        ).start()
        with running(shim):
            objects.create_pods(kube, _pods(namespace, profile, 30, prefix="before"))
            wait_all_bound(kube, namespace, 30, timeout=60)
            assert shim.proc is not None
            shim.proc.send_signal(19)  # SIGSTOP: the shim misses everything from here
            objects.delete_pods(kube, namespace, [f"before-{i}" for i in range(10)])
            objects.create_pods(kube, _pods(namespace, profile, 30, prefix="during"))
            # While the API server is down, etcd moves on (a write) and compacts its
            # history: the last resourceVersion the shim saw can no longer be watched from.
            port = private_cluster.state.etcd_client_port
            private_cluster.restart_apiserver(
                down_for=1.0, while_down=lambda: _compact_etcd(port), crash=True
            )
            # Created after the restart: no buffered watch event carries these; only the
            # shim's relist can find them.
            objects.create_pods(kube, _pods(namespace, profile, 10, prefix="after"))
            shim.proc.send_signal(18)  # SIGCONT
            wait_for(
                lambda: "watch expired (410 Gone); listing again" in shim.text(),
                60,
                "a relist after 410",
            )
            wait_all_bound(kube, namespace, 60, timeout=120)
            mine = [p for p in pods_of(kube, namespace) if p["spec"]["schedulerName"] == profile]
            assert len(mine) == 60 and all(p["spec"].get("nodeName") for p in mine)
            # The 10 deleted pods had been bound once too, before they went.
            _bound_once(kube, namespace, 70)
            assert_no_overcommit(kube, nodes)
            assert shim.running
            log = shim.text()
            assert "watch expired (410 Gone); listing again" in log, log[-3000:]
