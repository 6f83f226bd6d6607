"""VolumeBinding: a pod's PersistentVolumeClaims must be bindable on the node.

Port of pkg/scheduler/framework/plugins/volumebinding (kube-scheduler
v1.36.3): volume_binding.go (the plugin), binder.go (the binder, here
binder.py), scorer.go (the StorageCapacityScoring score), over the objects
the caller ships: PersistentVolumeClaims, PersistentVolumes, StorageClasses,
CSINodes, CSIDrivers and CSIStorageCapacities (``reads``).

* PreFilter (PreFilter, podHasPVCs, GetPodVolumeClaims): a pod without claims
  is skipped. A claim that is missing, lost, being deleted or (for a generic
  ephemeral volume) not made for this pod makes the pod
  UnschedulableAndUnresolvable with upstream's message; so do unbound
  Immediate (or pre-bound) claims: ``pod has unbound immediate
  PersistentVolumeClaims``. Bound and WaitForFirstConsumer claims are kept
  in the CycleState.
* Filter (FindPodVolumes): every bound claim's PV must fit the node (its
  node affinity, after the CSI migration translation of in-tree PVs):
  ``node(s) didn't match PersistentVolume's node affinity``, or ``node(s)
  unavailable due to one or more pvc(s) bound to non-existent pv(s)``. Each
  WaitForFirstConsumer claim needs a matching Available PV that fits the
  node (smallest first) or a class that can provision there (provisioner,
  allowedTopologies, CSIStorageCapacity): ``node(s) didn't find available
  persistent volumes to bind`` / ``node(s) did not have enough free
  storage``. All UnschedulableAndUnresolvable.
* PreScore/Score: only with the StorageCapacityScoring feature gate, which is
  alpha and off in v1.36 (pkg/features/kube_features.go): PreScore answers
  Skip, as upstream's with its default gates. The scorer is here for the
  gate's sake (``storage_capacity_scoring=True`` when building the plugin in
  code), not reachable from a configuration file.
* Reserve (AssumePodVolumes): the PVs chosen for the chosen node and the
  claims to provision there are assumed. Upstream keeps them in its assume
  caches; Berth's plugin server keeps nothing, so Reserve writes them in the
  CycleState for PreBind and as an assume annotation
  (``volumebinding.berth.dev/assumed``) on the caller's assumed copy of the
  pod, which later cycles (and later pods of a ScheduleBatch) read from the
  snapshot: an assumed PV counts as bound to its claim, an assumed claim as
  selected for its node, while the object is still at the resourceVersion it
  was assumed at (upstream's passiveAssumeCache rule). The annotation is not
  written on the real pod.
* Unreserve (RevertAssumedPodVolumes): forgets Reserve's outcome; the caller
  drops its assumed copy of the pod and with it the annotation.
* PreBind (BindPodVolumes, bindAPIUpdate): the API updates as merge patches
  the caller applies before binding the pod: each chosen PV gets
  ``spec.claimRef`` (and ``pv.kubernetes.io/bound-by-controller``), each
  claim to provision gets ``volume.kubernetes.io/selected-node``. Each patch
  carries the resourceVersion the decision was made on, so the API server
  refuses it (409) when the object changed since, as upstream's Update does;
  the binding cycle then fails and the pod is retried.

Deviation from upstream: upstream's PreBind then waits (up to
``bindTimeoutSeconds``, default 600) until the PV controller has bound every
claim, and fails the binding cycle, so the pod is scheduled again, when the
binding is undone or provisioning fails. Berth's PreBind cannot wait on the
API server (the plugin server has no access to it, and a binding cycle's
PreBind returns its writes to the caller): the pod is bound right after the
writes, and the PV controller and the provisioner finish the claims
afterwards. The kubelet still waits for the volumes before starting the pod,
so the pod does not run without them; but a provisioning that fails on the
chosen node leaves the pod on that node (pending in ContainerCreating) rather
than sending it back to the scheduler. ``bindTimeoutSeconds`` is therefore
accepted and checked as upstream does, and has no effect.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Final

import msgspec
import numpy as np

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
    MAX_NODE_SCORE,
    FilterPlugin,
    NodeVerdicts,
    PreBindPlugin,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ReservePlugin,
    ScoreArray,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from berth.framework.model import PodInfo
from berth.framework.objects import ClusterObject, ObjectKind
from berth.framework.shape_score import broken_linear
from berth.framework.snapshot import NodeBatch
from berth.framework.status import SUCCESS, Status
from berth.framework.storage import (
    CSI_NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
    claim_of_pod,
)
from berth.plugins.volumebinding.args import (
    DEFAULT_SHAPE,
    MAX_CUSTOM_PRIORITY_SCORE,
    UtilizationShapePoint,
    VolumeBindingArgs,
)
from berth.plugins.volumebinding.binder import (
    ASSUMED_ANNOTATION,
    CSI_DRIVERS,
    CSI_STORAGE_CAPACITIES,
    BinderError,
    ChosenVolumes,
    PodVolumeClaims,
    PodVolumes,
    VolumeBinder,
    assume_pod_volumes,
    binding_writes,
    class_resources,
    describe_writes,
    encode_assumed,
    pod_claims,
)

if TYPE_CHECKING:
    from berth.framework.handle import Handle

__all__ = [
    "CHOSEN",
    "CLAIMS",
    "NAME",
    "REASON_UNBOUND_IMMEDIATE",
    "PodClaims",
    "VolumeBinding",
    "build_scorer",
]

log = logging.getLogger(__name__)

NAME: Final = "VolumeBinding"
# volume_binding.go, PreFilter.
REASON_UNBOUND_IMMEDIATE: Final = "pod has unbound immediate PersistentVolumeClaims"
# volume_binding.go, errNoPodVolumeForNode.
_NO_POD_VOLUME_FOR_NODE: Final = "no pod volume found for node"
# scorer.go, maxUtilization.
_MAX_UTILIZATION: Final = 100


class PodClaims(msgspec.Struct, frozen=True):
    """PreFilter's outcome (upstream's stateData.podVolumeClaims): the
    names of the pod's fully bound claims and of its unbound
    WaitForFirstConsumer claims, in the pod's namespace. Filter, Score and
    Reserve read the claims themselves again from the cycle's snapshot."""

    bound: tuple[str, ...] = ()
    delay: tuple[str, ...] = ()


