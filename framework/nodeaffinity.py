"""Node selectors: parse once, match many nodes.

Port of the semantics of
staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go
(NewNodeSelector, NewLazyErrorNodeSelector, NewPreferredSchedulingTerms,
GetRequiredNodeAffinity, RequiredNodeAffinity.Match, PreferredSchedulingTerms.Score).
Label requirements are berth.framework.labels' (labels.NewRequirement,
Requirement.Matches); this module adds the node selector's terms, its fields
and its errors worded as field.Error:

* A term ANDs its ``matchExpressions`` (on node labels) and its
  ``matchFields`` (on node fields); the terms of a selector are ORed. A term
  with neither matches nothing and is dropped; a selector with no terms
  matches nothing.
* Operators: ``In`` (label present, value listed), ``NotIn`` (label absent or
  value not listed), ``Exists``, ``DoesNotExist``, ``Gt``/``Lt`` (label present
  and, read as a base-10 int64, greater/less than the one value).
* ``matchFields`` knows ``In``/``NotIn`` with exactly one value. The only node
  field is ``metadata.name``; any other key reads as "". A node without a name
  has no fields, and then field requirements are not checked at all.
* A requirement that does not parse (bad key, bad value, wrong number of
  values, unknown operator) makes its term match nothing. Required terms
  report nothing (upstream's lazy errors are ignored by the plugin);
  preferred terms refuse the whole list with every error, worded as
  upstream's field errors.

Parsed selectors are msgspec Structs, so they can travel in CycleState.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import msgspec

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.goquote import go_quote
from berth.framework.labels import (
    DOES_NOT_EXIST,
    EXISTS,
    GT,
    IN,
    LT,
    NOT_IN,
    Requirement,
    RequirementError,
    RequirementLike,
    new_requirement,
    requirement_errors,
)

__all__ = [
    "NODE_NAME_FIELD",
    "FieldError",
    "FieldRequirement",
    "PreferredTermLike",
    "RequiredNodeAffinity",
    "SelectorTerm",
    "TermLike",
    "aggregate_message",
    "compile_node_selector",
    "compile_preferred_terms",
    "compile_term",
    "preferred_score",
    "required_node_affinity",
    "selector_matches",
]

# v1.NodeSelectorOperator values for labels and for fields.
_LABEL_OPERATORS: Final = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT)
_FIELD_OPERATORS: Final = (IN, NOT_IN)

# metav1.ObjectNameField: the one node field a selector can name.
NODE_NAME_FIELD: Final = "metadata.name"


# -- the shapes selectors are read from ----------------------------------------
# Both the wire records (berth.v1) and the plugin args (args.py) fit these.


class TermLike(Protocol):
    @property
    def match_expressions(self) -> Sequence[RequirementLike]: ...
    @property
    def match_fields(self) -> Sequence[RequirementLike]: ...


class PreferredTermLike(Protocol):
    @property
    def weight(self) -> int: ...
    @property
    def preference(self) -> TermLike: ...


# -- field errors ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldError:
    """One parse error, printed like apimachinery's field.Error:
    ``<path>: <Type>: <value>: <detail>``."""

    path: str
    body: str

    def __str__(self) -> str:
        return f"{self.path}: {self.body}"


def _render(value: str | Sequence[str]) -> str:
    # field.Error prints a string with %q and other values as JSON; an empty
    # list prints as a nil slice does ("null"), the usual case of an omitted
    # ``values``.
    if isinstance(value, str):
        return go_quote(value)
    if not value:
        return "null"
    return json.dumps(list(value), separators=(",", ":"), ensure_ascii=False)


def _invalid(path: str, value: str | Sequence[str], detail: str) -> FieldError:
    return FieldError(path, f"Invalid value: {_render(value)}: {detail}")


def _not_supported(path: str, value: str, supported: Sequence[str]) -> FieldError:
    choices = ", ".join(go_quote(s) for s in supported)
    return FieldError(path, f"Unsupported value: {go_quote(value)}: supported values: {choices}")


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def aggregate_message(errors: Sequence[FieldError | str]) -> str:
    """The text of an aggregate error (apimachinery errors.NewAggregate):
    duplicates dropped, one message as it is, several as ``[a, b]``."""
    seen: dict[str, None] = {}
    for e in errors:
        seen.setdefault(str(e), None)
    texts = list(seen)
    if len(texts) == 1:
        return texts[0]
    return "[" + ", ".join(texts) + "]"


# -- parsed selectors --------------------------------------------------------------


class FieldRequirement(msgspec.Struct, frozen=True, array_like=True):
    """One parsed ``matchFields`` entry: the field equals (In) or differs
    from (NotIn) ``value``."""

    key: str
    equal: bool
    value: str

    def matches(self, node_name: str) -> bool:
        field = node_name if self.key == NODE_NAME_FIELD else ""
        return (field == self.value) is self.equal


class SelectorTerm(msgspec.Struct, frozen=True, array_like=True):
    """A parsed NodeSelectorTerm. None: the term has no entries of that kind
    (nothing to check), as opposed to entries that all passed. ``weight`` is
    a preferred term's weight (0 for required terms)."""

    expressions: tuple[Requirement, ...] | None = None
    fields: tuple[FieldRequirement, ...] | None = None
    weight: int = 0

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        """nodeSelectorTerm.match of a term that parsed."""
        if self.expressions is not None:
            for req in self.expressions:
                if not req.matches(labels):
                    return False
        if self.fields is not None and node_name:
            for f in self.fields:
                if not f.matches(node_name):
                    return False
        return True


