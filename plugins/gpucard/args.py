"""GPUCardFitArgs: where GPUCardFit reads a node's cards and the pod's need,
and where it writes the card a pod got.

A node's cards come from the first of DRA ResourceSlices, GPU Feature
Discovery labels, HAMi's annotation and Berth's own annotation
(framework/gpus.py). The keys Berth defines are changeable here:

* ``nodeCardsAnnotation`` (node, default ``berth.dev/gpu-cards``): a JSON
  list with one entry per card, the memory pods may use on that card
  (a quantity string such as ``"40Gi"``/``"40G"``, or an integer of bytes);
  card ``i`` is the list's entry ``i``;
* ``podMemoryAnnotation`` (pod, default ``berth.dev/gpu-memory``): the GPU
  memory the pod needs on one card, a quantity;
* ``podCardAnnotation`` (pod, default ``berth.dev/gpu-card``): the id of
  the card the pod was given (an index, a HAMi device id, or
  ``<driver>/<pool>/<device>``), written by GPUCardFit at Reserve (on the
  caller's assumed copy) and PreBind (on the pod, for the device plugin).

``draDrivers`` (default ``gpu.nvidia.com``, ``gpu.example.com``,
``gpu.amd.com``, ``gpu.intel.com``) names the DRA drivers whose
ResourceSlices describe GPU cards; ``[]`` turns the DRA source off (and the
reads of ResourceSlices and ResourceClaims with it).

Each key must be a valid annotation key (apimachinery IsQualifiedName: an
optional DNS-subdomain prefix and ``/``, then a name of at most 63
alphanumerics, ``-``, ``_``, ``.``); the two pod keys must differ.
``validate()`` raises ValueError as ``<field>: <reason>``.
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

from berth.framework.gpus import DEFAULT_DRA_DRIVERS, dra_driver_errors

__all__ = [
    "DEFAULT_NODE_CARDS_ANNOTATION",
    "DEFAULT_POD_CARD_ANNOTATION",
    "DEFAULT_POD_MEMORY_ANNOTATION",
    "GPUCardFitArgs",
    "annotation_key_errors",
]

DEFAULT_NODE_CARDS_ANNOTATION: Final = "berth.dev/gpu-cards"
DEFAULT_POD_MEMORY_ANNOTATION: Final = "berth.dev/gpu-memory"
DEFAULT_POD_CARD_ANNOTATION: Final = "berth.dev/gpu-card"

_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN_RE = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_NAME_MAX = 63
_PREFIX_MAX = 253


def annotation_key_errors(key: str) -> list[str]:
    """Why ``key`` is not a valid annotation key (IsQualifiedName); empty when
    it is one."""
    if not key:
        return ["must not be empty"]
    prefix, slash, name = key.rpartition("/")
    if slash and "/" in prefix:
        return ["an annotation key has at most one '/'"]
    if slash:
        if not prefix:
            return ["the prefix before the '/' must be non-empty"]
        if len(prefix) > _PREFIX_MAX:
            return [f"the prefix must be no more than {_PREFIX_MAX} characters"]
        if not _DNS1123_SUBDOMAIN_RE.match(prefix):
            return [
                "the prefix must be a lowercase DNS subdomain: alphanumerics, '-' and '.', "
                "starting and ending with an alphanumeric (e.g. 'example.com')"
            ]
    if not name:
        return ["the name part must be non-empty"]
    if len(name) > _NAME_MAX:
        return [f"the name part must be no more than {_NAME_MAX} characters"]
    if not _NAME_RE.match(name):
        return [
            "the name part must consist of alphanumerics, '-', '_' or '.', starting and ending "
            "with an alphanumeric (e.g. 'gpu-card')"
        ]
    return []


class GPUCardFitArgs(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """Args of GPUCardFit (all optional)."""

    node_cards_annotation: str = DEFAULT_NODE_CARDS_ANNOTATION
    pod_memory_annotation: str = DEFAULT_POD_MEMORY_ANNOTATION
    pod_card_annotation: str = DEFAULT_POD_CARD_ANNOTATION
    # The DRA drivers whose ResourceSlices describe GPUs; [] reads none.
    dra_drivers: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_DRA_DRIVERS))

    def validate(self) -> None:
        errors = [f"draDrivers{e}" for e in dra_driver_errors(self.dra_drivers)]
        for field, key, default in (
            ("nodeCardsAnnotation", self.node_cards_annotation, DEFAULT_NODE_CARDS_ANNOTATION),
            ("podMemoryAnnotation", self.pod_memory_annotation, DEFAULT_POD_MEMORY_ANNOTATION),
            ("podCardAnnotation", self.pod_card_annotation, DEFAULT_POD_CARD_ANNOTATION),
        ):
            if not key:
                errors.append(
                    f"{field}: required value: an annotation key, or leave the field out "
                    f"for {default!r}"
                )
                continue
            problems = annotation_key_errors(key)
            if problems:
                errors.append(f"{field}: invalid value {key!r}: {problems[0]}")
        if not errors and self.pod_card_annotation == self.pod_memory_annotation:
            errors.append(
                f"podCardAnnotation: must differ from podMemoryAnnotation "
                f"({self.pod_memory_annotation!r}): the plugin writes the card there"
            )
        if errors:
            raise ValueError("; ".join(errors))
