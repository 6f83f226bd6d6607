"""GangScheduling against upstream kube-scheduler: the end state of a gang under each.

A control plane of its own serving Kubernetes v1.36's Workload API
(``berth.dev.localcluster.cluster.WORKLOAD_API_ARGS``), with kube-scheduler started with
``--feature-gates=GenericWorkload=true,GangScheduling=true`` and a profile that enables the
plugin, and ``berth shim`` with the same profile under another name. Each case runs once
per scheduler, one after the other, in a namespace of its own, on the same nodes (the pods
of the first run are deleted before the second starts).

Upstream pops a gang whole and places it in one pod group cycle
(pkg/scheduler/schedule_one_podgroup.go, podGroupCycle); Berth places the members one by
one and holds them at Permit until minCount are assumed
(plugins/gangscheduling/README.md). So only end states are compared, and every case is one
whose end state both reach in seconds: a gang that fits (each member bound once minCount
exist), a gang short of members (PreEnqueue gates them at once, on both), a gang that
cannot fit (upstream's cycle fails at once; Berth's first members wait at Permit, none is
bound, for the 5 minutes of gangscheduling.go's permitTimeoutDuration, which this test does
not wait out: that none is bound within the settle window is the comparison; their
PodScheduled conditions differ, a strict xfail below), and members created before their
PodGroup (PreEnqueue gates them until it appears).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.dev.localcluster import LocalCluster, objects, start_kube_scheduler
from berth.dev.localcluster.binaries import default_bin_dir, require_binaries
from berth.dev.localcluster.cluster import WORKLOAD_API_ARGS, ClusterConfig
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi
from tests.integration.shimtools import Shim, running, wait_for

UPSTREAM = "gang-upstream"
BERTH = "gang-berth"
API = "/apis/scheduling.k8s.io/v1alpha2"
# Long enough for either scheduler to have acted on pods that can be placed (both bind a
# fitting gang well within a second here); a pod still pending then stays pending.
SETTLE = 4.0
BOUND_TIMEOUT = 60.0


def profile(name: str) -> JSON:
    return {
        "schedulerName": name,
        "plugins": {"multiPoint": {"enabled": [{"name": "GangScheduling"}]}},
    }


def scheduler_config(name: str) -> JSON:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [profile(name)],
    }


@dataclass
class Outcome:
    nodes: dict[str, str]  # pod: node, "" while pending
    conditions: dict[str, str]  # pod: its PodScheduled condition, "" without one


@dataclass
class Gang:
    cluster: LocalCluster
    kube: KubeApi


@pytest.fixture(scope="module")
def gang(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gang]:
    bin_dir = default_bin_dir()
    require_binaries(bin_dir)
    local = LocalCluster(
        ClusterConfig(
            state_dir=tmp_path_factory.mktemp("gang-diff-cluster"),
            bin_dir=bin_dir,
            die_with_parent=True,
            apiserver_args=WORKLOAD_API_ARGS,
        )
    )
    local.start()
    work = tmp_path_factory.mktemp("gang-diff-schedulers")
    cluster = local.cluster
    kubeconfig = cluster.scheduler_kubeconfig or cluster.kubeconfig
    berth_config = work / "berth.yaml"
    berth_config.write_text(yaml.safe_dump(scheduler_config(BERTH)))
    try:
        with (
            start_kube_scheduler(
                cluster,
                work / "kube-scheduler",
                config=scheduler_config(UPSTREAM),
                scheduler_name=UPSTREAM,
                extra_args=["--feature-gates=GenericWorkload=true,GangScheduling=true"],
            ),
            cluster.client() as kube,
        ):
            shim = Shim(berth_config, kubeconfig, work / "shim.log")
            with running(shim):
                shim.start()
                yield Gang(local, kube)
    finally:
        local.stop()


@pytest.fixture
def nodes(gang: Gang) -> Iterator[Any]:
    created: list[str] = []

    def make(count: int, cpu: str) -> list[str]:
        specs = [objects.node(f"gang-node-{len(created) + i}", cpu=cpu) for i in range(count)]
        names = [n["metadata"]["name"] for n in objects.create_nodes(gang.kube, specs)]
        created.extend(names)
        return names

    yield make
    objects.delete_nodes(gang.kube, created)


def workload(kube: KubeApi, namespace: str, name: str, min_count: int) -> None:
    """The Workload a PodGroup refers to (the API server's admission refuses a PodGroup
    whose Workload does not exist)."""
    kube.create(
        f"{API}/namespaces/{namespace}/workloads",
        {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "Workload",
            "metadata": {"name": name},
            "spec": {
                "podGroupTemplates": [
                    {"name": "workers", "schedulingPolicy": {"gang": {"minCount": min_count}}}
                ]
            },
        },
    )


def pod_group(kube: KubeApi, namespace: str, name: str, min_count: int) -> None:
    kube.create(
        f"{API}/namespaces/{namespace}/podgroups",
        {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {
                "podGroupTemplateRef": {
                    "workload": {"workloadName": name, "podGroupTemplateName": "workers"}
                },
                "schedulingPolicy": {"gang": {"minCount": min_count}},
            },
        },
    )


def members(namespace: str, scheduler: str, count: int, cpu: str) -> list[JSON]:
    pods = []
    for i in range(count):
        p = objects.pod(f"m-{i}", namespace=namespace, scheduler_name=scheduler, cpu=cpu)
        p["spec"]["schedulingGroup"] = {"podGroupName": "gang"}
        p["spec"]["terminationGracePeriodSeconds"] = 0
        pods.append(p)
    return pods


def conditions(kube: KubeApi, namespace: str) -> dict[str, str]:
    """Each pod's PodScheduled condition, ``status reason: message`` ("" without one)."""
    pods = kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    found = {}
    for p in pods:
        cond = [c for c in p.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"]
        found[p["metadata"]["name"]] = (
            f"{cond[0]['status']} {cond[0].get('reason', '')}: {cond[0].get('message', '')}"
            if cond
            else ""
        )
    return found


def placements(kube: KubeApi, namespace: str) -> dict[str, str]:
    """Each pod of the namespace and its node ("" while pending)."""
    pods = kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods}


