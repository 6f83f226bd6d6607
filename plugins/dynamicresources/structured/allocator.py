"""The structured parameters allocator of k8s.io/dynamic-resource-allocation
v0.36.3 (structured/allocator.go), over decoded JSON.

Upstream keeps three implementations and NewAllocator picks the most stable
one whose supported features cover the enabled ones. v1.36's default feature
gates enable DRAAdminAccess, DRAPrioritizedList (GA), DRAPartitionableDevices,
DRADeviceTaints, DRAConsumableCapacity, DRADeviceBindingConditions and
DRAResourceClaimDeviceStatus (beta, on) but not DRAListTypeAttributes (alpha),
so the pick is "incubating" (structured/internal/incubating/
allocator_incubating.go): "stable" lacks binding conditions and consumable
capacity, "experimental" is only needed for list-type attributes. This is
that implementation: the same exhaustive depth-first search in the same
order, the same backtracking and the same errors.

An ``Allocator`` is built once per scheduling cycle from what does not depend
on the node or the pod (classes, slices decoded once, CEL answers cached per
selector and device, pools' available counters); ``allocate`` is then called
per candidate node. Per-call state lives in ``_Run``.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from berth.framework.units import QuantityError, parse_quantity
from berth.plugins.dynamicresources.structured.capacity import (
    Q,
    RequestOverCapacityError,
    consumed_from_request,
    fits_capacity,
)
from berth.plugins.dynamicresources.structured.cel import (
    CelCache,
    CelCompileError,
    CelEvaluationError,
    CompiledSelector,
)
from berth.plugins.dynamicresources.structured.constraints import (
    Constraint,
    DistinctAttribute,
    MatchAttribute,
)
from berth.plugins.dynamicresources.structured.pools import (
    DeviceRecord,
    NodeSelectorError,
    Pool,
    PoolID,
    SliceRecord,
    gather_pools,
    node_matches,
    slice_record,
)
from berth.plugins.dynamicresources.structured.state import (
    AllocatedState,
    DeviceID,
    add_capacity,
    device_id_text,
)

__all__ = [
    "ALLOCATION_RESULTS_MAX_SIZE",
    "AllocationError",
    "AllocationTimeoutError",
    "Allocator",
    "Features",
    "NodeAllocationError",
]

ALLOCATION_RESULTS_MAX_SIZE: Final = 32
"""resourceapi.AllocationResultsMaxSize: devices per claim."""

_MODE_EXACT: Final = "ExactCount"
_MODE_ALL: Final = "All"
_NO_START: Final = (0, 0, 0)


class AllocationError(Exception):
    """Upstream's Allocate returned an error: invalid input (an unknown
    DeviceClass, a CEL error, a pool being updated for an "All" request...)
    that no other node avoids, so the scheduling attempt reports it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NodeAllocationError(AllocationError):
    """An error that concerns this node only (upstream's
    ErrFailedAllocationOnNode, "invalid resource pools were encountered"):
    the node is unschedulable, other nodes may still fit."""


class AllocationTimeoutError(AllocationError):
    """The deadline passed during the search (upstream's context
    cancellation, "filter operation aborted")."""


@dataclass(frozen=True, slots=True)
class Features:
    """internal.Features; the defaults are v1.36's default feature gates."""

    admin_access: bool = True
    consumable_capacity: bool = True
    device_binding_and_status: bool = True
    device_taints: bool = True
    list_type_attributes: bool = False
    partitionable_devices: bool = True
    prioritized_list: bool = True


class _MaxSizeExceeded(Exception):
    """errAllocationResultMaxSizeExceeded: allocating would exceed 32
    devices in a claim; callers backtrack further (and try other
    subrequests)."""


