"""``schedule``: pods through a profile's real plugin chain, in-process.

What kube-scheduler's scheduling cycle does for one pod (pkg/scheduler/
schedule_one.go, schedulingCycle: PreEnqueue's gate, then schedulePod's
PreFilter, Filter, PostFilter, PreScore, Score and selectHost, then Reserve
and Permit), done with the Framework ``berth serve`` and ``berth shim`` run,
for each pod in turn, on a snapshot of the nodes, the pods already bound and
the objects plugins read. A pod placed on a node counts there for the pods
after it, as the scheduler cache's assumed pods do. The binding cycle
(PreBind, Bind, PostBind) is not run: nothing is written.

Every node is evaluated for every pod (the ``explain`` of ``berth place``):
a result holds each node's Filter verdict and every feasible node's scores,
whatever percentageOfNodesToScore says, and a pod with a nominated node is
not tried there first.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.config import default_config, load_config, parse_config, parse_config_text
from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import Plugin
from berth.framework.model import PodInfo
from berth.framework.profile import ProfileConfig, SchedulerConfig
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.snapshot import Snapshot
from berth.framework.status import Status
from berth.framework.testing import NodeWrapper, PodWrapper, snapshot_of
from berth.plugins.registry import REGISTRY, load_registry

__all__ = [
    "Cluster",
    "ConfigSource",
    "NodeLike",
    "PodLike",
    "PodResult",
    "registry_with",
    "schedule",
]

ConfigSource: TypeAlias = "str | os.PathLike[str] | Mapping[str, Any] | SchedulerConfig | None"
"""A KubeSchedulerConfiguration: a file (``pathlib.Path``, or a ``str``
without a newline), YAML text (a ``str`` with one), a document already loaded
(a mapping), a parsed ``SchedulerConfig``, or None for upstream's defaults
(one profile, ``default-scheduler``)."""

NodeLike: TypeAlias = pb.Node | NodeWrapper
PodLike: TypeAlias = pb.Pod | PodWrapper


@dataclass(frozen=True, slots=True)
class PodResult:
    """Where one pod went, and why.

    ``node`` is None when the pod was not placed. ``status`` is the cycle's:
    Success; Unschedulable with upstream's FailedScheduling text when no
    node fits (``message``); the rejection of the PreEnqueue, Reserve or
    Permit plugin that turned the pod away; Wait when a Permit plugin holds
    it (it keeps its node, as upstream's waiting pods do); Error.
    ``rejected`` holds each node Filter (or PreFilter) rejected, with the
    rejecting plugin's Status; ``scores`` each feasible node's normalised
    and weighted score per Score plugin, ``totals`` their sums."""

    pod: str
    node: str | None
    status: Status
    message: str = ""
    rejected: Mapping[str, Status] = field(default_factory=dict)
    scores: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    totals: Mapping[str, int] = field(default_factory=dict)
    # A PostFilter plugin's (DefaultPreemption's) answer: the node it
    # nominates and the pods ("namespace/name") it would evict. The harness
    # evicts nothing.
    nominated_node: str | None = None
    victims: tuple[str, ...] = ()

    @property
    def scheduled(self) -> bool:
        """Placed on a node and let through Permit (not waiting)."""
        return self.node is not None and self.status.is_success

    @property
    def filter_reasons(self) -> dict[str, tuple[str, ...]]:
        """Node name to the reasons Filter rejected it (nodes that passed
        are absent)."""
        return {node: st.reasons for node, st in self.rejected.items()}

    def rejected_by(self, node: str) -> str | None:
        """The plugin that rejected ``node``, or None if it passed."""
        st = self.rejected.get(node)
        return None if st is None else st.plugin


def registry_with(plugins: Iterable[type[Plugin]] = ()) -> dict[str, type[Plugin]]:
    """The plugins Berth would find (in-tree and the installed ``berth.plugins``
    entry points) and ``plugins``, classes not installed yet (the plugin
    under test), by their ``name``. A class may not take an in-tree name."""
    registry: dict[str, type[Plugin]] = dict(load_registry())
    for cls in plugins:
        if not cls.name:
            raise ValueError(f"plugin class {cls.__qualname__} has no name")
        if REGISTRY.get(cls.name, cls) is not cls:
            raise ValueError(f"plugin name {cls.name!r} is an in-tree plugin's")
        registry[cls.name] = cls
    return registry


def load(config: ConfigSource, registry: Mapping[str, type[Plugin]]) -> SchedulerConfig:
    """``config`` decoded, defaulted and validated as ``berth serve`` does."""
    if isinstance(config, SchedulerConfig):
        return config
    if config is None:
        return default_config(registry)
    if isinstance(config, Mapping):
        return parse_config(config, "<dict>", registry)
    if isinstance(config, str) and "\n" in config:
        return parse_config_text(config, "<yaml>", registry)
    return load_config(Path(config), registry)


def schedule(
    config: ConfigSource,
    nodes: Iterable[NodeLike],
    pods: Iterable[PodLike],
    *,
    existing: Iterable[PodLike] = (),
    objects: Iterable[pb.ClusterObject] = (),
    plugins: Iterable[type[Plugin]] = (),
    profile: str | None = None,
    seed: int = 1,
) -> list[PodResult]:
    """Schedules ``pods`` one after the other on ``nodes`` (with the
    ``existing`` pods, bound: each names its node, and the ``objects``
    plugins read, see ``make_object``) and returns one result per pod, in
    order. ``plugins``: plugin classes to run that are not installed (see
    ``registry_with``). ``profile``: the profile for every pod; by default
    each pod's ``schedulerName``, or the configuration's only profile. Ties
    between equal top scores are broken at random, reproducibly for a
    ``seed``."""
    return Cluster(nodes, existing, objects).schedule(
        pods, config, plugins=plugins, profile=profile, seed=seed
    )


class Cluster:
    """Nodes, bound pods and objects to schedule pods on, one call after
    another: a placed pod stays on its node for the next call."""

    def __init__(
        self,
        nodes: Iterable[NodeLike] = (),
        existing: Iterable[PodLike] = (),
        objects: Iterable[pb.ClusterObject] = (),
    ) -> None:
        self.snapshot: Snapshot = snapshot_of(
            [_node(n) for n in nodes], [_pod(p) for p in existing], objects
        )
        self._start = 0

    def add(
        self,
        nodes: Iterable[NodeLike] = (),
        existing: Iterable[PodLike] = (),
        objects: Iterable[pb.ClusterObject] = (),
    ) -> Cluster:
        """Adds (or replaces, by name or uid) nodes, bound pods and objects."""
        delta = pb.ClusterDelta()
        delta.upsert_nodes.extend(_node(n) for n in nodes)
        delta.upsert_pods.extend(_pod(p) for p in existing)
        delta.upsert_objects.extend(objects)
        self.snapshot.apply(delta)
        return self

    def schedule(
        self,
        pods: Iterable[PodLike],
        config: ConfigSource = None,
        *,
        plugins: Iterable[type[Plugin]] = (),
        profile: str | None = None,
        seed: int = 1,
    ) -> list[PodResult]:
        """``berth.testing.schedule`` on this cluster."""
        registry = registry_with(plugins)
        loaded = load(config, registry)
        frameworks: dict[str, Framework] = {}
        results: list[PodResult] = []
        for i, item in enumerate(pods):
            pod = PodInfo(_pod(item))
            chosen = _profile_for(loaded, pod, profile)
            fw = frameworks.get(chosen.scheduler_name)
            if fw is None:
                fw = Framework(chosen, registry, loaded.percentage_of_nodes_to_score)
                frameworks[chosen.scheduler_name] = fw
            results.append(self._one(fw, pod, random.Random(seed + i)))
        return results

    def _one(self, fw: Framework, pod: PodInfo, rng: random.Random) -> PodResult:
        key = pod.key
        gate = fw.run_pre_enqueue(pod)
        if not gate.is_success:
            return PodResult(key, None, gate, gate.message)
        state = CycleState()
        result = schedule_pod(
            fw,
            self.snapshot,
            state,
            pod,
            start_index=self._start,
            reserve_and_permit=True,
            rng=rng,
            explain=True,
        )
        self._start = result.next_start_index
        scores: dict[str, dict[str, int]] = {}
        totals: dict[str, int] = {}
        if result.scores is not None:
            names = result.scores.nodes.names
            for k, name in enumerate(names):
                scores[name] = {
                    plugin: int(column[k]) for plugin, column in result.scores.weighted.items()
                }
                totals[name] = int(result.scores.totals[k])
        status = result.status
        node: str | None = result.node or None
        for turned_away in (result.reserve_status, result.permit_status):
            if turned_away is not None and not turned_away.is_success:
                status = turned_away
                if not turned_away.is_wait:
                    node = None
                break
        if node is not None:
            # The assumed pod (schedule_one.go, assume): on its node, with
            # what Reserve annotated, for the pods after it.
            delta = pb.ClusterDelta()
            placed = delta.upsert_pods.add()
            placed.CopyFrom(pod.proto)
            placed.node_name = node
            if state.assume_annotations:
                # As a caller marks its assumed copy (cluster.proto Pod.assumed).
                placed.annotations.update(state.assume_annotations)
                placed.assumed = True
            self.snapshot.apply(delta)
        return PodResult(
            key,
            node,
            status,
            result.message or status.message,
            dict(result.rejected),
            scores,
            totals,
            result.nominated_node or None,
            tuple(v.key for v in result.victims),
        )


def _profile_for(config: SchedulerConfig, pod: PodInfo, name: str | None) -> ProfileConfig:
    wanted = name or pod.proto.scheduler_name
    found = config.profile(wanted)
    if found is not None:
        return found
    if name is None and len(config.profiles) == 1:
        return config.profiles[0]
    names = ", ".join(p.scheduler_name for p in config.profiles)
    raise ValueError(
        f"no profile {wanted!r} in {config.source} (profiles: {names}); "
        "pass profile= or set the pod's schedulerName"
    )


def _node(node: NodeLike) -> pb.Node:
    return node.obj() if isinstance(node, NodeWrapper) else node


def _pod(pod: PodLike) -> pb.Pod:
    return pod.obj() if isinstance(pod, PodWrapper) else pod
