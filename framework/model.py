"""The pods and nodes plugins read.

A ``PodInfo`` wraps the wire record (``berth.v1.Pod``) and adds what the
framework derives once per pod: effective resource requests and the "non-zero"
requests used for scoring, computed as kube-scheduler v1.36 does with its
default feature gates (pod-level ``spec.resources`` and in-place resize status
included; see "pod requests" below). A ``NodeInfo`` is a node with the pods on it and
their sums, like upstream's framework.NodeInfo (pkg/scheduler/framework/
types.go). Hot plugins read the same facts as numpy columns
(``berth.framework.snapshot.NodeColumns``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property

from berth.api.v1 import cluster_pb2 as pb

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


# -- pod requests -----------------------------------------------------------------
#
# Upstream computes a pod's requests with component-helpers' resource.PodRequests
# over v1.ResourceList maps, where a resource being *present* matters apart from
# its value (a missing CPU request takes a default, an explicit 0 does not). The
# general path below works on the same shape: a dict from resource name to the
# decoded integer (CPU in millicores) holding exactly the resources that are set.

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
HUGEPAGES_PREFIX = "hugepages-"

ResourceList = dict[str, int]


@dataclass(frozen=True, slots=True)
class PodResourcesOptions:
    """The options of upstream's resource.PodResourcesOptions that the
    scheduler sets. The defaults are Go's zero value: spec only, pod-level
    requests honoured, no defaults for missing requests."""

    # UseStatusResources: count what in-place resize allocated and applied
    # (max with the spec) for containers and restartable init containers.
    use_status_resources: bool = False
    # InPlacePodLevelResourcesVerticalScalingEnabled: the same for pod-level
    # requests (only together with use_status_resources).
    in_place_pod_level_resources_vertical_scaling: bool = False
    # SkipPodLevelResources: ignore spec.resources.
    skip_pod_level_resources: bool = False
    # NonMissingContainerRequests: a container (regular or init) that does
    # not set one of these resources counts this amount of it.
    non_missing_container_requests: tuple[tuple[str, int], ...] = ()


# pkg/scheduler/util/pod_resources.go: the defaults for a container without a
# CPU or memory request, as NonMissingContainerRequests.
NON_ZERO_DEFAULTS: tuple[tuple[str, int], ...] = (
    (CPU, DEFAULT_MILLI_CPU_REQUEST),
    (MEMORY, DEFAULT_MEMORY_REQUEST),
)

# What PodInfo.CalculateResource passes at v1.36 with the default feature
# gates: InPlacePodVerticalScaling (GA), PodLevelResources (beta, on) and
# InPlacePodLevelResourcesVerticalScaling (beta, on) enabled;
# DRANodeAllocatableResources (alpha) off.
CALCULATE_RESOURCE_OPTIONS = PodResourcesOptions(
    use_status_resources=True, in_place_pod_level_resources_vertical_scaling=True
)


def resource_list(r: pb.Resources) -> ResourceList:
    """A wire Resources as a ResourceList: CPU and memory when set (even to
    0), ephemeral storage when non-zero (the wire cannot tell 0 from unset,
    and no computation here depends on it), every scalar entry."""
    out: ResourceList = {}
    if r.HasField("milli_cpu"):
        out[CPU] = r.milli_cpu
    if r.HasField("memory"):
        out[MEMORY] = r.memory
    if r.ephemeral_storage:
        out[EPHEMERAL_STORAGE] = r.ephemeral_storage
    if r.scalar:
        out.update(r.scalar)
    return out


def _add_list(into: ResourceList, other: ResourceList) -> None:
    for name, value in other.items():
        into[name] = into.get(name, 0) + value


def _max_into(into: ResourceList, other: ResourceList) -> None:
    for name, value in other.items():
        if name not in into or value > into[name]:
            into[name] = value


def _max_of(*lists: ResourceList) -> ResourceList:
    out: ResourceList = {}
    for other in lists:
        _max_into(out, other)
    return out


def is_supported_pod_level_resource(name: str) -> bool:
    """resource.IsSupportedPodLevelResource: cpu, memory and hugepages-*."""
    return name in (CPU, MEMORY) or name.startswith(HUGEPAGES_PREFIX)


def is_pod_level_requests_set(pod: pb.Pod) -> bool:
    """resource.IsPodLevelRequestsSet: spec.resources.requests names a
    resource pod-level resources support."""
    if not pod.HasField("pod_level_requests"):
        return False
    return any(is_supported_pod_level_resource(n) for n in resource_list(pod.pod_level_requests))


def is_pod_resize_infeasible(pod: pb.Pod) -> bool:
    """resource.IsPodResizeInfeasible (decoded into the record)."""
    return pod.resize_infeasible


def determine_effective_requests(
    pod: pb.Pod, spec: ResourceList, actuated: ResourceList, allocated: ResourceList
) -> ResourceList:
    """resource.determineEffectiveRequests: per resource the largest of the
    spec, the applied (actuated) and the allocated requests; when the resize
    is infeasible the spec is left out, since it will not be admitted."""
    if is_pod_resize_infeasible(pod):
        return _max_of(actuated, allocated)
    return _max_of(spec, actuated, allocated)


def _effective_container_requests(
    pod: pb.Pod, c: pb.Container, opts: PodResourcesOptions, use_status: bool
) -> ResourceList:
    reqs = resource_list(c.requests)
    if use_status and c.HasField("actuated_requests"):
        reqs = determine_effective_requests(
            pod, reqs, resource_list(c.actuated_requests), resource_list(c.allocated_requests)
        )
    if opts.non_missing_container_requests:
        # applyNonMissing: only resources the container leaves unset.
        reqs = dict(reqs)
        for name, value in opts.non_missing_container_requests:
            if name not in reqs:
                reqs[name] = value
    return reqs


def aggregate_container_requests(pod: pb.Pod, opts: PodResourcesOptions) -> ResourceList:
    """resource.AggregateContainerRequests: the containers summed; each init
    container step (the init container plus the restartable init containers
    before it) raises the total to at least its size; restartable init
    containers (sidecars) also add to the total. With use_status_resources,
    containers and sidecars count their effective requests (plain init
    containers never do)."""
    return _aggregate(
        (
            _effective_container_requests(pod, c, opts, opts.use_status_resources)
            for c in pod.containers
        ),
        (
            (
                _effective_container_requests(
                    pod, c, opts, opts.use_status_resources and c.restartable
                ),
                c.restartable,
            )
            for c in pod.init_containers
        ),
    )


def aggregate_container_limits(pod: pb.Pod) -> ResourceList:
    """resource.AggregateContainerLimits without status: the same formula
    over the containers' limits."""
    return _aggregate(
        (resource_list(c.limits) for c in pod.containers),
        ((resource_list(c.limits), c.restartable) for c in pod.init_containers),
    )


