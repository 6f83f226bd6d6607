"""Opportunistic batching (framework/batch.py), after upstream's
pkg/scheduler/framework/runtime/batch_test.go and schedule_one_test.go: which
profiles and pods sign, when the last ranking gives a hint, and that a run
with batching places every pod where one-at-a-time scheduling does."""

from __future__ import annotations

import random

import pytest
from prometheus_client import REGISTRY as REGISTRY_METRICS

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.batch import (
    MAX_BATCH_AGE,
    OpportunisticBatch,
    batch_for,
    sign_pod,
)
from berth.framework.config import default_config, parse_config_text
from berth.framework.cycle_state import CycleState
from berth.framework.model import PodInfo
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.snapshot import Snapshot
from berth.framework.testing import make_node, make_pod, snapshot_of
from berth.plugins.registry import REGISTRY

# Upstream's default plugins with PodTopologySpread's default constraints
# off: the one change that lets the default profile batch (its system
# default constraints make every pod unsignable, podtopologyspread/plugin.go
# SignPod).
BATCHING_CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: batching
    pluginConfig:
      - name: PodTopologySpread
        args:
          defaultingType: List
"""


def batching_framework() -> Framework:
    (profile,) = parse_config_text(BATCHING_CONFIG, "test", REGISTRY).profiles
    return Framework(profile, REGISTRY)


def one_pod_per_node_cluster(n: int) -> Snapshot:
    """Nodes of 1 to n CPUs with that many cores used but one: each takes one
    more 1-CPU pod, and their scores differ."""
    nodes = [
        make_node(f"n{i}").capacity(cpu=str(i), memory="64Gi", pods=110).obj()
        for i in range(1, n + 1)
    ]
    fillers = [
        make_pod(f"filler-{i}").node(f"n{i}").req(cpu=f"{i - 1}").obj() for i in range(2, n + 1)
    ]
    return snapshot_of(nodes, fillers)


def gpu_pod(name: str) -> pb.Pod:
    return make_pod(name).req(cpu="1", memory="1Gi").obj()


def place_all(
    fw: Framework, snap: Snapshot, pods: list[pb.Pod], batching: bool
) -> tuple[list[str], OpportunisticBatch | None]:
    """Schedules the pods in order on one snapshot, assuming each placed pod
    as the caller would, with consecutive cycle numbers."""
    batch = batch_for(snap, fw.name) if batching else None
    placed = []
    for cycle, proto in enumerate(pods, start=1):
        result = schedule_pod(
            fw,
            snap,
            CycleState(),
            PodInfo(proto),
            rng=random.Random(cycle),
            batch=batch,
            cycle=cycle,
        )
        placed.append(result.node)
        if result.node:
            delta = pb.ClusterDelta()
            assumed = delta.upsert_pods.add()
            assumed.CopyFrom(proto)
            assumed.node_name = result.node
            snap.apply(delta)
    return placed, batch


def test_the_default_profile_does_not_batch_because_of_default_spread_constraints() -> None:
    """framework.go computeBatchablePlugins with PodTopologySpread's system
    defaults: no pod of the default profile is signable."""
    (profile,) = default_config(REGISTRY).profiles
    fw = Framework(profile, REGISTRY)
    assert fw.signers is None
    assert sign_pod(fw.name, fw.signers, PodInfo(gpu_pod("p"))) is None


def test_every_default_plugin_signs_so_a_profile_without_default_constraints_batches() -> None:
    fw = batching_framework()
    assert fw.signers is not None
    names = {p.name for p in fw.signers}
    assert {"NodeResourcesFit", "TaintToleration", "InterPodAffinity", "ImageLocality"} <= names


def test_pods_that_differ_only_in_name_share_a_signature() -> None:
    fw = batching_framework()
    a = sign_pod(fw.name, fw.signers, PodInfo(gpu_pod("a")))
    b = sign_pod(fw.name, fw.signers, PodInfo(gpu_pod("b")))
    assert a is not None and a == b
    bigger = make_pod("c").req(cpu="2", memory="1Gi").obj()
    assert sign_pod(fw.name, fw.signers, PodInfo(bigger)) != a
    tolerating = make_pod("d").req(cpu="1", memory="1Gi").obj()
    tolerating.tolerations.add(key="gpu", operator="Exists")
    assert sign_pod(fw.name, fw.signers, PodInfo(tolerating)) != a
    other_ns = make_pod("e", namespace="other").req(cpu="1", memory="1Gi").obj()
    assert sign_pod(fw.name, fw.signers, PodInfo(other_ns)) != a


@pytest.mark.parametrize(
    "why",
    ["pod anti-affinity", "topology spread constraint", "resource claim"],
)
def test_pods_upstream_refuses_to_sign_get_no_signature(why: str) -> None:
    """interpodaffinity, podtopologyspread and dynamicresources SignPod."""
    fw = batching_framework()
    pod = gpu_pod("p")
    if why == "pod anti-affinity":
        term = pod.affinity.pod_anti_affinity.required.add()
        term.topology_key = "kubernetes.io/hostname"
    elif why == "topology spread constraint":
        pod.topology_spread_constraints.add(
            max_skew=1, topology_key="zone", when_unsatisfiable="DoNotSchedule"
        )
    else:
        pod.resource_claims.add(name="gpu", resource_claim_name="claim")
    assert sign_pod(fw.name, fw.signers, PodInfo(pod)) is None


def test_pods_one_per_node_take_the_next_node_of_the_ranking_and_land_as_one_at_a_time() -> None:
    """schedule_one_test.go, the batching cases: after the first pod fills
    its node, each next pod of the same signature gets the next node of the
    first cycle's ranking as a hint, which passes Filter, so no other node is
    evaluated; every pod lands where scheduling one at a time puts it."""
    fw = batching_framework()
    pods = [gpu_pod(f"p{i}") for i in range(5)]
    alone, _ = place_all(fw, one_pod_per_node_cluster(6), pods, batching=False)
    batched, batch = place_all(fw, one_pod_per_node_cluster(6), pods, batching=True)
    assert batched == alone
    assert len(set(batched)) == 5
    assert batch is not None and batch.batched_pods == 4


def test_a_hint_is_not_given_when_the_last_node_still_fits() -> None:
    """batch.go batchStateCompatible: node_not_full. Pods that share nodes
    (two fit on every node) never batch, and still land as one at a time."""
    fw = batching_framework()
    nodes = [
        make_node(f"n{i}").capacity(cpu=str(2 * i), memory="64Gi", pods=110).obj()
        for i in range(1, 4)
    ]
    pods = [gpu_pod(f"p{i}") for i in range(4)]
    alone, _ = place_all(fw, snapshot_of(nodes, []), pods, batching=False)
    batched, batch = place_all(fw, snapshot_of(nodes, []), pods, batching=True)
    assert batched == alone
    assert batch is not None and batch.batched_pods == 0


def test_a_different_pod_a_skipped_cycle_or_an_old_ranking_gives_no_hint() -> None:
    """batch.go batchStateCompatible: pod_incompatible, pod_skipped, expired."""
    fw = batching_framework()
    now = [0.0]
    snap = one_pod_per_node_cluster(4)
    batch = OpportunisticBatch(fw.name, clock=lambda: now[0])
    snap.batches[fw.name] = batch

    def run(pod: pb.Pod, cycle: int) -> str:
        result = schedule_pod(fw, snap, CycleState(), PodInfo(pod), batch=batch, cycle=cycle)
        delta = pb.ClusterDelta()
        assumed = delta.upsert_pods.add()
        assumed.CopyFrom(pod)
        assumed.node_name = result.node
        snap.apply(delta)
        return result.node

    run(gpu_pod("a"), 1)
    # Cycle 3 does not follow cycle 1: another profile's pod came between.
    run(gpu_pod("b"), 3)
    assert batch.batched_pods == 0
    # A pod of another signature.
    run(make_pod("c").req(cpu="1", memory="2Gi").obj(), 4)
    assert batch.batched_pods == 0
    # Older than MAX_BATCH_AGE.
    now[0] += MAX_BATCH_AGE + 0.01
    run(make_pod("d").req(cpu="1", memory="2Gi").obj(), 5)
    assert batch.batched_pods == 0


def test_an_explanation_neither_uses_nor_changes_the_ranking() -> None:
    fw = batching_framework()
    snap = one_pod_per_node_cluster(3)
    batch = batch_for(snap, fw.name)
    result = schedule_pod(
        fw, snap, CycleState(), PodInfo(gpu_pod("a")), explain=True, batch=batch, cycle=1
    )
    assert result.node
    assert batch.batched_pods == 0
    assert batch.node_hint(lambda _: True, snap, None, 2) == ""


def _flushed(profile: str, reason: str) -> float:
    value = REGISTRY_METRICS.get_sample_value(
        "scheduler_batch_cache_flushed_total", {"profile": profile, "reason": reason}
    )
    return value or 0.0


def test_an_unsigned_pod_flushes_as_not_batchable_and_a_lone_node_as_an_empty_list() -> None:
    """batch.go StoreScheduleResults: a cycle that ranked other nodes for a
    pod without a signature counts pod_not_batchable (schedule_one.go
    schedulePod passes the ranking whatever the signature); one feasible node
    passes none, empty_list. Berth does not build the ranking of an unsigned
    pod, yet counts it the same."""
    (profile,) = default_config(REGISTRY).profiles
    fw = Framework(profile, REGISTRY)
    nodes = [make_node(f"n{i}").capacity(cpu="4", memory="8Gi", pods=110).obj() for i in range(3)]
    snap = snapshot_of(nodes, [])
    before = _flushed(fw.name, "pod_not_batchable"), _flushed(fw.name, "empty_list")
    place_all(fw, snap, [gpu_pod("a"), gpu_pod("b")], batching=True)
    assert _flushed(fw.name, "pod_not_batchable") == before[0] + 2
    assert _flushed(fw.name, "empty_list") == before[1]
    lone = snapshot_of([nodes[0]], [])
    place_all(fw, lone, [gpu_pod("c")], batching=True)
    assert _flushed(fw.name, "empty_list") == before[1] + 1
