"""``berth shim`` schedules on a real kube-apiserver: pods for its profiles are bound,
others are left alone, pending pods are explained the way kube-scheduler explains them,
and a burst of pods lands without any pod bound twice or any node overcommitted, over
each transport (ScheduleStream, ScheduleBatch, in-process)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import NodeFactory
from berth.kube.rest import JSON, KubeApi
from tests.integration.shimtools import (
    Server,
    Shim,
    assert_no_overcommit,
    pods_of,
    profile_for,
    running,
    scheduled_events,
    wait_all_bound,
    wait_for,
    wait_scheduled_events,
    write_config,
)

pytestmark = pytest.mark.integration


def _condition(pod: JSON, kind: str) -> JSON | None:
    return next((c for c in pod["status"].get("conditions", []) if c["type"] == kind), None)


def _wait_condition(kube: KubeApi, ns: str, name: str, timeout: float = 30.0) -> JSON:
    path = f"/api/v1/namespaces/{ns}/pods/{name}"
    wait_for(
        lambda: _condition(kube.get(path), "PodScheduled") is not None,
        timeout,
        f"pod {ns}/{name} got a PodScheduled condition",
    )
    pod: JSON = kube.get(path)
    return pod


def test_binds_its_profiles_pods_and_leaves_other_schedulers_pods_alone(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    profile = profile_for(namespace)
    nodes = [n["metadata"]["name"] for n in fake_nodes(3, cpu="4", memory="8Gi")]
    shim = Shim(
        write_config(tmp_path / "c.yaml", profile), cluster.kubeconfig, tmp_path / "shim.log"
    )
    with running(shim.start()):
        objects.create_pods(
            kube,
            [
                objects.pod(f"ours-{i}", namespace=namespace, cpu="500m", scheduler_name=profile)
                for i in range(6)
            ]
            + [objects.pod("theirs", namespace=namespace, scheduler_name="someone-else")],
        )
        pods = wait_all_bound(kube, namespace, 6, timeout=60)
        by_name = {p["metadata"]["name"]: p for p in pods}
        for i in range(6):
            assert by_name[f"ours-{i}"]["spec"]["nodeName"] in nodes
        # Give the shim a moment in which it could (wrongly) touch the other pod.
        time.sleep(1.0)
        theirs = kube.get(f"/api/v1/namespaces/{namespace}/pods/theirs")
        assert not theirs["spec"].get("nodeName")
        assert _condition(theirs, "PodScheduled") is None
        events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
        assert not [e for e in events if e["regarding"]["name"] == "theirs"]
        assert wait_scheduled_events(kube, namespace, 6) == {f"ours-{i}": 1 for i in range(6)}
        for e in events:
            if e["reason"] == "Scheduled":
                name = e["regarding"]["name"]
                node = by_name[name]["spec"]["nodeName"]
                assert e["note"] == f"Successfully assigned {namespace}/{name} to {node}"
                assert e["type"] == "Normal"
                assert e["reportingController"] == profile


def test_pending_pod_is_explained_like_kube_scheduler(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    k8s_bin_dir: Path,
) -> None:
    """schedule_one.go handleSchedulingFailure: FailedScheduling with the FitError text and
    PodScheduled=False/Unschedulable with the same message."""
    profile = profile_for(namespace)
    fake_nodes(2, prefix="small", cpu="2")
    fake_nodes(1, prefix="cordoned", cpu="64", unschedulable=True)
    shim = Shim(
        write_config(tmp_path / "c.yaml", profile), cluster.kubeconfig, tmp_path / "shim.log"
    )
    with running(shim.start()):
        objects.create_pods(
            kube, [objects.pod("big", namespace=namespace, cpu="8", scheduler_name=profile)]
        )
        pod = _wait_condition(kube, namespace, "big")
        # The cluster may hold other tests' nodes; the message counts all of them.
        total = len(kube.get("/api/v1/nodes")["items"])
        cond = _condition(pod, "PodScheduled")
        assert cond is not None
        assert cond["status"] == "False"
        assert cond["reason"] == "Unschedulable"
        msg = cond["message"]
        assert msg.startswith(f"0/{total} nodes are available: ")
        assert "1 node(s) were unschedulable" in msg
        assert "Insufficient cpu" in msg
        events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
        failed = [e for e in events if e["reason"] == "FailedScheduling"]
        assert len(failed) == 1, failed
        assert failed[0]["note"] == msg
        assert failed[0]["type"] == "Warning"
        assert failed[0]["action"] == "Scheduling"
        out = subprocess.run(
            [
                str(k8s_bin_dir / "kubectl"),
                "--kubeconfig",
                str(cluster.kubeconfig),
                "describe",
                "pod",
                "big",
                "-n",
                namespace,
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        assert "FailedScheduling" in out
        assert "Insufficient cpu" in out
        # Status-only updates (the condition patch itself) must not make it retry in a
        # loop: the pod sits in the unschedulable pool.
        time.sleep(2.0)
        assert shim.metric("scheduler_pending_pods", queue="unschedulable") == 1.0
        attempts = shim.metric(
            "scheduler_schedule_attempts_total", result="unschedulable", profile=profile
        )
        assert attempts == 1.0
        # A node that fits arrives: the pod is moved and bound (NodeAdd).
        big = fake_nodes(1, prefix="big", cpu="16")[0]["metadata"]["name"]
        pods = wait_all_bound(kube, namespace, 1, timeout=30)
        assert pods[0]["spec"]["nodeName"] == big


@pytest.mark.parametrize(
    "mode",
    ["stream", "batch", "inprocess"],
)
def test_1000_pods_on_100_nodes_each_bound_once_without_overcommit(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    mode: str,
) -> None:
    profile = profile_for(namespace)
    config = write_config(tmp_path / "c.yaml", profile)
    nodes = [n["metadata"]["name"] for n in fake_nodes(100, cpu="4", memory="16Gi")]
    server = Server(config, tmp_path / "serve.log") if mode != "inprocess" else None
    extra = ["--batch-size", "1"] if mode == "stream" else ["--batch-size", "32"]
    if server is not None:
        server.start()
    shim = Shim(
        config,
        cluster.kubeconfig,
        tmp_path / "shim.log",
        server=server.address if server else None,
        extra=[*extra, "--kube-api-qps", "2000", "--kube-api-burst", "2000"],
    )
    procs = [shim.start()] + ([server] if server else [])
    with running(*procs):
        # 350m each: 11 fit a 4-CPU node, 1100 places for 1000 pods.
        objects.create_pods(
            kube,
            [
                objects.pod(
                    f"p-{i}", namespace=namespace, cpu="350m", memory="64Mi", scheduler_name=profile
                )
                for i in range(1000)
            ],
        )
        pods = wait_all_bound(kube, namespace, 1000, timeout=300)
        assert all(p["spec"]["nodeName"] in nodes for p in pods)
        assert_no_overcommit(kube, nodes)
        counts = wait_scheduled_events(kube, namespace, 1000)
        assert len(counts) == 1000
        assert set(counts.values()) == {1}, {k: v for k, v in counts.items() if v != 1}
        assert (
            shim.metric("scheduler_schedule_attempts_total", result="scheduled", profile=profile)
            == 1000
        )
        assert (
            shim.metric("scheduler_schedule_attempts_total", result="error", profile=profile) == 0
        )
    assert shim.proc is not None and shim.proc.returncode == 0, shim.text()[-2000:]


def test_pods_of_the_profile_already_bound_are_not_touched(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    """A pod with spec.nodeName set counts on its node; the shim only schedules pending
    pods (it never re-binds)."""
    profile = profile_for(namespace)
    node = fake_nodes(1, cpu="2")[0]["metadata"]["name"]
    objects.create_pods(
        kube,
        [
            objects.pod(
                "preset", namespace=namespace, cpu="1500m", scheduler_name=profile, node_name=node
            )
        ],
    )
    shim = Shim(
        write_config(tmp_path / "c.yaml", profile), cluster.kubeconfig, tmp_path / "shim.log"
    )
    with running(shim.start()):
        objects.create_pods(
            kube, [objects.pod("late", namespace=namespace, cpu="1", scheduler_name=profile)]
        )
        pod = _wait_condition(kube, namespace, "late")
        cond = _condition(pod, "PodScheduled")
        assert cond is not None and "Insufficient cpu" in cond["message"]
        assert scheduled_events(kube, namespace) == {}
        names = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods_of(kube, namespace)}
        assert names == {"preset": node, "late": None}


def test_batches_shrink_to_what_the_plugin_server_takes(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    """berth serve --max-batch-pods 4 refuses the shim's 32-pod batches (RESOURCE_EXHAUSTED):
    the shim halves its batches until they fit, without a backoff and without losing a pod."""
    profile = profile_for(namespace)
    config = write_config(tmp_path / "c.yaml", profile)
    fake_nodes(10, cpu="8")
    server = Server(config, tmp_path / "serve.log", extra=["--max-batch-pods", "4"]).start()
    shim = Shim(
        config,
        cluster.kubeconfig,
        tmp_path / "shim.log",
        server=server.address,
        extra=["--batch-size", "32"],
    ).start()
    with running(shim, server):
        objects.create_pods(
            kube,
            [
                objects.pod(f"p-{i}", namespace=namespace, scheduler_name=profile)
                for i in range(100)
            ],
        )
        wait_all_bound(kube, namespace, 100, timeout=120)
        assert "sending at most" in shim.text()
        assert set(wait_scheduled_events(kube, namespace, 100).values()) == {1}
