"""NodePorts: keep a pod off nodes where a host port it asks for is taken.

Port of pkg/scheduler/framework/plugins/nodeports/node_ports.go at v1.36
(PreFilter, Filter) with upstream's host port rules
(pkg/scheduler/util/utils.go GetHostPorts; staging/src/k8s.io/kube-scheduler/
framework/types.go HostPortInfo.CheckConflict):

* A pod's host ports are those of its restartable init containers (sidecars,
  ``restartPolicy: Always``, which run for the pod's whole life) and of its
  containers, with ``hostPort > 0``. Other init containers do not count.
* An empty host IP means 0.0.0.0 and an empty protocol TCP.
* A wanted port conflicts with a used one of the same protocol and port
  number when either host IP is 0.0.0.0 or both IPs are equal.

EventsToRegister and its queueing hint are upstream's (queueing hints on);
SignPod has no Berth extension point.

Used ports come from ``NodeInfo.used_ports``, which the snapshot keeps
current as pods come and go. It counts the ports of regular containers
(PodInfo.host_ports); when the framework's count leaves out sidecar ports,
this module adds them from the node's pods itself (see _SidecarPorts).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import ClassVar, Final

import msgspec
import numpy as np

from berth.api.v1 import cluster_pb2 as pb
from berth.framework import signers
from berth.framework.cycle_state import CycleState, StateKey
from berth.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from berth.framework.interfaces import (
    FilterPlugin,
    NodeVerdicts,
    PreFilterPlugin,
    PreFilterResult,
    SignFragment,
    SignPlugin,
)
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.snapshot import NodeBatch, Snapshot
from berth.framework.status import SUCCESS, Status

__all__ = [
    "DEFAULT_BIND_ALL_HOST_IP",
    "ERR_REASON",
    "NAME",
    "PRE_FILTER_STATE_KEY",
    "HostPort",
    "NodePorts",
    "PreFilterState",
    "WantedPorts",
    "fits",
    "host_ports",
    "used_ports",
]

NAME = "NodePorts"

# node_ports.go, ErrReason.
ERR_REASON = "node(s) didn't have free ports for the requested pod ports"

# framework.DefaultBindAllHostIP and the protocol an empty one means.
DEFAULT_BIND_ALL_HOST_IP: Final = "0.0.0.0"
_DEFAULT_PROTOCOL: Final = "TCP"

# Freeing a port (preempting its pod) can help: Unschedulable, not
# unresolvable.
_REJECTED = Status.unschedulable(ERR_REASON)

# (host IP, protocol, port), sanitized: NodeInfo.used_ports' key.
PortKey = tuple[str, str, int]


class HostPort(msgspec.Struct, frozen=True, array_like=True):
    """A host port a pod asks for, host IP and protocol defaulted."""

    ip: str
    protocol: str
    port: int


class PreFilterState(msgspec.Struct, frozen=True):
    """node_ports.go, preFilterState: the pod's host ports."""

    ports: tuple[HostPort, ...]


# Upstream's key: "PreFilter" + the plugin name. Scheduling-only: upstream reads
# it only in Filter (node_ports.go, getPreFilterState).
PRE_FILTER_STATE_KEY = StateKey("PreFilter" + NAME, PreFilterState, scheduling_only=True)


def _sanitized(p: pb.ContainerPort) -> HostPort:
    return HostPort(
        p.host_ip or DEFAULT_BIND_ALL_HOST_IP, p.protocol or _DEFAULT_PROTOCOL, p.host_port
    )


def host_ports(pod: pb.Pod) -> list[HostPort]:
    """schedutil.GetHostPorts: the host ports of the restartable init
    containers, then of the containers (``hostPort > 0`` only)."""
    out: list[HostPort] = []
    for c in pod.init_containers:
        if c.restartable:
            out += [_sanitized(p) for p in c.ports if p.host_port > 0]
    for c in pod.containers:
        out += [_sanitized(p) for p in c.ports if p.host_port > 0]
    return out


def _sidecar_port_keys(pod: pb.Pod) -> list[PortKey]:
    out: list[PortKey] = []
    for c in pod.init_containers:
        if c.restartable:
            out += [(hp.ip, hp.protocol, hp.port) for hp in map(_sanitized, c.ports) if hp.port > 0]
    return out


