"""Choosing among preemption candidates: upstream's default criteria.

Follows pkg/scheduler/framework/preemption/preemption.go, SelectCandidate and
pickOneNodeForPreemption, for a preemption that uses no score functions of its
own (DefaultPreemption's OrderedScoreFuncs is nil). Two places select: the
DefaultPreemption plugin on the server, and a caller whose HTTP extenders
narrowed the candidates first (upstream calls the extenders between finding
the candidates and selecting one; berth.shim.preemption). Both rank with
``pick_one_node``, so a pod's preemption lands on the same node either way.

The criteria read two facts of each victim, its priority and its start time,
given here as ``VictimKey`` so both callers can pass what they hold (the
server's ``PodInfo``, the shim's cached pod).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NamedTuple

if TYPE_CHECKING:
    from berth.framework.model import PodInfo

__all__ = [
    "STARTED_NOW",
    "Candidate",
    "RankedCandidate",
    "VictimKey",
    "pick_one_node",
    "start_time",
]

# util.GetPodStartTime: a pod with no status.startTime counts as started now,
# after every recorded time.
STARTED_NOW: Final = math.inf

# A priority shifted by 2^31 so that negative ones add up as upstream's
# int64 sum of (priority + MaxInt32 + 1) does.
_PRIORITY_SHIFT: Final = 2**31


@dataclass(frozen=True, slots=True)
class Candidate:
    """preemption.Candidate: a node and the pods to evict there, most
    important first, with how many of them violate a PDB
    (extenderv1.Victims). ``clear_nomination_pod_uids`` is filled only on a
    candidate answered unselected (PostFilterResult.candidates): the pods
    nominated to the node with a lower priority than the preemptor, whose
    nomination the caller clears if it selects this one."""

    name: str
    victims: tuple[PodInfo, ...]
    num_pdb_violations: int = 0
    clear_nomination_pod_uids: tuple[str, ...] = ()


class VictimKey(NamedTuple):
    """What the criteria read of a victim: its priority, and its start time
    (status.startTime in microseconds; ``STARTED_NOW`` when it has none)."""

    priority: int
    start: float


class RankedCandidate(NamedTuple):
    """A candidate as the criteria see it: the node, how many of its victims
    a PodDisruptionBudget protects, and the victims in the candidate's order
    (the first is taken as the highest priority, as upstream's
    ``victims.Pods[0]``)."""

    name: str
    num_pdb_violations: int
    victims: Sequence[VictimKey]


def start_time(start_unix_micros: int) -> float:
    """util.GetPodStartTime over ``Pod.start_unix_micros`` (0: not started)."""
    return start_unix_micros if start_unix_micros > 0 else STARTED_NOW


def _earliest_start(victims: Sequence[VictimKey]) -> float:
    """util.GetEarliestPodStartTime: the earliest start among the victims of
    the highest priority."""
    top = max(v.priority for v in victims)
    return min(v.start for v in victims if v.priority == top)


def pick_one_node(candidates: Sequence[RankedCandidate]) -> str:
    """preemption.go, pickOneNodeForPreemption with the default criteria, in
    order, each applied to the nodes the previous ones tied: the fewest PDB
    violations; the lowest highest-priority victim (the first listed); the
    smallest sum of priorities; the fewest victims; the latest earliest start
    among the highest-priority victims. Still tied: the first candidate
    (upstream takes whichever its map yields first). Every candidate has at
    least one victim (the dry run finds none without; callExtenders refuses
    an extender's node without any)."""
    if not candidates:
        return ""
    criteria: list[Callable[[RankedCandidate], float]] = [
        lambda c: -c.num_pdb_violations,
        lambda c: -c.victims[0].priority,
        lambda c: -sum(v.priority + _PRIORITY_SHIFT for v in c.victims),
        lambda c: -len(c.victims),
        lambda c: _earliest_start(c.victims),
    ]
    remaining = list(candidates)
    for score in criteria:
        scores = [score(c) for c in remaining]
        best = max(scores)
        remaining = [c for c, s in zip(remaining, scores, strict=True) if s == best]
        if len(remaining) == 1:
            break
    return remaining[0].name
