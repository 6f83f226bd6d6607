"""Node selectors: parse once, match many nodes.

Port of the semantics of
staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go
(NewNodeSelector, NewLazyErrorNodeSelector, NewPreferredSchedulingTerms,
GetRequiredNodeAffinity, RequiredNodeAffinity.Match, PreferredSchedulingTerms.Score)
and of the label requirement rules it relies on in apimachinery
(labels.NewRequirement, Requirement.Matches; validation of label keys and
values in api/validate/content):

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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import msgspec

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.runtime import go_quote

__all__ = [
    "DOES_NOT_EXIST",
    "EXISTS",
    "GT",
    "IN",
    "LT",
    "NODE_NAME_FIELD",
    "NOT_IN",
    "FieldError",
    "FieldRequirement",
    "LabelRequirement",
    "PreferredTermLike",
    "RequiredNodeAffinity",
    "RequirementLike",
    "SelectorTerm",
    "TermLike",
    "aggregate_message",
    "compile_node_selector",
    "compile_preferred_terms",
    "compile_term",
    "label_key_errors",
    "label_value_errors",
    "parse_int64",
    "preferred_score",
    "references",
    "required_node_affinity",
    "selector_matches",
]

# v1.NodeSelectorOperator values.
IN: Final = "In"
NOT_IN: Final = "NotIn"
EXISTS: Final = "Exists"
DOES_NOT_EXIST: Final = "DoesNotExist"
GT: Final = "Gt"
LT: Final = "Lt"
_LABEL_OPERATORS: Final = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT)
_FIELD_OPERATORS: Final = (IN, NOT_IN)

# metav1.ObjectNameField: the one node field a selector can name.
NODE_NAME_FIELD: Final = "metadata.name"


# -- the shapes selectors are read from ----------------------------------------
# Both the wire records (berth.v1) and the plugin args (args.py) fit these.


class RequirementLike(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def operator(self) -> str: ...
    @property
    def values(self) -> Sequence[str]: ...


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


# -- label keys, label values, integers ------------------------------------------

_NAME_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_NAME_RE: Final = re.compile(_NAME_FMT)
_NAME_MSG: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_NAME_MAX: Final = 63
_DNS_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN_FMT: Final = _DNS_LABEL_FMT + "(\\." + _DNS_LABEL_FMT + ")*"
_DNS_SUBDOMAIN_RE: Final = re.compile(_DNS_SUBDOMAIN_FMT)
_DNS_SUBDOMAIN_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character"
)
_DNS_SUBDOMAIN_MAX: Final = 253
_VALUE_FMT: Final = "(" + _NAME_FMT + ")?"
_VALUE_RE: Final = re.compile(_VALUE_FMT)
_VALUE_MSG: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, "
    "'-', '_' or '.', and must start and end with an alphanumeric character"
)
_INT_RE: Final = re.compile("[+-]?[0-9]+")
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    # content.RegexError, including its doubled space before "or".
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _byte_len(s: str) -> int:
    # Go's len() counts UTF-8 bytes.
    return len(s.encode())


def label_key_errors(key: str) -> list[str]:
    """Why ``key`` is not a label key (``[prefix/]name``), in upstream's words
    (content.IsLabelKey); empty when it is one."""
    parts = key.split("/")
    errors: list[str] = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if _byte_len(prefix) > _DNS_SUBDOMAIN_MAX:
                errors.append(f"prefix part must be no more than {_DNS_SUBDOMAIN_MAX} bytes")
            if not _DNS_SUBDOMAIN_RE.fullmatch(prefix):
                errors.append(
                    "prefix part "
                    + _regex_error(_DNS_SUBDOMAIN_MSG, _DNS_SUBDOMAIN_FMT, "example.com")
                )
    else:
        return [
            "a valid label key "
            + _regex_error(_NAME_MSG, _NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errors.append("name part must be non-empty")
    elif _byte_len(name) > _NAME_MAX:
        errors.append(f"name part must be no more than {_NAME_MAX} bytes")
    if not _NAME_RE.fullmatch(name):
        errors.append(
            "name part " + _regex_error(_NAME_MSG, _NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errors


def label_value_errors(value: str) -> list[str]:
    """Why ``value`` is not a label value (content.IsLabelValue); empty when
    it is one. The empty string is a valid value."""
    errors: list[str] = []
    if _byte_len(value) > _NAME_MAX:
        errors.append(f"must be no more than {_NAME_MAX} bytes")
    if not _VALUE_RE.fullmatch(value):
        errors.append(_regex_error(_VALUE_MSG, _VALUE_FMT, "MyValue", "my_value", "12345"))
    return errors


def parse_int64(s: str) -> int | None:
    """``s`` as Go's strconv.ParseInt(s, 10, 64) reads it (an optional sign,
    ASCII digits, leading zeros allowed, within int64), or None."""
    if not _INT_RE.fullmatch(s):
        return None
    digits = s.lstrip("+-").lstrip("0") or "0"
    if len(digits) > 19:
        return None  # past int64, and int() of a long one would be refused
    n = -int(digits) if s[0] == "-" else int(digits)
    return n if _INT64_MIN <= n <= _INT64_MAX else None


# -- parsed selectors --------------------------------------------------------------


class LabelRequirement(msgspec.Struct, frozen=True, array_like=True):
    """One parsed ``matchExpressions`` entry. ``bound`` is the integer of
    Gt/Lt."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()
    bound: int = 0

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
        if op == DOES_NOT_EXIST:
            return self.key not in labels
        value = labels.get(self.key)
        if value is None:
            return False
        number = parse_int64(value)
        if number is None:
            return False
        return number > self.bound if op == GT else number < self.bound


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

    expressions: tuple[LabelRequirement, ...] | None = None
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


