"""Cluster events and queueing hints: which changes may make a rejected pod
schedulable (upstream's EnqueueExtensions).

Ports staging/src/k8s.io/kube-scheduler/framework/types.go (ActionType,
EventResource, ClusterEvent, ClusterEventWithHint, QueueingHint,
QueueingHintFn) and pkg/scheduler/framework/types.go, events.go
(MatchClusterEvents, UnrollWildCardResource, PodSchedulingPropertiesChange,
NodeSchedulingPropertiesChange).

A plugin that can reject a pod (PreEnqueue, PreFilter, Filter, Reserve,
Permit) declares with ``Plugin.events_to_register`` the cluster events that
may undo its rejection, each optionally with a hint: a function of the pod it
rejected and the event's old and new object that answers ``Queue`` (the event
may help: retry the pod) or ``QueueSkip`` (it cannot). The caller keeps the
rejected pods and, on each event, moves only those a rejecting plugin
registered the event for and whose hint (if any) answers Queue. A plugin that
does not override ``events_to_register`` is moved by every event, as upstream
treats a plugin without EnqueueExtensions.

What a hint receives, by the event's resource:

- ``Node``: a ``NodeInfo`` of the node alone (no pods), as upstream hands the
  *v1.Node;
- ``Pod`` (``AssignedPod``, ``UnschedulablePod`` as the caller sends them):
  a ``PodInfo``;
- any other resource: a ``ClusterObject``.

``old`` is None for an Add, ``new`` is None for a Delete. A hint must be
cheap and pure: it runs on a stateless replica with no cluster state, so it
may look only at the pod and the two objects. A hint that raises is taken as
Queue, as upstream takes an error (scheduling_queue.go isPodWorthRequeuing).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from berth.api.v1 import cluster_pb2 as cpb
from berth.framework.model import CALCULATE_RESOURCE_OPTIONS, pod_request_list

if TYPE_CHECKING:
    from berth.framework.model import PodInfo
    from berth.framework.objects import ObjectKind


class ActionType(enum.IntFlag):
    """One kind of change to an object; flags combine (upstream's
    framework.ActionType, the same bit values).

    The UPDATE_NODE_* and UPDATE_POD_* flags are the parts of a Node or Pod
    update the caller tells apart (NodeSchedulingPropertiesChange,
    PodSchedulingPropertiesChange); a plugin that registers only the part it
    cares about is asked less often. UPDATE is every update."""

    NONE = 0
    ADD = 1 << 0
    DELETE = 1 << 1
    UPDATE_NODE_ALLOCATABLE = 1 << 2
    UPDATE_NODE_LABEL = 1 << 3
    # A change of the node's taints, or spec.unschedulable turned off.
    UPDATE_NODE_TAINT = 1 << 4
    UPDATE_NODE_CONDITION = 1 << 5
    UPDATE_NODE_ANNOTATION = 1 << 6
    UPDATE_NODE_DECLARED_FEATURE = 1 << 7
    UPDATE_POD_LABEL = 1 << 8
    # A request of the pod lowered or removed.
    UPDATE_POD_SCALE_DOWN = 1 << 9
    # A toleration added (the API allows no other change of tolerations).
    UPDATE_POD_TOLERATION = 1 << 10
    # The last scheduling gate removed.
    UPDATE_POD_SCHEDULING_GATES_ELIMINATED = 1 << 11
    # The list of ResourceClaims generated for the pod changed.
    UPDATE_POD_GENERATED_RESOURCE_CLAIM = 1 << 12
    ALL = (1 << 13) - 1
    UPDATE = ALL & ~(ADD | DELETE)

    @property
    def label(self) -> str:
        """Upstream's ActionType.String(): a single flag's name, "All",
        "Update", or "" for any other combination."""
        return _ACTION_LABELS.get(int(self), "")

    @classmethod
    def from_label(cls, label: str) -> ActionType:
        """The flag a label names (the inverse of ``label``); ValueError for
        an unknown one."""
        for value, name in _ACTION_LABELS.items():
            if name == label:
                return cls(value)
        raise ValueError(f"unknown action type {label!r}")


_ACTION_LABELS: Final[dict[int, str]] = {
    ActionType.ADD.value: "Add",
    ActionType.DELETE.value: "Delete",
    ActionType.UPDATE_NODE_ALLOCATABLE.value: "UpdateNodeAllocatable",
    ActionType.UPDATE_NODE_LABEL.value: "UpdateNodeLabel",
    ActionType.UPDATE_NODE_TAINT.value: "UpdateNodeTaint",
    ActionType.UPDATE_NODE_CONDITION.value: "UpdateNodeCondition",
    ActionType.UPDATE_NODE_ANNOTATION.value: "UpdateNodeAnnotation",
    ActionType.UPDATE_NODE_DECLARED_FEATURE.value: "UpdateNodeDeclaredFeature",
    ActionType.UPDATE_POD_LABEL.value: "UpdatePodLabel",
    ActionType.UPDATE_POD_SCALE_DOWN.value: "UpdatePodScaleDown",
    ActionType.UPDATE_POD_TOLERATION.value: "UpdatePodToleration",
    ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED.value: "UpdatePodSchedulingGatesEliminated",
    ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM.value: "UpdatePodGeneratedResourceClaim",
    ActionType.ALL.value: "All",
    ActionType.UPDATE.value: "Update",
}


class EventResource:
    """The resources events are about, spelled as upstream spells its
    EventResource (kube-scheduler framework/types.go). A kind without a
    constant here (a CRD a plugin reads) is named ``resource.version.group``,
    upstream's convention for dynamic informers (``event_resource``)."""

    POD: Final = "Pod"
    NODE: Final = "Node"
    PERSISTENT_VOLUME: Final = "PersistentVolume"
    PERSISTENT_VOLUME_CLAIM: Final = "PersistentVolumeClaim"
    CSI_NODE: Final = "storage.k8s.io/CSINode"
    CSI_DRIVER: Final = "storage.k8s.io/CSIDriver"
    VOLUME_ATTACHMENT: Final = "storage.k8s.io/VolumeAttachment"
    CSI_STORAGE_CAPACITY: Final = "storage.k8s.io/CSIStorageCapacity"
    STORAGE_CLASS: Final = "storage.k8s.io/StorageClass"
    RESOURCE_CLAIM: Final = "resource.k8s.io/ResourceClaim"
    RESOURCE_SLICE: Final = "resource.k8s.io/ResourceSlice"
    DEVICE_CLASS: Final = "resource.k8s.io/DeviceClass"
    POD_GROUP: Final = "scheduling.k8s.io/PodGroup"
    # Every resource; with ActionType.ALL, the wildcard event.
    WILDCARD: Final = "*"
    # The caller's incoming pod events: a pod bound to a node, and a pod not
    # bound yet. A plugin registers POD, which matches both (upstream keeps
    # these two internal, pkg/scheduler/framework/types.go).
    ASSIGNED_POD: Final = "AssignedPod"
    UNSCHEDULABLE_POD: Final = "UnschedulablePod"


