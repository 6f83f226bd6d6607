"""A node's GPU cards as clusters describe them, one parser per source.

GPUCardFit and GPUPriorityPlugin read a node's cards from the first of these
sources the node has (``read_node_gpus``), and name it in their decisions:

1. **DRA ResourceSlices** (``resource.k8s.io/v1``): the slices whose
   ``spec.nodeName`` is the node, from a GPU driver (``gpu.nvidia.com``,
   ``gpu.example.com``, ...). A card is a device with a ``memory`` capacity
   (and, when the driver says so, attribute ``type: gpu``: NVIDIA's MIG
   partitions are not whole cards). Its product and UUID come from the
   attributes ``productName``/``model`` and ``uuid``. Devices allocated in
   ResourceClaims' ``status.allocation`` are used: a device without
   ``allowMultipleAllocations`` is taken whole, one that allows them (consumable
   capacity) has its ``consumedCapacity`` memory taken. Like upstream's
   allocator (k8s.io/dynamic-resource-allocation structured/internal/stable
   pools_stable.go GatherPools, allocator_stable.go), only a pool's newest
   generation counts, an incomplete pool offers nothing, and a device whose
   shared counters (partitionable devices) are used up by allocated devices,
   or that has a NoSchedule/NoExecute taint, is not free.
2. **NVIDIA GPU Feature Discovery labels**: ``nvidia.com/gpu.count`` cards of
   ``nvidia.com/gpu.memory`` MiB each, product ``nvidia.com/gpu.product``
   (``nvidia.com/gpu.replicas`` when the device plugin time-slices them).
3. **HAMi's node annotation** ``hami.io/node-nvidia-register``, as HAMi's
   scheduler reads it (Project-HAMi/HAMi pkg/device/nvidia/device.go
   GetNodeDevices): a JSON list of devices (pkg/device/devices.go
   DeviceInfo: ``id``, ``index``, ``count``, ``devmem`` MiB, ``devcore``,
   ``type``, ``health``, ...), or the older text form
   ``id,count,devmem,devcore,type,numa,health[,index,mode]`` per card, cards
   separated by ``:`` (DecodeNodeDevices). A pod HAMi's scheduler placed takes
   what its ``hami.io/vgpu-devices-allocated`` records.
4. **Berth's own annotation** ``berth.dev/gpu-cards``: a JSON list of each
   card's memory.

Every value is parsed at bounded cost (lengths and counts capped before
decoding) and a malformed one gives a ``NodeGPUs`` with ``problem`` set,
never an exception: a node whose first source does not parse is described
by that problem, not by a lower source (a broken description is to be fixed,
not guessed around).
"""

from __future__ import annotations

import enum
import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from berth.framework.model import NodeInfo
from berth.framework.resourceapi import RESOURCE_CLAIMS, RESOURCE_SLICES
from berth.framework.snapshot import Snapshot
from berth.framework.units import QuantityError, parse_quantity, shorten

log = logging.getLogger(__name__)

__all__ = [
    "BERTH_CARDS_ANNOTATION",
    "BERTH_CARD_ANNOTATION",
    "BERTH_MEMORY_ANNOTATION",
    "DEFAULT_DRA_DRIVERS",
    "GFD_COUNT_LABEL",
    "GFD_MEMORY_LABEL",
    "GFD_PRODUCT_LABEL",
    "GFD_REPLICAS_LABEL",
    "HAMI_ANNOTATION",
    "HAMI_POD_ANNOTATION",
    "MAX_CARDS",
    "MAX_CARDS_TEXT",
    "RESOURCE_CLAIMS",
    "RESOURCE_SLICES",
    "Card",
    "CardUse",
    "DraInventory",
    "NodeGPUs",
    "RequestPolicy",
    "Source",
    "card_use",
    "dra_driver_errors",
    "parse_berth_cards",
    "parse_card_id",
    "parse_gfd_labels",
    "parse_hami_annotation",
    "parse_hami_pod_devices",
    "parse_memory",
    "read_node_gpus",
]


