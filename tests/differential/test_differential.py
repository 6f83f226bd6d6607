"""Berth against upstream kube-scheduler, scenario by scenario (tests/differential/README.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from berth.localcluster import KubeClient
from tests.differential.harness import Scenario, all_scenarios, run


@pytest.mark.parametrize("path", all_scenarios(), ids=lambda p: p.stem)
def test_berth_decides_like_kube_scheduler(
    path: Path, schedulers: None, diff_kube: KubeClient
) -> None:
    scenario = Scenario.load(path)
    namespace = "diff-" + re.sub(r"[^a-z0-9-]+", "-", scenario.name.lower())[:50]
    comparisons = run(diff_kube, scenario, namespace)
    disagreements = [str(c) for c in comparisons if not c.agrees]
    assert not disagreements, f"{scenario.about}\n" + "\n".join(disagreements)


def test_the_corpus_covers_enough_scenarios() -> None:
    assert len(all_scenarios()) >= 30
