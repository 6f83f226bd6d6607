"""A deposed leader writes nothing: two ``berth shim`` processes on one Lease, the leader
paused (SIGSTOP) past the lease duration while it has bindings waiting, the standby
taking over, the old leader resumed (SIGCONT).

kube-scheduler's guarantee is that a leader stops once its renew loop gives up
(client-go leaderelection.go renew, RenewDeadline) and exits ("leaderelection lost",
cmd/kube-scheduler/app/server.go OnStoppedLeading). A paused process cannot stop: when
it runs again, the work that was ready runs before its renew loop notices anything. The
shim's write fence (shim/fence.py) refuses every write once the renew deadline has
passed on the monotonic clock, so the old leader's bindings never reach the API server.

The proof is the API server's audit log (berth/dev/localcluster's SCHEDULER_WRITES_AUDIT_POLICY:
bindings, pod deletions, pod status writes and events, with user and time): the two shims
authenticate as different users (client certificates for berth-shim-a and berth-shim-b), and
no write of berth-shim-a may have been received after berth-shim-b's acquireTime in the
Lease. The leader's rate limit (5 writes/s) keeps most of its bindings waiting when it is
paused; without the fence it sends them the moment it runs again. Nodes end up 100% full
of CPU requests and no node is overcommitted.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from berth.dev.localcluster import LocalCluster, objects
from berth.dev.localcluster.binaries import default_bin_dir, require_binaries
from berth.dev.localcluster.cluster import (
    SCHEDULER_WRITES_AUDIT_POLICY,
    ClusterConfig,
    read_audit_log,
)
from berth.dev.localcluster.pki import user_kubeconfig
from berth.kube.rest import KubeApi
from tests.integration.shimtools import (
    Shim,
    assert_no_overcommit,
    pods_of,
    running,
    wait_for,
    write_config,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

PROFILE = "berth-fencing"
NAMESPACE = "fencing"
LEASE_NAME = "berth-fencing"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE_NAME}"
NODES = 5
NODE_CPU = 2  # cores: 20 pods of 100m each
PODS = NODES * NODE_CPU * 10 + 8  # 8 more than fit
USERS = ("berth-shim-a", "berth-shim-b")
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster of its own whose API server keeps an audit log of scheduler writes."""
    bin_dir = default_bin_dir()
    require_binaries(bin_dir)
    local = LocalCluster(
        ClusterConfig(
            state_dir=tmp_path_factory.mktemp("audited-cluster"),
            bin_dir=bin_dir,
            die_with_parent=True,
            audit_policy=SCHEDULER_WRITES_AUDIT_POLICY,
        )
    )
    local.start()
    try:
        yield local
    finally:
        local.stop()


