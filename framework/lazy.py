"""Package namespaces that import a submodule on first use of one of its names
(PEP 562 module ``__getattr__``).

A package's ``__init__`` re-exports its public names so that users write
``from berth.framework import Status``; importing every submodule up front would
make any import of the package, even of one small submodule beneath it, pay for
all of them (numpy and the runtime for ``berth.framework.status``). A package
that uses ``lazy_exports`` lists its names once, as the imports of an
``if TYPE_CHECKING:`` block (what type checkers read), and at run time imports
the submodule that defines a name the first time the name is read, then keeps
it as a plain attribute::

    from typing import TYPE_CHECKING

    from berth.framework.lazy import lazy_exports

    if TYPE_CHECKING:
        from berth.plugins.nodename.node_name import NodeName

    __all__ = ["NodeName"]

    if not TYPE_CHECKING:
        __getattr__, __dir__ = lazy_exports(globals())
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

__all__ = ["lazy_exports", "type_checking_imports"]


def type_checking_imports(source: str) -> dict[str, str]:
    """Name to absolute module of each ``from M import N`` (``as`` names
    included) at the top level of ``source``'s ``if TYPE_CHECKING:`` blocks."""
    out: dict[str, str] = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.If) and _is_type_checking(node.test)):
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
                for alias in stmt.names:
                    out[alias.asname or alias.name] = stmt.module
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def lazy_exports(
    namespace: MutableMapping[str, Any],
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the package whose ``globals()`` is
    ``namespace``: each name its ``if TYPE_CHECKING:`` block imports is looked up
    in that submodule on first read and stored in the package's namespace, so
    later reads never come back here. Any other name is an AttributeError (the
    import system then tries it as a submodule)."""
    package = namespace["__name__"]
    where = type_checking_imports(Path(namespace["__file__"]).read_text(encoding="utf-8"))

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__