def _aggregate(
    containers: Iterable[ResourceList], init_containers: Iterable[tuple[ResourceList, bool]]
) -> ResourceList:
    """The sidecar formula (KEP-753) shared by AggregateContainerRequests and
    AggregateContainerLimits; init containers as (list, restartable)."""
    total: ResourceList = {}
    for c in containers:
        _add_list(total, c)
    sidecars: ResourceList = {}
    init_max: ResourceList = {}
    for c, restartable in init_containers:
        if restartable:
            _add_list(total, c)
            _add_list(sidecars, c)
            step = sidecars
        else:
            step = dict(c)
            _add_list(step, sidecars)
        _max_into(init_max, step)
    _max_into(total, init_max)
    return total


def pod_request_list(pod: pb.Pod, opts: PodResourcesOptions) -> ResourceList:
    """resource.PodRequests as a ResourceList: the containers'
    aggregate; then, unless skipped, each supported resource that
    spec.resources.requests names replaces it (with in-place pod-level resize,
    by its effective value: max with status.resources.requests and
    status.allocatedResources, or only those two when the resize is
    infeasible; a resource neither of them names then counts 0); then
    overhead added."""
    reqs = aggregate_container_requests(pod, opts)
    if not opts.skip_pod_level_resources and is_pod_level_requests_set(pod):
        spec = resource_list(pod.pod_level_requests)
        effective: ResourceList | None = None
        if (
            opts.in_place_pod_level_resources_vertical_scaling
            and opts.use_status_resources
            and pod.HasField("pod_level_actuated_requests")
        ):
            effective = determine_effective_requests(
                pod,
                spec,
                resource_list(pod.pod_level_actuated_requests),
                resource_list(pod.pod_level_allocated_requests),
            )
        for name, value in spec.items():
            if is_supported_pod_level_resource(name):
                reqs[name] = value if effective is None else effective.get(name, 0)
    if pod.HasField("overhead"):
        _add_list(reqs, resource_list(pod.overhead))
    return reqs


