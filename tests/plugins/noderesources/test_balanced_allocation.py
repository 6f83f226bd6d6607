"""NodeResourcesBalancedAllocation: upstream's v1.36 cases
(balanced_allocation_test.go, TestNodeResourcesBalancedAllocation; the DRA
cases are left out, Berth does not serve DRA), its args
(validation_pluginargs_test.go, TestValidateNodeResourcesBalancedAllocationArgs;
defaults.go, SetDefaults_NodeResourcesBalancedAllocationArgs), and the batch
form checked equal to the per-node form on random clusters. Quantities are
upstream's: CPU in millicores, memory in bytes."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
import yaml

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.config import parse_config
from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import Plugin
from berth.framework.model import PodInfo
from berth.framework.profile import PluginRef, ProfileConfig
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.status import Code
from berth.framework.testing import fresh_state, make_node, make_pod, snapshot_of
from berth.plugins.defaultbinder import DefaultBinder
from berth.plugins.noderesources import (
    BalancedAllocation,
    BalancedAllocationArgs,
    NodeResourcesBalancedAllocationArgs,
)
from berth.plugins.noderesources.args import ResourceSpec
from berth.plugins.noderesources.balanced_allocation import (
    PRE_SCORE_STATE_KEY,
    PreScoreState,
    balanced_resource_score,
    balanced_resource_scorer,
    balanced_resource_scores,
    improvement_scores,
)
from berth.plugins.noderesources.resource_allocation import IntArray
from berth.plugins.queuesort import PrioritySort

GPU = "nvidia.com/gpu"
DEFAULT = [ResourceSpec("cpu", 1), ResourceSpec("memory", 1)]
WITH_GPU = [*DEFAULT, ResourceSpec(GPU, 1)]


def node(name: str, milli_cpu: int, memory: int, gpus: int | None = None) -> pb.Node:
    """util_test.go, makeNode: capacity = allocatable."""
    extra = {} if gpus is None else {GPU: gpus}
    return make_node(name).capacity(cpu=f"{milli_cpu}m", memory=memory, **extra).obj()


def cpu_only(cpu: str) -> dict[str, Any]:
    return {"cpu": cpu}


def cpu_and_memory(cpu: str, memory: str) -> dict[str, Any]:
    return {"cpu": cpu, "memory": memory}


def cpu_memory_gpu(cpu: str, memory: str, gpu: str) -> dict[str, Any]:
    return {"cpu": cpu, "memory": memory, GPU: gpu}


def pod(*containers: dict[str, Any], on: str = "") -> pb.Pod:
    """st.MakePod().Node(on).Req(c1).Req(c2)...Obj()."""
    w = make_pod().node(on)
    for c in containers:
        w.req(**c)
    return w.obj()


TWO_CONTAINERS = (cpu_and_memory("1000m", "2000"), cpu_and_memory("2000m", "3000"))
CPU_POD = (cpu_only("1000m"), cpu_only("2000m"))


@dataclass
class Case:
    pod: pb.Pod
    nodes: list[pb.Node]
    want: list[int]
    existing: list[pb.Pod] = field(default_factory=list)
    resources: list[ResourceSpec] = field(default_factory=lambda: list(DEFAULT))
    run_pre_score: bool = True


# TestNodeResourcesBalancedAllocation at v1.36, by upstream's case names.
# Each comment: fractions without -> with the pod, balance without -> with.
UPSTREAM: dict[str, Case] = {
    # node1 cpu 0 -> .75, mem 0 -> .5: 100 -> 87; node2 .5/.5: 100 -> 100.
    "nothing scheduled, resources requested, differently sized nodes": Case(
        pod(*TWO_CONTAINERS), [node("node1", 4000, 10000), node("node2", 6000, 10000)], [68, 75]
    ),
    # node1 cpu .3 -> .6, mem 0 -> .25: 85 -> 82; node2 .3/.25 -> .6/.5: 97 -> 95.
    "resources requested, pods scheduled with resources": Case(
        pod(*TWO_CONTAINERS),
        [node("node1", 10000, 20000), node("node2", 10000, 20000)],
        [73, 74],
        existing=[pod(*CPU_POD, on="node1"), pod(*TWO_CONTAINERS, on="node2")],
    ),
    # node2 mem .1 -> .2: 90 -> 80.
    "resources requested, pods scheduled with resources, differently sized nodes": Case(
        pod(*TWO_CONTAINERS),
        [node("node1", 10000, 20000), node("node2", 10000, 50000)],
        [73, 70],
        existing=[pod(*CPU_POD, on="node1"), pod(*TWO_CONTAINERS, on="node2")],
    ),
    # node1 cpu 1, mem 0 -> 1: 50 -> 100; node2 cpu 0, mem 0 -> 1: 100 -> 50.
    "resources requested, pods scheduled with resources, nodes to reach min/max score": Case(
        pod({"memory": "2000"}, {"memory": "3000"}),
        [node("node1", 3000, 5000), node("node2", 3000, 5000)],
        [100, 50],
        existing=[pod(*CPU_POD, on="node1")],
    ),
    # node1 cpu .5 -> 1, mem 0: 75 -> 50; node2 cpu .5 -> 1, mem .5: 100 -> 75.
    "requested resources at node capacity": Case(
        pod(*CPU_POD),
        [node("node1", 6000, 10000), node("node2", 6000, 10000)],
        [62, 62],
        existing=[pod(*CPU_POD, on="node1"), pod(*TWO_CONTAINERS, on="node2")],
    ),
    # Three fractions: node1 gpu 3/8 -> 4/8: 69 -> 70; node2 gpu 0 -> 1/8: 62 -> 65.
    "scalar resource is included in the score computation if pod requests the scalar resource": Case(
        pod(cpu_memory_gpu("0", "0", "1")),
        [node("node1", 3500, 40000, gpus=8), node("node2", 3500, 40000, gpus=8)],
        [75, 76],
        existing=[
            pod(cpu_and_memory("1000m", "2000"), cpu_memory_gpu("2000m", "3000", "3"), on="node1"),
            pod(*TWO_CONTAINERS, on="node2"),
        ],
        resources=WITH_GPU,
    ),
    # The pod asks for no GPU: only cpu and memory count, on both nodes.
    "scalar resource is not included in the score computation if pod doesn't request the scalar resource": Case(
        pod(*TWO_CONTAINERS),
        [node("node1", 3500, 40000, gpus=8), node("node2", 3500, 40000)],
        [56, 56],
        resources=WITH_GPU,
    ),
    "resources requested, pods scheduled with resources if PreScore not called": Case(
        pod(*TWO_CONTAINERS),
        [node("node1", 10000, 20000), node("node2", 10000, 20000)],
        [73, 74],
        existing=[pod(*CPU_POD, on="node1"), pod(*TWO_CONTAINERS, on="node2")],
        run_pre_score=False,
    ),
}

# Not upstream's: what the upstream cases leave out.
MORE: dict[str, Case] = {
    # "over": cpu 3000/2000 is capped at 1 before and after, mem 0 -> .5:
    # 50 -> 75, score 87; "empty": .25/.5: 100 -> 87, score 68.
    "a fraction above 1 is capped at 1": Case(
        pod(cpu_and_memory("500m", "5000")),
        [node("over", 2000, 10000), node("empty", 2000, 10000)],
        [87, 68],
        existing=[pod(cpu_only("3000m"), on="over")],
    ),
    # A node without the resource at all (allocatable 0) leaves it out:
    # "nocpu" has one fraction (memory) before and after: 100 -> 100.
    "a resource the node has none of is left out": Case(
        pod(cpu_and_memory("1000m", "5000")),
        [node("nocpu", 0, 10000), node("both", 2000, 10000)],
        [75, 75],
    ),
    # Three resources on one node, two on the other (no GPU there): the k > 2
    # formula and the k == 2 shortcut in one batch. "gpu": .5/0/0 ->
    # .75/.1/.5: 76 -> 73, score 73; "nogpu": .5/0 -> .75/.1: 75 -> 67, score 71.
    "k == 2 and k > 2 side by side": Case(
        pod(cpu_memory_gpu("1000m", "1000", "2")),
        [node("gpu", 4000, 10000, gpus=4), node("nogpu", 4000, 10000)],
        [73, 71],
        existing=[pod(cpu_only("2000m"), on="gpu"), pod(cpu_only("2000m"), on="nogpu")],
        resources=WITH_GPU,
    ),
}


def score_both(case: Case) -> tuple[list[int], list[int]]:
    """(per-node Score, batch Score) in node order, PreScore first if asked."""
    snap = snapshot_of(case.nodes, case.existing)
    plugin = BalancedAllocation(NodeResourcesBalancedAllocationArgs(case.resources))
    p = PodInfo(case.pod)
    names = [n.name for n in case.nodes]
    state = fresh_state()
    if case.run_pre_score:
        assert plugin.pre_score(state, p, snap.batch(names)).is_success
    per_node = [plugin.score(state, p, snap.nodes[n]) for n in names]
    batch = plugin.score_nodes(state, p, snap.batch(names)).tolist()
    return per_node, batch


@pytest.mark.parametrize("case", list(UPSTREAM.values()), ids=list(UPSTREAM))
def test_scores_match_upstream_v1_36(case: Case) -> None:
    per_node, batch = score_both(case)
    assert per_node == batch == case.want


@pytest.mark.parametrize("case", list(MORE.values()), ids=list(MORE))
def test_more_scores(case: Case) -> None:
    per_node, batch = score_both(case)
    assert per_node == batch == case.want


def test_pre_score_skips_a_best_effort_pod() -> None:
    # "nothing scheduled, nothing requested, skip in PreScore".
    snap = snapshot_of([node("node1", 4000, 10000), node("node2", 4000, 10000)])
    state = fresh_state()
    status = BalancedAllocation().pre_score(state, PodInfo(pod()), snap.all_nodes())
    assert status.code is Code.SKIP
    assert PRE_SCORE_STATE_KEY not in state


def test_best_effort_means_no_request_of_a_configured_resource() -> None:
    # A GPU-only pod is best effort for the default cpu/memory set, and an
    # explicit request of 0 is still none; not so once the GPU is configured.
    snap = snapshot_of([node("n", 4000, 10000, gpus=2)])
    gpu_pod = PodInfo(pod({GPU: "1"}))
    zero_pod = PodInfo(pod({"cpu": "0", "memory": "0"}))
    for p in (gpu_pod, zero_pod):
        assert BalancedAllocation().pre_score(fresh_state(), p, snap.all_nodes()).is_skip
    with_gpu = BalancedAllocation(NodeResourcesBalancedAllocationArgs(WITH_GPU))
    assert with_gpu.pre_score(fresh_state(), gpu_pod, snap.all_nodes()).is_success


def test_score_without_pre_score_gives_a_best_effort_pod_zero() -> None:
    snap = snapshot_of([node("node1", 4000, 10000), node("node2", 4000, 10000)])
    plugin = BalancedAllocation()
    p = PodInfo(pod())
    assert [plugin.score(fresh_state(), p, ni) for ni in snap.all_nodes()] == [0, 0]
    assert plugin.score_nodes(fresh_state(), p, snap.all_nodes()).tolist() == [0, 0]


def test_pre_score_state_travels_encoded() -> None:
    snap = snapshot_of([node("node1", 4000, 10000), node("node2", 6000, 10000)])
    plugin = BalancedAllocation()
    p = PodInfo(pod(*TWO_CONTAINERS))
    state = CycleState()
    assert plugin.pre_score(state, p, snap.all_nodes()).is_success
    wire = state.encode()
    assert msgspec.msgpack.decode(wire[PRE_SCORE_STATE_KEY.name], type=PreScoreState) == (
        PreScoreState([3000, 5000])
    )
    back = CycleState.decode(wire)
    assert plugin.score_nodes(back, p, snap.all_nodes()).tolist() == [68, 75]


def test_the_requests_are_plain_not_non_zero_and_include_init_containers_and_overhead() -> None:
    # Upstream's useRequested: a container without requests adds nothing
    # (NodeResourcesFit would count 100m / 200Mi), while init containers and
    # overhead count as in PodRequests.
    plugin = BalancedAllocation()
    bare = make_pod().container().req(cpu="100m", memory="100").info()
    assert plugin.scorer.pod_requests(bare) == [100, 100]
    stepped = (
        make_pod()
        .req(cpu="100m", memory="100")
        .init_req(cpu="500m", memory="50")
        .overhead(cpu="10m", memory="1")
        .info()
    )
    assert plugin.scorer.pod_requests(stepped) == [510, 101]


# -- batch form = per-node form ---------------------------------------------------

RESOURCE_SETS = {
    "cpu, memory": DEFAULT,
    "cpu, memory, ephemeral-storage": [*DEFAULT, ResourceSpec("ephemeral-storage", 1)],
    "cpu, memory, two extended": [*WITH_GPU, ResourceSpec("example.com/foo", 1)],
    "memory only": [ResourceSpec("memory", 1)],
}


def random_cluster(rng: random.Random, n: int) -> tuple[list[pb.Node], list[pb.Pod]]:
    nodes: list[pb.Node] = []
    pods: list[pb.Pod] = []
    for i in range(n):
        q: dict[str, Any] = {
            "cpu": f"{rng.choice([0, 500, 1000, 4000, 16000])}m",
            "memory": rng.choice([0, 1000, 4096, 10000]),
            "ephemeral-storage": rng.choice([0, 100, 1000]),
        }
        if rng.random() < 0.5:
            q[GPU] = rng.choice([0, 1, 4, 8])
        if rng.random() < 0.3:
            q["example.com/foo"] = rng.choice([1, 3])
        name = f"n{i}"
        nodes.append(make_node(name).capacity(**q).obj())
        for _ in range(rng.randrange(4)):
            r: dict[str, Any] = {
                "cpu": f"{rng.choice([0, 100, 700, 3000])}m",
                "memory": rng.choice([0, 300, 2000, 9000]),
                "ephemeral-storage": rng.choice([0, 50, 700]),
            }
            if rng.random() < 0.4:
                r[GPU] = rng.choice([1, 2, 5])
            if rng.random() < 0.2:
                r["example.com/foo"] = rng.choice([1, 2, 4])
            pods.append(make_pod(f"e{i}-{len(pods)}").node(name).req(**r).obj())
    return nodes, pods


def random_pod(rng: random.Random) -> pb.Pod:
    r: dict[str, Any] = {
        "cpu": f"{rng.choice([0, 250, 1000, 5000])}m",
        "memory": rng.choice([0, 500, 3000]),
        "ephemeral-storage": rng.choice([0, 10, 400]),
    }
    if rng.random() < 0.5:
        r[GPU] = rng.choice([1, 3])
    if rng.random() < 0.3:
        r["example.com/foo"] = 1
    return make_pod("incoming").req(**r).obj()


@pytest.mark.parametrize("resources", list(RESOURCE_SETS.values()), ids=list(RESOURCE_SETS))
def test_batch_form_equals_per_node_form_on_random_clusters(resources: list[ResourceSpec]) -> None:
    rng = random.Random(20260401)
    plugin = BalancedAllocation(NodeResourcesBalancedAllocationArgs(resources))
    for _ in range(25):
        nodes, existing = random_cluster(rng, 60)
        snap = snapshot_of(nodes, existing)
        batch = snap.all_nodes()
        for _ in range(4):
            p = PodInfo(random_pod(rng))
            state = fresh_state()
            if not plugin.pre_score(state, p, batch).is_success:
                continue
            want = [plugin.score(state, p, ni) for ni in batch]
            assert plugin.score_nodes(state, p, batch).tolist() == want
            # A subset in another order, as a feasible set would be.
            part = batch.take(rng.sample(range(len(batch)), 17))
            assert plugin.score_nodes(state, p, part).tolist() == [
                plugin.score(state, p, ni) for ni in part
            ]


@pytest.mark.parametrize("signed", [False, True], ids=["sane amounts", "negative amounts too"])
@pytest.mark.parametrize("resources", [1, 2, 3, 5, 14])
def test_column_functions_equal_the_go_arithmetic_of_the_one_node_functions(
    signed: bool, resources: int
) -> None:
    # Negative amounts never come from a real cluster; they drive fractions
    # below 0 and the truncating halving of a negative change.
    rng = np.random.default_rng(11)
    n = 500
    low = -60 if signed else 0
    cols: list[tuple[IntArray, IntArray] | None] = []
    pod_requests: list[int] = []
    for _ in range(resources):
        alloc = rng.integers(low, 100, n, dtype=np.int64)
        alloc[rng.random(n) < 0.25] = 0
        cols.append((rng.integers(low, 160, n, dtype=np.int64), alloc))
        pod_requests.append(int(rng.integers(0, 30)))
    cols.append(None)  # a resource no candidate scores
    pod_requests.append(0)
    with_pod = balanced_resource_scores(cols, n).tolist()
    change = improvement_scores(cols, pod_requests, n).tolist()
    for k in range(n):
        raw = [int(c[0][k]) if c is not None else 0 for c in cols]
        have = [int(c[1][k]) if c is not None else 0 for c in cols]
        # As calculateNodeAllocatableRequest fills them: 0 where allocatable is.
        allocated = [
            r - p if a != 0 else 0 for r, p, a in zip(raw, pod_requests, have, strict=True)
        ]
        requested = [r if a != 0 else 0 for r, a in zip(raw, have, strict=True)]
        assert with_pod[k] == balanced_resource_score(requested, have), k
        assert change[k] == balanced_resource_scorer(requested, allocated, have), k


def test_every_node_having_every_resource_takes_the_same_arithmetic() -> None:
    # The all-present fast path (no masks) against the one-node functions.
    rng = np.random.default_rng(5)
    n = 300
    for resources in (2, 3, 4):
        cols: list[tuple[IntArray, IntArray] | None] = [
            (rng.integers(0, 300, n, dtype=np.int64), rng.integers(1, 200, n, dtype=np.int64))
            for _ in range(resources)
        ]
        pod_requests = [int(x) for x in rng.integers(0, 50, resources)]
        change = improvement_scores(cols, pod_requests, n).tolist()
        for k in range(n):
            req = [int(c[0][k]) for c in cols if c is not None]
            alloc = [int(c[1][k]) for c in cols if c is not None]
            allocated = [r - p for r, p in zip(req, pod_requests, strict=True)]
            assert change[k] == balanced_resource_scorer(req, allocated, alloc)


def test_score_formula_by_hand() -> None:
    # balancedResourceScore: two fractions .75 and .25 -> std .25 -> 75;
    # three fractions 1, 0, .5 -> mean .5, std sqrt(.5/3) = .408 -> 59.
    assert balanced_resource_score([3, 1], [4, 4]) == 75
    assert balanced_resource_score([4, 0, 1], [4, 4, 2]) == 59
    # One or no fraction: std 0.
    assert balanced_resource_score([3, 9], [4, 0]) == 100
    assert balanced_resource_score([], []) == 100
    # balancedResourceScorer: 50 + (50 + 75 - 100) / 2 = 62 (Go truncates 12.5).
    assert balanced_resource_scorer([3, 1], [0, 0], [4, 4]) == 62


# -- args -------------------------------------------------------------------------


def decode(raw: dict[str, Any]) -> NodeResourcesBalancedAllocationArgs:
    return msgspec.convert(raw, NodeResourcesBalancedAllocationArgs)


def test_args_default_to_cpu_and_memory_weight_1() -> None:
    assert decode({}).resources == DEFAULT
    assert BalancedAllocationArgs is NodeResourcesBalancedAllocationArgs
    assert BalancedAllocation().scorer.resources == tuple(DEFAULT)


def test_args_missing_or_zero_weight_becomes_1() -> None:
    args = decode({"resources": [{"name": "cpu"}, {"name": GPU, "weight": 0}]})
    assert args.resources == [ResourceSpec("cpu", 1), ResourceSpec(GPU, 1)]
    args.validate()


def test_args_refuse_unknown_fields() -> None:
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        decode({"resource": [{"name": "cpu"}]})
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        decode({"resources": [{"name": "cpu", "weigth": 1}]})


INVALID = {
    # TestValidateNodeResourcesBalancedAllocationArgs.
    "invalid config": (
        {"resources": [{"name": "cpu", "weight": 2}, {"name": "memory", "weight": 1}]},
        "resources[0].weight: invalid value 2: must be 1",
    ),
    "repeated resources": (
        {"resources": [{"name": "cpu", "weight": 1}, {"name": "cpu", "weight": 1}]},
        "resources[1].name: duplicate value 'cpu'",
    ),
    "every error at once": (
        {"resources": [{"name": "cpu", "weight": -1}, {"name": "cpu", "weight": 3}]},
        "resources[0].weight: invalid value -1: must be 1; resources[1].name: duplicate value "
        "'cpu'; resources[1].weight: invalid value 3: must be 1",
    ),
}


@pytest.mark.parametrize(("raw", "message"), list(INVALID.values()), ids=list(INVALID))
def test_invalid_args_name_the_field_and_reason(raw: dict[str, Any], message: str) -> None:
    args = decode(raw)
    with pytest.raises(ValueError) as info:
        args.validate()
    assert str(info.value) == message
    # Building the plugin checks the args as NewBalancedAllocation does.
    with pytest.raises(ValueError):
        BalancedAllocation(args)


def test_valid_config_passes() -> None:
    # TestValidateNodeResourcesBalancedAllocationArgs, "valid config".
    decode(
        {"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]}
    ).validate()


# -- through a whole cycle ------------------------------------------------------------

REGISTRY: dict[str, type[Plugin]] = {
    "PrioritySort": PrioritySort,
    "NodeResourcesBalancedAllocation": BalancedAllocation,
    "DefaultBinder": DefaultBinder,
}


def framework() -> Framework:
    """BalancedAllocation as upstream's default profile enables it: PreScore
    and Score with weight 1."""
    ref = PluginRef("NodeResourcesBalancedAllocation")
    return Framework(
        ProfileConfig(
            "test",
            {
                "queueSort": (PluginRef("PrioritySort"),),
                "preScore": (ref,),
                "score": (PluginRef("NodeResourcesBalancedAllocation", 1),),
                "bind": (PluginRef("DefaultBinder"),),
            },
        ),
        REGISTRY,
    )


def test_cycle_prefers_the_node_the_pod_evens_out() -> None:
    # "cpu-heavy" runs a CPU-only pod; a memory-only pod evens it out
    # (62 -> 87: score 87), while on "empty" it skews the balance (100 -> 75: 62).
    snap = snapshot_of(
        [node("empty", 4000, 4000), node("cpu-heavy", 4000, 4000)],
        [pod(cpu_only("3000m"), on="cpu-heavy")],
    )
    result = schedule_pod(
        framework(), snap, CycleState(), PodInfo(pod({"memory": "2000"})), explain=True
    )
    assert result.status.is_success, result.message
    assert result.node == "cpu-heavy"
    assert result.scores is not None
    weighted = result.scores.weighted["NodeResourcesBalancedAllocation"].tolist()
    assert dict(zip(result.scores.nodes.names, weighted, strict=True)) == {
        "empty": 62,
        "cpu-heavy": 87,
    }


def test_cycle_skips_the_score_of_a_best_effort_pod() -> None:
    snap = snapshot_of([node("a", 4000, 4000), node("b", 4000, 4000)])
    state = CycleState()
    result = schedule_pod(framework(), snap, state, PodInfo(pod()), explain=True)
    assert result.status.is_success, result.message
    assert "NodeResourcesBalancedAllocation" in state.skip_score_plugins
    assert result.scores is None or "NodeResourcesBalancedAllocation" not in result.scores.weighted


def test_the_readme_config_builds_a_profile() -> None:
    text = (
        Path(__file__).resolve().parents[3] / "plugins" / "noderesources" / "README.md"
    ).read_text()
    section = text[text.index("# NodeResourcesBalancedAllocation") :]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None
    config = parse_config(yaml.safe_load(block.group(1)), "README.md", REGISTRY)
    (profile,) = config.profiles
    fw = Framework(profile, REGISTRY)
    assert fw.score_weights == {"NodeResourcesBalancedAllocation": 1}
    plugin = fw.instances["NodeResourcesBalancedAllocation"]
    assert isinstance(plugin, BalancedAllocation)
    assert [r.name for r in plugin.scorer.resources] == ["cpu", "memory", GPU]
