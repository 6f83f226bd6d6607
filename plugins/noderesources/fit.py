"""NodeResourcesFit: does the node have room for the pod's requests, and how
full will it be?

Port of pkg/scheduler/framework/plugins/noderesources/fit.go:

* PreFilter computes the pod's effective requests once (computePodResourceRequest:
  containers summed, init containers and sidecars by step, pod-level
  spec.resources.requests replacing the sum for cpu, memory and hugepages,
  overhead added) and writes them to CycleState. Like upstream it never Skips:
  even a pod that requests nothing must pass the pod-count check.
* Filter (fitsRequest) rejects a node for every resource that does not fit:
  "Too many pods", "Insufficient cpu", "Insufficient memory",
  "Insufficient ephemeral-storage", "Insufficient <name>". The code is
  Unschedulable, or UnschedulableAndUnresolvable when some request exceeds
  the node's whole allocatable (no preemption can make room). Requests of 0
  and ignored extended resources are not checked.
* PreScore/Score rate the node with the configured strategy (LeastAllocated by
  default, MostAllocated, RequestedToCapacityRatio) over CPU and memory with
  non-zero defaults, like upstream. As upstream at v1.36, the pod's side of
  that score ignores pod-level requests and resize status (NewFit builds its
  resourceAllocationScorer without the feature flags), while the node's side
  counts its pods as NodeInfo does, with both (resource_allocation.py).

``filter_nodes``/``score_nodes`` are the hot path: numpy over the snapshot's
columns, one shared Status per distinct set of reasons. ``filter``/``score``
work on one NodeInfo with plain integers, exactly like upstream's Filter and
Score; they also serve nodes that are not in the snapshot's columns (e.g. a
what-if NodeInfo with pods removed) and are the reference the batch forms are
tested against.

EventsToRegister and its queueing hints are upstream's with v1.36's gates
(queueing hints and in-place vertical scaling on): a pod deleted or scaled
down, a node added or its allocatable changed. The DRA-backed extended
resource event (DeviceClass) is not registered: Berth does not serve
DRAExtendedResource yet.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import msgspec
import numpy as np
import numpy.typing as npt

from berth.framework import signers
from berth.framework.cycle_state import CycleState, StateKey
from berth.framework.deviceclasses import (
    DEVICE_CLASS_PREFIX,
    DEVICE_CLASSES,
    DeviceClassResolver,
)
from berth.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from berth.framework.interfaces import (
    FilterPlugin,
    NodeVerdicts,
    Plugin,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ScoreArray,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from berth.framework.model import CALCULATE_RESOURCE_OPTIONS, NodeInfo, PodInfo, pod_request_list
from berth.framework.objects import ClusterObject, ObjectKind
from berth.framework.snapshot import INT_ROWS, IntArray, NodeBatch
from berth.framework.status import SUCCESS, Code, Status
from berth.plugins.noderesources.args import (
    LEAST_ALLOCATED,
    MOST_ALLOCATED,
    NodeResourcesFitArgs,
    ScoringStrategy,
)
from berth.plugins.noderesources.least_allocated import least_resource_scorer
from berth.plugins.noderesources.most_allocated import most_resource_scorer
from berth.plugins.noderesources.requested_to_capacity_ratio import (
    requested_to_capacity_ratio_scorer,
)
from berth.plugins.noderesources.resource_allocation import ResourceAllocationScorer, ScoreFunctions
from berth.plugins.noderesources.resource_names import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    PODS,
    is_extended_resource_name,
    is_scalar_resource_name,
)

if TYPE_CHECKING:
    from berth.framework.handle import Handle

__all__ = [
    "PRE_FILTER_STATE_KEY",
    "PRE_SCORE_STATE_KEY",
    "REASON_TOO_MANY_PODS",
    "Fit",
    "InsufficientResource",
    "PreFilterState",
    "PreScoreState",
    "compute_pod_resource_request",
    "fits",
    "fits_request",
    "insufficient_reason",
]

NAME = "NodeResourcesFit"

# fit.go, fitsRequest: the reasons users read in FailedScheduling events.
REASON_TOO_MANY_PODS = "Too many pods"


def insufficient_reason(resource: str) -> str:
    return f"Insufficient {resource}"


_REASON_CPU = insufficient_reason(CPU)
_REASON_MEMORY = insufficient_reason(MEMORY)
_REASON_EPHEMERAL = insufficient_reason(EPHEMERAL_STORAGE)


class PreFilterState(msgspec.Struct, frozen=True):
    """The pod's effective requests (fit.go, preFilterState)."""

    milli_cpu: int = 0
    memory: int = 0
    ephemeral_storage: int = 0
    scalar: dict[str, int] = msgspec.field(default_factory=dict)
    # The scalar requests a DeviceClass backs (DRAExtendedResource): on a
    # node without them in its allocatable DynamicResources provides them
    # (shouldDelegateResourceToDRA), so Filter does not check them there.
    dra_backed: frozenset[str] = frozenset()

    @property
    def is_zero(self) -> bool:
        return (
            self.milli_cpu == 0
            and self.memory == 0
            and self.ephemeral_storage == 0
            and not self.scalar
        )