def micro(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def lease_spec(kube: KubeApi) -> dict[str, Any]:
    try:
        spec: dict[str, Any] = kube.get(LEASE_PATH)["spec"]
    except Exception:
        return {}
    return spec


def bound(kube: KubeApi) -> int:
    return sum(1 for p in pods_of(kube, NAMESPACE) if p["spec"].get("nodeName"))


def test_a_leader_paused_past_its_lease_writes_nothing_after_the_new_leader_acquires(
    audited: LocalCluster, tmp_path: Path
) -> None:
    cluster = audited.cluster
    kube = cluster.client()
    pki_dir = cluster.kubeconfig.parent / "pki"
    kubeconfigs = [
        user_kubeconfig(
            pki_dir,
            tmp_path / f"{u}.kubeconfig",
            server=cluster.server,
            user=u,
            group="system:masters",
        )
        for u in USERS
    ]
    objects.create_namespace(kube, NAMESPACE)
    nodes = objects.create_nodes(
        kube, [objects.node(f"fence-{i}", cpu=str(NODE_CPU), memory="64Gi") for i in range(NODES)]
    )
    node_names = [n["metadata"]["name"] for n in nodes]
    config = write_config(
        tmp_path / "config.yaml",
        PROFILE,
        extra=(
            "leaderElection:\n  leaderElect: true\n  leaseDuration: 4s\n  renewDeadline: 3s\n"
            f"  retryPeriod: 1s\n  resourceName: {LEASE_NAME}\n  resourceNamespace: {NAMESPACE}\n"
        ),
    )
    # The leader binds at most 5 pods a second: most of its bindings wait for the rate
    # limiter when it is paused, and are due the moment it runs again.
    first = Shim(
        config,
        kubeconfigs[0],
        tmp_path / "a.log",
        leader_elect=True,
        extra=["--kube-api-qps", "5", "--kube-api-burst", "1"],
    ).start()
    second: Shim | None = None
    try:
        wait_for(
            lambda: "scheduling" in first.get("/readyz")[1], 60, "the first shim leading", first.log
        )
        first_identity = lease_spec(kube)["holderIdentity"]
        second = Shim(config, kubeconfigs[1], tmp_path / "b.log", leader_elect=True).start()
        assert "standing by" in second.get("/readyz")[1]

        objects.create_pods(
            kube,
            [
                objects.pod(f"p-{i:03d}", namespace=NAMESPACE, cpu="100m", scheduler_name=PROFILE)
                for i in range(PODS)
            ],
        )
        wait_for(lambda: bound(kube) >= 10, 60, "the leader binding", first.log)
        assert first.proc is not None
        os.kill(first.proc.pid, signal.SIGSTOP)
        try:
            wait_for(
                lambda: lease_spec(kube).get("holderIdentity") not in ("", first_identity),
                60,
                "the standby taking the lease",
                second.log,
            )
            # The new leader fills the nodes (100% of their CPU), the 8 extra pods stay
            # pending with its FailedScheduling writes.
            wait_for(lambda: bound(kube) >= PODS - 8, 120, "the new leader binding", second.log)
        finally:
            os.kill(first.proc.pid, signal.SIGCONT)
        # kube-scheduler exits with status 1 when it loses its lease.
        try:
            code = first.proc.wait(60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the deposed leader did not exit:\n{first.text()[-3000:]}")
        spec = lease_spec(kube)
    finally:
        with running(first, *([second] if second is not None else [])):
            pass

    acquired = micro(spec["acquireTime"])
    events = [e for e in read_audit_log(audited.state.state_dir) if e.get("verb") in WRITE_VERBS]
    by_user: dict[str, list[dict[str, Any]]] = {u: [] for u in USERS}
    for e in events:
        user = e.get("user", {}).get("username")
        if user in by_user:
            by_user[user].append(e)

    def received(e: dict[str, Any]) -> dt.datetime:
        return micro(e["requestReceivedTimestamp"])

    def is_binding(e: dict[str, Any]) -> bool:
        ref = e.get("objectRef", {})
        return bool(ref.get("resource") == "pods" and ref.get("subresource") == "binding")

    a_before = [e for e in by_user["berth-shim-a"] if received(e) < acquired]
    a_after = [e for e in by_user["berth-shim-a"] if received(e) >= acquired]
    b_after = [e for e in by_user["berth-shim-b"] if received(e) >= acquired]
    # The log does record both users' bindings: the check below is not empty by accident.
    assert sum(1 for e in a_before if is_binding(e)) >= 10
    assert any(is_binding(e) for e in b_after)
    assert a_after == [], [
        (e["verb"], e["objectRef"], e["requestReceivedTimestamp"], e.get("responseStatus"))
        for e in a_after[:10]
    ]

    # kube-scheduler's exit after a loss: status 1, "leaderelection lost".
    assert code == 1, first.text()[-3000:]
    assert "leaderelection lost" in first.text()

    # Full, and not overcommitted.
    pods = pods_of(kube, NAMESPACE)
    used = sum(100 for p in pods if p["spec"].get("nodeName"))
    assert used >= 0.95 * NODES * NODE_CPU * 1000, used
    assert_no_overcommit(kube, node_names)
