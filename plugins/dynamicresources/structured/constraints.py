"""Claim constraints: upstream's matchAttributeConstraint
(structured/internal/incubating/allocator_incubating.go) and
distinctAttributeConstraint (incubating/constraint.go), with lookupAttribute.

Constraints are monotonic: once ``add`` refuses a device, more devices never
make it accept, which lets the search stop early. Every accepted ``add`` is
undone by exactly one ``remove`` with the same arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

from berth.plugins.dynamicresources.structured.pools import DeviceRecord

__all__ = ["Constraint", "DistinctAttribute", "MatchAttribute", "lookup_attribute"]

# The value fields of a resourceapi.DeviceAttribute, in the order upstream
# tests them.
_KINDS: Final = ("string", "int", "bool", "version")


def lookup_attribute(device: DeviceRecord, driver: str, name: str) -> Mapping[str, Any] | None:
    """lookupAttribute: the fully qualified name, or its identifier when the
    domain is the device's driver."""
    attrs = device.attributes
    attr = attrs.get(name)
    if isinstance(attr, Mapping):
        return attr
    domain, sep, ident = name.partition("/")
    if not sep or domain != driver:
        return None
    attr = attrs.get(ident)
    return attr if isinstance(attr, Mapping) else None


def _typed_value(attr: Mapping[str, Any]) -> tuple[str, Any] | None:
    """The attribute's kind and value (the first value field set), None
    for an attribute with none (an unknown type)."""
    for kind in _KINDS:
        value = attr.get(kind)
        if value is not None:
            return kind, value
    return None


class Constraint(Protocol):
    def add(self, request: str, sub_request: str, device: DeviceRecord, driver: str) -> bool: ...
    def remove(self, request: str, sub_request: str, device: DeviceRecord, driver: str) -> None: ...


def _applies(request_names: frozenset[str], request: str, sub_request: str) -> bool:
    """Whether a constraint naming ``request_names`` covers the (sub)request:
    no names cover all; a subrequest is covered by its parent's name or by
    ``parent/sub``."""
    if not request_names:
        return True
    if not sub_request:
        return request in request_names
    return request in request_names or f"{request}/{sub_request}" in request_names


class MatchAttribute:
    """matchAttributeConstraint: every device has the attribute, all with
    the same value."""

    __slots__ = ("attribute_name", "num_devices", "request_names", "value")

    def __init__(self, request_names: frozenset[str], attribute_name: str) -> None:
        self.request_names = request_names
        self.attribute_name = attribute_name
        self.value: tuple[str, Any] | None = None
        self.num_devices = 0

    def add(self, request: str, sub_request: str, device: DeviceRecord, driver: str) -> bool:
        if not _applies(self.request_names, request, sub_request):
            return True
        attr = lookup_attribute(device, driver, self.attribute_name)
        if attr is None:
            return False
        typed = _typed_value(attr)
        if self.num_devices == 0:
            self.value = typed
            self.num_devices = 1
            return True
        if typed is None or typed != self.value:
            return False
        self.num_devices += 1
        return True

    def remove(self, request: str, sub_request: str, device: DeviceRecord, driver: str) -> None:
        if not _applies(self.request_names, request, sub_request):
            return
        self.num_devices -= 1


class DistinctAttribute:
    """distinctAttributeConstraint: every device has the attribute, no two
    with the same value. As upstream, values are remembered per request name
    (a second device of the same request replaces the first's entry)."""

    __slots__ = ("attribute_name", "num_devices", "request_names", "values")

    def __init__(self, request_names: frozenset[str], attribute_name: str) -> None:
        self.request_names = request_names
        self.attribute_name = attribute_name
        self.values: dict[str, Mapping[str, Any]] = {}
        self.num_devices = 0

    def add(self, request: str, sub_request: str, device: DeviceRecord, driver: str) -> bool:
        if not _applies(self.request_names, request, sub_request):
            return True
        attr = lookup_attribute(device, driver, self.attribute_name)
        if attr is None:
            return False
        if self.num_devices == 0:
            self.values[request] = attr
            self.num_devices = 1
            return True
        if not self._distinct(attr):
            return False
        self.values[request] = attr
        self.num_devices += 1
        return True

    def _distinct(self, attr: Mapping[str, Any]) -> bool:
        """matchesAttribute: no remembered value of the same kind is equal;
        an attribute of unknown type is never distinct."""
        typed = _typed_value(attr)
        for other in self.values.values():
            if typed is None:
                return False
            kind, value = typed
            if other.get(kind) is not None and other.get(kind) == value:
                return False
        return True

    def remove(self, request: str, sub_request: str, device: DeviceRecord, driver: str) -> None:
        if not _applies(self.request_names, request, sub_request):
            return
        self.values.pop(request, None)
        self.num_devices -= 1