# NVIDIA's DRA driver (k8s-dra-driver-gpu), the example driver
# (kubernetes-sigs/dra-example-driver), AMD's and Intel's.
DEFAULT_DRA_DRIVERS: Final = ("gpu.nvidia.com", "gpu.example.com", "gpu.amd.com", "gpu.intel.com")
# Berth's own annotations (GPUCardFit's defaults): the node's cards, the
# memory a pod needs on one card, the card it was given.
BERTH_CARDS_ANNOTATION: Final = "berth.dev/gpu-cards"
BERTH_MEMORY_ANNOTATION: Final = "berth.dev/gpu-memory"
BERTH_CARD_ANNOTATION: Final = "berth.dev/gpu-card"
# More drivers than any cluster runs for GPUs.
_MAX_DRIVERS: Final = 16
_DNS1123_SUBDOMAIN_RE: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


def dra_driver_errors(drivers: Sequence[str]) -> list[str]:
    """Why ``drivers`` is not a list of DRA driver names (each a lowercase DNS
    subdomain of at most 63 characters, resource.k8s.io/v1
    ResourceSliceSpec.Driver), as ``[i]: ...``; empty when it is one."""
    if len(drivers) > _MAX_DRIVERS:
        return [f": {len(drivers)} drivers, at most {_MAX_DRIVERS}"]
    for i, driver in enumerate(drivers):
        if not driver or len(driver) > 63 or not _DNS1123_SUBDOMAIN_RE.match(driver):
            return [
                f"[{i}]: invalid value {driver!r}: a DRA driver name is a lowercase DNS "
                "subdomain of at most 63 characters (e.g. 'gpu.nvidia.com')"
            ]
    return []


GFD_COUNT_LABEL: Final = "nvidia.com/gpu.count"
GFD_MEMORY_LABEL: Final = "nvidia.com/gpu.memory"
GFD_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
GFD_REPLICAS_LABEL: Final = "nvidia.com/gpu.replicas"

HAMI_ANNOTATION: Final = "hami.io/node-nvidia-register"
# On a pod HAMi's scheduler placed: the devices each container got
# (pkg/device/devices.go EncodeContainerDevices: ``uuid,type,usedmem,usedcores``
# per device, each followed by ':', containers separated by ';').
HAMI_POD_ANNOTATION: Final = "hami.io/vgpu-devices-allocated"

# More cards than any node holds; every Filter call walks a node's cards.
MAX_CARDS: Final = 64
# Annotation text beyond this is refused before it is decoded.
MAX_CARDS_TEXT: Final = 8 * 1024
# A card id (a pod's card annotation, a HAMi id) longer than this is refused.
MAX_ID: Final = 512
# Devices of one node's slices looked at; the rest are ignored.
MAX_NODE_DEVICES: Final = 1024
_MIB: Final = 1024 * 1024


class Source(enum.Enum):
    """Where a node's cards were read from; the value names it in messages."""

    DRA = "ResourceSlices"
    GFD = "GFD labels"
    HAMI = "HAMi annotation"
    BERTH = "Berth annotation"


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """A consumable capacity's requestPolicy (resource.k8s.io/v1
    CapacityRequestPolicy), in bytes."""

    default: int | None = None
    valid_values: tuple[int, ...] = ()
    min: int | None = None
    max: int | None = None
    step: int | None = None

    def consumed(self, need: int) -> int:
        """The amount a request of ``need`` consumes (upstream's
        calculateConsumedCapacity, structured/internal/stable
        consumable_capacity.go): rounded up to the range's step from its
        min, or to the first valid value at least ``need``."""
        if self.min is not None:
            if need < self.min:
                return self.min
            if not self.step:
                return need
            n, rem = divmod(need - self.min, self.step)
            return self.min + self.step * (n + (1 if rem else 0))
        for value in self.valid_values:
            if need <= value:
                return value
        return need

    def violated_by(self, consumed: int) -> bool:
        """upstream's violatesPolicy: outside the range, or not one of the
        valid values."""
        if self.min is not None:
            return consumed < self.min or (self.max is not None and consumed > self.max)
        if self.valid_values:
            return consumed not in self.valid_values
        return False


