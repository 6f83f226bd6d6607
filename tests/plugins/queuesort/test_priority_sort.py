"""PrioritySort, ported in spirit from upstream's priority_sort_test.go (TestLess)."""

from __future__ import annotations

import pytest

from berth.framework.interfaces import QueuedPodInfo
from berth.framework.testing import make_pod
from berth.plugins.queuesort import PrioritySort

LOW, HIGH = 10, 100
T0 = 1_700_000_000_000_000  # micros
T1 = T0 + 1


def queued(priority: int, enqueued: int) -> QueuedPodInfo:
    return QueuedPodInfo(make_pod().priority(priority).info(), enqueued)


@pytest.mark.parametrize(
    ("a", "b", "a_first"),
    [
        pytest.param(
            queued(LOW, T0), queued(HIGH, T1), False, id="p1.priority less than p2.priority"
        ),
        pytest.param(
            queued(HIGH, T0), queued(LOW, T1), True, id="p1.priority greater than p2.priority"
        ),
        pytest.param(
            queued(HIGH, T0), queued(HIGH, T1), True, id="equal priority, p1 added earlier"
        ),
        pytest.param(
            queued(HIGH, T1), queued(HIGH, T0), False, id="equal priority, p2 added earlier"
        ),
        pytest.param(queued(HIGH, T0), queued(HIGH, T0), False, id="identical pods are not less"),
        pytest.param(queued(-5, T0), queued(0, T1), False, id="negative priority sorts after zero"),
        pytest.param(queued(LOW, T1), queued(HIGH, T0), False, id="priority wins over age"),
    ],
)
def test_less_matches_upstream_priority_then_timestamp(
    a: QueuedPodInfo, b: QueuedPodInfo, a_first: bool
) -> None:
    assert PrioritySort().less(a, b) is a_first


def test_sorting_by_key_pops_high_priority_then_oldest() -> None:
    pods = [queued(LOW, T0), queued(HIGH, T1 + 5), queued(HIGH, T1), queued(0, T0 - 9)]
    order = sorted(pods, key=PrioritySort().sort_key)
    assert [(p.pod.priority, p.enqueued_unix_micros) for p in order] == [
        (HIGH, T1),
        (HIGH, T1 + 5),
        (LOW, T0),
        (0, T0 - 9),
    ]
