"""What the GangScheduling plugin reads: Kubernetes v1.36's Workload API.

- ``PODGROUP``: scheduling.k8s.io/v1alpha2 PodGroup (k8s.io/api
  scheduling/v1alpha2/types.go), alpha, served only with
  ``--runtime-config=scheduling.k8s.io/v1alpha2=true`` and the
  GenericWorkload feature gate; read ``if_served``. Of its spec only
  ``schedulingPolicy.gang.minCount`` matters here (a PodGroup with the
  ``basic`` policy is no gang).
- ``ALL_PODS``: every pod, as objects, since a pod joins a group with
  ``spec.schedulingGroup.podGroupName`` (core/v1 PodSchedulingGroup), which
  no label or field selector can select. Upstream's PodGroupManager counts
  the group's pods the scheduler knows (backend/cache/podgroupstate.go); the
  plugin server keeps nothing between requests, so it counts them here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from berth.framework.objects import ClusterObject, ObjectKind
from berth.framework.units import shorten
from berth.plugins.coscheduling.core import PodGroupError

if TYPE_CHECKING:
    from berth.framework.snapshot import Snapshot


__all__ = [
    "ALL_PODS",
    "PODGROUP",
    "WorkloadPodGroup",
    "lookup_workload_pod_group",
    "scheduling_group_of",
]

PODGROUP: Final = ObjectKind(
    "scheduling.k8s.io", "v1alpha2", "podgroups", "PodGroup", if_served=True
)
ALL_PODS: Final = ObjectKind("", "v1", "pods", "Pod")

_INT32_MAX: Final = 2**31 - 1


def scheduling_group_of(obj: ClusterObject) -> str:
    """A pod object's spec.schedulingGroup.podGroupName, "" when none."""
    spec = obj.data.get("spec")
    group = spec.get("schedulingGroup") if isinstance(spec, dict) else None
    name = group.get("podGroupName") if isinstance(group, dict) else None
    return name if isinstance(name, str) else ""


def _as_map(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, dict) else None


@dataclass(frozen=True, slots=True)
class WorkloadPodGroup:
    """The fields of a scheduling.k8s.io/v1alpha2 PodGroup the plugin uses."""

    namespace: str
    name: str
    # spec.schedulingPolicy.gang.minCount; None: no gang policy (basic).
    min_count: int | None

    @property
    def full_name(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_object(cls, obj: ClusterObject) -> WorkloadPodGroup:
        """PodGroupError names a field the API server would not have let
        through (an alpha API: refused rather than guessed)."""
        where = f"PodGroup {obj.namespace}/{obj.name}: spec.schedulingPolicy"
        spec = _as_map(obj.data.get("spec")) or {}
        policy = _as_map(spec.get("schedulingPolicy")) or {}
        gang = _as_map(policy.get("gang"))
        if gang is None:
            return cls(obj.namespace, obj.name, None)
        value = gang.get("minCount", 0)
        if isinstance(value, bool) or not isinstance(value, int):
            raise PodGroupError(f"{where}.gang.minCount: must be an integer, got {shorten(value)}")
        if not 0 <= value <= _INT32_MAX:
            raise PodGroupError(f"{where}.gang.minCount: {shorten(value)} is out of range")
        return cls(obj.namespace, obj.name, value)


def lookup_workload_pod_group(
    snapshot: Snapshot, namespace: str, name: str
) -> WorkloadPodGroup | None:
    """The PodGroup ``namespace/name`` (podGroupLister.Get), None when the
    snapshot does not hold it."""
    obj = snapshot.object(PODGROUP.group, PODGROUP.resource, namespace, name)
    return None if obj is None else WorkloadPodGroup.from_object(obj)
