"""``berth new-plugin NAME``: the package it writes passes its own tests and
mypy --strict as written, builds a wheel with the ``berth.plugins`` entry point
and py.typed, and the command refuses names and directories it must not use."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from berth.cli.new_plugin import NewPluginError, snake, write_package

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        check=False,
    )


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("new-plugin")
    out = run(sys.executable, "-m", "berth", "new-plugin", "PreferZone", cwd=where)
    assert out.returncode == 0, out.stderr
    assert "wrote plugin PreferZone (package prefer_zone) to prefer-zone" in out.stdout
    return where / "prefer-zone"


def test_it_writes_a_package_with_typed_args_tests_and_py_typed(package: Path) -> None:
    files = sorted(str(p.relative_to(package)) for p in package.rglob("*") if p.is_file())
    assert files == [
        "README.md",
        "pyproject.toml",
        "scheduler-config.yaml",
        "src/prefer_zone/__init__.py",
        "src/prefer_zone/args.py",
        "src/prefer_zone/plugin.py",
        "src/prefer_zone/py.typed",
        "tests/conftest.py",
        "tests/test_plugin.py",
    ]
    pyproject = (package / "pyproject.toml").read_text()
    assert (
        '[project.entry-points."berth.plugins"]\nPreferZone = "prefer_zone.plugin:PreferZone"'
        in (pyproject)
    )
    plugin = (package / "src" / "prefer_zone" / "plugin.py").read_text()
    assert "class PreferZone(FilterPlugin[PreferZoneArgs], ScorePlugin[PreferZoneArgs]):" in plugin
    assert "__" not in (package / "README.md").read_text().replace("__init__", "")


def test_its_own_tests_pass(package: Path) -> None:
    out = run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=package)
    assert out.returncode == 0, out.stdout + out.stderr
    assert " passed" in out.stdout and "failed" not in out.stdout


def test_mypy_strict_and_ruff_pass_on_it(package: Path) -> None:
    # The dev venv's berth is an editable install mypy cannot follow; MYPYPATH
    # points it at the checkout's berth/ (the wheel check in hack/image-tree.sh
    # runs it against the installed wheel).
    out = run(str(BIN / "mypy"), "--strict", cwd=package, env={"MYPYPATH": str(ROOT)})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success: no issues found in 5 source files" in out.stdout
    for args in (["check", "."], ["format", "--check", "."]):
        out = run(str(BIN / "ruff"), *args, cwd=package)
        assert out.returncode == 0, out.stdout + out.stderr


def test_it_builds_a_wheel_berth_can_find(package: Path, tmp_path: Path) -> None:
    out = run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--wheel-dir",
        str(tmp_path),
        str(package),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    (wheel,) = tmp_path.glob("prefer_zone-0.1.0-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        assert (
            "[berth.plugins]\nPreferZone = prefer_zone.plugin:PreferZone"
            in z.read(entry_points).decode()
        )
    assert "prefer_zone/py.typed" in names
    assert not [n for n in names if n.startswith("tests/")]


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("preferZone", "must be PascalCase"),
        ("Prefer-Zone", "must be PascalCase"),
        ("NodeResourcesFit", "in-tree or upstream plugin"),
        ("DynamicResources", "in-tree or upstream plugin"),
    ],
)
def test_it_refuses_names_that_cannot_be_a_new_plugin(name: str, why: str, tmp_path: Path) -> None:
    with pytest.raises(NewPluginError, match=why):
        write_package(name, tmp_path / "out")
    out = run(sys.executable, "-m", "berth", "new-plugin", name, cwd=tmp_path)
    assert out.returncode == 2 and why in out.stderr, out.stderr


def test_it_refuses_a_directory_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    out = run(
        sys.executable, "-m", "berth", "new-plugin", "PreferZone", "--dir", str(tmp_path), cwd=ROOT
    )
    assert out.returncode == 2
    assert "exists and is not an empty directory" in out.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize(
    ("name", "want"), [("PreferZone", "prefer_zone"), ("GPUFit", "gpu_fit"), ("A1", "a1")]
)
def test_package_names_are_the_snake_case_of_the_plugin_name(name: str, want: str) -> None:
    assert snake(name) == want
