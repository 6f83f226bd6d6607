"""ImageLocality: upstream's v1.36 cases (image_locality_test.go,
TestImageLocalityPriority and TestNormalizedImageName; the image-volume case
is left out, the wire Pod carries no volumes), the per-snapshot index kept
right through deltas, and the batch form checked equal to the per-node form
and to a from-scratch reference on random clusters."""

from __future__ import annotations

import gc
import random
import re
import weakref
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import yaml

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.config import parse_config
from berth.framework.cycle_state import CycleState
from berth.framework.handle import Handle
from berth.framework.interfaces import Plugin
from berth.framework.model import PodInfo
from berth.framework.profile import PluginRef, ProfileConfig
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.snapshot import Snapshot
from berth.framework.testing import fresh_state, make_node, make_pod, snapshot_of
from berth.plugins.defaultbinder import DefaultBinder
from berth.plugins.imagelocality import ImageLocality
from berth.plugins.imagelocality.image_locality import (
    _INDEXES,
    MAX_CONTAINER_THRESHOLD,
    MB,
    MIN_THRESHOLD,
    _calculate_priorities,
    calculate_priority,
    normalized_image_name,
    scaled_image_score,
)
from berth.plugins.queuesort import PrioritySort

Images = Sequence[tuple[Sequence[str], int]]


def image_node(name: str, images: Images = ()) -> pb.Node:
    """makeImageNode: a node whose status lists ``images`` (names, size)."""
    node = make_node(name).obj()
    for names, size in images:
        node.images.add(names=list(names), size_bytes=size)
    return node


def image_pod(*images: str, init: Sequence[str] = ()) -> pb.Pod:
    w = make_pod()
    for image in images:
        w.container(image=image)
    for i, image in enumerate(init):
        w.pod.init_containers.add(name=f"init{i}", image=image)
    return w.obj()


def plugin_on(snapshot: Snapshot) -> ImageLocality:
    handle = Handle("test")
    handle.bind_snapshot(snapshot)
    return ImageLocality(None, handle)


def score_both(nodes: list[pb.Node], pod: pb.Pod) -> tuple[list[int], list[int]]:
    """(per-node Score, batch Score) in node order."""
    snap = snapshot_of(nodes)
    plugin = plugin_on(snap)
    p = PodInfo(pod)
    names = [n.name for n in nodes]
    per_node = [plugin.score(fresh_state(), p, snap.nodes[n]) for n in names]
    batch = plugin.score_nodes(fresh_state(), p, snap.batch(names)).tolist()
    return per_node, batch