CLAIMS: Final = StateKey(f"{NAME}/claims", PodClaims)
CHOSEN: Final = StateKey(f"{NAME}/chosen", ChosenVolumes)

Scorer = Callable[[Mapping[str, tuple[int, int]]], int]


def build_scorer(shape: list[UtilizationShapePoint] | tuple[UtilizationShapePoint, ...]) -> Scorer:
    """buildScorerFunction: each class's utilization (requested over
    capacity, in percent, 100 when the capacity is 0 or exceeded) through the
    shape (scores scaled from 0..10 to 0..100); the node's score is the
    classes' mean, rounded half away from zero."""
    points = [
        (p.utilization, p.score * (MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE)) for p in shape
    ]

    def per_class(requested: int, capacity: int) -> int:
        if capacity == 0 or requested > capacity:
            return broken_linear(points, _MAX_UTILIZATION)
        return broken_linear(points, requested * _MAX_UTILIZATION // capacity)

    def scorer(classes: Mapping[str, tuple[int, int]]) -> int:
        if not classes:
            return 0
        total = sum(per_class(req, cap) for req, cap in classes.values())
        return math.floor(total / len(classes) + 0.5)

    return scorer


class VolumeBinding(
    PreFilterPlugin[VolumeBindingArgs],
    FilterPlugin[VolumeBindingArgs],
    PreScorePlugin[VolumeBindingArgs],
    ScorePlugin[VolumeBindingArgs],
    ReservePlugin[VolumeBindingArgs],
    PreBindPlugin[VolumeBindingArgs],
    SignPlugin[VolumeBindingArgs],
):
    name: ClassVar[str] = NAME
    Args: ClassVar[type[Any] | None] = VolumeBindingArgs

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """SignPod: the volumes the pod mounts (signers.go VolumesSigner)."""
        return [(signers.VOLUMES, signers.volumes(pod.proto))]

    def __init__(
        self,
        args: VolumeBindingArgs | None = None,
        handle: Handle | None = None,
        *,
        storage_capacity_scoring: bool = False,
    ) -> None:
        """``storage_capacity_scoring`` is upstream's StorageCapacityScoring
        feature gate (default off, as in v1.36); with it on, ``shape``
        defaults to (0, 10), (100, 0)."""
        cfg = VolumeBindingArgs() if args is None else args
        if storage_capacity_scoring and not cfg.shape:
            # SetDefaults_VolumeBindingArgs: the shape defaults with the gate on.
            cfg = msgspec.structs.replace(cfg, shape=list(DEFAULT_SHAPE))
        cfg.validate(allow_storage_capacity_scoring=storage_capacity_scoring)
        super().__init__(cfg, handle)
        self.cfg = cfg
        self.storage_capacity_scoring = storage_capacity_scoring
        self.scorer: Scorer | None = None
        if storage_capacity_scoring:
            self.scorer = build_scorer(cfg.shape or [])

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        return (
            PERSISTENT_VOLUME_CLAIMS,
            PERSISTENT_VOLUMES,
            STORAGE_CLASSES,
            CSI_NODES,
            CSI_DRIVERS,
            CSI_STORAGE_CAPACITIES,
        )

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """volume_binding.go, EventsToRegister (queueing hints on), with the
        hints for StorageClasses and claims; CSINode, CSIDriver and
        CSIStorageCapacity changes move the pods it rejected without a hint
        (upstream's read the pod's claims and volumes from listers, which a
        hint here has not)."""
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.STORAGE_CLASS, ActionType.ADD | ActionType.UPDATE),
                self.is_schedulable_after_storage_class_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD | ActionType.UPDATE
                ),
                self.is_schedulable_after_claim_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.PERSISTENT_VOLUME, ActionType.ADD | ActionType.UPDATE)
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.CSI_NODE, ActionType.ADD | ActionType.UPDATE)
            ),
            ClusterEventWithHint(ClusterEvent(EventResource.CSI_DRIVER, ActionType.UPDATE)),
            ClusterEventWithHint(
                ClusterEvent(EventResource.CSI_STORAGE_CAPACITY, ActionType.ADD | ActionType.UPDATE)
            ),
        ]

    def is_schedulable_after_storage_class_change(
        self, pod: PodInfo, old: ClusterObject | None, new: ClusterObject
    ) -> QueueingHint:
        """isSchedulableAfterStorageClassChange: any class added; an update
        of its allowedTopologies."""
        if old is None or old.data.get("allowedTopologies") != new.data.get("allowedTopologies"):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def is_schedulable_after_claim_change(
        self, pod: PodInfo, old: ClusterObject | None, new: ClusterObject
    ) -> QueueingHint:
        """isSchedulableAfterPersistentVolumeClaimChange: one of the pod's
        claims, generic ephemeral volumes' included."""
        if claim_of_pod(pod.proto, new, ephemeral=True):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @classmethod
    def writes(cls, args: Any) -> tuple[ObjectKind, ...]:
        """PreBind binds the chosen PVs to their claims (spec.claimRef) and
        annotates claims to provision with the selected node
        (binder.binding_writes, upstream's bindAPIUpdate)."""
        return (PERSISTENT_VOLUMES, PERSISTENT_VOLUME_CLAIMS)

    # -- helpers --------------------------------------------------------------------

    def _binder(self, pod: PodInfo) -> VolumeBinder:
        return VolumeBinder(self.handle.snapshot, pod.proto)

    @staticmethod
    def _claims(binder: VolumeBinder, saved: PodClaims) -> PodVolumeClaims:
        """PreFilter's claims, read again from the cycle's snapshot (the
        unbound ones with the assumptions in flight applied)."""
        return PodVolumeClaims(
            bound=[binder.claim(n) for n in saved.bound],
            delay=[binder.claim(n, assumed=True) for n in saved.delay],
        )

    def _volumes_on(
        self, state: CycleState, pod: PodInfo, node_name: str
    ) -> tuple[VolumeBinder, PodVolumes]:
        """FindPodVolumes for one node, as Filter found it."""
        binder = self._binder(pod)
        claims = self._claims(binder, state.read(CLAIMS))
        ni = self.handle.snapshot.nodes.get(node_name)
        if ni is None:
            raise BinderError(f"node {node_name!r} is not in the snapshot")
        return binder, binder.find_pod_volumes(claims, node_name, ni.node.labels)

    # -- PreFilter -------------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        if not pod_claims(pod.proto):
            return None, Status.skip()
        binder = self._binder(pod)
        check = binder.check_claims()
        if check.problem is not None:
            return None, Status.unresolvable(check.problem)
        try:
            claims = binder.get_pod_volume_claims()
        except BinderError as exc:
            return None, Status.error(str(exc))
        if claims.immediate:
            # The PV controller binds them; the pod is retried on the claim's
            # update.
            return None, Status.unresolvable(REASON_UNBOUND_IMMEDIATE)
        state.write(
            CLAIMS,
            PodClaims(tuple(c.name for c in claims.bound), tuple(c.name for c in claims.delay)),
        )
        return None, SUCCESS

    # -- Filter ------------------------------------------------------------------------

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        n = len(nodes)
        binder = self._binder(pod)
        try:
            claims = self._claims(binder, state.read(CLAIMS))
        except (BinderError, KeyError) as exc:
            return NodeVerdicts.uniform(n, Status.error(str(exc)))
        statuses: list[Status] = []
        for ni in nodes:
            try:
                found = binder.find_pod_volumes(claims, ni.name, ni.node.labels)
            except BinderError as exc:
                statuses.append(Status.error(str(exc)))
                continue
            statuses.append(Status.unresolvable(*found.reasons) if found.reasons else SUCCESS)
        return NodeVerdicts.from_statuses(statuses)

    # -- PreScore / Score -------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> Status:
        # Without the StorageCapacityScoring gate there is no scorer.
        return Status.skip() if self.scorer is None else SUCCESS

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> ScoreArray:
        out = np.zeros(len(nodes), dtype=np.int64)
        saved = state.get(CLAIMS)
        if self.scorer is None or saved is None:
            return out
        binder = self._binder(pod)
        claims = self._claims(binder, saved)
        for k, ni in enumerate(nodes):
            found = binder.find_pod_volumes(claims, ni.name, ni.node.labels)
            if found.reasons:
                continue
            out[k] = self.scorer(
                class_resources(found, capacity_scoring=self.storage_capacity_scoring)
            )
        return out

    # -- Reserve / Unreserve ------------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        saved = state.get(CLAIMS)
        if saved is None:
            if not pod_claims(pod.proto):
                # PreFilter skipped the pod: nothing to bind (allBound).
                return SUCCESS
            return Status.error(f"cycle state has no {CLAIMS.name!r}: PreFilter did not run")
        try:
            binder, found = self._volumes_on(state, pod, node_name)
        except BinderError as exc:
            return Status.error(str(exc))
        if found.reasons:
            return Status.error(
                f"{_NO_POD_VOLUME_FOR_NODE} {node_name!r}: {', '.join(found.reasons)}"
            )
        chosen, assumed = assume_pod_volumes(binder, node_name, found)
        state.write(CHOSEN, chosen)
        if assumed.volumes or assumed.claims:
            state.annotate_assumed_pod(ASSUMED_ANNOTATION, encode_assumed(assumed))
        if not chosen.all_bound:
            log.debug(
                "%s: pod %s on node %s: assumed %d PV binding(s), %d claim(s) to provision",
                NAME,
                pod.key,
                node_name,
                len(chosen.static_bindings),
                len(chosen.dynamic_provisions),
            )
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        state.delete(CHOSEN)

    # -- PreBind -------------------------------------------------------------------------

    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """PreBindPreFlight: Skip when PreBind has nothing to do for the pod
        (no claims, or all bound), Success when it will write, Error when
        Reserve did not choose volumes for this node. The runtime runs it at
        the end of the scheduling cycle (RunPreBindPreFlights): when it skips
        (and no other PreBind plugin has work) the caller does not call
        PreBind for the pod at all."""
        chosen = state.get(CHOSEN)
        if chosen is None:
            if state.get(CLAIMS) is None and not pod_claims(pod.proto):
                return Status.skip()
            return Status.error(f"{_NO_POD_VOLUME_FOR_NODE} {node_name!r}")
        if chosen.all_bound:
            return Status.skip()
        if chosen.node != node_name:
            return Status.error(f"{_NO_POD_VOLUME_FOR_NODE} {node_name!r}")
        return SUCCESS

    def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        chosen = state.get(CHOSEN)
        if chosen is None:
            if state.get(CLAIMS) is None and not pod_claims(pod.proto):
                return SUCCESS
            return Status.error(f"{_NO_POD_VOLUME_FOR_NODE} {node_name!r}")
        if chosen.all_bound:
            return SUCCESS
        if chosen.node != node_name:
            return Status.error(f"{_NO_POD_VOLUME_FOR_NODE} {node_name!r}")
        writes = binding_writes(pod.namespace, chosen)
        for w in writes:
            state.add_write(w)
        log.info(
            "%s: pod %s on node %s: binding volumes by %s; the PV controller completes the "
            "claims (Berth does not wait for it)",
            NAME,
            pod.key,
            node_name,
            describe_writes(writes),
        )
        return SUCCESS