# (group, resource) of the kinds upstream names, to their EventResource.
_KNOWN_RESOURCES: Final[dict[tuple[str, str], str]] = {
    ("", "pods"): EventResource.POD,
    ("", "nodes"): EventResource.NODE,
    ("", "persistentvolumes"): EventResource.PERSISTENT_VOLUME,
    ("", "persistentvolumeclaims"): EventResource.PERSISTENT_VOLUME_CLAIM,
    ("storage.k8s.io", "csinodes"): EventResource.CSI_NODE,
    ("storage.k8s.io", "csidrivers"): EventResource.CSI_DRIVER,
    ("storage.k8s.io", "volumeattachments"): EventResource.VOLUME_ATTACHMENT,
    ("storage.k8s.io", "csistoragecapacities"): EventResource.CSI_STORAGE_CAPACITY,
    ("storage.k8s.io", "storageclasses"): EventResource.STORAGE_CLASS,
    ("resource.k8s.io", "resourceclaims"): EventResource.RESOURCE_CLAIM,
    ("resource.k8s.io", "resourceslices"): EventResource.RESOURCE_SLICE,
    ("resource.k8s.io", "deviceclasses"): EventResource.DEVICE_CLASS,
    ("scheduling.k8s.io", "podgroups"): EventResource.POD_GROUP,
}