def _resource_of(reqs: ResourceList) -> Resource:
    scalar = {n: v for n, v in reqs.items() if n not in (CPU, MEMORY, EPHEMERAL_STORAGE)}
    return Resource(
        reqs.get(CPU, 0), reqs.get(MEMORY, 0), reqs.get(EPHEMERAL_STORAGE, 0), 0, scalar
    )


def _is_plain(pod: pb.Pod, opts: PodResourcesOptions) -> bool:
    """Is the pod's request just its containers' sum under ``opts``: no init
    containers, no overhead, no pod-level requests in play and no status to
    count? (The common pod, and the hot path.)"""
    if pod.init_containers or pod.HasField("overhead"):
        return False
    if not opts.skip_pod_level_resources and pod.HasField("pod_level_requests"):
        return False
    if opts.use_status_resources:
        for c in pod.containers:
            if c.HasField("actuated_requests"):
                return False
    return True


def _sum_containers(pod: pb.Pod, non_zero: bool) -> Resource:
    """pod_requests for a plain pod (see _is_plain), with or without the
    non-zero defaults: the same sums with plain integers."""
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


def _sum_containers_with_non_zero(pod: pb.Pod) -> PodResource:
    """calculate_resource for a plain pod in one pass: the sums, and the CPU
    and memory sums with the defaults for containers that set none."""
    cpu = mem = eph = 0
    non0_cpu = non0_mem = 0
    scalar: dict[str, int] = {}
    for c in pod.containers:
        r = c.requests
        if r.HasField("milli_cpu"):
            cpu += r.milli_cpu
            non0_cpu += r.milli_cpu
        else:
            non0_cpu += DEFAULT_MILLI_CPU_REQUEST
        if r.HasField("memory"):
            mem += r.memory
            non0_mem += r.memory
        else:
            non0_mem += DEFAULT_MEMORY_REQUEST
        eph += r.ephemeral_storage
        if r.scalar:
            for name, value in r.scalar.items():
                scalar[name] = scalar.get(name, 0) + value
    return PodResource(Resource(cpu, mem, eph, 0, scalar), non0_cpu, non0_mem, plain=True)


def pod_requests(pod: pb.Pod, opts: PodResourcesOptions | None = None) -> Resource:
    """Effective requests of a pod, upstream's resource.PodRequests
    (k8s.io/component-helpers/resource/helpers.go) as a Resource; see
    pod_request_list. Without ``opts``, Go's zero options: the spec with
    pod-level requests, overhead included."""
    opts = PodResourcesOptions() if opts is None else opts
    if _is_plain(pod, opts):
        nm = opts.non_missing_container_requests
        if not nm:
            return _sum_containers(pod, non_zero=False)
        if nm == NON_ZERO_DEFAULTS:
            return _sum_containers(pod, non_zero=True)
    return _resource_of(pod_request_list(pod, opts))


@dataclass(frozen=True, slots=True)
class PodResource:
    """Upstream's fwk.PodResource: what a pod adds to its node's NodeInfo."""

    resource: Resource
    non0_cpu: int
    non0_mem: int
    # The pod is plain under CALCULATE_RESOURCE_OPTIONS (see _is_plain): no
    # init containers, overhead, pod-level requests or resize status, so its
    # requests under any options are ``resource`` (no defaults) or
    # ``resource`` with ``non0_cpu``/``non0_mem`` (NON_ZERO_DEFAULTS).
    plain: bool = field(default=False, compare=False)


def non_missing_container_requests(
    requests: ResourceList, pod_level_requests_set: bool
) -> tuple[tuple[str, int], ...]:
    """types.go, getNonMissingContainerRequests: both defaults for a pod
    without pod-level requests; with them, only for CPU or memory that
    neither the pod level nor any container (nor overhead) sets."""
    if not pod_level_requests_set:
        return NON_ZERO_DEFAULTS
    return tuple((name, value) for name, value in NON_ZERO_DEFAULTS if name not in requests)


