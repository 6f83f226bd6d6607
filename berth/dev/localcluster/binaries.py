"""Where the upstream binaries live, and building them with hack/build-k8s.sh.

The pinned versions come from ``hack/k8s-versions.env`` (shared with the build script); the
binaries from ``${BERTH_CACHE:-~/.cache/berth}/k8s/<version>/bin``. ``BERTH_K8S_BIN_DIR`` points
at another directory holding the same binaries: the control plane's five (``BINARY_NAMES``), and
helm for the tests of deploy/chart.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from berth.dev.localcluster.errors import BinaryMissingError

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-k8s.sh"
VERSIONS_FILE = REPO_ROOT / "hack" / "k8s-versions.env"

BINARY_NAMES: tuple[str, ...] = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
)


@dataclass(frozen=True)
class Versions:
    kubernetes: str
    etcd: str


def parse_versions(text: str) -> Versions:
    """Parse the KEY=value lines of hack/k8s-versions.env."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    try:
        return Versions(kubernetes=values["K8S_VERSION"], etcd=values["ETCD_VERSION"])
    except KeyError as missing:
        raise BinaryMissingError(
            f"{VERSIONS_FILE} does not define {missing.args[0]}; it must hold "
            "K8S_VERSION=... and ETCD_VERSION=... lines"
        ) from None


def pinned_versions() -> Versions:
    """The versions hack/build-k8s.sh builds, honouring its K8S_VERSION/ETCD_VERSION overrides."""
    try:
        pinned = parse_versions(VERSIONS_FILE.read_text())
    except OSError as err:
        raise BinaryMissingError(
            f"cannot read the pinned versions ({err}); berth must run from a source checkout "
            "(pip install -e .) or BERTH_K8S_BIN_DIR must name a directory with the binaries"
        ) from err
    return Versions(
        kubernetes=os.environ.get("K8S_VERSION", pinned.kubernetes),
        etcd=os.environ.get("ETCD_VERSION", pinned.etcd),
    )


def cache_root() -> Path:
    return Path(os.environ.get("BERTH_CACHE") or Path.home() / ".cache" / "berth")


def default_bin_dir() -> Path:
    """BERTH_K8S_BIN_DIR if set, else the build script's cache directory for the pinned version."""
    override = os.environ.get("BERTH_K8S_BIN_DIR")
    if override:
        return Path(override)
    return cache_root() / "k8s" / pinned_versions().kubernetes / "bin"


def missing_binaries(bin_dir: Path, names: tuple[str, ...] = BINARY_NAMES) -> list[str]:
    return [n for n in names if not os.access(bin_dir / n, os.X_OK)]


def require_binaries(bin_dir: Path, names: tuple[str, ...] = BINARY_NAMES) -> None:
    """Raise BinaryMissingError naming every missing binary and how to build it."""
    missing = missing_binaries(bin_dir, names)
    if missing:
        raise BinaryMissingError(
            f"missing upstream binaries in {bin_dir}: {', '.join(missing)}. "
            f"Build them with: {BUILD_SCRIPT} (cold build ~20 min on 2 cores, cached afterwards), "
            "or set BERTH_K8S_BIN_DIR to a directory that has them"
        )


def build_binaries() -> Path:
    """Run hack/build-k8s.sh, its progress streamed to our stderr; return the bin dir."""
    if not BUILD_SCRIPT.is_file():
        raise BinaryMissingError(
            f"{BUILD_SCRIPT} not found; run berth from a source checkout or set BERTH_K8S_BIN_DIR"
        )
    log.info("building upstream binaries with %s", BUILD_SCRIPT)
    pending = ""  # the script's last line is the bin dir, for us rather than for the user
    with subprocess.Popen(
        ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, bufsize=1
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:  # progress goes to stderr; stdout stays for KUBECONFIG=...
            if pending:
                sys.stderr.write(pending)
            pending = line
    last = pending.strip()
    if proc.returncode != 0 or not last:
        sys.stderr.write(pending)
        raise BinaryMissingError(
            f"{BUILD_SCRIPT} failed (exit {proc.returncode}); its message above says which "
            "step failed and why"
        )
    return Path(last)


def ensure_binaries(bin_dir: Path | None = None, *, build: bool = False) -> Path:
    """Return a directory holding the control plane's five binaries; with ``build`` (and no
    explicit ``bin_dir``), run hack/build-k8s.sh first."""
    directory = bin_dir or default_bin_dir()
    if build and bin_dir is None:
        # The script is quick when its cache is good (it checks each binary's version) and
        # rebuilds what is missing or stale, e.g. after a version bump of etcd alone.
        directory = build_binaries()
    require_binaries(directory)
    return directory
