"""StickyNodeArgs: which owner a pod sticks through, and where the node is
recorded.

The defaults suit KubeVirt: a pod's controller is a ``VirtualMachineInstance``,
whose controller is the ``VirtualMachine``; the node is recorded on the
VirtualMachine in the annotation ``example.com/sticky-node``. Any chain of namespaced owners works, e.g. one link
``apps/v1 statefulsets StatefulSet`` to keep every pod of a StatefulSet on
one node.
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

__all__ = [
    "DEFAULT_ANNOTATION_KEY",
    "DEFAULT_OWNER_CHAIN",
    "MAX_CHAIN",
    "WHEN_NODE_GONE",
    "OwnerKind",
    "StickyNodeArgs",
]

DEFAULT_ANNOTATION_KEY: Final = "example.com/sticky-node"
WHEN_NODE_GONE: Final = ("Wait", "Reschedule")
# Longer chains are surely a mistake (KubeVirt's is 2: VMI, then VM).
MAX_CHAIN: Final = 4

_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_KIND = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_VERSION = re.compile(r"^v[0-9]+((alpha|beta)[0-9]+)?$")
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


class OwnerKind(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """One link of the owner chain: a namespaced API resource."""

    # API group, "" for the core group.
    group: str = ""
    version: str
    # Plural resource name, e.g. "virtualmachines".
    resource: str
    # Kind as ownerReferences name it, e.g. "VirtualMachine".
    kind: str

    def errors(self, where: str) -> list[str]:
        out: list[str] = []
        if self.group and (len(self.group) > 253 or not _DNS1123_SUBDOMAIN.match(self.group)):
            out.append(
                f"{where}.group: invalid value {self.group!r}: must be a lowercase DNS "
                "subdomain such as 'kubevirt.io', or empty for the core group"
            )
        if not self.version:
            out.append(f"{where}.version: required value, e.g. 'v1'")
        elif not _VERSION.match(self.version):
            out.append(
                f"{where}.version: invalid value {self.version!r}: must look like v1, "
                "v1beta1 or v1alpha1"
            )
        if not self.resource:
            out.append(f"{where}.resource: required value: the plural resource name")
        elif len(self.resource) > 63 or not _DNS1123_LABEL.match(self.resource):
            out.append(
                f"{where}.resource: invalid value {self.resource!r}: must be the lowercase "
                "plural resource name, e.g. 'virtualmachines'"
            )
        if not self.kind:
            out.append(f"{where}.kind: required value, e.g. 'VirtualMachine'")
        elif not _KIND.match(self.kind):
            out.append(
                f"{where}.kind: invalid value {self.kind!r}: must be a Kind such as "
                "'VirtualMachine' (letters and digits)"
            )
        return out

    @property
    def describe(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource


def _default_chain() -> list[OwnerKind]:
    return [
        OwnerKind(
            group="kubevirt.io",
            version="v1",
            resource="virtualmachineinstances",
            kind="VirtualMachineInstance",
        ),
        OwnerKind(
            group="kubevirt.io", version="v1", resource="virtualmachines", kind="VirtualMachine"
        ),
    ]


DEFAULT_OWNER_CHAIN: Final = tuple(_default_chain())


def _qualified_name_errors(key: str) -> list[str]:
    """apimachinery's IsQualifiedName, which annotation keys must satisfy."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return ["the prefix before '/' must be non-empty"]
    if slash and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return ["the prefix before '/' must be a lowercase DNS subdomain such as 'example.com'"]
    if not name:
        return ["the name part must be non-empty"]
    if len(name) > 63:
        return ["the name part must be no more than 63 characters"]
    if not _NAME_PART.match(name):
        return [
            "the name part must consist of alphanumerics, '-', '_' or '.', starting and "
            "ending with an alphanumeric"
        ]
    return []


class StickyNodeArgs(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """Args of StickyNode (and StickyVM). ``validate()`` raises ValueError as
    ``<field>: <reason>`` (several joined by "; ")."""

    # From the pod's controller up: ownerChain[0] is the kind of the pod's
    # controller, each next one the controller of the one before; the node
    # is recorded on (and read from) the last one.
    owner_chain: list[OwnerKind] = msgspec.field(default_factory=_default_chain)
    # The annotation on the last owner that holds the node's name.
    annotation_key: str = DEFAULT_ANNOTATION_KEY
    # The recorded node is not in the cluster: "Wait" (the owner goes back to
    # that node only; its pods stay pending, reported
    # UnschedulableAndUnresolvable, until the node is back or someone removes
    # the annotation) or "Reschedule" (schedule anywhere; PostBind then
    # records the new node).
    when_node_gone: str = "Wait"

    def validate(self) -> None:
        errors: list[str] = []
        if not self.owner_chain:
            errors.append(
                "ownerChain: required value: at least one owner kind, the kind of the pod's "
                "controller (e.g. VirtualMachineInstance)"
            )
        elif len(self.owner_chain) > MAX_CHAIN:
            errors.append(
                f"ownerChain: too many links ({len(self.owner_chain)}): at most {MAX_CHAIN}"
            )
        for i, link in enumerate(self.owner_chain):
            errors.extend(link.errors(f"ownerChain[{i}]"))
        seen: set[tuple[str, str]] = set()
        for i, link in enumerate(self.owner_chain):
            if (link.group, link.resource) in seen:
                errors.append(
                    f"ownerChain[{i}]: {link.describe} appears twice: an owner cannot own itself"
                )
            seen.add((link.group, link.resource))
        if not self.annotation_key:
            errors.append(
                "annotationKey: required value: the annotation that records the node, e.g. "
                f"{DEFAULT_ANNOTATION_KEY!r}"
            )
        else:
            bad = _qualified_name_errors(self.annotation_key)
            if bad:
                errors.append(f"annotationKey: invalid value {self.annotation_key!r}: {bad[0]}")
        if self.when_node_gone not in WHEN_NODE_GONE:
            errors.append(
                f"whenNodeGone: invalid value {self.when_node_gone!r}: must be "
                + " or ".join(repr(w) for w in WHEN_NODE_GONE)
            )
        if errors:
            raise ValueError("; ".join(errors))

    @property
    def sticky_owner(self) -> OwnerKind:
        """The last link: the owner the node is recorded on."""
        return self.owner_chain[-1]