@dataclass(frozen=True, slots=True)
class Card:
    """One GPU card of a node.

    ``id`` is what a pod's card annotation holds for it: the index for GFD
    labels and Berth's annotation, the device id for HAMi, and
    ``<driver>/<pool>/<device>`` for a DRA device. ``memory`` is the memory
    pods may use on it in bytes; ``used`` what the source itself says is
    taken (DRA consumed capacity). ``max_pods`` bounds the pods on it (1 for
    a DRA device without multiple allocations, HAMi's split count), None for
    no bound. ``available`` is False for a card nothing may be given: a DRA
    device allocated whole, or not free for its counters or taints, an
    unhealthy HAMi card; ``why`` says why.
    """

    id: str
    memory: int
    used: int = 0
    exclusive: bool = False
    max_pods: int | None = None
    available: bool = True
    why: str = ""
    product: str = ""
    uuid: str = ""
    policy: RequestPolicy | None = None

    def consumes(self, need: int) -> int:
        """What a pod needing ``need`` bytes takes on this card."""
        if self.exclusive:
            return self.memory
        return need if self.policy is None else self.policy.consumed(need)

    def describe(self) -> str:
        extra = ", ".join(x for x in (self.product, self.uuid) if x and x != self.id)
        return f"{self.id} ({extra})" if extra else self.id


@dataclass(frozen=True, slots=True)
class NodeGPUs:
    """A node's cards and the source they came from; ``problem`` (with no
    cards) when that source does not parse."""

    source: Source
    cards: tuple[Card, ...] = ()
    problem: str = ""
    # What the source says the node can hand out in the units of an extended
    # resource (GFD: count x replicas; HAMi: the healthy cards' split counts),
    # None where cards are counted one by one.
    resource_capacity: int | None = None
    detail: str = field(default="")

    def name(self) -> str:
        """The source as messages name it, e.g. ``GFD labels``."""
        return self.source.value

    def explain(self) -> str:
        """The source and what about it matters, for a rejection, e.g.
        ``GFD labels; no nvidia.com/gpu.memory label: memory unknown``."""
        return f"{self.source.value}; {self.detail}" if self.detail else self.source.value


def parse_memory(value: object) -> int:
    """A memory amount in bytes (rounded up) from a quantity string or an
    integer; ValueError saying why not. Bounded cost whatever the value
    (framework/units.py)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f'{shorten(value)} is not a quantity (e.g. "40Gi", "40G")')
    if isinstance(value, int) and value.bit_length() > 63:
        raise ValueError(f"{shorten(value)} is out of range (an int64)")
    try:
        amount = parse_quantity(str(value)).value()
    except QuantityError as exc:
        raise ValueError(str(exc)) from exc
    if amount < 0:
        raise ValueError(f"{shorten(value)} is negative")
    return amount


def parse_card_id(text: str) -> str | None:
    """A pod's card annotation as a card id, None when it cannot be one."""
    return text if 0 < len(text) <= MAX_ID else None


def _small_int(text: str, what: str, limit: int) -> int:
    """A non-negative decimal integer of at most ``limit``; ValueError."""
    if not (0 < len(text) <= 12 and text.isascii() and text.isdigit()):
        raise ValueError(f"{what} {shorten(text)} is not a non-negative integer")
    value = int(text)
    if value > limit:
        raise ValueError(f"{what} {value} is more than {limit}")
    return value


# -- Berth's annotation --------------------------------------------------------------


def parse_berth_cards(text: str) -> list[int]:
    """``berth.dev/gpu-cards``: a JSON list of each card's memory (quantity
    strings or bytes); bytes per card, ValueError saying what is wrong."""
    if len(text) > MAX_CARDS_TEXT:
        raise ValueError(
            f"{len(text)} characters, at most {MAX_CARDS_TEXT} are read "
            '(want a JSON list such as ["80Gi", "40Gi"])'
        )
    try:
        cards = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f'not JSON (want e.g. ["80Gi", "40Gi"]): {shorten(str(exc))}') from exc
    if not isinstance(cards, list):
        raise ValueError(f'want a JSON list such as ["80Gi", "40Gi"], got {type(cards).__name__}')
    if len(cards) > MAX_CARDS:
        raise ValueError(f"{len(cards)} cards, at most {MAX_CARDS} are read")
    out: list[int] = []
    for i, entry in enumerate(cards):
        try:
            out.append(parse_memory(entry))
        except ValueError as exc:
            raise ValueError(f"card {i}: {exc}") from exc
    return out


# -- GPU Feature Discovery -----------------------------------------------------------