@contextlib.contextmanager
def side(gang: Gang, name: str) -> Iterator[str]:
    """A namespace for one scheduler's run; its pods are gone (and the other scheduler has
    seen them go) before the next run starts."""
    namespace = f"{name}-{time.monotonic_ns() % 10**9}"
    objects.create_namespace(gang.kube, namespace)
    try:
        yield namespace
    finally:
        objects.delete_pods(gang.kube, namespace)
        wait_for(lambda: not placements(gang.kube, namespace), 30, f"pods of {namespace} gone")
        with contextlib.suppress(ApiError):
            objects.delete_namespace(gang.kube, namespace)
        # The schedulers' pod watches see the deletions within milliseconds; give them
        # a moment so the next run starts from empty nodes in both caches.
        time.sleep(1.0)


def run(
    gang: Gang,
    scheduler: str,
    *,
    min_count: int,
    count: int,
    cpu: str,
    group_first: bool = True,
    want_bound: bool,
    log: Path | None = None,
) -> Outcome:
    with side(gang, scheduler) as namespace:
        workload(gang.kube, namespace, "gang", min_count)
        if group_first:
            pod_group(gang.kube, namespace, "gang", min_count)
        objects.create_pods(gang.kube, members(namespace, scheduler, count, cpu))
        if not group_first:
            # Members before their PodGroup: none may be bound while it is missing.
            time.sleep(SETTLE)
            early = placements(gang.kube, namespace)
            assert not any(early.values()), f"{scheduler}: bound without a PodGroup: {early}"
            pod_group(gang.kube, namespace, "gang", min_count)
        if want_bound:
            wait_for(
                lambda: all(placements(gang.kube, namespace).values()),
                BOUND_TIMEOUT,
                f"{scheduler}: every member of the gang bound",
                log,
            )
        else:
            time.sleep(SETTLE)
        return Outcome(placements(gang.kube, namespace), conditions(gang.kube, namespace))


def both(gang: Gang, **case: Any) -> tuple[Outcome, Outcome]:
    upstream = run(gang, UPSTREAM, **case)
    berth = run(gang, BERTH, **case)
    return upstream, berth


def nodes_used(outcome: Outcome) -> Sequence[str]:
    return sorted(outcome.nodes.values())


BOUND = "True : "
# Upstream's condition on a member its pod group cycle placed but could not bind for want
# of the rest (schedule_one_podgroup.go: the group's failure, then the member's own
# status from Permit's Wait in gangscheduling.go).
UPSTREAM_GANG_WAITING = (
    "False Unschedulable: pod group is unschedulable, waiting for minCount pods from a gang "
    "to be scheduled, one or more plugins asked to wait and no plugin rejected pod"
)


