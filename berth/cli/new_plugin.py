"""``berth new-plugin NAME``: a pip-installable out-of-tree plugin package.

Writes a distribution of its own: pyproject.toml with the ``berth.plugins``
entry point (Berth's counterpart of upstream's app.WithPlugin), a Filter and
Score plugin with typed args in src/<package>/, py.typed, tests with Berth's
test kit (berth.testing), a scheduler configuration that enables it, and a
README. The package passes its own tests and ``mypy --strict`` as written.
The templates are package data (berth/cli/new_plugin_template/).
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib import resources
from pathlib import Path

from berth import __version__

TEMPLATE_DIR = "new_plugin_template"

# Template file to where it goes in the package; __PKG__ in a path is the
# package name.
FILES: dict[str, str] = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "scheduler-config.yaml.tmpl": "scheduler-config.yaml",
    "__init__.py.tmpl": "src/__PKG__/__init__.py",
    "args.py.tmpl": "src/__PKG__/args.py",
    "plugin.py.tmpl": "src/__PKG__/plugin.py",
    "conftest.py.tmpl": "tests/conftest.py",
    "test_plugin.py.tmpl": "tests/test_plugin.py",
}
# PEP 561: the package's types are part of its interface.
EMPTY_FILES = ("src/__PKG__/py.typed",)

_NAME = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")


class NewPluginError(Exception):
    pass


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "new-plugin",
        help="write a new out-of-tree plugin package (Filter and Score, typed args, tests)",
        description=(
            "Write a pip-installable package for a new Berth plugin NAME: pyproject.toml with "
            "its 'berth.plugins' entry point, src/<package>/plugin.py (a Filter and Score "
            "example with typed args), py.typed, tests with berth.testing, a "
            "scheduler-config.yaml enabling it, and a README. It passes its own pytest and "
            "mypy --strict as written."
        ),
        epilog="example: berth new-plugin PreferZone && cd prefer-zone && python -m pytest",
    )
    p.add_argument("name", metavar="NAME", help="the plugin's name in configurations (PascalCase)")
    p.add_argument(
        "--dir",
        metavar="D",
        help="where to write the package (must not exist or be empty); default: ./<distribution>",
    )
    p.set_defaults(func=run)


def snake(name: str) -> str:
    """PreferZone -> prefer_zone; GPUFit -> gpu_fit."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def check_name(name: str) -> None:
    from berth.framework.config import UPSTREAM_PLUGIN_NAMES
    from berth.plugins.registry import REGISTRY

    if not _NAME.fullmatch(name):
        raise NewPluginError(
            f"plugin name {name!r}: must be PascalCase letters and digits, starting with an "
            "upper-case letter, at most 63 characters (e.g. PreferZone)"
        )
    if name in REGISTRY or name in UPSTREAM_PLUGIN_NAMES:
        raise NewPluginError(
            f"plugin name {name!r} is an in-tree or upstream plugin's; choose another"
        )


def write_package(name: str, directory: Path | None = None) -> Path:
    """Writes the package for plugin ``name`` into ``directory`` (default:
    ./<distribution>) and returns the directory."""
    check_name(name)
    pkg = snake(name)
    dist = pkg.replace("_", "-")
    target = directory if directory is not None else Path(dist)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise NewPluginError(f"{target} exists and is not an empty directory")
    major, minor = __version__.split(".")[:2]
    values = {
        "__NAME__": name,
        "__PKG__": pkg,
        "__DIST__": dist,
        "__SCHEDULER__": dist,
        "__BERTH_VERSION__": f"{major}.{minor}",
    }
    templates = resources.files("berth.cli").joinpath(TEMPLATE_DIR)
    for template, dest in FILES.items():
        text = templates.joinpath(template).read_text(encoding="utf-8")
        _write(target / _fill(dest, values), _fill(text, values))
    for dest in EMPTY_FILES:
        _write(target / _fill(dest, values), "")
    return target


def _fill(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace(key, value)
    return text


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def run(args: argparse.Namespace) -> int:
    try:
        target = write_package(args.name, Path(args.dir) if args.dir else None)
    except (NewPluginError, OSError) as exc:
        print(f"berth new-plugin: {exc}", file=sys.stderr)
        return 2
    pkg = snake(args.name)
    print(f"wrote plugin {args.name} (package {pkg}) to {target}")
    print(f"  cd {target} && python -m pytest && python -m mypy")
    print(f"  python -m pip install {target}    # where Berth runs; then: berth plugins")
    return 0
