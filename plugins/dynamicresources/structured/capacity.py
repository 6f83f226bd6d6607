"""Consumable capacity: upstream's structured/internal/incubating/
consumable_capacity.go (CmpRequestOverCapacity, calculateConsumedCapacity,
the request policy checks, GetConsumedCapacityFromRequest).

A quantity here is a ``Q``: its value in nano units and the text it is
written as in the result (upstream copies the quantity it picked; a value
rounded up to a step is a new BinarySI quantity).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from berth.framework.units import Quantity

__all__ = [
    "CapacityPolicy",
    "DeviceCapacity",
    "Q",
    "RequestOverCapacityError",
    "binary_si",
    "consumed_capacity",
    "consumed_from_request",
    "fits_capacity",
    "violates_policy",
]

_NANO: Final = 10**9


@dataclass(frozen=True, slots=True)
class Q:
    """A quantity: nano units and its text."""

    nanos: int
    text: str

    def value(self) -> int:
        """Quantity.Value: whole units, rounded up away from zero."""
        return Quantity(self.nanos).value()


@dataclass(frozen=True, slots=True)
class CapacityPolicy:
    """resourceapi.CapacityRequestPolicy. ``has_valid_range`` tells a
    validRange without min from none; ``valid_values`` is None when unset."""

    default: Q | None
    has_valid_range: bool
    range_min: Q | None
    range_max: Q | None
    range_step: Q | None
    valid_values: tuple[Q, ...] | None


@dataclass(frozen=True, slots=True)
class DeviceCapacity:
    """resourceapi.DeviceCapacity: the value and its request policy."""

    value: Q
    policy: CapacityPolicy | None


class RequestOverCapacityError(Exception):
    """A request names a capacity the device does not have (upstream's
    "some requested capacity has not been defined"): the device is skipped."""


def binary_si(value: int) -> str:
    """The canonical text of an integer BinarySI quantity (Quantity.String
    of resource.NewQuantity(value, BinarySI)): below 1024 in magnitude it is
    DecimalSI, otherwise the largest power of 1024 that divides it."""
    if -1024 < value < 1024:
        if value == 0:
            return "0"
        exponent = 0
        while value % 1000 == 0 and exponent < 6:
            value //= 1000
            exponent += 1
        return f"{value}{['', 'k', 'M', 'G', 'T', 'P', 'E'][exponent]}"
    exponent = 0
    while value % 1024 == 0 and exponent < 6:
        value //= 1024
        exponent += 1
    return f"{value}{['', 'Ki', 'Mi', 'Gi', 'Ti', 'Pi', 'Ei'][exponent]}"


def _round_up_range(requested: Q, policy: CapacityPolicy) -> Q:
    """roundUpRange: at least min; with a step, the next min + n*step."""
    assert policy.range_min is not None
    if requested.nanos < policy.range_min.nanos:
        return policy.range_min
    if policy.range_step is None:
        return requested
    step = policy.range_step.value()
    low = policy.range_min.value()
    if step <= 0:
        return requested
    added = requested.value() - low
    n = abs(added) // step * (1 if added >= 0 else -1)  # Go's truncating division
    if added - n * step != 0:
        n += 1
    value = low + step * n
    return Q(value * _NANO, binary_si(value))


def _round_up_valid_values(requested: Q, values: tuple[Q, ...]) -> Q:
    """roundUpValidValues: the first valid value at least the request."""
    for v in values:
        if requested.nanos <= v.nanos:
            return v
    return requested


def consumed_capacity(requested: Q | None, capacity: DeviceCapacity) -> Q:
    """calculateConsumedCapacity."""
    policy = capacity.policy
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default
        return capacity.value
    if policy is None:
        return requested
    if policy.has_valid_range and policy.range_min is not None:
        return _round_up_range(requested, policy)
    if policy.valid_values is not None:
        return _round_up_valid_values(requested, policy.valid_values)
    return requested


def violates_policy(consumed: Q, policy: CapacityPolicy | None) -> bool:
    """violatesPolicy. Upstream compares with the default by struct equality
    of the quantity; API validation keeps the default inside the policy, so
    comparing values gives the same answer."""
    if policy is None:
        return False
    if policy.default is not None and consumed.nanos == policy.default.nanos:
        return False
    if policy.has_valid_range:
        if policy.range_max is not None and consumed.nanos > policy.range_max.nanos:
            return True
        if policy.range_step is not None:
            step = policy.range_step.value()
            low = policy.range_min.value() if policy.range_min is not None else 0
            if step != 0 and (consumed.value() - low) % step != 0:
                return True
        return False
    if policy.valid_values:
        return all(consumed.nanos != v.nanos for v in policy.valid_values)
    return False


def fits_capacity(
    current: Mapping[str, int] | None,
    requests: Mapping[str, Q] | None,
    capacity: Mapping[str, DeviceCapacity],
    allocating: Mapping[str, int] | None,
) -> bool:
    """CmpRequestOverCapacity: whether the request, rounded by each
    capacity's policy, is allowed by the policy and fits beside what is
    allocated (``current``) and being allocated (``allocating``). Raises
    RequestOverCapacityError when the request names an unknown capacity."""
    if requests:
        for name in requests:
            if name not in capacity:
                raise RequestOverCapacityError("some requested capacity has not been defined")
    for name, cap in capacity.items():
        requested = requests.get(name) if requests else None
        consumed = consumed_capacity(requested, cap)
        if violates_policy(consumed, cap.policy):
            return False
        total = consumed.nanos
        if current:
            total += current.get(name, 0)
        if allocating:
            total += allocating.get(name, 0)
        if total > cap.value.nanos:
            return False
    return True


def consumed_from_request(
    requests: Mapping[str, Q] | None, capacity: Mapping[str, DeviceCapacity]
) -> dict[str, Q]:
    """GetConsumedCapacityFromRequest: what one share consumes of each of
    the device's capacities."""
    return {
        name: consumed_capacity(requests.get(name) if requests else None, cap)
        for name, cap in capacity.items()
    }
