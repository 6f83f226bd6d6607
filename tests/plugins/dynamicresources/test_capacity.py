"""Consumable capacity: the cases of upstream's
structured/internal/incubating/consumable_capacity_test.go
(TestConsumableCapacity), named as upstream names them, over capacity.py and
the ConsumedCapacity bookkeeping of state.py."""

from __future__ import annotations

from typing import Any

import pytest

from berth.framework.units import parse_quantity
from berth.plugins.dynamicresources.structured.capacity import (
    DeviceCapacity,
    Q,
    RequestOverCapacityError,
    binary_si,
    consumed_capacity,
    consumed_from_request,
    fits_capacity,
    violates_policy,
)
from berth.plugins.dynamicresources.structured.pools import DeviceRecord
from berth.plugins.dynamicresources.structured.state import AllocatedState, add_capacity


def _q(text: str) -> Q:
    return Q(parse_quantity(text).nanos, text)


def _capacity(value: str, policy: dict[str, Any] | None) -> DeviceCapacity:
    raw: dict[str, Any] = {"value": value}
    if policy is not None:
        raw["requestPolicy"] = policy
    return DeviceRecord.decode({"name": "d", "capacity": {"c": raw}}).capacity["c"]


def test_add_sub_allocating_consumed_capacity() -> None:
    """add-sub-allocating-consumed-capacity (ConsumedCapacity.Add/Sub/Empty)."""
    allocated: dict[str, int] = {}
    add_capacity(allocated, {"capacity-0": _q("1").nanos})
    assert any(allocated.values())
    add_capacity(allocated, {"capacity-0": -_q("1").nanos})
    assert not any(allocated.values())


def test_insert_remove_allocating_consumed_capacity_collection() -> None:
    """insert-remove-allocating-consumed-capacity-collection, on the state
    built from two shares of one device."""
    share = {"driver": "driver-a", "pool": "pool-1", "device": "device-1", "request": "r"}
    claims = [
        {
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {**share, "shareID": s, "consumedCapacity": {"capacity-0": "1"}}
                        ]
                    }
                }
            }
        }
        for s in ("a", "b")
    ]
    state = AllocatedState.from_claims(claims)
    assert state.aggregated_capacity[("driver-a", "pool-1", "device-1")] == {
        "capacity-0": _q("2").nanos
    }


def test_get_consumed_capacity_from_request() -> None:
    """get-consumed-capacity-from-request: requested value, else the
    policy's default, else the capacity's value."""
    capacity = DeviceRecord.decode(
        {
            "name": "d",
            "capacity": {
                "capacity-0": {
                    "value": "2",
                    "requestPolicy": {"default": "2", "validRange": {"min": "1"}},
                },
                "capacity-1": {
                    "value": "2",
                    "requestPolicy": {"default": "1", "validRange": {"min": "1"}},
                },
                "dummy": {"value": "1"},
            },
        }
    ).capacity
    consumed = consumed_from_request({"capacity-0": _q("1"), "dummy": _q("1")}, capacity)
    assert sorted(consumed) == ["capacity-0", "capacity-1", "dummy"]
    assert {v.nanos for v in consumed.values()} == {_q("1").nanos}


@pytest.mark.parametrize(
    ("requested", "policy", "violates"),
    [
        pytest.param("1", None, False, id="no constraint"),
        pytest.param(
            "1",
            {"default": "1", "validRange": {"min": "1", "max": "2"}},
            False,
            id="less than maximum",
        ),
        pytest.param(
            "2",
            {"default": "1", "validRange": {"min": "1", "max": "1"}},
            True,
            id="more than maximum",
        ),
        pytest.param("1", {"default": "1", "validValues": ["1"]}, False, id="in set"),
        pytest.param("2", {"default": "1", "validValues": ["1"]}, True, id="not in set"),
    ],
)
def test_violate_capacity_sharing(
    requested: str, policy: dict[str, Any] | None, violates: bool
) -> None:
    """violate-capacity-sharing (violatesPolicy)."""
    assert violates_policy(_q(requested), _capacity("10", policy).policy) is violates


@pytest.mark.parametrize(
    ("requested", "value", "policy", "expected"),
    [
        pytest.param(None, "1", {}, "1", id="empty"),
        pytest.param(
            None, "2", {"default": "1", "validRange": {"min": "1"}}, "1", id="min in range"
        ),
        pytest.param(None, "2", {"default": "1", "validValues": ["1"]}, "1", id="default in set"),
        pytest.param(
            "2", "2", {"default": "1", "validRange": {"min": "1"}}, "2", id="more than min in range"
        ),
        pytest.param(
            "1", "2", {"default": "1", "validRange": {"min": "2"}}, "2", id="less than min in range"
        ),
        pytest.param(
            "2",
            "3",
            {"default": "1", "validRange": {"min": "1", "step": "2"}},
            "3",
            id="with step (round up)",
        ),
        pytest.param(
            "2",
            "2",
            {"default": "1", "validRange": {"min": "1", "step": "1"}},
            "2",
            id="with step (no remaining)",
        ),
        pytest.param(
            "2", "3", {"default": "1", "validValues": ["1", "2", "3"]}, "2", id="valid value in set"
        ),
        pytest.param(
            "2", "3", {"default": "1", "validValues": ["1", "3"]}, "3", id="set (round up)"
        ),
        pytest.param(
            "3", "3", {"default": "1", "validValues": ["1", "2"]}, "3", id="larger than set"
        ),
    ],
)
def test_calculate_consumed_capacity(
    requested: str | None, value: str, policy: dict[str, Any], expected: str
) -> None:
    """calculate-consumed-capacity (calculateConsumedCapacity)."""
    got = consumed_capacity(None if requested is None else _q(requested), _capacity(value, policy))
    assert got.nanos == _q(expected).nanos


def test_fits_capacity_counts_allocated_and_allocating() -> None:
    """CmpRequestOverCapacity: what is allocated, being allocated and
    requested must fit in the value; an unknown capacity is an error."""
    capacity = {"c": _capacity("4", None)}
    three = {"c": _q("3")}
    assert fits_capacity(None, three, capacity, None)
    assert not fits_capacity({"c": _q("1").nanos}, three, capacity, {"c": _q("1").nanos})
    assert fits_capacity({"c": _q("1").nanos}, three, capacity, None)
    with pytest.raises(RequestOverCapacityError):
        fits_capacity(None, {"other": _q("1")}, capacity, None)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (4, "4"),
        (1000, "1k"),
        (1023, "1023"),
        (1024, "1Ki"),
        (3 * 2**30, "3Gi"),
        (3000, "3000"),
    ],
)
def test_binary_si_is_quantity_string(value: int, text: str) -> None:
    """A rounded-up value is written as resource.NewQuantity(v, BinarySI)
    prints it."""
    assert binary_si(value) == text
    assert parse_quantity(text).nanos == value * 10**9