# TestImageLocalityPriority's nodes.
NODE_40_300_2000: Images = [
    (["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40 * MB),
    (["gcr.io/300:latest", "gcr.io/300:v1"], 300 * MB),
    (["gcr.io/2000:latest"], 2000 * MB),
]
NODE_250_10: Images = [
    (["gcr.io/250:latest"], 250 * MB),
    (["gcr.io/10:latest", "gcr.io/10:v1"], 10 * MB),
]
NODE_600_40_900: Images = [
    (["gcr.io/600:latest"], 600 * MB),
    (["gcr.io/40:latest"], 40 * MB),
    (["gcr.io/900:latest"], 900 * MB),
]
NODE_300_600_900: Images = [
    (["gcr.io/300:latest"], 300 * MB),
    (["gcr.io/600:latest"], 600 * MB),
    (["gcr.io/900:latest"], 900 * MB),
]
NODE_4000_30: Images = [(["gcr.io/4000:latest"], 4000 * MB), (["gcr.io/30:latest"], 30 * MB)]
NODE_20_30_40: Images = [
    (["gcr.io/20:latest"], 20 * MB),
    (["gcr.io/30:latest"], 30 * MB),
    (["gcr.io/40:latest"], 40 * MB),
]

UPSTREAM: dict[str, tuple[pb.Pod, list[pb.Node], list[int]]] = {
    # node1: 40M/2 < 23M -> 0; node2: 100 * (250M/2 - 23M) / (2000M - 23M) = 5.
    "two images spread on two nodes, prefer the larger image one": (
        image_pod("gcr.io/40", "gcr.io/250"),
        [image_node("node1", NODE_40_300_2000), image_node("node2", NODE_250_10)],
        [0, 5],
    ),
    # node1: 100 * ((40M + 300M)/2 - 23M) / (2000M - 23M) = 7.
    "two images on one node, prefer this node": (
        image_pod("gcr.io/40", "gcr.io/300"),
        [image_node("node1", NODE_40_300_2000), image_node("node2", NODE_250_10)],
        [7, 0],
    ),
    # node1: 4000M/2 >= 2000M, the max threshold -> 100.
    "if exceed limit, use limit": (
        image_pod("gcr.io/10", "gcr.io/4000"),
        [image_node("node1", NODE_4000_30), image_node("node2", NODE_250_10)],
        [100, 0],
    ),
    # node1: 100 * (4000M/3 - 23M) / (2000M - 23M) = 66.
    "if exceed limit, use limit (with node which has no images present)": (
        image_pod("gcr.io/10", "gcr.io/4000"),
        [
            image_node("node1", NODE_4000_30),
            image_node("node2", NODE_250_10),
            image_node("node3"),
        ],
        [66, 0, 0],
    ),
    # node1: 100 * (600M*2/3 + 900M*2/3 - 23M) / (3000M - 23M) = 32;
    # node2: 100 * (300M/3 + 600M*2/3 + 900M*2/3 - 23M) / (3000M - 23M) = 36.
    "pod with multiple large images, node2 is preferred": (
        image_pod("gcr.io/300", "gcr.io/600", "gcr.io/900"),
        [
            image_node("node1", NODE_600_40_900),
            image_node("node2", NODE_300_600_900),
            image_node("node3"),
        ],
        [32, 36, 0],
    ),
    # node1: 100 * (30M + 40M/2 - 23M) / (2000M - 23M) = 1.
    "pod with multiple small images": (
        image_pod("gcr.io/30", "gcr.io/40"),
        [image_node("node1", NODE_20_30_40), image_node("node2", NODE_4000_30)],
        [1, 0],
    ),
    # The init container counts, and as a container: 100 * (300M/2 - 23M) /
    # (2 * 1000M - 23M) = 6.
    "include InitContainers: two images spread on two nodes, prefer the larger image one": (
        image_pod("gcr.io/30", init=["gcr.io/300"]),
        [image_node("node1", NODE_40_300_2000), image_node("node2", NODE_20_30_40)],
        [6, 0],
    ),
}


@pytest.mark.parametrize(("pod", "nodes", "want"), list(UPSTREAM.values()), ids=list(UPSTREAM))
def test_scores_match_upstream_v1_36(pod: pb.Pod, nodes: list[pb.Node], want: list[int]) -> None:
    per_node, batch = score_both(nodes, pod)
    assert per_node == batch == want


@pytest.mark.parametrize(
    ("name", "want"),
    [
        # TestNormalizedImageName.
        ("root", "root:latest"),
        ("gcr.io:5000/root", "gcr.io:5000/root:latest"),
        ("root:tag", "root:tag"),
        ("root@sha256:" + "ab" * 32, "root@sha256:" + "ab" * 32),
        # Not upstream's cases, its rule: a registry port is not a tag.
        ("registry:5000/team/app:1.2", "registry:5000/team/app:1.2"),
        ("", ":latest"),
    ],
)
def test_normalized_image_name(name: str, want: str) -> None:
    assert normalized_image_name(name) == want


def test_the_pod_name_is_normalized_the_node_names_are_not() -> None:
    # A node reporting only "app" (no tag) does not match the pod's "app",
    # which becomes "app:latest".
    nodes = [image_node("a", [(["app"], 500 * MB)]), image_node("b", [(["app:latest"], 500 * MB)])]
    per_node, batch = score_both(nodes, image_pod("app"))
    assert per_node == batch == [0, 23]  # 100 * (250M - 23M) / (1000M - 23M)


def test_an_image_used_by_two_containers_counts_twice() -> None:
    nodes = [image_node("a", [(["big:1"], 800 * MB)])]
    per_node, batch = score_both(nodes, image_pod("big:1", "big:1"))
    # 100 * (1600M - 23M) / (2000M - 23M) = 79; one container: 100 * 777 / 977 = 79.
    assert per_node == batch == [79]
    assert score_both(nodes, image_pod("big:1")) == ([79], [79])


def test_a_name_reported_twice_on_a_node_keeps_its_first_size() -> None:
    node = image_node("a", [(["x:1"], 500 * MB), (["x:1", "x:2"], 900 * MB)])
    per_node, batch = score_both([node], image_pod("x:1", "x:2"))
    # x:1 is 500M (first entry), x:2 900M: 100 * (1400M - 23M) / (2000M - 23M) = 69.
    assert per_node == batch == [69]


def test_every_node_of_the_snapshot_counts_not_only_the_candidates() -> None:
    nodes = [image_node(f"n{i}", [(["img:1"], 600 * MB)] if i < 2 else []) for i in range(4)]
    snap = snapshot_of(nodes)
    plugin = plugin_on(snap)
    p = PodInfo(image_pod("img:1"))
    # Spread 2/4: 100 * (300M - 23M) / (1000M - 23M) = 28, whatever the batch.
    assert plugin.score_nodes(fresh_state(), p, snap.batch(["n0"])).tolist() == [28]
    assert plugin.score(fresh_state(), p, snap.nodes["n1"]) == 28


def test_calculate_priority_edges() -> None:
    assert calculate_priority(0, 1) == 0
    assert calculate_priority(MIN_THRESHOLD, 1) == 0
    assert calculate_priority(MAX_CONTAINER_THRESHOLD, 1) == 100
    assert calculate_priority(10 * MAX_CONTAINER_THRESHOLD, 3) == 100
    # No containers: the max threshold is 0, below the min one; Go's
    # arithmetic gives 0 below the min and 100 above it.
    assert calculate_priority(5, 0) == 0
    assert calculate_priority(MIN_THRESHOLD + 1, 0) == 100
    assert scaled_image_score(1000, 1, 3) == 333
    assert scaled_image_score(1000, 0, 0) == 0


@pytest.mark.parametrize("containers", [0, 1, 2, 7])
def test_priorities_over_columns_equal_calculate_priority(containers: int) -> None:
    rng = np.random.default_rng(containers)
    sums = np.concatenate(
        [
            rng.integers(-5 * MB, 8000 * MB, 2000, dtype=np.int64),
            np.array([0, MIN_THRESHOLD - 1, MIN_THRESHOLD, MIN_THRESHOLD + 1], dtype=np.int64),
            np.array([MAX_CONTAINER_THRESHOLD * containers + d for d in (-1, 0, 1)]),
        ]
    )
    want = [calculate_priority(int(x), containers) for x in sums]
    assert _calculate_priorities(sums, containers).tolist() == want


# -- the index follows the snapshot --------------------------------------------------


def reference_scores(snapshot: Snapshot, pod: pb.Pod, names: Sequence[str]) -> list[int]:
    """From scratch, as upstream's snapshot builds image states
    (createImageExistenceMap, getNodeImageStates) and Score reads them."""
    holders: dict[str, set[str]] = {}
    for ni in snapshot.nodes.values():
        for image in ni.node.images:
            for name in image.names:
                holders.setdefault(name, set()).add(ni.name)
    images = [normalized_image_name(c.image) for c in (*pod.init_containers, *pod.containers)]
    out = []
    for node_name in names:
        sizes: dict[str, int] = {}
        for image in snapshot.nodes[node_name].node.images:
            for name in image.names:
                sizes.setdefault(name, image.size_bytes)
        total = 0
        for image_name in images:
            if image_name in sizes:
                spread = len(holders[image_name]) / len(snapshot.nodes)
                total += int(sizes[image_name] * spread)
        out.append(calculate_priority(total, len(images)))
    return out


IMAGE_NAMES = [f"reg.io/app{i}:{t}" for i in range(6) for t in ("1", "latest")]


def random_images(rng: random.Random) -> list[tuple[list[str], int]]:
    picked = rng.sample(IMAGE_NAMES, rng.randrange(0, 5))
    return [([name], rng.choice([5, 30, 200, 700, 1500]) * MB) for name in picked]


def check_all_forms(snap: Snapshot, rng: random.Random) -> None:
    plugin = plugin_on(snap)
    names = list(snap.nodes)
    rng.shuffle(names)
    names = names[: max(1, len(names) // 2)]
    for _ in range(3):
        images = [
            rng.choice(IMAGE_NAMES).removesuffix(":latest") for _ in range(rng.randrange(1, 4))
        ]
        pod = image_pod(*images, init=[rng.choice(IMAGE_NAMES)] if rng.random() < 0.3 else [])
        p = PodInfo(pod)
        want = reference_scores(snap, pod, names)
        assert plugin.score_nodes(fresh_state(), p, snap.batch(names)).tolist() == want
        assert [plugin.score(fresh_state(), p, snap.nodes[n]) for n in names] == want


def test_the_index_follows_deltas_on_random_clusters() -> None:
    rng = random.Random(136)
    snap = snapshot_of([image_node(f"n{i}", random_images(rng)) for i in range(30)])
    next_node = 30
    for _ in range(60):
        check_all_forms(snap, rng)
        delta = pb.ClusterDelta()
        live = list(snap.nodes)
        for name in rng.sample(live, min(len(live), rng.randrange(0, 4))):
            if rng.random() < 0.5:
                delta.delete_nodes.append(name)
            else:  # a status update: new images, same node
                delta.upsert_nodes.append(image_node(name, random_images(rng)))
        for _ in range(rng.randrange(0, 3)):  # new nodes take freed slots
            delta.upsert_nodes.append(image_node(f"n{next_node}", random_images(rng)))
            next_node += 1
        if not snap.nodes and not delta.upsert_nodes:
            delta.upsert_nodes.append(image_node(f"n{next_node}", random_images(rng)))
            next_node += 1
        snap.apply(delta)


def test_the_index_walks_the_nodes_only_after_a_node_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While Snapshot.node_generation stands still (pods come and go) the
    index is current and no node record is looked at; a node update moves it
    and is indexed."""
    snap = snapshot_of([image_node("a", [(["x:1"], 600 * MB)]), image_node("b")])
    plugin = plugin_on(snap)
    p = PodInfo(image_pod("x:1"))
    walks = 0
    real_order = snap.node_order

    def counted() -> np.ndarray:
        nonlocal walks
        walks += 1
        return real_order()

    monkeypatch.setattr(snap, "node_order", counted)
    assert plugin.score_nodes(fresh_state(), p, snap.batch(["a", "b"])).tolist() == [28, 0]
    assert walks == 1
    snap.apply(pb.ClusterDelta(upsert_pods=[make_pod("p").node("a").obj()]))
    for _ in range(3):
        assert plugin.score_nodes(fresh_state(), p, snap.batch(["a", "b"])).tolist() == [28, 0]
    assert walks == 1
    snap.apply(pb.ClusterDelta(upsert_nodes=[image_node("b", [(["x:1"], 600 * MB)])]))
    assert plugin.score_nodes(fresh_state(), p, snap.batch(["a", "b"])).tolist() == [59, 59]
    assert walks == 2


def test_a_node_deleted_and_another_added_in_its_slot() -> None:
    snap = snapshot_of(
        [image_node("a", [(["x:1"], 600 * MB)]), image_node("b", [(["x:1"], 600 * MB)])]
    )
    plugin = plugin_on(snap)
    p = PodInfo(image_pod("x:1"))
    assert plugin.score_nodes(fresh_state(), p, snap.all_nodes()).tolist() == [59, 59]
    delta = pb.ClusterDelta(delete_nodes=["a"])
    delta.upsert_nodes.append(image_node("c"))  # no images, in a's slot
    snap.apply(delta)
    assert snap.nodes["c"].index == 0
    # x:1 is now on 1 of 2 nodes: 100 * (300M - 23M) / (1000M - 23M) = 28.
    scores = plugin.score_nodes(fresh_state(), p, snap.batch(["b", "c"])).tolist()
    assert scores == [28, 0]


def test_a_record_resent_unchanged_then_changed() -> None:
    nodes = [image_node("a", [(["x:1"], 600 * MB)]), image_node("b", [(["x:1"], 600 * MB)])]
    snap = snapshot_of(nodes)
    plugin = plugin_on(snap)
    p = PodInfo(image_pod("x:1"))
    names = ["a", "b"]
    assert plugin.score_nodes(fresh_state(), p, snap.batch(names)).tolist() == [59, 59]
    same = pb.ClusterDelta()
    same.upsert_nodes.append(image_node("a", [(["x:1"], 600 * MB)]))  # a new, equal record
    snap.apply(same)
    assert plugin.score_nodes(fresh_state(), p, snap.batch(names)).tolist() == [59, 59]
    changed = pb.ClusterDelta()
    changed.upsert_nodes.append(image_node("a", [(["y:1"], 600 * MB)]))
    snap.apply(changed)
    want = reference_scores(snap, p.proto, names)
    assert want == [0, 28]
    assert plugin.score_nodes(fresh_state(), p, snap.batch(names)).tolist() == want
    assert [plugin.score(fresh_state(), p, snap.nodes[n]) for n in names] == want


def test_the_index_goes_with_its_snapshot() -> None:
    snap = snapshot_of([image_node("a", [(["x:1"], 600 * MB)])])
    plugin_on(snap).score_nodes(fresh_state(), PodInfo(image_pod("x:1")), snap.all_nodes())
    assert snap in _INDEXES
    gc.collect()
    before = len(_INDEXES)
    alive = weakref.ref(snap)
    del snap
    gc.collect()
    # The index holds nothing that keeps the snapshot alive.
    assert alive() is None
    assert len(_INDEXES) == before - 1


# -- through a whole cycle ------------------------------------------------------------

REGISTRY: dict[str, type[Plugin]] = {
    "PrioritySort": PrioritySort,
    "ImageLocality": ImageLocality,
    "DefaultBinder": DefaultBinder,
}


def test_cycle_prefers_the_node_with_the_image() -> None:
    fw = Framework(
        ProfileConfig(
            "test",
            {
                "queueSort": (PluginRef("PrioritySort"),),
                "score": (PluginRef("ImageLocality", 1),),
                "bind": (PluginRef("DefaultBinder"),),
            },
        ),
        REGISTRY,
    )
    snap = snapshot_of(
        [
            image_node("lacks"),
            image_node("has", [(["registry.example/big:1.0"], 900_000_000)]),
        ]
    )
    pod = PodInfo(image_pod("registry.example/big:1.0"))
    result = schedule_pod(fw, snap, CycleState(), pod, explain=True)
    assert result.status.is_success, result.message
    assert result.node == "has"
    assert result.scores is not None
    weighted = result.scores.weighted["ImageLocality"].tolist()
    # 900e6 / 2 = 450e6: 100 * (450e6 - 23 MiB) / (1000 MiB - 23 MiB) = 41.
    assert dict(zip(result.scores.nodes.names, weighted, strict=True)) == {"lacks": 0, "has": 41}


def test_the_readme_config_builds_a_profile() -> None:
    text = (
        Path(__file__).resolve().parents[3] / "plugins" / "imagelocality" / "README.md"
    ).read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None
    config = parse_config(yaml.safe_load(block.group(1)), "README.md", REGISTRY)
    (profile,) = config.profiles
    fw = Framework(profile, REGISTRY)
    assert fw.score_weights == {"ImageLocality": 1}


def test_batch_is_numpy_int64() -> None:
    snap = snapshot_of([image_node("a")])
    out = plugin_on(snap).score_nodes(fresh_state(), PodInfo(image_pod("x")), snap.all_nodes())
    assert out.dtype == np.int64 and out.tolist() == [0]
