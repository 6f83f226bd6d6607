"""Small plugins for framework tests: each does one observable thing."""

from __future__ import annotations

from typing import ClassVar

import msgspec
import numpy as np

from plugins.framework import (
    BindPlugin,
    Code,
    CycleState,
    FilterPlugin,
    NodeBatch,
    NodeInfo,
    PermitPlugin,
    PodInfo,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    QueuedPodInfo,
    QueueSortPlugin,
    ReservePlugin,
    ScoreArray,
    ScorePlugin,
    SortKey,
    StateKey,
    Status,
)
from plugins.framework.profile import PluginRef, ProfileConfig


class CallLog:
    """Records (extension point, plugin, node) calls across fakes."""

    calls: ClassVar[list[tuple[str, str, str]]] = []

    @classmethod
    def reset(cls) -> None:
        cls.calls.clear()


class Sort(QueueSortPlugin):
    name = "Sort"

    def sort_key(self, pod: QueuedPodInfo) -> SortKey:
        return (-pod.pod.priority, pod.enqueued_unix_micros)


class Binder(BindPlugin):
    name = "Binder"
    caller_binds = True

    def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        return Status.success()


class RejectLabel(FilterPlugin):
    """Rejects nodes whose label ``reject`` equals this plugin's name."""

    name = "RejectLabel"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        CallLog.calls.append(("Filter", self.name, node.name))
        if node.node.labels.get("reject") == self.name:
            return Status.unschedulable(f"rejected by {self.name}")
        return Status.success()


class RejectLabel2(RejectLabel):
    name = "RejectLabel2"


class ErrorFilter(FilterPlugin):
    name = "ErrorFilter"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.error("boom")


class RaisingScore(ScorePlugin):
    """A buggy plugin: its Score raises."""

    name = "RaisingScore"

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        raise RuntimeError("kaput")


class Counter(msgspec.Struct):
    value: int


COUNTER = StateKey("SkipPreFilter/counter", Counter)


class SkipPreFilter(PreFilterPlugin, FilterPlugin):
    """PreFilter returns Skip when the pod has label skip=yes; its Filter
    rejects every node."""

    name = "SkipPreFilter"

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        if pod.proto.labels.get("skip") == "yes":
            return None, Status.skip()
        state.write(COUNTER, Counter(len(nodes)))
        return None, Status.success()

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.unschedulable("SkipPreFilter rejects all")


class OnlyNodes(PreFilterPlugin):
    """PreFilterResult restricted to the nodes named in pod label ``only``
    (comma separated)."""

    name = "OnlyNodes"

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        only = pod.proto.labels.get(self.name)
        if only is None:
            return None, Status.success()
        return PreFilterResult(frozenset(only.split(".")) - {""}), Status.success()


class OnlyNodes2(OnlyNodes):
    name = "OnlyNodes2"


class LabelScore(ScorePlugin):
    """Score = int(node label ``score``)."""

    name = "LabelScore"

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return int(node.node.labels.get("score", "0"))


class DoubleNormalize(ScorePlugin):
    """Raw score = label ``score``; NormalizeScore doubles it."""

    name = "DoubleNormalize"

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> ScoreArray:
        return np.array([int(n.node.labels.get("score", "0")) for n in nodes], dtype=np.int64)

    def normalize_score(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch, scores: ScoreArray
    ) -> Status:
        scores *= 2
        return Status.success()


class SkipPreScore(PreScorePlugin, ScorePlugin):
    """PreScore returns Skip; its Score would give 100 everywhere."""

    name = "SkipPreScore"

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> Status:
        return Status.skip()

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return 100


class Reserver(ReservePlugin):
    name = "Reserver"
    reserved: ClassVar[list[str]] = []

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        if pod.proto.labels.get("reserve") == "fail":
            return Status.error("reserve failed")
        self.reserved.append(pod.uid)
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        if pod.uid in self.reserved:
            self.reserved.remove(pod.uid)


class WaitPermit(PermitPlugin):
    name = "WaitPermit"

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        if pod.proto.labels.get("permit") == "wait":
            return Status(Code.WAIT, ("waiting",)), 3600.0
        return Status.success(), 0.0


REGISTRY = {
    cls.name: cls
    for cls in (
        Sort,
        Binder,
        RejectLabel,
        RejectLabel2,
        ErrorFilter,
        SkipPreFilter,
        OnlyNodes,
        OnlyNodes2,
        LabelScore,
        RaisingScore,
        DoubleNormalize,
        SkipPreScore,
        Reserver,
        WaitPermit,
    )
}


def profile(
    name: str = "test",
    pre_filter: tuple[str, ...] = (),
    filter: tuple[str, ...] = (),
    pre_score: tuple[str, ...] = (),
    score: tuple[tuple[str, int], ...] = (),
    reserve: tuple[str, ...] = (),
    permit: tuple[str, ...] = (),
    percentage: int | None = None,
) -> ProfileConfig:
    return ProfileConfig(
        scheduler_name=name,
        plugins={
            "queueSort": (PluginRef("Sort"),),
            "preFilter": tuple(PluginRef(n) for n in pre_filter),
            "filter": tuple(PluginRef(n) for n in filter),
            "preScore": tuple(PluginRef(n) for n in pre_score),
            "score": tuple(PluginRef(n, w) for n, w in score),
            "reserve": tuple(PluginRef(n) for n in reserve),
            "permit": tuple(PluginRef(n) for n in permit),
            "bind": (PluginRef("Binder"),),
        },
        percentage_of_nodes_to_score=percentage,
    )
