"""Pinned versions and missing-binary messages."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from berth.dev.localcluster import binaries
from berth.dev.localcluster.errors import BinaryMissingError


def test_versions_file_pins_a_kubernetes_and_an_etcd_release() -> None:
    versions = binaries.parse_versions(binaries.VERSIONS_FILE.read_text())
    assert versions.kubernetes.startswith("v1.3")
    major, minor, _patch = versions.etcd.removeprefix("v").split(".")
    assert (int(major), int(minor)) >= (3, 5)


def test_parse_versions_ignores_comments_and_blank_lines() -> None:
    text = "# comment\n\nK8S_VERSION=v1.36.3\nETCD_VERSION = v3.6.8\n"
    assert binaries.parse_versions(text) == binaries.Versions("v1.36.3", "v3.6.8")


def test_parse_versions_names_the_missing_key() -> None:
    with pytest.raises(BinaryMissingError, match="ETCD_VERSION"):
        binaries.parse_versions("K8S_VERSION=v1.36.3\n")


def test_bin_dir_follows_berth_cache_and_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BERTH_K8S_BIN_DIR", raising=False)
    monkeypatch.setenv("BERTH_CACHE", "/somewhere")
    monkeypatch.setenv("K8S_VERSION", "v1.99.0")
    assert binaries.default_bin_dir() == Path("/somewhere/k8s/v1.99.0/bin")


def test_bin_dir_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_K8S_BIN_DIR", "/opt/k8s")
    assert binaries.default_bin_dir() == Path("/opt/k8s")


def test_missing_binaries_are_all_named_with_the_build_command(tmp_path: Path) -> None:
    exe = tmp_path / "etcd"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "kubectl").write_text("not executable")
    with pytest.raises(BinaryMissingError) as info:
        binaries.require_binaries(tmp_path)
    message = str(info.value)
    assert "kube-apiserver, kube-controller-manager, kube-scheduler, kubectl" in message
    assert "etcd," not in message
    assert "hack/build-k8s.sh" in message


def test_build_script_is_executable_bash() -> None:
    assert os.access(binaries.BUILD_SCRIPT, os.X_OK)
    assert binaries.BUILD_SCRIPT.read_text().startswith("#!/usr/bin/env bash\n")
