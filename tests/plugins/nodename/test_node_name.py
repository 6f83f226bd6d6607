"""NodeName, ported in spirit from upstream's node_name_test.go (TestNodeName)."""

from __future__ import annotations

import pytest

from berth.framework.model import PodInfo
from berth.framework.status import Code, Status
from berth.framework.testing import batch_of, fresh_state, make_node, make_pod, snapshot_of
from berth.plugins.nodename import ERR_REASON, NodeName

NODES = [make_node(n).capacity(cpu="1").obj() for n in ("foo", "bar", "baz")]
REJECTED = Status.unresolvable(ERR_REASON)


@pytest.mark.parametrize(
    ("pod", "node", "want"),
    [
        pytest.param(make_pod().info(), "foo", Status(), id="no host specified"),
        pytest.param(make_pod().node("foo").info(), "foo", Status(), id="host matches"),
        pytest.param(make_pod().node("bar").info(), "foo", REJECTED, id="host doesn't match"),
        pytest.param(make_pod().node("gone").info(), "foo", REJECTED, id="host is no known node"),
    ],
)
def test_filter_matches_upstream_node_name(pod: PodInfo, node: str, want: Status) -> None:
    snap = snapshot_of(NODES)
    assert NodeName().filter(fresh_state(), pod, snap.nodes[node]) == want


@pytest.mark.parametrize(
    ("node_name", "passing"),
    [
        pytest.param("", ["foo", "bar", "baz"], id="no host specified: every node passes"),
        pytest.param("bar", ["bar"], id="host named: only that node passes"),
        pytest.param("gone", [], id="host unknown: no node passes"),
    ],
)
def test_filter_nodes_agrees_with_per_node_filter(node_name: str, passing: list[str]) -> None:
    snap = snapshot_of(NODES)
    pod = make_pod().node(node_name).info()
    batch = batch_of(snap)
    verdicts = NodeName().filter_nodes(fresh_state(), pod, batch)
    assert [n for n, ok in zip(batch.names, verdicts.passed(), strict=True) if ok] == passing
    for k, ni in enumerate(batch):
        assert verdicts.status_of(k) == NodeName().filter(fresh_state(), pod, ni)


def test_rejection_is_unresolvable_so_preemption_is_not_tried() -> None:
    snap = snapshot_of(NODES)
    st = NodeName().filter(fresh_state(), make_pod().node("bar").info(), snap.nodes["foo"])
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.reasons == ("node(s) didn't match the requested node name",)