def parse_gfd_labels(labels: Mapping[str, str]) -> NodeGPUs:
    """GFD's labels (present when ``nvidia.com/gpu.count`` is): count cards
    of ``gpu.memory`` MiB each. A missing memory label leaves the cards'
    memory unknown (0: no memory need fits; counts still score)."""
    try:
        count = _small_int(labels.get(GFD_COUNT_LABEL, ""), GFD_COUNT_LABEL, MAX_CARDS)
        memory_text = labels.get(GFD_MEMORY_LABEL)
        memory = 0
        if memory_text is not None:
            memory = _small_int(memory_text, GFD_MEMORY_LABEL, 2**40) * _MIB
        replicas_text = labels.get(GFD_REPLICAS_LABEL)
        replicas = 1
        if replicas_text is not None:
            replicas = max(_small_int(replicas_text, GFD_REPLICAS_LABEL, 1024), 1)
    except ValueError as exc:
        return NodeGPUs(Source.GFD, problem=f"label {exc}")
    product = labels.get(GFD_PRODUCT_LABEL, "")[:256]
    cards = tuple(Card(str(i), memory, product=product) for i in range(count))
    detail = "" if memory_text is not None else f"no {GFD_MEMORY_LABEL} label: memory unknown"
    return NodeGPUs(Source.GFD, cards, resource_capacity=count * replicas, detail=detail)


# -- HAMi ------------------------------------------------------------------------------


def _hami_json(text: str) -> list[Card]:
    try:
        entries = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON: {shorten(str(exc))}") from exc
    if not isinstance(entries, list):
        raise ValueError(f"want a JSON list of devices, got {type(entries).__name__}")
    if len(entries) > MAX_CARDS:
        raise ValueError(f"{len(entries)} devices, at most {MAX_CARDS} are read")
    cards: list[Card] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(f"device {i}: want a JSON object, got {type(entry).__name__}")
        # Go's encoding/json with omitempty: an absent field is the zero value.
        ident = entry.get("id", "")
        kind = entry.get("type", "")
        health = entry.get("health", False)
        numbers: dict[str, int] = {}
        for key in ("count", "devmem", "devcore"):
            value = entry.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
                raise ValueError(f"device {i}: {key} {shorten(value)} is not an int32 >= 0")
            numbers[key] = value
        if not isinstance(ident, str) or parse_card_id(ident) is None:
            raise ValueError(f"device {i}: id {shorten(ident)} is not a device id")
        if not isinstance(kind, str) or not isinstance(health, bool):
            raise ValueError(f"device {i}: type must be a string and health a boolean")
        cards.append(_hami_card(ident, numbers["count"], numbers["devmem"], kind, health))
    return cards


def _hami_card(ident: str, count: int, devmem: int, kind: str, health: bool) -> Card:
    why = "" if health else "HAMi reports it unhealthy"
    if health and count == 0:
        why = "HAMi's split count is 0"
    return Card(
        ident,
        devmem * _MIB,
        max_pods=count,
        available=not why,
        why=why,
        product=kind[:256],
        uuid=ident,
    )


def _hami_text(text: str) -> list[Card]:
    # DecodeNodeDevices: entries separated by ':', fields by ','; an entry
    # without ',' (the empty one after the last ':') is skipped.
    if ":" not in text:
        raise ValueError("neither a JSON list nor ':'-separated devices")
    cards: list[Card] = []
    for n, entry in enumerate(text.split(":")):
        if "," not in entry:
            continue
        if len(cards) == MAX_CARDS:
            raise ValueError(f"more than {MAX_CARDS} devices")
        items = entry.split(",")
        if len(items) not in (7, 9):
            raise ValueError(
                f"device {n}: {len(items)} fields, want 7 "
                "(id,count,devmem,devcore,type,numa,health) or 9 (then index,mode)"
            )
        count = _small_int(items[1], f"device {n}: count", 2**31 - 1)
        devmem = _small_int(items[2], f"device {n}: devmem", 2**31 - 1)
        if items[6] not in ("true", "false", "True", "False", "1", "0", "t", "f", "T", "F"):
            raise ValueError(f"device {n}: health {shorten(items[6])} is not a boolean")
        if parse_card_id(items[0]) is None:
            raise ValueError(f"device {n}: id {shorten(items[0])} is not a device id")
        health = items[6] in ("true", "True", "1", "t", "T")
        cards.append(_hami_card(items[0], count, devmem, items[4], health))
    if not cards:
        raise ValueError(
            "no device in it (want a JSON list, or id,count,devmem,devcore,type,numa,health "
            "per device separated by ':')"
        )
    return cards


