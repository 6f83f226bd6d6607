"""Typed plugin args: a plugin names its args type as ``Args`` (what the config
loader decodes into) and as its interfaces' type parameter (what mypy gives
``self.args``). The two must agree for every in-tree plugin, and mypy --strict
must see ``self.args`` as that type."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest

from berth.framework.interfaces import Plugin
from berth.plugins.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[3]


def args_parameters(cls: type[Plugin]) -> set[object]:
    """The type parameters ``cls`` and its bases give the Plugin interfaces."""
    found: set[object] = set()
    for klass in cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            origin = typing.get_origin(base)
            if isinstance(origin, type) and issubclass(origin, Plugin):
                found.update(a for a in typing.get_args(base) if not isinstance(a, typing.TypeVar))
    return found


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_in_tree_plugin_types_its_args_as_its_args_class(name: str) -> None:
    cls = REGISTRY[name]
    params = args_parameters(cls)
    if cls.Args is None:
        assert not params, f"{name} takes no args but parameterises its interfaces with {params}"
    else:
        assert params == {cls.Args}, f"{name}: Args is {cls.Args}, type parameters {params}"


def test_mypy_strict_sees_self_args_as_the_args_class(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from berth.plugins.noderesources.fit import Fit\n"
        "from berth.plugins.nodename import NodeName\n"
        "reveal_type(Fit().args)\n"
        "reveal_type(NodeName().args)\n"
        "wrong: int = Fit().args.strategy\n"
    )
    # In a process of its own: mypy raises the interpreter's recursion limit.
    config = ["--config-file", str(ROOT / "pyproject.toml")]
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *config, str(probe)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    out, err, status = run.stdout, run.stderr, run.returncode
    assert status == 1, out + err
    assert 'Revealed type is "berth.plugins.noderesources.args.NodeResourcesFitArgs"' in out, out
    # A plugin without args keeps an untyped ``args``, as before.
    assert 'Revealed type is "Any"' in out, out
    assert "probe.py:5: error: Incompatible types in assignment" in out, out