def event_resource(group: str, version: str, resource: str) -> str:
    """The EventResource of a kind: upstream's name for the kinds it knows,
    else ``resource.version.group`` (``resource.version`` in the core group),
    the name upstream gives a kind it watches with a dynamic informer
    (eventhandlers.go, addAllEventHandlers; e.g. scheduler-plugins'
    Coscheduling registers ``podgroups.v1alpha1.scheduling.x-k8s.io``)."""
    known = _KNOWN_RESOURCES.get((group, resource))
    if known is not None:
        return known
    return f"{resource}.{version}.{group}" if group else f"{resource}.{version}"


def kind_event_resource(kind: ObjectKind) -> str:
    """``event_resource`` of an ObjectKind a plugin reads."""
    return event_resource(kind.group, kind.version, kind.resource)


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """A change to a resource: its EventResource and the ActionType flags
    (upstream's ClusterEvent). ``custom_label`` names special events in logs
    and metrics (UnschedulableTimeout, ForceActivate)."""

    resource: str
    action_type: ActionType
    custom_label: str = ""

    @property
    def label(self) -> str:
        """Upstream's ClusterEvent.Label(): the custom label, else resource
        and action (``NodeAdd``, ``NodeUpdateNodeLabel``, ``AssignedPodDelete``),
        the event label of scheduler_queue_incoming_pods_total."""
        if self.custom_label:
            return self.custom_label
        return f"{self.resource}{self.action_type.label}"

    @property
    def is_wildcard(self) -> bool:
        """ClusterEventIsWildCard: every resource, every action."""
        return self.resource == EventResource.WILDCARD and self.action_type == ActionType.ALL

    def matches(self, incoming: ClusterEvent) -> bool:
        """Whether ``incoming`` is this registered event or a more specific
        one (MatchClusterEvents): a registration of Node/Update matches an
        incoming Node/UpdateNodeLabel, not the other way round; a POD
        registration matches AssignedPod and UnschedulablePod; the
        wildcard registration matches everything, and an incoming wildcard
        only the wildcard registration."""
        if self.is_wildcard:
            return True
        return (
            _match_resources(self.resource, incoming.resource)
            and bool(self.action_type & incoming.action_type)
            and incoming.action_type <= self.action_type
        )


def _match_resources(registered: str, incoming: str) -> bool:
    return (
        registered == EventResource.WILDCARD
        or registered == incoming
        or (
            registered == EventResource.POD
            and incoming in (EventResource.ASSIGNED_POD, EventResource.UNSCHEDULABLE_POD)
        )
    )


class QueueingHint(enum.IntEnum):
    """A hint's answer (upstream's QueueingHint, the same values)."""

    # The event cannot make the pod schedulable: leave it where it is.
    QUEUE_SKIP = 0
    # The event may make the pod schedulable: retry it.
    QUEUE = 1


# hint(pod the plugin rejected, old object or None, new object or None).
QueueingHintFn = Callable[["PodInfo", Any, Any], QueueingHint]


@dataclass(frozen=True, slots=True)
class ClusterEventWithHint:
    """An event a plugin registers, and optionally its hint (upstream's
    ClusterEventWithHint). Without a hint every such event moves the pods
    the plugin rejected."""

    event: ClusterEvent
    hint: QueueingHintFn | None = None


# Special event labels (pkg/scheduler/framework/events.go).
SCHEDULE_ATTEMPT_FAILURE: Final = "ScheduleAttemptFailure"
BACKOFF_COMPLETE: Final = "BackoffComplete"
POP_FROM_BACKOFF_Q: Final = "PopFromBackoffQ"
FORCE_ACTIVATE: Final = "ForceActivate"
UNSCHEDULABLE_TIMEOUT: Final = "UnschedulableTimeout"