def parse_hami_pod_devices(text: str) -> list[tuple[str, int]]:
    """``hami.io/vgpu-devices-allocated``: (device id, memory in bytes) per
    device given to the pod; entries that do not parse are skipped (HAMi's
    DecodeContainerDevices fails the same pod), at most MAX_CARDS of them
    from at most MAX_CARDS_TEXT characters."""
    out: list[tuple[str, int]] = []
    if len(text) > MAX_CARDS_TEXT:
        return out
    for container in text.split(";"):
        for entry in container.split(":"):
            items = entry.split(",")
            if len(items) < 4 or parse_card_id(items[0]) is None:
                continue
            try:
                used = _small_int(items[2], "usedmem", 2**31 - 1)
            except ValueError:
                continue
            out.append((items[0], used * _MIB))
            if len(out) == MAX_CARDS:
                return out
    return out


def parse_hami_annotation(text: str) -> NodeGPUs:
    """``hami.io/node-nvidia-register``: JSON first, then HAMi's older text
    form, as HAMi's GetNodeDevices tries them."""
    if len(text) > MAX_CARDS_TEXT:
        return NodeGPUs(
            Source.HAMI,
            problem=f"annotation {HAMI_ANNOTATION}: {len(text)} characters, "
            f"at most {MAX_CARDS_TEXT} are read",
        )
    try:
        stripped = text.lstrip()
        cards = _hami_json(text) if stripped[:1] in ("[", "{") else _hami_text(text)
    except ValueError as exc:
        return NodeGPUs(Source.HAMI, problem=f"annotation {HAMI_ANNOTATION}: {exc}")
    capacity = sum(c.max_pods or 0 for c in cards if c.available)
    return NodeGPUs(Source.HAMI, tuple(cards), resource_capacity=capacity)


# -- DRA -------------------------------------------------------------------------------


def _as_map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _quantity(value: object) -> int | None:
    """A quantity in the API's JSON (a string, or a number), rounded up;
    None when it is not one."""
    try:
        return parse_memory(value)
    except ValueError:
        return None


def _attribute(attrs: Mapping[str, Any], driver: str, *names: str) -> str:
    """A string attribute by its short or driver-qualified name."""
    for name in names:
        for key in (name, f"{driver}/{name}"):
            value = _as_map(attrs.get(key)).get("string")
            if isinstance(value, str):
                return value[:256]
    return ""


def _policy(capacity: Mapping[str, Any]) -> RequestPolicy | None:
    raw = capacity.get("requestPolicy")
    if not isinstance(raw, dict):
        return None
    valid_range = _as_map(raw.get("validRange"))
    values = [_quantity(v) for v in _as_list(raw.get("validValues"))[:16]]
    return RequestPolicy(
        default=_quantity(raw["default"]) if "default" in raw else None,
        valid_values=tuple(v for v in values if v is not None),
        min=_quantity(valid_range["min"]) if "min" in valid_range else None,
        max=_quantity(valid_range["max"]) if "max" in valid_range else None,
        step=_quantity(valid_range["step"]) if "step" in valid_range else None,
    )


@dataclass(slots=True)
class _Allocated:
    """What ResourceClaims' allocations take of one device."""

    whole: bool = False
    memory: int = 0
    consumers: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _Pool:
    """One (driver, pool) at its newest generation: how many slices it
    should have and how many it has (on any node)."""

    driver: str
    name: str
    generation: int
    slice_count: int
    seen: int = 0
    # Counter set name -> counter -> value, from the pool's slices on any node.
    counters: dict[str, dict[str, int]] = field(default_factory=dict)


def _counter_values(raw: object) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, counter in list(_as_map(raw).items())[:64]:
        value = _quantity(_as_map(counter).get("value"))
        if value is not None:
            out[str(name)] = value
    return out


