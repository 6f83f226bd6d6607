"""ImageLocality: favour nodes that already hold the pod's container images.

Port of pkg/scheduler/framework/plugins/imagelocality/image_locality.go at
v1.36 (Score, calculatePriority, sumImageScores, scaledImageScore,
normalizedImageName), with the image states upstream's snapshot gives each
node (pkg/scheduler/backend/cache/snapshot.go, createImageExistenceMap and
getNodeImageStates: per image name, its size on the node and how many nodes
have it).

For every container image of the pod (init containers and containers alike,
each container counted, a repeated image as often as it appears):

* the name is normalized: ``:latest`` is appended when the part after the last
  ``/`` has no ``:`` tag (a digest ``@sha256:...`` counts as tagged); node
  image names are matched as reported, exactly;
* if the node has the image, it adds ``int64(size * nodes_with_image /
  total_nodes)`` (float64 arithmetic, truncated): the "spread" factor damps
  images few nodes have, against piling pods onto them;

and the node's score is the sum clamped to ``[23 MiB, 1000 MiB * containers]``
(containers = init containers + containers) scaled linearly to 0..100:
``100 * (sum - 23 MiB) / (1000 MiB * containers - 23 MiB)`` in int64 division.
``total_nodes`` counts every node of the snapshot, feasible or not.

The counts come from a per-snapshot index (image name -> the nodes holding
it, and their sizes), kept in this module and brought up to date at each call
by what changed: a node whose record was replaced is re-indexed, others are
not. While the snapshot's ``node_generation`` is the one last synced at,
nothing changed and nothing is walked; else finding what changed walks the
node records once. Everything else is numpy over the holders of the pod's
images.
"""

from __future__ import annotations

