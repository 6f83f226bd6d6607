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
    "slice_record",
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


# Quantities repeat across devices ("80Gi" on every GPU of a cluster): each
# text is parsed once per process, the memo bounded.
_NANOS: dict[str, int] = {}
_NANOS_MAX = 4096


def _nanos(text: str) -> int:
    found = _NANOS.get(text)
    if found is None:
        found = parse_quantity(text).nanos
        if len(_NANOS) >= _NANOS_MAX:
            _NANOS.clear()
        _NANOS[text] = found
    return found


def _map(value: Any) -> Mapping[str, Any] | None:
    """``value`` if it is a JSON object (a dict, checked first: the
    abstract Mapping check costs more)."""
    if type(value) is dict or isinstance(value, Mapping):
        return value
    return None


def _q(text: Any) -> Q:
    s = str(text)
    return Q(_nanos(s), s)


def _opt_q(raw: Mapping[str, Any], key: str) -> Q | None:
    value = raw.get(key)
    return None if value is None else _q(value)


def _capacity(raw: Any) -> dict[str, DeviceCapacity]:
    out: dict[str, DeviceCapacity] = {}
    capacity = _map(raw)
    if capacity is None:
        return out
    for name, cap in capacity.items():
        c = _map(cap)
        if c is None:
            continue
        policy = None
        p = _map(c.get("requestPolicy"))
        if p is not None:
            vr = _map(p.get("validRange"))
            vv = p.get("validValues")
            policy = CapacityPolicy(
                default=_opt_q(p, "default"),
                has_valid_range=vr is not None,
                range_min=_opt_q(vr, "min") if vr is not None else None,
                range_max=_opt_q(vr, "max") if vr is not None else None,
                range_step=_opt_q(vr, "step") if vr is not None else None,
                valid_values=tuple(_q(v) for v in vv) if isinstance(vv, list) else None,
            )
        out[str(name)] = DeviceCapacity(_q(c.get("value", "0")), policy)
    return out