def _kobj(obj: Mapping[str, Any]) -> str:
    """klog.KObj: namespace/name, or name without a namespace."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = str(meta.get("name", ""))
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else name


@dataclass(frozen=True, slots=True)
class _Class:
    name: str
    selectors: tuple[str | None, ...]
    config: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True)
class _Request:
    """requestAccessor: an exact request or a subrequest, decoded."""

    name: str
    class_name: str
    mode: str
    count: int
    admin_access: bool
    has_admin_access: bool
    selectors: tuple[Any, ...]
    expressions: tuple[str, ...]
    tolerations: tuple[Mapping[str, Any], ...]
    tolerations_raw: list[Any] | None
    capacity_requests: Mapping[str, Q] | None
    has_capacity: bool


@dataclass(frozen=True, slots=True)
class _ClaimRequest:
    """One DeviceRequest: its own exact request, or its subrequests."""

    name: str
    exact: _Request | None
    first_available: tuple[_Request, ...]


@dataclass(frozen=True, slots=True)
class _Claim:
    raw: Mapping[str, Any]
    kobj: str
    name: str
    requests: tuple[_ClaimRequest, ...]
    constraints: tuple[Mapping[str, Any], ...]
    config: tuple[Mapping[str, Any], ...]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _decode_request(raw: Mapping[str, Any], claim_kobj: str) -> _Request:
    name = str(raw.get("name", ""))
    capacity = raw.get("capacity")
    requests: dict[str, Q] | None = None
    if isinstance(capacity, Mapping):
        reqs = capacity.get("requests")
        if isinstance(reqs, Mapping):
            requests = {}
            for cap_name, text in reqs.items():
                try:
                    requests[str(cap_name)] = Q(parse_quantity(str(text)).nanos, str(text))
                except QuantityError as e:
                    raise AllocationError(
                        f"claim {claim_kobj}, request {name}: capacity {cap_name}: {e}"
                    ) from None
    tolerations = raw.get("tolerations")
    selectors = tuple(_list(raw.get("selectors")))
    expressions = []
    for sel in selectors:
        cel = sel.get("cel") if isinstance(sel, Mapping) else None
        if isinstance(cel, Mapping):
            expressions.append(str(cel.get("expression", "")))
    count = raw.get("count")
    admin = raw.get("adminAccess")
    return _Request(
        name=name,
        class_name=str(raw.get("deviceClassName") or ""),
        mode=str(raw.get("allocationMode") or ""),
        count=count if isinstance(count, int) and not isinstance(count, bool) else 0,
        admin_access=admin is True,
        has_admin_access=admin is not None,
        selectors=selectors,
        expressions=tuple(expressions),
        tolerations=tuple(t for t in _list(tolerations) if isinstance(t, Mapping)),
        tolerations_raw=tolerations if isinstance(tolerations, list) and tolerations else None,
        capacity_requests=requests,
        has_capacity=capacity is not None,
    )


def _decode_claim(raw: Mapping[str, Any]) -> _Claim:
    kobj = _kobj(raw)
    spec = raw.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    devices = spec.get("devices")
    devices = devices if isinstance(devices, Mapping) else {}
    requests = []
    for r in _list(devices.get("requests")):
        if not isinstance(r, Mapping):
            continue
        name = str(r.get("name", ""))
        subs = tuple(
            _decode_request(s, kobj)
            for s in _list(r.get("firstAvailable"))
            if isinstance(s, Mapping)
        )
        exact = r.get("exactly")
        exact_req = None
        if not subs:
            # A request with neither exactly nor firstAvailable is a request
            # type this version does not know: validation reports it as
            # having no device class.
            exact_req = _decode_request(
                {**(exact if isinstance(exact, Mapping) else {}), "name": name}, kobj
            )
        requests.append(_ClaimRequest(name, exact_req, subs))
    meta = raw.get("metadata")
    return _Claim(
        raw=raw,
        kobj=kobj,
        name=str(meta.get("name", "")) if isinstance(meta, Mapping) else "",
        requests=tuple(requests),
        constraints=tuple(c for c in _list(devices.get("constraints")) if isinstance(c, Mapping)),
        config=tuple(c for c in _list(devices.get("config")) if isinstance(c, Mapping)),
    )


def _decode_class(name: str, raw: Mapping[str, Any]) -> _Class:
    spec = raw.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    selectors: list[str | None] = []
    for s in _list(spec.get("selectors")):
        cel = s.get("cel") if isinstance(s, Mapping) else None
        expr = cel.get("expression") if isinstance(cel, Mapping) else None
        selectors.append(str(expr) if expr is not None else None)
    return _Class(
        name=name,
        selectors=tuple(selectors),
        config=tuple(c for c in _list(spec.get("config")) if isinstance(c, Mapping)),
    )


def _taint_prevents_allocation(device: DeviceRecord, request: _Request) -> bool:
    """taintPreventsAllocation: a NoSchedule or NoExecute taint that no
    toleration of the request tolerates (other effects, None included, do
    not matter)."""
    for taint in device.taints:
        effect = taint.get("effect")
        if effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in request.tolerations):
            return True
    return False


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """resourceclaim.ToleratesTaint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != (taint.get("key") or ""):
        return False
    operator = toleration.get("operator") or ""
    if operator in ("", "Equal"):
        return bool((toleration.get("value") or "") == (taint.get("value") or ""))
    return operator == "Exists"


