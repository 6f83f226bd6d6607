"""Resource name classes, as upstream's v1helper and schedutil define them
(pkg/apis/core/v1/helper/helpers.go: IsExtendedResourceName,
IsPrefixedNativeResource, IsNativeResource, IsHugePageResourceName,
IsAttachableVolumeResourceName; pkg/scheduler/util/utils.go:
IsScalarResourceName) and the qualified-name check behind
metav1validation.ValidateLabelName (apimachinery validation.IsQualifiedName).
"""

from __future__ import annotations

import re

__all__ = [
    "CPU",
    "EPHEMERAL_STORAGE",
    "MEMORY",
    "PODS",
    "is_extended_resource_name",
    "is_scalar_resource_name",
    "qualified_name_errors",
]

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

_DEFAULT_NAMESPACE_PREFIX = "kubernetes.io/"
_REQUESTS_PREFIX = "requests."
_HUGEPAGES_PREFIX = "hugepages-"
_ATTACHABLE_VOLUMES_PREFIX = "attachable-volumes-"

_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN_RE = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_NAME_MAX = 63
_PREFIX_MAX = 253


def qualified_name_errors(value: str) -> list[str]:
    """Why ``value`` is not a qualified name (``[prefix/]name``); empty when
    it is one. Upstream's IsQualifiedName, in plain words."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
        if len(prefix) > _PREFIX_MAX:
            return [f"prefix part must be no more than {_PREFIX_MAX} characters"]
        if not _DNS1123_SUBDOMAIN_RE.match(prefix):
            return [
                "prefix part must be a lowercase DNS subdomain: alphanumerics, '-' and '.', "
                "starting and ending with an alphanumeric (e.g. 'example.com')"
            ]
    else:
        return [
            "a qualified name must consist of a name and an optional DNS subdomain "
            "prefix, separated by one '/' (e.g. 'MyName' or 'example.com/MyName')"
        ]
    if not name:
        return ["name part must be non-empty"]
    if len(name) > _NAME_MAX:
        return [f"name part must be no more than {_NAME_MAX} characters"]
    if not _NAME_RE.match(name):
        return [
            "name part must consist of alphanumerics, '-', '_' or '.', and must start "
            "and end with an alphanumeric (e.g. 'MyName', 'my.name' or '123-abc')"
        ]
    return []


def _is_prefixed_native(name: str) -> bool:
    return _DEFAULT_NAMESPACE_PREFIX in name


def _is_native(name: str) -> bool:
    return "/" not in name or _is_prefixed_native(name)


def is_extended_resource_name(name: str) -> bool:
    """Outside the kubernetes.io namespace, with a domain prefix, and valid as
    a quota name (``requests.<name>``): e.g. ``nvidia.com/gpu``."""
    if _is_native(name) or name.startswith(_REQUESTS_PREFIX):
        return False
    return not qualified_name_errors(_REQUESTS_PREFIX + name)


def is_scalar_resource_name(name: str) -> bool:
    """Resources the scheduler tracks in Resource.scalar: extended,
    hugepages, kubernetes.io-prefixed native and attachable volumes."""
    return (
        is_extended_resource_name(name)
        or name.startswith(_HUGEPAGES_PREFIX)
        or _is_prefixed_native(name)
        or name.startswith(_ATTACHABLE_VOLUMES_PREFIX)
    )