def selector_matches(
    terms: Sequence[SelectorTerm], labels: Mapping[str, str], node_name: str
) -> bool:
    """NodeSelector.Match: some term matches (no terms: no match)."""
    return any(t.matches(labels, node_name) for t in terms)


def preferred_score(
    terms: Sequence[SelectorTerm], labels: Mapping[str, str], node_name: str
) -> int:
    """PreferredSchedulingTerms.Score: the weights of the matching terms."""
    return sum(t.weight for t in terms if t.matches(labels, node_name))


class RequiredNodeAffinity(msgspec.Struct, frozen=True):
    """The pod's ``nodeSelector`` and required node affinity, parsed
    (nodeaffinity.RequiredNodeAffinity). ``node_selector`` is None when the
    pod has none; ``terms`` is None when it has no required affinity (an
    empty tuple matches nothing)."""

    node_selector: tuple[tuple[str, str], ...] | None = None
    terms: tuple[SelectorTerm, ...] | None = None

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        """RequiredNodeAffinity.Match, parse errors read as no match."""
        if self.node_selector is not None:
            for key, value in self.node_selector:
                if labels.get(key) != value:
                    return False
        if self.terms is not None:
            return selector_matches(self.terms, labels, node_name)
        return True


# -- parsing -------------------------------------------------------------------------


def _field_error(path: str, key: str, error: RequirementError) -> FieldError:
    """One complaint of labels.NewRequirement as the field.Error upstream
    gives it: value errors name the value by index and key."""
    if error.field == "key":
        return _invalid(_child(path, "key"), error.value, "; ".join(error.details))
    values_path = _child(path, "values")
    if error.field == "values":
        return _invalid(values_path, error.value, error.details[0])
    if error.field == "integer":
        return _invalid(f"{values_path}[{error.index}]", error.value, error.details[0])
    return _invalid(f"{values_path}[{error.index}][{key}]", error.value, "; ".join(error.details))


def _label_requirement(
    req: RequirementLike, path: str
) -> tuple[Requirement | None, list[FieldError]]:
    """nodeSelectorRequirementsAsSelector for one entry, with the checks of
    labels.NewRequirement."""
    op = req.operator
    if op not in _LABEL_OPERATORS:
        return None, [_not_supported(_child(path, "operator"), op, _LABEL_OPERATORS)]
    key = req.key
    values = list(req.values)
    errors = [_field_error(path, key, e) for e in requirement_errors(key, op, values)]
    if errors:
        return None, errors
    return new_requirement(key, op, values), []


