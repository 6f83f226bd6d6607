"""Shared helpers for config tests: write a YAML file, load it against the
fake registry."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from berth.framework.config import ConfigError, load_config
from berth.framework.profile import ProfileConfig, SchedulerConfig
from tests.unit.config.fakes import REGISTRY

HEADER = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


def write(tmp_path: Path, body: str, *, header: bool = True) -> Path:
    path = tmp_path / "scheduler-config.yaml"
    path.write_text((HEADER if header else "") + textwrap.dedent(body))
    return path


def load(tmp_path: Path, body: str, *, header: bool = True) -> SchedulerConfig:
    return load_config(write(tmp_path, body, header=header), REGISTRY)


def load_error(tmp_path: Path, body: str, *, header: bool = True) -> ConfigError:
    path = write(tmp_path, body, header=header)
    with pytest.raises(ConfigError) as info:
        load_config(path, REGISTRY)
    return info.value


def profile_of(tmp_path: Path, body: str) -> ProfileConfig:
    cfg = load(tmp_path, body)
    assert len(cfg.profiles) == 1
    return cfg.profiles[0]


def names(profile: ProfileConfig, point: str) -> list[str]:
    return [ref.name for ref in profile.enabled(point)]


def weights(profile: ProfileConfig) -> dict[str, int]:
    return {ref.name: ref.weight for ref in profile.enabled("score")}
