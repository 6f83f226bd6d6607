"""NodeDeclaredFeatures: keep a pod off nodes that do not declare the node
features its spec needs.

Port of pkg/scheduler/framework/plugins/nodedeclaredfeatures/
nodedeclaredfeatures.go (PreFilter, Filter) at v1.36, where the
NodeDeclaredFeatures gate is beta and on. What a pod needs is inferred from
its spec by the feature registry of k8s.io/component-helpers/
nodedeclaredfeatures (features/registry.go AllFeatures; framework.go
InferForPodScheduling). Of the five registered features, two infer a need at
scheduling time:

* RestartAllContainersOnContainerExits (features/restartallcontainers,
  InferForScheduling): a container or init container has a restart policy
  rule with action ``RestartAllContainers``;
* UserNamespacesHostNetworkSupport (features/usernamespaceshostnetwork,
  InferForScheduling): ``hostNetwork: true`` together with
  ``hostUsers: false``.

The other three (the two in-place resize features and
ExtendWebSocketsToKubelet) infer nothing for scheduling. None of the five has
a MaxVersion, so the scheduler's version never drops a need.

A node's declared features are ``status.declaredFeatures``; names the
registry does not know are ignored (framework's FeatureMapper.TryMap). A pod
needing nothing skips the plugin. EventsToRegister and its queueing hints are
upstream's; SignPod has no Berth extension point.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

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
from berth.framework.snapshot import NodeBatch
from berth.framework.status import SUCCESS, Status

__all__ = [
    "ERR_REASON_UNSATISFIED_REQUIREMENTS",
    "FEATURES",
    "NAME",
    "NodeDeclaredFeatures",
    "required_features",
]

NAME = "NodeDeclaredFeatures"

# nodedeclaredfeatures.go, errReasonUnsatisfiedRequirements.
ERR_REASON_UNSATISFIED_REQUIREMENTS = "node(s) didn't match Pod's required features"

_REJECTED = Status.unresolvable(ERR_REASON_UNSATISFIED_REQUIREMENTS)

# restartallcontainers: v1.ContainerRestartRuleActionRestartAllContainers.
_RESTART_ALL_CONTAINERS = "RestartAllContainers"


def _restart_all_containers(pod: pb.Pod) -> bool:
    """restart_all_containers.go InferForScheduling."""
    return any(
        c.restart_rule_actions and _RESTART_ALL_CONTAINERS in c.restart_rule_actions
        for containers in (pod.containers, pod.init_containers)
        for c in containers
    )


def _user_namespaces_host_network(pod: pb.Pod) -> bool:
    """user_namespaces_host_network.go InferForScheduling: host network with
    an explicit ``hostUsers: false``."""
    return pod.host_network and pod.HasField("host_users") and not pod.host_users


# features/registry.go AllFeatures, in its order, with each feature's
# InferForScheduling (None: infers nothing at scheduling time).
FEATURES: tuple[tuple[str, Callable[[pb.Pod], bool] | None], ...] = (
    ("RestartAllContainersOnContainerExits", _restart_all_containers),
    ("InPlacePodLevelResourcesVerticalScaling", None),
    ("ExtendWebSocketsToKubelet", None),
    ("InPlacePodVerticalScalingInitContainers", None),
    ("UserNamespacesHostNetworkSupport", _user_namespaces_host_network),
)


# The features that infer something, in registry order.
_INFERRED: tuple[tuple[str, Callable[[pb.Pod], bool]], ...] = tuple(
    (name, infer) for name, infer in FEATURES if infer is not None
)


def required_features(pod: pb.Pod) -> tuple[str, ...]:
    """framework.go InferForPodScheduling: the registered features the pod's
    spec needs, in registry order."""
    return tuple(name for name, infer in _INFERRED if infer(pod))


class PreFilterState(msgspec.Struct, frozen=True):
    """nodedeclaredfeatures.go, preFilterState: the features the pod needs."""

    required: tuple[str, ...]


# Scheduling-only: upstream reads it only in Filter (nodedeclaredfeatures.go,
# getPreFilterState).
PRE_FILTER_STATE_KEY = StateKey("PreFilter" + NAME, PreFilterState, scheduling_only=True)


def _declares(node: pb.Node, required: tuple[str, ...]) -> bool:
    """FeatureSet.IsSubset over the node's declared features."""
    declared = node.declared_features
    return all(f in declared for f in required)


class NodeDeclaredFeatures(PreFilterPlugin, FilterPlugin, SignPlugin):
    name: ClassVar[str] = NAME

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """SignPod: the node features the pod requires."""
        return [(signers.FEATURES, required_features(pod.proto))]

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """nodedeclaredfeatures.go, EventsToRegister (the feature on, as in
        v1.36): a node added or its declared features changed; the pod's
        own update."""
        return [
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_DECLARED_FEATURE
                ),
                self.is_schedulable_after_node_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.UPDATE),
                self.is_schedulable_after_pod_update,
            ),
        ]

    def is_schedulable_after_node_change(
        self, pod: PodInfo, old: NodeInfo | None, new: NodeInfo
    ) -> QueueingHint:
        """isSchedulableAfterNodeChange: a node added, or its declared
        features changed."""
        if old is not None and list(old.node.declared_features) == list(new.node.declared_features):
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    def is_schedulable_after_pod_update(
        self, pod: PodInfo, old: PodInfo, new: PodInfo
    ) -> QueueingHint:
        """isSchedulableAfterPodUpdate: the rejected pod itself, when what it
        needs changed."""
        if new.uid != pod.uid:
            return QueueingHint.QUEUE_SKIP
        if required_features(old.proto) == required_features(new.proto):
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        required = required_features(pod.proto)
        if not required:
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, PreFilterState(required))
        return None, SUCCESS

    def _required(self, state: CycleState) -> tuple[str, ...]:
        return state.read(PRE_FILTER_STATE_KEY).required

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if _declares(node.node, self._required(state)):
            return SUCCESS
        return _REJECTED

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        required = self._required(state)
        rejected = np.fromiter(
            (not _declares(ni.node, required) for ni in nodes), dtype=np.bool_, count=len(nodes)
        )
        return NodeVerdicts.from_mask(rejected, _REJECTED)
