"""berth.framework.preemption: upstream's default criteria for choosing among
preemption candidates (pkg/scheduler/framework/preemption/preemption.go,
pickOneNodeForPreemption), as the shim applies them to the candidates its
extenders kept, whose victims come in the extender's order."""

from __future__ import annotations

from berth.framework.preemption import (
    STARTED_NOW,
    RankedCandidate,
    VictimKey,
    pick_one_node,
    start_time,
)


def c(name: str, *victims: tuple[int, float], pdb: int = 0) -> RankedCandidate:
    return RankedCandidate(name, pdb, [VictimKey(p, s) for p, s in victims])


def test_each_criterion_in_order() -> None:
    # Fewest PDB violations first, whatever the priorities.
    assert pick_one_node([c("a", (0, 1), pdb=1), c("b", (1000, 1))]) == "b"
    # Then the lowest highest-priority victim.
    assert pick_one_node([c("a", (100, 1)), c("b", (10, 1), (10, 1))]) == "b"
    # Then the smallest sum of priorities, negative ones shifted so that two
    # victims of -5 sum higher than one.
    assert pick_one_node([c("a", (-5, 1), (-5, 1)), c("b", (-5, 1))]) == "b"
    # Then the fewest victims: a victim of the lowest int32 priority adds
    # nothing to the shifted sum.
    assert pick_one_node([c("a", (0, 1), (-(2**31), 1)), c("b", (0, 1))]) == "b"
    # Then the latest earliest start among the highest-priority victims.
    assert pick_one_node([c("a", (5, 10), (1, 99)), c("b", (5, 20), (1, 1))]) == "b"
    # Still tied: the first.
    assert pick_one_node([c("a", (5, 10)), c("b", (5, 10))]) == "a"
    assert pick_one_node([]) == ""


def test_the_first_victim_listed_is_taken_as_the_highest() -> None:
    """minHighestPriorityScoreFunc reads victims.Pods[0]: an extender that
    lists a low-priority victim first makes its node look cheaper, as it
    does upstream."""
    listed_low_first = c("a", (1, 1), (500, 1))
    other = c("b", (100, 1))
    assert pick_one_node([listed_low_first, other]) == "a"


def test_a_pod_without_a_start_time_started_now() -> None:
    assert start_time(0) == STARTED_NOW
    assert start_time(42) == 42
    assert pick_one_node([c("a", (5, 42)), c("b", (5, start_time(0)))]) == "b"
