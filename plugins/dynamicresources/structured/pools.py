"""ResourceSlices as the allocator reads them, and the pools of one node:
upstream's structured/internal/incubating/pools_incubating.go (NodeMatches,
GatherPools, addSlice, buildPool, the pool validations, checkSlicesInPool).

Each slice and device is decoded once, when the Allocator is built
(``SliceRecord``, ``DeviceRecord``); only node selection runs per node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from berth.framework.nodeaffinity import SelectorTerm, aggregate_message, compile_node_selector
from berth.framework.units import QuantityError, parse_quantity
from berth.plugins.dynamicresources.structured.capacity import CapacityPolicy, DeviceCapacity, Q

__all__ = [
    "DeviceRecord",
    "NodeSelectorError",
    "Pool",
    "PoolID",
    "SliceRecord",
    "gather_pools",
    "node_matches",
]

PoolID = tuple[str, str]
"""(driver, pool name)."""


class NodeSelectorError(Exception):
    """A node selector that does not parse (API validation prevents it)."""


@dataclass(frozen=True, slots=True)
class _Requirement:
    key: str
    operator: str
    values: Sequence[str]


@dataclass(frozen=True, slots=True)
class _Term:
    match_expressions: Sequence[_Requirement]
    match_fields: Sequence[_Requirement]


def _requirements(raw: Any) -> list[_Requirement]:
    out = []
    for r in raw if isinstance(raw, list) else []:
        if isinstance(r, Mapping):
            values = r.get("values")
            out.append(
                _Requirement(
                    str(r.get("key", "")),
                    str(r.get("operator", "")),
                    [str(v) for v in values] if isinstance(values, list) else [],
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """A v1.NodeSelector: its JSON (for the allocation result) and its terms
    parsed once (nodeaffinity.NewNodeSelector), or why they do not parse."""

    raw: Mapping[str, Any]
    terms: tuple[SelectorTerm, ...]
    error: str | None

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> NodeSelector:
        terms_raw = raw.get("nodeSelectorTerms")
        terms = [
            _Term(_requirements(t.get("matchExpressions")), _requirements(t.get("matchFields")))
            for t in (terms_raw if isinstance(terms_raw, list) else [])
            if isinstance(t, Mapping)
        ]
        parsed, errors = compile_node_selector(terms)
        return cls(raw, parsed, aggregate_message(errors) if errors else None)

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        if self.error is not None:
            raise NodeSelectorError(f"failed to parse node selector: {self.error}")
        return any(t.matches(labels, node_name) for t in self.terms)


def node_matches(
    node_name: str,
    labels: Mapping[str, str],
    name_to_match: str,
    all_nodes: bool,
    selector: NodeSelector | None,
) -> bool:
    """NodeMatches: a node name, all nodes, or a node selector."""
    if name_to_match:
        return node_name == name_to_match
    if all_nodes:
        return True
    if selector is not None:
        return selector.matches(node_name, labels)
    return False


def _q(text: Any) -> Q:
    s = str(text)
    return Q(parse_quantity(s).nanos, s)


def _opt_q(raw: Mapping[str, Any], key: str) -> Q | None:
    value = raw.get(key)
    return None if value is None else _q(value)


def _capacity(raw: Any) -> dict[str, DeviceCapacity]:
    out: dict[str, DeviceCapacity] = {}
    if not isinstance(raw, Mapping):
        return out
    for name, cap in raw.items():
        if not isinstance(cap, Mapping):
            continue
        policy = None
        p = cap.get("requestPolicy")
        if isinstance(p, Mapping):
            vr = p.get("validRange")
            vv = p.get("validValues")
            policy = CapacityPolicy(
                default=_opt_q(p, "default"),
                has_valid_range=isinstance(vr, Mapping),
                range_min=_opt_q(vr, "min") if isinstance(vr, Mapping) else None,
                range_max=_opt_q(vr, "max") if isinstance(vr, Mapping) else None,
                range_step=_opt_q(vr, "step") if isinstance(vr, Mapping) else None,
                valid_values=tuple(_q(v) for v in vv) if isinstance(vv, list) else None,
            )
        out[str(name)] = DeviceCapacity(_q(cap.get("value", "0")), policy)
    return out


def _counters(raw: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    if isinstance(raw, Mapping):
        for name, counter in raw.items():
            value = counter.get("value", "0") if isinstance(counter, Mapping) else "0"
            out[str(name)] = parse_quantity(str(value)).nanos
    return out


def _str_list(raw: Any) -> list[str] | None:
    return [str(v) for v in raw] if isinstance(raw, list) else None


@dataclass(eq=False, slots=True)
class DeviceRecord:
    """One entry of a slice's ``spec.devices``, decoded once. ``raw`` is the
    JSON as given (what CEL selectors see); ``broken`` says why a device the
    API server should not have stored (a quantity that does not parse) can
    never be allocated."""

    name: str
    raw: Mapping[str, Any]
    attributes: Mapping[str, Any]
    capacity: dict[str, DeviceCapacity]
    consumes_counters: list[tuple[str, dict[str, int]]]
    taints: list[Mapping[str, Any]]
    binding_conditions: list[str] | None
    binding_failure_conditions: list[str] | None
    binds_to_node: bool
    allow_multiple_allocations: bool | None
    node_name: str
    all_nodes: bool
    node_selector: NodeSelector | None
    broken: str | None = None

    @classmethod
    def decode(cls, raw: Mapping[str, Any]) -> DeviceRecord:
        attributes = raw.get("attributes")
        taints = raw.get("taints")
        ns = raw.get("nodeSelector")
        amulti = raw.get("allowMultipleAllocations")
        record = cls(
            name=str(raw.get("name", "")),
            raw=raw,
            attributes=attributes if isinstance(attributes, Mapping) else {},
            capacity={},
            consumes_counters=[],
            taints=[t for t in taints if isinstance(t, Mapping)]
            if isinstance(taints, list)
            else [],
            binding_conditions=_str_list(raw.get("bindingConditions")),
            binding_failure_conditions=_str_list(raw.get("bindingFailureConditions")),
            binds_to_node=raw.get("bindsToNode") is True,
            allow_multiple_allocations=amulti if isinstance(amulti, bool) else None,
            node_name=str(raw.get("nodeName") or ""),
            all_nodes=raw.get("allNodes") is True,
            node_selector=NodeSelector.parse(ns) if isinstance(ns, Mapping) else None,
        )
        try:
            record.capacity = _capacity(raw.get("capacity"))
            consumes = raw.get("consumesCounters")
            for c in consumes if isinstance(consumes, list) else []:
                if isinstance(c, Mapping):
                    record.consumes_counters.append(
                        (str(c.get("counterSet", "")), _counters(c.get("counters")))
                    )
        except QuantityError as e:
            record.broken = str(e)
        return record


@dataclass(eq=False, slots=True)
class SliceRecord:
    """One ResourceSlice, decoded once."""

    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node_name: str
    all_nodes: bool
    node_selector: NodeSelector | None
    per_device_node_selection: bool
    per_device_node_selection_set: bool
    shared_counters: list[tuple[str, dict[str, int]]]
    devices: list[DeviceRecord]
    broken: str | None = None

    @classmethod
    def decode(cls, raw: Mapping[str, Any]) -> SliceRecord:
        meta = raw.get("metadata")
        spec = raw.get("spec")
        meta = meta if isinstance(meta, Mapping) else {}
        spec = spec if isinstance(spec, Mapping) else {}
        pool = spec.get("pool")
        pool = pool if isinstance(pool, Mapping) else {}
        ns = spec.get("nodeSelector")
        devices = spec.get("devices")
        per_device = spec.get("perDeviceNodeSelection")
        record = cls(
            name=str(meta.get("name", "")),
            driver=str(spec.get("driver", "")),
            pool=str(pool.get("name", "")),
            generation=_int(pool.get("generation")),
            slice_count=_int(pool.get("resourceSliceCount")),
            node_name=str(spec.get("nodeName") or ""),
            all_nodes=spec.get("allNodes") is True,
            node_selector=NodeSelector.parse(ns) if isinstance(ns, Mapping) else None,
            per_device_node_selection=per_device is True,
            per_device_node_selection_set=per_device is not None,
            shared_counters=[],
            devices=[
                DeviceRecord.decode(d)
                for d in (devices if isinstance(devices, list) else [])
                if isinstance(d, Mapping)
            ],
        )
        shared = spec.get("sharedCounters")
        try:
            for s in shared if isinstance(shared, list) else []:
                if isinstance(s, Mapping):
                    record.shared_counters.append(
                        (str(s.get("name", "")), _counters(s.get("counters")))
                    )
        except QuantityError as e:
            record.broken = str(e)
        return record

    @property
    def pool_id(self) -> PoolID:
        return (self.driver, self.pool)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(eq=False, slots=True)
class Pool:
    """incubating.Pool: a pool's slices for one node. An incomplete pool
    (slices missing) or an invalid one (``invalid_reason``) gives no
    devices."""

    pool_id: PoolID
    incomplete: bool = False
    invalid_reason: str | None = None
    device_slices: list[SliceRecord] = field(default_factory=list)
    device_slices_not_targeting_node: list[SliceRecord] = field(default_factory=list)
    counter_sets: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def invalid(self) -> bool:
        return self.invalid_reason is not None

    @property
    def id_text(self) -> str:
        return "/".join(self.pool_id)


def _add_slice(pools: dict[PoolID, list[SliceRecord]], s: SliceRecord) -> None:
    """addSlice: only the newest generation of a pool counts."""
    current = pools.get(s.pool_id)
    if current is None or s.generation > current[0].generation:
        pools[s.pool_id] = [s]
    elif s.generation == current[0].generation:
        current.append(s)


def _duplicate_device_name(slices: Sequence[SliceRecord]) -> str | None:
    seen: set[str] = set()
    for s in slices:
        for d in s.devices:
            if d.name in seen:
                return f"duplicate device name {d.name}"
            seen.add(d.name)
    return None


def _counter_consumption_error(
    counter_sets: Mapping[str, Mapping[str, int]], slices: Sequence[SliceRecord]
) -> str | None:
    """validateDeviceCounterConsumption."""
    for s in slices:
        for d in s.devices:
            for set_name, counters in d.consumes_counters:
                counter_set = counter_sets.get(set_name)
                if counter_set is None:
                    return f"counter set {set_name} not found"
                for counter in counters:
                    if counter not in counter_set:
                        return f"counter {counter} not found in counter set {set_name}"
    return None


def _build_pool(
    pool_id: PoolID,
    slices: list[SliceRecord],
    partitionable: bool,
    all_slices_for_pool: list[SliceRecord] | None,
) -> Pool:
    """buildPool: sorted slices, validated (problems make the pool invalid,
    not the allocation fail)."""
    slices.sort(key=lambda s: s.name)
    for s in slices:
        if s.broken is not None:
            return Pool(pool_id, invalid_reason=s.broken)
    if partitionable:
        counter_slices = [s for s in slices if s.shared_counters]
        device_slices = [s for s in slices if not s.shared_counters]
    else:
        counter_slices, device_slices = [], slices
    reason = _duplicate_device_name(device_slices)
    if reason is not None:
        return Pool(pool_id, invalid_reason=reason)
    if not partitionable:
        return Pool(pool_id, device_slices=device_slices)
    counter_sets: dict[str, dict[str, int]] = {}
    for s in counter_slices:
        for name, counters in s.shared_counters:
            if name in counter_sets:
                return Pool(pool_id, invalid_reason=f"duplicate counter set name {name}")
            counter_sets[name] = counters
    reason = _counter_consumption_error(counter_sets, slices)
    if reason is not None:
        return Pool(pool_id, invalid_reason=reason)
    if all_slices_for_pool is None or len(slices) == len(all_slices_for_pool):
        return Pool(pool_id, device_slices=device_slices, counter_sets=counter_sets)
    names = {s.name for s in slices}
    others = [s for s in all_slices_for_pool if s.name not in names]
    reason = _counter_consumption_error(counter_sets, others)
    if reason is not None:
        return Pool(pool_id, invalid_reason=reason)
    return Pool(
        pool_id,
        device_slices=device_slices,
        device_slices_not_targeting_node=others,
        counter_sets=counter_sets,
    )


def _has_binding_conditions(pool: Pool) -> bool:
    return any(d.binding_conditions is not None for s in pool.device_slices for d in s.devices)


def gather_pools(
    node_name: str,
    labels: Mapping[str, str],
    slices_for_node: Sequence[SliceRecord],
    slices_by_pool: Mapping[PoolID, Sequence[SliceRecord]],
    partitionable: bool,
) -> list[Pool]:
    """GatherPools: the pools with devices for the node, sorted by driver
    and pool name, those with binding conditions last. ``slices_by_pool``
    has every slice of the cluster by pool, in the order given (for pools
    whose slices target several nodes). Raises NodeSelectorError with
    upstream's text when a selector does not parse."""
    pools: dict[PoolID, list[SliceRecord]] = {}
    for s in slices_for_node:
        if not partitionable and (s.per_device_node_selection_set or s.shared_counters):
            continue
        if s.shared_counters:
            relevant = True
        elif s.node_name or s.all_nodes or s.node_selector is not None:
            try:
                relevant = node_matches(
                    node_name, labels, s.node_name, s.all_nodes, s.node_selector
                )
            except NodeSelectorError as e:
                raise NodeSelectorError(
                    f"failed to perform node selection for slice {s.name}: {e}"
                ) from None
        elif s.per_device_node_selection:
            relevant = False
            for d in s.devices:
                try:
                    match = node_matches(
                        node_name, labels, d.node_name, d.all_nodes, d.node_selector
                    )
                except NodeSelectorError as e:
                    raise NodeSelectorError(
                        "failed to perform node selection for device "
                        f"{d.name} in slice {s.name}: {e}"
                    ) from None
                if match:
                    relevant = True
                    break
        else:
            continue
        if relevant:
            _add_slice(pools, s)

    result: list[Pool] = []
    with_binding_conditions: list[Pool] = []
    for pool_id, slices in pools.items():
        first = slices[0]
        if len(slices) == first.slice_count:
            pool = _build_pool(pool_id, slices, partitionable, None)
        else:
            # checkSlicesInPool: a newer generation elsewhere makes these
            # slices obsolete; otherwise the whole pool may still be complete.
            all_for_pool: list[SliceRecord] = []
            obsolete = False
            for s in slices_by_pool.get(pool_id, ()):
                if s.generation == first.generation:
                    all_for_pool.append(s)
                elif s.generation > first.generation:
                    obsolete = True
                    break
            if obsolete:
                continue
            if len(all_for_pool) != first.slice_count:
                result.append(Pool(pool_id, incomplete=True))
                continue
            pool = _build_pool(pool_id, slices, partitionable, all_for_pool)
        if _has_binding_conditions(pool):
            with_binding_conditions.append(pool)
        else:
            result.append(pool)
    result.sort(key=lambda p: p.pool_id)
    with_binding_conditions.sort(key=lambda p: p.pool_id)
    return result + with_binding_conditions
