"""CEL device selectors: DeviceClass and request selectors evaluated against
one device of a ResourceSlice, with Kubernetes' device environment.

Upstream: k8s.io/dynamic-resource-allocation/cel (compile.go: the `device`
variable, CompileCELExpression, DeviceMatches; cache.go: the LRU of compiled
expressions). The runtime is Google's CEL C++ (the `cel-expr-python` package);
why that one, and what it measured against the alternatives, is in README.md
beside this file.

The environment a selector sees (compile.go newCompiler, the
StoredExpressions environment the scheduler compiles with):

- ``device.driver`` (string), ``device.allowMultipleAllocations`` (bool,
  false when unset: DRAConsumableCapacity is on by default in v1.36),
  ``device.attributes[domain][id]`` (bool, int, string or semver) and
  ``device.capacity[domain][id]`` (quantity). An attribute or capacity name
  without a domain belongs to the driver's domain (parseQualifiedName).
  Looking up a domain the device has nothing in gives an empty map, so
  ``device.attributes["x.example.com"].model`` fails with ``no such key:
  model`` while ``"x.example.com" in device.attributes`` is false
  (newStringInterfaceMapWithDefault).
- Kubernetes' quantity library (k8s.io/apiserver/pkg/cel/library/quantity.go:
  ``quantity``, ``isQuantity``, ``sign``, ``compareTo``, ``isGreaterThan``,
  ``isLessThan``, ``add``, ``sub``, ``isInteger``, ``asInteger``,
  ``asApproximateFloat``) and semver library (semverlib.go: ``semver``,
  ``isSemver`` with the optional normalize flag, ``major``, ``minor``,
  ``patch``, ``compareTo``, ``isGreaterThan``, ``isLessThan``), regex library
  (regex.go: ``find``, ``findAll``); DRA's ``includes`` (compile.go
  includesFunc); CEL's standard library, the strings extension at version 2,
  the sets extension, ``cel.bind`` and optional values.

Bounds, because a cluster user writes these expressions: an expression longer
than resource.k8s.io's CELSelectorExpressionMaxLength (10 KiB) is refused
before parsing, and the parser refuses nesting deeper than 32 levels. Upstream
charges every evaluation step against CELSelectorExpressionMaxCost
(1,000,000); CEL C++ counts no cost, so the worst-case cost is estimated at
compile time as upstream's estimator does (cel_cost.py, at or below
upstream's estimate, which the API server already holds to that limit) and a
selector above the limit is not evaluated; and CEL C++ stops an evaluation
after 10,000 comprehension iterations in all. Both end in upstream's "actual
cost limit exceeded". The iteration budget is stricter than upstream for
loops of 10,000 to some 300,000 iterations (three nested loops over 32
capacities), which no selector over one device needs.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, Final

import re2
from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

from berth.framework.units import QuantityError, parse_quantity, shorten
from berth.plugins.dynamicresources.structured.cel_cost import CostError, estimate_cost

__all__ = [
    "CEL_SELECTOR_EXPRESSION_MAX_COST",
    "CEL_SELECTOR_EXPRESSION_MAX_LENGTH",
    "ITERATION_BUDGET",
    "CelCache",
    "CelCompileError",
    "CelError",
    "CelEvaluationError",
    "CompiledSelector",
]

# k8s.io/api/resource/v1 types.go.
CEL_SELECTOR_EXPRESSION_MAX_LENGTH: Final = 10 * 1024
CEL_SELECTOR_EXPRESSION_MAX_COST: Final = 1_000_000
_RESOURCE_SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE: Final = 48
# CEL C++'s comprehension iteration budget for one evaluation (fixed by the
# cel-expr-python runtime); see the module docstring.
ITERATION_BUDGET: Final = 10_000
# Devices whose selector answers a CelCache keeps (about 300 bytes each), and
# of those the most recent whose CEL views it keeps (about 2.5 KB each for a
# device of 18 attributes): 5000 nodes of 8 GPUs fit.
_DEVICES: Final = 65_536
_DEVICE_VIEWS: Final = 4_096
# Selector answers kept per device (dropped all at once beyond this).
_RESULTS_PER_DEVICE: Final = 64
# A failed lookup of a domain nobody has is retried with that domain as an
# empty map at most this many times per evaluation (see _evaluate).
_MAX_DEFAULT_DOMAINS: Final = 8


class CelError(Exception):
    """A CEL selector could not be compiled or evaluated; ``message`` says
    why in upstream's words where upstream has them."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CelCompileError(CelError):
    """The expression is not a valid selector (CompileCELExpression's error)."""


