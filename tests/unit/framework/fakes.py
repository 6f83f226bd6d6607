"""Small plugins for framework tests: each does one observable thing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import msgspec
import numpy as np

from berth.framework import (
    BindPlugin,
    Code,
    CycleState,
    FilterPlugin,
    NodeBatch,
    NodeInfo,
    PermitPlugin,
    PodInfo,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
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
from berth.framework.profile import PluginRef, ProfileConfig


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


def _code_for(pod: PodInfo, name: str) -> Code | None:
    """The code the pod's label ``<name>`` names (e.g. ``UNSCHEDULABLE``), if any."""
    value = pod.proto.labels.get(name)
    return None if value is None else Code[value]


class CodePreFilter(PreFilterPlugin):
    """PreFilter returns the code named by the pod's label ``<plugin name>``
    with the reason "<name> says <CODE>"; Success otherwise. Logs each call."""

    name = "CodePreFilter"

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        CallLog.calls.append(("PreFilter", self.name, ""))
        code = _code_for(pod, self.name)
        if code is None:
            return None, Status.success()
        return None, Status(code, (f"{self.name} says {code.name}",))


class CodePreFilter2(CodePreFilter):
    name = "CodePreFilter2"


class CodePreFilter3(CodePreFilter):
    name = "CodePreFilter3"


class LabelErrorFilter(FilterPlugin):
    """Error on nodes whose label ``error`` is ``yes``; logs each node it sees."""

    name = "LabelErrorFilter"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        CallLog.calls.append(("Filter", self.name, node.name))
        if node.node.labels.get("error") == "yes":
            return Status.error("disk on fire")
        return Status.success()


class PendingFilter(FilterPlugin):
    """Pending on nodes labelled ``pending=yes``."""

    name = "PendingFilter"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if node.node.labels.get("pending") == "yes":
            return Status(Code.PENDING, ("waiting for a device",))
        return Status.success()


class NominatingPostFilter(PostFilterPlugin):
    """Nominates the node named by the pod's label ``nominate`` while
    answering the code named by its label ``NominatingPostFilter``
    (Unschedulable by default)."""

    name = "NominatingPostFilter"

    def post_filter(
        self, state: CycleState, pod: PodInfo, rejected: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        code = _code_for(pod, self.name) or Code.UNSCHEDULABLE
        node = pod.proto.labels.get("nominate")
        result = None if node is None else PostFilterResult(node)
        if code is Code.SUCCESS:
            return result, Status.success()
        return result, Status(code, (f"{self.name} could not help",))


class QuietPostFilter(PostFilterPlugin):
    """Unschedulable without a result."""

    name = "QuietPostFilter"

    def post_filter(
        self, state: CycleState, pod: PodInfo, rejected: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        return None, Status.unschedulable("preemption would not help")


class RecordingPreScore(PreScorePlugin):
    """Logs each PreScore call."""

    name = "RecordingPreScore"

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> Status:
        CallLog.calls.append(("PreScore", self.name, ""))
        return Status.success()


class ErrorPreScore(PreScorePlugin):
    """Skip when the pod has label skip=yes, else an Error."""

    name = "ErrorPreScore"

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> Status:
        if pod.proto.labels.get("skip") == "yes":
            return Status.skip()
        return Status.error("no data")


class FailingNormalize(ScorePlugin):
    """Scores 50 everywhere; its NormalizeScore fails."""

    name = "FailingNormalize"

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return 50

    def normalize_score(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch, scores: ScoreArray
    ) -> Status:
        return Status.error("cannot normalise")


class CodePreBind(PreBindPlugin):
    """PreBind returns the code named by the pod's label ``CodePreBind``."""

    name = "CodePreBind"

    def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        code = _code_for(pod, self.name)
        if code is None:
            return Status.success()
        return Status(code, (f"{self.name} says {code.name}",))


class WaitPermit2(WaitPermit):
    name = "WaitPermit2"

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        if pod.proto.labels.get("permit") == "wait":
            return Status(Code.WAIT, ("waiting for the gang",)), 30.0
        return Status.success(), 0.0


REGISTRY = {
    cls.name: cls
    for cls in (
        CodePreFilter,
        CodePreFilter2,
        CodePreFilter3,
        LabelErrorFilter,
        PendingFilter,
        NominatingPostFilter,
        QuietPostFilter,
        RecordingPreScore,
        ErrorPreScore,
        FailingNormalize,
        CodePreBind,
        WaitPermit2,
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
    post_filter: tuple[str, ...] = (),
    pre_bind: tuple[str, ...] = (),
) -> ProfileConfig:
    return ProfileConfig(
        scheduler_name=name,
        plugins={
            "queueSort": (PluginRef("Sort"),),
            "preFilter": tuple(PluginRef(n) for n in pre_filter),
            "filter": tuple(PluginRef(n) for n in filter),
            "postFilter": tuple(PluginRef(n) for n in post_filter),
            "preScore": tuple(PluginRef(n) for n in pre_score),
            "score": tuple(PluginRef(n, w) for n, w in score),
            "reserve": tuple(PluginRef(n) for n in reserve),
            "permit": tuple(PluginRef(n) for n in permit),
            "preBind": tuple(PluginRef(n) for n in pre_bind),
            "bind": (PluginRef("Binder"),),
        },
        percentage_of_nodes_to_score=percentage,
    )