class PreScoreState(msgspec.Struct, frozen=True):
    """The pod's request of each scored resource, in the order of the
    strategy's resources (fit.go, preScoreState)."""

    pod_requests: list[int]


# Upstream's keys: "PreFilter" / "PreScore" + the plugin name.
PRE_FILTER_STATE_KEY = StateKey("PreFilter" + NAME, PreFilterState)
PRE_SCORE_STATE_KEY = StateKey("PreScore" + NAME, PreScoreState)


def compute_pod_resource_request(pod: PodInfo) -> PreFilterState:
    """fit.go, computePodResourceRequest: resource.PodRequests with pod-level
    requests (PodLevelResources is on at v1.36) and without status resources
    (the pod has not been scheduled, so no resize applies)."""
    r = pod.spec_requests
    return PreFilterState(r.milli_cpu, r.memory, r.ephemeral_storage, dict(r.scalar))


def dra_backed_resources(plugin: Plugin[Any], scalar: dict[str, int]) -> frozenset[str]:
    """The requested resources some DeviceClass backs (fit.go
    shouldDelegateResourceToDRA over the pod's scalar requests)."""
    if not scalar or not plugin.has_handle:
        # Built without a framework (tests of Filter alone): no classes.
        return frozenset()
    kind = DEVICE_CLASSES
    resolver = DeviceClassResolver.of(plugin.handle.snapshot.objects(kind.group, kind.resource))
    if not resolver:
        return frozenset()
    return frozenset(n for n, q in scalar.items() if q != 0 and resolver.get(n) is not None)


def sign_requests(plugin: Plugin[Any], pod: PodInfo) -> list[SignFragment] | Status:
    """fit.go and balanced_allocation.go SignPod: the pod's requests and
    overheads, or no signature when DRA backs one of its extended resources.
    Berth also signs the requests with upstream's defaults for containers
    that request nothing (scoring counts those), so two pods with equal sums
    but different containers are not taken for one another."""
    r = pod.spec_requests
    if dra_backed_resources(plugin, r.scalar):
        return Status.unschedulable(
            "signature disabled when dra extended resources are used in the cluster", plugin.name
        )
    scalar = tuple(sorted((name, q) for name, q in r.scalar.items() if q))
    value = (r.milli_cpu, r.memory, r.ephemeral_storage, scalar, pod.non_zero_requests)
    return [(signers.RESOURCES, value)]


@dataclass(frozen=True, slots=True)
class InsufficientResource:
    """fit.go, InsufficientResource: one resource that does not fit."""

    resource_name: str
    reason: str
    requested: int
    used: int
    capacity: int
    # No preemption on this node can help: the request alone exceeds it.
    unresolvable: bool = False


def _is_ignored(name: str, ignored: frozenset[str], ignored_groups: frozenset[str]) -> bool:
    if not is_extended_resource_name(name):
        return False
    return name in ignored or (bool(ignored_groups) and name.split("/")[0] in ignored_groups)


def _checked_scalars(
    request: PreFilterState, ignored: frozenset[str], ignored_groups: frozenset[str]
) -> list[tuple[str, int]]:
    """The scalar requests Filter checks, in name order. (Upstream walks a Go
    map, so its order varies from run to run; sorted keeps messages stable.)"""
    return [
        (name, quantity)
        for name, quantity in sorted(request.scalar.items())
        if quantity != 0 and not _is_ignored(name, ignored, ignored_groups)
    ]


