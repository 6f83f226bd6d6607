"""Does a pod tolerate a node taint?

The matching rules are upstream's Toleration.ToleratesTaint and
TolerationsTolerateTaint (k8s.io/component-helpers/scheduling/corev1/helpers.go).
NodeUnschedulable, TaintToleration and PodTopologySpread (its node taints
inclusion policy) use them.

Rules, in upstream's order:

* a toleration with an effect matches only taints with that effect; an empty
  effect matches every effect;
* a toleration with a key matches only taints with that key; an empty key
  matches every key (the API allows this only with operator Exists);
* operator Exists matches any value; Equal, or an empty operator, needs the
  values to be equal;
* Lt and Gt (numeric comparison) sit behind upstream's alpha feature gate
  TaintTolerationComparisonOperators, off by default: they match nothing here,
  as upstream does with the gate off. Any other operator matches nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

# The taint the node lifecycle controller puts on cordoned nodes
# (v1.TaintNodeUnschedulable) and the effects a taint can have.
TAINT_NODE_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
EFFECT_NO_SCHEDULE = "NoSchedule"
EFFECT_PREFER_NO_SCHEDULE = "PreferNoSchedule"
EFFECT_NO_EXECUTE = "NoExecute"

OP_EXISTS = "Exists"
OP_EQUAL = "Equal"

__all__ = [
    "EFFECT_NO_EXECUTE",
    "EFFECT_NO_SCHEDULE",
    "EFFECT_PREFER_NO_SCHEDULE",
    "OP_EQUAL",
    "OP_EXISTS",
    "TAINT_NODE_UNSCHEDULABLE",
    "TaintLike",
    "TolerationLike",
    "tolerates_taint",
    "tolerations_tolerate_taint",
]


class TaintLike(Protocol):
    """A taint: ``berth.v1.Taint`` or anything with the same fields."""

    @property
    def key(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def effect(self) -> str: ...


class TolerationLike(Protocol):
    """A toleration: ``berth.v1.Toleration`` or anything with the same fields."""

    @property
    def key(self) -> str: ...
    @property
    def operator(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def effect(self) -> str: ...


def tolerates_taint(toleration: TolerationLike, taint: TaintLike) -> bool:
    """Upstream's Toleration.ToleratesTaint (comparison operators gated off)."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    op = toleration.operator
    if op in ("", OP_EQUAL):
        return toleration.value == taint.value
    return op == OP_EXISTS


def tolerations_tolerate_taint(tolerations: Iterable[TolerationLike], taint: TaintLike) -> bool:
    """Upstream's TolerationsTolerateTaint: does any toleration match?"""
    return any(tolerates_taint(t, taint) for t in tolerations)
