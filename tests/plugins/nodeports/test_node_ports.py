"""NodePorts, ported from upstream's node_ports_test.go at v1.36 (TestNodePorts,
TestPreFilterDisabled, TestFits) and kube-scheduler's framework/types_test.go
(TestHostPortInfo_Check), plus sidecar ports of pods already on a node, the
batch form against the per-node form, CycleState across the wire, and whole
cycles through the Framework."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.config import load_config
from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import Plugin
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.profile import PluginRef, ProfileConfig
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.snapshot import Snapshot
from berth.framework.status import Code, Status
from berth.framework.testing import batch_of, fresh_state, make_node, snapshot_of
from berth.plugins.defaultbinder import DefaultBinder
from berth.plugins.nodeports import ERR_REASON, PRE_FILTER_STATE_KEY, NodePorts
from berth.plugins.nodeports.node_ports import HostPort, WantedPorts, fits, host_ports, used_ports
from berth.plugins.queuesort import PrioritySort

REJECTED = Status.unschedulable(ERR_REASON)
SKIP = Status.skip()
OK = Status()

_uids = itertools.count(1)


def port(spec: str) -> pb.ContainerPort:
    """``"PROTOCOL/host IP/host port"``, as upstream's newPod spells ports."""
    protocol, ip, number = spec.split("/")
    return pb.ContainerPort(host_ip=ip, host_port=int(number), protocol=protocol)


def ports_pod(*specs: str, node: str = "", init: bool = False, sidecar: bool = False) -> pb.Pod:
    """A pod with one container (or one init container) holding ``specs``;
    bound to ``node`` when given."""
    pod = pb.Pod(uid=f"uid-{next(_uids)}", name="p", namespace="default", node_name=node)
    if init:
        pod.init_containers.add(name="init", restartable=sidecar).ports.extend(map(port, specs))
    else:
        pod.containers.add(name="c").ports.extend(map(port, specs))
    return pod


def node_with(*pods: pb.Pod, name: str = "m1") -> NodeInfo:
    """A node in a snapshot, with ``pods`` bound to it (upstream's
    framework.NewNodeInfo(pods...))."""
    bound = []
    for p in pods:
        q = pb.Pod()
        q.CopyFrom(p)
        q.node_name = name
        bound.append(q)
    return snapshot_of([make_node(name).capacity(cpu="4").obj()], bound).nodes[name]


@dataclass
class PortsCase:
    pod: pb.Pod
    node: NodeInfo = field(default_factory=node_with)
    want_pre_filter: Status = OK
    want_filter: Status = OK


