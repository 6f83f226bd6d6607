"""What resource scores are computed from: a node's allocatable and requested
amount of each configured resource, the pod's request added.

Port of pkg/scheduler/framework/plugins/noderesources/resource_allocation.go
(resourceAllocationScorer: score, calculateResourceAllocatableRequest,
calculatePodResourceRequest, calculatePodResourceRequestList). The strategies
(least_allocated.py, most_allocated.py, requested_to_capacity_ratio.py) turn
those amounts into a 0..100 score; NodeResourcesFit uses this with
"non-zero" CPU/memory requests, BalancedAllocation with the plain requests
(``use_requested``). The node's side is what its NodeInfo sums (each pod as
PodInfo.CalculateResource counts it); the pod's side follows the scorer's
feature flags, which upstream leaves off for NodeResourcesFit (see
ResourceAllocationScorer).

Each strategy comes in two forms that must agree:

* ``one``: one node, plain Python integers with Go's int64 rounding (the
  per-node Score, and the reference the batch form is tested against);
* ``many``: every candidate at once over numpy columns (the hot path).

A strategy may add a third, ``stacked``: ``many`` for the usual case, where
every resource has columns of its own (CPU, memory, ephemeral storage) and
every candidate has some of each, over (resources x candidates) matrices
gathered in one indexing, so the numpy calls per Score do not grow with the
resources.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from berth.framework.model import (
    NON_ZERO_DEFAULTS,
    NodeInfo,
    PodInfo,
    PodResourcesOptions,
)
from berth.framework.shape_score import go_div, go_div_array
from berth.framework.snapshot import INT_ROWS, NodeBatch
from berth.plugins.noderesources.args import ResourceSpec
from berth.plugins.noderesources.resource_names import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    is_scalar_resource_name,
)

__all__ = [
    "IntArray",
    "ResourceAllocationScorer",
    "ResourceColumns",
    "ScoreFunctions",
    "WeightedMean",
    "presence",
]

IntArray = npt.NDArray[np.int64]
# Per configured resource: (requested, allocatable) over the candidates, or
# None when the resource is left out of the score for every candidate.
ResourceColumns = Sequence[tuple[IntArray, IntArray] | None]


@dataclass(frozen=True, slots=True)
class ScoreFunctions:
    """A scoring strategy in its two forms.

    ``one(requested, allocatable)``: per configured resource, with
    allocatable 0 meaning "not scored on this node".
    ``many(columns, n)``: the same over n candidates.
    ``stacked(requested, allocatable)``: ``many`` over (k, n) matrices, a
    row per resource, every allocatable non-zero; None where it cannot
    answer (``many`` then does).
    """

    one: Callable[[Sequence[int], Sequence[int]], int]
    many: Callable[[ResourceColumns, int], IntArray]
    stacked: Callable[[IntArray, IntArray], IntArray | None] | None = None


class WeightedMean:
    """Upstream's per-node weighted mean of resource scores,
    ``sum(score * weight) / sum(weight)`` over the resources a node has
    (allocatable != 0), in int64 division; 0 for a node with none.

    Resources every candidate has add a constant to the divisor, so the common
    case needs no per-node weight column.
    """

    __slots__ = ("_const_weight", "_n", "_non_negative", "_total", "_weights")

    def __init__(self, n: int) -> None:
        self._n = n
        self._total = np.zeros(n, dtype=np.int64)
        self._weights: IntArray | None = None
        self._const_weight = 0
        self._non_negative = True

    def add(self, score: IntArray, weight: int, has: npt.NDArray[np.bool_] | None) -> None:
        """Add one resource's scores; ``has`` marks the nodes that have the
        resource (None: all of them). ``score`` may be overwritten."""
        if has is None:
            if weight != 1:
                score *= weight
            self._total += score
            self._const_weight += weight
            return
        per_node = has * weight
        score *= per_node
        self._total += score
        if self._weights is None:
            self._weights = per_node
        else:
            self._weights += per_node

    def mark_signed(self) -> None:
        """Some score may be negative: divide like Go, not like numpy."""
        self._non_negative = False

    def result(self) -> IntArray:
        if self._weights is None:
            if self._const_weight == 0:
                return np.zeros(self._n, dtype=np.int64)
            divisor: IntArray | int = self._const_weight
        else:
            divisor = self._weights + self._const_weight
            np.maximum(divisor, 1, out=divisor)  # no resource: total is 0 anyway
        if self._non_negative:
            # Non-negative by positive: floor division is Go's division.
            out: IntArray = self._total // divisor
            return out
        return go_div_array(self._total, np.broadcast_to(divisor, self._total.shape))


def presence(alloc: IntArray) -> npt.NDArray[np.bool_] | Literal[False] | None:
    """Which nodes have a resource: None when all do, False when none does,
    else the mask of nodes with allocatable != 0."""
    present = int(np.count_nonzero(alloc))
    if present == alloc.size:
        return None
    if present == 0:
        return False
    mask: npt.NDArray[np.bool_] = alloc != 0
    return mask


_CPU, _MEMORY, _EPHEMERAL, _SCALAR = range(4)
_KINDS = {CPU: _CPU, MEMORY: _MEMORY, EPHEMERAL_STORAGE: _EPHEMERAL}


def weighted_mean_scorer(
    weights: Sequence[int],
    per_resource: Callable[[int, int], int],
    per_resource_columns: Callable[[IntArray, IntArray], tuple[IntArray, bool]],
) -> ScoreFunctions:
    """The weighted mean over resources that leastResourceScorer and
    mostResourceScorer share: a resource the node has 0 of is left out of the
    mean; the mean is int64 division. ``per_resource`` scores one resource on
    one node; ``per_resource_columns`` does the same over columns and says
    whether every score is >= 0."""
    weights = tuple(weights)

    def one(requested: Sequence[int], allocatable: Sequence[int]) -> int:
        node_score = weight_sum = 0
        for req, alloc, weight in zip(requested, allocatable, weights, strict=True):
            if alloc == 0:
                continue
            node_score += per_resource(req, alloc) * weight
            weight_sum += weight
        return 0 if weight_sum == 0 else go_div(node_score, weight_sum)

    def many(columns: ResourceColumns, n: int) -> IntArray:
        mean = WeightedMean(n)
        for col, weight in zip(columns, weights, strict=True):
            if col is None:
                continue
            req, alloc = col
            has = presence(alloc)
            if has is False:
                continue
            score, non_negative = per_resource_columns(req, alloc)
            if not non_negative:
                mean.mark_signed()
            mean.add(score, weight, has)
        return mean.result()

    return ScoreFunctions(one, many)


class ResourceAllocationScorer:
    """Gathers per-resource (requested, allocatable) amounts and hands them
    to a strategy."""

    __slots__ = (
        "_defaults",
        "_kinds",
        "_rows",
        "_scalar",
        "functions",
        "request_options",
        "resources",
        "strategy",
        "use_requested",
    )

    def __init__(
        self,
        strategy: str,
        resources: Sequence[ResourceSpec],
        functions: ScoreFunctions,
        use_requested: bool = False,
        *,
        enable_pod_level_resources: bool = False,
        enable_in_place_pod_vertical_scaling: bool = False,
        enable_in_place_pod_level_resources_vertical_scaling: bool = False,
    ) -> None:
        """``enable_*`` are the scorer's feature flags of the same names.
        Upstream sets them from the feature gates for BalancedAllocation
        (all on at v1.36) but not for NodeResourcesFit, whose
        nodeResourceStrategyTypeMap leaves them false: Fit scores the pod by
        its containers alone."""
        if not resources:
            # resource_allocation.go, score: "resources not found".
            raise ValueError("a resource allocation score needs at least one resource")
        self.strategy = strategy
        self.resources = tuple(resources)
        self.functions = functions
        # False: CPU and memory count requests with upstream's non-zero
        # defaults (100m, 200Mi) for containers that request none.
        self.use_requested = use_requested
        # calculatePodResourceRequest's PodResourcesOptions.
        self.request_options = PodResourcesOptions(
            use_status_resources=enable_in_place_pod_vertical_scaling,
            in_place_pod_level_resources_vertical_scaling=(
                enable_in_place_pod_level_resources_vertical_scaling
            ),
            skip_pod_level_resources=not enable_pod_level_resources,
            non_missing_container_requests=() if use_requested else NON_ZERO_DEFAULTS,
        )
        self._kinds = tuple(_KINDS.get(r.name, _SCALAR) for r in self.resources)
        # For a plain pod: True when the options count upstream's non-zero
        # defaults, False when they count none, None when some other set
        # (then the options' own computation serves).
        nm = self.request_options.non_missing_container_requests
        self._defaults = None if nm not in ((), NON_ZERO_DEFAULTS) else bool(nm)
        self._scalar = tuple(is_scalar_resource_name(r.name) for r in self.resources)
        # The rows of NodeColumns.ints to gather, the resources' requested
        # amounts then their allocatable, when every resource has columns.
        self._rows: npt.NDArray[np.intp] | None = None
        if _SCALAR not in self._kinds:
            used = {
                _CPU: "req_cpu" if use_requested else "nz_cpu",
                _MEMORY: "req_mem" if use_requested else "nz_mem",
                _EPHEMERAL: "req_eph",
            }
            alloc = {_CPU: "alloc_cpu", _MEMORY: "alloc_mem", _EPHEMERAL: "alloc_eph"}
            names = [used[k] for k in self._kinds] + [alloc[k] for k in self._kinds]
            self._rows = np.array([INT_ROWS[name] for name in names], dtype=np.intp)[:, None]

    # -- the pod ----------------------------------------------------------

    def pod_request(self, pod: PodInfo, resource: str) -> int:
        """calculatePodResourceRequest: the pod's effective request of one
        resource (init containers, sidecars and overhead included; pod-level
        requests and resize status as the scorer's flags say)."""
        requests = pod.requests_with(self.request_options)
        kind = _KINDS.get(resource, _SCALAR)
        if kind == _CPU:
            return requests.milli_cpu
        if kind == _MEMORY:
            return requests.memory
        if kind == _EPHEMERAL:
            return requests.ephemeral_storage
        return requests.scalar.get(resource, 0)

    def pod_requests(self, pod: PodInfo) -> list[int]:
        """calculatePodResourceRequestList, in the order of ``resources``."""
        summed = pod.resource
        if summed.plain and self._defaults is not None:
            # The containers' sums NodeInfo keeps are the requests under any
            # options (see PodResource.plain): no second pass over them.
            requests = summed.resource
            cpu, memory = (
                (summed.non0_cpu, summed.non0_mem)
                if self._defaults
                else (requests.milli_cpu, requests.memory)
            )
        else:
            requests = pod.requests_with(self.request_options)
            cpu, memory = requests.milli_cpu, requests.memory
        out: list[int] = []
        for kind, spec in zip(self._kinds, self.resources, strict=True):
            if kind == _CPU:
                out.append(cpu)
            elif kind == _MEMORY:
                out.append(memory)
            elif kind == _EPHEMERAL:
                out.append(requests.ephemeral_storage)
            else:
                out.append(requests.scalar.get(spec.name, 0))
        return out

    # -- one node ---------------------------------------------------------

    def allocatable_requested(
        self, node: NodeInfo, position: int, pod_request: int
    ) -> tuple[int, int]:
        """calculateResourceAllocatableRequest for ``resources[position]``:
        (allocatable, requested with the pod). (0, 0) leaves it unscored."""
        if pod_request == 0 and self._scalar[position]:
            # An extended resource the pod does not ask for is not scored.
            return 0, 0
        kind = self._kinds[position]
        alloc = node.allocatable
        if kind == _CPU:
            used = node.requested.milli_cpu if self.use_requested else node.non_zero_requested[0]
            return alloc.milli_cpu, used + pod_request
        if kind == _MEMORY:
            used = node.requested.memory if self.use_requested else node.non_zero_requested[1]
            return alloc.memory, used + pod_request
        if kind == _EPHEMERAL:
            return alloc.ephemeral_storage, node.requested.ephemeral_storage + pod_request
        name = self.resources[position].name
        if name in alloc.scalar:
            return alloc.scalar[name], node.requested.scalar.get(name, 0) + pod_request
        return 0, 0

    def score_node(self, node: NodeInfo, pod_requests: Sequence[int]) -> int:
        """resourceAllocationScorer.score for one node."""
        k = len(self.resources)
        requested = [0] * k
        allocatable = [0] * k
        for i in range(k):
            alloc, req = self.allocatable_requested(node, i, pod_requests[i])
            if alloc == 0:
                continue
            allocatable[i] = alloc
            requested[i] = req
        return self.functions.one(requested, allocatable)

    # -- every candidate ----------------------------------------------------

    def columns(
        self, nodes: NodeBatch, pod_requests: Sequence[int]
    ) -> list[tuple[IntArray, IntArray] | None]:
        """(requested, allocatable) columns per resource over ``nodes``."""
        cols = nodes.columns
        idx = nodes.idx
        out: list[tuple[IntArray, IntArray] | None] = []
        for i, spec in enumerate(self.resources):
            pod_request = pod_requests[i]
            if pod_request == 0 and self._scalar[i]:
                out.append(None)
                continue
            kind = self._kinds[i]
            if kind == _CPU:
                used_col = cols.req_cpu if self.use_requested else cols.nz_cpu
                out.append((used_col[idx] + pod_request, cols.alloc_cpu[idx]))
            elif kind == _MEMORY:
                used_col = cols.req_mem if self.use_requested else cols.nz_mem
                out.append((used_col[idx] + pod_request, cols.alloc_mem[idx]))
            elif kind == _EPHEMERAL:
                out.append((cols.req_eph[idx] + pod_request, cols.alloc_eph[idx]))
            else:
                # No column: no node has this resource, so none scores it.
                # Nodes without it hold 0 allocatable and are left out below.
                scalar = cols.scalar.get(spec.name)
                if scalar is None:
                    out.append(None)
                else:
                    alloc_col, req_col = scalar
                    out.append((req_col[idx] + pod_request, alloc_col[idx]))
        return out

    def stacked(self, nodes: NodeBatch) -> tuple[IntArray, IntArray] | None:
        """The candidates' requested amounts without the pod and their
        allocatable, as (k, n) matrices with a row per resource (fresh
        arrays), when every resource has columns of its own and every
        candidate has a non-zero allocatable of each; else None (``columns``
        then serves)."""
        rows = self._rows
        if rows is None:
            return None
        k = len(self.resources)
        gathered = nodes.columns.ints[rows, nodes.idx]
        alloc = gathered[k:]
        if np.count_nonzero(alloc) != alloc.size:
            return None
        return gathered[:k], alloc

    def score_batch(self, nodes: NodeBatch, pod_requests: Sequence[int]) -> IntArray:
        """resourceAllocationScorer.score for every candidate at once."""
        if len(nodes) == 0:
            return np.zeros(0, dtype=np.int64)
        stacked = self.functions.stacked
        if stacked is not None:
            matrices = self.stacked(nodes)
            if matrices is not None:
                requested, alloc = matrices
                requested += np.array(pod_requests, dtype=np.int64).reshape(-1, 1)
                scores = stacked(requested, alloc)
                if scores is not None:
                    return scores
        return self.functions.many(self.columns(nodes, pod_requests), len(nodes))
