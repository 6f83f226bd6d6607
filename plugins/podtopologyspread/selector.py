"""Pod label selectors as PodTopologySpread reads them.

The semantics are apimachinery's (meta/v1 LabelSelectorAsSelector,
labels.Selector.Matches/Empty/Requirements/Add, labels.SelectorFromSet):

* an unset selector (``nil``) matches nothing: ``Selector.nothing``;
* a set selector with no entries matches everything and is *empty*
  (``Selector.empty``): PodTopologySpread counts no pods with it
  (common.go, countPodsMatchSelector) although it matches the incoming pod;
* ``matchLabels`` entries are ``key = value`` requirements; expressions know
  ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``; any other operator, a bad
  key or a bad value is an error (labels.NewRequirement).

Parsed selectors are msgspec Structs, so they travel in CycleState.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import msgspec

from berth.api.v1 import cluster_pb2 as pb
from berth.plugins.nodeaffinity.selector import label_key_errors, label_value_errors

__all__ = [
    "EVERYTHING",
    "NOTHING",
    "Requirement",
    "Selector",
    "SelectorError",
    "selector_from_proto",
    "selector_from_set",
]

# selection.Operator spellings as LabelSelectorAsSelector maps them.
IN: Final = "In"
NOT_IN: Final = "NotIn"
EXISTS: Final = "Exists"
DOES_NOT_EXIST: Final = "DoesNotExist"


class SelectorError(ValueError):
    """A selector that does not parse (upstream's LabelSelectorAsSelector error)."""


class Requirement(msgspec.Struct, frozen=True, array_like=True):
    """labels.Requirement: ``key`` ``operator`` ``values`` (Equals is In with
    one value)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """labels.Requirement.Matches."""
        op = self.operator
        if op == IN:
            value = labels.get(self.key)
            return value is not None and value in self.values
        if op == NOT_IN:
            value = labels.get(self.key)
            return value is None or value not in self.values
        if op == EXISTS:
            return self.key in labels
        return self.key not in labels  # DoesNotExist


class Selector(msgspec.Struct, frozen=True, array_like=True):
    """labels.Selector: ``nothing`` for labels.Nothing(), else the AND of
    ``requirements`` (none: labels.Everything())."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    @property
    def empty(self) -> bool:
        """Selector.Empty: no requirements (Nothing is not empty)."""
        return not self.nothing and not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        return all(r.matches(labels) for r in self.requirements)

    def add(self, *requirements: Requirement) -> Selector:
        """Selector.Add (Nothing stays Nothing)."""
        if self.nothing:
            return self
        return Selector(self.requirements + requirements)


NOTHING: Final = Selector(nothing=True)
EVERYTHING: Final = Selector()


def _requirement(key: str, op: str, values: tuple[str, ...], path: str) -> Requirement:
    """labels.NewRequirement's checks for the operators selectors use."""
    errors = [f"{path}.key: {e}" for e in label_key_errors(key)]
    if op in (IN, NOT_IN) and not values:
        errors.append(f"{path}.values: for 'in', 'notin' operators, values set can't be empty")
    if op in (EXISTS, DOES_NOT_EXIST) and values:
        errors.append(f"{path}.values: values set must be empty for exists and does not exist")
    for i, v in enumerate(values):
        errors += [f"{path}.values[{i}]: {e}" for e in label_value_errors(v)]
    if errors:
        raise SelectorError("; ".join(errors))
    return Requirement(key, op, values)


def selector_from_proto(sel: pb.LabelSelector | None, path: str = "labelSelector") -> Selector:
    """metav1.LabelSelectorAsSelector: None (unset) is Nothing; set with no
    entries is Everything. SelectorError names the bad entry."""
    if sel is None:
        return NOTHING
    if not sel.match_labels and not sel.match_expressions:
        return EVERYTHING
    reqs: list[Requirement] = []
    for key in sorted(sel.match_labels):
        reqs.append(_requirement(key, IN, (sel.match_labels[key],), f"{path}.matchLabels[{key}]"))
    for i, expr in enumerate(sel.match_expressions):
        where = f"{path}.matchExpressions[{i}]"
        if expr.operator not in (IN, NOT_IN, EXISTS, DOES_NOT_EXIST):
            raise SelectorError(
                f'{where}.operator: "{expr.operator}" is not a valid label selector operator'
            )
        reqs.append(_requirement(expr.key, expr.operator, tuple(expr.values), where))
    return Selector(tuple(reqs))


def selector_from_json(sel: object, path: str) -> Selector:
    """LabelSelectorAsSelector over a decoded JSON LabelSelector (a
    ReplicaSet's or StatefulSet's ``spec.selector``)."""
    if sel is None:
        return NOTHING
    if not isinstance(sel, Mapping):
        raise SelectorError(f"{path}: not an object")
    proto = pb.LabelSelector()
    labels = sel.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        raise SelectorError(f"{path}.matchLabels: not an object")
    proto.match_labels.update({str(k): str(v) for k, v in labels.items()})
    exprs = sel.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise SelectorError(f"{path}.matchExpressions: not a list")
    for e in exprs:
        if not isinstance(e, Mapping):
            raise SelectorError(f"{path}.matchExpressions: an entry is not an object")
        proto.match_expressions.add(
            key=str(e.get("key", "")),
            operator=str(e.get("operator", "")),
            values=[str(v) for v in e.get("values") or []],
        )
    return selector_from_proto(proto, path)


def selector_from_set(labels: Mapping[str, str]) -> Selector:
    """labels.SelectorFromSet (values taken as they are): one ``key = value``
    requirement per entry; an empty set is Everything."""
    return Selector(tuple(Requirement(k, IN, (labels[k],)) for k in sorted(labels)))