import itertools
import operator
import weakref
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from berth.api.v1 import cluster_pb2 as pb
from berth.framework import signers
from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import (
    MAX_NODE_SCORE,
    ScoreArray,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.shape_score import go_div
from berth.framework.snapshot import NodeBatch, NodesMark, Snapshot
from berth.framework.status import Status

__all__ = [
    "MAX_CONTAINER_THRESHOLD",
    "MB",
    "MIN_THRESHOLD",
    "NAME",
    "ImageIndex",
    "ImageLocality",
    "calculate_priority",
    "image_index",
    "node_image_sizes",
    "normalized_image_name",
    "pod_image_names",
    "scaled_image_score",
]

NAME = "ImageLocality"

# image_locality.go: the score's range, per container, in bytes. 90% of the
# images on Docker Hub fall into it.
MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB

# parsers.DefaultImageTag.
_DEFAULT_TAG = "latest"

IntArray = npt.NDArray[np.int64]


def normalized_image_name(name: str) -> str:
    """image_locality.go, normalizedImageName: ``name:latest`` when no ``:``
    follows the last ``/`` (so ``repo:5000/app`` gets the tag too, and an
    empty name becomes ``:latest``)."""
    if name.rfind(":") <= name.rfind("/"):
        return f"{name}:{_DEFAULT_TAG}"
    return name


def pod_image_names(pod: pb.Pod) -> list[str]:
    """The normalized image of every init container and container, in that
    order, repeats kept (sumImageScores adds each container's image)."""
    return [normalized_image_name(c.image) for c in (*pod.init_containers, *pod.containers)]


def scaled_image_score(size: int, num_nodes: int, total_nodes: int) -> int:
    """image_locality.go, scaledImageScore: the size times the share of nodes
    that have the image, in float64, truncated toward zero."""
    if total_nodes == 0:
        return 0
    spread = float(num_nodes) / float(total_nodes)
    return int(float(size) * spread)


def calculate_priority(sum_scores: int, num_containers: int) -> int:
    """image_locality.go, calculatePriority: the sum clamped to
    ``[MIN_THRESHOLD, MAX_CONTAINER_THRESHOLD * num_containers]`` and scaled
    to 0..100 (int64 division)."""
    max_threshold = MAX_CONTAINER_THRESHOLD * num_containers
    if sum_scores < MIN_THRESHOLD:
        sum_scores = MIN_THRESHOLD
    elif sum_scores > max_threshold:
        sum_scores = max_threshold
    return go_div(MAX_NODE_SCORE * (sum_scores - MIN_THRESHOLD), max_threshold - MIN_THRESHOLD)


def _calculate_priorities(sums: IntArray, num_containers: int) -> IntArray:
    """``calculate_priority`` elementwise. After the clamp the numerator and
    the divisor never have opposite signs, so floor division is Go's."""
    max_threshold = MAX_CONTAINER_THRESHOLD * num_containers
    if max_threshold >= MIN_THRESHOLD:
        clamped = np.clip(sums, MIN_THRESHOLD, max_threshold)
    else:
        # No containers: below the min the sum becomes the min, else the max.
        clamped = np.where(sums < MIN_THRESHOLD, MIN_THRESHOLD, max_threshold)
    clamped -= MIN_THRESHOLD
    clamped *= MAX_NODE_SCORE
    out: IntArray = clamped // (max_threshold - MIN_THRESHOLD)
    return out


def node_image_sizes(node: pb.Node) -> dict[str, int]:
    """The node's images by every name they are reported under, with their
    size. A name reported twice keeps its first size, as the scheduler cache
    (cache.go, addNodeImageStates) keeps the first entry it made."""
    sizes: dict[str, int] = {}
    for image in node.images:
        size = image.size_bytes
        for name in image.names:
            sizes.setdefault(name, size)
    return sizes


# -- the per-snapshot index -----------------------------------------------------


@dataclass(slots=True)
class _Indexed:
    """A node as last indexed: its record, slot and image sizes."""

    proto: pb.Node
    slot: int
    sizes: dict[str, int]


_node_of = operator.attrgetter("node")


class ImageIndex:
    """For one snapshot: which nodes hold each image name, and the size they
    report. ``sync`` brings it up to the snapshot's current state. Holds no
    reference to the snapshot (nor to its NodeInfos), so the snapshot can be
    collected and the index with it."""

    __slots__ = ("_arrays", "_holders", "_mark", "_nodes", "_order", "_protos")

    def __init__(self) -> None:
        # Node name -> what was indexed for it.
        self._nodes: dict[str, _Indexed] = {}
        # Image name -> {slot: size} of the nodes holding it.
        self._holders: dict[str, dict[int, int]] = {}
        # Image name -> the holders as (slots, sizes) arrays, built on demand.
        self._arrays: dict[str, tuple[IntArray, IntArray]] = {}
        # The snapshot's node records in its dict order and its walk-order
        # array when last synced. The snapshot builds a new walk order
        # whenever a node is added or removed (holding the old one keeps its
        # identity unique); a node update replaces the node's record.
        self._protos: list[pb.Node] = []
        self._order: IntArray | None = None
        self._mark = NodesMark()

    def sync(self, snapshot: Snapshot) -> None:
        if not self._mark.moved(snapshot):
            return
        order = snapshot.node_order()
        current = snapshot.nodes
        protos = list(map(_node_of, current.values()))
        if order is self._order and len(protos) == len(self._protos):
            # No node added or removed: same names, same slots, same dict
            # order. The list comparison takes identical records at once and
            # compares content only for replaced ones.
            if protos != self._protos:
                names = list(current)
                replaced = map(operator.is_not, protos, self._protos)
                for i in itertools.compress(range(len(protos)), replaced):
                    name = names[i]
                    self._remove(self._nodes.pop(name))
                    self._add(name, current[name])
            self._protos = protos
            return
        stale = [
            name
            for name, entry in self._nodes.items()
            if (ni := current.get(name)) is None
            or ni.node is not entry.proto
            or ni.index != entry.slot
        ]
        # Every stale entry leaves before any node is (re-)added: a slot a
        # removed node freed may already belong to a new one.
        for name in stale:
            self._remove(self._nodes.pop(name))
        for name, ni in current.items():
            if name not in self._nodes:
                self._add(name, ni)
        self._protos = protos
        self._order = order

    def _add(self, name: str, ni: NodeInfo) -> None:
        entry = _Indexed(ni.node, ni.index, node_image_sizes(ni.node))
        self._nodes[name] = entry
        for image, size in entry.sizes.items():
            self._holders.setdefault(image, {})[entry.slot] = size
            self._arrays.pop(image, None)

    def _remove(self, entry: _Indexed) -> None:
        for image in entry.sizes:
            holders = self._holders[image]
            del holders[entry.slot]
            if not holders:
                del self._holders[image]
            self._arrays.pop(image, None)

    def num_nodes(self, image: str) -> int:
        """How many nodes hold ``image`` (ImageStateSummary.NumNodes)."""
        holders = self._holders.get(image)
        return 0 if holders is None else len(holders)

    def holders(self, image: str) -> tuple[IntArray, IntArray] | None:
        """(slots, sizes) of the nodes holding ``image``; None when none."""
        arrays = self._arrays.get(image)
        if arrays is None:
            holders = self._holders.get(image)
            if holders is None:
                return None
            slots = np.fromiter(holders.keys(), dtype=np.int64, count=len(holders))
            sizes = np.fromiter(holders.values(), dtype=np.int64, count=len(holders))
            arrays = self._arrays[image] = (slots, sizes)
        return arrays

    def sizes_of(self, node: NodeInfo) -> dict[str, int]:
        """The node's image sizes: indexed when its record is the indexed
        one, else read from the record (a node outside the snapshot)."""
        entry = self._nodes.get(node.name)
        if entry is not None and entry.proto is node.node:
            return entry.sizes
        return node_image_sizes(node.node)


_INDEXES: weakref.WeakKeyDictionary[Snapshot, ImageIndex] = weakref.WeakKeyDictionary()


def image_index(snapshot: Snapshot) -> ImageIndex:
    """The snapshot's image index, up to date. Shared by every profile's
    ImageLocality; dropped with the snapshot."""
    index = _INDEXES.get(snapshot)
    if index is None:
        index = _INDEXES[snapshot] = ImageIndex()
    index.sync(snapshot)
    return index


# -- the plugin ---------------------------------------------------------------------


class ImageLocality(ScorePlugin, SignPlugin):
    """The ImageLocality plugin (upstream's imagelocality.ImageLocality).
    Score only; weight 1 in upstream's default profile; no args, no
    NormalizeScore."""

    name: ClassVar[str] = NAME
    Args: ClassVar[type[Any] | None] = None

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """SignPod: the pod's images, normalised, as a sorted set."""
        names = {
            normalized_image_name(c.image)
            for c in (*pod.proto.containers, *pod.proto.init_containers)
        }
        return [(signers.IMAGE_NAMES, tuple(sorted(names)))]

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """image_locality.go, Score, for one node: the reference the batch
        form is tested against. Counts and the node total come from the
        handle's snapshot, as upstream's come from its snapshot lister."""
        snapshot = self.handle.snapshot
        index = image_index(snapshot)
        images = pod_image_names(pod.proto)
        sizes = index.sizes_of(node)
        total = len(snapshot.nodes)
        total_score = 0
        for image in images:
            size = sizes.get(image)
            if size is not None:
                total_score += scaled_image_score(size, index.num_nodes(image), total)
        return calculate_priority(total_score, len(images))

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> ScoreArray:
        """Every candidate at once: per distinct image of the pod, the scaled
        sizes of the nodes holding it are added up by slot, then read out for
        the candidates."""
        images = pod_image_names(pod.proto)
        snapshot = self.handle.snapshot
        index = image_index(snapshot)
        total = len(snapshot.nodes)
        by_slot: IntArray | None = None
        for image, repeats in _counted(images):
            held = index.holders(image)
            if held is None:
                continue
            slots, sizes = held
            spread = float(slots.size) / float(total)
            scaled = (sizes.astype(np.float64) * spread).astype(np.int64)
            if repeats != 1:
                scaled *= repeats
            if by_slot is None:
                by_slot = np.zeros(snapshot.columns.capacity, dtype=np.int64)
            # A node holds an image once: no slot repeats within ``slots``.
            by_slot[slots] += scaled
        if by_slot is None:
            # Sum 0 everywhere: below the min threshold, score 0.
            return np.zeros(len(nodes), dtype=np.int64)
        return _calculate_priorities(by_slot[nodes.idx], len(images))


def _counted(images: Sequence[str]) -> Iterable[tuple[str, int]]:
    """Each distinct image with how many containers use it, in first-use
    order."""
    if len(images) == 1:
        return ((images[0], 1),)
    return Counter(images).items()
