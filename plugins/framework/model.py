"""The pods and nodes plugins read.

A ``PodInfo`` wraps the wire record (``berth.v1.Pod``) and adds what the
framework derives once per pod: effective resource requests and the "non-zero"
requests used for scoring. A ``NodeInfo`` is a node with the pods on it and
their sums, like upstream's framework.NodeInfo (pkg/scheduler/framework/
types.go). Hot plugins read the same facts as numpy columns
(``plugins.framework.snapshot.NodeColumns``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from berth.v1 import cluster_pb2 as pb

# Defaults for a container that requests no CPU or memory, used for scoring
# only (pkg/scheduler/util/pod_resources.go: DefaultMilliCPURequest,
# DefaultMemoryRequest).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024


@dataclass(slots=True)
class Resource:
    """Upstream's framework.Resource: decoded quantities."""

    milli_cpu: int = 0
    memory: int = 0
    ephemeral_storage: int = 0
    allowed_pod_number: int = 0
    scalar: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_proto(cls, r: pb.Resources) -> Resource:
        return cls(r.milli_cpu, r.memory, r.ephemeral_storage, r.pods, dict(r.scalar))

    def add(self, other: Resource) -> None:
        self.milli_cpu += other.milli_cpu
        self.memory += other.memory
        self.ephemeral_storage += other.ephemeral_storage
        self.allowed_pod_number += other.allowed_pod_number
        for name, value in other.scalar.items():
            self.scalar[name] = self.scalar.get(name, 0) + value

    def set_max(self, other: Resource) -> None:
        self.milli_cpu = max(self.milli_cpu, other.milli_cpu)
        self.memory = max(self.memory, other.memory)
        self.ephemeral_storage = max(self.ephemeral_storage, other.ephemeral_storage)
        for name, value in other.scalar.items():
            self.scalar[name] = max(self.scalar.get(name, 0), value)

    def copy(self) -> Resource:
        return Resource(
            self.milli_cpu,
            self.memory,
            self.ephemeral_storage,
            self.allowed_pod_number,
            dict(self.scalar),
        )


def _container_requests(c: pb.Container, non_zero: bool) -> Resource:
    r = Resource.from_proto(c.requests)
    if non_zero:
        # GetNonzeroRequestForResource: a *missing* request takes the default;
        # an explicit 0 stays 0.
        if not c.requests.HasField("milli_cpu"):
            r.milli_cpu = DEFAULT_MILLI_CPU_REQUEST
        if not c.requests.HasField("memory"):
            r.memory = DEFAULT_MEMORY_REQUEST
    return r


def _sum_containers(pod: pb.Pod, non_zero: bool) -> Resource:
    """pod_requests for the common pod (no init containers, no overhead):
    the same sums with plain integers, on the hot path of every cycle."""
    cpu = mem = eph = 0
    scalar: dict[str, int] = {}
    for c in pod.containers:
        r = c.requests
        if non_zero and not r.HasField("milli_cpu"):
            cpu += DEFAULT_MILLI_CPU_REQUEST
        else:
            cpu += r.milli_cpu
        if non_zero and not r.HasField("memory"):
            mem += DEFAULT_MEMORY_REQUEST
        else:
            mem += r.memory
        eph += r.ephemeral_storage
        if r.scalar:
            for name, value in r.scalar.items():
                scalar[name] = scalar.get(name, 0) + value
    return Resource(cpu, mem, eph, 0, scalar)


def pod_requests(pod: pb.Pod, non_zero: bool = False) -> Resource:
    """Effective requests of a pod, upstream's resource.PodRequests
    (k8s.io/component-helpers/resource/helpers.go): the sum of the containers,
    raised to the largest init-container step (restartable init containers
    count for the whole pod life and add to later steps), plus overhead.
    """
    if not pod.init_containers and not pod.HasField("overhead"):
        return _sum_containers(pod, non_zero)
    reqs = Resource()
    for c in pod.containers:
        reqs.add(_container_requests(c, non_zero))
    init_max = Resource()
    sidecars = Resource()
    for c in pod.init_containers:
        creq = _container_requests(c, non_zero)
        if c.restartable:
            reqs.add(creq)
            sidecars.add(creq)
            step = sidecars.copy()
        else:
            step = creq
            step.add(sidecars)
        init_max.set_max(step)
    reqs.set_max(init_max)
    if pod.HasField("overhead"):
        reqs.add(Resource.from_proto(pod.overhead))
    reqs.allowed_pod_number = 0
    return reqs