def calculate_resource(pod: pb.Pod) -> PodResource:
    """types.go, PodInfo.CalculateResource with v1.36's default gates:
    requests with status resources and pod-level requests; the non-zero CPU
    and memory from the same computation with getNonMissingContainerRequests'
    defaults for containers that set none."""
    opts = CALCULATE_RESOURCE_OPTIONS
    if _is_plain(pod, opts):
        # No pod-level requests: the defaults are both, whatever is set.
        return _sum_containers_with_non_zero(pod)
    reqs = pod_request_list(pod, opts)
    missing = non_missing_container_requests(reqs, is_pod_level_requests_set(pod))
    non0 = reqs
    if missing:
        non0 = pod_request_list(pod, replace(opts, non_missing_container_requests=missing))
    return PodResource(_resource_of(reqs), non0.get(CPU, 0), non0.get(MEMORY, 0))


def has_status_resources(pod: pb.Pod) -> bool:
    """Does the record carry any in-place resize status that
    use_status_resources would read?"""
    if pod.HasField("pod_level_actuated_requests"):
        return True
    return any(c.HasField("actuated_requests") for c in pod.containers) or any(
        c.restartable and c.HasField("actuated_requests") for c in pod.init_containers
    )


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
    def resource(self) -> PodResource:
        """What the pod adds to its node (PodInfo.CalculateResource)."""
        return calculate_resource(self.proto)

    @property
    def requests(self) -> Resource:
        """The pod's requests as its node counts them: pod-level requests and
        in-place resize status included (PodInfo.CalculateResource). Shared:
        do not modify."""
        return self.resource.resource

    @property
    def non_zero_requests(self) -> tuple[int, int]:
        """(milli CPU, memory) with upstream's defaults for missing requests
        (CalculateResource's Non0CPU, Non0Mem)."""
        r = self.resource
        return r.non0_cpu, r.non0_mem

    @cached_property
    def spec_requests(self) -> Resource:
        """The requests of the spec alone, as NodeResourcesFit's PreFilter
        computes them for the pod being scheduled (fit.go,
        computePodResourceRequest: PodRequests with pod-level requests and no
        status). The same as ``requests`` unless the record carries resize
        status."""
        if self.resource.plain or not has_status_resources(self.proto):
            return self.requests
        return pod_requests(self.proto)

    def requests_with(self, opts: PodResourcesOptions) -> Resource:
        """PodRequests under ``opts``, cached per options. Shared: do not
        modify."""
        if opts == CALCULATE_RESOURCE_OPTIONS:
            return self.requests
        cache = self._requests_by_options
        r = cache.get(opts)
        if r is None:
            r = cache[opts] = pod_requests(self.proto, opts)
        return r

    @cached_property
    def _requests_by_options(self) -> dict[PodResourcesOptions, Resource]:
        return {}

    @cached_property
    def has_pod_affinity(self) -> bool:
        """Does the pod set pod affinity or anti-affinity (types.go,
        podWithAffinity)? Such pods are listed in NodeInfo.pods_with_affinity."""
        a = self.proto.affinity
        return self.proto.HasField("affinity") and (
            a.HasField("pod_affinity") or a.HasField("pod_anti_affinity")
        )

    @cached_property
    def has_required_anti_affinity(self) -> bool:
        """Does the pod have required anti-affinity terms (types.go,
        podWithRequiredAntiAffinity)?"""
        a = self.proto.affinity
        return (
            self.proto.HasField("affinity")
            and a.HasField("pod_anti_affinity")
            and len(a.pod_anti_affinity.required) > 0
        )

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

    def placed(self, proto: pb.Pod) -> PodInfo:
        """A PodInfo of ``proto``, a copy of this pod's record that differs
        only in where the pod is (node, nomination), its annotations or its
        assumed mark: what was worked out of the spec (requests, affinity,
        host ports) is shared, not worked out again, as upstream's assume
        keeps the cycle's PodInfo (schedule_one.go assume)."""
        info = PodInfo(proto)
        info.__dict__.update(self.__dict__)
        return info

    def __repr__(self) -> str:
        return f"PodInfo({self.key})"


# NodeInfo.lowest_priority not counted yet: below every int64 priority, so no
# comparison mistakes it for one.
_UNKNOWN: int = -(2**63) - 1