class DraInventory:
    """The GPU devices of ResourceSlices by node, and what ResourceClaims'
    allocations take of them; built once per call from the snapshot."""

    def __init__(self, snapshot: Snapshot | None, drivers: Iterable[str]) -> None:
        self._drivers = frozenset(drivers)
        self._snapshot = snapshot
        self._by_node: dict[str, list[tuple[_Pool, list[Mapping[str, Any]]]]] | None = None
        self._allocated: dict[tuple[str, str, str], _Allocated] | None = None

    def _index(self) -> dict[str, list[tuple[_Pool, list[Mapping[str, Any]]]]]:
        """node -> its pools, each with the node's slices of the pool's
        newest generation (GatherPools: older generations are ignored)."""
        if self._by_node is not None:
            return self._by_node
        pools: dict[tuple[str, str], _Pool] = {}
        node_slices: list[tuple[_Pool, int, str, Mapping[str, Any]]] = []
        slices = (
            ()
            if self._snapshot is None
            else self._snapshot.objects(RESOURCE_SLICES.group, RESOURCE_SLICES.resource).values()
        )
        for obj in slices:
            try:
                spec = _as_map(obj.data.get("spec"))
            except ValueError:
                continue
            driver = spec.get("driver")
            if not isinstance(driver, str) or driver not in self._drivers:
                continue
            pool_spec = _as_map(spec.get("pool"))
            name = pool_spec.get("name")
            generation = pool_spec.get("generation", 0)
            count = pool_spec.get("resourceSliceCount", 1)
            if not isinstance(name, str) or not isinstance(generation, int):
                continue
            pool = pools.get((driver, name))
            if pool is None or generation > pool.generation:
                pool = pools[(driver, name)] = _Pool(
                    driver, name, generation, count if isinstance(count, int) else 1
                )
            if generation == pool.generation:
                pool.seen += 1
                for counter_set in _as_list(spec.get("sharedCounters"))[:8]:
                    counter_set = _as_map(counter_set)
                    set_name = counter_set.get("name")
                    if isinstance(set_name, str):
                        pool.counters[set_name] = _counter_values(counter_set.get("counters"))
            node = spec.get("nodeName")
            if isinstance(node, str) and node:
                node_slices.append((pool, generation, node, spec))
        by_node: dict[str, dict[tuple[str, str], list[Mapping[str, Any]]]] = {}
        for pool, generation, node, spec in node_slices:
            current = pools[(pool.driver, pool.name)]
            if generation == current.generation:
                by_node.setdefault(node, {}).setdefault((pool.driver, pool.name), []).append(spec)
        self._by_node = {
            node: [(pools[key], specs) for key, specs in per_pool.items()]
            for node, per_pool in by_node.items()
        }
        return self._by_node

    def allocated(self) -> dict[tuple[str, str, str], _Allocated]:
        """(driver, pool, device) -> what the claims' allocations take."""
        if self._allocated is not None:
            return self._allocated
        out: dict[tuple[str, str, str], _Allocated] = {}
        claims = (
            ()
            if self._snapshot is None
            else self._snapshot.objects(RESOURCE_CLAIMS.group, RESOURCE_CLAIMS.resource).values()
        )
        for obj in claims:
            try:
                status = _as_map(obj.data.get("status"))
            except ValueError:
                continue
            allocation = _as_map(status.get("allocation"))
            consumers = {
                uid
                for ref in _as_list(status.get("reservedFor"))[:256]
                if isinstance(uid := _as_map(ref).get("uid"), str)
            }
            for result in _as_list(_as_map(allocation.get("devices")).get("results"))[:256]:
                result = _as_map(result)
                driver, pool, device = (
                    result.get("driver"),
                    result.get("pool"),
                    result.get("device"),
                )
                if not (
                    isinstance(driver, str) and isinstance(pool, str) and isinstance(device, str)
                ):
                    continue
                if result.get("adminAccess") is True:
                    # Admin access does not take the device (upstream's
                    # allocator skips such results when it counts allocated ones).
                    continue
                entry = out.setdefault((driver, pool, device), _Allocated())
                entry.consumers |= consumers
                consumed = _as_map(result.get("consumedCapacity"))
                if result.get("shareID") is None and not consumed:
                    entry.whole = True
                memory = _quantity(consumed.get("memory")) if "memory" in consumed else None
                entry.memory += memory or 0
        self._allocated = out
        return out

    def has_node(self, node: str) -> bool:
        return node in self._index()

    def node_names(self) -> list[str]:
        """The nodes a GPU driver's slice names."""
        return list(self._index())

    def consumers(self, card_id: str) -> set[str]:
        """The pod uids of the claims allocating a device, by card id."""
        driver, _, rest = card_id.partition("/")
        pool, _, device = rest.rpartition("/")
        entry = self.allocated().get((driver, pool, device))
        return set() if entry is None else entry.consumers

    def node_gpus(self, node: str) -> NodeGPUs | None:
        """The node's GPU devices; None when no GPU driver's slice names it."""
        pools = self._index().get(node)
        if not pools:
            return None
        allocated = self.allocated()
        cards: list[Card] = []
        incomplete: list[str] = []
        seen_devices = 0
        for pool, specs in pools:
            driver, pool_name = pool.driver, pool.name
            if pool.seen < pool.slice_count:
                incomplete.append(
                    f"{driver}/{pool_name} ({pool.seen} of {pool.slice_count} slices)"
                )
                continue
            counters = {name: dict(values) for name, values in pool.counters.items()}
            devices = [_as_map(d) for spec in specs for d in _as_list(spec.get("devices"))[:1024]]
            # Counters the allocated devices of the pool consume.
            for device in devices:
                name = device.get("name")
                if isinstance(name, str) and (driver, pool_name, name) in allocated:
                    _consume(counters, device)
            for device in devices:
                seen_devices += 1
                if seen_devices > MAX_NODE_DEVICES or len(cards) == MAX_CARDS:
                    break
                card = _dra_card(driver, pool_name, device, allocated, counters)
                if card is not None:
                    cards.append(card)
        if not cards and incomplete:
            return NodeGPUs(
                Source.DRA,
                problem="ResourceSlices: incomplete pool "
                + ", ".join(incomplete[:4])
                + ": the driver is still publishing it",
            )
        return NodeGPUs(Source.DRA, tuple(cards))