def test_gang_with_room_for_all_is_bound_whole_on_the_same_nodes(gang: Gang, nodes: Any) -> None:
    """Three nodes of 1 cpu, three members of 600m, minCount 3: one member per node is the
    only placement, so both must use every node once (which member lands where is a tie
    on identical nodes, upstream's included, and is not compared)."""
    names = nodes(3, cpu="1")
    upstream, berth = both(gang, min_count=3, count=3, cpu="600m", want_bound=True)
    assert nodes_used(upstream) == sorted(names), upstream
    assert nodes_used(berth) == nodes_used(upstream), (upstream, berth)
    assert upstream.conditions == dict.fromkeys(upstream.nodes, BOUND), upstream
    assert berth.conditions == upstream.conditions, berth


def test_gang_on_one_node_is_bound_there(gang: Gang, nodes: Any) -> None:
    """One node with room for all: the placement is unique, member by member."""
    (name,) = nodes(1, cpu="4")
    upstream, berth = both(gang, min_count=3, count=3, cpu="500m", want_bound=True)
    assert upstream.nodes == {f"m-{i}": name for i in range(3)}, upstream
    assert berth == upstream


def test_gang_with_fewer_members_than_min_count_has_none_bound(gang: Gang, nodes: Any) -> None:
    """minCount 3, two members: PreEnqueue keeps both out of the active queue, on both
    schedulers, so neither gets a PodScheduled condition (a PreEnqueue rejection other than
    scheduling gates writes no status upstream)."""
    nodes(2, cpu="1")
    upstream, berth = both(gang, min_count=3, count=2, cpu="100m", want_bound=False)
    assert upstream == Outcome({"m-0": "", "m-1": ""}, {"m-0": "", "m-1": ""}), upstream
    assert berth == upstream


@pytest.fixture(scope="module")
def does_not_fit(gang: Gang) -> tuple[Outcome, Outcome]:
    """minCount 3, three members of 600m, two nodes of 1 cpu: only two fit. Run once for
    the two tests below."""
    names = [objects.node(f"gang-tight-{i}", cpu="1") for i in range(2)]
    objects.create_nodes(gang.kube, names)
    try:
        return both(gang, min_count=3, count=3, cpu="600m", want_bound=False)
    finally:
        objects.delete_nodes(gang.kube, [n["metadata"]["name"] for n in names])


def test_gang_whose_min_count_does_not_fit_has_none_bound(
    does_not_fit: tuple[Outcome, Outcome],
) -> None:
    """None is bound on either, and the member left without a node gets the same FitError
    on both (upstream's pod group cycle assumes none; Berth's first two wait at Permit)."""
    upstream, berth = does_not_fit
    assert upstream.nodes == {"m-0": "", "m-1": "", "m-2": ""}, upstream
    assert berth.nodes == upstream.nodes, berth
    no_room = [c for c in upstream.conditions.values() if c != UPSTREAM_GANG_WAITING]
    assert len(no_room) == 1 and "Insufficient cpu" in no_room[0], upstream
    assert list(upstream.conditions.values()).count(UPSTREAM_GANG_WAITING) == 2, upstream
    assert no_room[0] in berth.conditions.values(), (upstream, berth)


@pytest.mark.xfail(
    strict=True,
    reason=(
        "known difference (plugins/gangscheduling/README.md, 'One pod at a time'): the "
        "members that fit get upstream's pod group failure as their PodScheduled condition; "
        "under Berth they wait at Permit with none (holding their capacity in Berth's cache) "
        "until the 5-minute permitTimeoutDuration of gangscheduling.go"
    ),
)
def test_gang_whose_min_count_does_not_fit_has_the_same_conditions(
    does_not_fit: tuple[Outcome, Outcome],
) -> None:
    upstream, berth = does_not_fit
    # Upstream's side is checked by the test above: this fails on Berth's alone.
    assert sorted(berth.conditions.values()) == sorted(upstream.conditions.values()), berth


def test_members_created_before_their_pod_group_are_bound_once_it_appears(
    gang: Gang, nodes: Any
) -> None:
    """Members with no PodGroup wait (PreEnqueue, on both); the PodGroup's arrival gets
    the whole gang bound (the PodGroup-added event moves them on)."""
    (name,) = nodes(1, cpu="4")
    upstream, berth = both(
        gang, min_count=2, count=2, cpu="100m", group_first=False, want_bound=True
    )
    assert upstream.nodes == {"m-0": name, "m-1": name}, upstream
    assert berth == upstream
