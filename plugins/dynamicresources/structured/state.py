"""What is allocated already: upstream's structured/schedulerapi/types.go
(DeviceID, SharedDeviceID, AllocatedState, ConsumedCapacity) and
structured/internal/allocatedstate.go (IsDeviceAllocated), with the builder
the scheduler uses (pkg/scheduler/framework/plugins/dynamicresources/
allocateddevices.go foreachAllocatedDevice) over allocated claims' JSON.

Quantities are kept as nano units (berth.framework.units.Quantity.nanos), so
sums and comparisons are exact integers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from berth.framework.units import QuantityError, parse_quantity

__all__ = [
    "AllocatedState",
    "ConsumedCapacity",
    "DeviceID",
    "SharedDeviceID",
    "add_capacity",
    "device_id_text",
]

DeviceID = tuple[str, str, str]
"""(driver, pool, device): schedulerapi.DeviceID."""

SharedDeviceID = tuple[str, str, str, str]
"""(driver, pool, device, shareID): schedulerapi.SharedDeviceID ("" without a share)."""

ConsumedCapacity = dict[str, int]
"""Capacity name -> consumed amount in nano units (schedulerapi.ConsumedCapacity)."""


def device_id_text(device_id: DeviceID) -> str:
    """DeviceID.String: driver/pool/device."""
    return "/".join(device_id)


def add_capacity(into: ConsumedCapacity, added: Mapping[str, int]) -> None:
    """ConsumedCapacity.Add."""
    for name, nanos in added.items():
        into[name] = into.get(name, 0) + nanos


@dataclass
class AllocatedState:
    """schedulerapi.AllocatedState: devices allocated to claims with a
    dedicated allocation, shares of devices that allow multiple allocations,
    and the capacity those shares consume, summed per device."""

    allocated_devices: set[DeviceID] = field(default_factory=set)
    allocated_shared_device_ids: set[SharedDeviceID] = field(default_factory=set)
    aggregated_capacity: dict[DeviceID, ConsumedCapacity] = field(default_factory=dict)

    def is_device_allocated(self, device_id: DeviceID) -> bool:
        """internal.IsDeviceAllocated: dedicated, shared or consuming capacity."""
        if device_id in self.allocated_devices or device_id in self.aggregated_capacity:
            return True
        return any(shared[:3] == device_id for shared in self.allocated_shared_device_ids)

    def add_claim(self, claim: Mapping[str, Any], consumable_capacity: bool = True) -> None:
        """Records the devices of one claim's ``status.allocation``, as
        foreachAllocatedDevice does: admin-access results are not allocations;
        with consumable capacity, a result with a shareID is a share (and its
        consumedCapacity is summed), any other a dedicated device."""
        for result in _allocation_results(claim):
            if result.get("adminAccess") is True:
                continue
            device_id = (
                str(result.get("driver", "")),
                str(result.get("pool", "")),
                str(result.get("device", "")),
            )
            share_id = result.get("shareID")
            if consumable_capacity and share_id is not None:
                self.allocated_shared_device_ids.add((*device_id, str(share_id)))
                consumed = result.get("consumedCapacity")
                if isinstance(consumed, Mapping):
                    add_capacity(
                        self.aggregated_capacity.setdefault(device_id, {}),
                        _parse_capacity_map(consumed),
                    )
                continue
            self.allocated_devices.add(device_id)

    @classmethod
    def from_claims(
        cls, claims: Iterable[Mapping[str, Any]], consumable_capacity: bool = True
    ) -> AllocatedState:
        """The state of every allocated claim in ``claims`` (unallocated ones
        add nothing)."""
        state = cls()
        for claim in claims:
            state.add_claim(claim, consumable_capacity)
        return state


def _allocation_results(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = claim.get("status")
    if not isinstance(status, Mapping):
        return []
    allocation = status.get("allocation")
    if not isinstance(allocation, Mapping):
        return []
    devices = allocation.get("devices")
    if not isinstance(devices, Mapping):
        return []
    results = devices.get("results")
    if not isinstance(results, list):
        return []
    return [r for r in results if isinstance(r, Mapping)]


def _parse_capacity_map(consumed: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, text in consumed.items():
        try:
            out[str(name)] = parse_quantity(str(text)).nanos
        except QuantityError:
            # The API server only stores valid quantities; a value that does
            # not parse counts as nothing consumed rather than failing every
            # node.
            continue
    return out