def _consume(counters: dict[str, dict[str, int]], device: Mapping[str, Any]) -> None:
    for use in _as_list(device.get("consumesCounters"))[:32]:
        use = _as_map(use)
        have = counters.get(str(use.get("counterSet")))
        if have is None:
            continue
        for name, amount in _counter_values(use.get("counters")).items():
            if name in have:
                have[name] -= amount


def _counters_fit(counters: dict[str, dict[str, int]], device: Mapping[str, Any]) -> bool:
    for use in _as_list(device.get("consumesCounters"))[:32]:
        use = _as_map(use)
        have = counters.get(str(use.get("counterSet")), {})
        for name, amount in _counter_values(use.get("counters")).items():
            if have.get(name, 0) < amount:
                return False
    return True


def _dra_card(
    driver: str,
    pool: str,
    device: Mapping[str, Any],
    allocated: Mapping[tuple[str, str, str], _Allocated],
    counters: dict[str, dict[str, int]],
) -> Card | None:
    name = device.get("name")
    if not isinstance(name, str):
        return None
    attrs = _as_map(device.get("attributes"))
    kind = _attribute(attrs, driver, "type")
    if kind and kind != "gpu":
        return None
    capacity = _as_map(_as_map(device.get("capacity")).get("memory"))
    memory = _quantity(capacity.get("value"))
    if memory is None:
        return None
    shared = device.get("allowMultipleAllocations") is True
    taken = allocated.get((driver, pool, name))
    why = ""
    used = 0
    if taken is not None:
        if taken.whole or not shared:
            why = "allocated in a ResourceClaim"
        used = taken.memory
    elif not _counters_fit(counters, device):
        why = "its shared counters are used by allocated devices"
    for taint in _as_list(device.get("taints"))[:16]:
        taint = _as_map(taint)
        if taint.get("effect") in ("NoSchedule", "NoExecute"):
            why = why or f"tainted {str(taint.get('key'))[:128]}"
    return Card(
        f"{driver}/{pool}/{name}",
        memory,
        used=used,
        exclusive=not shared,
        available=not why,
        why=why,
        product=_attribute(attrs, driver, "productName", "model", "product"),
        uuid=_attribute(attrs, driver, "uuid"),
        policy=_policy(capacity) if shared else None,
    )


# -- precedence --------------------------------------------------------------------------


