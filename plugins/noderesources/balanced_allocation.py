"""NodeResourcesBalancedAllocation: favour nodes whose resources end up
evenly used.

Port of pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go
at v1.36 (PreScore, Score, balancedResourceScorer, balancedResourceScore) on
the shared scorer of resource_allocation.go (calculatePodResourceRequestList,
calculateNodeAllocatableRequest, isBestEffortPod), with plain requests
(``useRequested``: no 100m / 200Mi defaults for containers that request
nothing). The pod's requests are those its node would count: pod-level
``spec.resources.requests`` and in-place resize status included, as the
feature gates leave them on at v1.36.

For each configured resource the node has (allocatable != 0; an extended
resource the pod does not request is left out) the fraction
``requested / allocatable`` is taken, capped at 1. Over those k fractions:

* ``std = |f1 - f2| / 2`` when k == 2 (upstream's shortcut, computed as
  ``abs((f1 - f2) / 2)``),
* the population standard deviation ``sqrt(sum((f - mean)^2) / k)`` when
  k > 2,
* 0 when k < 2;

``balance = int64((1 - std) * 100)``, truncated. Since v1.36 the score is
the *change* in balance the pod brings, not the balance after it:
``50 + (50 + balance(with pod) - balance(without pod)) / 2`` in int64
division, so 75 means "no change", up to 100 for a pod that evens the node
out and down to 50 for one that skews it.

PreScore Skips best-effort pods (every configured request 0,
kubernetes/kubernetes#129138), so Score never sees them; Score without
PreScore recomputes the requests and gives such a pod 0 everywhere, as
upstream.

``score_nodes`` is the hot path: float64 numpy over the snapshot columns, the
same IEEE operations in the same order as the Go code, so it returns exactly
what the per-node ``score`` returns (tests check both on random clusters).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import msgspec
import numpy as np
import numpy.typing as npt

from berth.framework.cycle_state import CycleState, StateKey
from berth.framework.interfaces import (
    MAX_NODE_SCORE,
    PreScorePlugin,
    ScoreArray,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.shape_score import go_div
from berth.framework.snapshot import NodeBatch
from berth.framework.status import SUCCESS, Status
from berth.plugins.noderesources.args import NodeResourcesBalancedAllocationArgs
from berth.plugins.noderesources.fit import sign_requests
from berth.plugins.noderesources.resource_allocation import (
    IntArray,
    ResourceAllocationScorer,
    ResourceColumns,
    ScoreFunctions,
    presence,
)

if TYPE_CHECKING:
    from berth.framework.handle import Handle

__all__ = [
    "NAME",
    "PRE_SCORE_STATE_KEY",
    "BalancedAllocation",
    "PreScoreState",
    "Scratch",
    "balanced_resource_score",
    "balanced_resource_scorer",
    "balanced_resource_scores",
    "balanced_score_functions",
    "improvement_scores",
    "improvement_scores_two",
]

NAME = "NodeResourcesBalancedAllocation"

_HALF = MAX_NODE_SCORE // 2
_MAX = float(MAX_NODE_SCORE)

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

# Up to this many resources some candidates lack, candidates are grouped by a
# bit key tallied with bincount; beyond it, by np.unique over the masks.
_BINCOUNT_BITS = 12


class PreScoreState(msgspec.Struct, frozen=True):
    """balanced_allocation.go, balancedAllocationPreScoreState: the pod's
    request of each configured resource, in the order of ``resources``."""

    pod_requests: list[int]


# Upstream's key: "PreScore" + the plugin name.
PRE_SCORE_STATE_KEY = StateKey("PreScore" + NAME, PreScoreState)


# -- one node -------------------------------------------------------------------


def balanced_resource_score(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    """balanced_allocation.go, balancedResourceScore: 0..100, higher when the
    fractions of the resources with allocatable != 0 are closer together."""
    fractions: list[float] = []
    total = 0.0
    for req, alloc in zip(requested, allocatable, strict=True):
        if alloc == 0:
            continue
        fraction = float(req) / float(alloc)
        if fraction > 1:
            fraction = 1.0
        total += fraction
        fractions.append(fraction)
    std = 0.0
    k = len(fractions)
    if k == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif k > 2:
        mean = total / float(k)
        squares = 0.0
        for fraction in fractions:
            squares = squares + (fraction - mean) * (fraction - mean)
        std = math.sqrt(squares / float(k))
    # Go's float64 -> int64 conversion truncates toward zero, as int() does.
    return int((1 - std) * _MAX)


def balanced_resource_scorer(
    requested: Sequence[int], allocated: Sequence[int], allocatable: Sequence[int]
) -> int:
    """balanced_allocation.go, balancedResourceScorer: how much the pod
    improves the node's balance, ``50 + (50 + with - without) / 2`` in int64
    division (``requested`` includes the pod, ``allocated`` does not)."""
    with_pod = balanced_resource_score(requested, allocatable)
    without_pod = balanced_resource_score(allocated, allocatable)
    return _HALF + go_div(_HALF + with_pod - without_pod, 2)


# -- every candidate ----------------------------------------------------------------


class Scratch:
    """Float64 rows and an int64 row reused from call to call, so the hot
    path allocates (and the C allocator frees and re-faults) little: with
    two 5000-node evaluations per cycle, fresh temporaries cost more than
    the arithmetic. One per plugin instance; calls must not overlap."""

    __slots__ = ("_floats", "_ints")

    def __init__(self) -> None:
        self._floats = np.empty((0, 0), dtype=np.float64)
        self._ints = np.empty(0, dtype=np.int64)

    def rows(self, k: int, n: int) -> FloatArray:
        """A (k, n) float64 block (contents undefined)."""
        rows, cols = self._floats.shape
        if rows < k or cols < n:
            wide = cols if cols >= n else max(n, 2 * cols)
            self._floats = np.empty((max(rows, k), wide), dtype=np.float64)
        block: FloatArray = self._floats[:k, :n]
        return block

    def ints(self, n: int) -> IntArray:
        if self._ints.size < n:
            self._ints = np.empty(max(n, 2 * self._ints.size), dtype=np.int64)
        return self._ints[:n]


def _fractions(
    columns: ResourceColumns,
    pod_requests: Sequence[int] | None,
    out: FloatArray,
    scratch: Scratch,
) -> tuple[list[FloatArray], list[BoolArray | None]]:
    """Per resource some candidate has: its fractions ``requested /
    allocatable`` capped at 1 (without the pod when ``pod_requests`` is
    given: ``requested - pod request``), written to the rows of ``out``, and
    which candidates have it (None: all). Where a node lacks the resource
    the fraction is garbage, to be masked."""
    fractions: list[FloatArray] = []
    masks: list[BoolArray | None] = []
    for i, col in enumerate(columns):
        if col is None:
            continue
        req, alloc = col
        has = presence(alloc)
        if has is False:
            continue  # no candidate has it: no fraction anywhere
        if has is not None:
            alloc = np.where(has, alloc, 1)
        if pod_requests is not None and pod_requests[i] != 0:
            req = np.subtract(req, pod_requests[i], out=scratch.ints(req.size))
        # int64 / int64 converts both to float64, then divides: Go's
        # float64(requested) / float64(allocatable).
        f = out[len(fractions)]
        np.true_divide(req, alloc, out=f)
        np.minimum(f, 1.0, out=f)
        fractions.append(f)
        masks.append(has)
    return fractions, masks


def _std_all_present(fractions: list[FloatArray], spare: FloatArray) -> FloatArray:
    """The std over ``fractions`` for candidates that have all of them, as Go
    computes it: ``abs((f1 - f2) / 2)`` for two, the running sums in order
    and ``sqrt(squares / k)`` for more, 0 for fewer. In ``fractions[0]``
    (``spare`` when there are fewer than two); overwrites ``fractions``."""
    k = len(fractions)
    if k < 2:
        spare.fill(0.0)
        return spare
    std = fractions[0]
    if k == 2:
        np.subtract(std, fractions[1], out=std)
        std /= 2
        np.abs(std, out=std)
        return std
    mean = np.add(fractions[0], fractions[1], out=spare)
    for f in fractions[2:]:
        mean += f
    mean /= float(k)
    for f in fractions:
        np.subtract(f, mean, out=f)
        np.multiply(f, f, out=f)
    for f in fractions[1:]:
        std += f
    std /= float(k)
    np.sqrt(std, out=std)
    return std


def _std_by_node(fractions: list[FloatArray], masks: list[BoolArray | None]) -> FloatArray:
    """The std of each candidate over the fractions it has. Candidates are
    grouped by which resources they have (a handful of groups); each group
    takes the all-present arithmetic on its own rows."""
    n = fractions[0].size
    partial = [m for m in masks if m is not None]
    group_of: npt.NDArray[np.int64] | npt.NDArray[np.intp]
    if len(partial) <= _BINCOUNT_BITS:
        # Which partial resources a candidate has, as bits; tally the keys.
        group_of = np.zeros(n, dtype=np.int64)
        for bit, has in enumerate(partial):
            group_of |= np.left_shift(has, bit, dtype=np.int64)
        groups = np.flatnonzero(np.bincount(group_of)).tolist()
    else:
        _, group_of = np.unique(np.stack(partial), axis=1, return_inverse=True)
        groups = list(range(int(group_of.max()) + 1))
    std = np.empty(n, dtype=np.float64)
    for group in groups:
        rows = np.flatnonzero(group_of == group)
        first = int(rows[0])
        present = [
            f[rows] for f, has in zip(fractions, masks, strict=True) if has is None or has[first]
        ]
        std[rows] = _std_all_present(present, np.empty(rows.size, dtype=np.float64))
    return std


def _balance(
    fractions: list[FloatArray], masks: list[BoolArray | None], spare: FloatArray
) -> FloatArray:
    """balancedResourceScore for every candidate, as integer-valued float64
    (truncated like Go's int64 conversion), in ``fractions[0]`` or
    ``spare`` (a free row). Overwrites ``fractions``."""
    std: FloatArray
    if all(m is None for m in masks):
        std = _std_all_present(fractions, spare)
    else:
        std = fractions[0]
        std[:] = _std_by_node(fractions, masks)
    np.subtract(1.0, std, out=std)
    std *= _MAX
    np.trunc(std, out=std)
    return std


def _resource_count(columns: ResourceColumns) -> int:
    return sum(1 for c in columns if c is not None)


def balanced_resource_scores(
    columns: ResourceColumns, n: int, scratch: Scratch | None = None
) -> IntArray:
    """balancedResourceScore over ``(requested, allocatable)`` columns (None:
    the resource is not scored on any candidate)."""
    scratch = Scratch() if scratch is None else scratch
    block = scratch.rows(_resource_count(columns) + 1, n)
    score = _balance(*_fractions(columns, None, block[:-1], scratch), block[-1])
    out: IntArray = score.astype(np.int64)
    return out


def improvement_scores(
    columns: ResourceColumns,
    pod_requests: Sequence[int],
    n: int,
    scratch: Scratch | None = None,
) -> IntArray:
    """balancedResourceScorer for every candidate: ``columns`` hold the
    requested amounts with the pod (resource_allocation.py's ``columns``);
    the amounts without it are those minus ``pod_requests``."""
    scratch = Scratch() if scratch is None else scratch
    k = _resource_count(columns)
    block = scratch.rows(2 * k + 2, n)
    change = _balance(*_fractions(columns, None, block[:k], scratch), block[2 * k])
    change -= _balance(*_fractions(columns, pod_requests, block[k : 2 * k], scratch), block[-1])
    return _improvement(change)


def _improvement(change: FloatArray) -> IntArray:
    """The score from each candidate's balance with the pod minus its balance
    without: 50 + (50 + with - without) / 2. The balances are integers in
    float64, so every step is exact, and trunc is Go's int64 division by 2.
    ``change`` is overwritten."""
    change += _HALF
    change /= 2
    np.trunc(change, out=change)
    change += _HALF
    out: IntArray = change.astype(np.int64)
    return out


def improvement_scores_two(
    used: IntArray, alloc: IntArray, pod_requests: Sequence[int], scratch: Scratch | None = None
) -> IntArray:
    """improvement_scores for two resources every candidate has, from (2, n)
    matrices of the amounts requested without the pod and the allocatable:
    the same float64 steps, on both balances (with and without the pod) at
    once."""
    scratch = Scratch() if scratch is None else scratch
    n = alloc.shape[1]
    # Rows: resource 0 and 1 with the pod, then resource 0 and 1 without.
    fractions = scratch.rows(4, n)
    np.true_divide(used, alloc, out=fractions[2:])
    used += np.array(pod_requests, dtype=np.int64).reshape(2, 1)
    np.true_divide(used, alloc, out=fractions[:2])
    np.minimum(fractions, 1.0, out=fractions)
    # balancedResourceScore's std for two, abs((f1 - f2) / 2), then
    # trunc((1 - std) * 100): row 0 with the pod, row 1 without.
    balance = fractions[0::2] - fractions[1::2]
    balance /= 2
    np.abs(balance, out=balance)
    np.subtract(1.0, balance, out=balance)
    balance *= _MAX
    np.trunc(balance, out=balance)
    change = balance[0]
    change -= balance[1]
    return _improvement(change)


def balanced_score_functions() -> ScoreFunctions:
    """balancedResourceScore in the shape resource_allocation.py's scorer
    takes: the balance with the pod. The plugin evaluates it twice, with and
    without the pod (``improvement_scores``, ``balanced_resource_scorer``)."""
    return ScoreFunctions(balanced_resource_score, balanced_resource_scores)


# -- the plugin ------------------------------------------------------------------------


class BalancedAllocation(
    PreScorePlugin[NodeResourcesBalancedAllocationArgs],
    ScorePlugin[NodeResourcesBalancedAllocationArgs],
    SignPlugin[NodeResourcesBalancedAllocationArgs],
):
    """The NodeResourcesBalancedAllocation plugin (upstream's
    noderesources.BalancedAllocation). Weight 1 in upstream's default
    profile; no NormalizeScore."""

    name: ClassVar[str] = NAME
    Args: ClassVar[type[Any] | None] = NodeResourcesBalancedAllocationArgs

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """SignPod: the pod's requests and overheads; not signed when DRA
        backs one of its extended resources."""
        return sign_requests(self, pod)

    def __init__(
        self,
        args: NodeResourcesBalancedAllocationArgs | None = None,
        handle: Handle | None = None,
    ) -> None:
        ba_args = NodeResourcesBalancedAllocationArgs() if args is None else args
        # NewBalancedAllocation validates too, so a plugin built in code is
        # checked like one built from a configuration file.
        ba_args.validate()
        super().__init__(ba_args, handle)
        self.ba_args = ba_args
        # NewBalancedAllocation sets the scorer's flags from the feature
        # gates, all on at v1.36: the pod's requests are the ones its node
        # would count (pod-level requests and resize status included).
        self.scorer = ResourceAllocationScorer(
            NAME,
            ba_args.resources,
            balanced_score_functions(),
            use_requested=True,
            enable_pod_level_resources=True,
            enable_in_place_pod_vertical_scaling=True,
            enable_in_place_pod_level_resources_vertical_scaling=True,
        )
        self._scratch = Scratch()

    # -- PreScore -------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> Status:
        """balanced_allocation.go, PreScore: the pod's requests into
        CycleState; Skip for a best-effort pod (nothing requested of any
        configured resource)."""
        requests = self.scorer.pod_requests(pod)
        if not any(requests):
            return Status.skip()
        state.write(PRE_SCORE_STATE_KEY, PreScoreState(requests))
        return SUCCESS

    def _pod_requests(self, state: CycleState, pod: PodInfo) -> list[int] | None:
        """PreScore's requests, recomputed when PreScore did not run (as
        upstream's Score does); None for a best-effort pod, which scores 0."""
        pre = state.get(PRE_SCORE_STATE_KEY)
        if pre is not None and len(pre.pod_requests) == len(self.scorer.resources):
            return pre.pod_requests
        requests = self.scorer.pod_requests(pod)
        return requests if any(requests) else None

    # -- Score ----------------------------------------------------------------

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """balanced_allocation.go, Score, for one node with plain integers
        and floats: the reference the batch form is tested against."""
        pod_requests = self._pod_requests(state, pod)
        if pod_requests is None:
            return 0
        k = len(pod_requests)
        requested = [0] * k
        allocated = [0] * k
        allocatable = [0] * k
        for i in range(k):
            # calculateNodeAllocatableRequest: (0, 0) leaves it unscored.
            alloc, req = self.scorer.allocatable_requested(node, i, pod_requests[i])
            if alloc == 0:
                continue
            allocatable[i] = alloc
            requested[i] = req
            allocated[i] = req - pod_requests[i]
        return balanced_resource_scorer(requested, allocated, allocatable)

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> ScoreArray:
        n = len(nodes)
        pod_requests = self._pod_requests(state, pod)
        if pod_requests is None:
            return np.zeros(n, dtype=np.int64)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        if len(pod_requests) == 2:
            matrices = self.scorer.stacked(nodes)
            if matrices is not None:
                return improvement_scores_two(*matrices, pod_requests, self._scratch)
        cols = self.scorer.columns(nodes, pod_requests)
        return improvement_scores(cols, pod_requests, n, self._scratch)