class PodInfo:
    """A pod as plugins read it: ``proto`` is the wire record."""

    __slots__ = ("__dict__", "proto")

    def __init__(self, proto: pb.Pod) -> None:
        self.proto = proto

    @property
    def uid(self) -> str:
        return self.proto.uid

    @property
    def name(self) -> str:
        return self.proto.name

    @property
    def namespace(self) -> str:
        return self.proto.namespace

    @property
    def key(self) -> str:
        return f"{self.proto.namespace}/{self.proto.name}"

    @property
    def node_name(self) -> str:
        return self.proto.node_name

    @property
    def priority(self) -> int:
        return self.proto.priority

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.proto.labels)

    @cached_property
    def requests(self) -> Resource:
        return pod_requests(self.proto)

    @cached_property
    def non_zero_requests(self) -> tuple[int, int]:
        """(milli CPU, memory) with upstream's defaults for missing requests."""
        r = pod_requests(self.proto, non_zero=True)
        return r.milli_cpu, r.memory

    @cached_property
    def host_ports(self) -> tuple[tuple[str, str, int], ...]:
        """(host IP, protocol, host port) of every container port that asks
        for a host port (upstream's schedutil.GetHostPorts)."""
        out: list[tuple[str, str, int]] = []
        for c in self.proto.containers:
            for p in c.ports:
                if p.host_port > 0:
                    out.append((p.host_ip or "0.0.0.0", p.protocol or "TCP", p.host_port))
        return tuple(out)

    def __repr__(self) -> str:
        return f"PodInfo({self.key})"


class NodeInfo:
    """A node, the pods on it and their sums (upstream's framework.NodeInfo)."""

    __slots__ = (
        "allocatable",
        "index",
        "node",
        "non_zero_requested",
        "owner",
        "pods",
        "requested",
        "used_ports",
    )

    def __init__(self, node: pb.Node, index: int = -1) -> None:
        self.node = node
        self.index = index
        # The Snapshot this node lives in (set by the snapshot), so per-node
        # calls can reach the batch form of a plugin.
        self.owner: object | None = None
        self.allocatable = Resource.from_proto(node.allocatable)
        self.pods: dict[str, PodInfo] = {}
        self.requested = Resource()
        # (milli CPU, memory) summed with non-zero defaults.
        self.non_zero_requested = [0, 0]
        # (host IP, protocol, port) -> count of pods using it.
        self.used_ports: dict[tuple[str, str, int], int] = {}

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.node.labels)

    def add_pod(self, pod: PodInfo) -> None:
        self.pods[pod.uid] = pod
        self.requested.add(pod.requests)
        cpu, mem = pod.non_zero_requests
        self.non_zero_requested[0] += cpu
        self.non_zero_requested[1] += mem
        for port in pod.host_ports:
            self.used_ports[port] = self.used_ports.get(port, 0) + 1

    def remove_pod(self, uid: str) -> PodInfo | None:
        pod = self.pods.pop(uid, None)
        if pod is None:
            return None
        r = pod.requests
        self.requested.milli_cpu -= r.milli_cpu
        self.requested.memory -= r.memory
        self.requested.ephemeral_storage -= r.ephemeral_storage
        for name, value in r.scalar.items():
            self.requested.scalar[name] = self.requested.scalar.get(name, 0) - value
        cpu, mem = pod.non_zero_requests
        self.non_zero_requested[0] -= cpu
        self.non_zero_requested[1] -= mem
        for port in pod.host_ports:
            left = self.used_ports.get(port, 0) - 1
            if left > 0:
                self.used_ports[port] = left
            else:
                self.used_ports.pop(port, None)
        return pod

    def set_node(self, node: pb.Node) -> None:
        self.node = node
        self.allocatable = Resource.from_proto(node.allocatable)

    def __repr__(self) -> str:
        return f"NodeInfo({self.name}, pods={len(self.pods)})"