EVENT_NODE_ADD: Final = ClusterEvent(EventResource.NODE, ActionType.ADD)
EVENT_NODE_DELETE: Final = ClusterEvent(EventResource.NODE, ActionType.DELETE)
EVENT_ASSIGNED_POD_ADD: Final = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD)
EVENT_ASSIGNED_POD_UPDATE: Final = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.UPDATE)
EVENT_ASSIGNED_POD_DELETE: Final = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE)
EVENT_UNSCHEDULED_POD_ADD: Final = ClusterEvent(EventResource.UNSCHEDULABLE_POD, ActionType.ADD)
EVENT_UNSCHEDULED_POD_UPDATE: Final = ClusterEvent(
    EventResource.UNSCHEDULABLE_POD, ActionType.UPDATE
)
EVENT_UNSCHEDULED_POD_DELETE: Final = ClusterEvent(
    EventResource.UNSCHEDULABLE_POD, ActionType.DELETE
)
EVENT_UNSCHEDULABLE_TIMEOUT: Final = ClusterEvent(
    EventResource.WILDCARD, ActionType.ALL, UNSCHEDULABLE_TIMEOUT
)
EVENT_FORCE_ACTIVATE: Final = ClusterEvent(EventResource.WILDCARD, ActionType.ALL, FORCE_ACTIVATE)


def unroll_wildcard_resource(
    extra: Iterable[ObjectKind] = (),
) -> list[ClusterEventWithHint]:
    """The events of a plugin that does not implement EnqueueExtensions
    (UnrollWildCardResource): every action on every resource upstream
    watches, and on each kind in ``extra`` (the plugin's ``reads``), without
    hints."""
    resources = [
        EventResource.POD,
        EventResource.NODE,
        EventResource.PERSISTENT_VOLUME,
        EventResource.PERSISTENT_VOLUME_CLAIM,
        EventResource.CSI_NODE,
        EventResource.CSI_DRIVER,
        EventResource.CSI_STORAGE_CAPACITY,
        EventResource.STORAGE_CLASS,
        EventResource.RESOURCE_CLAIM,
        EventResource.DEVICE_CLASS,
    ]
    for kind in extra:
        r = kind_event_resource(kind)
        if r not in resources:
            resources.append(r)
    return [ClusterEventWithHint(ClusterEvent(r, ActionType.ALL)) for r in resources]


# -- what changed in an update (pkg/scheduler/framework/events.go) -------------


def pod_scheduling_properties_change(new: cpb.Pod, old: cpb.Pod) -> list[ClusterEvent]:
    """PodSchedulingPropertiesChange: the UpdatePod* events an update of a
    pod amounts to, on AssignedPod when the new pod is bound, else on
    UnschedulablePod; a plain Update when none of them applies."""
    resource = EventResource.ASSIGNED_POD if new.node_name else EventResource.UNSCHEDULABLE_POD
    actions: list[ActionType] = []
    if dict(new.labels) != dict(old.labels):
        actions.append(ActionType.UPDATE_POD_LABEL)
    if _scaled_down(new, old):
        actions.append(ActionType.UPDATE_POD_SCALE_DOWN)
    if not new.scheduling_gates and old.scheduling_gates:
        actions.append(ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED)
    if len(new.tolerations) != len(old.tolerations):
        actions.append(ActionType.UPDATE_POD_TOLERATION)
    if _generated_claims_changed(new, old):
        actions.append(ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM)
    if not actions:
        actions.append(ActionType.UPDATE)
    return [ClusterEvent(resource, a) for a in actions]


def _scaled_down(new: cpb.Pod, old: cpb.Pod) -> bool:
    """extractPodScaleDown: a request of the old pod is gone or lower (with
    the in-place resize status counted, as v1.36's gates do)."""
    new_reqs = pod_request_list(new, CALCULATE_RESOURCE_OPTIONS)
    old_reqs = pod_request_list(old, CALCULATE_RESOURCE_OPTIONS)
    return any(name not in new_reqs or new_reqs[name] < value for name, value in old_reqs.items())


