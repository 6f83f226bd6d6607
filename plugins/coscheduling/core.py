"""What Coscheduling knows of pod groups, read from the snapshot.

scheduler-plugins keeps a PodGroupManager (pkg/coscheduling/core/core.go)
with in-memory caches: the pods assigned per group (added at Permit, removed
at Unreserve and by the pod informer), groups that passed the resource check,
groups that failed recently. Berth's plugin server keeps nothing between
requests, so every answer here is derived from the request's snapshot:

- the PodGroup: an object of ``PODGROUP`` (the caller watches the CRD);
- the group's pods: the pod objects the caller ships for the label-selected
  read ``GROUPED_PODS`` (every pod carrying the label, pending or bound);
- which of them are assigned (upstream's assignedPodsByPG): those that occupy
  a node in the snapshot, i.e. bound or assumed by the caller (a pod waiting
  at Permit is assumed), or whose object is already bound.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from berth.framework.cycle_state import CycleState
from berth.framework.model import PodInfo
from berth.framework.objects import ClusterObject, ObjectKind
from berth.framework.units import QuantityError, parse_quantity, shorten

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from berth.framework.snapshot import Snapshot


__all__ = [
    "GROUPED_PODS",
    "PODGROUP",
    "POD_GROUP_LABEL",
    "Member",
    "PodGroup",
    "PodGroupError",
    "format_gap",
    "group_members",
    "group_name",
    "label_group",
    "lookup_pod_group",
    "resource_gap",
    "signal_waiting",
]

# apis/scheduling/v1alpha1/types.go: PodGroupLabel.
POD_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
PODGROUP: Final = ObjectKind("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")
# Every pod that belongs to a group (the label exists), as objects: upstream's
# podLister.Pods(ns).List(selector) in PreFilter.
GROUPED_PODS: Final = ObjectKind("", "v1", "pods", "Pod", label_selector=POD_GROUP_LABEL)

_TERMINAL = frozenset({"Succeeded", "Failed"})
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICRO = dt.timedelta(microseconds=1)


class PodGroupError(ValueError):
    """A PodGroup object Berth cannot read (names the object and field)."""


def group_name(pod: PodInfo) -> str:
    """The pod's group (util.GetPodGroupLabel), "" when it has none."""
    return pod.proto.labels.get(POD_GROUP_LABEL, "")


# apis/scheduling/v1alpha1/types.go: minMember and scheduleTimeoutSeconds are int32.
_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1
# More minResources entries than any cluster has resource names: refused, so a
# PodGroup costs each PreFilter a bounded number of columns.
MAX_MIN_RESOURCES: Final = 64


def _int_field(obj: ClusterObject, spec: Mapping[str, Any], field: str) -> int | None:
    value = spec.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise PodGroupError(
            f"PodGroup {obj.namespace}/{obj.name}: spec.{field}: must be an integer, "
            f"got {shorten(value)}"
        )
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise PodGroupError(
            f"PodGroup {obj.namespace}/{obj.name}: spec.{field}: {shorten(value)} is "
            "out of range (an int32)"
        )
    return value


def _creation_micros(obj: ClusterObject) -> int | None:
    text = obj.metadata.get("creationTimestamp")
    if not isinstance(text, str) or not text:
        return None
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return (when - _EPOCH) // _MICRO


def _quantity_text(value: object) -> str:
    """A minResources value as text: strings and numbers (int-or-string in
    the CRD) as written; anything else as its type, which parse_quantity
    refuses with that name rather than the whole value."""
    if isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool)):
        return str(value)
    return f"<{type(value).__name__}>"


