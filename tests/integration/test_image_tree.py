"""The container image's Python environment, built and run as a directory tree.

There is no container engine on this machine (nor in CI): hack/image-tree.sh builds what
deploy/Dockerfile puts at /opt/berth (a wheel of the files its COPY lines name, installed
with its locked dependencies, hashes required, into a virtualenv without pip) and runs it the way the image runs:
read-only, as uid 65532, no home, cwd /. These tests run it, and show it fails when the
Dockerfile forgets a package. With out-of-tree plugin wheels (the Dockerfile's PLUGIN_WHEELS),
the plugins are in the tree and ``berth serve --list-plugins`` run as the image lists them; a
second build of the same inputs gives the same tree, file for file (SOURCE_DATE_EPOCH); a plugin
wheel whose dependency is neither locked nor among the wheels fails the build.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.deploytools import DEPLOY, ROOT

SCRIPT = ROOT / "hack" / "image-tree.sh"


@pytest.fixture
def out_dir() -> Iterator[Path]:
    """A directory the image's uid can read (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="berth-image-tree-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(path)], check=False)
        subprocess.run(["rm", "-rf", str(path)], check=False)


def run_script(
    out: Path, env: dict[str, str] | None = None, *, build_only: bool = False
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *(["--build-only"] if build_only else []), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_image_tree_builds_and_runs_read_only_as_the_image_user(out_dir: Path) -> None:
    result = run_script(out_dir)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    assert "health SERVING over mTLS, stopped cleanly on SIGTERM" in output, output
    assert "OK:" in output, output
    # The plugin SDK is typed as installed (py.typed ships): mypy --strict passes on
    # `import berth.framework` and on a `berth new-plugin` package, against the wheel.
    assert (
        "mypy --strict against the installed wheel: import berth.framework and a berth "
        "new-plugin package pass"
    ) in output, output
    tree = out_dir / "opt" / "berth"
    site = next((tree / "lib").glob("python3.*/site-packages"))
    # One top-level package: the folders server/, shim/, plugins/, framework/ are berth.*.
    assert (site / "berth").is_dir()
    for folder in ("plugins", "server", "shim", "framework", "tests"):
        assert not (site / folder).exists(), folder
    assert not (site / "berth" / "dev").exists()
    for tool in ("pip", "setuptools", "wheel"):
        assert not (site / tool).exists(), tool
    # Bytecode was compiled at install time: nothing to write at run time.
    assert list((site / "berth" / "shim" / "__pycache__").glob("*.pyc"))
    plugins = (out_dir / "logs" / "plugins.txt").read_text()
    assert "AvoidNodePlugin" in plugins and "SameLabelSpread" in plugins


def test_image_tree_fails_when_the_dockerfile_forgets_a_package(
    out_dir: Path, tmp_path: Path
) -> None:
    dockerfile = tmp_path / "Dockerfile"
    text = (DEPLOY / "Dockerfile").read_text()
    assert "COPY shim shim\n" in text
    dockerfile.write_text(text.replace("COPY shim shim\n", ""))
    result = run_script(out_dir, {"BERTH_DOCKERFILE": str(dockerfile)})
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-5000:]
    assert "No module named 'berth.shim'" in output, output[-5000:]


def _wheel(project: Path, into: Path) -> Path:
    """A wheel of ``project`` (no dependencies fetched), as a plugin's author would make it."""
    into.mkdir(exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(into), str(project)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = into.glob("*.whl")
    return wheel


def test_plugin_wheels_are_baked_in_and_the_tree_is_reproducible(
    out_dir: Path, tmp_path: Path
) -> None:
    wheel = _wheel(ROOT / "examples" / "out-of-tree-plugin", tmp_path / "wheels")
    env = {"BERTH_BUILD_ARG_PLUGIN_WHEELS": str(wheel.parent)}
    first = run_script(out_dir, env)
    output = first.stdout + first.stderr
    assert first.returncode == 0, output[-5000:]
    assert f"installed 1 plugin wheels: {wheel.name}" in output, output
    # Run as the image runs (read-only, uid 65532), berth serve finds the plugin.
    assert "PreferLabel" in (out_dir / "logs" / "plugins.txt").read_text()
    content = (out_dir / "logs" / "tree-content.txt").read_text()
    assert "berth_example_plugin/plugin.py" in content
    digest = (out_dir / "logs" / "tree-digest.txt").read_text()

    second = run_script(out_dir, env, build_only=True)
    assert second.returncode == 0, (second.stdout + second.stderr)[-5000:]
    again = (out_dir / "logs" / "tree-content.txt").read_text()
    changed = set(again.splitlines()) ^ set(content.splitlines())
    assert not changed, f"the rebuilt tree differs: {sorted(changed)[:20]}"
    assert (out_dir / "logs" / "tree-digest.txt").read_text() == digest


def test_a_plugin_wheel_with_a_dependency_not_in_the_image_fails_the_build(
    out_dir: Path, tmp_path: Path
) -> None:
    project = tmp_path / "needs-more"
    (project / "needs_more").mkdir(parents=True)
    (project / "needs_more" / "__init__.py").write_text("")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "needs-more"\nversion = "1.0"\n'
        'dependencies = ["berth-test-absent-dependency>=1"]\n'
    )
    wheel = _wheel(project, tmp_path / "wheels")
    result = run_script(
        out_dir, {"BERTH_BUILD_ARG_PLUGIN_WHEELS": str(wheel.parent)}, build_only=True
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-5000:]
    assert "needs-more 1.0 requires berth-test-absent-dependency" in output, output[-5000:]
    assert "PLUGIN_WHEELS directory" in output, output[-5000:]