def _counters(raw: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    counters = _map(raw)
    if counters is not None:
        for name, counter in counters.items():
            c = _map(counter)
            out[str(name)] = _nanos(str(c.get("value", "0") if c is not None else "0"))
    return out


def _str_list(raw: Any) -> list[str] | None:
    return [str(v) for v in raw] if isinstance(raw, list) else None


_EMPTY: Mapping[str, Any] = {}


class DeviceRecord:
    """One entry of a slice's ``spec.devices``, decoded once, when first
    needed. ``raw`` is the JSON as given (what CEL selectors see);
    ``broken`` says why a device the API server should not have stored (a
    quantity that does not parse) can never be allocated."""

    __slots__ = (
        "all_nodes",
        "allow_multiple_allocations",
        "attributes",
        "binding_conditions",
        "binding_failure_conditions",
        "binds_to_node",
        "broken",
        "capacity",
        "cel_answers",
        "consumes_counters",
        "id",
        "name",
        "node_name",
        "node_selector",
        "raw",
        "taints",
    )

    def __init__(self, raw: Mapping[str, Any], driver: str = "", pool: str = "") -> None:
        get = raw.get
        self.raw = raw
        self.name = str(get("name", ""))
        # DeviceID: (driver, pool, device) of the slice it came in.
        self.id: tuple[str, str, str] = (driver, pool, self.name)
        self.attributes = _map(get("attributes")) or _EMPTY
        taints = get("taints")
        self.taints: list[Mapping[str, Any]] = (
            [t for t in taints if _map(t) is not None] if isinstance(taints, list) else []
        )
        self.binding_conditions = _str_list(get("bindingConditions"))
        self.binding_failure_conditions = _str_list(get("bindingFailureConditions"))
        self.binds_to_node = get("bindsToNode") is True
        amulti = get("allowMultipleAllocations")
        self.allow_multiple_allocations: bool | None = amulti if isinstance(amulti, bool) else None
        self.node_name = str(get("nodeName") or "")
        self.all_nodes = get("allNodes") is True
        ns = _map(get("nodeSelector"))
        self.node_selector = NodeSelector.parse(ns) if ns is not None else None
        self.broken: str | None = None
        # Selector expression -> its answer for this device (or the runtime
        # error's message): it depends on neither node nor claim.
        self.cel_answers: dict[str, bool | str] = {}
        self.capacity: dict[str, DeviceCapacity] = {}
        self.consumes_counters: list[tuple[str, dict[str, int]]] = []
        try:
            if "capacity" in raw:
                self.capacity = _capacity(get("capacity"))
            consumes = get("consumesCounters")
            if isinstance(consumes, list):
                for c in consumes:
                    cm = _map(c)
                    if cm is not None:
                        self.consumes_counters.append(
                            (str(cm.get("counterSet", "")), _counters(cm.get("counters")))
                        )
        except QuantityError as e:
            self.broken = str(e)

    @classmethod
    def decode(cls, raw: Mapping[str, Any]) -> DeviceRecord:
        return cls(raw)


class SliceRecord:
    """One ResourceSlice: what the pools need, read once; its devices are
    decoded when a node first needs them."""

    __slots__ = (
        "_devices",
        "_raw_devices",
        "all_nodes",
        "broken",
        "driver",
        "generation",
        "name",
        "node_name",
        "node_selector",
        "per_device_node_selection",
        "per_device_node_selection_set",
        "pool",
        "pool_id",
        "shared_counters",
        "slice_count",
    )

    def __init__(self, raw: Mapping[str, Any]) -> None:
        meta = _map(raw.get("metadata")) or _EMPTY
        spec = _map(raw.get("spec")) or _EMPTY
        pool = _map(spec.get("pool")) or _EMPTY
        self.name = str(meta.get("name", ""))
        self.driver = str(spec.get("driver", ""))
        self.pool = str(pool.get("name", ""))
        self.pool_id: PoolID = (self.driver, self.pool)
        self.generation = _int(pool.get("generation"))
        self.slice_count = _int(pool.get("resourceSliceCount"))
        self.node_name = str(spec.get("nodeName") or "")
        self.all_nodes = spec.get("allNodes") is True
        ns = _map(spec.get("nodeSelector"))
        self.node_selector = NodeSelector.parse(ns) if ns is not None else None
        per_device = spec.get("perDeviceNodeSelection")
        self.per_device_node_selection = per_device is True
        self.per_device_node_selection_set = per_device is not None
        devices = spec.get("devices")
        self._raw_devices: list[Any] = devices if isinstance(devices, list) else []
        self._devices: list[DeviceRecord] | None = None
        self.broken: str | None = None
        self.shared_counters: list[tuple[str, dict[str, int]]] = []
        shared = spec.get("sharedCounters")
        try:
            if isinstance(shared, list):
                for s in shared:
                    sm = _map(s)
                    if sm is not None:
                        self.shared_counters.append(
                            (str(sm.get("name", "")), _counters(sm.get("counters")))
                        )
        except QuantityError as e:
            self.broken = str(e)

    @property
    def devices(self) -> list[DeviceRecord]:
        found = self._devices
        if found is None:
            found = self._devices = [
                DeviceRecord(d, self.driver, self.pool)
                for d in self._raw_devices
                if _map(d) is not None
            ]
        return found

    @classmethod
    def decode(cls, raw: Mapping[str, Any]) -> SliceRecord:
        return cls(raw)


# Decoded slices by the identity of their JSON and its resourceVersion: the
# snapshot keeps an unchanged object's decoded JSON from one call to the
# next, so its decoding and its devices' CEL answers carry over to the next
# cycle's Allocator; a changed object has a new resourceVersion. Objects
# without one (built by hand, in tests) are decoded anew by each Allocator,
# so changing them in place between cycles is safe. The entry holds the JSON,
# so its id is not reused while cached.
_SLICES: dict[int, tuple[Mapping[str, Any], str, SliceRecord]] = {}
_SLICES_MAX = 65536


def slice_record(raw: Mapping[str, Any]) -> SliceRecord:
    """The decoded slice, shared by every Allocator given the same JSON
    object at the same resourceVersion."""
    meta = _map(raw.get("metadata"))
    version = meta.get("resourceVersion") if meta is not None else None
    if not isinstance(version, str) or not version:
        return SliceRecord(raw)
    found = _SLICES.get(id(raw))
    if found is not None and found[0] is raw and found[1] == version:
        return found[2]
    record = SliceRecord(raw)
    if len(_SLICES) >= _SLICES_MAX:
        _SLICES.clear()
    _SLICES[id(raw)] = (raw, version, record)
    return record


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
