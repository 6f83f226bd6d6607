"""NodeUnschedulable, ported in spirit from upstream's node_unschedulable_test.go
(TestNodeUnschedulable)."""

from __future__ import annotations

import pytest

from berth.framework.model import PodInfo
from berth.framework.status import Code, Status
from berth.framework.testing import batch_of, fresh_state, make_node, make_pod, snapshot_of
from berth.plugins.nodeunschedulable import ERR_REASON_UNSCHEDULABLE, NodeUnschedulable

KEY = "node.kubernetes.io/unschedulable"
REJECTED = Status.unresolvable(ERR_REASON_UNSCHEDULABLE)


@pytest.mark.parametrize(
    ("pod", "unschedulable", "want"),
    [
        pytest.param(
            make_pod().info(), True, REJECTED, id="unschedulable node, pod without tolerations"
        ),
        pytest.param(make_pod().info(), False, Status(), id="schedulable node"),
        pytest.param(
            make_pod().toleration(KEY, effect="NoSchedule", operator="Exists").info(),
            True,
            Status(),
            id="pod tolerates the unschedulable taint",
        ),
        pytest.param(
            make_pod().toleration("", operator="Exists").info(),
            True,
            Status(),
            id="empty key with Exists tolerates every taint",
        ),
        pytest.param(
            make_pod().toleration(KEY, operator="Exists").info(),
            True,
            Status(),
            id="empty effect tolerates every effect",
        ),
        pytest.param(
            make_pod().toleration(KEY, effect="NoExecute", operator="Exists").info(),
            True,
            REJECTED,
            id="toleration for another effect does not help",
        ),
        pytest.param(
            make_pod().toleration(KEY, value="x", effect="NoSchedule").info(),
            True,
            REJECTED,
            id="Equal with a value does not match the taint's empty value",
        ),
        pytest.param(
            make_pod().toleration(KEY, effect="NoSchedule", operator="Equal").info(),
            True,
            Status(),
            id="Equal with empty value matches the taint's empty value",
        ),
        pytest.param(
            make_pod().toleration("other", operator="Exists").info(),
            True,
            REJECTED,
            id="toleration for another key does not help",
        ),
    ],
)
def test_filter_matches_upstream_node_unschedulable(
    pod: PodInfo, unschedulable: bool, want: Status
) -> None:
    snap = snapshot_of([make_node("n").unschedulable(unschedulable).obj()])
    assert NodeUnschedulable().filter(fresh_state(), pod, snap.nodes["n"]) == want


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(make_pod().info(), id="intolerant pod"),
        pytest.param(make_pod().toleration(KEY, operator="Exists").info(), id="tolerant pod"),
    ],
)
def test_filter_nodes_agrees_with_per_node_filter(pod: PodInfo) -> None:
    nodes = [make_node(f"n{i}").unschedulable(i % 3 == 0).obj() for i in range(10)]
    snap = snapshot_of(nodes)
    batch = batch_of(snap)
    plugin = NodeUnschedulable()
    verdicts = plugin.filter_nodes(fresh_state(), pod, batch)
    for k, ni in enumerate(batch):
        assert verdicts.status_of(k) == plugin.filter(fresh_state(), pod, ni)
    assert len(verdicts.statuses) <= 1  # one shared Status for every rejected node


def test_rejection_is_unresolvable() -> None:
    snap = snapshot_of([make_node("n").unschedulable().obj()])
    st = NodeUnschedulable().filter(fresh_state(), make_pod().info(), snap.nodes["n"])
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