class Allocator:
    """structured.Allocator for one scheduling cycle: ``allocate`` per
    candidate node. Thread-safe: per-call state is the call's own; the shared
    caches only ever gain entries that every thread would compute alike.

    Slices and claims are decoded once per JSON object (slices across
    Allocators, see pools.slice_record): a caller hands over objects it no
    longer changes in place, as the snapshot's decoded objects are."""

    def __init__(
        self,
        features: Features,
        allocated: AllocatedState,
        classes: Mapping[str, Mapping[str, Any]],
        slices: Sequence[Mapping[str, Any]],
        cel: CelCache,
    ) -> None:
        if features.list_type_attributes:
            raise ValueError(
                "DRAListTypeAttributes is not supported: Berth ports upstream's "
                "incubating allocator, which v1.36's default feature gates select"
            )
        self.features = features
        self.allocated = allocated
        self._raw_classes = classes
        self._classes: dict[str, _Class] = {}
        self._cel = cel
        records = [slice_record(s) for s in slices]
        # NewAllocator: slices of one node, and those every node may see
        # (no node name, or shared counters).
        self._slices_on_node: dict[str, list[SliceRecord]] = {}
        self._slices_shared: list[SliceRecord] = []
        self._slices_by_pool: dict[PoolID, list[SliceRecord]] = {}
        for s in records:
            if not s.node_name or s.shared_counters:
                self._slices_shared.append(s)
            else:
                self._slices_on_node.setdefault(s.node_name, []).append(s)
            self._slices_by_pool.setdefault(s.pool_id, []).append(s)
        self._pools: dict[tuple[str, tuple[tuple[str, str], ...]], list[Pool]] = {}
        self._available_counters: dict[PoolID, dict[str, dict[str, int]]] = {}
        # Devices with a share (IsDeviceAllocated's second test), as a set.
        self._shared_devices: set[DeviceID] = {
            (s[0], s[1], s[2]) for s in allocated.allocated_shared_device_ids
        }
        self._compiled: dict[str, CompiledSelector] = {}
        self._claims: dict[int, tuple[Mapping[str, Any], _Claim]] = {}
        self.num_allocate_one = 0
        """allocateOne invocations over all calls (upstream's Stats)."""

    # -- what every call shares ----------------------------------------------------

    def _class(self, name: str) -> _Class | None:
        found = self._classes.get(name)
        if found is None:
            raw = self._raw_classes.get(name)
            if raw is None:
                return None
            found = self._classes[name] = _decode_class(name, raw)
        return found

    def _claim(self, raw: Mapping[str, Any]) -> _Claim:
        # Keyed by identity; the entry keeps the object alive, so the id is
        # not reused while cached.
        cached = self._claims.get(id(raw))
        if cached is not None and cached[0] is raw:
            return cached[1]
        claim = _decode_claim(raw)
        self._claims[id(raw)] = (raw, claim)
        return claim

    def _pools_for(self, node_name: str, labels: Mapping[str, str]) -> list[Pool]:
        key = (node_name, tuple(sorted(labels.items())))
        pools = self._pools.get(key)
        if pools is None:
            slices_for_node = self._slices_on_node.get(node_name, []) + self._slices_shared
            try:
                pools = gather_pools(
                    node_name,
                    labels,
                    slices_for_node,
                    self._slices_by_pool,
                    self.features.partitionable_devices,
                )
            except NodeSelectorError as e:
                raise AllocationError(f"gather pool information: {e}") from None
            self._pools[key] = pools
        return pools

    def available_counters(self, pool: Pool) -> dict[str, dict[str, int]]:
        """The pool's counters minus what its allocated devices consume
        (checkAvailableCounters' cached part; the same on every node). May be
        negative: then nothing more fits."""
        found = self._available_counters.get(pool.pool_id)
        if found is not None:
            return found
        available = {name: dict(counters) for name, counters in pool.counter_sets.items()}
        for slices in (pool.device_slices, pool.device_slices_not_targeting_node):
            for s in slices:
                for d in s.devices:
                    if not d.consumes_counters:
                        continue
                    device_id = d.id
                    if not (
                        device_id in self.allocated.allocated_devices
                        or device_id in self._shared_devices
                        or device_id in self.allocated.aggregated_capacity
                    ):
                        # internal.IsDeviceAllocated: not allocated, consumes
                        # nothing.
                        continue
                    for set_name, counters in d.consumes_counters:
                        counter_set = available.get(set_name)
                        if counter_set is None:
                            continue
                        for name, value in counters.items():
                            if name in counter_set:
                                counter_set[name] -= value
        self._available_counters[pool.pool_id] = available
        return available

    def compiled(self, expression: str) -> CompiledSelector:
        found = self._compiled.get(expression)
        if found is None:
            found = self._compiled[expression] = self._cel.compile(expression)
        return found

    def cel_matches(
        self, expression: str, compiled: CompiledSelector, device: DeviceRecord, driver: str
    ) -> bool | str:
        """The selector's answer for the device, or the runtime error's
        message; kept on the device record (shared with later cycles)."""
        found = device.cel_answers.get(expression)
        if found is None:
            try:
                found = compiled.matches(driver, device.raw)
            except CelEvaluationError as e:
                found = e.message
            device.cel_answers[expression] = found
        return found

    # -- the API -------------------------------------------------------------------

    def allocate(
        self,
        node_name: str,
        node_labels: Mapping[str, str],
        claims: Sequence[Mapping[str, Any]],
        *,
        deadline: float | None = None,
    ) -> list[dict[str, Any]] | None:
        """Allocate: one AllocationResult (v1 JSON) per claim, in order, for
        the node; None when the claims do not fit there (also while a pool
        they could use is being updated). Raises AllocationError where
        upstream returns an error (NodeAllocationError when only this node is
        concerned), AllocationTimeoutError once ``deadline``
        (time.monotonic()) has passed."""
        run = _Run(self, node_name, node_labels, [self._claim(c) for c in claims], deadline)
        return run.allocate()