def references(terms: Sequence[SelectorTerm]) -> tuple[set[str], bool]:
    """The label keys ``terms`` read, and whether they read node fields: the
    only facts of a node their outcome depends on."""
    keys: set[str] = set()
    fields = False
    for t in terms:
        if t.expressions is not None:
            keys.update(r.key for r in t.expressions)
        fields = fields or t.fields is not None
    return keys, fields


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

    def references(self) -> tuple[set[str], bool]:
        """The label keys this reads, and whether it reads node fields."""
        keys, fields = references(self.terms or ())
        keys.update(key for key, _ in self.node_selector or ())
        return keys, fields

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


def _label_requirement(
    req: RequirementLike, path: str
) -> tuple[LabelRequirement | None, list[FieldError]]:
    """nodeSelectorRequirementsAsSelector for one entry, with the checks of
    labels.NewRequirement."""
    op = req.operator
    if op not in _LABEL_OPERATORS:
        return None, [_not_supported(_child(path, "operator"), op, _LABEL_OPERATORS)]
    errors: list[FieldError] = []
    key = req.key
    key_errors = label_key_errors(key)
    if key_errors:
        errors.append(_invalid(_child(path, "key"), key, "; ".join(key_errors)))
    values = list(req.values)
    values_path = _child(path, "values")
    if op in (IN, NOT_IN):
        if not values:
            errors.append(
                _invalid(
                    values_path, values, "for 'in', 'notin' operators, values set can't be empty"
                )
            )
    elif op in (EXISTS, DOES_NOT_EXIST):
        if values:
            errors.append(
                _invalid(
                    values_path, values, "values set must be empty for exists and does not exist"
                )
            )
    else:
        if len(values) != 1:
            errors.append(
                _invalid(
                    values_path, values, "for 'Gt', 'Lt' operators, exactly one value is required"
                )
            )
        for i, value in enumerate(values):
            if parse_int64(value) is None:
                errors.append(
                    _invalid(
                        f"{values_path}[{i}]",
                        value,
                        "for 'Gt', 'Lt' operators, the value must be an integer",
                    )
                )
    for i, value in enumerate(values):
        value_errors = label_value_errors(value)
        if value_errors:
            errors.append(_invalid(f"{values_path}[{i}][{key}]", value, "; ".join(value_errors)))
    if errors:
        return None, errors
    bound = 0
    if op in (GT, LT):
        parsed = parse_int64(values[0])
        assert parsed is not None  # checked above
        bound = parsed
    return LabelRequirement(key, op, frozenset(values), bound), []


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
    expressions: tuple[LabelRequirement, ...] | None = None
    fields: tuple[FieldRequirement, ...] | None = None
    if term.match_expressions:
        base = _child(path, "matchExpressions")
        parsed: list[LabelRequirement] = []
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
