"""Faults the shim must survive without losing a pod or binding one twice (issue: the shim).

After each fault every pod is bound exactly once (its Scheduled event has no repeat) or,
when it cannot fit, visibly unschedulable (PodScheduled=False, Unschedulable), and no
node's pods request more than its allocatable. The nodes are filled to 95% or more
(usually by their ``pods`` allocatable, with a few pods more than fit), so that a pod
the shim's cache lost or counted twice shows as an overcommitted node or a pod left
pending: ``assert_no_overcommit(..., filled=FILL)``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from berth.dev.localcluster import Cluster, LocalCluster, objects
from berth.dev.localcluster.binaries import default_bin_dir
from berth.dev.localcluster.cluster import ClusterConfig
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.rest import JSON, KubeApi
from tests.integration import holdplugin
from tests.integration.faultproxy import BINDING, Fault, fault_proxy
from tests.integration.shimtools import (
    Server,
    Shim,
    assert_no_overcommit,
    kubeconfig_for,
    node_names,
    pods_of,
    profile_for,
    running,
    scheduled_events,
    service_account,
    wait_all_bound,
    wait_all_decided,
    wait_for,
    wait_scheduled_events,
    write_config,
)

pytestmark = pytest.mark.integration

# Every fault test ends with its nodes at least this full.
FILL = 0.95


def _pods(
    namespace: str,
    profile: str,
    count: int,
    prefix: str = "p",
    cpu: str = "250m",
    *,
    selector: dict[str, str] | None = None,
) -> list[JSON]:
    """``count`` pods of the profile, kept to this test's nodes (``fake_nodes`` labels
    them ``berth.dev/test=<namespace>``) unless ``selector`` says otherwise."""
    return [
        objects.pod(
            f"{prefix}-{i}",
            namespace=namespace,
            cpu=cpu,
            memory="32Mi",
            scheduler_name=profile,
            node_selector=selector or {TEST_LABEL: namespace},
        )
        for i in range(count)
    ]


def _bound_once(kube: KubeApi, namespace: str, count: int, *, all_events: bool = True) -> None:
    """No pod has two Scheduled events. ``all_events``: each of ``count`` pods has one
    (a shim killed right after a bind may die before writing its event, as
    kube-scheduler may: events are best effort)."""
    counts = wait_scheduled_events(kube, namespace, count, timeout=60 if all_events else 5)
    if all_events:
        assert len(counts) == count
    assert set(counts.values()) <= {1}, {k: v for k, v in counts.items() if v != 1}


def _decided(
    kube: KubeApi, namespace: str, proc: Shim, *, bound: int, unschedulable: int
) -> tuple[list[str], list[str]]:
    """Waits until every pod of the namespace is bound or visibly unschedulable, and
    checks how many are each: a pod lost by the shim stays pending without a verdict."""
    got = wait_all_decided(kube, namespace, bound + unschedulable, proc, timeout=120)
    assert (len(got[0]), len(got[1])) == (bound, unschedulable), got
    return got


def test_plugin_server_killed_mid_burst_and_restarted(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    """210 pods for 200 places (20 nodes of 10 pods); the plugin server is killed while
    they are being scheduled: their cycles fail and back off, none is dropped; once it is
    back every place is taken exactly once and 10 pods are reported unschedulable."""
    profile = profile_for(namespace)
    config = write_config(tmp_path / "c.yaml", profile)
    nodes = node_names(fake_nodes(20, cpu="4", pods=10))
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
        objects.create_pods(kube, _pods(namespace, profile, 100, prefix="a"))
        wait_all_bound(kube, namespace, 30, timeout=60)
        server.kill()
        # The rest of the burst arrives while no plugin server answers: their cycles
        # fail, they wait in backoff, none is dropped.
        objects.create_pods(kube, _pods(namespace, profile, 110, prefix="b"))
        wait_for(
            lambda: (
                shim.metric("berth_plugin_service_errors_total", call="Schedule") > 0
                or shim.metric("berth_plugin_service_errors_total", call="QueueSort") > 0
            ),
            30,
            "cycles failing while the server is down",
        )
        assert sum(1 for p in pods_of(kube, namespace) if p["spec"].get("nodeName")) < 200
        assert shim.running
        restarted = Server(config, tmp_path / "serve2.log", port=server.port).start()
        with running(restarted):
            _decided(kube, namespace, shim, bound=200, unschedulable=10)
            _bound_once(kube, namespace, 200)
            assert_no_overcommit(kube, nodes, filled=FILL)


def test_pod_deleted_while_being_bound(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    """Binds trail the cycles (API rate 5/s); 20 pods for 10 places, and half the pods
    are deleted while theirs are queued: the bind answers 404, the pod is forgotten and
    its place goes to another, nothing crashes or leaks, every place is taken once."""
    profile = profile_for(namespace)
    nodes = node_names(fake_nodes(2, cpu="8", pods=5))
    shim = Shim(
        write_config(tmp_path / "c.yaml", profile),
        cluster.kubeconfig,
        tmp_path / "shim.log",
        extra=["--kube-api-qps", "5", "--kube-api-burst", "1"],
    ).start()
    with running(shim):
        objects.create_pods(kube, _pods(namespace, profile, 20))
        wait_for(
            lambda: shim.metric("scheduler_cache_size", type="assumed_pods") >= 8,
            30,
            "pods assumed",
        )
        doomed = [f"p-{i}" for i in range(0, 20, 2)]
        objects.delete_pods(kube, namespace, doomed)
        wait_for(lambda: len(pods_of(kube, namespace)) == 10, 60, "deleted pods gone")
        wait_all_bound(kube, namespace, 10, timeout=90)
        wait_for(
            lambda: shim.metric("scheduler_cache_size", type="assumed_pods") == 0,
            30,
            "no assumed pod left",
        )
        left = {p["metadata"]["name"] for p in pods_of(kube, namespace)}
        assert left == {f"p-{i}" for i in range(1, 20, 2)}
        assert all(p["spec"].get("nodeName") for p in pods_of(kube, namespace))
        assert_no_overcommit(kube, nodes, filled=FILL)
        # Events trail the bindings (API rate 5/s); a deleted pod may have had its own.
        wait_for(lambda: left <= set(scheduled_events(kube, namespace)), 60, "Scheduled events")
        counts = scheduled_events(kube, namespace)
        assert set(counts.values()) == {1}, counts
        assert shim.running


def test_node_deleted_while_pods_are_assumed_on_it(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    """Pods assumed on a node that disappears before their bind are not bound there:
    the binding cycle fails, the pods are scheduled again and fill the node that is
    left (8 places for the 8 or more pods not bound before the deletion); the rest are
    reported unschedulable."""
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
        survivor = fake_nodes(1, prefix="survivor", cpu="32", pods=8)[0]["metadata"]["name"]
        wait_all_bound(kube, namespace, 8, timeout=90)
        pods = pods_of(kube, namespace)
        on_doomed = [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") == doomed]
        # Those bound to the doomed node were bound before it went (at most the burst
        # allowed in flight); the others fill the survivor or wait, unschedulable.
        assert len(on_doomed) <= 4, on_doomed
        _decided(kube, namespace, shim, bound=len(on_doomed) + 8, unschedulable=4 - len(on_doomed))
        assert_no_overcommit(kube, [survivor], filled=FILL)
        events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
        for e in events:
            if e["reason"] == "Scheduled" and e["regarding"]["name"] in on_doomed:
                t = e["eventTime"]
                assert t < time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(deleted_at + 1)), e
        _bound_once(kube, namespace, len(on_doomed) + 8)


def test_bind_refused_by_the_api_server_is_retried_until_allowed(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    """The shim's identity may not create pods/binding (403): each bind fails, the pods
    back off and are retried; once RBAC allows it they are bound, each once."""
    profile = profile_for(namespace)
    nodes = node_names(fake_nodes(1, cpu="4", pods=5))
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
            assert_no_overcommit(kube, nodes, filled=FILL)
    finally:
        kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{namespace}-shim")
        kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}")


def test_leader_failover_the_standby_finishes_the_work(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
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
    nodes = node_names(fake_nodes(8, cpu="8", pods=10))
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
        # 44 pods for the 40 places left: the standby fills them, 4 wait.
        objects.create_pods(kube, _pods(namespace, profile, 44, prefix="b"))
        _decided(kube, namespace, standby, bound=80, unschedulable=4)
        assert _holder(kube, lease_path) != holder
        assert "scheduling" in standby.get("/readyz")[1]
        _bound_once(kube, namespace, 80, all_events=False)
        assert_no_overcommit(kube, nodes, filled=FILL)


def _holder(kube: KubeApi, path: str) -> str:
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
    meanwhile are dropped (their places taken by others), pods created meanwhile are
    scheduled, none twice. 64 pods outlive the run for 60 places: a relist that missed
    a deletion leaves pods pending, one that missed a binding overcommits a node."""
    cluster = private_cluster.cluster
    namespace = "faults"
    profile = "berth-faults"
    with cluster.client() as kube:
        objects.create_namespace(kube, namespace)
        nodes = [
            n["metadata"]["name"]
            for n in objects.create_nodes(
                kube,
                [
                    objects.node(f"n{i}", cpu="8", pods=12, labels={TEST_LABEL: namespace})
                    for i in range(5)
                ],
            )
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
            objects.create_pods(kube, _pods(namespace, profile, 14, prefix="after"))
            shim.proc.send_signal(18)  # SIGCONT
            wait_for(
                lambda: "watch expired (410 Gone); listing again" in shim.text(),
                60,
                "a relist after 410",
            )
            _decided(kube, namespace, shim, bound=60, unschedulable=4)
            # The 10 deleted pods had been bound once too, before they went.
            _bound_once(kube, namespace, 70)
            assert_no_overcommit(kube, nodes, filled=FILL)
            assert shim.running
            log = shim.text()
            assert "watch expired (410 Gone); listing again" in log, log[-3000:]


# -- bindings answered by a fault-injecting proxy in front of the real API server ---------


@pytest.mark.parametrize(
    "fault",
    [
        Fault("POST", BINDING, "drop_after", times=6, delay=1.0),
        Fault("POST", BINDING, "drop_after", times=6),
        Fault("POST", BINDING, "answer_after", 504, times=6),
        Fault("POST", BINDING, "answer_after", 409, times=6),
        Fault("POST", BINDING, "answer", 409, times=6),
        Fault("POST", BINDING, "answer", 429, times=6),
        Fault("POST", BINDING, "answer", 500, times=6),
        Fault("POST", BINDING, "answer", 503, times=6),
    ],
    ids=[
        "timeout-that-landed-watch-first",
        "timeout-that-landed",
        "504-that-landed",
        "409-that-landed",
        "409-not-bound",
        "429",
        "500",
        "503",
    ],
)
def test_binding_faults_bind_every_pod_once_without_overcommit(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    fault: Fault,
) -> None:
    """The first bindings meet a fault between the shim and the real API server: no
    answer although the binding was made (a timeout; the watch event first, or the
    failure first), a 504 or a 409 after the binding was made, or a 409, 429, 500 or 503
    before it. 22 pods for 20 places: every place is taken by exactly one pod, bound
    once (one Scheduled event each), and two pods are reported unschedulable. A binding
    taken for failed while made must not be made again (409) nor free its place; a
    binding refused must be retried, not dropped."""
    profile = profile_for(namespace)
    nodes = node_names(fake_nodes(4, cpu="4", pods=5))
    with fault_proxy(cluster, tmp_path / "proxy") as proxy:
        proxy.add(fault)
        shim = Shim(
            write_config(tmp_path / "c.yaml", profile), proxy.kubeconfig, tmp_path / "shim.log"
        ).start()
        with running(shim):
            objects.create_pods(kube, _pods(namespace, profile, 22))
            _decided(kube, namespace, shim, bound=20, unschedulable=2)
            assert len(fault.hits) == fault.times, fault.hits
            _bound_once(kube, namespace, 20)
            assert_no_overcommit(kube, nodes, filled=FILL)
            assert shim.metric("scheduler_cache_size", type="assumed_pods") == 0
            assert shim.running


# -- a pod bound while its scheduling cycle runs (cache.go AssumePod) ----------------------


def _bound_pods_anywhere(kube: KubeApi) -> int:
    """Pods bound to a node, in the whole cluster, that the shim's cache must count."""
    return sum(
        1
        for p in kube.get("/api/v1/pods")["items"]
        if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")
    )


def test_assume_race_a_pod_bound_during_its_cycle_keeps_its_place(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    """The race of a binding that landed late, or of a second scheduler: pod ``raced``
    is bound by someone else while its cycle runs (held in a slow PreFilter plugin), the
    shim's informer has it, then the cycle places it in the one free place, where it
    already is. Assuming it over the informer's copy, binding it (409) and forgetting
    it would leave that node a pod short in the cache, and the next pods would
    overcommit it. Nodes: 3 of 4 pods, 11 taken before; afterwards two more pods come,
    and both must be reported unschedulable."""
    profile = profile_for(namespace)
    env = holdplugin.install(tmp_path / "site")
    config = write_config(tmp_path / "c.yaml", profile, extra=holdplugin.CONFIG)
    nodes = node_names(fake_nodes(3, cpu="4", pods=4))
    server = Server(config, tmp_path / "serve.log", env=env).start()
    shim = Shim(
        config, cluster.kubeconfig, tmp_path / "shim.log", server=server.address, env=env
    ).start()
    with running(shim, server):
        objects.create_pods(kube, _pods(namespace, profile, 11, prefix="filler"))
        wait_all_bound(kube, namespace, 11, timeout=60)
        taken = {n: 0 for n in nodes}
        for p in pods_of(kube, namespace):
            taken[p["spec"]["nodeName"]] += 1
        (free,) = [n for n, count in taken.items() if count < 4]

        gate = tmp_path / "release-raced"
        (raced,) = _pods(namespace, profile, 1, prefix="raced")
        raced["metadata"]["annotations"] = {holdplugin.ANNOTATION: str(gate)}
        objects.create_pods(kube, [raced])
        wait_for(lambda: Path(f"{gate}.held").exists(), 30, "raced's cycle held", server.log)
        # Created while raced's cycle is held: its cycle (it fits nowhere) comes after
        # raced's, so its verdict says raced's cycle is over.
        (sentinel,) = _pods(namespace, profile, 1, prefix="sentinel", selector={"none": "x"})
        objects.create_pods(kube, [sentinel])
        kube.create(
            f"/api/v1/namespaces/{namespace}/pods/raced-0/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "raced-0", "namespace": namespace},
                "target": {"apiVersion": "v1", "kind": "Node", "name": free},
            },
        )
        wait_for(
            lambda: shim.metric("scheduler_cache_size", type="pods") == _bound_pods_anywhere(kube),
            30,
            "the shim's informer has raced bound",
            shim.log,
        )
        gate.touch()
        wait_all_decided(kube, namespace, 13, shim, timeout=60)

        objects.create_pods(kube, _pods(namespace, profile, 2, prefix="late"))
        bound, unschedulable = _decided(kube, namespace, shim, bound=12, unschedulable=3)
        assert unschedulable == ["late-0", "late-1", "sentinel-0"], (bound, unschedulable)
        assert_no_overcommit(kube, nodes, filled=FILL)
        raced_now = kube.get(f"/api/v1/namespaces/{namespace}/pods/raced-0")
        assert raced_now["spec"]["nodeName"] == free
        counts = scheduled_events(kube, namespace)
        assert counts == {f"filler-{i}": 1 for i in range(11)}, counts
        assert shim.metric("scheduler_cache_size", type="pods") == _bound_pods_anywhere(kube)


def test_pod_recreated_with_the_same_name_during_its_cycle(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    """Pod ``again`` is deleted and created anew (same name, new uid) while its cycle is
    held in the plugin server: the old cycle's placement is dropped, the new pod is
    scheduled in its own cycle and bound once, the old uid leaves nothing in the cache.
    2 nodes of 3 pods, 7 pods: 6 bound, 1 unschedulable."""
    profile = profile_for(namespace)
    env = holdplugin.install(tmp_path / "site")
    config = write_config(tmp_path / "c.yaml", profile, extra=holdplugin.CONFIG)
    nodes = node_names(fake_nodes(2, cpu="4", pods=3))
    server = Server(config, tmp_path / "serve.log", env=env).start()
    shim = Shim(
        config, cluster.kubeconfig, tmp_path / "shim.log", server=server.address, env=env
    ).start()
    with running(shim, server):
        objects.create_pods(kube, _pods(namespace, profile, 5, prefix="filler"))
        wait_all_bound(kube, namespace, 5, timeout=60)
        gate = tmp_path / "release-again"
        (held,) = _pods(namespace, profile, 1, prefix="again")
        held["metadata"]["annotations"] = {holdplugin.ANNOTATION: str(gate)}
        old_uid = objects.create_pods(kube, [held])[0]["metadata"]["uid"]
        wait_for(lambda: Path(f"{gate}.held").exists(), 30, "the old pod's cycle held", server.log)
        objects.delete_pods(kube, namespace, ["again-0"])
        wait_for(
            lambda: "again-0" not in {p["metadata"]["name"] for p in pods_of(kube, namespace)},
            30,
            "the old pod gone",
        )
        (anew,) = _pods(namespace, profile, 1, prefix="again")
        new_uid = objects.create_pods(kube, [anew])[0]["metadata"]["uid"]
        assert new_uid != old_uid
        gate.touch()
        wait_all_bound(kube, namespace, 6, timeout=60)
        objects.create_pods(kube, _pods(namespace, profile, 1, prefix="late"))
        bound, unschedulable = _decided(kube, namespace, shim, bound=6, unschedulable=1)
        assert unschedulable == ["late-0"], (bound, unschedulable)
        assert (
            kube.get(f"/api/v1/namespaces/{namespace}/pods/again-0")["metadata"]["uid"] == new_uid
        )
        assert_no_overcommit(kube, nodes, filled=FILL)
        _bound_once(kube, namespace, 6)
        wait_for(
            lambda: shim.metric("scheduler_cache_size", type="pods") == _bound_pods_anywhere(kube),
            30,
            "the shim's cache counts what is bound",
            shim.log,
        )