CASES = [
    pytest.param(PortsCase(pb.Pod(uid="empty"), want_pre_filter=SKIP), id="skip filter"),
    pytest.param(
        PortsCase(ports_pod("UDP/127.0.0.1/8080"), node_with(ports_pod("UDP/127.0.0.1/9090"))),
        id="other port",
    ),
    pytest.param(
        PortsCase(
            ports_pod("UDP/127.0.0.1/8080"),
            node_with(ports_pod("UDP/127.0.0.1/8080")),
            want_filter=REJECTED,
        ),
        id="same udp port",
    ),
    pytest.param(
        PortsCase(
            ports_pod("TCP/127.0.0.1/8080"),
            node_with(ports_pod("TCP/127.0.0.1/8080")),
            want_filter=REJECTED,
        ),
        id="same tcp port",
    ),
    pytest.param(
        PortsCase(ports_pod("TCP/127.0.0.1/8080"), node_with(ports_pod("TCP/127.0.0.2/8080"))),
        id="different host ip",
    ),
    pytest.param(
        PortsCase(ports_pod("UDP/127.0.0.1/8080"), node_with(ports_pod("TCP/127.0.0.1/8080"))),
        id="different protocol",
    ),
    pytest.param(
        PortsCase(
            ports_pod("UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"),
            node_with(ports_pod("UDP/127.0.0.1/8080")),
            want_filter=REJECTED,
        ),
        id="second udp port conflict",
    ),
    pytest.param(
        PortsCase(
            ports_pod("TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"),
            node_with(ports_pod("TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081")),
            want_filter=REJECTED,
        ),
        id="first tcp port conflict",
    ),
    pytest.param(
        PortsCase(
            ports_pod("TCP/0.0.0.0/8001"),
            node_with(ports_pod("TCP/127.0.0.1/8001")),
            want_filter=REJECTED,
        ),
        id="first tcp port conflict due to 0.0.0.0 hostIP",
    ),
    pytest.param(
        PortsCase(
            ports_pod("TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"),
            node_with(ports_pod("TCP/127.0.0.1/8001")),
            want_filter=REJECTED,
        ),
        id="TCP hostPort conflict due to 0.0.0.0 hostIP",
    ),
    pytest.param(
        PortsCase(
            ports_pod("TCP/127.0.0.1/8001"),
            node_with(ports_pod("TCP/0.0.0.0/8001")),
            want_filter=REJECTED,
        ),
        id="second tcp port conflict to 0.0.0.0 hostIP",
    ),
    pytest.param(
        PortsCase(ports_pod("UDP/127.0.0.1/8001"), node_with(ports_pod("TCP/0.0.0.0/8001"))),
        id="second different protocol",
    ),
    pytest.param(
        PortsCase(
            ports_pod("UDP/127.0.0.1/8001"),
            node_with(ports_pod("TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001")),
            want_filter=REJECTED,
        ),
        id="UDP hostPort conflict due to 0.0.0.0 hostIP",
    ),
    pytest.param(
        PortsCase(
            ports_pod("TCP//8001", init=True, sidecar=False),
            node_with(ports_pod("TCP/0.0.0.0/8001")),
            want_pre_filter=SKIP,
        ),
        id="non-sidecar initContainer using hostPort",
    ),
    pytest.param(
        PortsCase(
            ports_pod("TCP//8001", init=True, sidecar=True),
            node_with(ports_pod("TCP/0.0.0.0/8001")),
            want_filter=REJECTED,
        ),
        id="TCP hostPort conflict from sidecar initContainer",
    ),
    # Beyond upstream's table.
    pytest.param(
        PortsCase(
            ports_pod("TCP//8001"),
            node_with(ports_pod("TCP//8001", init=True, sidecar=True)),
            want_filter=REJECTED,
        ),
        id="a sidecar's host port on a pod already on the node is in use",
    ),
    pytest.param(
        PortsCase(
            ports_pod("TCP//8001"),
            node_with(ports_pod("TCP//8001", init=True, sidecar=False)),
        ),
        id="a plain init container's host port on the node is not in use",
    ),
    pytest.param(
        PortsCase(
            ports_pod("//8001"),
            node_with(ports_pod("TCP/0.0.0.0/8001")),
            want_filter=REJECTED,
        ),
        id="empty protocol means TCP and empty host IP means 0.0.0.0",
    ),
    pytest.param(
        PortsCase(
            ports_pod("TCP/127.0.0.1/8001"),
            node_with(ports_pod("TCP/127.0.0.1/8001"), ports_pod("SCTP/127.0.0.1/8002")),
            want_filter=REJECTED,
        ),
        id="ports of every pod on the node count",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_node_ports(case: PortsCase) -> None:
    """TestNodePorts: PreFilter's status, then Filter (per node and batch)."""
    plugin = NodePorts()
    pod = PodInfo(case.pod)
    state = fresh_state()
    snap = case.node.owner
    assert isinstance(snap, Snapshot)
    result, status = plugin.pre_filter(state, pod, batch_of(snap))
    assert result is None
    assert status == case.want_pre_filter
    if status.is_skip:
        return
    assert plugin.filter(state, pod, case.node) == case.want_filter
    verdicts = plugin.filter_nodes(state, pod, batch_of(snap, [case.node.name]))
    assert verdicts.status_of(0) == case.want_filter


def test_pre_filter_disabled() -> None:
    """TestPreFilterDisabled: Filter without PreFilter's state is an Error."""
    status = NodePorts().filter(fresh_state(), PodInfo(pb.Pod()), node_with())
    assert status == Status.error('reading "PreFilterNodePorts" from cycleState: not found')
    verdicts = NodePorts().filter_nodes(
        fresh_state(), PodInfo(pb.Pod()), batch_of(snapshot_of([make_node("n").obj()]))
    )
    assert verdicts.status_of(0).code is Code.ERROR


@pytest.mark.parametrize(
    ("pod", "existing", "expect"),
    [
        pytest.param(
            ports_pod("TCP/127.0.0.1/80"),
            ["TCP/127.0.0.1/9090"],
            True,
            id="non-conflicting ports",
        ),
        pytest.param(
            ports_pod(
                "TCP/127.0.0.1/80", "TCP/127.0.1.1/80", "TCP/127.0.1.1/90", "TCP/127.0.1.1/100"
            ),
            ["TCP/127.0.0.1/9090", "TCP/127.0.0.1/9191", "TCP/127.0.1.1/8080"],
            True,
            id="multiple non-conflicting ports",
        ),
        pytest.param(
            ports_pod("TCP/127.0.0.1/80"),
            ["UDP/127.0.0.1/80"],
            True,
            id="same ports on different protocols",
        ),
        pytest.param(
            ports_pod("TCP/127.0.0.1/80"), ["TCP/127.0.0.1/80"], False, id="conflicting ports"
        ),
        pytest.param(
            ports_pod(
                "TCP/127.0.0.1/80", "TCP/127.0.1.1/80", "TCP/127.0.1.1/90", "TCP/127.0.1.1/100"
            ),
            ["TCP/127.0.0.1/9090", "TCP/127.0.1.1/90", "TCP/127.0.1.1/8080"],
            False,
            id="multiple ports, some conflicting",
        ),
    ],
)
def test_fits(pod: pb.Pod, existing: list[str], expect: bool) -> None:
    """TestFits."""
    assert fits(PodInfo(pod), node_with(ports_pod(*existing))) is expect


def _key(protocol: str, ip: str, number: int) -> tuple[str, str, int]:
    hp = HostPort(ip or "0.0.0.0", protocol or "TCP", number)
    return (hp.ip, hp.protocol, hp.port)


@pytest.mark.parametrize(
    ("added", "check", "expect"),
    [
        pytest.param(
            [("TCP", "127.0.0.1", 80)],
            ("", "", 81),
            False,
            id="empty check should check 0.0.0.0 and TCP",
        ),
        pytest.param(
            [("TCP", "127.0.0.1", 80)],
            ("", "", 80),
            True,
            id="empty check should check 0.0.0.0 and TCP (conflicted)",
        ),
        pytest.param(
            [("TCP", "127.0.0.1", 80)], ("", "", 0), False, id="empty port check should pass"
        ),
        pytest.param(
            [("TCP", "127.0.0.1", 80)],
            ("TCP", "0.0.0.0", 80),
            True,
            id="0.0.0.0 should check all registered IPs",
        ),
        pytest.param(
            [("UDP", "127.0.0.1", 80)],
            ("TCP", "0.0.0.0", 80),
            False,
            id="0.0.0.0 with different protocol should be allowed",
        ),
        pytest.param(
            [("TCP", "127.0.0.1", 79), ("TCP", "127.0.0.1", 81), ("TCP", "127.0.0.1", 82)],
            ("TCP", "0.0.0.0", 80),
            False,
            id="0.0.0.0 with different port should be allowed",
        ),
        pytest.param(
            [("TCP", "0.0.0.0", 80)],
            ("TCP", "127.0.0.1", 80),
            True,
            id="normal ip should check all registered 0.0.0.0",
        ),
        pytest.param(
            [
                ("TCP", "0.0.0.0", 79),
                ("UDP", "0.0.0.0", 80),
                ("TCP", "0.0.0.0", 81),
                ("TCP", "0.0.0.0", 82),
            ],
            ("TCP", "127.0.0.1", 80),
            False,
            id="normal ip with different port/protocol should be allowed (0.0.0.0)",
        ),
        pytest.param(
            [
                ("TCP", "127.0.0.1", 79),
                ("UDP", "127.0.0.1", 80),
                ("TCP", "127.0.0.1", 81),
                ("TCP", "127.0.0.1", 82),
            ],
            ("TCP", "127.0.0.1", 80),
            False,
            id="normal ip with different port/protocol should be allowed",
        ),
    ],
)
def test_host_port_info_check(
    added: list[tuple[str, str, int]], check: tuple[str, str, int], expect: bool
) -> None:
    """TestHostPortInfo_Check (HostPortInfo.CheckConflict)."""
    used = {_key(*a) for a in added}
    protocol, ip, number = check
    wanted = WantedPorts([HostPort(ip or "0.0.0.0", protocol or "TCP", number)])
    assert wanted.conflicts(used) is expect


def test_host_ports_lists_sidecars_first_then_containers() -> None:
    """schedutil.GetHostPorts: restartable init containers, then containers;
    ports without a host port left out; host IP and protocol defaulted."""
    pod = pb.Pod()
    pod.init_containers.add(restartable=False).ports.add(host_port=1)
    pod.init_containers.add(restartable=True).ports.extend(
        [pb.ContainerPort(container_port=80), pb.ContainerPort(host_port=2, protocol="UDP")]
    )
    pod.containers.add().ports.add(host_port=3, host_ip="10.0.0.1")
    assert host_ports(pod) == [HostPort("0.0.0.0", "UDP", 2), HostPort("10.0.0.1", "TCP", 3)]


def test_pre_filter_state_travels_to_the_caller_and_back() -> None:
    plugin = NodePorts()
    pod = PodInfo(ports_pod("TCP//80"))
    snap = snapshot_of(
        [make_node("free").obj(), make_node("taken").obj()],
        [ports_pod("TCP/10.0.0.1/80", node="taken")],
    )
    state = CycleState()
    plugin.pre_filter(state, pod, batch_of(snap))
    wire = fresh_state(state.encode())
    assert PRE_FILTER_STATE_KEY in wire
    verdicts = plugin.filter_nodes(wire, pod, batch_of(snap, ["free", "taken"]))
    assert [verdicts.status_of(k) for k in range(2)] == [OK, REJECTED]


# -- sidecar ports of pods on the node follow the snapshot -------------------------------------


def _apply(snap: Snapshot, upsert: Sequence[pb.Pod] = (), delete: Sequence[str] = ()) -> None:
    delta = pb.ClusterDelta()
    delta.upsert_pods.extend(upsert)
    delta.delete_pods.extend(delete)
    snap.apply(delta)


def test_sidecar_ports_on_a_node_follow_pod_changes() -> None:
    plugin = NodePorts()
    pod = PodInfo(ports_pod("TCP//8001"))
    snap = snapshot_of([make_node("n").obj()])
    state = fresh_state()
    plugin.pre_filter(state, pod, batch_of(snap))

    def verdict() -> Status:
        return plugin.filter_nodes(state, pod, batch_of(snap)).status_of(0)

    assert verdict() == OK
    sidecar = ports_pod("TCP//8001", node="n", init=True, sidecar=True)
    _apply(snap, [sidecar])
    assert verdict() == REJECTED
    # The same pod updated without its port: still one pod on the node.
    changed = pb.Pod()
    changed.CopyFrom(sidecar)
    del changed.init_containers[0].ports[:]
    _apply(snap, [changed])
    assert verdict() == OK
    _apply(snap, [sidecar])
    assert verdict() == REJECTED
    _apply(snap, delete=[sidecar.uid])
    assert verdict() == OK


def test_sidecar_ports_do_not_outlive_a_deleted_node() -> None:
    """A node deleted and another added in its slot starts afresh."""
    plugin = NodePorts()
    pod = PodInfo(ports_pod("TCP//8001"))
    snap = snapshot_of(
        [make_node("old").obj()], [ports_pod("TCP//8001", node="old", init=True, sidecar=True)]
    )
    state = fresh_state()
    plugin.pre_filter(state, pod, batch_of(snap))
    assert plugin.filter_nodes(state, pod, batch_of(snap)).status_of(0) == REJECTED
    delta = pb.ClusterDelta(delete_nodes=["old"])
    delta.upsert_nodes.add(name="new")
    snap.apply(delta)
    assert snap.nodes["new"].index == 0
    assert plugin.filter_nodes(state, pod, batch_of(snap)).status_of(0) == OK


def test_used_ports_include_containers_and_sidecars() -> None:
    node = node_with(
        ports_pod("TCP/10.0.0.1/80"),
        ports_pod("UDP//53", init=True, sidecar=True),
        ports_pod("TCP//9", init=True, sidecar=False),
    )
    assert used_ports(node) == {("10.0.0.1", "TCP", 80), ("0.0.0.0", "UDP", 53)}


# -- batch against per node ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(10))
def test_filter_nodes_agrees_with_filter_on_random_clusters(seed: int) -> None:
    rng = random.Random(seed)

    def spec() -> str:
        return f"{rng.choice(['TCP', 'UDP', ''])}/{rng.choice(['', '0.0.0.0', '10.0.0.1', '10.0.0.2'])}/{rng.choice([80, 443, 53])}"

    names = [f"n{i}" for i in range(25)]
    pods = [
        ports_pod(
            spec(), node=rng.choice(names), init=rng.random() < 0.3, sidecar=rng.random() < 0.5
        )
        for _ in range(30)
    ]
    snap = snapshot_of([make_node(n).obj() for n in names], pods)
    plugin = NodePorts()
    for _ in range(5):
        pod = PodInfo(ports_pod(*(spec() for _ in range(rng.randint(1, 3)))))
        state = fresh_state()
        plugin.pre_filter(state, pod, batch_of(snap))
        nodes = batch_of(snap)
        verdicts = plugin.filter_nodes(state, pod, nodes)
        for k, ni in enumerate(nodes):
            assert verdicts.status_of(k) == plugin.filter(state, pod, ni), ni.name


# -- whole cycles ----------------------------------------------------------------------------------

REGISTRY: dict[str, type[Plugin]] = {
    "PrioritySort": PrioritySort,
    "NodePorts": NodePorts,
    "DefaultBinder": DefaultBinder,
}


def framework() -> Framework:
    """NodePorts as upstream's default profile enables it: PreFilter and
    Filter."""
    refs = (PluginRef("NodePorts"),)
    return Framework(
        ProfileConfig(
            "test",
            {
                "queueSort": (PluginRef("PrioritySort"),),
                "preFilter": refs,
                "filter": refs,
                "bind": (PluginRef("DefaultBinder"),),
            },
        ),
        REGISTRY,
    )


def test_cycle_places_the_pod_where_its_port_is_free() -> None:
    snap = snapshot_of(
        [make_node("a").obj(), make_node("b").obj()], [ports_pod("TCP//8080", node="a")]
    )
    result = schedule_pod(framework(), snap, CycleState(), PodInfo(ports_pod("TCP//8080")))
    assert result.status.is_success, result.message
    assert result.node == "b"


def test_cycle_failure_message_and_code() -> None:
    snap = snapshot_of(
        [make_node("a").obj(), make_node("b").obj()],
        [ports_pod("TCP//8080", node="a"), ports_pod("TCP/10.0.0.1/8080", node="b")],
    )
    result = schedule_pod(framework(), snap, CycleState(), PodInfo(ports_pod("TCP//8080")))
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.message == (
        "0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports."
    )
    assert result.rejected["a"] == REJECTED.with_plugin("NodePorts")


def test_pod_without_host_ports_skips_filter() -> None:
    snap = snapshot_of([make_node("a").obj()], [ports_pod("TCP//8080", node="a")])
    state = CycleState()
    result = schedule_pod(framework(), snap, state, PodInfo(pb.Pod(uid="x", name="x")))
    assert result.node == "a"
    assert "NodePorts" in state.skip_filter_plugins


def test_readme_configuration_loads(tmp_path: Path) -> None:
    readme = (
        Path(__file__).resolve().parents[3] / "plugins" / "nodeports" / "README.md"
    ).read_text()
    path = tmp_path / "scheduler-config.yaml"
    path.write_text(readme.split("```yaml\n", 1)[1].split("```", 1)[0])
    (profile,) = load_config(path, REGISTRY).profiles
    assert [r.name for r in profile.enabled("preFilter")] == ["NodePorts"]
    assert [r.name for r in profile.enabled("filter")] == ["NodePorts"]
