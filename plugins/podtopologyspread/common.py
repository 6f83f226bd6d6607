"""What Filter and Score share: parsed constraints, node inclusion policies,
the selector default constraints get, and pod counting.

Port of pkg/scheduler/framework/plugins/podtopologyspread/common.go at v1.36
and of helper/spread.go (DefaultSelector, GetPodServices), with v1.36's
default feature gates: NodeInclusionPolicyInPodTopologySpread (GA) and
MatchLabelKeysInPodTopologySpread (beta, on) enabled;
TaintTolerationComparisonOperators (alpha) off.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import msgspec

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.labels import (
    Selector,
    SelectorError,
    label_selector_as_selector,
    selector_from_json,
    selector_from_set,
)
from berth.framework.model import PodInfo
from berth.framework.nodeaffinity import RequiredNodeAffinity
from berth.framework.objects import ObjectKind
from berth.framework.snapshot import Snapshot
from berth.framework.tolerations import (
    EFFECT_NO_EXECUTE,
    EFFECT_NO_SCHEDULE,
    tolerations_tolerate_taint,
)
from berth.plugins.podtopologyspread.args import DefaultConstraint

__all__ = [
    "HONOR",
    "IGNORE",
    "LABEL_HOSTNAME",
    "LABEL_TOPOLOGY_ZONE",
    "REPLICASETS",
    "REPLICATIONCONTROLLERS",
    "SERVICES",
    "STATEFULSETS",
    "Constraint",
    "compute_default_selector",
    "count_pods_match_selector",
    "default_selector",
    "filter_constraints",
    "node_labels_match_spread_constraints",
    "pod_constraints",
]

log = logging.getLogger(__name__)

HONOR: Final = "Honor"
IGNORE: Final = "Ignore"
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
LABEL_TOPOLOGY_ZONE: Final = "topology.kubernetes.io/zone"

# The objects DefaultSelector reads (plugin.go, setListers).
SERVICES: Final = ObjectKind("", "v1", "services", "Service")
REPLICATIONCONTROLLERS: Final = ObjectKind(
    "", "v1", "replicationcontrollers", "ReplicationController"
)
REPLICASETS: Final = ObjectKind("apps", "v1", "replicasets", "ReplicaSet")
STATEFULSETS: Final = ObjectKind("apps", "v1", "statefulsets", "StatefulSet")


class Constraint(msgspec.Struct, frozen=True, array_like=True):
    """common.go, topologySpreadConstraint: a constraint with its selector
    parsed and its defaults applied."""

    max_skew: int
    topology_key: str
    selector: Selector
    min_domains: int = 1
    node_affinity_policy: str = HONOR
    node_taints_policy: str = IGNORE

    def admits_every_node(self, pod: pb.Pod, required: RequiredNodeAffinity) -> bool:
        """Would match_node_inclusion_policies pass any node? Only when the
        affinity policy is Ignore or the pod requires no node affinity, and
        the taints policy is Ignore."""
        if self.node_taints_policy == HONOR:
            return False
        return self.node_affinity_policy != HONOR or (
            required.node_selector is None and required.terms is None
        )

    def match_node_inclusion_policies(
        self, pod: pb.Pod, node: pb.Node, required: RequiredNodeAffinity
    ) -> bool:
        """topologySpreadConstraint.matchNodeInclusionPolicies."""
        if self.node_affinity_policy == HONOR and not required.matches(node.labels, node.name):
            return False
        return not (
            self.node_taints_policy == HONOR and has_untolerated_do_not_schedule_taint(node, pod)
        )


def has_untolerated_do_not_schedule_taint(node: pb.Node, pod: pb.Pod) -> bool:
    """v1helper.FindMatchingUntoleratedTaint with
    helper.DoNotScheduleTaintsFilterFunc: a NoSchedule or NoExecute taint no
    toleration of the pod tolerates."""
    for taint in node.taints:
        if taint.effect not in (EFFECT_NO_SCHEDULE, EFFECT_NO_EXECUTE):
            continue
        if not tolerations_tolerate_taint(pod.tolerations, taint):
            return True
    return False


def _fields(
    c: pb.TopologySpreadConstraint | DefaultConstraint,
) -> tuple[int, str, str, int | None, str | None, str | None, Sequence[str]]:
    if isinstance(c, DefaultConstraint):
        return (
            c.max_skew,
            c.topology_key,
            c.when_unsatisfiable,
            c.min_domains,
            c.node_affinity_policy,
            c.node_taints_policy,
            c.match_label_keys,
        )
    return (
        c.max_skew,
        c.topology_key,
        c.when_unsatisfiable,
        c.min_domains if c.HasField("min_domains") else None,
        c.node_affinity_policy or None,
        c.node_taints_policy or None,
        c.match_label_keys,
    )


# pod_constraints' parsed constraints, by what they are parsed from; cleared
# when full, so a stream of distinct pods holds bounded memory.
_PARSED: dict[tuple[object, ...], tuple[Constraint, ...]] = {}
_PARSED_MAX: Final = 1024


def pod_constraints(pod: pb.Pod, action: str) -> list[Constraint]:
    """filter_constraints over the pod's own constraints, parsed once for
    all the pods that carry the same ones (a workload's replicas): kept by
    the constraints' serialized form, the action and the pod's values of
    their matchLabelKeys (all that the result depends on). A selector that
    does not parse raises SelectorError every time, and is not kept."""
    constraints = pod.topology_spread_constraints
    parts: list[object] = [action]
    label_keys: list[str] = []
    for c in constraints:
        parts.append(c.SerializeToString(deterministic=True))
        label_keys.extend(c.match_label_keys)
    if label_keys:
        labels = pod.labels
        parts.append(tuple(labels.get(k) for k in label_keys))
    key = tuple(parts)
    parsed = _PARSED.get(key)
    if parsed is None:
        parsed = tuple(filter_constraints(constraints, pod.labels, action))
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = parsed
    return list(parsed)


def filter_constraints(
    constraints: Iterable[pb.TopologySpreadConstraint | DefaultConstraint],
    pod_labels: Mapping[str, str],
    action: str,
    default_selector: Selector | None = None,
) -> list[Constraint]:
    """common.go, filterTopologySpreadConstraints: the constraints with
    ``whenUnsatisfiable == action``, selectors parsed with matchLabelKeys'
    values from the pod ANDed in (pod constraints) or ``default_selector`` as
    it is (default constraints), nil policies and minDomains defaulted. SelectorError when a selector does not parse."""
    out: list[Constraint] = []
    for i, c in enumerate(constraints):
        max_skew, key, when, min_domains, affinity_policy, taints_policy, label_keys = _fields(c)
        if when != action:
            continue
        if default_selector is not None:
            # buildDefaultConstraints replaces the selector filterTopologySpreadConstraints
            # built (Nothing, matchLabelKeys or not) with DefaultSelector's.
            selector = default_selector
        else:
            assert isinstance(c, pb.TopologySpreadConstraint)
            sel = c.label_selector if c.HasField("label_selector") else None
            selector = label_selector_as_selector(
                sel, f"topologySpreadConstraints[{i}].labelSelector"
            )
            if label_keys:
                match = {k: pod_labels[k] for k in label_keys if k in pod_labels}
                if match:
                    selector = merge_label_set_with_selector(match, selector)
        out.append(
            Constraint(
                max_skew,
                key,
                selector,
                1 if min_domains is None else min_domains,
                affinity_policy or HONOR,
                taints_policy or IGNORE,
            )
        )
    return out


def merge_label_set_with_selector(match: Mapping[str, str], selector: Selector) -> Selector:
    """common.go, mergeLabelSetWithSelector: Nothing stays Nothing, else
    ``key = value`` for each matchLabelKeys entry ANDed with the selector."""
    if selector.nothing:
        return selector
    return Selector(selector_from_set(match).requirements + selector.requirements)


def node_labels_match_spread_constraints(
    labels: Mapping[str, str], constraints: Sequence[Constraint]
) -> bool:
    """common.go, nodeLabelsMatchSpreadConstraints: the node has every
    topology key."""
    return all(c.topology_key in labels for c in constraints)


def count_pods_match_selector(pods: Iterable[PodInfo], selector: Selector, namespace: str) -> int:
    """common.go, countPodsMatchSelector: pods in ``namespace``, not
    terminating, whose labels match; an empty selector counts none."""
    if selector.empty or selector.nothing:
        return 0
    n = 0
    for p in pods:
        proto = p.proto
        if proto.terminating or proto.namespace != namespace:
            continue
        if selector.matches(proto.labels):
            n += 1
    return n


def pod_labels_match_spread_constraints(
    constraints: Sequence[Constraint], labels: Mapping[str, str]
) -> bool:
    """common.go, podLabelsMatchSpreadConstraints."""
    return any(c.selector.matches(labels) for c in constraints)


# -- helper/spread.go -----------------------------------------------------------------


def _string_map(value: object) -> dict[str, str] | None:
    if not isinstance(value, Mapping) or not value:
        return None
    return {str(k): str(v) for k, v in value.items()}


# Per snapshot: its object_generation and the default selectors computed at
# it, by what they read of a pod (namespace, labels, controller).
_SelectorKey = tuple[str, frozenset[tuple[str, str]], str, str]
_SELECTORS: Final[weakref.WeakKeyDictionary[Snapshot, tuple[int, dict[_SelectorKey, Selector]]]] = (
    weakref.WeakKeyDictionary()
)
_SELECTORS_MAX: Final = 4096


def default_selector(pod: pb.Pod, snapshot: Snapshot) -> Selector:
    """``compute_default_selector``, computed once per kind of pod while the
    snapshot's objects stay as they are (pods of one workload share it)."""
    key = (pod.namespace, frozenset(pod.labels.items()), pod.owner_kind, pod.owner_name)
    held = _SELECTORS.get(snapshot)
    if held is None or held[0] != snapshot.object_generation or len(held[1]) >= _SELECTORS_MAX:
        held = _SELECTORS[snapshot] = (snapshot.object_generation, {})
    selector = held[1].get(key)
    if selector is None:
        selector = held[1][key] = compute_default_selector(pod, snapshot)
    return selector


def compute_default_selector(pod: pb.Pod, snapshot: Snapshot) -> Selector:
    """helper.DefaultSelector: the selectors of the Services selecting the
    pod (GetPodServices: a Service without a selector selects nothing),
    merged, then the selector of the pod's controlling ReplicationController
    (merged as a label set), ReplicaSet or StatefulSet (its requirements
    added). Objects that are missing or do not parse are passed over, as
    upstream passes over lister errors.

    The wire pod carries the controller's kind and name, not its apiVersion:
    a ReplicaSet or StatefulSet owner is taken to be apps/v1 and a
    ReplicationController core/v1 (upstream matches the full group/version/kind).
    """
    label_set: dict[str, str] = {}
    pod_labels = pod.labels
    for (ns, _), svc in snapshot.objects(SERVICES.group, SERVICES.resource).items():
        if ns != pod.namespace:
            continue
        try:
            spec = svc.data.get("spec")
        except ValueError as exc:
            log.warning("PodTopologySpread: %s", exc)
            continue
        sel = _string_map(spec.get("selector")) if isinstance(spec, Mapping) else None
        if sel is None:
            continue
        if all(pod_labels.get(k) == v for k, v in sel.items()):
            label_set.update(sel)
    selector = selector_from_set(label_set)
    kind, name = pod.owner_kind, pod.owner_name
    if not name:
        return selector
    if kind == REPLICATIONCONTROLLERS.kind:
        rc = snapshot.object(
            REPLICATIONCONTROLLERS.group, REPLICATIONCONTROLLERS.resource, pod.namespace, name
        )
        if rc is not None:
            try:
                spec = rc.data.get("spec")
            except ValueError as exc:
                log.warning("PodTopologySpread: %s", exc)
                return selector
            sel = _string_map(spec.get("selector")) if isinstance(spec, Mapping) else None
            if sel:
                label_set.update(sel)
                selector = selector_from_set(label_set)
        return selector
    for owner_kind in (REPLICASETS, STATEFULSETS):
        if kind != owner_kind.kind:
            continue
        obj = snapshot.object(owner_kind.group, owner_kind.resource, pod.namespace, name)
        if obj is None:
            return selector
        try:
            spec = obj.data.get("spec")
            other = selector_from_json(
                spec.get("selector") if isinstance(spec, Mapping) else None,
                f"{obj.describe()} spec.selector",
            )
        except (ValueError, SelectorError) as exc:
            log.warning("PodTopologySpread: %s", exc)
            return selector
        if not other.nothing:
            selector = selector.add(*other.requirements)
        return selector
    return selector
