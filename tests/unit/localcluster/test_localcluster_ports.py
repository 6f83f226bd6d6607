"""Port selection: defaults move when taken, explicit ports never do."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from berth.dev.localcluster.errors import PortInUseError
from berth.dev.localcluster.ports import PortRequest, choose_ports, free_port, port_is_free


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port with a live listener on it for the duration of the test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def test_port_with_listener_is_not_free(held_port: int) -> None:
    assert not port_is_free(held_port)


def test_free_port_is_free() -> None:
    assert port_is_free(free_port())


def test_default_port_is_kept_when_free() -> None:
    port = free_port()
    assert choose_ports([PortRequest("x", default=port)]) == [port]


def test_taken_default_port_is_replaced_by_a_free_one(held_port: int) -> None:
    [chosen] = choose_ports([PortRequest("kube-apiserver secure port", default=held_port)])
    assert chosen != held_port
    assert port_is_free(chosen)


def test_taken_explicit_port_is_an_error_naming_port_and_purpose(held_port: int) -> None:
    with pytest.raises(PortInUseError) as info:
        choose_ports([PortRequest("etcd client port", default=2379, explicit=held_port)])
    message = str(info.value)
    assert f"127.0.0.1:{held_port}" in message
    assert "etcd client port" in message
    assert "already in use" in message


def test_ports_are_distinct_even_with_equal_defaults(held_port: int) -> None:
    port = free_port()
    chosen = choose_ports([PortRequest("a", default=port), PortRequest("b", default=port)])
    assert chosen[0] == port
    assert chosen[1] != port


def test_explicit_port_cannot_be_used_twice() -> None:
    port = free_port()
    with pytest.raises(PortInUseError):
        choose_ports([PortRequest("a", 1, explicit=port), PortRequest("b", 2, explicit=port)])
