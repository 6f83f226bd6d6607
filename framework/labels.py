"""Label selectors: parse once, match many label sets.

Port of the semantics of apimachinery's label selectors:
staging/src/k8s.io/apimachinery/pkg/labels/selector.go (NewRequirement,
Requirement.Matches, internalSelector.Matches/Empty/Add, Nothing,
Everything), staging/src/k8s.io/apimachinery/pkg/labels/labels.go
(SelectorFromSet), staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/helpers.go
(LabelSelectorAsSelector) and the label key and value rules NewRequirement
checks (staging/src/k8s.io/apimachinery/pkg/api/validate/content: IsLabelKey,
IsLabelValue):

* A requirement is ``key operator values``: ``In`` (label present, value
  listed), ``NotIn`` (label absent or value not listed), ``Exists``,
  ``DoesNotExist``, ``Gt``/``Lt`` (label present and, read as a base-10
  int64, greater/less than the one value; node selectors only).
* A selector ANDs its requirements. An unset label selector (``nil``) is
  Nothing and matches no labels; a set one with no entries is Everything:
  it matches every label set and is *empty*.
* ``matchLabels`` entries are ``key = value`` (``In`` with one value);
  ``matchExpressions`` know ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``.
  An unknown operator, a value count the operator does not take, a bad key
  or a bad value is an error (``SelectorError``); the requirements are kept
  sorted as internalSelector.Add keeps them, so equal selectors compare equal.

Parsed requirements and selectors are frozen msgspec Structs encoded as
arrays, so they travel in CycleState.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol

import msgspec

__all__ = [
    "DOES_NOT_EXIST",
    "EVERYTHING",
    "EXISTS",
    "GT",
    "IN",
    "LABEL_SELECTOR_OPERATORS",
    "LT",
    "NOTHING",
    "NOT_IN",
    "LabelSelectorLike",
    "Requirement",
    "RequirementError",
    "RequirementLike",
    "Selector",
    "SelectorError",
    "label_key_errors",
    "label_selector_as_selector",
    "label_value_errors",
    "new_requirement",
    "parse_int64",
    "requirement_errors",
    "selector_from_json",
    "selector_from_set",
]

# The operator spellings of metav1.LabelSelectorOperator and
# v1.NodeSelectorOperator (selection.Operator spells Gt/Lt "gt"/"lt").
IN: Final = "In"
NOT_IN: Final = "NotIn"
EXISTS: Final = "Exists"
DOES_NOT_EXIST: Final = "DoesNotExist"
GT: Final = "Gt"
LT: Final = "Lt"
# The operators LabelSelectorAsSelector accepts.
LABEL_SELECTOR_OPERATORS: Final = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST)


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


# -- requirements ------------------------------------------------------------------

# The detail of each value-count complaint of NewRequirement.
_IN_NEEDS_VALUES: Final = "for 'in', 'notin' operators, values set can't be empty"
_EXISTS_TAKES_NO_VALUES: Final = "values set must be empty for exists and does not exist"
_GT_NEEDS_ONE_VALUE: Final = "for 'Gt', 'Lt' operators, exactly one value is required"
_GT_NEEDS_AN_INTEGER: Final = "for 'Gt', 'Lt' operators, the value must be an integer"


@dataclass(frozen=True, slots=True)
class RequirementError:
    """One complaint of labels.NewRequirement, for its caller to word:
    ``field`` says what it is about (the key; the values as a whole; the
    value at ``index`` not being an integer; the value at ``index`` not
    being a label value), ``value`` what was given, ``details`` upstream's
    reasons in order (several only for a bad key or label value)."""

    field: Literal["key", "values", "integer", "value"]
    value: str | tuple[str, ...]
    details: tuple[str, ...]
    index: int = 0


def requirement_errors(
    key: str, op: str, values: Sequence[str], *, check_syntax: bool = True
) -> list[RequirementError]:
    """labels.NewRequirement's checks of ``key op values`` for a known
    operator, in its order: the key, the value count, Gt/Lt integers, each
    value. ``check_syntax=False`` checks the value count and integers only
    (for objects the API server validated)."""
    errors: list[RequirementError] = []
    if check_syntax:
        key_errors = label_key_errors(key)
        if key_errors:
            errors.append(RequirementError("key", key, tuple(key_errors)))
    if op in (IN, NOT_IN):
        if not values:
            errors.append(RequirementError("values", tuple(values), (_IN_NEEDS_VALUES,)))
    elif op in (EXISTS, DOES_NOT_EXIST):
        if values:
            errors.append(RequirementError("values", tuple(values), (_EXISTS_TAKES_NO_VALUES,)))
    else:
        if len(values) != 1:
            errors.append(RequirementError("values", tuple(values), (_GT_NEEDS_ONE_VALUE,)))
        for i, value in enumerate(values):
            if parse_int64(value) is None:
                errors.append(RequirementError("integer", value, (_GT_NEEDS_AN_INTEGER,), i))
    if check_syntax:
        for i, value in enumerate(values):
            value_errors = label_value_errors(value)
            if value_errors:
                errors.append(RequirementError("value", value, tuple(value_errors), i))
    return errors


class Requirement(msgspec.Struct, frozen=True, array_like=True):
    """A parsed labels.Requirement. ``bound`` is the integer of Gt/Lt."""

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


def new_requirement(key: str, op: str, values: Iterable[str]) -> Requirement:
    """The requirement ``key op values`` once ``requirement_errors`` found
    nothing (Gt/Lt read their one value as ``bound``)."""
    vals = frozenset(values)
    if op in (GT, LT):
        (text,) = vals
        bound = parse_int64(text)
        assert bound is not None  # checked by requirement_errors
        return Requirement(key, op, vals, bound)
    return Requirement(key, op, vals)


def _sort_key(r: Requirement) -> tuple[str, str, list[str]]:
    return (r.key, r.operator, sorted(r.values))


# -- selectors ------------------------------------------------------------------------


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
        """internalSelector.Matches: every requirement holds (the checks of
        Requirement.Matches inlined: selectors are matched against every
        pod of a snapshot)."""
        if self.nothing:
            return False
        get = labels.get
        for r in self.requirements:
            op = r.operator
            value = get(r.key)
            if op == IN:
                if value is None or value not in r.values:
                    return False
            elif op == NOT_IN:
                if value is not None and value in r.values:
                    return False
            elif op == EXISTS:
                if value is None:
                    return False
            elif op == DOES_NOT_EXIST:
                if value is not None:
                    return False
            elif not r.matches(labels):  # Gt, Lt
                return False
        return True

    def add(self, *requirements: Requirement) -> Selector:
        """Selector.Add (Nothing stays Nothing)."""
        if self.nothing:
            return self
        return Selector(self.requirements + requirements)


NOTHING: Final = Selector(nothing=True)
EVERYTHING: Final = Selector()


def selector_from_set(labels: Mapping[str, str]) -> Selector:
    """labels.SelectorFromSet (values taken as they are): one ``key = value``
    requirement per entry, by key; an empty set is Everything."""
    return Selector(tuple(Requirement(k, IN, frozenset((labels[k],))) for k in sorted(labels)))


# -- LabelSelectorAsSelector --------------------------------------------------------


class RequirementLike(Protocol):
    """A requirement as written: metav1.LabelSelectorRequirement or
    v1.NodeSelectorRequirement, as the wire records (berth.v1) or plugin
    args have them."""

    @property
    def key(self) -> str: ...
    @property
    def operator(self) -> str: ...
    @property
    def values(self) -> Sequence[str]: ...


class LabelSelectorLike(Protocol):
    """metav1.LabelSelector as the wire record (berth.v1 LabelSelector) has it."""

    @property
    def match_labels(self) -> Mapping[str, str]: ...
    @property
    def match_expressions(self) -> Sequence[RequirementLike]: ...


class SelectorError(ValueError):
    """A label selector that does not parse (LabelSelectorAsSelector's
    error). The message names the bad entry by ``path``; ``key`` and
    ``operator`` are the entry's, ``errors`` NewRequirement's complaints
    (empty for an unknown operator)."""

    def __init__(
        self,
        message: str,
        path: str = "",
        key: str = "",
        operator: str = "",
        errors: tuple[RequirementError, ...] = (),
    ) -> None:
        super().__init__(message)
        self.path = path
        self.key = key
        self.operator = operator
        self.errors = errors


def _entry_error(path: str, key: str, op: str, errors: Sequence[RequirementError]) -> SelectorError:
    lines: list[str] = []
    for e in errors:
        if e.field == "key":
            where = f"{path}.key"
        elif e.field == "values":
            where = f"{path}.values"
        else:
            where = f"{path}.values[{e.index}]"
        lines += [f"{where}: {d}" for d in e.details]
    return SelectorError("; ".join(lines), path, key, op, tuple(errors))


def label_selector_as_selector(
    sel: LabelSelectorLike | None, path: str = "labelSelector", *, check_syntax: bool = True
) -> Selector:
    """metav1.LabelSelectorAsSelector: None (unset) is Nothing; set with no
    entries is Everything. SelectorError for the first entry (matchLabels by
    key, then matchExpressions in order) that does not parse.
    ``check_syntax=False`` leaves label keys and values unchecked (for
    objects the API server validated)."""
    if sel is None:
        return NOTHING
    match_labels = sel.match_labels
    expressions = sel.match_expressions
    if not match_labels and not expressions:
        return EVERYTHING
    reqs: list[Requirement] = []
    for key in sorted(match_labels):
        value = match_labels[key]
        if check_syntax:
            errors = requirement_errors(key, IN, (value,))
            if errors:
                raise _entry_error(f"{path}.matchLabels[{key}]", key, IN, errors)
        reqs.append(Requirement(key, IN, frozenset((value,))))
    for i, expr in enumerate(expressions):
        where = f"{path}.matchExpressions[{i}]"
        op = expr.operator
        if op not in LABEL_SELECTOR_OPERATORS:
            raise SelectorError(
                f'{where}.operator: "{op}" is not a valid label selector operator',
                where,
                expr.key,
                op,
            )
        errors = requirement_errors(expr.key, op, expr.values, check_syntax=check_syntax)
        if errors:
            raise _entry_error(where, expr.key, op, errors)
        reqs.append(Requirement(expr.key, op, frozenset(expr.values)))
    reqs.sort(key=_sort_key)
    return Selector(tuple(reqs))


@dataclass(frozen=True, slots=True)
class _JsonRequirement:
    key: str
    operator: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _JsonLabelSelector:
    match_labels: dict[str, str]
    match_expressions: tuple[_JsonRequirement, ...]


def selector_from_json(sel: object, path: str) -> Selector:
    """LabelSelectorAsSelector over a decoded JSON LabelSelector (e.g. a
    ReplicaSet's or a PodDisruptionBudget's ``spec.selector``)."""
    if sel is None:
        return NOTHING
    if not isinstance(sel, Mapping):
        raise SelectorError(f"{path}: not an object", path)
    labels = sel.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        raise SelectorError(f"{path}.matchLabels: not an object", path)
    exprs = sel.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise SelectorError(f"{path}.matchExpressions: not a list", path)
    parsed: list[_JsonRequirement] = []
    for e in exprs:
        if not isinstance(e, Mapping):
            raise SelectorError(f"{path}.matchExpressions: an entry is not an object", path)
        parsed.append(
            _JsonRequirement(
                str(e.get("key", "")),
                str(e.get("operator", "")),
                tuple(str(v) for v in e.get("values") or []),
            )
        )
    match_labels = {str(k): str(v) for k, v in labels.items()}
    return label_selector_as_selector(_JsonLabelSelector(match_labels, tuple(parsed)), path)