def _generated_claims_changed(new: cpb.Pod, old: cpb.Pod) -> bool:
    """extractPodGeneratedResourceClaimChange: the pod's
    status.resourceClaimStatuses changed (when the record carries them)."""
    field = "resource_claim_statuses"
    if field not in cpb.Pod.DESCRIPTOR.fields_by_name:
        return False
    return list(getattr(new, field)) != list(getattr(old, field))


def node_scheduling_properties_change(new: cpb.Node, old: cpb.Node) -> list[ClusterEvent]:
    """NodeSchedulingPropertiesChange: the UpdateNode* events an update of a
    node amounts to (none when nothing scheduling reads changed). The Node
    record carries no conditions, so UpdateNodeCondition never arises."""
    actions: list[ActionType] = []
    if new.unschedulable != old.unschedulable and not new.unschedulable:
        # extractNodeSpecUnschedulableChange reports it as a taint change.
        actions.append(ActionType.UPDATE_NODE_TAINT)
    if new.allocatable != old.allocatable:
        actions.append(ActionType.UPDATE_NODE_ALLOCATABLE)
    if dict(new.labels) != dict(old.labels):
        actions.append(ActionType.UPDATE_NODE_LABEL)
    if list(new.taints) != list(old.taints):
        actions.append(ActionType.UPDATE_NODE_TAINT)
    if dict(new.annotations) != dict(old.annotations):
        actions.append(ActionType.UPDATE_NODE_ANNOTATION)
    if list(new.declared_features) != list(old.declared_features):
        actions.append(ActionType.UPDATE_NODE_DECLARED_FEATURE)
    return [ClusterEvent(EventResource.NODE, a) for a in actions]


# -- a profile's registrations (pkg/scheduler/scheduler.go) --------------------


@dataclass(frozen=True, slots=True)
class Registration:
    """One event one plugin of a profile registered, and its hint (None:
    every such event moves the plugin's pods; upstream's
    QueueingHintFunction with defaultQueueingHintFn)."""

    plugin: str
    event: ClusterEvent
    hint: QueueingHintFn | None = None


def build_registrations(
    plugins: Iterable[tuple[str, Iterable[ClusterEventWithHint]]],
) -> list[Registration]:
    """A profile's queueing hint map as a list (buildQueueingHintMap), from
    each rejecting plugin's events: in order, and for a plugin that
    registers a Node Add but no UpdateNodeTaint, an UpdateNodeTaint without
    a hint as well, as upstream adds it (kubernetes#109437)."""
    out: list[Registration] = []
    for name, events in plugins:
        node_add = node_taint = False
        for e in events:
            if e.event.resource == EventResource.NODE:
                node_add = node_add or bool(e.event.action_type & ActionType.ADD)
                node_taint = node_taint or bool(e.event.action_type & ActionType.UPDATE_NODE_TAINT)
            out.append(Registration(name, e.event, e.hint))
        if node_add and not node_taint:
            out.append(
                Registration(name, ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_TAINT))
            )
    return out


__all__ = [
    "BACKOFF_COMPLETE",
    "EVENT_ASSIGNED_POD_ADD",
    "EVENT_ASSIGNED_POD_DELETE",
    "EVENT_ASSIGNED_POD_UPDATE",
    "EVENT_FORCE_ACTIVATE",
    "EVENT_NODE_ADD",
    "EVENT_NODE_DELETE",
    "EVENT_UNSCHEDULABLE_TIMEOUT",
    "EVENT_UNSCHEDULED_POD_ADD",
    "EVENT_UNSCHEDULED_POD_DELETE",
    "EVENT_UNSCHEDULED_POD_UPDATE",
    "FORCE_ACTIVATE",
    "POP_FROM_BACKOFF_Q",
    "SCHEDULE_ATTEMPT_FAILURE",
    "UNSCHEDULABLE_TIMEOUT",
    "ActionType",
    "ClusterEvent",
    "ClusterEventWithHint",
    "EventResource",
    "QueueingHint",
    "QueueingHintFn",
    "Registration",
    "build_registrations",
    "event_resource",
    "kind_event_resource",
    "node_scheduling_properties_change",
    "pod_scheduling_properties_change",
    "unroll_wildcard_resource",
]
