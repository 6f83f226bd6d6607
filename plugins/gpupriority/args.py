"""GPUPriorityPluginArgs: which extended resource GPUPriorityPlugin counts,
and which DRA drivers' ResourceSlices describe GPUs (``draDrivers``, default
``gpu.nvidia.com``, ``gpu.example.com``, ``gpu.amd.com``, ``gpu.intel.com``;
``[]`` turns the DRA source off).

``resourceName`` defaults to ``nvidia.com/gpu``. It must be an extended
resource name as upstream defines one (pkg/apis/core/v1/helper/helpers.go,
IsExtendedResourceName): a domain prefix outside ``kubernetes.io``, and
``requests.<name>`` a valid qualified name (apimachinery IsQualifiedName).
Those are the resources the snapshot keeps as scalar columns; cpu, memory and
the other native resources are not counted in whole devices.
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

from berth.framework.gpus import DEFAULT_DRA_DRIVERS, dra_driver_errors

__all__ = ["DEFAULT_RESOURCE_NAME", "GPUPriorityPluginArgs", "extended_resource_name_errors"]

DEFAULT_RESOURCE_NAME: Final = "nvidia.com/gpu"

_REQUESTS_PREFIX = "requests."
_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN_RE = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_NAME_MAX = 63
_PREFIX_MAX = 253


def extended_resource_name_errors(name: str) -> list[str]:
    """Why ``name`` is not an extended resource name; empty when it is one."""
    if "/" not in name:
        return [
            "not an extended resource name: it needs a domain prefix, "
            f'e.g. "{DEFAULT_RESOURCE_NAME}" (cpu, memory and other native resources '
            "are not counted)"
        ]
    if "kubernetes.io/" in name:
        return ["not an extended resource name: the kubernetes.io namespace holds native resources"]
    if name.startswith(_REQUESTS_PREFIX):
        return [f'not an extended resource name: it must not start with "{_REQUESTS_PREFIX}"']
    prefix, _, rest = (_REQUESTS_PREFIX + name).partition("/")
    errors: list[str] = []
    if "/" in rest:
        errors.append("a resource name has one '/' between its domain prefix and its name")
    elif len(prefix) > _PREFIX_MAX:
        errors.append(
            f"the domain prefix must be no more than {_PREFIX_MAX - len(_REQUESTS_PREFIX)} characters"
        )
    elif not _DNS1123_SUBDOMAIN_RE.match(prefix):
        errors.append(
            "the domain prefix must be a lowercase DNS subdomain: alphanumerics, '-' and '.', "
            "starting and ending with an alphanumeric (e.g. 'nvidia.com')"
        )
    elif not rest:
        errors.append("the name after the '/' must be non-empty")
    elif len(rest) > _NAME_MAX:
        errors.append(f"the name after the '/' must be no more than {_NAME_MAX} characters")
    elif not _NAME_RE.match(rest):
        errors.append(
            "the name after the '/' must consist of alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric (e.g. 'gpu')"
        )
    return errors


class GPUPriorityPluginArgs(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """Args of GPUPriorityPlugin. ``validate()`` raises ValueError as
    ``<field>: <reason>``."""

    # The extended resource whose free count (allocatable minus the requests
    # of the pods on the node) is scored.
    resource_name: str = DEFAULT_RESOURCE_NAME
    # The DRA drivers whose ResourceSlices describe GPUs; [] reads none.
    dra_drivers: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_DRA_DRIVERS))

    def validate(self) -> None:
        driver_errors = dra_driver_errors(self.dra_drivers)
        if driver_errors:
            raise ValueError(f"draDrivers{driver_errors[0]}")
        if not self.resource_name:
            raise ValueError(
                "resourceName: required value: name an extended resource, or leave the field "
                f'out for "{DEFAULT_RESOURCE_NAME}"'
            )
        errors = extended_resource_name_errors(self.resource_name)
        if errors:
            raise ValueError(f"resourceName: invalid value {self.resource_name!r}: {errors[0]}")
