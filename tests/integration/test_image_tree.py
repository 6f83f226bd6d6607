"""The container image's Python environment, built and run as a directory tree.

There is no container engine on this machine (nor in CI): hack/image-tree.sh builds what
deploy/Dockerfile puts at /opt/berth (a wheel of the files its COPY lines name, installed
with its locked dependencies, hashes required, into a virtualenv without pip) and runs it the way the image runs:
read-only, as uid 65532, no home, cwd /. These tests run it, and show it fails when the
Dockerfile forgets a package.
"""

from __future__ import annotations

import os
import subprocess
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


def run_script(out: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), str(out)],
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