@dataclass(slots=True)
class _RequestData:
    """requestData: one per request without subrequests and one per
    subrequest."""

    request: _Request
    parent: _ClaimRequest | None
    cls: _Class | None = None
    num_devices: int = 0
    selected_sub_request_index: int = 0
    all_devices: list[_Candidate] | None = None
    selectable: dict[DeviceRecord, bool] = field(default_factory=dict)

    def request_name(self) -> str:
        if self.parent is not None:
            return f"{self.parent.name}/{self.request.name}"
        return self.request.name


@dataclass(frozen=True, slots=True)
class _Candidate:
    """deviceWithID."""

    device_id: DeviceID
    device: DeviceRecord
    slice: SliceRecord
    pool: Pool


@dataclass(slots=True)
class _DeviceResult:
    """internalDeviceResult."""

    request: _Request
    request_name: str
    candidate: _Candidate
    share_id: str | None
    consumed: dict[str, Q] | None


class _Run:
    """The state of one allocate call (upstream's unexported allocator)."""

    def __init__(
        self,
        owner: Allocator,
        node_name: str,
        labels: Mapping[str, str],
        claims: list[_Claim],
        deadline: float | None,
    ) -> None:
        self.a = owner
        self.features = owner.features
        self.allocated = owner.allocated
        self.node_name = node_name
        self.labels = labels
        self.claims = claims
        self.deadline = deadline
        self.pools: list[Pool] = []
        self.request_data: dict[tuple[int, int, int], _RequestData] = {}
        self.constraints: list[list[Constraint]] = [[] for _ in claims]
        self.consumed_counters: dict[PoolID, dict[str, dict[str, int]]] = {}
        self.allocating_devices: dict[DeviceID, set[int]] = {}
        self.allocating_capacity: dict[DeviceID, dict[str, int]] = {}
        self.results: list[list[_DeviceResult]] = [[] for _ in claims]

    # -- Allocate ----------------------------------------------------------------------

    def allocate(self) -> list[dict[str, Any]] | None:
        f = self.features
        self.pools = self.a._pools_for(self.node_name, self.labels)
        min_total = 0
        for ci, claim in enumerate(self.claims):
            min_per_claim = 0
            for ri, request in enumerate(claim.requests):
                if not f.prioritized_list and request.first_available:
                    raise AllocationError(
                        f"claim {claim.kobj}, request {request.name}: has subrequests, "
                        "but the DRAPrioritizedList feature is disabled"
                    )
                if not f.consumable_capacity:
                    if request.exact is not None and request.exact.has_capacity:
                        raise AllocationError(
                            f"claim {claim.kobj}, request {request.name}: has capacity requests, "
                            "but the DRAConsumableCapacity feature is disabled"
                        )
                    for sub in request.first_available:
                        if sub.has_capacity:
                            raise AllocationError(
                                f"claim {claim.kobj}, subrequest {sub.name}: has capacity "
                                "requests, but the DRAConsumableCapacity feature is disabled"
                            )
                if request.first_available:
                    least = sys.maxsize
                    for si, sub in enumerate(request.first_available):
                        data = self._validate(claim, ci, ri, si, sub, request)
                        self.request_data[(ci, ri, si)] = data
                        least = min(least, data.num_devices)
                    min_per_claim += least
                else:
                    assert request.exact is not None
                    data = self._validate(claim, ci, ri, 0, request.exact, None)
                    self.request_data[(ci, ri, 0)] = data
                    min_per_claim += data.num_devices
            if min_per_claim > ALLOCATION_RESULTS_MAX_SIZE:
                raise AllocationError(
                    f"claim {claim.kobj}: number of requested devices {min_per_claim} "
                    f"exceeds the claim limit of {ALLOCATION_RESULTS_MAX_SIZE}"
                )
            for i, c in enumerate(claim.constraints):
                names = frozenset(str(n) for n in _list(c.get("requests")))
                if c.get("matchAttribute") is not None:
                    self.constraints[ci].append(MatchAttribute(names, str(c["matchAttribute"])))
                elif c.get("distinctAttribute") is not None:
                    self.constraints[ci].append(
                        DistinctAttribute(names, str(c["distinctAttribute"]))
                    )
                else:
                    raise AllocationError(
                        f"claim {claim.kobj}, constraint #{i}: empty constraint "
                        "(unsupported constraint type?)"
                    )
            min_total += min_per_claim

        # The search recurses once per device, request and claim.
        needed = min_total + 4 * sum(len(c.requests) + 1 for c in self.claims) + 200
        if sys.getrecursionlimit() < needed + 1000:
            sys.setrecursionlimit(needed + 1000)
        try:
            done = self._allocate_one(0, 0, 0, 0, False, _NO_START)
        except _MaxSizeExceeded:
            # Upstream's Allocate returns errAllocationResultMaxSizeExceeded
            # when it reaches the top (the per-claim minimum checked above
            # should keep it from getting there).
            raise AllocationError("allocation max size exceeded") from None
        if not done:
            if any(p.invalid for p in self.pools):
                raise NodeAllocationError("invalid resource pools were encountered")
            return None
        return [self._result(ci, claim) for ci, claim in enumerate(self.claims)]

    def _validate(
        self,
        claim: _Claim,
        ci: int,
        ri: int,
        si: int,
        request: _Request,
        parent: _ClaimRequest | None,
    ) -> _RequestData:
        """validateDeviceRequest."""
        data = _RequestData(request, parent)
        for i, selector in enumerate(request.selectors):
            if not isinstance(selector, Mapping) or not isinstance(selector.get("cel"), Mapping):
                raise AllocationError(
                    f"claim {claim.kobj}, request {request.name}, selector #{i}: "
                    "CEL expression empty (unsupported selector type?)"
                )
        if not self.features.admin_access and request.has_admin_access:
            raise AllocationError(
                f"claim {claim.kobj}, request {request.name}: admin access is requested, "
                "but the feature is disabled"
            )
        if not request.class_name:
            raise AllocationError(
                f"claim {claim.kobj}, request {request.name}: missing device class name "
                "(unsupported request type?)"
            )
        cls = self.a._class(request.class_name)
        if cls is None:
            # The informer lister's NotFound error, as the scheduler sees it.
            raise AllocationError(
                f"claim {claim.kobj}, request {request.name}: could not retrieve device class "
                f'{request.class_name}: deviceclass.resource.k8s.io "{request.class_name}" '
                "not found"
            )
        data.cls = cls
        if request.mode == _MODE_EXACT:
            data.num_devices = request.count
        elif request.mode == _MODE_ALL:
            devices: list[_Candidate] = []
            for pool in self.pools:
                if pool.incomplete:
                    raise AllocationError(
                        f"claim {claim.kobj}, request {request.name}: asks for all devices, "
                        f"but resource pool {pool.id_text} is currently being updated"
                    )
                if pool.invalid:
                    raise AllocationError(
                        f"claim {claim.kobj}, request {request.name}: asks for all devices, "
                        f"but resource pool {pool.id_text} is currently invalid"
                    )
                for s in pool.device_slices:
                    for d in s.devices:
                        device_id = d.id
                        if not self._is_selectable(ci, data, s, d):
                            continue
                        if self.features.consumable_capacity:
                            try:
                                if not self._fits(request, d, device_id):
                                    continue
                            except RequestOverCapacityError:
                                continue
                        devices.append(_Candidate(device_id, d, s, pool))
            data.all_devices = devices
            data.num_devices = len(devices)
        else:
            raise AllocationError(
                f"claim {claim.kobj}, request {request.name}: unsupported count mode {request.mode}"
            )
        return data

    # -- the search --------------------------------------------------------------------

    def _allocate_one(
        self, ci: int, ri: int, si: int, di: int, allocate_sub: bool, start: tuple[int, int, int]
    ) -> bool:
        """allocateOne: find devices for claim ci, request ri (subrequest si),
        device di onwards and everything after; True when all claims got
        theirs. ``start`` is where the search for the next device of the same
        request continues, so that each combination is tried once."""
        self.a.num_allocate_one += 1
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise AllocationTimeoutError("filter operation aborted: context deadline exceeded")
        if ci >= len(self.claims):
            return True
        claim = self.claims[ci]
        if ri >= len(claim.requests):
            try:
                return self._allocate_one(ci + 1, 0, 0, 0, False, _NO_START)
            except _MaxSizeExceeded:
                # Not fatal: another allocation of an earlier claim may let
                # this one use a subrequest with fewer devices.
                return False

        data = self.request_data[(ci, ri, si)]
        if not allocate_sub and data.parent is not None:
            # One subrequest is enough: try them in order.
            all_exceeded = True
            sub = 0
            while (ci, ri, sub) in self.request_data:
                try:
                    success = self._allocate_one(ci, ri, sub, di, True, _NO_START)
                except _MaxSizeExceeded:
                    sub += 1
                    continue
                all_exceeded = False
                if success:
                    data.selected_sub_request_index = sub
                    return True
                sub += 1
            if all_exceeded:
                raise _MaxSizeExceeded
            return False

        request = data.request
        do_all = request.mode == _MODE_ALL
        if do_all and not data.all_devices:
            return False
        if di >= data.num_devices:
            return self._allocate_one(ci, ri + 1, 0, 0, False, _NO_START)
        if len(self.results[ci]) + data.num_devices - di > ALLOCATION_RESULTS_MAX_SIZE:
            raise _MaxSizeExceeded

        if do_all:
            # The devices are known; the order does not matter, so only the
            # next one is tried.
            assert data.all_devices is not None
            undo = self._allocate_device(ci, data, data.all_devices[di], must=True)
            if undo is None:
                return False
            try:
                done = self._allocate_one(ci, ri, si, di + 1, allocate_sub, _NO_START)
            except _MaxSizeExceeded:
                undo()
                raise
            if not done:
                undo()
            return done

        p0, s0, d0 = start
        pools = self.pools
        admin = request.admin_access
        allocated = self.allocated.allocated_devices
        allocating = self.allocating_devices
        selectable = data.selectable
        for pi in range(p0, len(pools)):
            pool = pools[pi]
            if pool.incomplete or pool.invalid:
                continue
            slices = pool.device_slices
            for sli in range(s0 if pi == p0 else 0, len(slices)):
                s = slices[sli]
                devices = s.devices
                for dvi in range(d0 if pi == p0 and sli == s0 else 0, len(devices)):
                    d = devices[dvi]
                    device_id = d.id
                    # deviceInUse, inline: this loop is the hot path.
                    if admin:
                        if ci in allocating.get(device_id, ()):
                            continue
                    elif device_id in allocated or allocating.get(device_id):
                        continue
                    found = selectable.get(d)
                    if found is None:
                        found = self._is_selectable(ci, data, s, d)
                    if not found:
                        continue
                    if self.features.consumable_capacity:
                        try:
                            if not self._fits(request, d, device_id):
                                continue
                        except RequestOverCapacityError:
                            continue
                    undo = self._allocate_device(ci, data, _Candidate(device_id, d, s, pool), False)
                    if undo is None:
                        continue
                    try:
                        done = self._allocate_one(
                            ci, ri, si, di + 1, allocate_sub, (pi, sli, dvi + 1)
                        )
                    except _MaxSizeExceeded:
                        undo()
                        raise
                    if done:
                        return True
                    undo()
        return False

    def _in_use(self, device_id: DeviceID) -> bool:
        """deviceInUse."""
        return device_id in self.allocated.allocated_devices or bool(
            self.allocating_devices.get(device_id)
        )

    def _fits(self, request: _Request, device: DeviceRecord, device_id: DeviceID) -> bool:
        """The allocator's CmpRequestOverCapacity."""
        return fits_capacity(
            self.allocated.aggregated_capacity.get(device_id),
            request.capacity_requests,
            device.capacity,
            self.allocating_capacity.get(device_id),
        )

    def _is_selectable(self, ci: int, data: _RequestData, s: SliceRecord, d: DeviceRecord) -> bool:
        """isSelectable: class and request selectors, and per-device node
        selection; the answer is kept per (sub)request (upstream's
        deviceMatchesRequest)."""
        found = data.selectable.get(d)
        if found is not None:
            return found
        if d.broken is not None:
            return False
        if not self.features.device_binding_and_status and d.binding_conditions:
            return False
        claim = self.claims[ci]
        driver = d.id[0]
        match = True
        if data.cls is not None:
            match = self._selectors_match(claim, d, driver, data.cls, data.cls.selectors)
        if match:
            # _validate made sure that every selector is a CEL one.
            match = self._selectors_match(claim, d, driver, None, data.request.expressions)
        if match and s.per_device_node_selection:
            try:
                match = node_matches(
                    self.node_name, self.labels, d.node_name, d.all_nodes, d.node_selector
                )
            except NodeSelectorError as e:
                raise AllocationError(str(e)) from None
        data.selectable[d] = match
        return match

    def _selectors_match(
        self,
        claim: _Claim,
        d: DeviceRecord,
        driver: str,
        cls: _Class | None,
        expressions: Sequence[str | None],
    ) -> bool:
        """selectorsMatch: all selectors must match; errors name the class or
        the claim."""
        where = f"class {cls.name}" if cls is not None else f"claim {claim.kobj}"
        for i, expr in enumerate(expressions):
            if expr is None:
                raise AllocationError(
                    f"{where}: selector #{i}: CEL expression empty (unsupported selector type?)"
                )
            try:
                compiled = self.a.compiled(expr)
            except CelCompileError as e:
                raise AllocationError(
                    f"{where}: selector #{i}: CEL compile error: {e.message}"
                ) from None
            answer = self.a.cel_matches(expr, compiled, d, driver)
            if isinstance(answer, str):
                raise AllocationError(f"{where}: selector #{i}: CEL runtime error: {answer}")
            if not answer:
                return False
        return True

    def _allocate_device(
        self, ci: int, data: _RequestData, c: _Candidate, must: bool
    ) -> Callable[[], None] | None:
        """allocateDevice: checks availability, counters, taints and
        constraints for one selectable candidate and records it as allocated;
        returns how to undo that (None: not allocatable). With ``must`` a
        violated constraint is an error: no other device can take its
        place."""
        f = self.features
        request = data.request
        device_id = c.device_id
        d = c.device
        allow_multi = f.consumable_capacity and d.allow_multiple_allocations is True
        if (
            not allow_multi
            and request.admin_access
            and ci in self.allocating_devices.get(device_id, ())
        ):
            return None
        if not request.admin_access and self._in_use(device_id):
            return None
        if not f.partitionable_devices and d.consumes_counters:
            return None
        skip_counters = allow_multi and (
            device_id in self.allocated.aggregated_capacity or device_id in self.allocating_capacity
        )
        counters_reserved = False
        if not skip_counters and d.consumes_counters:
            if not self._reserve_counters(c):
                return None
            counters_reserved = True

        if data.parent is None:
            base, sub = request.name, ""
        else:
            base, sub = data.parent.name, request.name
        constraints = self.constraints[ci]
        results = self.results[ci]
        previous_len = len(results)
        driver = device_id[0]
        added = 0
        marked = False
        capacity_inserted = False
        capacity_existed = False
        consumed_nanos: dict[str, int] = {}
        result_added = False

        def rollback() -> None:
            # deviceRollbackState / rollbackDevice, in reverse order.
            if result_added:
                del results[previous_len:]
            if capacity_inserted:
                entry = self.allocating_capacity.get(device_id)
                if entry is not None:
                    for name, value in consumed_nanos.items():
                        if name in entry:
                            entry[name] -= value
                    if all(v == 0 for v in entry.values()):
                        del self.allocating_capacity[device_id]
                if capacity_existed and device_id not in self.allocating_capacity:
                    self.allocating_capacity[device_id] = {}
            if marked:
                self.allocating_devices[device_id].discard(ci)
            for i in range(added - 1, -1, -1):
                constraints[i].remove(base, sub, d, driver)
            if counters_reserved:
                self._release_counters(c)

        if f.device_taints and _taint_prevents_allocation(d, request):
            rollback()
            return None
        for constraint in constraints:
            if not constraint.add(base, sub, d, driver):
                rollback()
                if must:
                    raise AllocationError(
                        f"claim {self.claims[ci].kobj}, request {request.name}: cannot add "
                        f"device {device_id_text(device_id)} because a claim constraint "
                        "would not be satisfied"
                    )
                return None
            added += 1

        if not allow_multi:
            self.allocating_devices.setdefault(device_id, set()).add(ci)
            marked = True

        consumed: dict[str, Q] = {}
        share_id = None
        if f.consumable_capacity:
            try:
                ok = self._fits(request, d, device_id)
            except RequestOverCapacityError:
                ok = False
            if not ok:
                rollback()
                return None
            if allow_multi:
                consumed = consumed_from_request(request.capacity_requests, d.capacity)
                share_id = str(uuid.uuid4())
                capacity_existed = device_id in self.allocating_capacity
                consumed_nanos = {name: q.nanos for name, q in consumed.items()}
                add_capacity(self.allocating_capacity.setdefault(device_id, {}), consumed_nanos)
                capacity_inserted = True

        results.append(_DeviceResult(request, data.request_name(), c, share_id, consumed or None))
        result_added = True
        return rollback

    def _reserve_counters(self, c: _Candidate) -> bool:
        """checkAvailableCounters: adds the device's consumption and checks
        every counter of its pool; on a shortfall takes it back."""
        available = self.a.available_counters(c.pool)
        consumed = self.consumed_counters.setdefault(c.pool.pool_id, {})
        for set_name, counters in c.device.consumes_counters:
            consumed_set = consumed.setdefault(set_name, {})
            for name, value in counters.items():
                consumed_set[name] = consumed_set.get(name, 0) + value
        for set_name, counters in available.items():
            consumed_set = consumed.get(set_name, {})
            for name, value in counters.items():
                if value < consumed_set.get(name, 0):
                    self._release_counters(c)
                    return False
        return True

    def _release_counters(self, c: _Candidate) -> None:
        """deallocateCountersForDevice."""
        consumed = self.consumed_counters[c.pool.pool_id]
        for set_name, counters in c.device.consumes_counters:
            consumed_set = consumed.setdefault(set_name, {})
            for name, value in counters.items():
                consumed_set[name] = consumed_set.get(name, 0) - value

    # -- results -----------------------------------------------------------------------

    def _result(self, ci: int, claim: _Claim) -> dict[str, Any]:
        f = self.features
        device_results: list[dict[str, Any]] = []
        for r in self.results[ci]:
            device_id = r.candidate.device_id
            out: dict[str, Any] = {
                "request": r.request_name,
                "driver": device_id[0],
                "pool": device_id[1],
                "device": device_id[2],
            }
            if r.request.admin_access:
                out["adminAccess"] = True
            if r.request.tolerations_raw:
                out["tolerations"] = list(r.request.tolerations_raw)
            if f.device_binding_and_status:
                d = r.candidate.device
                if d.binding_conditions:
                    out["bindingConditions"] = list(d.binding_conditions)
                if d.binding_failure_conditions:
                    out["bindingFailureConditions"] = list(d.binding_failure_conditions)
            if r.share_id is not None:
                out["shareID"] = r.share_id
            if r.consumed:
                out["consumedCapacity"] = {name: q.text for name, q in r.consumed.items()}
            device_results.append(out)

        configs = self._configs(ci, claim)
        devices: dict[str, Any] = {}
        if device_results:
            devices["results"] = device_results
        if configs:
            devices["config"] = configs
        result: dict[str, Any] = {"devices": devices}
        try:
            selector = self._node_selector(self.results[ci])
        except AllocationError as e:
            raise AllocationError(
                f"create NodeSelector for claim {claim.name}: {e.message}"
            ) from None
        if selector is not None:
            result["nodeSelector"] = selector
        return result

    def _configs(self, ci: int, claim: _Claim) -> list[dict[str, Any]]:
        """The class configs (each class once, naming every request that
        used it), then the claim's configs for the requests or chosen
        subrequests they name."""
        configs: list[dict[str, Any]] = []
        class_ranges: dict[str, tuple[int, int]] = {}
        for ri, _ in enumerate(claim.requests):
            data = self.request_data[(ci, ri, 0)]
            if data.parent is not None:
                data = self.request_data[(ci, ri, data.selected_sub_request_index)]
            cls = data.cls
            if cls is None:
                continue
            span = class_ranges.get(cls.name)
            if span is not None:
                for i in range(*span):
                    configs[i]["requests"].append(data.request_name())
                continue
            begin = len(configs)
            for c in cls.config:
                configs.append(
                    {"source": "FromClass", "requests": [data.request_name()], **_device_config(c)}
                )
            class_ranges[cls.name] = (begin, len(configs))
        for c in claim.config:
            names = [str(n) for n in _list(c.get("requests"))]
            if not names:
                configs.append({"source": "FromClaim", **_device_config(c)})
                continue
            for ri, request in enumerate(claim.requests):
                if request.name in names:
                    configs.append(
                        {"source": "FromClaim", "requests": list(names), **_device_config(c)}
                    )
                    continue
                data = self.request_data[(ci, ri, 0)]
                if data.parent is None:
                    continue
                sub = request.first_available[data.selected_sub_request_index]
                if f"{request.name}/{sub.name}" in names:
                    configs.append(
                        {"source": "FromClaim", "requests": list(names), **_device_config(c)}
                    )
        return configs

    def _node_selector(self, results: Sequence[_DeviceResult]) -> dict[str, Any] | None:
        """createNodeSelector: the node itself when some device is local to
        it (or binds to it), else the requirements of the devices' node
        selectors, else None (available everywhere)."""
        fields: list[Mapping[str, Any]] = []
        expressions: list[Mapping[str, Any]] = []
        for r in results:
            s = r.candidate.slice
            d = r.candidate.device
            if s.per_device_node_selection:
                name, selector = d.node_name, d.node_selector
            else:
                name, selector = s.node_name, s.node_selector
            if name or d.binds_to_node:
                return {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {
                                    "key": "metadata.name",
                                    "operator": "In",
                                    "values": [self.node_name],
                                }
                            ]
                        }
                    ]
                }
            if selector is None:
                continue
            terms = _list(selector.raw.get("nodeSelectorTerms"))
            if len(terms) == 1:
                term = terms[0] if isinstance(terms[0], Mapping) else {}
                _add_requirements(_list(term.get("matchFields")), fields)
                _add_requirements(_list(term.get("matchExpressions")), expressions)
            elif len(terms) > 1:
                raise AllocationError(
                    f"unsupported ResourceSlice.NodeSelector with {len(terms)} terms"
                )
        if not fields and not expressions:
            return None
        term_out: dict[str, Any] = {}
        if expressions:
            term_out["matchExpressions"] = expressions
        if fields:
            term_out["matchFields"] = fields
        return {"nodeSelectorTerms": [term_out]}


def _device_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The inline DeviceConfiguration of a class or claim config entry."""
    return {k: v for k, v in config.items() if k not in ("requests", "source")}


def _add_requirements(source: list[Any], into: list[Mapping[str, Any]]) -> None:
    """addNewNodeSelectorRequirements: requirements not there yet (same key,
    operator and set of values)."""
    for req in source:
        if not isinstance(req, Mapping):
            continue
        values = set(_list(req.get("values")))
        if any(
            have.get("key") == req.get("key")
            and have.get("operator") == req.get("operator")
            and set(_list(have.get("values"))) == values
            for have in into
        ):
            continue
        into.append(req)
