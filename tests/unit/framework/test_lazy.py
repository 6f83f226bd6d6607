"""framework/lazy.py: a package's names imported from their submodule on first
read, the submodule untouched until then."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import berth
from berth.framework.lazy import type_checking_imports


def test_type_checking_imports_are_the_names_and_their_modules() -> None:
    source = textwrap.dedent(
        """
        from typing import TYPE_CHECKING
        import typing
        from a.b import Outside

        if TYPE_CHECKING:
            from pkg.one import A, B as C
            from pkg.two import D
        if typing.TYPE_CHECKING:
            from pkg.three import E
        """
    )
    assert type_checking_imports(source) == {
        "A": "pkg.one",
        "C": "pkg.one",
        "D": "pkg.two",
        "E": "pkg.three",
    }


def _package(root: Path) -> None:
    pkg = root / "lazypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        textwrap.dedent(
            """
            from typing import TYPE_CHECKING

            from berth.framework.lazy import lazy_exports

            if TYPE_CHECKING:
                from lazypkg.heavy import Heavy
                from lazypkg.light import LIGHT

            __all__ = ["Heavy", "LIGHT"]

            if not TYPE_CHECKING:
                __getattr__, __dir__ = lazy_exports(globals())
            """
        )
    )
    (pkg / "heavy.py").write_text("class Heavy:\n    pass\n")
    (pkg / "light.py").write_text("LIGHT = 1\n")
    (pkg / "other.py").write_text("OTHER = 2\n")


def test_a_name_imports_its_submodule_on_first_read_only(tmp_path: Path) -> None:
    _package(tmp_path)
    code = textwrap.dedent(
        """
        import sys
        import lazypkg
        assert "lazypkg.heavy" not in sys.modules and "lazypkg.light" not in sys.modules
        from lazypkg import LIGHT
        assert LIGHT == 1 and "lazypkg.heavy" not in sys.modules
        assert lazypkg.__dict__["LIGHT"] == 1
        import lazypkg.other
        from lazypkg import other
        assert other.OTHER == 2 and "lazypkg.heavy" not in sys.modules
        assert "Heavy" in dir(lazypkg)
        from lazypkg import Heavy
        assert Heavy.__module__ == "lazypkg.heavy"
        try:
            lazypkg.Missing
        except AttributeError as exc:
            assert "has no attribute 'Missing'" in str(exc)
        else:
            raise AssertionError("no AttributeError")
        """
    )
    # The berth this test imports, whichever tree that is, with the package beside it.
    root = Path(berth.__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)])}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, env=env, timeout=60)


@pytest.mark.parametrize("package", ["berth.framework", "berth.plugins.noderesources"])
def test_berth_packages_import_no_submodule_until_a_name_is_read(package: str) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        before = set(sys.modules)
        import {package}
        new = sorted(m for m in set(sys.modules) - before if m.startswith("{package}."))
        assert new == ["berth.framework.lazy"] or new == [], new
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