@dataclass(frozen=True, slots=True)
class PodGroup:
    """The fields of a scheduling.x-k8s.io/v1alpha1 PodGroup Coscheduling uses."""

    namespace: str
    name: str
    # spec.minMember (omitempty upstream: absent is 0, no quorum needed).
    min_member: int
    # spec.scheduleTimeoutSeconds, None when unset.
    schedule_timeout_seconds: int | None
    # spec.minResources: resource name to quantity text.
    min_resources: Mapping[str, str]
    # metadata.creationTimestamp, None when absent.
    creation_unix_micros: int | None

    @property
    def full_name(self) -> str:
        """<namespace>/<name> (util.GetPodGroupFullName)."""
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_object(cls, obj: ClusterObject) -> PodGroup:
        spec_value = obj.data.get("spec")
        spec: Mapping[str, Any] = spec_value if isinstance(spec_value, dict) else {}
        min_member = _int_field(obj, spec, "minMember") or 0
        timeout = _int_field(obj, spec, "scheduleTimeoutSeconds")
        raw_resources = spec.get("minResources")
        resources: dict[str, str] = {}
        if raw_resources is not None:
            if not isinstance(raw_resources, dict):
                raise PodGroupError(
                    f"PodGroup {obj.namespace}/{obj.name}: spec.minResources: must be a "
                    f"mapping of resource names to quantities, got {shorten(raw_resources)}"
                )
            if len(raw_resources) > MAX_MIN_RESOURCES:
                raise PodGroupError(
                    f"PodGroup {obj.namespace}/{obj.name}: spec.minResources: "
                    f"{len(raw_resources)} resources, at most {MAX_MIN_RESOURCES} are read"
                )
            resources = {str(k): _quantity_text(v) for k, v in raw_resources.items()}
        return cls(obj.namespace, obj.name, min_member, timeout, resources, _creation_micros(obj))


def lookup_pod_group(snapshot: Snapshot, namespace: str, name: str) -> PodGroup | None:
    """The PodGroup ``namespace/name`` (PodGroupManager.GetPodGroup), None
    when the snapshot does not hold it."""
    obj = snapshot.object(PODGROUP.group, PODGROUP.resource, namespace, name)
    return None if obj is None else PodGroup.from_object(obj)


@dataclass(frozen=True, slots=True)
class Member:
    """One pod of a group, as its object and the snapshot show it."""

    uid: str
    name: str
    # spec.schedulingGates is not empty.
    gated: bool
    # spec.nodeName is set: bound.
    bound: bool
    # Bound, or assumed on a node by the caller (waiting at Permit or binding).
    assigned: bool


def _member(obj: ClusterObject, snapshot: Snapshot) -> Member | None:
    data = obj.data
    status = data.get("status")
    phase = status.get("phase") if isinstance(status, dict) else None
    if phase in _TERMINAL:
        # The scheduler's pod informer drops finished pods; so does this.
        return None
    spec_value = data.get("spec")
    spec: Mapping[str, Any] = spec_value if isinstance(spec_value, dict) else {}
    uid = str(obj.metadata.get("uid", ""))
    bound = bool(spec.get("nodeName"))
    placed = snapshot.pods.get(uid) if uid else None
    assigned = bound or (placed is not None and bool(placed.node_name))
    return Member(uid, obj.name, bool(spec.get("schedulingGates")), bound, assigned)


def signal_waiting(
    state: CycleState, members: Iterable[Member], allow: bool, message: str = ""
) -> int:
    """Asks the caller to allow (or reject, with ``message``) the members
    that may wait at Permit: assumed on a node, not bound (the caller ignores
    pods that do not wait). upstream: coscheduling.go Permit and Unreserve,
    gangscheduling.go Permit, which walk the framework's waiting pods of the
    group. Returns how many were named."""
    n = 0
    for m in members:
        if m.assigned and not m.bound and m.uid:
            state.signal_waiting_pod(m.uid, allow, message)
            n += 1
    return n


def label_group(obj: ClusterObject) -> str:
    """A pod object's group label (util.GetPodGroupLabel), "" when none."""
    return obj.labels.get(POD_GROUP_LABEL, "")


