from __future__ import annotations

import msgspec
import pytest

from berth.framework.cycle_state import CycleState, StateDecodeError, StateError, StateKey


class Data(msgspec.Struct):
    cpu: int
    names: list[str]


KEY = StateKey("Test/data", Data)
OTHER = StateKey("Test/other", Data)


def test_values_round_trip_through_the_wire_form() -> None:
    s = CycleState()
    s.write(KEY, Data(5, ["a"]))
    s.skip_filter_plugins.add("X")
    wire = s.encode()
    back = CycleState.decode(wire, skip_filter=["X"])
    assert back.read(KEY) == Data(5, ["a"])
    assert back.skip_filter_plugins == {"X"}


def test_missing_key_fails_loudly() -> None:
    with pytest.raises(StateError, match="Test/data"):
        CycleState().read(KEY)
    assert CycleState().get(KEY) is None


def test_malformed_entry_is_a_decode_error_naming_the_key() -> None:
    back = CycleState.decode({"Test/data": b"\x93not-msgpack-of-Data"})
    with pytest.raises(StateDecodeError, match="Test/data"):
        back.read(KEY)


def test_clone_is_independent() -> None:
    s = CycleState()
    s.write(KEY, Data(1, []))
    c = s.clone()
    c.write(KEY, Data(2, []))
    c.skip_score_plugins.add("Y")
    assert s.read(KEY).cpu == 1
    assert not s.skip_score_plugins


SCHEDULING = StateKey("Test/scheduling-only", Data, scheduling_only=True)


def test_binding_encoding_leaves_out_scheduling_only_keys() -> None:
    s = CycleState()
    s.write(KEY, Data(1, []))
    s.write(SCHEDULING, Data(2, ["n1"]))
    assert set(s.encode()) == {"Test/data", "Test/scheduling-only"}
    assert set(s.encode(binding=True)) == {"Test/data"}
    # Entries received encoded and never read are left out the same way.
    back = CycleState.decode(s.encode())
    assert set(back.encode(binding=True)) == {"Test/data"}
    assert back.read(SCHEDULING) == Data(2, ["n1"])


class InMemory:
    """A value kept in another form than its wire form (StateKey's Wire)."""

    Wire = Data

    def __init__(self, cpu: int) -> None:
        self.cpu = cpu

    def to_wire(self) -> Data:
        return Data(self.cpu, [str(self.cpu)])

    @classmethod
    def from_wire(cls, wire: Data) -> InMemory:
        return cls(wire.cpu)


IN_MEMORY = StateKey("Test/in-memory", InMemory)


def test_a_value_with_a_wire_form_travels_as_it() -> None:
    s = CycleState()
    s.write(IN_MEMORY, InMemory(7))
    wire = s.encode()
    assert msgspec.msgpack.decode(wire["Test/in-memory"], type=Data) == Data(7, ["7"])
    back = CycleState.decode(wire).read(IN_MEMORY)
    assert isinstance(back, InMemory) and back.cpu == 7
    # Decoding is typed by the wire form: anything else is a decode error.
    bad = CycleState.decode({"Test/in-memory": msgspec.msgpack.encode({"cpu": "x"})})
    with pytest.raises(StateDecodeError, match="Test/in-memory"):
        bad.read(IN_MEMORY)