class CelEvaluationError(CelError):
    """Evaluating a selector against one device failed (DeviceMatches'
    error): a runtime error of the expression, the cost limit, or a device
    attribute the environment cannot represent."""


# --- Kubernetes' Quantity and Semver types -----------------------------------
#
# CEL C++ carries application values as protobuf messages, so the two
# Kubernetes types are messages named as upstream names them
# (apiservercel.QuantityType "kubernetes.Quantity", SemverType
# "kubernetes.Semver"). Each holds one canonical text, so CEL's message
# equality is upstream's Equal: a quantity is its exact value in nano units
# (Quantity.Equal compares values), a version is major.minor.patch and the
# pre-release without build metadata (semver's EQ ignores build metadata).


def _build_types() -> tuple[descriptor_pool.DescriptorPool, type[Message], type[Message]]:
    proto = descriptor_pb2.FileDescriptorProto(
        name="berth/dynamicresources/cel_types.proto", package="kubernetes", syntax="proto3"
    )
    for name, field in (("Quantity", "nanos"), ("Semver", "version")):
        message = proto.message_type.add(name=name)
        message.field.add(
            name=field,
            number=1,
            type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    quantity = message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Quantity"))
    semver = message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Semver"))
    return pool, quantity, semver


_POOL, _QuantityMessage, _SemverMessage = _build_types()
_QUANTITY: Final = cel.Type("kubernetes.Quantity")
_SEMVER: Final = cel.Type("kubernetes.Semver")
_NANO: Final = 10**9
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_UINT64_MAX: Final = 2**64 - 1


def _quantity(nanos: int) -> Message:
    return _QuantityMessage(nanos=str(nanos))


def _nanos(q: Any) -> int:
    if not isinstance(q, _QuantityMessage):
        raise _no_such_overload("kubernetes.Quantity", q)
    return int(getattr(q, "nanos"))  # noqa: B009 (a message class built at run time)


def _no_such_overload(expected: str, value: Any) -> ValueError:
    # CEL C++ picks an implementation by kind, and both Kubernetes types are
    # messages: a dyn value of the other type reaches it (cel-go: "no such
    # overload").
    got = value.DESCRIPTOR.full_name if isinstance(value, Message) else type(value).__name__
    return ValueError(f"no such overload: {expected} expected, got {got}")


def _string_to_quantity(text: str) -> Message:
    return _quantity(_parse_nanos(text))


@functools.lru_cache(maxsize=1024)
def _parse_nanos(text: str) -> int:
    # The texts are mostly the constants of selectors: each is parsed once.
    try:
        return parse_quantity(text).nanos
    except QuantityError as err:
        raise ValueError(str(err)) from None


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def _cmp(a: int, b: int) -> int:
    return (a > b) - (a < b)


def _quantity_as_int(q: Any) -> int | None:
    # Quantity.AsInt64: a whole number within int64, else not convertible.
    whole, rest = divmod(_nanos(q), _NANO)
    if rest or not _INT64_MIN <= whole <= _INT64_MAX:
        return None
    return whole


def _quantity_as_integer(q: Any) -> int:
    value = _quantity_as_int(q)
    if value is None:
        raise ValueError("cannot convert value to integer")
    return value


def _quantity_approximate_float(q: Any) -> float:
    try:
        return float(Fraction(_nanos(q), _NANO))
    except OverflowError:
        return float("inf") if _nanos(q) > 0 else float("-inf")


# blang/semver v4 (semver.go Parse, NewPRVersion), the parser upstream's
# semver() uses; its error texts are upstream's.
_NUMBERS: Final = frozenset("0123456789")
_ALPHANUM: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")


def _parse_uint(text: str, what: str) -> int:
    if not set(text) <= _NUMBERS:
        raise ValueError(f"Invalid character(s) found in {what} number {_go_quote(text)}")
    if len(text) > 1 and text[0] == "0":
        raise ValueError(
            f"{what.capitalize()} number must not contain leading zeroes {_go_quote(text)}"
        )
    if not text:
        raise ValueError('strconv.ParseUint: parsing "": invalid syntax')
    if len(text) > 20 or int(text) > _UINT64_MAX:
        raise ValueError(f"strconv.ParseUint: parsing {_go_quote(text)}: value out of range")
    return int(text)


def _go_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _parse_semver(text: str) -> tuple[int, int, int, tuple[str, ...]]:
    """(major, minor, patch, pre-release identifiers) or ValueError."""
    if not text:
        raise ValueError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise ValueError("No Major.Minor.Patch elements found")
    major = _parse_uint(parts[0], "major")
    minor = _parse_uint(parts[1], "minor")
    rest = parts[2]
    build: list[str] = []
    pre: list[str] = []
    if "+" in rest:
        rest, _, meta = rest.partition("+")
        build = meta.split(".")
    if "-" in rest:
        rest, _, release = rest.partition("-")
        pre = release.split(".")
    patch = _parse_uint(rest, "patch")
    for identifier in pre:
        if not identifier:
            raise ValueError("Prerelease is empty")
        if set(identifier) <= _NUMBERS:
            if len(identifier) > 1 and identifier[0] == "0":
                raise ValueError(
                    "Numeric PreRelease version must not contain leading zeroes "
                    + _go_quote(identifier)
                )
            if int(identifier) > _UINT64_MAX:
                raise ValueError(
                    f"strconv.ParseUint: parsing {_go_quote(identifier)}: value out of range"
                )
        elif not set(identifier) <= _ALPHANUM:
            raise ValueError(f"Invalid character(s) found in prerelease {_go_quote(identifier)}")
    for identifier in build:
        if not identifier:
            raise ValueError("Build meta data is empty")
        if not set(identifier) <= _ALPHANUM:
            raise ValueError(
                f"Invalid character(s) found in build meta data {_go_quote(identifier)}"
            )
    return major, minor, patch, tuple(pre)


def _normalize_semver(text: str) -> str:
    # semverlib.go normalizeAndParse: a "v" prefix goes, leading zeroes of
    # each of the first three parts go, missing minor and patch are zero.
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            part = part.lstrip("0")
            if not part or part[0] not in _NUMBERS:
                part = "0" + part
            parts[i] = part
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise ValueError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _semver_text(text: str, normalize: bool) -> str:
    major, minor, patch, pre = _parse_semver(_normalize_semver(text) if normalize else text)
    canonical = f"{major}.{minor}.{patch}"
    return canonical + "-" + ".".join(pre) if pre else canonical


def _string_to_semver(text: str, normalize: bool = False) -> Message:
    return _SemverMessage(version=_semver_text(text, normalize))


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        _semver_text(text, normalize)
    except ValueError:
        return False
    return True


def _semver_parts(v: Any) -> tuple[int, int, int, tuple[str, ...]]:
    if not isinstance(v, _SemverMessage):
        raise _no_such_overload("kubernetes.Semver", v)
    return _parse_semver(str(getattr(v, "version")))  # noqa: B009 (as in _nanos)


def _semver_compare(a: Any, b: Any) -> int:
    # semver.go Version.Compare: numbers, then a release above its
    # pre-releases, then pre-release identifiers (numeric below alphanumeric).
    ma, na, pa, pre_a = _semver_parts(a)
    mb, nb, pb, pre_b = _semver_parts(b)
    if (ma, na, pa) != (mb, nb, pb):
        return _cmp((ma, na, pa) > (mb, nb, pb), (ma, na, pa) < (mb, nb, pb))
    if not pre_a or not pre_b:
        return _cmp(not pre_a, not pre_b)
    for x, y in zip(pre_a, pre_b, strict=False):
        x_num, y_num = x.isdigit(), y.isdigit()
        if x_num and y_num:
            result = _cmp(int(x), int(y))
        elif x_num != y_num:
            result = -1 if x_num else 1
        else:
            result = _cmp(x > y, x < y)
        if result:
            return result
    return _cmp(len(pre_a), len(pre_b))


def _includes(target: Any, arg: Any) -> bool:
    # compile.go includesFunc: membership for a list attribute (at most
    # ResourceSliceMaxAttributeValuesPerDevice values), equality otherwise.
    if isinstance(target, list):
        if len(target) > _RESOURCE_SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE:
            raise ValueError(
                "'includes' function cannot be applied to lists longer than "
                f"{_RESOURCE_SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE} values"
            )
        return any(_cel_equal(item, arg) for item in target)
    return _cel_equal(target, arg)


def _cel_equal(a: Any, b: Any) -> bool:
    # CEL's heterogeneous equality for the values an attribute holds: a
    # bool is never equal to an int.
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


def _overload(
    name: str,
    result: cel.Type,
    params: list[cel.Type],
    impl: Callable[..., Any],
    *,
    member: bool = False,
) -> cel.Overload:
    return cel.Overload(name, result, params, is_member=member, impl=impl)


def _declared(name: str, result: cel.Type, params: list[cel.Type]) -> cel.Overload:
    """A member overload for the checker whose implementation is another
    overload's (see _functions)."""
    return cel.Overload(name, result, params, is_member=True)


def _compare(a: Any, b: Any) -> int:
    if isinstance(a, _QuantityMessage) and isinstance(b, _QuantityMessage):
        return _cmp(_nanos(a), _nanos(b))
    if isinstance(a, _SemverMessage) and isinstance(b, _SemverMessage):
        return _semver_compare(a, b)
    raise ValueError(
        f"no such overload: {a.DESCRIPTOR.full_name} compared with {b.DESCRIPTOR.full_name}"
    )


_RE2_OPTIONS: Final = re2.Options()
_RE2_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> Any:
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as err:
        detail = err.args[0] if err.args else err
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise ValueError(f"Illegal regex: {detail}") from None


def _find(text: str, pattern: str) -> str:
    # library/regex.go find: the leftmost match, "" when there is none.
    match = _regex(pattern).search(text)
    return "" if match is None else str(match.group(0))


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    # library/regex.go findAll: Go's FindAllString, whose successive matches
    # skip an empty match right after the previous match.
    found: list[str] = []
    end = -1
    for match in _regex(pattern).finditer(text):
        if 0 <= limit <= len(found):
            break
        if match.start() == match.end() == end:
            continue
        found.append(str(match.group(0)))
        end = match.end()
    return found


def _sets_contains(items: list[Any], sub: list[Any]) -> bool:
    # cel-go ext/sets.go setsContains: every element of sub is in items.
    return all(any(_cel_equal(x, y) for x in items) for y in sub)


def _sets_intersects(a: list[Any], b: list[Any]) -> bool:
    return any(any(_cel_equal(x, y) for y in b) for x in a)


def _includes_overloads() -> list[cel.Overload]:
    """Upstream declares ``includes(dyn, dyn)``. CEL C++ implementations
    match arguments by kind and never match dyn, so there is one overload
    per pair of kinds; the two message types share one implementation
    (see _functions), so Quantity's overloads are declared only."""
    kinds: list[tuple[str, cel.Type, bool]] = [
        ("bool", cel.Type.BOOL, True),
        ("int", cel.Type.INT, True),
        ("uint", cel.Type.UINT, True),
        ("double", cel.Type.DOUBLE, True),
        ("string", cel.Type.STRING, True),
        ("bytes", cel.Type.BYTES, True),
        ("null", cel.Type.NULL, True),
        ("list", cel.Type.List(cel.Type.DYN), True),
        ("map", cel.Type.Map(cel.Type.DYN, cel.Type.DYN), True),
        ("semver", _SEMVER, True),
        ("quantity", _QUANTITY, False),
    ]
    overloads = []
    for target_name, target, target_impl in kinds:
        for arg_name, arg, arg_impl in kinds:
            name = f"dra_includes_{target_name}_{arg_name}"
            if target_impl and arg_impl:
                overloads.append(
                    _overload(name, cel.Type.BOOL, [target, arg], _includes, member=True)
                )
            else:
                overloads.append(_declared(name, cel.Type.BOOL, [target, arg]))
    return overloads


def _functions() -> list[cel.FunctionDecl]:
    # Short names: a signature reads best with one short name per type.
    Q, S, B, I64, D, STR, LST = (
        _QUANTITY,
        _SEMVER,
        cel.Type.BOOL,
        cel.Type.INT,
        cel.Type.DOUBLE,
        cel.Type.STRING,
        cel.Type.List(cel.Type.DYN),
    )
    decls: dict[str, list[cel.Overload]] = {
        # library/quantity.go quantityLibraryDecls.
        "quantity": [_overload("string_to_quantity", Q, [STR], _string_to_quantity)],
        "isQuantity": [_overload("is_quantity_string", B, [STR], _is_quantity)],
        "sign": [_overload("quantity_sign", I64, [Q], lambda q: _cmp(_nanos(q), 0))],
        # CEL C++ dispatches application types by kind (all messages are
        # one kind), so one implementation serves the quantity and the
        # semver overload of each comparison; the checker still sees both.
        "isGreaterThan": [
            _overload(
                "quantity_is_greater_than", B, [Q, Q], lambda a, b: _compare(a, b) == 1, member=True
            ),
            _declared("semver_is_greater_than", B, [S, S]),
        ],
        "isLessThan": [
            _overload(
                "quantity_is_less_than", B, [Q, Q], lambda a, b: _compare(a, b) == -1, member=True
            ),
            _declared("semver_is_less_than", B, [S, S]),
        ],
        "compareTo": [
            _overload("quantity_compare_to", I64, [Q, Q], _compare, member=True),
            _declared("semver_compare_to", I64, [S, S]),
        ],
        "asApproximateFloat": [
            _overload("quantity_get_float", D, [Q], _quantity_approximate_float, member=True)
        ],
        "asInteger": [_overload("quantity_get_int", I64, [Q], _quantity_as_integer, member=True)],
        "isInteger": [
            _overload(
                "quantity_is_integer",
                B,
                [Q],
                lambda q: _quantity_as_int(q) is not None,
                member=True,
            )
        ],
        "add": [
            _overload(
                "quantity_add",
                Q,
                [Q, Q],
                lambda a, b: _quantity(_nanos(a) + _nanos(b)),
                member=True,
            ),
            _overload(
                "quantity_add_int",
                Q,
                [Q, I64],
                lambda a, n: _quantity(_nanos(a) + n * _NANO),
                member=True,
            ),
        ],
        "sub": [
            _overload(
                "quantity_sub",
                Q,
                [Q, Q],
                lambda a, b: _quantity(_nanos(a) - _nanos(b)),
                member=True,
            ),
            _overload(
                "quantity_sub_int",
                Q,
                [Q, I64],
                lambda a, n: _quantity(_nanos(a) - n * _NANO),
                member=True,
            ),
        ],
        # library/semverlib.go declarations (SemverVersion(1) and later).
        "semver": [
            _overload("string_to_semver", S, [STR], _string_to_semver),
            _overload("string_bool_to_semver", S, [STR, B], _string_to_semver),
        ],
        "isSemver": [
            _overload("is_semver_string", B, [STR], _is_semver),
            _overload("is_semver_string_bool", B, [STR, B], _is_semver),
        ],
        "major": [_overload("semver_major", I64, [S], lambda v: _semver_parts(v)[0], member=True)],
        "minor": [_overload("semver_minor", I64, [S], lambda v: _semver_parts(v)[1], member=True)],
        "patch": [_overload("semver_patch", I64, [S], lambda v: _semver_parts(v)[2], member=True)],
        # library/regex.go.
        "find": [_overload("string_find_string", STR, [STR, STR], _find, member=True)],
        "findAll": [
            _overload(
                "string_find_all_string", cel.Type.List(STR), [STR, STR], _find_all, member=True
            ),
            _overload(
                "string_find_all_string_int",
                cel.Type.List(STR),
                [STR, STR, I64],
                _find_all,
                member=True,
            ),
        ],
        # cel-go ext/sets.go (ext.Sets() of the base environment).
        "sets.contains": [_overload("list_sets_contains_list", B, [LST, LST], _sets_contains)],
        "sets.equivalent": [
            _overload(
                "list_sets_equivalent_list",
                B,
                [LST, LST],
                lambda a, b: _sets_contains(a, b) and _sets_contains(b, a),
            )
        ],
        "sets.intersects": [
            _overload("list_sets_intersects_list", B, [LST, LST], _sets_intersects)
        ],
        # compile.go: declared in the StoredExpressions environment.
        "includes": _includes_overloads(),
    }
    return [cel.FunctionDecl(name, overloads) for name, overloads in decls.items()]


# --- the environment ----------------------------------------------------------
#
# The `device` fields are declared as dotted variables ("device.driver", ...):
# CEL resolves `device.driver` to the longest declared name, so each field has
# its own type (capacity values are quantities, as upstream declares them) and
# a field the environment lacks is a compile error.

_DRIVER: Final = "device.driver"
_MULTI: Final = "device.allowMultipleAllocations"
_ATTRIBUTES: Final = "device.attributes"
_CAPACITY: Final = "device.capacity"
_FIELDS: Final = "driver, attributes, capacity and allowMultipleAllocations"

_ENV: Final = cel.NewEnv(
    descriptor_pool=_POOL,
    variables={
        _DRIVER: cel.Type.STRING,
        _MULTI: cel.Type.BOOL,
        _ATTRIBUTES: cel.Type.Map(cel.Type.STRING, cel.Type.Map(cel.Type.STRING, cel.Type.DYN)),
        _CAPACITY: cel.Type.Map(cel.Type.STRING, cel.Type.Map(cel.Type.STRING, _QUANTITY)),
    },
    extensions=[
        ext_strings.ExtStrings(2),
        ext_bindings.ExtBindings(),
        ext_optional.ExtOptional(),
    ],
    functions=_functions(),
)

# CEL C++ puts an absl status code before its messages and after some.
_STATUS_PREFIX: Final = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX: Final = re.compile(r" \[[A-Z_]+\]$")
_KEY_NOT_FOUND: Final = re.compile(r'^Key not found in map : "(.*)"$', re.DOTALL)
_OTHER_KEY_NOT_FOUND: Final = re.compile(r"^Key not found in map : (.*)$", re.DOTALL)
_UNDECLARED_FIELD: Final = re.compile(
    r"undeclared reference to 'device\.([^']*)' \(in container ''\)"
)
_ACCEPTED_TYPES: Final = frozenset({"BOOL", "DYN"})
_TYPE_NAMES: Final = {
    "BOOL": "bool",
    "INT": "int",
    "UINT": "uint",
    "DOUBLE": "double",
    "STRING": "string",
    "BYTES": "bytes",
    "NULL": "null_type",
    "DYN": "dyn",
    "LIST": "list",
    "MAP": "map",
    "TYPE": "type",
    "DURATION": "google.protobuf.Duration",
    "TIMESTAMP": "google.protobuf.Timestamp",
}


def _strip_status(text: str) -> str:
    return _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", text.strip()))


def _type_name(type_: cel.Type) -> str:
    """A checked type as cel-go spells it (``list(int)``), the spelling of
    upstream's "must evaluate to bool" error."""
    name = re.sub(r"[A-Za-z_][A-Za-z0-9_.]*", lambda m: _TYPE_NAMES.get(m[0], m[0]), type_.name())
    return name.replace("<", "(").replace(">", ")")


# --- compiled selectors ---------------------------------------------------------


class CompiledSelector:
    """One compiled selector expression (upstream's CompilationResult).
    Immutable; ``matches`` may be called from any thread."""

    __slots__ = ("_over_budget", "_program", "_views", "expression", "max_cost")

    def __init__(
        self, expression: str, program: cel.Expression, views: _DeviceViews, max_cost: int
    ) -> None:
        self.expression = expression
        # The worst-case cost in cel-go's units (cel_cost.py; upstream's
        # CompilationResult.MaxCost).
        self.max_cost = max_cost
        self._program = program
        self._views = views
        self._over_budget = ""
        if max_cost > CEL_SELECTOR_EXPRESSION_MAX_COST:
            self._over_budget = (
                "operation cancelled: actual cost limit exceeded (the expression's worst-case "
                f"cost {max_cost} is above the limit of {CEL_SELECTOR_EXPRESSION_MAX_COST}, "
                "so it is not evaluated)"
            )

    def __repr__(self) -> str:
        return f"CompiledSelector({shorten(self.expression)})"

    def matches(self, driver: str, device: Mapping[str, Any]) -> bool:
        """Whether ``device`` (one entry of a ResourceSlice's spec.devices,
        decoded JSON) of driver ``driver`` satisfies the selector
        (DeviceMatches). Raises CelEvaluationError on a runtime error, when
        the cost limit is exceeded, or when the device has an attribute the
        environment cannot represent."""
        if self._over_budget:
            raise CelEvaluationError(self._over_budget)
        entry = self._views.device(driver, device)
        # A selector's answer depends on the device alone, so it is kept with
        # the device: the same class or request selector over the same
        # device, for the next pod or node, costs one dictionary look-up.
        known = entry.answers.get(self.expression)
        if known is None:
            try:
                known = self._answer(self._views.view(driver, entry))
            except CelEvaluationError as err:
                known = err
            if len(entry.answers) >= _RESULTS_PER_DEVICE:
                entry.answers.clear()
            entry.answers[self.expression] = known
        if isinstance(known, CelEvaluationError):
            raise CelEvaluationError(known.message)
        return known

    def _answer(self, view: _DeviceView) -> bool | CelEvaluationError:
        try:
            result = self._evaluate(view)
        except CelEvaluationError as err:
            return err
        value = result.value()
        if isinstance(value, bool):
            return value
        return CelEvaluationError(
            f"CEL result of type {_type_name(result.type())} could not be converted to bool"
        )

    def _evaluate(self, view: _DeviceView) -> cel.Value:
        added: list[str] = []
        while True:
            try:
                result = self._program.eval(data=view.data)
            except RuntimeError as err:
                raise CelEvaluationError(_runtime_message(str(err))) from None
            if result.type().name() != "ERROR":
                return result
            message = _strip_status(str(result.value()))
            missing = _KEY_NOT_FOUND.match(message)
            if missing is None:
                raise CelEvaluationError(_runtime_message(message))
            key = missing[1]
            # Upstream's attributes and capacity maps answer a lookup of an
            # unknown domain with an empty map (newStringInterfaceMapWithDefault).
            # CEL C++ maps cannot, so the lookup is retried with that domain
            # present and empty; a key that was already there is an attribute
            # or capacity name, and its error stands.
            if (key in view.attributes and key in view.capacity) or len(
                added
            ) >= _MAX_DEFAULT_DOMAINS:
                raise CelEvaluationError(f"no such key: {key}")
            added.append(key)
            view = view.with_empty_domain(key)


def _runtime_message(message: str) -> str:
    message = _strip_status(message)
    if "Iteration budget exceeded" in message:
        # cel-go's text for a runtime cost limit (interpreter/runtimecost.go).
        return (
            "operation cancelled: actual cost limit exceeded "
            f"(more than {ITERATION_BUDGET} comprehension iterations in one evaluation)"
        )
    # cel-go's "no such key" (types.NewErrFromString of a missing key).
    missing = _KEY_NOT_FOUND.match(message) or _OTHER_KEY_NOT_FOUND.match(message)
    if missing is not None:
        return f"no such key: {missing[1]}"
    return message


# --- device views ----------------------------------------------------------------


def _split_name(name: str, driver: str) -> tuple[str, str]:
    # compile.go parseQualifiedName.
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def _attribute_value(name: str, attribute: Any) -> Any:
    # compile.go getAttributeValue with DRAListTypeAttributes off (its v1.36
    # default): the first of int, bool, string, version that is set; none,
    # a list value included, is "unsupported attribute value".
    if isinstance(attribute, Mapping):
        for field, kind in (("int", int), ("bool", bool), ("string", str), ("version", str)):
            value = attribute.get(field)
            if value is None:
                continue
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                break
            if field != "version":
                return value
            try:
                return _string_to_semver(str(value))
            except ValueError as err:
                raise CelEvaluationError(
                    f"attribute {name}: parse semantic version: {err}"
                ) from None
    raise CelEvaluationError(f"attribute {name}: unsupported attribute value")


class _DeviceView:
    """The CEL variables of one device, converted once and shared by every
    selector evaluated against it, and those selectors' answers.

    Each evaluation hands CEL C++ the variables afresh rather than keeping a
    CEL activation: an activation is ten times the size and belongs to the
    thread that built it (another thread's evaluation fails with "No
    PyCelArena found"), and with the answers kept here a device is evaluated
    about once per selector anyway."""

    __slots__ = ("attributes", "capacity", "data", "driver", "multi")

    def __init__(
        self,
        driver: str,
        multi: bool,
        attributes: dict[str, dict[str, Any]],
        capacity: dict[str, dict[str, Message]],
    ) -> None:
        self.driver = driver
        self.multi = multi
        self.attributes = attributes
        self.capacity = capacity
        self.data = {_DRIVER: driver, _MULTI: multi, _ATTRIBUTES: attributes, _CAPACITY: capacity}

    @classmethod
    def build(cls, driver: str, device: Mapping[str, Any]) -> _DeviceView:
        attributes: dict[str, dict[str, Any]] = {}
        for name, attribute in _entries(device, "attributes"):
            domain, ident = _split_name(name, driver)
            attributes.setdefault(domain, {})[ident] = _attribute_value(name, attribute)
        capacity: dict[str, dict[str, Message]] = {}
        for name, entry in _entries(device, "capacity"):
            domain, ident = _split_name(name, driver)
            value = entry.get("value") if isinstance(entry, Mapping) else None
            if not isinstance(value, str):
                raise CelEvaluationError(f"capacity {name}: no quantity in its value")
            try:
                capacity.setdefault(domain, {})[ident] = _quantity(parse_quantity(value).nanos)
            except QuantityError as err:
                raise CelEvaluationError(f"capacity {name}: {err}") from None
        multi = device.get("allowMultipleAllocations") is True
        return cls(driver, multi, attributes, capacity)

    def with_empty_domain(self, domain: str) -> _DeviceView:
        attributes = (
            self.attributes if domain in self.attributes else {**self.attributes, domain: {}}
        )
        capacity = self.capacity if domain in self.capacity else {**self.capacity, domain: {}}
        return _DeviceView(self.driver, self.multi, attributes, capacity)


def _entries(device: Mapping[str, Any], field: str) -> list[tuple[str, Any]]:
    entries = device.get(field)
    if entries is None:
        return []
    if not isinstance(entries, Mapping):
        raise CelEvaluationError(f"device {field} is not a map")
    return [(str(name), value) for name, value in entries.items()]


class _Device:
    """What is kept of one device: selectors' answers by expression, and
    while it is recent its CEL view. Holding the device keeps its identity
    from being reused while cached."""

    __slots__ = ("answers", "device", "view")

    def __init__(self, device: Mapping[str, Any]) -> None:
        self.device = device
        self.answers: dict[str, bool | CelEvaluationError] = {}
        self.view: _DeviceView | CelEvaluationError | None = None


class _DeviceViews:
    """Devices by (driver, device mapping identity), LRU-bounded and
    thread-safe: answers for up to ``max_devices`` (a few hundred bytes
    each), views for the ``max_views`` most recently built (a few KB each).
    A device is read once, so a mapping must not change after it was
    matched (ResourceSlices in a snapshot never do)."""

    def __init__(self, max_devices: int, max_views: int) -> None:
        self._max_devices = max_devices
        self._max_views = max_views
        self._lock = threading.Lock()
        self._devices: OrderedDict[tuple[str, int], _Device] = OrderedDict()
        self._with_views: OrderedDict[tuple[str, int], _Device] = OrderedDict()

    def device(self, driver: str, device: Mapping[str, Any]) -> _Device:
        key = (driver, id(device))
        with self._lock:
            found = self._devices.get(key)
            if found is not None:
                self._devices.move_to_end(key)
                return found
            found = self._devices[key] = _Device(device)
            if len(self._devices) > self._max_devices:
                dropped_key, dropped = self._devices.popitem(last=False)
                dropped.view = None
                self._with_views.pop(dropped_key, None)
            return found

    def view(self, driver: str, entry: _Device) -> _DeviceView:
        view = entry.view
        if view is None:
            try:
                view = _DeviceView.build(driver, entry.device)
            except CelEvaluationError as err:
                view = err
            key = (driver, id(entry.device))
            with self._lock:
                entry.view = view
                self._with_views[key] = entry
                self._with_views.move_to_end(key)
                while len(self._with_views) > self._max_views:
                    _, old = self._with_views.popitem(last=False)
                    old.view = None
        if isinstance(view, CelEvaluationError):
            raise CelEvaluationError(view.message)
        return view


# --- the cache -------------------------------------------------------------------


def _compile(expression: str, views: _DeviceViews) -> CompiledSelector:
    # compile.go CompileCELExpression; the length limit is the API's
    # (validateCELSelector), checked first so that no parser sees a huge text.
    size = len(expression.encode("utf-8", "surrogatepass"))
    if size > CEL_SELECTOR_EXPRESSION_MAX_LENGTH:
        raise CelCompileError(
            f"compilation failed: the expression is {size} bytes long, more than the "
            f"{CEL_SELECTOR_EXPRESSION_MAX_LENGTH} a CEL selector may have"
        )
    try:
        program = _ENV.compile(expression)
    except RuntimeError as err:
        message = _strip_status(str(err))
        message = message.replace(
            "undeclared reference to 'device' (in container '')",
            f"undeclared reference to 'device' (use its fields: {_FIELDS})",
        )
        message = _UNDECLARED_FIELD.sub(
            lambda m: f"undefined field '{m[1]}' (a device has the fields {_FIELDS})", message
        )
        raise CelCompileError("compilation failed: " + message) from None
    try:
        output = program.return_type()
        output_name = output.name()
        serialized = program.serialize()
    except RuntimeError as err:
        # CEL C++ checks some types only when asked for them (a map whose
        # keys are lists, say).
        raise CelCompileError("compilation failed: " + _strip_status(str(err))) from None
    if output_name not in _ACCEPTED_TYPES:
        raise CelCompileError(
            f"must evaluate to bool or the unknown type, not {_type_name(output)}"
        )
    try:
        max_cost = estimate_cost(serialized)
    except CostError as err:
        raise CelCompileError(f"cost estimation failed: {err}") from None
    return CompiledSelector(expression, program, views, max_cost)


class CelCache:
    """Compiled selectors by expression text, least recently used dropped
    beyond ``max_entries`` (upstream's cel.Cache). Thread-safe; an
    expression being compiled by one thread is not compiled again by
    another. Failed compilations are not cached, as upstream's are not."""

    def __init__(self, max_entries: int = 1000) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self._max = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, CompiledSelector] = OrderedDict()
        self._compiling: dict[str, threading.Lock] = {}
        self._views = _DeviceViews(_DEVICES, _DEVICE_VIEWS)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def compile(self, expression: str) -> CompiledSelector:
        """The compiled ``expression``; CelCompileError says why it is not
        a valid selector."""
        with self._lock:
            found = self._entries.get(expression)
            if found is not None:
                self._entries.move_to_end(expression)
                return found
            key_lock = self._compiling.setdefault(expression, threading.Lock())
        with key_lock:
            with self._lock:
                found = self._entries.get(expression)
                if found is not None:
                    return found
            try:
                compiled = _compile(expression, self._views)
            except CelCompileError:
                with self._lock:
                    self._compiling.pop(expression, None)
                raise
            with self._lock:
                self._entries[expression] = compiled
                while len(self._entries) > self._max:
                    self._entries.popitem(last=False)
                self._compiling.pop(expression, None)
            return compiled
