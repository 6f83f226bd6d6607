"""NodeDeclaredFeatures, after upstream's nodedeclaredfeatures_test.go
(TestPreFilter, TestFilter) and the registry's features
(restart_all_containers_test.go, user_namespaces_host_network_test.go
TestInferForScheduling)."""

from __future__ import annotations

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.cycle_state import StateError
from berth.framework.model import PodInfo
from berth.framework.status import Code, Status
from berth.framework.testing import batch_of, fresh_state, make_node, make_pod, snapshot_of
from berth.plugins.nodedeclaredfeatures import (
    ERR_REASON_UNSATISFIED_REQUIREMENTS,
    NodeDeclaredFeatures,
    required_features,
)
from berth.plugins.nodedeclaredfeatures.node_declared_features import PRE_FILTER_STATE_KEY

RESTART_ALL = "RestartAllContainersOnContainerExits"
USERNS_HOSTNET = "UserNamespacesHostNetworkSupport"
REJECTED = Status.unresolvable(ERR_REASON_UNSATISFIED_REQUIREMENTS)


def _pod(
    *,
    actions: tuple[str, ...] = (),
    init_actions: tuple[str, ...] = (),
    host_network: bool = False,
    host_users: bool | None = None,
) -> pb.Pod:
    p = make_pod().container("c").obj()
    p.containers[0].restart_rule_actions.extend(actions)
    if init_actions:
        init = p.init_containers.add(name="i")
        init.restart_rule_actions.extend(init_actions)
    p.host_network = host_network
    if host_users is not None:
        p.host_users = host_users
    return p


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        pytest.param(_pod(), (), id="no requirements"),
        pytest.param(_pod(actions=("RestartAllContainers",)), (RESTART_ALL,), id="container rule"),
        pytest.param(
            _pod(init_actions=("RestartAllContainers",)), (RESTART_ALL,), id="init container rule"
        ),
        pytest.param(_pod(actions=("Restart",)), (), id="other rule action needs nothing"),
        pytest.param(
            _pod(host_network=True, host_users=False), (USERNS_HOSTNET,), id="hostNetwork+userns"
        ),
        pytest.param(_pod(host_network=True), (), id="hostNetwork with hostUsers unset"),
        pytest.param(_pod(host_network=True, host_users=True), (), id="hostNetwork hostUsers true"),
        pytest.param(_pod(host_users=False), (), id="userns without hostNetwork"),
        pytest.param(
            _pod(actions=("RestartAllContainers",), host_network=True, host_users=False),
            (RESTART_ALL, USERNS_HOSTNET),
            id="multiple requirements in registry order",
        ),
    ],
)
def test_infer_for_scheduling(pod: pb.Pod, want: tuple[str, ...]) -> None:
    assert required_features(pod) == want


def test_pre_filter_skips_a_pod_needing_nothing() -> None:
    """TestPreFilter "Pod with no requirements": Skip, no state written."""
    snap = snapshot_of([make_node("n").obj()])
    state = fresh_state()
    result, st = NodeDeclaredFeatures().pre_filter(state, PodInfo(_pod()), batch_of(snap))
    assert result is None
    assert st.code == Code.SKIP
    assert PRE_FILTER_STATE_KEY not in state


@pytest.mark.parametrize(
    ("declared", "pod", "want"),
    [
        pytest.param(
            [RESTART_ALL, USERNS_HOSTNET],
            _pod(actions=("RestartAllContainers",)),
            Status(),
            id="node matches requirements",
        ),
        pytest.param(
            [USERNS_HOSTNET],
            _pod(actions=("RestartAllContainers",)),
            REJECTED,
            id="node does not match requirements",
        ),
        pytest.param(
            [], _pod(actions=("RestartAllContainers",)), REJECTED, id="node declares nothing"
        ),
        pytest.param(
            [RESTART_ALL],
            _pod(actions=("RestartAllContainers",), host_network=True, host_users=False),
            REJECTED,
            id="node with some but not all required features",
        ),
        pytest.param(
            ["SomethingUnknown", RESTART_ALL],
            _pod(actions=("RestartAllContainers",)),
            Status(),
            id="unknown declared names are ignored",
        ),
    ],
)
def test_filter(declared: list[str], pod: pb.Pod, want: Status) -> None:
    node = make_node("n").obj()
    node.declared_features.extend(declared)
    snap = snapshot_of([node])
    plugin = NodeDeclaredFeatures()
    state = fresh_state()
    info = PodInfo(pod)
    _, st = plugin.pre_filter(state, info, batch_of(snap))
    assert st.is_success
    assert plugin.filter(state, info, snap.nodes["n"]) == want
    # The state survives the caller's round trip between calls.
    again = fresh_state(state.encode())
    assert plugin.filter(again, info, snap.nodes["n"]) == want


def test_filter_without_pre_filter_state_is_an_error() -> None:
    """TestFilter "Error getting pre-filter state"."""
    snap = snapshot_of([make_node("n").obj()])
    with pytest.raises(StateError):
        NodeDeclaredFeatures().filter(fresh_state(), PodInfo(_pod()), snap.nodes["n"])


def test_batch_filter_agrees_with_filter() -> None:
    nodes = []
    for i, declared in enumerate([[], [RESTART_ALL], [USERNS_HOSTNET], [RESTART_ALL, "X"]]):
        n = make_node(f"n{i}").obj()
        n.declared_features.extend(declared)
        nodes.append(n)
    snap = snapshot_of(nodes)
    plugin = NodeDeclaredFeatures()
    state = fresh_state()
    pod = PodInfo(_pod(init_actions=("RestartAllContainers",)))
    plugin.pre_filter(state, pod, batch_of(snap))
    batch = batch_of(snap)
    verdicts = plugin.filter_nodes(state, pod, batch)
    assert [bool(x) for x in verdicts.passed()] == [False, True, False, True]
    for k, ni in enumerate(batch):
        assert verdicts.status_of(k) == plugin.filter(state, pod, ni)
