"""LowCpuScheduler: keep pods off busy nodes, prefer idle ones.

* Filter: ``cpuUsage > threshold`` (default 0.8) is Unschedulable with the
  reason ``cpu usage too high``;
* Score: ``(1 - cpuUsage) * 100``, so an idle node scores 100 and a busy one 0.

Usage comes from the metrics.k8s.io NodeMetrics of the node (what
``kubectl top node`` shows): ``usage.cpu`` over the node's allocatable
CPU. The plugin declares the kind with ``reads`` and a poll interval
(metrics.k8s.io serves no watch); the caller lists it and ships the objects
in the cluster state, and Filter and Score read them from the snapshot
(``handle.snapshot.object``), never from the API server.

Usage is computed exactly (quantities as fractions), so a node at 90% scores
10, where float arithmetic would give 9. A usage above 1 (a node
whose pods use more than its allocatable) scores 0.

A node whose NodeMetrics is missing, stale (its ``timestamp``, the end of its
window, older than ``metricsMaxAgeSeconds``) or unusable (no parseable
``usage.cpu``/``timestamp``, no allocatable CPU) is handled by
``missingMetrics``: Allow (default) passes Filter and scores
``missingMetricsScore`` (default 50, as if half busy: a node without metrics
neither attracts every pod, as an idle score would, nor is starved); Reject
fails Filter with ``node metrics missing``, ``node metrics stale`` or
``node metrics unusable``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar, Final

from berth.framework.cycle_state import CycleState
from berth.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    kind_event_resource,
)
from berth.framework.interfaces import MAX_NODE_SCORE, FilterPlugin, ScorePlugin
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.objects import ClusterObject, ObjectKind
from berth.framework.status import SUCCESS, Status
from berth.framework.units import QuantityError, parse_quantity, shorten
from berth.plugins.lowcpu.args import REJECT, LowCpuSchedulerArgs

if TYPE_CHECKING:
    from berth.framework.handle import Handle


log = logging.getLogger(__name__)

NAME: Final = "LowCpuScheduler"

# k8s.io/metrics/pkg/apis/metrics/v1beta1/types.go: NodeMetrics, cluster-scoped,
# resource "nodes" in group metrics.k8s.io, named after its node.
METRICS_GROUP: Final = "metrics.k8s.io"
METRICS_VERSION: Final = "v1beta1"
METRICS_RESOURCE: Final = "nodes"
METRICS_KIND: Final = "NodeMetrics"

# Filter reasons.
REASON_CPU: Final = "cpu usage too high"
REASON_MEMORY: Final = "memory usage too high"
REASON_MISSING: Final = "node metrics missing"
REASON_STALE: Final = "node metrics stale"
REASON_UNUSABLE: Final = "node metrics unusable"


def node_metrics_kind(poll_seconds: int) -> ObjectKind:
    """The NodeMetrics kind, polled every ``poll_seconds``."""
    return ObjectKind(
        group=METRICS_GROUP,
        version=METRICS_VERSION,
        resource=METRICS_RESOURCE,
        kind=METRICS_KIND,
        namespaced=False,
        poll_seconds=poll_seconds,
    )


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """A node's usage as fractions of its allocatable, or why there is none:
    ``problem`` is "" when the metrics are fresh and usable, else one of
    REASON_MISSING, REASON_STALE, REASON_UNUSABLE (``detail`` says more)."""

    cpu: Fraction = Fraction(0)
    memory: Fraction | None = None
    problem: str = ""
    detail: str = ""


@lru_cache(maxsize=8192)
def _quantity(text: str) -> Fraction:
    return parse_quantity(text).exact


@lru_cache(maxsize=4096)
def _timestamp(text: str) -> float:
    """RFC 3339 (metav1.Time) as Unix seconds; ValueError without an offset."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        # Its own message quotes the whole text, however long.
        raise ValueError(f"timestamp {shorten(text)} is not RFC 3339") from None
    if when.tzinfo is None:
        raise ValueError(f"timestamp {shorten(text)} has no time zone")
    return when.timestamp()


def _usage_of(usage: Mapping[str, Any], resource: str) -> Fraction:
    value = usage.get(resource)
    if value is None:
        raise ValueError(f"no usage.{resource}")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"usage.{resource} is not a quantity: {shorten(value)}")
    try:
        return _quantity(str(value))
    except QuantityError as exc:
        raise ValueError(f"usage.{resource}: {exc}") from exc


