"""How a profile's plugins come out: upstream's defaults merged with the
custom sets (default_plugins.go, mergePlugins/mergePluginSet), multiPoint
expanded (framework.go, expandMultiPointPlugins) and Score weights resolved
(framework.go, getValidScoreWeights).

The fake registry holds these upstream defaults, in getDefaultPlugins order:
SchedulingGates, PrioritySort, NodeUnschedulable, TaintToleration (weight 3),
NodeResourcesFit (1), DefaultPreemption, ImageLocality (1), DefaultBinder.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from berth.framework.interfaces import EXTENSION_POINTS
from berth.framework.runtime import Framework
from tests.unit.config.fakes import REGISTRY
from tests.unit.config.helpers import names, profile_of, weights

DEFAULT_FILTER = ["NodeUnschedulable", "TaintToleration", "NodeResourcesFit"]
DEFAULT_SCORE = {"TaintToleration": 3, "NodeResourcesFit": 1, "ImageLocality": 1}


@dataclass(frozen=True)
class Case:
    id: str
    plugins: str
    # Extension point to the plugin names expected there, in order.
    expect: dict[str, list[str]]
    # Score weights in score order, when the case is about them.
    score: dict[str, int] | None = None


def body(case: Case) -> str:
    plugins = textwrap.indent(textwrap.dedent(case.plugins).strip(), "    ")
    return f"profiles:\n- schedulerName: p\n  plugins:\n{plugins}\n"


MERGE_CASES = [
    Case(
        "getDefaultPlugins: no custom plugins gives upstream's defaults in order",
        "{}",
        {
            "preEnqueue": ["SchedulingGates"],
            "queueSort": ["PrioritySort"],
            "preFilter": ["NodeResourcesFit"],
            "filter": DEFAULT_FILTER,
            "postFilter": ["DefaultPreemption"],
            "preScore": ["TaintToleration", "NodeResourcesFit"],
            "reserve": [],
            "permit": [],
            "preBind": [],
            "bind": ["DefaultBinder"],
            "postBind": [],
        },
        score=DEFAULT_SCORE,
    ),
    Case(
        "mergePluginSet: multiPoint disabled * keeps only the custom plugins",
        """
        multiPoint:
          enabled:
          - name: PrioritySort
          - name: LowCpuScheduler
          - name: DefaultBinder
          disabled:
          - name: "*"
        """,
        {
            "preEnqueue": [],
            "queueSort": ["PrioritySort"],
            "filter": ["LowCpuScheduler"],
            "postFilter": [],
            "bind": ["DefaultBinder"],
        },
        score={"LowCpuScheduler": 1},
    ),
    Case(
        "mergePluginSet: a default disabled by name is dropped everywhere",
        """
        multiPoint:
          disabled:
          - name: TaintToleration
        """,
        {"filter": ["NodeUnschedulable", "NodeResourcesFit"], "preScore": ["NodeResourcesFit"]},
        score={"NodeResourcesFit": 1, "ImageLocality": 1},
    ),
    Case(
        "mergePluginSet: a re-configured default keeps its position with the custom weight",
        """
        multiPoint:
          enabled:
          - name: GpuScore
            weight: 4
          - name: ImageLocality
            weight: 7
        """,
        {},
        score={"TaintToleration": 3, "NodeResourcesFit": 1, "ImageLocality": 7, "GpuScore": 4},
    ),
    Case(
        "mergePluginSet: a re-configured default without weight gets weight 1",
        """
        multiPoint:
          enabled:
          - name: TaintToleration
        """,
        {"filter": DEFAULT_FILTER},
        score={"TaintToleration": 1, "NodeResourcesFit": 1, "ImageLocality": 1},
    ),
    Case(
        "mergePluginSet: custom multiPoint plugins follow the defaults",
        """
        multiPoint:
          enabled:
          - name: LowCpuScheduler
        """,
        {"filter": [*DEFAULT_FILTER, "LowCpuScheduler"]},
        score={**DEFAULT_SCORE, "LowCpuScheduler": 1},
    ),
    Case(
        "mergePluginSet: plugins enabled at one point follow the multiPoint ones (seed config)",
        """
        filter:
          enabled:
          - name: LowCpuScheduler
        score:
          enabled:
          - name: LowCpuScheduler
        """,
        {
            "filter": [*DEFAULT_FILTER, "LowCpuScheduler"],
            "preScore": ["TaintToleration", "NodeResourcesFit"],
        },
        score={**DEFAULT_SCORE, "LowCpuScheduler": 1},
    ),
    Case(
        "mergePluginSet: disabling one default at a point leaves it at the others",
        """
        score:
          disabled:
          - name: NodeResourcesFit
        """,
        {"filter": DEFAULT_FILTER, "preScore": ["TaintToleration", "NodeResourcesFit"]},
        score={"TaintToleration": 3, "ImageLocality": 1},
    ),
]

EXPAND_CASES = [
    Case(
        "expandMultiPointPlugins: a multiPoint plugin serves every point it implements",
        """
        multiPoint:
          enabled:
          - name: Gang
        """,
        {
            "preEnqueue": ["SchedulingGates", "Gang"],
            "preFilter": ["NodeResourcesFit", "Gang"],
            "filter": DEFAULT_FILTER,
            "reserve": ["Gang"],
            "permit": ["Gang"],
            "preBind": [],
            "postBind": ["Gang"],
        },
    ),
    Case(
        "expandMultiPointPlugins: disabled at one point, kept at the others",
        """
        multiPoint:
          enabled:
          - name: Gang
        permit:
          disabled:
          - name: Gang
        """,
        {"reserve": ["Gang"], "permit": [], "postBind": ["Gang"]},
    ),
    Case(
        "expandMultiPointPlugins: disabled * at a point skips multiPoint there only",
        """
        score:
          enabled:
          - name: GpuScore
          disabled:
          - name: "*"
        """,
        {"filter": DEFAULT_FILTER, "preScore": ["TaintToleration", "NodeResourcesFit"]},
        score={"GpuScore": 1},
    ),
    Case(
        "expandMultiPointPlugins: overridden plugins first, then multiPoint, then the point's own",
        """
        score:
          enabled:
          - name: GpuScore
          - name: ImageLocality
          - name: TaintToleration
        """,
        {},
        # ImageLocality and TaintToleration override their multiPoint entries
        # and keep the score point's order; NodeResourcesFit comes from
        # multiPoint; GpuScore is the point's own. TaintToleration's score
        # entry has no weight: 1, not multiPoint's 3 (getValidScoreWeights).
        score={"ImageLocality": 1, "TaintToleration": 1, "NodeResourcesFit": 1, "GpuScore": 1},
    ),
    Case(
        "expandMultiPointPlugins: a plugin serving every point, as upstream's plugin expansion test",
        """
        multiPoint:
          enabled:
          - name: Everywhere
            weight: 5
          disabled:
          - name: "*"
        """,
        {point: ["Everywhere"] for point in EXTENSION_POINTS if point != "score"},
        score={"Everywhere": 5},
    ),
]

WEIGHT_CASES = [
    Case(
        "getValidScoreWeights: the score point's weight wins over multiPoint's",
        """
        score:
          enabled:
          - name: TaintToleration
            weight: 9
        """,
        {},
        score={"TaintToleration": 9, "NodeResourcesFit": 1, "ImageLocality": 1},
    ),
    Case(
        "getValidScoreWeights: a multiPoint weight applies to score",
        """
        multiPoint:
          enabled:
          - name: GpuScore
            weight: 5
        """,
        {},
        score={**DEFAULT_SCORE, "GpuScore": 5},
    ),
    Case(
        "getValidScoreWeights: weight 0 means 1",
        """
        score:
          enabled:
          - name: GpuScore
            weight: 0
        """,
        {},
        score={**DEFAULT_SCORE, "GpuScore": 1},
    ),
    Case(
        "getValidScoreWeights: a weight at a non-score point is ignored",
        """
        multiPoint:
          enabled:
          - name: LowCpuScheduler
            weight: 2
        filter:
          enabled:
          - name: LowCpuScheduler
            weight: 8
          - name: AvoidNodePlugin
            weight: 6
        """,
        {"filter": ["LowCpuScheduler", *DEFAULT_FILTER, "AvoidNodePlugin"]},
        score={**DEFAULT_SCORE, "LowCpuScheduler": 2},
    ),
]

ALL = MERGE_CASES + EXPAND_CASES + WEIGHT_CASES


@pytest.mark.parametrize("case", ALL, ids=[c.id for c in ALL])
def test_profile_plugins(tmp_path: Path, case: Case) -> None:
    profile = profile_of(tmp_path, body(case))
    for point, expected in case.expect.items():
        assert names(profile, point) == expected, point
    if case.score is not None:
        assert list(weights(profile).items()) == list(case.score.items())
    # Whatever the config accepts, the runtime builds (NewFramework's checks
    # were made at load).
    Framework(profile, REGISTRY)


def test_every_extension_point_is_listed_in_cycle_order(tmp_path: Path) -> None:
    profile = profile_of(tmp_path, "profiles:\n- schedulerName: p\n")
    assert list(profile.plugins) == list(EXTENSION_POINTS)


def test_non_score_points_carry_weight_zero(tmp_path: Path) -> None:
    profile = profile_of(tmp_path, "profiles:\n- schedulerName: p\n")
    assert {ref.weight for ref in profile.enabled("filter")} == {0}
