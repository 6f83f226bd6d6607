"""The image's supply chain: every runtime dependency of pyproject.toml is pinned with hashes in
deploy/requirements.lock (and the build backend in deploy/build-requirements.lock), the lock
is what ``hack/lock.sh`` makes from pyproject.toml (regenerated against PyPI and diffed), and
deploy/Dockerfile installs only from the locks with ``--require-hashes`` and refuses a base
image that is not named by digest."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DIGEST = "sha256:" + "0123456789abcdef" * 4


def locked(path: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of a pip requirements file with hashes."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    out: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        spec, *options = line.split(" --")
        name, _, version = spec.strip().partition("==")
        assert version, f"{path.name}: {line!r} is not pinned with =="
        hashes = [o.strip().removeprefix("hash=") for o in options if o.startswith("hash=")]
        out[canonicalize_name(name)] = (version.split(";")[0].strip(), hashes)
    return out


@pytest.mark.parametrize(
    ("lock", "requirements"),
    [
        ("requirements.lock", PYPROJECT["project"]["dependencies"]),
        ("build-requirements.lock", PYPROJECT["build-system"]["requires"]),
    ],
)
def test_every_dependency_is_pinned_with_hashes(lock: str, requirements: list[str]) -> None:
    pins = locked(DEPLOY / lock)
    for name, (_, hashes) in pins.items():
        assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), name
    for text in requirements:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name in pins, f"{name} ({text}) is not in deploy/{lock}: run hack/lock.sh"
        version = pins[name][0]
        assert req.specifier.contains(version, prereleases=True), (
            f"deploy/{lock} pins {name}=={version}, pyproject.toml wants {text}: run hack/lock.sh"
        )


def test_lock_is_what_hack_lock_makes_from_pyproject() -> None:
    """Regenerated with the pinned uv for Linux x86_64 and aarch64, CPython 3.11 (PyPI)."""
    out = subprocess.run(
        [str(ROOT / "hack" / "lock.sh"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "BERTH_VENV": str(Path(sys.executable).parent.parent)},
    )
    assert out.returncode == 0, out.stderr[-4000:]


def _instructions() -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    return [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.startswith("#")]


def test_dockerfile_installs_only_from_the_locks() -> None:
    ins = _instructions()
    build = ins[: next(i for i, x in enumerate(ins) if x.startswith("FROM ") and i > 1)]
    copied = {w for x in build if x.startswith("COPY ") for w in x.split()[1:-1]}
    assert {"deploy/requirements.lock", "deploy/build-requirements.lock"} <= copied
    installs = [
        cmd.strip()
        for x in build
        if x.startswith("RUN ")
        for cmd in x.removeprefix("RUN ").split("&&")
        if re.search(r"\bpip\b.*\binstall\b", cmd)
    ]
    from_locks = [c for c in installs if " -r " in c]
    assert {c.rsplit(" -r ", 1)[1] for c in from_locks} == {
        "requirements.lock",
        "build-requirements.lock",
    }
    for c in from_locks:
        assert "--require-hashes" in c and "--only-binary=:all:" in c and "--no-deps" in c, c
    # Anything else installed is berth's own wheel, or the out-of-tree plugin wheels of the
    # build context's PLUGIN_WHEELS directory: without dependencies, and the plugins without
    # an index (nothing fetched).
    others = [c for c in installs if c not in from_locks]
    berth_wheel = [c for c in others if c.endswith("/wheels/berth_scheduler-*.whl")]
    assert len(berth_wheel) == 1 and "--no-deps" in berth_wheel[0], others
    plugins = [c for c in others if c not in berth_wheel]
    assert len(plugins) == 1, others
    assert "--no-index --no-deps" in plugins[0] and "set -- plugin-wheels/*.whl" in " ".join(build)
    assert "COPY ${PLUGIN_WHEELS} plugin-wheels" in build
    # And pip check: a plugin's dependency missing from the lock and the wheels fails the build.
    assert any(
        c.strip().endswith("pip --python /opt/berth/bin/python check")
        for x in build
        for c in x.split("&&")
    )
    # The wheel is built with the locked setuptools, not one fetched for an isolated build.
    wheel = [c for x in build for c in x.split("&&") if "pip wheel" in c]
    assert wheel and all("--no-build-isolation" in c for c in wheel), wheel


def _digest_check() -> str:
    """The build stage's RUN that checks PYTHON_IMAGE."""
    (check,) = [x for x in _instructions() if x.startswith("RUN ") and "PYTHON_IMAGE" in x]
    return check.removeprefix("RUN ")


def _run_digest_check(image: str) -> subprocess.CompletedProcess[str]:
    """Runs the check as the build runs it (sh, PYTHON_IMAGE in the environment, the
    image's python: here this venv's, Python 3.11)."""
    bin_dir = str(Path(sys.executable).parent)
    return subprocess.run(
        ["sh", "-c", _digest_check()],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHON_IMAGE": image},
    )


def test_dockerfile_names_its_base_only_through_the_checked_argument() -> None:
    froms = [x for x in _instructions() if x.startswith("FROM ")]
    assert [f.split()[1] for f in froms] == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"], froms
    args = [x for x in _instructions() if x.startswith("ARG PYTHON_IMAGE")]
    # Declared globally (the default) and again in the build stage, where the check sees it.
    assert len(args) == 2 and args[1] == "ARG PYTHON_IMAGE", args


@pytest.mark.parametrize(
    ("image", "refused"),
    [
        ("python:3.11-slim-bookworm", True),
        ("python:3.11-slim-bookworm@sha256:abc", True),
        ("python@sha256", True),
        (f"python:3.11-slim-bookworm@{DIGEST}", False),
        (f"registry.example.com/python@{DIGEST}", False),
    ],
)
def test_dockerfile_refuses_a_base_image_without_digest(image: str, refused: bool) -> None:
    out = _run_digest_check(image)
    if refused:
        assert out.returncode != 0
        assert f"the base image {image} is not named by digest" in out.stderr, out.stderr
        assert "--build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:" in out.stderr
    else:
        assert out.returncode == 0, out.stderr


def test_dockerfile_default_base_passes_its_own_digest_check() -> None:
    """A plain `docker build` (no --build-arg) uses the pinned default, so it must be
    named by digest too; the check is the build stage's own RUN."""
    (default,) = [x for x in _instructions() if x.startswith("ARG PYTHON_IMAGE=")]
    image = default.removeprefix("ARG PYTHON_IMAGE=")
    assert image.startswith("python:3.11-slim-bookworm@sha256:"), image
    out = _run_digest_check(image)
    assert out.returncode == 0, out.stderr