def fits_request(
    request: PreFilterState,
    node: NodeInfo,
    ignored: frozenset[str] = frozenset(),
    ignored_groups: frozenset[str] = frozenset(),
) -> list[InsufficientResource]:
    """fit.go, fitsRequest: every resource of ``node`` the request does not
    fit in; empty when it fits."""
    out: list[InsufficientResource] = []
    alloc = node.allocatable
    used = node.requested
    pods = len(node.pods)
    if pods + 1 > alloc.allowed_pod_number:
        out.append(
            InsufficientResource(PODS, REASON_TOO_MANY_PODS, 1, pods, alloc.allowed_pod_number)
        )
    if request.is_zero:
        return out
    for name, reason, want, have, capacity in (
        (CPU, _REASON_CPU, request.milli_cpu, used.milli_cpu, alloc.milli_cpu),
        (MEMORY, _REASON_MEMORY, request.memory, used.memory, alloc.memory),
        (
            EPHEMERAL_STORAGE,
            _REASON_EPHEMERAL,
            request.ephemeral_storage,
            used.ephemeral_storage,
            alloc.ephemeral_storage,
        ),
    ):
        if want > 0 and want > capacity - have:
            out.append(InsufficientResource(name, reason, want, have, capacity, want > capacity))
    for name, want in _checked_scalars(request, ignored, ignored_groups):
        have = used.scalar.get(name, 0)
        capacity = alloc.scalar.get(name, 0)
        if name in request.dra_backed and capacity <= 0:
            continue
        if want > capacity - have:
            out.append(
                InsufficientResource(
                    name, insufficient_reason(name), want, have, capacity, want > capacity
                )
            )
    return out


def fits(pod: PodInfo, node: NodeInfo) -> list[InsufficientResource]:
    """fit.go, Fits: the pod against the node with no resources ignored."""
    return fits_request(compute_pod_resource_request(pod), node)


def _scaled_down_for(target: PodInfo, old: PodInfo, new: PodInfo) -> bool:
    """fit.go, isSchedulableAfterPodScaleDown: the target itself scaled down,
    or a bound pod lowered a resource the target requests (requests with the
    in-place resize status counted)."""
    if new.uid == target.uid:
        return True
    if not new.proto.node_name:
        return False
    before = pod_request_list(old.proto, CALCULATE_RESOURCE_OPTIONS)
    after = pod_request_list(new.proto, CALCULATE_RESOURCE_OPTIONS)
    for name, value in pod_request_list(target.proto, CALCULATE_RESOURCE_OPTIONS).items():
        if value == 0:
            continue
        if name not in (CPU, MEMORY, EPHEMERAL_STORAGE) and not is_scalar_resource_name(name):
            continue
        if before.get(name, 0) > after.get(name, 0):
            return True
    return False


def _requested_allocatable_grew(pod: PodInfo, old: NodeInfo, new: NodeInfo) -> bool:
    """fit.go, haveAnyRequestedResourcesIncreased: more pods allowed, or
    more of a resource the pod requests."""
    request = compute_pod_resource_request(pod)
    was, now = old.allocatable, new.allocatable
    if now.allowed_pod_number > was.allowed_pod_number:
        return True
    if request.is_zero:
        return False
    if (
        (request.milli_cpu > 0 and now.milli_cpu > was.milli_cpu)
        or (request.memory > 0 and now.memory > was.memory)
        or (request.ephemeral_storage > 0 and now.ephemeral_storage > was.ephemeral_storage)
    ):
        return True
    return any(
        quantity != 0 and now.scalar.get(name, 0) > was.scalar.get(name, 0)
        for name, quantity in request.scalar.items()
    )


def _extended_resource_name(obj: ClusterObject) -> str:
    spec = obj.data.get("spec")
    name = spec.get("extendedResourceName") if isinstance(spec, dict) else None
    return name if isinstance(name, str) else ""