class WantedPorts:
    """A pod's host ports arranged for HostPortInfo.CheckConflict against
    many nodes."""

    __slots__ = ("exact", "port_numbers", "wildcard")

    def __init__(self, ports: Iterable[HostPort]) -> None:
        # (protocol, port) of every wanted port; of those bound to 0.0.0.0;
        # (ip, protocol, port) of the others.
        self.port_numbers: set[tuple[str, int]] = set()
        self.wildcard: set[tuple[str, int]] = set()
        self.exact: set[PortKey] = set()
        for p in ports:
            if p.port <= 0:
                continue
            self.port_numbers.add((p.protocol, p.port))
            if p.ip == DEFAULT_BIND_ALL_HOST_IP:
                self.wildcard.add((p.protocol, p.port))
            else:
                self.exact.add((p.ip, p.protocol, p.port))

    def __bool__(self) -> bool:
        return bool(self.port_numbers)

    def conflicts(self, used: Iterable[PortKey]) -> bool:
        """Does any wanted port conflict with one of ``used``? Same protocol
        and port, and 0.0.0.0 on either side or the same IP."""
        numbers = self.port_numbers
        for key in used:
            ip, protocol, port = key
            pp = (protocol, port)
            if pp not in numbers:
                continue
            if ip == DEFAULT_BIND_ALL_HOST_IP or pp in self.wildcard or key in self.exact:
                return True
        return False


def _framework_counts_sidecar_ports() -> bool:
    """Does NodeInfo.used_ports include the host ports of restartable init
    containers (PodInfo.host_ports, as upstream's GetHostPorts does)?"""
    probe = pb.Pod()
    probe.init_containers.add(restartable=True).ports.add(host_port=1)
    return bool(PodInfo(probe).host_ports)


_SIDECARS_COUNTED: Final = _framework_counts_sidecar_ports()


# A node's cached sidecar ports: the NodeInfo, its pod count and last PodInfo
# when computed, and the ports.
_Entry = tuple[NodeInfo, int, PodInfo | None, tuple[PortKey, ...]]


class _SidecarPorts:
    """Host ports of the sidecars of a node's pods, for when NodeInfo.used_ports
    leaves them out: computed from ``node.pods`` on first need and again
    only when the node's pods changed.

    A change is seen from the pod count and the last PodInfo of ``node.pods``
    (dicts keep insertion order). The snapshot adds a pod by inserting a new
    PodInfo at the end and removes one by deleting it, so any change either
    changes the count or puts a PodInfo never seen before last. The entry
    holds that PodInfo, so its identity cannot be reused while compared.
    Entries live per Snapshot (dropped with it), keyed by node slot, and are
    checked against the NodeInfo object so a reused slot starts afresh. A
    NodeInfo outside a snapshot is computed every time.
    """

    def __init__(self) -> None:
        self._by_snapshot: weakref.WeakKeyDictionary[Snapshot, dict[int, _Entry]] = (
            weakref.WeakKeyDictionary()
        )

    def entries(self, owner: object) -> dict[int, _Entry] | None:
        """The cache of a snapshot (None for anything else); look it up once
        per call and pass it to ``of``."""
        if not isinstance(owner, Snapshot):
            return None
        entries = self._by_snapshot.get(owner)
        if entries is None:
            entries = self._by_snapshot.setdefault(owner, {})
        return entries

    def of(self, node: NodeInfo, entries: dict[int, _Entry] | None) -> tuple[PortKey, ...]:
        if entries is None or node.index < 0:
            return self._compute(node)
        pods = node.pods
        count = len(pods)
        last = next(reversed(pods.values())) if count else None
        entry = entries.get(node.index)
        if entry is not None and entry[0] is node and entry[1] == count and entry[2] is last:
            return entry[3]
        ports = self._compute(node)
        entries[node.index] = (node, count, last, ports)
        return ports

    @staticmethod
    def _compute(node: NodeInfo) -> tuple[PortKey, ...]:
        out: list[PortKey] = []
        for p in node.pods.values():
            if p.proto.init_containers:
                out += _sidecar_port_keys(p.proto)
        return tuple(out)