class NodeInfo:
    """A node, the pods on it and their sums (upstream's framework.NodeInfo)."""

    __slots__ = (
        "_lowest_priority",
        "allocatable",
        "index",
        "node",
        "non_zero_requested",
        "owner",
        "pods",
        "pods_with_affinity",
        "pods_with_required_anti_affinity",
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
        # The pods with pod (anti-)affinity, and those with required
        # anti-affinity (upstream's NodeInfo.PodsWithAffinity,
        # PodsWithRequiredAntiAffinity), by uid.
        self.pods_with_affinity: dict[str, PodInfo] = {}
        self.pods_with_required_anti_affinity: dict[str, PodInfo] = {}
        self.requested = Resource()
        # (milli CPU, memory) summed with non-zero defaults.
        self.non_zero_requested = [0, 0]
        # (host IP, protocol, port) -> count of pods using it.
        self.used_ports: dict[tuple[str, str, int], int] = {}
        # lowest_priority's answer while it holds (_UNKNOWN: to be counted).
        self._lowest_priority: int | None = None

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def lowest_priority(self) -> int | None:
        """The lowest priority among the node's pods (None without pods): a
        preemptor of this priority or below can evict none of them under
        upstream's rule (preemption.go isPreemptionAllowed: a lower priority).
        Counted when first asked and kept while pods are only added; removing
        the pod that held it counts again at the next question."""
        lowest = self._lowest_priority
        if lowest == _UNKNOWN:
            lowest = min((p.proto.priority for p in self.pods.values()), default=None)
            self._lowest_priority = lowest
        return lowest

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.node.labels)

    def add_pod(self, pod: PodInfo) -> None:
        self.pods[pod.uid] = pod
        lowest = self._lowest_priority
        if lowest != _UNKNOWN:
            priority = pod.proto.priority
            if lowest is None or priority < lowest:
                self._lowest_priority = priority
        if pod.has_pod_affinity:
            self.pods_with_affinity[pod.uid] = pod
            if pod.has_required_anti_affinity:
                self.pods_with_required_anti_affinity[pod.uid] = pod
        self.requested.add(pod.requests)
        cpu, mem = pod.non_zero_requests
        self.non_zero_requested[0] += cpu
        self.non_zero_requested[1] += mem
        for port in pod.host_ports:
            self.used_ports[port] = self.used_ports.get(port, 0) + 1

    def move_last(self, uid: str) -> bool:
        """Moves the pod to the end of the node's pods, as removing and
        adding it back would; False if the node does not hold it."""
        pod = self.pods.pop(uid, None)
        if pod is None:
            return False
        self.pods[uid] = pod
        if uid in self.pods_with_affinity:
            self.pods_with_affinity[uid] = self.pods_with_affinity.pop(uid)
        if uid in self.pods_with_required_anti_affinity:
            self.pods_with_required_anti_affinity[uid] = self.pods_with_required_anti_affinity.pop(
                uid
            )
        return True

    def remove_pod(self, uid: str) -> PodInfo | None:
        pod = self.pods.pop(uid, None)
        if pod is None:
            return None
        if self._lowest_priority == pod.proto.priority:
            self._lowest_priority = _UNKNOWN
        if pod.has_pod_affinity:
            self.pods_with_affinity.pop(uid, None)
            self.pods_with_required_anti_affinity.pop(uid, None)
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

    def clone(self) -> NodeInfo:
        """A private copy to add pods to or remove pods from for a what-if
        evaluation (upstream's NodeInfo.Snapshot, used by
        RunFilterPluginsWithNominatedPods and preemption's dry runs). The
        node record and the PodInfos are shared (both are immutable); the
        pod sets and the sums are copied. The copy belongs to no snapshot:
        ``owner`` None, ``index`` -1, so plugins' per-snapshot caches and
        columns never see it; per-node plugin forms read it directly."""
        other = NodeInfo.__new__(NodeInfo)
        other.node = self.node
        other.index = -1
        other.owner = None
        other.allocatable = self.allocatable.copy()
        other.pods = dict(self.pods)
        other.pods_with_affinity = dict(self.pods_with_affinity)
        other.pods_with_required_anti_affinity = dict(self.pods_with_required_anti_affinity)
        other.requested = self.requested.copy()
        other.non_zero_requested = list(self.non_zero_requested)
        other.used_ports = dict(self.used_ports)
        other._lowest_priority = self._lowest_priority
        return other

    def __repr__(self) -> str:
        return f"NodeInfo({self.name}, pods={len(self.pods)})"
