"""GPUPriorityPlugin: free GPUs per node, normalised to 0..100; its args and
configuration; a whole cycle with upstream's default plugins."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
import yaml

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.config import ConfigError, default_config, load_config, parse_config
from berth.framework.cycle_state import CycleState
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.testing import batch_of, fresh_state, make_node, make_pod, snapshot_of
from berth.plugins.gpupriority import (
    DEFAULT_RESOURCE_NAME,
    GPUPriority,
    GPUPriorityPluginArgs,
    normalize_free,
)
from berth.plugins.registry import REGISTRY

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "examples" / "gpupriority"
GPU = "nvidia.com/gpu"


def gpu_node(name: str, gpus: int | None, resource: str = GPU) -> pb.Node:
    extra = {} if gpus is None else {resource: gpus}
    return make_node(name).capacity(cpu="64", memory="256Gi", **extra).obj()


def gpu_pod(name: str, node: str, gpus: int, resource: str = GPU) -> pb.Pod:
    return make_pod(name).node(node).req(cpu="100m", **{resource: gpus}).obj()


# (name, nodes as {node: (allocatable GPUs or None, [GPUs requested by each pod])},
#  raw free counts, normalised scores), nodes in creation order.
CASES: list[tuple[str, dict[str, tuple[int | None, list[int]]], list[int], list[int]]] = [
    ("no node has GPUs", {"a": (None, []), "b": (None, [])}, [0, 0], [0, 0]),
    ("one GPU node wins 100", {"a": (None, []), "b": (4, [])}, [0, 4], [0, 100]),
    ("free, not capacity", {"big": (8, [6]), "small": (4, [])}, [2, 4], [50, 100]),
    ("a full node scores 0", {"full": (8, [4, 4]), "half": (2, [1])}, [0, 1], [0, 100]),
    ("all full: all 0", {"a": (8, [8]), "b": (1, [1])}, [0, 0], [0, 0]),
    (
        "integer division truncates",
        {"a": (3, []), "b": (2, []), "c": (1, [])},
        [3, 2, 1],
        [100, 66, 33],
    ),
    ("equal free, equal score", {"a": (4, [2]), "b": (2, [])}, [2, 2], [100, 100]),
    ("overcommitted counts as 0 free", {"a": (2, [3]), "b": (1, [])}, [0, 1], [0, 100]),
    (
        "pods without GPU requests do not count",
        {"a": (4, [0, 0]), "b": (8, [7])},
        [4, 1],
        [100, 25],
    ),
]


def _cluster(
    spec: dict[str, tuple[int | None, list[int]]], resource: str = GPU
) -> tuple[list[pb.Node], list[pb.Pod]]:
    nodes = [gpu_node(n, gpus, resource) for n, (gpus, _) in spec.items()]
    pods = [
        gpu_pod(f"{n}-p{k}", n, want, resource)
        for n, (_, requests) in spec.items()
        for k, want in enumerate(requests)
    ]
    return nodes, pods


@pytest.mark.parametrize(
    ("spec", "raw", "normalized"),
    [pytest.param(spec, raw, norm, id=name) for name, spec, raw, norm in CASES],
)
def test_score_and_normalize(
    spec: dict[str, tuple[int | None, list[int]]], raw: list[int], normalized: list[int]
) -> None:
    nodes, pods = _cluster(spec)
    snap = snapshot_of(nodes, pods)
    batch = batch_of(snap, list(spec))
    plugin = GPUPriority()
    pod = make_pod("incoming").req(**{GPU: 1}).info()
    per_node = [plugin.score(fresh_state(), pod, ni) for ni in batch]
    batched = plugin.score_nodes(fresh_state(), pod, batch)
    assert per_node == raw
    assert batched.tolist() == raw
    assert plugin.normalize_score(fresh_state(), pod, batch, batched).is_success
    assert batched.tolist() == normalized


def test_other_resource_name() -> None:
    spec: dict[str, tuple[int | None, list[int]]] = {"a": (8, [2]), "b": (2, [])}
    nodes, pods = _cluster(spec, "amd.com/gpu")
    nodes.append(gpu_node("nv", 16))
    snap = snapshot_of(nodes, pods)
    batch = batch_of(snap, ["a", "b", "nv"])
    plugin = GPUPriority(GPUPriorityPluginArgs(resource_name="amd.com/gpu"))
    scores = plugin.score_nodes(fresh_state(), make_pod().info(), batch)
    assert scores.tolist() == [6, 2, 0]


def test_without_a_column_each_node_is_asked() -> None:
    # No node has or requests the resource: the snapshot has no column for it.
    snap = snapshot_of([gpu_node("a", None), gpu_node("b", None)])
    assert GPU not in snap.columns.scalar
    scores = GPUPriority().score_nodes(fresh_state(), make_pod().info(), batch_of(snap))
    assert scores.tolist() == [0, 0]


def test_batch_agrees_with_per_node_on_random_clusters() -> None:
    rng = random.Random(7)
    for _ in range(30):
        spec: dict[str, tuple[int | None, list[int]]] = {}
        for i in range(rng.randint(1, 12)):
            cap = rng.choice([None, 0, 1, 2, 4, 8])
            spec[f"n{i}"] = (cap, [rng.randint(0, 3) for _ in range(rng.randint(0, 3))])
        nodes, pods = _cluster(spec)
        snap = snapshot_of(nodes, pods)
        names = rng.sample(list(spec), rng.randint(1, len(spec)))
        batch = batch_of(snap, names)
        plugin = GPUPriority()
        pod = make_pod().info()
        batched = plugin.score_nodes(fresh_state(), pod, batch)
        assert batched.tolist() == [plugin.score(fresh_state(), pod, ni) for ni in batch]


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param([], [], id="no nodes"),
        pytest.param([0], [0], id="one node without GPUs"),
        pytest.param([5], [100], id="one node"),
        pytest.param([-3, 6], [0, 100], id="negative raw clamps to 0"),
        pytest.param([2**62, 2**61, 1], [100, 50, 0], id="huge counts do not overflow"),
    ],
)
def test_normalize_free(raw: list[int], want: list[int]) -> None:
    scores = np.asarray(raw, dtype=np.int64)
    normalize_free(scores)
    assert scores.tolist() == want


# -- args and configuration ---------------------------------------------------


def decode(raw: dict[str, Any]) -> GPUPriorityPluginArgs:
    return msgspec.convert(raw, GPUPriorityPluginArgs)


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param({}, DEFAULT_RESOURCE_NAME, id="default nvidia.com/gpu"),
        pytest.param({"resourceName": "amd.com/gpu"}, "amd.com/gpu", id="amd"),
        pytest.param({"resourceName": "example.com/foo_bar.1"}, "example.com/foo_bar.1", id="dots"),
        pytest.param({"resourceName": "gpu.intel.com/i915"}, "gpu.intel.com/i915", id="intel"),
    ],
)
def test_valid_args(raw: dict[str, Any], want: str) -> None:
    args = decode(raw)
    args.validate()
    assert args.resource_name == want


@pytest.mark.parametrize(
    ("raw", "field", "reason"),
    [
        pytest.param(
            {"resourceName": ""},
            "profiles[0].pluginConfig[0].args.resourceName",
            'required value: name an extended resource, or leave the field out for "nvidia.com/gpu"',
            id="empty",
        ),
        pytest.param(
            {"resourceName": "cpu"},
            "profiles[0].pluginConfig[0].args.resourceName",
            "invalid value 'cpu': not an extended resource name: it needs a domain prefix, "
            'e.g. "nvidia.com/gpu" (cpu, memory and other native resources are not counted)',
            id="native cpu",
        ),
        pytest.param(
            {"resourceName": "hugepages-2Mi"},
            "profiles[0].pluginConfig[0].args.resourceName",
            "invalid value 'hugepages-2Mi': not an extended resource name: it needs a domain "
            'prefix, e.g. "nvidia.com/gpu" (cpu, memory and other native resources are not '
            "counted)",
            id="hugepages",
        ),
        pytest.param(
            {"resourceName": "kubernetes.io/gpu"},
            "profiles[0].pluginConfig[0].args.resourceName",
            "invalid value 'kubernetes.io/gpu': not an extended resource name: "
            "the kubernetes.io namespace holds native resources",
            id="kubernetes.io namespace",
        ),
        pytest.param(
            {"resourceName": "requests.nvidia.com/gpu"},
            "profiles[0].pluginConfig[0].args.resourceName",
            "invalid value 'requests.nvidia.com/gpu': not an extended resource name: "
            'it must not start with "requests."',
            id="requests prefix",
        ),
        pytest.param(
            {"resourceName": "nvidia.com/"},
            "profiles[0].pluginConfig[0].args.resourceName",
            "invalid value 'nvidia.com/': the name after the '/' must be non-empty",
            id="empty name part",
        ),
        pytest.param(
            {"resourceName": "Nvidia.com/gpu"},
            "profiles[0].pluginConfig[0].args.resourceName",
            "invalid value 'Nvidia.com/gpu': the domain prefix must be a lowercase DNS "
            "subdomain: alphanumerics, '-' and '.', starting and ending with an alphanumeric "
            "(e.g. 'nvidia.com')",
            id="uppercase domain",
        ),
        pytest.param(
            {"resourceName": "nvidia.com/gpu/x"},
            "profiles[0].pluginConfig[0].args.resourceName",
            "invalid value 'nvidia.com/gpu/x': a resource name has one '/' between its domain "
            "prefix and its name",
            id="two slashes",
        ),
        pytest.param(
            {"resourceName": "nvidia.com/-gpu"},
            "profiles[0].pluginConfig[0].args.resourceName",
            "invalid value 'nvidia.com/-gpu': the name after the '/' must consist of "
            "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric "
            "(e.g. 'gpu')",
            id="bad name part",
        ),
        pytest.param(
            {"resourceName": "nvidia.com/" + "g" * 64},
            "profiles[0].pluginConfig[0].args.resourceName",
            f"invalid value 'nvidia.com/{'g' * 64}': the name after the '/' must be no more "
            "than 63 characters",
            id="name too long",
        ),
        pytest.param(
            {"resourceName": 1},
            "profiles[0].pluginConfig[0].args.resourceName",
            "expected str, got int",
            id="not a string",
        ),
        pytest.param(
            {"resource": "nvidia.com/gpu"},
            "profiles[0].pluginConfig[0].args.resource",
            'unknown field "resource"',
            id="unknown field",
        ),
        pytest.param(
            {"resource_name": "nvidia.com/gpu"},
            "profiles[0].pluginConfig[0].args.resource_name",
            'unknown field "resource_name"',
            id="snake case is not the field",
        ),
    ],
)
def test_bad_args_are_config_errors(raw: dict[str, Any], field: str, reason: str) -> None:
    doc = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "custom-scheduler",
                "plugins": {"score": {"enabled": [{"name": "GPUPriorityPlugin"}]}},
                "pluginConfig": [{"name": "GPUPriorityPlugin", "args": raw}],
            }
        ],
    }
    with pytest.raises(ConfigError) as info:
        parse_config(doc, "<test>", REGISTRY)
    assert (info.value.field, info.value.reason) == (field, reason)


def test_building_in_code_validates_too() -> None:
    with pytest.raises(ValueError, match="resourceName: invalid value 'cpu'"):
        GPUPriority(GPUPriorityPluginArgs(resource_name="cpu"))


def test_example_config_is_the_seeds_and_loads() -> None:
    path = EXAMPLE / "scheduler-config.yaml"
    doc = yaml.safe_load(path.read_text())
    assert doc["profiles"] == [
        {
            "schedulerName": "custom-scheduler",
            "plugins": {"score": {"enabled": [{"name": "GPUPriorityPlugin"}]}},
        }
    ]
    profile = load_config(path, REGISTRY).profiles[0]
    score = {r.name: r.weight for r in profile.enabled("score")}
    assert score["GPUPriorityPlugin"] == 1
    assert list(score)[-1] == "GPUPriorityPlugin"
    assert "NodeResourcesFit" in score
    assert profile.plugin_args["GPUPriorityPlugin"] == GPUPriorityPluginArgs()


def test_not_in_the_default_profile() -> None:
    profile = default_config(REGISTRY).profiles[0]
    names = {r.name for refs in profile.plugins.values() for r in refs}
    assert "GPUPriorityPlugin" not in names


# -- a whole cycle -------------------------------------------------------------


def test_cycle_picks_the_node_with_most_free_gpus_not_the_biggest() -> None:
    fw = Framework(load_config(EXAMPLE / "scheduler-config.yaml", REGISTRY).profiles[0], REGISTRY)
    nodes, pods = _cluster({"big": (8, [6]), "small": (4, []), "cpu-only": (None, [])})
    snap = snapshot_of(nodes, pods)
    pod = make_pod("train").req(cpu="1", memory="1Gi", **{GPU: 1}).info()
    result = schedule_pod(fw, snap, CycleState(), pod, rng=random.Random(0))
    assert result.status.is_success, result.message
    assert result.node == "small"


def test_cycle_a_pod_without_gpu_requests_still_prefers_free_gpus() -> None:
    fw = Framework(load_config(EXAMPLE / "scheduler-config.yaml", REGISTRY).profiles[0], REGISTRY)
    nodes, pods = _cluster({"full": (8, [8]), "free": (2, [])})
    # NodeResourcesFit (LeastAllocated) prefers "full": "free" runs a CPU-heavy pod.
    pods.append(make_pod("busy").node("free").req(cpu="8", memory="8Gi").obj())
    pod = make_pod("web").req(cpu="100m").info()
    result = schedule_pod(fw, snapshot_of(nodes, pods), CycleState(), pod, rng=random.Random(0))
    assert result.status.is_success, result.message
    assert result.node == "free"
