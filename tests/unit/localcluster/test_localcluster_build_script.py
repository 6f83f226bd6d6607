"""hack/build-k8s.sh: cache reuse and its failure messages (no compiling, no network)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from berth.dev.localcluster import binaries

VERSIONS = binaries.parse_versions(binaries.VERSIONS_FILE.read_text())
HELM_PIN = re.search(r"^HELM_VERSION=(\S+)$", binaries.VERSIONS_FILE.read_text(), re.MULTILINE)
assert HELM_PIN, f"{binaries.VERSIONS_FILE} pins no HELM_VERSION"
HELM_VERSION = HELM_PIN[1]
TOOLS = (
    "bash", "cat", "cut", "yes", "sh", "date", "df", "dirname", "du", "flock", "grep", "head", "mkdir",
    "mv", "sed", "sleep", "sort", "tail", "wc", "awk",
)  # fmt: skip


@pytest.fixture
def no_go_path(tmp_path: Path) -> str:
    """A PATH with the script's tools but no ``go``."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is needed by hack/build-k8s.sh"
        os.symlink(found, tools / tool)
    return str(tools)


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("K8S_VERSION", "ETCD_VERSION")}
    return subprocess.run(
        ["bash", str(binaries.BUILD_SCRIPT)],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def fake_binaries(bin_dir: Path, k8s: str, etcd: str) -> None:
    """Shell scripts that answer the version probes the build script makes."""
    bin_dir.mkdir(parents=True)
    outputs = {
        "kube-apiserver": f"Kubernetes {k8s}",
        "kube-scheduler": f"Kubernetes {k8s}",
        "kube-controller-manager": f"Kubernetes {k8s}",
        "kubectl": f"Client Version: {k8s}",
        "etcd": f"etcd Version: {etcd.removeprefix('v')}",
        "helm": HELM_VERSION,  # helm version --short
    }
    for name, text in outputs.items():
        exe = bin_dir / name
        # Like kubectl, say more after the version line: plenty, so a reader that stops at
        # the first match would make this writer die of SIGPIPE.
        exe.write_text(f"#!/bin/sh\necho '{text}'\nyes 'more output' | head -c 200000\n")
        exe.chmod(0o755)


def test_cached_binaries_with_the_pinned_versions_are_reused_without_go(
    tmp_path: Path, no_go_path: str
) -> None:
    bin_dir = tmp_path / "cache" / "k8s" / VERSIONS.kubernetes / "bin"
    fake_binaries(bin_dir, VERSIONS.kubernetes, VERSIONS.etcd)

    result = run({"BERTH_CACHE": str(tmp_path / "cache"), "PATH": no_go_path})

    assert result.returncode == 0, result.stderr
    assert "all six binaries cached" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == str(bin_dir)


def test_cached_binary_with_another_version_is_rebuilt(tmp_path: Path, no_go_path: str) -> None:
    bin_dir = tmp_path / "cache" / "k8s" / VERSIONS.kubernetes / "bin"
    fake_binaries(bin_dir, "v1.0.0", VERSIONS.etcd)

    result = run({"BERTH_CACHE": str(tmp_path / "cache"), "PATH": no_go_path})

    assert result.returncode == 1
    assert "[build-k8s 1/8] FAILED: checking prerequisites" in result.stderr
    assert "reason: 'go' is not on PATH" in result.stderr
    assert "install Go >= 1.26" in result.stderr


def test_out_of_disk_is_reported_before_building(tmp_path: Path) -> None:
    result = run({"BERTH_CACHE": str(tmp_path / "cache"), "BERTH_BUILD_MIN_FREE_GB": "100000000"})

    assert result.returncode == 1
    assert "[build-k8s 1/8] FAILED" in result.stderr
    assert "reason: out of disk" in result.stderr
    assert "BERTH_CACHE / GOMODCACHE / GOCACHE" in result.stderr


def test_unreachable_module_proxy_is_named(tmp_path: Path) -> None:
    result = run(
        {
            "BERTH_CACHE": str(tmp_path / "cache"),
            "GOMODCACHE": str(tmp_path / "mod"),  # empty: every module must come from the proxy
            "GOPROXY": "http://127.0.0.1:9",  # discard port: connection refused
            "GOFLAGS": "-modcacherw",
        }
    )

    assert result.returncode == 1
    assert "[build-k8s 2/8] FAILED: resolving k8s.io/kubernetes" in result.stderr
    assert "reason: Go module proxy unreachable (GOPROXY=http://127.0.0.1:9)" in result.stderr
    assert "connection refused" in result.stderr


def test_unknown_argument_is_refused() -> None:
    result = subprocess.run(
        ["bash", str(binaries.BUILD_SCRIPT), "--frobnicate"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "unknown argument '--frobnicate'" in result.stderr


def test_ensure_binaries_runs_the_script_and_keeps_stdout_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    bin_dir = tmp_path / "cache" / "k8s" / VERSIONS.kubernetes / "bin"
    fake_binaries(bin_dir, VERSIONS.kubernetes, VERSIONS.etcd)
    monkeypatch.setenv("BERTH_CACHE", str(tmp_path / "cache"))
    for name in ("BERTH_K8S_BIN_DIR", "K8S_VERSION", "ETCD_VERSION"):
        monkeypatch.delenv(name, raising=False)

    assert binaries.ensure_binaries(build=True) == bin_dir

    out, err = capfd.readouterr()
    assert out == ""  # stdout is kept for `KUBECONFIG=...`
    assert "nothing to build" in err
    assert str(bin_dir) + "\n" not in err.splitlines(keepends=True)