def node_usage(
    metrics: ClusterObject | None,
    node: NodeInfo,
    now: float,
    max_age_seconds: float,
    with_memory: bool = False,
) -> NodeUsage:
    """The node's usage from its NodeMetrics as of ``now`` (Unix seconds)."""
    if metrics is None:
        return NodeUsage(problem=REASON_MISSING, detail=f"no NodeMetrics for node {node.name}")
    try:
        data = metrics.data
        stamp = data.get("timestamp")
        if not isinstance(stamp, str):
            raise ValueError("no timestamp")
        age = now - _timestamp(stamp)
        usage = data.get("usage")
        if not isinstance(usage, Mapping):
            raise ValueError("no usage")
        cpu_used = _usage_of(usage, "cpu")
        mem_used = _usage_of(usage, "memory") if with_memory else None
    except ValueError as exc:
        return NodeUsage(problem=REASON_UNUSABLE, detail=f"{metrics.describe()}: {exc}")
    if age > max_age_seconds:
        return NodeUsage(
            problem=REASON_STALE,
            detail=f"{metrics.describe()}: timestamp {stamp} is {age:.0f}s old "
            f"(max {max_age_seconds:g}s)",
        )
    alloc_milli = node.allocatable.milli_cpu
    if alloc_milli <= 0:
        return NodeUsage(problem=REASON_UNUSABLE, detail=f"node {node.name} has no allocatable cpu")
    cpu = cpu_used * 1000 / alloc_milli
    memory: Fraction | None = None
    if mem_used is not None:
        if node.allocatable.memory <= 0:
            return NodeUsage(
                problem=REASON_UNUSABLE, detail=f"node {node.name} has no allocatable memory"
            )
        memory = mem_used / node.allocatable.memory
    return NodeUsage(cpu=cpu, memory=memory)


def dimension_score(usage: Fraction) -> int:
    """floor(100 * (1 - usage)) within 0..100, computed exactly."""
    raw = (1 - usage) * MAX_NODE_SCORE
    return max(0, min(MAX_NODE_SCORE, raw.numerator // raw.denominator))


class LowCpu(FilterPlugin[LowCpuSchedulerArgs], ScorePlugin[LowCpuSchedulerArgs]):
    name: ClassVar[str] = NAME
    Args: ClassVar[type[Any] | None] = LowCpuSchedulerArgs

    def __init__(
        self,
        args: LowCpuSchedulerArgs | None = None,
        handle: Handle | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        cfg = LowCpuSchedulerArgs() if args is None else args
        # Checked here too, so a plugin built in code is checked like one built
        # from a configuration file.
        cfg.validate()
        super().__init__(cfg, handle)
        self.cfg = cfg
        # The wall clock metrics timestamps are compared with (a test replaces it).
        self.clock = clock
        # Thresholds as exact fractions of the decimal the user wrote.
        self._cpu_threshold = Fraction(repr(cfg.cpu_threshold))
        self._memory_threshold = (
            None if cfg.memory_threshold is None else Fraction(repr(cfg.memory_threshold))
        )

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        cfg = args if isinstance(args, LowCpuSchedulerArgs) else LowCpuSchedulerArgs()
        return (node_metrics_kind(cfg.metrics_poll_seconds),)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A node added, or its NodeMetrics added or changed (a poll that
        shows lower usage)."""
        metrics = kind_event_resource(node_metrics_kind(self.cfg.metrics_poll_seconds))
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD)),
            ClusterEventWithHint(ClusterEvent(metrics, ActionType.ADD | ActionType.UPDATE)),
        ]

    def usage(self, node: NodeInfo) -> NodeUsage:
        """The node's usage from the request's snapshot."""
        metrics = self.handle.snapshot.object(METRICS_GROUP, METRICS_RESOURCE, "", node.name)
        u = node_usage(
            metrics, node, self.clock(), self.cfg.metrics_max_age_seconds, self.cfg.uses_memory
        )
        if u.problem:
            log.debug(
                "%s: %s (%s): missingMetrics %s",
                NAME,
                u.problem,
                u.detail,
                self.cfg.missing_metrics,
            )
        return u

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        u = self.usage(node)
        if u.problem:
            if self.cfg.missing_metrics == REJECT:
                return Status.unschedulable(u.problem)
            return SUCCESS
        if u.cpu > self._cpu_threshold:
            return Status.unschedulable(REASON_CPU)
        if (
            self._memory_threshold is not None
            and u.memory is not None
            and u.memory > self._memory_threshold
        ):
            return Status.unschedulable(REASON_MEMORY)
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        u = self.usage(node)
        if u.problem:
            return self.cfg.missing_metrics_score
        cpu_w, mem_w = self.cfg.cpu_weight, self.cfg.memory_weight
        total = cpu_w * dimension_score(u.cpu)
        if mem_w and u.memory is not None:
            total += mem_w * dimension_score(u.memory)
        return total // (cpu_w + mem_w)
