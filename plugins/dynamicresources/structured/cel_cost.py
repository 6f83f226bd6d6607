"""The worst-case cost of a checked CEL selector, in cel-go's cost units.

Upstream bounds a selector twice: the API server refuses one whose estimated
worst-case cost exceeds CELSelectorExpressionMaxCost (k8s.io/kubernetes
pkg/apis/resource/validation validateCELSelector, with the estimate of
dynamic-resource-allocation/cel compile.go), and the scheduler stops an
evaluation whose actual cost exceeds it. CEL C++ counts no cost, only
comprehension iterations, and ten thousand iterations that each build a
kilobyte-long string or list take seconds and a gigabyte. So cel.py estimates
the cost here, from the checked expression CEL C++ serializes, and does not
evaluate a selector over the limit.

The rules are cel-go's checker/cost.go (coster: a literal is free, an
identifier or field selection costs 1, a call 1 plus its arguments, a new
list 10, a new map 30, a new message 40, a comprehension its range's size
times the cost of its condition and step; string traversals cost 0.1 per
character, regular expressions 0.25 per pattern character) with the sizes
compile.go declares for the device (32 domains of 32 attributes or
capacities, attribute values of at most 64 characters, domains of 63, ids
of 32, the driver of 63). Where cel-go would call a size unknown (the
unbounded maximum), this estimate takes the largest size an expression of
the length limit can produce, so that it stays at or below upstream's: a
selector the API server accepted is not refused here. One exception: joining
two lists costs 1 in cel-go, whose result is a view of both, while CEL C++
copies them, so here it costs 0.1 per element like joining strings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

__all__ = ["CostError", "estimate_cost"]

# cel-go common/cost.go.
_LIST_CREATE: Final = 10
_MAP_CREATE: Final = 30
_STRUCT_CREATE: Final = 40
_STRING_TRAVERSAL: Final = 0.1
_REGEX_LENGTH: Final = 0.25

# k8s.io/api/resource/v1 types.go, as compile.go declares the device.
_MAX_ATTRIBUTES: Final = 32
_ATTRIBUTE_VALUE: Final = 64
_DOMAIN: Final = 63
_ID: Final = 32
_DRIVER: Final = 63
# The largest string or list an expression of at most 10 KiB spells out.
_UNKNOWN: Final = 10 * 1024


class CostError(Exception):
    """The serialized checked expression could not be read."""


@dataclass(frozen=True, slots=True)
class _Size:
    """The largest size of a value (characters of a string, entries of a
    list or map; 1 for a scalar) and, for a container, of its elements or
    values (``elem``) and, for a map only, of its keys (``key``)."""

    n: int
    elem: _Size | None = None
    key: _Size | None = None


_SCALAR: Final = _Size(1)
_UNKNOWN_SIZE: Final = _Size(_UNKNOWN, _Size(_UNKNOWN))
_DEVICE_VARIABLES: Final[dict[str, _Size]] = {
    "device.driver": _Size(_DRIVER),
    "device.allowMultipleAllocations": _SCALAR,
    "device.attributes": _Size(
        _MAX_ATTRIBUTES,
        _Size(_MAX_ATTRIBUTES, _Size(_ATTRIBUTE_VALUE), _Size(_ID)),
        _Size(_DOMAIN),
    ),
    "device.capacity": _Size(
        _MAX_ATTRIBUTES, _Size(_MAX_ATTRIBUTES, _SCALAR, _Size(_ID)), _Size(_DOMAIN)
    ),
}


def _syntax_types() -> tuple[type[Message], type[Message]]:
    """Message classes for the parts of cel.expr's syntax.proto and
    checked.proto the estimate reads (field numbers as in cel.dev/expr);
    the rest of a CheckedExpr is kept as unknown fields."""
    f = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="berth/dynamicresources/cel_checked.proto", package="berth.celexpr", syntax="proto3"
    )

    def message(
        name: str, fields: list[tuple[str, int, int, str, bool]], parent: Any = None
    ) -> Any:
        container = proto.message_type if parent is None else parent.nested_type
        m = container.add(name=name)
        for field_name, number, kind, type_name, repeated in fields:
            added = m.field.add(
                name=field_name,
                number=number,
                type=kind,
                label=f.LABEL_REPEATED if repeated else f.LABEL_OPTIONAL,
            )
            if type_name:
                added.type_name = type_name
        return m

    msg, string, int64, boolean = f.TYPE_MESSAGE, f.TYPE_STRING, f.TYPE_INT64, f.TYPE_BOOL
    uint64, double, byts = f.TYPE_UINT64, f.TYPE_DOUBLE, f.TYPE_BYTES
    x = ".berth.celexpr."
    constant = message(
        "Constant",
        [
            ("bool_value", 2, boolean, "", False),
            ("int64_value", 3, int64, "", False),
            ("uint64_value", 4, uint64, "", False),
            ("double_value", 5, double, "", False),
            ("string_value", 6, string, "", False),
            ("bytes_value", 7, byts, "", False),
        ],
    )
    constant.oneof_decl.add(name="constant_kind")
    for field in constant.field:
        field.oneof_index = 0
    expr = message(
        "Expr",
        [
            ("id", 2, int64, "", False),
            ("const_expr", 3, msg, x + "Constant", False),
            ("ident_expr", 4, msg, x + "Expr.Ident", False),
            ("select_expr", 5, msg, x + "Expr.Select", False),
            ("call_expr", 6, msg, x + "Expr.Call", False),
            ("list_expr", 7, msg, x + "Expr.CreateList", False),
            ("struct_expr", 8, msg, x + "Expr.CreateStruct", False),
            ("comprehension_expr", 9, msg, x + "Expr.Comprehension", False),
        ],
    )
    expr.oneof_decl.add(name="expr_kind")
    for field in expr.field:
        if field.number >= 3:
            field.oneof_index = 0
    message("Ident", [("name", 1, string, "", False)], expr)
    message(
        "Select",
        [
            ("operand", 1, msg, x + "Expr", False),
            ("field", 2, string, "", False),
            ("test_only", 3, boolean, "", False),
        ],
        expr,
    )
    message(
        "Call",
        [
            ("target", 1, msg, x + "Expr", False),
            ("function", 2, string, "", False),
            ("args", 3, msg, x + "Expr", True),
        ],
        expr,
    )
    message("CreateList", [("elements", 1, msg, x + "Expr", True)], expr)
    create_struct = message(
        "CreateStruct",
        [
            ("message_name", 1, string, "", False),
            ("entries", 2, msg, x + "Expr.CreateStruct.Entry", True),
        ],
        expr,
    )
    message(
        "Entry",
        [
            ("field_key", 2, string, "", False),
            ("map_key", 3, msg, x + "Expr", False),
            ("value", 4, msg, x + "Expr", False),
        ],
        create_struct,
    )
    message(
        "Comprehension",
        [
            ("iter_var", 1, string, "", False),
            ("iter_range", 2, msg, x + "Expr", False),
            ("accu_var", 3, string, "", False),
            ("accu_init", 4, msg, x + "Expr", False),
            ("loop_condition", 5, msg, x + "Expr", False),
            ("loop_step", 6, msg, x + "Expr", False),
            ("result", 7, msg, x + "Expr", False),
            ("iter_var2", 8, string, "", False),
        ],
        expr,
    )
    message(
        "Reference",
        [("name", 1, string, "", False), ("overload_id", 3, string, "", True)],
    )
    checked = message(
        "CheckedExpr",
        [
            ("reference_map", 2, msg, x + "CheckedExpr.ReferenceMapEntry", True),
            ("expr", 4, msg, x + "Expr", False),
        ],
    )
    entry = message(
        "ReferenceMapEntry",
        [("key", 1, int64, "", False), ("value", 2, msg, x + "Reference", False)],
        checked,
    )
    entry.options.map_entry = True
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("berth.celexpr.CheckedExpr")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("berth.celexpr.Expr")),
    )


_CheckedExpr, _Expr = _syntax_types()
_CHECKED_URL: Final = "type.googleapis.com/cel.expr.CheckedExpr"


def estimate_cost(serialized: bytes) -> int:
    """The worst-case cost of a checked expression as CEL C++'s
    Expression.serialize() gives it (an Any holding a cel.expr.CheckedExpr)."""
    try:
        wrapped = any_pb2.Any.FromString(serialized)
        if wrapped.type_url != _CHECKED_URL:
            raise CostError(f"a serialized expression of type {wrapped.type_url!r}")
        checked: Any = _CheckedExpr.FromString(wrapped.value)
    except DecodeError as err:
        raise CostError(f"unreadable checked expression: {err}") from None
    overloads = {key: list(ref.overload_id) for key, ref in checked.reference_map.items()}
    coster = _Coster(overloads)
    cost, _ = coster.cost(checked.expr)
    return math.ceil(cost)


class _Coster:
    def __init__(self, overloads: dict[int, list[str]]) -> None:
        self._overloads = overloads
        self._locals: list[tuple[str, _Size]] = []

    def _local(self, name: str) -> _Size | None:
        for local, size in reversed(self._locals):
            if local == name:
                return size
        return None

    def cost(self, e: Any) -> tuple[float, _Size]:
        """(worst-case cost, worst-case size) of one node."""
        kind = e.WhichOneof("expr_kind")
        if kind == "const_expr":
            return 0.0, _constant_size(e.const_expr)
        if kind == "ident_expr":
            name = e.ident_expr.name
            local = self._local(name)
            if local is not None:
                return 1.0, local
            return 1.0, _DEVICE_VARIABLES.get(name, _UNKNOWN_SIZE)
        if kind == "select_expr":
            return self._select(e.select_expr)
        if kind == "call_expr":
            return self._call(e)
        if kind == "list_expr":
            cost = float(_LIST_CREATE)
            elem = _Size(0)
            for element in e.list_expr.elements:
                c, s = self.cost(element)
                cost += c
                elem = _union(elem, s)
            return cost, _Size(len(e.list_expr.elements), elem)
        if kind == "struct_expr":
            return self._struct(e.struct_expr)
        if kind == "comprehension_expr":
            return self._comprehension(e.comprehension_expr)
        return 0.0, _UNKNOWN_SIZE

    def _select(self, sel: Any) -> tuple[float, _Size]:
        cost, operand = self.cost(sel.operand)
        if sel.test_only:
            # has(): cost.go's presence test, 1.
            return cost + 1.0, _SCALAR
        if operand.elem is None:
            # Selecting from a value of no known shape (dyn) is free in cel-go.
            return cost, _UNKNOWN_SIZE
        # A field of a map is one of its entries.
        return cost + 1.0, operand.elem

    def _struct(self, create: Any) -> tuple[float, _Size]:
        cost = 0.0
        keys = _Size(0)
        values = _Size(0)
        for entry in create.entries:
            c, value = self.cost(entry.value)
            cost += c
            values = _union(values, value)
            if entry.HasField("map_key"):
                ck, key = self.cost(entry.map_key)
                cost += ck
                keys = _union(keys, key)
        if create.message_name:
            return cost + _STRUCT_CREATE, _SCALAR
        return cost + _MAP_CREATE, _Size(len(create.entries), values, keys)

    def _comprehension(self, comp: Any) -> tuple[float, _Size]:
        range_cost, range_size = self.cost(comp.iter_range)
        init_cost, init_size = self.cost(comp.accu_init)
        range_is_empty_list = (
            comp.iter_range.WhichOneof("expr_kind") == "list_expr"
            and not comp.iter_range.list_expr.elements
        )
        condition = comp.loop_condition
        if (
            range_is_empty_list
            and condition.WhichOneof("expr_kind") == "const_expr"
            and condition.const_expr.WhichOneof("constant_kind") == "bool_value"
            and not condition.const_expr.bool_value
            and not comp.accu_var.startswith(("@", "__"))
        ):
            # cel.bind (cost.go costBind): the binding, then the body once.
            self._locals.append((comp.accu_var, init_size))
            result_cost, result_size = self.cost(comp.result)
            self._locals.pop()
            return range_cost + init_cost + result_cost, result_size
        # Over a map the (first) iteration variable is a key, over a list an
        # element; a second variable is the value or the element.
        first = (range_size.key or range_size.elem) or _UNKNOWN_SIZE
        second = range_size.elem or _UNKNOWN_SIZE
        accu_size = (
            _Size(range_size.n, _UNKNOWN_SIZE)
            if comp.accu_init.WhichOneof("expr_kind") in ("list_expr", "struct_expr")
            else init_size
        )
        self._locals.append((comp.accu_var, accu_size))
        self._locals.append((comp.iter_var, first))
        if comp.iter_var2:
            self._locals.append((comp.iter_var2, second))
        condition_cost, _ = self.cost(comp.loop_condition)
        step_cost, step_size = self.cost(comp.loop_step)
        if comp.iter_var2:
            self._locals.pop()
        self._locals.pop()
        result_cost, result_size = self.cost(comp.result)
        self._locals.pop()
        cost = range_cost + init_cost + result_cost + range_size.n * (condition_cost + step_cost)
        if comp.accu_init.WhichOneof("expr_kind") in ("list_expr", "struct_expr"):
            # map and filter: one entry per iteration at most.
            return cost, _Size(range_size.n, step_size.elem or _UNKNOWN_SIZE)
        return cost, result_size

    def _call(self, e: Any) -> tuple[float, _Size]:
        call = e.call_expr
        function = call.function
        overloads = self._overloads.get(e.id, [])
        args = [self.cost(arg) for arg in call.args]
        arg_cost = sum(c for c, _ in args)
        sizes = [s for _, s in args]
        target_cost = 0.0
        target: _Size | None = None
        if call.HasField("target"):
            target_cost, target = self.cost(call.target)
        base = arg_cost + target_cost
        if function in ("_&&_", "_||_"):
            return base, _SCALAR
        if function == "_?_:_" and len(sizes) == 3:
            return args[0][0] + max(args[1][0], args[2][0]), _union(sizes[1], sizes[2])
        if function == "_[_]" and len(sizes) == 2:
            return base + 1.0, sizes[0].elem or _UNKNOWN_SIZE
        if function == "_+_" and len(sizes) == 2:
            total = _Size(
                sizes[0].n + sizes[1].n,
                _union_optional(sizes[0].elem, sizes[1].elem),
                _union_optional(sizes[0].key, sizes[1].key),
            )
            if any(o.startswith("add_list") for o in overloads):
                # cel-go charges 1: its concatenation is a lazy view. CEL C++
                # copies both lists, so the copy is charged like a string's.
                return base + 1.0 + total.n * _STRING_TRAVERSAL, total
            if any(o.startswith(("add_string", "add_bytes")) for o in overloads):
                return base + total.n * _STRING_TRAVERSAL, total
            return base + 1.0, _SCALAR
        if function in ("_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_") and len(sizes) == 2:
            smallest = min(sizes[0].n, sizes[1].n)
            return base + smallest * _STRING_TRAVERSAL, _SCALAR
        if function == "@in" and len(sizes) == 2:
            # A map look-up costs 1, a list is traversed.
            if "in_map" in overloads:
                return base + 1.0, _SCALAR
            return base + float(sizes[1].n), _SCALAR
        text = target if target is not None else (sizes[0] if sizes else _SCALAR)
        rest = sizes if target is not None else sizes[1:]
        if function == "matches" and rest:
            traversal = (text.n + 1) * _STRING_TRAVERSAL
            return base + traversal * rest[0].n * _REGEX_LENGTH, _SCALAR
        if function in ("find", "findAll") and rest:
            # k8s.io/apiserver/pkg/cel/library cost.go: as matches.
            traversal = (text.n + 1) * _STRING_TRAVERSAL
            found = _Size(text.n) if function == "find" else _Size(text.n, _Size(text.n))
            return base + traversal * rest[0].n * _REGEX_LENGTH, found
        if function == "contains" and rest:
            return base + text.n * _STRING_TRAVERSAL * rest[0].n * _STRING_TRAVERSAL, _SCALAR
        if function in ("startsWith", "endsWith") and rest:
            return base + rest[0].n * _STRING_TRAVERSAL, _SCALAR
        # k8s.io/apiserver/pkg/cel/library cost.go for the Kubernetes
        # environment's string functions.
        if function in ("lowerAscii", "upperAscii", "trim", "substring"):
            return base + text.n * _STRING_TRAVERSAL, _Size(text.n)
        if function == "replace" and len(rest) >= 2:
            return base + 2 * text.n * _STRING_TRAVERSAL, _Size(
                _replaced_size(text.n, rest[0].n, rest[1].n)
            )
        if function == "split":
            return base + 2 * text.n * _STRING_TRAVERSAL, _Size(text.n, _Size(text.n))
        if function == "join":
            element = text.elem or _UNKNOWN_SIZE
            separator = rest[0].n if rest else 0
            joined = text.n * element.n + separator * max(0, text.n - 1)
            return base + joined * _STRING_TRAVERSAL, _Size(joined)
        if function in ("indexOf", "lastIndexOf") and rest:
            return base + text.n * _STRING_TRAVERSAL, _SCALAR
        if function in ("charAt", "reverse"):
            # cel-go has no estimate for these: a call's 1.
            return base + 1.0, _Size(1 if function == "charAt" else text.n)
        if function == "format":
            return base + text.n * _STRING_TRAVERSAL, _UNKNOWN_SIZE
        if function == "includes":
            # compile.go draCostEstimator: at most the longest attribute list.
            return base + 48.0, _SCALAR
        if function in ("string", "bytes", "quote"):
            source = sizes[0] if sizes else text
            return base + source.n * _STRING_TRAVERSAL, _Size(source.n * 2 + 2)
        if function == "dyn" and sizes:
            return base + 1.0, sizes[0]
        if function in ("sets.contains", "sets.intersects", "sets.equivalent") and len(sizes) == 2:
            # ext/sets.go estimateSetsCost: one comparison per pair, twice
            # for equivalent.
            pairs = sizes[0].n * sizes[1].n
            return base + 1.0 + pairs * (2 if function == "sets.equivalent" else 1), _SCALAR
        if function in ("size", "int", "uint", "double", "bool") or function.startswith("is"):
            return base + 1.0, _SCALAR
        return base + 1.0, _result_size(sizes, target)


def _replaced_size(text: int, pattern: int, replacement: int) -> int:
    # library/cost.go "replace": the most replacements times the
    # replacement, plus what is kept.
    if pattern == 0:
        return (text + 1) * replacement + text
    if replacement <= pattern:
        return text
    return -(-text // pattern) * replacement


def _result_size(sizes: list[_Size], target: _Size | None) -> _Size:
    # A call the estimate has no rule for: its result is no larger than its
    # largest input (quantity and semver functions, optional values, ...).
    largest = _Size(0)
    for size in [*sizes, *([target] if target is not None else [])]:
        largest = _union(largest, size)
    return largest if largest.n else _SCALAR


def _constant_size(constant: Any) -> _Size:
    # An empty string costs as a scalar: cel-go's sizes start at 1 there too.
    return _Size(max(1, len(constant.string_value), len(constant.bytes_value)))


def _union(a: _Size, b: _Size) -> _Size:
    return _Size(max(a.n, b.n), _union_optional(a.elem, b.elem), _union_optional(a.key, b.key))


def _union_optional(a: _Size | None, b: _Size | None) -> _Size | None:
    if a is None:
        return b
    if b is None:
        return a
    return _union(a, b)