def group_members(
    snapshot: Snapshot,
    namespace: str,
    group: str,
    pod: PodInfo | None = None,
    *,
    group_of: Callable[[ClusterObject], str] = label_group,
) -> list[Member]:
    """The live pods of ``namespace/group``, the pod objects for which
    ``group_of`` names ``group`` (Coscheduling's label by default; the
    GangScheduling plugin passes the pod's spec.schedulingGroup). With ``pod``
    (the pod being scheduled), it counts even when its object has not
    reached the caller's watch yet. Costs one pass over the pod objects."""
    out: list[Member] = []
    seen_self = pod is None
    for (ns, _name), obj in snapshot.objects(GROUPED_PODS.group, GROUPED_PODS.resource).items():
        if ns != namespace or group_of(obj) != group:
            continue
        m = _member(obj, snapshot)
        if m is None:
            continue
        if pod is not None and (m.uid == pod.uid or m.name == pod.name):
            seen_self = True
        out.append(m)
    if not seen_self and pod is not None:
        out.append(Member(pod.uid, pod.name, gated=False, bound=False, assigned=False))
    return out


# -- minResources (core.go CheckClusterResource, getNodeResource) --------------

_CPU = "cpu"
_MEMORY = "memory"
_EPHEMERAL = "ephemeral-storage"
_PODS = "pods"


def _amount(name: str, text: str) -> int:
    q = parse_quantity(text)
    return q.milli() if name == _CPU else q.value()


def _free_column(
    snapshot: Snapshot, name: str, order: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    import numpy as np

    c = snapshot.columns
    free: npt.NDArray[np.int64]
    if name == _CPU:
        free = c.alloc_cpu[order] - c.req_cpu[order]
    elif name == _MEMORY:
        free = c.alloc_mem[order] - c.req_mem[order]
    elif name == _EPHEMERAL:
        free = c.alloc_eph[order] - c.req_eph[order]
    elif name == _PODS:
        free = c.alloc_pods[order] - c.pod_count[order]
    elif name in c.scalar:
        alloc, req = c.scalar[name]
        free = alloc[order] - req[order]
    else:
        free = np.zeros(len(order), dtype=np.int64)
    return free


def _pod_amount(pod: PodInfo, name: str) -> int:
    r = pod.requests
    if name == _CPU:
        return r.milli_cpu
    if name == _MEMORY:
        return r.memory
    if name == _EPHEMERAL:
        return r.ephemeral_storage
    if name == _PODS:
        return 1
    return r.scalar.get(name, 0)


def resource_gap(snapshot: Snapshot, pg: PodGroup, group_uids: Iterable[str]) -> dict[str, int]:
    """What the cluster lacks for the group's minResources plus minMember
    pods, empty when it has room (core.go CheckClusterResource). Each node
    counts what is free on it with the group's own pods taken off
    (getNodeResource); walking the nodes, a resource is satisfied once the
    running sum of what they have free reaches the request, as upstream
    subtracts node after node; what is left is the request minus what all
    nodes have free. PodGroupError names a bad quantity."""
    request: dict[str, int] = {}
    for name, text in pg.min_resources.items():
        try:
            request[name] = _amount(name, text)
        except QuantityError as exc:
            raise PodGroupError(
                f"PodGroup {pg.full_name}: spec.minResources.{name}: {exc}"
            ) from exc
    request[_PODS] = pg.min_member
    order = snapshot.node_order()
    position = {int(slot): k for k, slot in enumerate(order)}
    own = [p for uid in group_uids if (p := snapshot.pods.get(uid)) is not None and p.node_name]
    gap: dict[str, int] = {}
    for name, want in sorted(request.items()):
        free = _free_column(snapshot, name, order)
        for p in own:
            ni = snapshot.nodes.get(p.node_name)
            if ni is not None and ni.index in position:
                free[position[ni.index]] += _pod_amount(p, name)
        if len(free) == 0:
            gap[name] = want
            continue
        running = free.cumsum()
        if int(running.max()) < want:
            gap[name] = want - int(running[-1])
    return gap


def format_gap(gap: Mapping[str, int]) -> str:
    """``resource gap: map[cpu:1500m pods:1]``, names sorted as Go prints a map."""
    parts = []
    for name in sorted(gap):
        value = gap[name]
        if name == _CPU:
            text = str(value // 1000) if value % 1000 == 0 else f"{value}m"
        else:
            text = str(value)
        parts.append(f"{name}:{text}")
    return f"resource gap: map[{' '.join(parts)}]"
