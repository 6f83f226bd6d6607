"""One version for everything released: ``berth/__init__.py``'s ``__version__`` is the source
(pyproject.toml reads it), and the distribution, the Helm chart's ``version`` and
``appVersion``, the image tag the Kustomize base and the chart run, and the CHANGELOG's latest
release follow it; LICENSE, pyproject.toml and the chart name the same license."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

import berth

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "chart" / "berth"
SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?")


def _yaml(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def test_version_is_semver_and_pyproject_reads_it_from_the_package() -> None:
    assert SEMVER.fullmatch(berth.__version__), berth.__version__
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "berth.__version__"}
    assert metadata.version("berth-scheduler") == berth.__version__


def test_chart_version_and_app_version_are_the_package_version() -> None:
    chart = _yaml(CHART / "Chart.yaml")
    assert chart["version"] == berth.__version__
    # A string: an unquoted 0.1 would be a YAML float.
    assert chart["appVersion"] == berth.__version__
    # The chart's image tag defaults to appVersion; a pinned tag in values.yaml would drift.
    assert _yaml(CHART / "values.yaml")["image"]["tag"] == ""


def test_kustomize_base_image_tag_is_the_package_version() -> None:
    kustomization = _yaml(ROOT / "deploy" / "base" / "kustomization.yaml")
    assert kustomization["images"] == [{"name": "berth", "newTag": berth.__version__}]


def test_changelog_latest_release_is_the_package_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.MULTILINE)
    assert releases, "CHANGELOG.md has no '## [version] - date' heading"
    # Keep a Changelog: an Unreleased section on top, then the releases, newest first.
    assert releases[0] == ("Unreleased", "")
    version, date = releases[1]
    assert version == berth.__version__, f"CHANGELOG's latest release is {version}"
    assert date, f"release {version} has no date"


def test_license_is_apache_2_everywhere() -> None:
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "Apache-2.0"
    assert pyproject["project"]["license-files"] == ["LICENSE"]
    assert _yaml(CHART / "Chart.yaml")["annotations"]["licenses"] == "Apache-2.0"
    assert metadata.metadata("berth-scheduler")["License-Expression"] == "Apache-2.0"