def read_node_gpus(
    node: NodeInfo, dra: DraInventory | None, berth_annotation: str
) -> NodeGPUs | None:
    """The node's cards from its first source (DRA, GFD, HAMi, Berth's
    annotation ``berth_annotation``); None when it has none of them."""
    if dra is not None:
        found = dra.node_gpus(node.name)
        if found is not None:
            return found
    labels = node.node.labels
    if GFD_COUNT_LABEL in labels:
        return parse_gfd_labels(labels)
    annotations = node.node.annotations
    hami = annotations.get(HAMI_ANNOTATION)
    if hami is not None:
        return parse_hami_annotation(hami)
    text = annotations.get(berth_annotation)
    if text is None:
        return None
    try:
        memories = parse_berth_cards(text)
    except ValueError as exc:
        return NodeGPUs(Source.BERTH, problem=f"node annotation {berth_annotation}: {exc}")
    return NodeGPUs(Source.BERTH, tuple(Card(str(i), m) for i, m in enumerate(memories)))


@dataclass(slots=True)
class CardUse:
    """What the pods on a node take of each of its cards (lists aligned with
    ``NodeGPUs.cards``): free bytes and the number of pods given the card."""

    free: list[int]
    pods: list[int]

    def fits(self, card_index: int, card: Card, need: int) -> bool:
        """Can a pod needing ``need`` bytes have this card?"""
        if not card.available:
            return False
        pods = self.pods[card_index]
        if card.exclusive and pods:
            return False
        if card.max_pods is not None and pods >= card.max_pods:
            return False
        free = self.free[card_index]
        consumed = card.consumes(need)
        if need > free or consumed > free:
            return False
        return card.policy is None or not card.policy.violated_by(consumed)

    def best_fit(self, cards: Sequence[Card], need: int) -> int | None:
        """The card with the least free memory that still holds ``need``
        (lowest position among equals), so big cards stay whole for big
        pods; None when no card does."""
        best: int | None = None
        for i, card in enumerate(cards):
            if self.fits(i, card, need) and (best is None or self.free[i] < self.free[best]):
                best = i
        return best


def card_use(
    gpus: NodeGPUs,
    node: NodeInfo,
    card_key: str,
    memory_key: str,
    exclude_uid: str = "",
    dra: DraInventory | None = None,
) -> CardUse:
    """Each card's memory less what its source says is used and what the
    node's pods (other than ``exclude_uid``) were given: a pod whose
    ``card_key`` annotation names a card takes its ``memory_key`` bytes
    there (the whole card when it is exclusive). A pod a ResourceClaim
    allocating that device is reserved for is counted once, by the claim.
    On a node HAMi describes, a pod with HAMi's
    ``hami.io/vgpu-devices-allocated`` takes what that annotation records.
    Annotations that name no card, or a memory that is not a quantity, are
    not counted (logged at debug level)."""
    cards = gpus.cards
    free = [c.memory - c.used for c in cards]
    pods = [0] * len(cards)
    if not cards:
        return CardUse(free, pods)
    position = {c.id: i for i, c in enumerate(cards)}
    for uid, other in node.pods.items():
        if uid == exclude_uid:
            continue
        annotations = other.proto.annotations
        if gpus.source is Source.HAMI and HAMI_POD_ANNOTATION in annotations:
            # A pod HAMi's scheduler placed: what it recorded it gave the pod.
            for device_id, used in parse_hami_pod_devices(annotations[HAMI_POD_ANNOTATION]):
                at = position.get(device_id)
                if at is not None:
                    free[at] -= used
                    pods[at] += 1
            continue
        text = annotations.get(card_key)
        if text is None:
            continue
        card_id = parse_card_id(text)
        i = None if card_id is None else position.get(card_id)
        if i is None:
            log.debug(
                "pod %s on node %s has %s=%s, not a card of the node (%s): not counted",
                other.key,
                node.name,
                card_key,
                shorten(text),
                gpus.name(),
            )
            continue
        card = cards[i]
        if dra is not None and gpus.source is Source.DRA and uid in dra.consumers(card.id):
            continue
        try:
            need = parse_memory(annotations.get(memory_key, "0"))
        except ValueError as exc:
            log.debug(
                "pod %s on node %s: %s %s: not counted", other.key, node.name, memory_key, exc
            )
            continue
        free[i] -= card.consumes(need)
        pods[i] += 1
    return CardUse(free, pods)