_SIDECAR_PORTS = _SidecarPorts()


def used_ports(node: NodeInfo) -> set[PortKey]:
    """The host ports the node's pods use (NodeInfo.UsedPorts), as keys."""
    used = set(node.used_ports)
    if not _SIDECARS_COUNTED:
        used.update(_SIDECAR_PORTS.of(node, _SIDECAR_PORTS.entries(node.owner)))
    return used


def _node_conflicts(wanted: WantedPorts, node: NodeInfo, entries: dict[int, _Entry] | None) -> bool:
    if node.used_ports and wanted.conflicts(node.used_ports):
        return True
    if _SIDECARS_COUNTED:
        return False
    sidecars = _SIDECAR_PORTS.of(node, entries)
    return bool(sidecars) and wanted.conflicts(sidecars)


def fits(pod: PodInfo, node: NodeInfo) -> bool:
    """node_ports.go, Fits: no host port of the pod conflicts with the
    node's."""
    wanted = WantedPorts(host_ports(pod.proto))
    return not _node_conflicts(wanted, node, _SIDECAR_PORTS.entries(node.owner))


def _missing_pre_filter() -> Status:
    # node_ports.go, getPreFilterState: Filter without PreFilter is an
    # error (fwk.ErrNotFound).
    return Status.error(f'reading "{PRE_FILTER_STATE_KEY.name}" from cycleState: not found')


class NodePorts(PreFilterPlugin, FilterPlugin, SignPlugin):
    """The NodePorts plugin (upstream's nodeports.NodePorts)."""

    name: ClassVar[str] = NAME

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """SignPod: the pod's host ports (signers.go HostPortsSigner)."""
        return [(signers.HOST_PORTS, signers.host_ports(pod.proto))]

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """node_ports.go, EventsToRegister (queueing hints on): a pod deleted
        (with a hint), a node added (without)."""
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.DELETE),
                self.is_schedulable_after_pod_deleted,
            ),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD)),
        ]

    def is_schedulable_after_pod_deleted(
        self, pod: PodInfo, old: PodInfo, new: None
    ) -> QueueingHint:
        """isSchedulableAfterPodDeleted: Queue only when the deleted pod was
        on a node (or nominated to one) and held a host port that conflicts
        with one the pod wants."""
        deleted = old.proto
        if not deleted.node_name and not deleted.nominated_node_name:
            return QueueingHint.QUEUE_SKIP
        freed = host_ports(deleted)
        if not freed:
            return QueueingHint.QUEUE_SKIP
        wanted = WantedPorts(host_ports(pod.proto))
        if wanted.conflicts((hp.ip, hp.protocol, hp.port) for hp in freed):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        """node_ports.go, PreFilter: the pod's host ports to CycleState;
        Skip when it has none."""
        ports = host_ports(pod.proto)
        if not ports:
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, PreFilterState(tuple(ports)))
        return None, SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """node_ports.go, Filter: ``node(s) didn't have free ports for the
        requested pod ports``, Unschedulable (preempting the pod holding the
        port can free it)."""
        pre = state.get(PRE_FILTER_STATE_KEY)
        if pre is None:
            return _missing_pre_filter()
        entries = _SIDECAR_PORTS.entries(node.owner)
        return _REJECTED if _node_conflicts(WantedPorts(pre.ports), node, entries) else SUCCESS

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        """The batch form: the wanted ports are arranged once, then each
        node's used ports are checked; nodes without host ports pass at
        once."""
        n = len(nodes)
        pre = state.get(PRE_FILTER_STATE_KEY)
        if pre is None:
            return NodeVerdicts.uniform(n, _missing_pre_filter())
        wanted = WantedPorts(pre.ports)
        if not wanted:
            return NodeVerdicts.all_pass(n)
        entries = _SIDECAR_PORTS.entries(nodes.snapshot)
        rejected = np.zeros(n, dtype=np.bool_)
        for k, ni in enumerate(nodes):
            if _node_conflicts(wanted, ni, entries):
                rejected[k] = True
        if not np.count_nonzero(rejected):
            return NodeVerdicts.all_pass(n)
        return NodeVerdicts.from_mask(rejected, _REJECTED)