def is_schedulable_after_device_class_event(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """isSchedulableAfterDeviceClassEvent: an added class whose implicit
    extended resource the pod requests, or a class whose (changed)
    extendedResourceName the pod requests."""
    if not isinstance(new, ClusterObject):
        return QueueingHint.QUEUE
    requests = pod.spec_requests.scalar
    if isinstance(old, ClusterObject):
        if _extended_resource_name(old) == _extended_resource_name(new):
            return QueueingHint.QUEUE_SKIP
    elif DEVICE_CLASS_PREFIX + new.name in requests:
        return QueueingHint.QUEUE
    name = _extended_resource_name(new)
    if name and name in requests:
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def _status_of(insufficient: list[InsufficientResource]) -> Status:
    """fit.go, Filter: all reasons kept; unresolvable if any one is."""
    if not insufficient:
        return SUCCESS
    code = (
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        if any(r.unresolvable for r in insufficient)
        else Code.UNSCHEDULABLE
    )
    return Status(code, tuple(r.reason for r in insufficient))


def _scorer_for(strategy: ScoringStrategy) -> ResourceAllocationScorer:
    """fit.go, nodeResourceStrategyTypeMap."""
    weights = [r.weight for r in strategy.resources]
    functions: ScoreFunctions
    if strategy.type == LEAST_ALLOCATED:
        functions = least_resource_scorer(weights)
    elif strategy.type == MOST_ALLOCATED:
        functions = most_resource_scorer(weights)
    else:
        assert strategy.requested_to_capacity_ratio is not None  # validate() checked
        functions = requested_to_capacity_ratio_scorer(
            weights, strategy.requested_to_capacity_ratio.shape
        )
    return ResourceAllocationScorer(strategy.type, strategy.resources, functions)


# A batch rejection is a bit set in an int64 (see filter_nodes): room for 60
# checked resources. A pod asking for more takes the per-node path.
_MAX_BATCH_CHECKS = 60


class Fit(
    PreFilterPlugin[NodeResourcesFitArgs],
    FilterPlugin[NodeResourcesFitArgs],
    PreScorePlugin[NodeResourcesFitArgs],
    ScorePlugin[NodeResourcesFitArgs],
    SignPlugin[NodeResourcesFitArgs],
):
    """The NodeResourcesFit plugin (upstream's noderesources.Fit)."""

    name: ClassVar[str] = NAME
    Args: ClassVar[type[Any] | None] = NodeResourcesFitArgs

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """SignPod: the pod's requests and overheads; not signed when DRA
        backs one of its extended resources."""
        return sign_requests(self, pod)

    def __init__(
        self, args: NodeResourcesFitArgs | None = None, handle: Handle | None = None
    ) -> None:
        fit_args = NodeResourcesFitArgs() if args is None else args
        # NewFit validates too, so a plugin built in code is checked like one
        # built from a configuration file.
        fit_args.validate()
        super().__init__(fit_args, handle)
        self.fit_args = fit_args
        self.ignored_resources = frozenset(fit_args.ignored_resources)
        self.ignored_resource_groups = frozenset(fit_args.ignored_resource_groups)
        self.scorer = _scorer_for(fit_args.strategy)

    # -- EnqueueExtensions ----------------------------------------------------

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """fit.go, EventsToRegister (queueing hints and in-place vertical
        scaling on)."""
        return [
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.POD, ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN
                ),
                self.is_schedulable_after_pod_event,
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE
                ),
                self.is_schedulable_after_node_change,
            ),
            # DRAExtendedResource (beta, on): a class backing an extended
            # resource the pod asks for may be created or changed.
            ClusterEventWithHint(
                ClusterEvent(EventResource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE),
                is_schedulable_after_device_class_event,
            ),
        ]

    def is_schedulable_after_pod_event(
        self, pod: PodInfo, old: PodInfo | None, new: PodInfo | None
    ) -> QueueingHint:
        """isSchedulableAfterPodEvent: a deleted pod that was on a node (or
        nominated to one); the rejected pod itself scaled down; a bound pod
        scaled down in a resource the rejected pod requests."""
        if new is None:
            assert old is not None
            if not old.proto.node_name and not old.proto.nominated_node_name:
                return QueueingHint.QUEUE_SKIP
            return QueueingHint.QUEUE
        if old is not None and _scaled_down_for(pod, old, new):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def is_schedulable_after_node_change(
        self, pod: PodInfo, old: NodeInfo | None, new: NodeInfo
    ) -> QueueingHint:
        """isSchedulableAfterNodeChange: the pod fits the node's allocatable
        (the node alone, as upstream's isFit), and, for an update, some
        allocatable the pod requests grew."""
        if fits(pod, new):  # something does not fit even the empty node
            return QueueingHint.QUEUE_SKIP
        if old is None or _requested_allocatable_grew(pod, old, new):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    # -- PreFilter ------------------------------------------------------------

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        """DeviceClasses: which extended resources DRA backs."""
        return (DEVICE_CLASSES,)

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        request = compute_pod_resource_request(pod)
        backed = dra_backed_resources(self, request.scalar)
        if backed:
            request = msgspec.structs.replace(request, dra_backed=backed)
        state.write(PRE_FILTER_STATE_KEY, request)
        return None, SUCCESS

    def _missing_pre_filter(self) -> Status:
        # fit.go, getPreFilterState: Filter without PreFilter is an error.
        return Status.error(
            f'error reading "{PRE_FILTER_STATE_KEY.name}" from cycleState: not found', NAME
        )

    # -- Filter ---------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        request = state.get(PRE_FILTER_STATE_KEY)
        if request is None:
            return self._missing_pre_filter()
        return _status_of(
            fits_request(request, node, self.ignored_resources, self.ignored_resource_groups)
        )

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        n = len(nodes)
        request = state.get(PRE_FILTER_STATE_KEY)
        if request is None:
            return NodeVerdicts.uniform(n, self._missing_pre_filter())
        cols = nodes.columns
        idx = nodes.idx

        # The pod count, then (allocatable, requested) of each of CPU, memory
        # and ephemeral storage the pod requests, over the candidates in one
        # indexing of the integer columns.
        wants, rows, want_column = _plan(
            request.milli_cpu, request.memory, request.ephemeral_storage
        )
        gathered = cols.ints[rows, idx]
        if want_column is not None and not request.scalar:
            # The usual outcome first, in few numpy calls: room on every
            # candidate for the pod count and each request (rows 2, 4, ...
            # allocatable, 3, 5, ... requested).
            short = gathered[2::2] - gathered[3::2] < want_column
            if not np.count_nonzero(short) and not np.count_nonzero(gathered[0] >= gathered[1]):
                return NodeVerdicts.all_pass(n)
        # (reason, allocatable, requested, request) over the candidates;
        # None: no node has the resource.
        checks: list[tuple[str, IntArray | None, IntArray | None, int]] = [
            (reason, gathered[2 + 2 * i], gathered[3 + 2 * i], want)
            for i, (reason, want) in enumerate(wants)
        ]
        if request.scalar:
            for name, want in _checked_scalars(
                request, self.ignored_resources, self.ignored_resource_groups
            ):
                scalar = cols.scalar.get(name)
                alloc_col, used_col = scalar if scalar is not None else (None, None)
                if alloc_col is not None and used_col is not None:
                    alloc_col, used_col = alloc_col[idx], used_col[idx]
                if name in request.dra_backed:
                    if alloc_col is None or used_col is None:
                        continue  # no node has it: DynamicResources' part
                    # Nodes without it in allocatable: DynamicResources'.
                    with_it = alloc_col > 0
                    alloc_col = np.where(with_it, alloc_col, np.iinfo(np.int64).max)
                    used_col = np.where(with_it, used_col, 0)
                checks.append((insufficient_reason(name), alloc_col, used_col, want))
        if len(checks) > _MAX_BATCH_CHECKS:
            return NodeVerdicts.from_statuses([self.filter(state, pod, ni) for ni in nodes])

        # One int64 key per candidate: bit 0 "unresolvable", bit 1 "Too many
        # pods" (len(pods)+1 > allowed), bit 2+i the i-th check.
        key = np.left_shift(gathered[0] >= gathered[1], 1, dtype=np.int64)
        unresolvable: npt.NDArray[np.bool_] | None = None
        reasons = [REASON_TOO_MANY_PODS]
        for bit, (reason, alloc_col, used_col, want) in enumerate(checks, start=2):
            reasons.append(reason)
            if alloc_col is None or used_col is None:
                key |= (1 << bit) | 1  # short everywhere, and beyond allocatable
                continue
            short = alloc_col - used_col < want
            if not np.count_nonzero(short):
                continue
            key |= np.left_shift(short, bit, dtype=np.int64)
            beyond = short & (alloc_col < want)
            unresolvable = beyond if unresolvable is None else unresolvable | beyond
        if unresolvable is not None:
            key |= unresolvable
        return _verdicts_from_keys(key, reasons)

    # -- Score ----------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> Status:
        state.write(PRE_SCORE_STATE_KEY, PreScoreState(self.scorer.pod_requests(pod)))
        return SUCCESS

    def _pod_requests(self, state: CycleState, pod: PodInfo) -> list[int]:
        # fit.go, Score: recompute when PreScore did not run.
        pre = state.get(PRE_SCORE_STATE_KEY)
        if pre is not None and len(pre.pod_requests) == len(self.scorer.resources):
            return pre.pod_requests
        return self.scorer.pod_requests(pod)

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return self.scorer.score_node(node, self._pod_requests(state, pod))

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> ScoreArray:
        return self.scorer.score_batch(nodes, self._pod_requests(state, pod))