def _field_requirement(
    req: RequirementLike, path: str
) -> tuple[FieldRequirement | None, list[FieldError]]:
    """nodeSelectorRequirementsAsFieldSelector for one entry."""
    op = req.operator
    if op not in _FIELD_OPERATORS:
        return None, [_not_supported(_child(path, "operator"), op, _FIELD_OPERATORS)]
    values = list(req.values)
    if len(values) != 1:
        return None, [_invalid(_child(path, "values"), values, "must have one element")]
    return FieldRequirement(req.key, op == IN, values[0]), []


def _is_empty_term(term: TermLike) -> bool:
    return not term.match_expressions and not term.match_fields


def compile_term(
    term: TermLike, path: str = "", weight: int = 0
) -> tuple[SelectorTerm, list[FieldError]]:
    """newNodeSelectorTerm: the parsed term and its parse errors (a term
    with errors must not be matched)."""
    errors: list[FieldError] = []
    expressions: tuple[Requirement, ...] | None = None
    fields: tuple[FieldRequirement, ...] | None = None
    if term.match_expressions:
        base = _child(path, "matchExpressions")
        parsed: list[Requirement] = []
        for i, req in enumerate(term.match_expressions):
            label_req, errs = _label_requirement(req, f"{base}[{i}]")
            errors += errs
            if label_req is not None:
                parsed.append(label_req)
        expressions = tuple(parsed)
    if term.match_fields:
        base = _child(path, "matchFields")
        parsed_fields: list[FieldRequirement] = []
        for i, req in enumerate(term.match_fields):
            field_req, errs = _field_requirement(req, f"{base}[{i}]")
            errors += errs
            if field_req is not None:
                parsed_fields.append(field_req)
        fields = tuple(parsed_fields)
    return SelectorTerm(expressions, fields, weight), errors


def compile_node_selector(
    terms: Sequence[TermLike], path: str = ""
) -> tuple[tuple[SelectorTerm, ...], list[FieldError]]:
    """NewLazyErrorNodeSelector: the terms that parsed (empty terms and terms
    with errors match nothing, so they are left out) and every parse error,
    paths under ``<path>.nodeSelectorTerms``."""
    base = _child(path, "nodeSelectorTerms")
    out: list[SelectorTerm] = []
    errors: list[FieldError] = []
    for i, term in enumerate(terms):
        if _is_empty_term(term):
            continue
        parsed, errs = compile_term(term, f"{base}[{i}]")
        if errs:
            errors += errs
        else:
            out.append(parsed)
    return tuple(out), errors


def compile_preferred_terms(
    terms: Sequence[PreferredTermLike], path: str = ""
) -> tuple[tuple[SelectorTerm, ...], list[FieldError]]:
    """NewPreferredSchedulingTerms: terms of weight 0 or with no entries are
    left out unparsed; any parse error refuses the whole list (the caller
    reports the errors, paths ``<path>[i]...``)."""
    out: list[SelectorTerm] = []
    errors: list[FieldError] = []
    for i, term in enumerate(terms):
        if term.weight == 0 or _is_empty_term(term.preference):
            continue
        parsed, errs = compile_term(term.preference, f"{path}[{i}]", term.weight)
        if errs:
            errors += errs
        else:
            out.append(parsed)
    return tuple(out), errors


def required_node_affinity(pod: pb.Pod) -> RequiredNodeAffinity:
    """GetRequiredNodeAffinity: the pod's nodeSelector (if it has entries)
    and required node affinity (if set), parse errors dropped."""
    selector = tuple(sorted(pod.node_selector.items())) or None
    terms: tuple[SelectorTerm, ...] | None = None
    if (
        pod.HasField("affinity")
        and pod.affinity.HasField("node_affinity")
        and pod.affinity.node_affinity.HasField("required")
    ):
        terms, _ = compile_node_selector(pod.affinity.node_affinity.required.terms)
    return RequiredNodeAffinity(selector, terms)
