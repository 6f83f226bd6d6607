"""``berth explain`` and the GangScheduling plugin on a real kube-apiserver that serves
Kubernetes v1.36's Workload API (``--runtime-config=scheduling.k8s.io/v1alpha2=true
--feature-gates=GenericWorkload=true``): a cluster of its own for this module, so the
other integration tests keep the session's plain one.

- A PodGroup with a gang of minCount 3 and two member pods: both wait at PreEnqueue,
  ``berth explain`` says the gang is short, member by member, and what to create; the
  third member gets all three bound.
- A gang whose members do not fit: the node-level reasons are summed over the members
  and the fix (less cpu), applied, gets the gang bound.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from berth.dev.localcluster import Cluster, LocalCluster, objects
from berth.dev.localcluster.binaries import default_bin_dir, require_binaries
from berth.dev.localcluster.cluster import WORKLOAD_API_ARGS, ClusterConfig
from berth.dev.localcluster.testing import NodeFactory
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi
from tests.integration import test_explain
from tests.integration.shimtools import (
    Shim,
    example_config_as,
    node_names,
    profile_for,
    running,
    wait_for,
    wait_node_of,
    wait_unschedulable,
)
from tests.integration.test_explain import (
    explain,
    explain_json,
    pod,
    recreate,
    secure_shim,
)

pytestmark = pytest.mark.integration

PODGROUPS = "/apis/scheduling.k8s.io/v1alpha2"

# test_explain's fixture: a kubeconfig that may only ``get`` /debug/explain.
caller = test_explain.caller


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A kube-apiserver + etcd serving the Workload API, for this module's tests
    (overrides the session's ``cluster``)."""
    directory = default_bin_dir()
    require_binaries(directory)
    local = LocalCluster(
        ClusterConfig(
            state_dir=tmp_path_factory.mktemp("berth-workload-cluster"),
            bin_dir=directory,
            die_with_parent=True,
            apiserver_args=WORKLOAD_API_ARGS,
        )
    )
    local.start()
    try:
        yield local.cluster
    finally:
        local.stop()


@pytest.fixture(scope="module")
def kube(cluster: Cluster) -> Iterator[KubeApi]:
    with cluster.client() as client:
        yield client


def member(namespace: str, name: str, profile: str, group: str, **kwargs: Any) -> JSON:
    spec = pod(namespace, name, profile, **kwargs)
    spec["spec"]["schedulingGroup"] = {"podGroupName": group}
    return spec


@contextlib.contextmanager
def pod_group(kube: KubeApi, namespace: str, name: str, min_count: int) -> Iterator[None]:
    """A Workload with one gang template and its PodGroup (the API server's
    admission refuses a PodGroup whose Workload does not exist)."""
    workloads = f"{PODGROUPS}/namespaces/{namespace}/workloads"
    path = f"{PODGROUPS}/namespaces/{namespace}/podgroups"
    policy = {"gang": {"minCount": min_count}}
    kube.create(
        workloads,
        {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "Workload",
            "metadata": {"name": name},
            "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": policy}]},
        },
    )
    kube.create(
        path,
        {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {
                "podGroupTemplateRef": {
                    "workload": {"workloadName": name, "podGroupTemplateName": "workers"}
                },
                "schedulingPolicy": policy,
            },
        },
    )
    try:
        yield
    finally:
        for gone in (f"{path}/{name}", f"{workloads}/{name}"):
            with contextlib.suppress(ApiError):
                kube.delete(gone)


def gang_shim(namespace: str, tmp_path: Path, cluster: Cluster) -> tuple[str, Shim]:
    profile = profile_for(namespace)
    config = example_config_as(
        "gangscheduling", "gang-scheduler", profile, tmp_path / "scheduler-config.yaml"
    )
    return profile, secure_shim(config, cluster.kubeconfig, tmp_path / "s.log")


def test_workload_api_is_served_and_keeps_the_scheduling_group(kube: KubeApi) -> None:
    found = kube.get(PODGROUPS)
    assert "podgroups" in [r["name"] for r in found["resources"]]