_CHECK_ROWS = {
    _REASON_CPU: (INT_ROWS["alloc_cpu"], INT_ROWS["req_cpu"]),
    _REASON_MEMORY: (INT_ROWS["alloc_mem"], INT_ROWS["req_mem"]),
    _REASON_EPHEMERAL: (INT_ROWS["alloc_eph"], INT_ROWS["req_eph"]),
}


# A filter plan: the (reason, request) of each of CPU, memory and ephemeral
# storage the pod requests, the rows of NodeColumns.ints to gather for them,
# and the requests as a read-only (k, 1) column (None: none requested).
_Plan = tuple[tuple[tuple[str, int], ...], npt.NDArray[np.intp], "IntArray | None"]


@functools.lru_cache(maxsize=1024)
def _plan(milli_cpu: int, memory: int, ephemeral_storage: int) -> _Plan:
    """The plan for a pod's CPU, memory and ephemeral-storage requests (pods
    of one workload share it)."""
    wants = tuple(
        (reason, want)
        for reason, want in (
            (_REASON_CPU, milli_cpu),
            (_REASON_MEMORY, memory),
            (_REASON_EPHEMERAL, ephemeral_storage),
        )
        if want > 0
    )
    column: IntArray | None = None
    if wants:
        column = np.array([w for _, w in wants], dtype=np.int64).reshape(-1, 1)
        column.flags.writeable = False
    return wants, _gather_rows(tuple(r for r, _ in wants)), column


def _gather_rows(reasons: tuple[str, ...]) -> npt.NDArray[np.intp]:
    """Rows of NodeColumns.ints for Filter: pod count, allowed pods, then
    (allocatable, requested) of each resource named by its reason."""
    rows = [INT_ROWS["pod_count"], INT_ROWS["alloc_pods"]]
    for reason in reasons:
        rows.extend(_CHECK_ROWS[reason])
    return np.array(rows, dtype=np.intp)[:, None]


# Keys below 2**16 are tallied with bincount; wider ones are sorted.
_BINCOUNT_BITS = 16


def _verdicts_from_keys(key: npt.NDArray[np.int64], reasons: list[str]) -> NodeVerdicts:
    """NodeVerdicts with one Status per distinct non-zero key."""
    n = key.size
    bits = len(reasons) + 1
    if bits <= _BINCOUNT_BITS:
        counts = np.bincount(key, minlength=2)
        distinct = np.flatnonzero(counts[1:]) + 1
        if distinct.size == 0:
            return NodeVerdicts.all_pass(n)
        table = np.full(counts.size, -1, dtype=np.int32)
        table[distinct] = np.arange(distinct.size, dtype=np.int32)
        index = table[key]
    else:
        rejected = np.flatnonzero(key)
        if rejected.size == 0:
            return NodeVerdicts.all_pass(n)
        distinct, inverse = np.unique(key[rejected], return_inverse=True)
        index = np.full(n, -1, dtype=np.int32)
        index[rejected] = inverse
    return NodeVerdicts(index, [_status_of_bits(int(k), reasons) for k in distinct.tolist()])


def _status_of_bits(key: int, reasons: list[str]) -> Status:
    code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if key & 1 else Code.UNSCHEDULABLE
    return Status(code, tuple(r for i, r in enumerate(reasons) if key >> (i + 1) & 1))