def test_gang_short_of_members_waits_at_pre_enqueue_and_the_third_member_completes_it(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    caller: Path,
) -> None:
    fake_nodes(2, cpu="4")
    profile, shim = gang_shim(namespace, tmp_path, cluster)
    members = [member(namespace, f"team-{i}", profile, "team") for i in range(3)]
    with pod_group(kube, namespace, "team", 3), running(shim.start()):
        created = objects.create_pods(kube, members[:2])
        # The API server kept the field (GenericWorkload on).
        assert created[0]["spec"]["schedulingGroup"] == {"podGroupName": "team"}

        def both_gated() -> bool:
            doc = explain_json(shim, caller, f"{namespace}/team-0")
            states = [m["state"] for m in doc.get("podGroup", {}).get("members", [])]
            return states == ["gated at PreEnqueue by GangScheduling"] * 2

        wait_for(both_gated, 60, "both members gated by GangScheduling", shim.log)
        doc = explain_json(shim, caller, f"{namespace}/team-0")
        assert doc["queue"]["queue"] == "gated"
        assert doc["queue"]["gatedBy"] == "GangScheduling"
        group = doc["podGroup"]
        assert group["name"] == f"{namespace}/team"
        assert group["api"] == "scheduling.k8s.io/v1alpha2"
        assert group["minCount"] == 3 and group["assigned"] == 0
        assert [m["pod"] for m in group["members"]] == ["team-0", "team-1"]
        assert "gated at PreEnqueue by GangScheduling" in doc["why"]
        assert f"PodGroup {namespace}/team needs 3 member(s): 2 exist, 0 assigned" in doc["why"]
        assert (
            f"create 1 more pod(s) with spec.schedulingGroup.podGroupName team in namespace "
            f"{namespace} (or lower the PodGroup's minCount to 2)"
        ) in doc["fixes"]
        code, table, err = explain(shim, caller, f"{namespace}/team-1")
        assert code == 0, err
        assert "PodGroup" in table and "minCount 3" in table, table
        assert "gated at PreEnqueue by GangScheduling" in table, table
        # The fix applied: the third member.
        objects.create_pods(kube, members[2:])
        for m in ("team-0", "team-1", "team-2"):
            wait_node_of(kube, namespace, m, shim)


def test_gang_that_does_not_fit_sums_the_node_reasons_and_the_fix_gets_it_bound(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    caller: Path,
) -> None:
    nodes = node_names(fake_nodes(2, cpu="2"))
    profile, shim = gang_shim(namespace, tmp_path, cluster)
    members = [member(namespace, f"big-{i}", profile, "big", cpu="2500m") for i in range(2)]
    with pod_group(kube, namespace, "big", 2), running(shim.start()):
        objects.create_pods(kube, members)
        for m in ("big-0", "big-1"):
            wait_unschedulable(kube, namespace, m, shim)
        doc = explain_json(shim, caller, f"{namespace}/big-0")
        group = doc["podGroup"]
        assert group["minCount"] == 2 and group["assigned"] == 0
        assert [m["state"] for m in group["members"]] == ["pending", "pending"]
        # Each member was turned away by both nodes: 2 members x 2 nodes, summed.
        reasons = {r["reason"]: r["nodes"] for r in group["nodeReasons"]}
        assert reasons == {"NodeResourcesFit: Insufficient cpu": 4}, group["nodeReasons"]
        fix = doc["fixes"][0]
        assert fix.startswith("2 nodes would fit with 500m less cpu (checked: a cycle"), fix
        assert not [f for f in doc["fixes"] if f.startswith("create ")], doc["fixes"]
        # The fix applied to each member: 500m less.
        for i in range(2):
            recreate(kube, member(namespace, f"big-{i}", profile, "big", cpu="2"))
        bound = {wait_node_of(kube, namespace, f"big-{i}", shim, timeout=90) for i in range(2)}
        assert bound == set(nodes)


def test_members_created_before_their_pod_group_wait_for_it_then_bind(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    caller: Path,
) -> None:
    """PreEnqueue's "waiting for pods's pod group" gate, lifted by the PodGroup's
    arrival (its Add event, through GangScheduling's hint)."""
    fake_nodes(2, cpu="4")
    profile, shim = gang_shim(namespace, tmp_path, cluster)
    members = [member(namespace, f"late-{i}", profile, "late") for i in range(3)]
    with running(shim.start()):
        objects.create_pods(kube, members)

        def all_gated() -> bool:
            doc = explain_json(shim, caller, f"{namespace}/late-0")
            states = [m["state"] for m in doc.get("podGroup", {}).get("members", [])]
            return states == ["gated at PreEnqueue by GangScheduling"] * 3

        wait_for(all_gated, 60, "the members gated by GangScheduling", shim.log)
        group = explain_json(shim, caller, f"{namespace}/late-0")["podGroup"]
        assert group["problem"] == (
            "the PodGroup does not exist (or this scheduler does not read it)"
        )
        with pod_group(kube, namespace, "late", 3):
            for m in ("late-0", "late-1", "late-2"):
                wait_node_of(kube, namespace, m, shim)
