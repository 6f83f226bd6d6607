"""DynamicResources: a pod's ResourceClaims are allocated devices on its node.

Port of pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go
(kube-scheduler v1.36.3, its default feature gates) over the objects the
caller ships (``reads``: ResourceClaims, DeviceClasses, ResourceSlices), with
the structured allocator of ``structured/`` (k8s.io/dynamic-resource-
allocation/structured). Each extension point cites the upstream function it
ports; README.md says what differs and why.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol

import msgspec
import numpy as np

from berth.api.v1 import cluster_pb2 as cpb
from berth.framework.cycle_state import CycleState, StateKey
from berth.framework.deviceclasses import DeviceClassResolver
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
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreFilterResult,
    ReservePlugin,
    ScoreArray,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.nodeaffinity import SelectorTerm, aggregate_message, compile_node_selector
from berth.framework.normalize import default_normalize_score
from berth.framework.objects import ClusterObject, ObjectKind, ObjectWrite
from berth.framework.snapshot import NodeBatch, Snapshot
from berth.framework.status import SUCCESS, Status
from berth.plugins.dynamicresources.args import DynamicResourcesArgs
from berth.plugins.dynamicresources.claims import (
    DEVICE_CLASSES,
    FINALIZER,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Claim,
    ClaimProblem,
    as_list,
    as_map,
    claim_names,
    pod_claims,
    pod_consumer,
    quote,
)
from berth.plugins.dynamicresources.extended import (
    SPECIAL_CLAIM_NAME,
    claim_object,
    create_requests_and_mappings,
    extended_requests,
    find_extended_resource_claim,
    generate_claim_name,
    node_extended_resources,
)
from berth.plugins.dynamicresources.inflight import (
    IN_FLIGHT_ANNOTATION,
    InFlight,
    InFlightClaim,
    encode,
    in_flight,
)

if TYPE_CHECKING:
    from berth.framework.handle import Handle

__all__ = [
    "NAME",
    "STATE",
    "AllocatorFactory",
    "AllocatorLike",
    "DraState",
    "DynamicResources",
]

log = logging.getLogger(__name__)

NAME: Final = "DynamicResources"

# Upstream's reasons, by where they arise.
REASON_NOT_AVAILABLE: Final = "resourceclaim not available on the node"  # Filter
REASON_CANNOT_ALLOCATE: Final = "cannot allocate all claims"  # Filter
# filterExtendedResources: the pod's extended-resource claim is from an
# earlier cycle; the node offers an extended resource neither way.
REASON_EXTENDED_STALE: Final = "cannot schedule extended resource claim"
REASON_EXTENDED_MISSING: Final = "cannot fit resource"
POST_FILTER_NO_CLAIMS: Final = "no new claims to deallocate"
POST_FILTER_STILL: Final = "still not schedulable"
POST_FILTER_DEALLOCATED: Final = "deallocation of ResourceClaim completed"
POST_FILTER_DELETED: Final = "deletion of ResourceClaim completed"
# dynamicresources.go ErrDeviceBindingTimeout, ErrDeviceBindingFailed: the
# errors PreBind's wait for binding conditions ends with.
ERR_DEVICE_BINDING_TIMEOUT: Final = "device binding timeout"
ERR_DEVICE_BINDING_FAILED: Final = "device binding failed"
# PreBind polls the binding conditions every 5 s (wait.PollUntilContextTimeout).
BINDING_POLL_SECONDS: Final = 5.0
# kube-scheduler framework's ErrNotFound (cycle_state.go): a state key never written.
STATE_NOT_FOUND: Final = "not found"
# resource/v1 types.go, FirstAvailableDeviceRequestMaxSize: the most
# subrequests a request may list (computeScore's base).
FIRST_AVAILABLE_MAX: Final = 8


class AllocatorLike(Protocol):
    """The structured allocator's contract (structured/allocator.py)."""

    def allocate(
        self,
        node_name: str,
        node_labels: Mapping[str, str],
        claims: Sequence[Mapping[str, Any]],
    ) -> list[dict[str, Any]] | None: ...


# (allocated claims' JSON, in-flight ones as {"status": {"allocation": ...}};
# DeviceClasses by name; ResourceSlices) -> an allocator for one pod's cycle
# (structured.NewAllocator).
AllocatorFactory = Callable[
    [Sequence[Mapping[str, Any]], Mapping[str, Mapping[str, Any]], Sequence[Mapping[str, Any]]],
    AllocatorLike,
]


class AllocationFailed(Exception):
    """The allocator's AllocationError: ``on_node`` when upstream would answer
    it as a failure on that node only (ErrFailedAllocationOnNode:
    Unschedulable), ``timed_out`` when the filter timeout passed (an Error
    that names the node), else an Error."""

    def __init__(self, message: str, *, on_node: bool = False, timed_out: bool = False) -> None:
        super().__init__(message)
        self.on_node = on_node
        self.timed_out = timed_out


def _structured_factory(filter_timeout: float) -> AllocatorFactory:
    """The product's allocator (structured/), built over the snapshot's
    objects with v1.36's default features and one shared CEL cache (upstream
    keeps one per plugin, cel.NewCache); each node's allocation may take up to
    ``filter_timeout`` seconds (DRASchedulerFilterTimeout; 0: no limit)."""
    from berth.plugins.dynamicresources import structured

    cel = structured.CelCache()
    features = structured.Features()

    def build(
        allocated: Sequence[Mapping[str, Any]],
        classes: Mapping[str, Mapping[str, Any]],
        slices: Sequence[Mapping[str, Any]],
    ) -> AllocatorLike:
        state = structured.AllocatedState.from_claims(allocated)
        inner = structured.Allocator(features, state, classes, slices, cel)

        class _Timed:
            def allocate(
                self,
                node_name: str,
                node_labels: Mapping[str, str],
                claims: Sequence[Mapping[str, Any]],
            ) -> list[dict[str, Any]] | None:
                deadline = time.monotonic() + filter_timeout if filter_timeout > 0 else None
                try:
                    return inner.allocate(node_name, node_labels, claims, deadline=deadline)
                except structured.AllocationTimeoutError as exc:
                    raise AllocationFailed(str(exc), timed_out=True) from exc
                except structured.NodeAllocationError as exc:
                    raise AllocationFailed(str(exc), on_node=True) from exc
                except structured.AllocationError as exc:
                    raise AllocationFailed(str(exc)) from exc

        return _Timed()

    return build


class DraState(msgspec.Struct, frozen=True, omit_defaults=True):
    """PreFilter's outcome (upstream's stateData), kept small enough to travel
    with the cycle: the pod's claims by name, which need an allocation, the
    claims Filter found unavailable (PostFilter), prioritized-list scores per
    node (Score), and Reserve's allocations (PreBind)."""

    # Claim names in the pod's namespace, in spec order; empty: nothing to do.
    claims: list[str] = []
    uids: list[str] = []
    # Indices of the claims without an allocation (claimStore.toAllocate).
    to_allocate: list[int] = []
    # Indices of allocated claims some node could not offer (unavailableClaims).
    unavailable: list[int] = []
    # computeScore per node, only when a claim has a prioritized list.
    scores: dict[str, int] = {}
    scoring: bool = False
    # Reserve's node and the allocation of each claim it allocated, by index.
    reserved_node: str = ""
    reserved: dict[int, dict[str, Any]] = {}
    # Extended resources backed by DRA (extended.py): the pod's scalar
    # requests (podScalarResources) when a class backs one of them; the claim
    # an earlier cycle made for them, if any; the in-memory claim's uid.
    extended: dict[str, int] = {}
    extended_found: str = ""
    extended_uid: str = ""
    # Reserve's claim for them on reserved_node: its name, requests, the
    # container mappings and its allocation.
    extended_name: str = ""
    extended_requests: list[dict[str, Any]] = []
    extended_mappings: list[dict[str, str]] = []
    extended_allocation: dict[str, Any] = {}
    # When PreBind began waiting for devices' binding conditions (Unix
    # seconds; 0: it has not): the later PreBind calls of the binding cycle
    # only check them.
    binding_wait_start: float = 0.0

    @property
    def empty(self) -> bool:
        """claimStore.empty: no claim of the pod's and no extended one."""
        return not self.claims and not self.extended


STATE: Final = StateKey(f"{NAME}/state", DraState)


def _rfc3339(seconds: float) -> str:
    """metav1.Time's wire form (second precision, UTC) of a Unix time."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_rfc3339(value: Any) -> float | None:
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class DynamicResources(
    PreEnqueuePlugin[DynamicResourcesArgs],
    PreFilterPlugin[DynamicResourcesArgs],
    FilterPlugin[DynamicResourcesArgs],
    PostFilterPlugin[DynamicResourcesArgs],
    ScorePlugin[DynamicResourcesArgs],
    ReservePlugin[DynamicResourcesArgs],
    PreBindPlugin[DynamicResourcesArgs],
    SignPlugin[DynamicResourcesArgs],
):
    name: ClassVar[str] = NAME
    Args: ClassVar[type[Any] | None] = DynamicResourcesArgs

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """SignPod: a pod with resource claims is not signed."""
        if pod.proto.resource_claims:
            return Status.unschedulable("pods with dra resource claims are not signable", NAME)
        return []

    def __init__(
        self,
        args: DynamicResourcesArgs | None = None,
        handle: Handle | None = None,
        *,
        allocator_factory: AllocatorFactory | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``allocator_factory`` replaces the structured allocator (tests);
        ``clock`` is the time binding conditions' timeout is measured by."""
        cfg = DynamicResourcesArgs() if args is None else args
        cfg.validate()
        super().__init__(cfg, handle)
        self.cfg = cfg
        self.binding_timeout = cfg.binding_timeout_seconds
        self._factory = allocator_factory
        self._clock = clock

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        return (RESOURCE_CLAIMS, DEVICE_CLASSES, RESOURCE_SLICES)

    @classmethod
    def writes(cls, args: Any) -> tuple[ObjectKind, ...]:
        """PreBind records the allocation and the reservation on each claim
        (bindClaim): its status, and the finalizer on the claim itself."""
        return (RESOURCE_CLAIMS,)

    # -- events (EventsToRegister) ---------------------------------------------

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """EventsToRegister with queueing hints on (GA): node additions and
        label/allocatable updates, claims added or updated (with the claim
        hint), the pod's generated claims (with the pod hint), classes and
        slices added or updated."""
        return [
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.NODE,
                    ActionType.ADD
                    | ActionType.UPDATE_NODE_LABEL
                    | ActionType.UPDATE_NODE_ALLOCATABLE,
                )
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.RESOURCE_CLAIM, ActionType.ADD | ActionType.UPDATE),
                is_schedulable_after_claim_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM),
                is_schedulable_after_pod_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE)
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.RESOURCE_SLICE, ActionType.ADD | ActionType.UPDATE)
            ),
        ]

    # -- PreEnqueue ---------------------------------------------------------------

    def pre_enqueue(self, pod: PodInfo) -> Status:
        """PreEnqueue (foreachPodResourceClaim): every claim the pod names
        exists, is not being deleted and, when generated from a template, is
        the pod's (statusUnschedulable: UnschedulableAndUnresolvable, with
        upstream's messages). A PreEnqueue call without cluster state
        (PreEnqueueRequest.state) gets the check of the pod alone: a
        template's claim not named yet; PreFilter then finds the rest."""
        try:
            if not pod.proto.resource_claims:
                return SUCCESS
            handle = self._handle
            if handle is not None and handle.has_snapshot:
                pod_claims(handle.snapshot, pod.proto)
            else:
                claim_names(pod.proto)
        except ClaimProblem as exc:
            return Status.unresolvable(str(exc))
        return SUCCESS

    # -- PreFilter ----------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        state.write(STATE, DraState())
        if not pod.proto.resource_claims and not pod.spec_requests.scalar:
            # The Skip below, without resolving device classes: no claims and
            # no extended resource a class could back.
            return None, Status.skip()
        snapshot = self.handle.snapshot
        claims: list[tuple[str, Claim]] = []
        if pod.proto.resource_claims:
            try:
                claims = pod_claims(snapshot, pod.proto)
            except ClaimProblem as exc:
                return None, Status.unresolvable(str(exc))
        # preFilterExtendedResources: the pod's extended resources a class
        # backs, and the claim an earlier cycle made for them.
        extended = extended_requests(
            pod.spec_requests.scalar,
            DeviceClassResolver.of(snapshot.objects(DEVICE_CLASSES.group, DEVICE_CLASSES.resource)),
        )
        found = ""
        if extended is not None:
            kind = RESOURCE_CLAIMS
            made = find_extended_resource_claim(
                pod.proto, snapshot.objects(kind.group, kind.resource)
            )
            found = "" if made is None else made.name
        if not claims and extended is None:
            return None, Status.skip()
        flight: InFlight | None = None
        to_allocate: list[int] = []
        scoring = False
        for index, (_, claim) in enumerate(claims):
            allocation = claim.allocation
            if allocation is not None:
                # CanBeReserved has no limit in v1.36 (resourceclaim.go).
                _, errors = _allocation_node_selector(allocation)
                if errors:
                    return None, Status.error(aggregate_message(errors))
                continue
            to_allocate.append(index)
            if flight is None:
                flight = in_flight(snapshot)
            holder = flight.holder(claim.namespace, claim.name)
            if holder is not None and holder != pod.uid:
                return None, Status.unresolvable(
                    f"resource claim {claim.key} is in the process of being allocated"
                )
            problem = self._check_requests(claim)
            if problem is not None:
                return None, problem
            scoring = scoring or any("firstAvailable" in r for r in claim.requests)
        state.write(
            STATE,
            DraState(
                claims=[c.name for _, c in claims],
                uids=[c.uid for _, c in claims],
                to_allocate=to_allocate,
                scoring=scoring,
                extended=extended or {},
                extended_found=found,
                # The in-memory claim's temporary uid, for the allocation in
                # flight (upstream's uuid.NewUUID()).
                extended_uid=str(uuid.uuid4()) if extended is not None else "",
            ),
        )
        return None, SUCCESS

    def _check_requests(self, claim: Claim) -> Status | None:
        """PreFilter's check of every request's device class
        (validateDeviceClass), prioritized lists included."""
        for request in claim.requests:
            name = str(request.get("name") or "")
            exactly = request.get("exactly")
            subs = as_list(request, "firstAvailable")
            if isinstance(exactly, dict):
                st = self._check_class(str(exactly.get("deviceClassName") or ""), name)
                if st is not None:
                    return st
            elif subs:
                for sub in subs:
                    sub_map = sub if isinstance(sub, dict) else {}
                    qualified = f"{name}/{sub_map.get('name') or ''}"
                    st = self._check_class(str(sub_map.get("deviceClassName") or ""), qualified)
                    if st is not None:
                        return st
            else:
                return Status.unresolvable(
                    f"resource claim {claim.key}, request {name}: unknown request type"
                )
        return None

    def _check_class(self, class_name: str, request: str) -> Status | None:
        if not class_name:
            return Status.error(f"request {request}: unsupported request type")
        kind = DEVICE_CLASSES
        if self.handle.snapshot.object(kind.group, kind.resource, "", class_name) is None:
            return Status.unresolvable(
                f"request {request}: device class {class_name} does not exist"
            )
        return None

    # -- the allocator --------------------------------------------------------------

    def _allocator(self, snapshot: Snapshot, pod: PodInfo) -> AllocatorLike:
        """NewAllocator over the snapshot: every allocated claim, and the
        allocations other pods have in flight, count as allocated."""
        if self._factory is None:
            self._factory = _structured_factory(self.cfg.filter_timeout_seconds)
        kind = RESOURCE_CLAIMS
        allocated: list[Mapping[str, Any]] = [
            obj.data
            for obj in snapshot.objects(kind.group, kind.resource).values()
            if isinstance(as_map(obj.data, "status").get("allocation"), dict)
        ]
        for alloc in in_flight(snapshot).allocations(exclude_pod=pod.uid):
            allocated.append({"status": {"allocation": alloc}})
        classes = {
            name: obj.data
            for (_, name), obj in snapshot.objects(
                DEVICE_CLASSES.group, DEVICE_CLASSES.resource
            ).items()
        }
        slices = [
            obj.data
            for obj in snapshot.objects(RESOURCE_SLICES.group, RESOURCE_SLICES.resource).values()
        ]
        return self._factory(allocated, classes, slices)

    def _claims(self, saved: DraState, pod: PodInfo) -> list[Claim]:
        """PreFilter's claims, read again from this call's snapshot. A claim
        gone or replaced since is answered as PreFilter would answer it."""
        kind = RESOURCE_CLAIMS
        out: list[Claim] = []
        for name, uid in zip(saved.claims, saved.uids, strict=True):
            obj = self.handle.snapshot.object(kind.group, kind.resource, pod.namespace, name)
            if obj is None or str(obj.metadata.get("uid") or "") != uid:
                raise ClaimProblem(f'could not find ResourceClaim "{pod.namespace}/{name}"')
            out.append(Claim(obj))
        return out

    # -- Filter ------------------------------------------------------------------------

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        n = len(nodes)
        saved = state.get(STATE)
        if saved is None:
            return NodeVerdicts.uniform(
                n, Status.error(f"cycle state has no {STATE.name!r}: PreFilter did not run")
            )
        if saved.empty:
            return NodeVerdicts.all_pass(n)
        if saved.extended_found:
            # filterExtendedResources: the claim is from an earlier cycle;
            # PostFilter is where upstream deletes it to start anew.
            return NodeVerdicts.uniform(n, Status.unresolvable(REASON_EXTENDED_STALE))
        try:
            claims = self._claims(saved, pod)
        except ClaimProblem as exc:
            return NodeVerdicts.uniform(n, Status.unresolvable(str(exc)))
        selectors: dict[int, tuple[SelectorTerm, ...]] = {}
        for index, claim in enumerate(claims):
            allocation = claim.allocation
            if allocation is not None and "nodeSelector" in allocation:
                terms, errors = _allocation_node_selector(allocation)
                if errors:
                    return NodeVerdicts.uniform(n, Status.error(aggregate_message(errors)))
                if terms is not None:
                    selectors[index] = terms
        # claimStore.toAllocate, on this call's snapshot (a claim allocated
        # since PreFilter counts as allocated, its node selector checked).
        indices = [i for i, c in enumerate(claims) if c.allocation is None]
        to_allocate = [claims[i].data for i in indices]
        allocator = (
            self._allocator(self.handle.snapshot, pod) if to_allocate or saved.extended else None
        )
        resolver = self._resolver() if saved.extended else None
        statuses: list[Status] = []
        unavailable: set[int] = set(saved.unavailable)
        scores: dict[str, int] = dict(saved.scores)
        for ni in nodes:
            node_to_allocate = to_allocate
            if resolver is not None:
                ext_status, ext_claim = self._node_extended_claim(saved, pod, ni, resolver)
                if ext_status is not None:
                    statuses.append(ext_status)
                    continue
                if ext_claim is None and not claims:
                    # Device plugins provide all of it here; NodeResourcesFit
                    # checks it.
                    statuses.append(SUCCESS)
                    continue
                if ext_claim is not None:
                    node_to_allocate = [*to_allocate, ext_claim]
            st, missing, results = self._filter_node(
                claims, selectors, allocator if node_to_allocate else None, node_to_allocate, ni
            )
            statuses.append(st)
            unavailable.update(missing)
            if st.is_success and saved.scoring:
                scores[ni.name] = compute_score(claims, indices, results)
        if unavailable != set(saved.unavailable) or scores != saved.scores:
            state.write(
                STATE,
                msgspec.structs.replace(saved, unavailable=sorted(unavailable), scores=scores),
            )
        return NodeVerdicts.from_statuses(statuses)

    def _filter_node(
        self,
        claims: list[Claim],
        selectors: Mapping[int, tuple[SelectorTerm, ...]],
        allocator: AllocatorLike | None,
        to_allocate: list[Mapping[str, Any]],
        ni: NodeInfo,
    ) -> tuple[Status, list[int], list[dict[str, Any]]]:
        """Filter for one node: (verdict, unavailable claims, allocations)."""
        labels = ni.node.labels
        unavailable: list[int] = []
        for index, claim in enumerate(claims):
            terms = selectors.get(index)
            if terms is not None and not any(t.matches(labels, ni.name) for t in terms):
                unavailable.append(index)
                continue
            if claim.allocation is None:
                continue
            # DRADeviceBindingConditions and DRAResourceClaimDeviceStatus are on.
            try:
                ready = claim_ready_for_binding(claim.name, claim.allocation, claim.status)
            except BindingFailed:
                unavailable.append(index)
                continue
            if not ready and self._claim_timed_out(claim.allocation):
                unavailable.append(index)
        results: list[dict[str, Any]] = []
        if allocator is not None:
            try:
                got = allocator.allocate(ni.name, labels, to_allocate)
            except AllocationFailed as exc:
                if exc.timed_out:
                    # Potentially transient: an Error, so the pod backs off
                    # rather than wait for an event.
                    return (
                        Status.error(f"node {ni.name}: timed out trying to allocate devices"),
                        [],
                        [],
                    )
                if exc.on_node:
                    return Status.unresolvable(str(exc)), [], []
                return Status.error(str(exc)), [], []
            if got is None or len(got) != len(to_allocate):
                return Status.unresolvable(REASON_CANNOT_ALLOCATE), [], []
            results = got
        if unavailable:
            return Status.unresolvable(REASON_NOT_AVAILABLE), unavailable, []
        return SUCCESS, [], results

    def _resolver(self) -> DeviceClassResolver:
        kind = DEVICE_CLASSES
        return DeviceClassResolver.of(self.handle.snapshot.objects(kind.group, kind.resource))

    def _node_extended_claim(
        self, saved: DraState, pod: PodInfo, ni: NodeInfo, resolver: DeviceClassResolver
    ) -> tuple[Status | None, dict[str, Any] | None]:
        """filterExtendedResources for one node: (a rejection, or None; the
        in-memory claim with the node's requests, or None when the node's
        device plugins provide everything)."""
        claim, _ = self._node_extended(saved, pod, ni, resolver)
        if isinstance(claim, Status):
            return claim, None
        return None, claim

    def _node_extended(
        self, saved: DraState, pod: PodInfo, ni: NodeInfo, resolver: DeviceClassResolver
    ) -> tuple[Status | dict[str, Any] | None, list[dict[str, str]]]:
        """The node's claim for the pod's extended resources and its
        container mappings (createRequestsAndMappings), a Status when the node
        can offer some resource neither way, None when DRA has nothing to do
        there."""
        needed, missing = node_extended_resources(saved.extended, ni.allocatable.scalar, resolver)
        if missing:
            return Status.unresolvable(REASON_EXTENDED_MISSING), []
        if not needed:
            return None, []
        requests, mappings = create_requests_and_mappings(pod.proto, needed, resolver)
        claim = claim_object(pod.proto, SPECIAL_CLAIM_NAME, requests)
        claim["metadata"]["uid"] = saved.extended_uid
        return claim, mappings

    def _claim_timed_out(self, allocation: Mapping[str, Any] | None) -> bool:
        """isClaimTimeout: allocated longer than bindingTimeout ago with a
        device that has binding conditions."""
        if allocation is None:
            return False
        stamp = _parse_rfc3339(allocation.get("allocationTimestamp"))
        if stamp is None:
            return False
        results = as_list(as_map(allocation, "devices"), "results")
        with_conditions = any(
            isinstance(r, dict) and r.get("bindingConditions") is not None for r in results
        )
        return with_conditions and stamp + self.binding_timeout < self._clock()

    # -- PostFilter ------------------------------------------------------------------

    def post_filter(
        self, state: CycleState, pod: PodInfo, rejected: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        """PostFilter: a claim that Filter found unavailable on some node and
        that is reserved for nobody (or only this pod) is deallocated, so the
        next attempt can allocate it anew: a merge patch on its status, which
        the caller performs (PostFilterResponse.writes). It carries the
        claim's resourceVersion, so a claim that changed meanwhile is left
        alone (upstream's UpdateStatus fails the same way)."""
        saved = state.get(STATE)
        if saved is None:
            # PreFilter did not run: another PreFilter plugin rejected the pod
            # first. Upstream's getStateData then fails with the cycle state's
            # ErrNotFound, so kube-scheduler's FitError ends in "not found"
            # (and DefaultPreemption does not run).
            return None, Status.error(STATE_NOT_FOUND)
        if saved.empty:
            return None, Status.unschedulable(POST_FILTER_NO_CLAIMS)
        if saved.extended_found:
            return None, self._delete_extended_claim(state, pod, saved.extended_found)
        try:
            claims = self._claims(saved, pod)
        except ClaimProblem:
            return None, Status.unschedulable(POST_FILTER_STILL)
        for index in saved.unavailable:
            claim = claims[index]
            reserved = claim.reserved_for
            if not reserved or (
                len(reserved) == 1 and str(reserved[0].get("uid") or "") == pod.uid
            ):
                log.info("%s: pod %s: deallocating claim %s", NAME, pod.key, claim.key)
                state.add_write(
                    ObjectWrite.of_kind(
                        RESOURCE_CLAIMS,
                        claim.namespace,
                        claim.name,
                        {
                            "metadata": {"resourceVersion": claim.resource_version},
                            "status": {"reservedFor": None, "allocation": None, "devices": None},
                        },
                        subresource="status",
                    )
                )
                return None, Status.unschedulable(POST_FILTER_DEALLOCATED)
        return None, Status.unschedulable(POST_FILTER_STILL)

    def _delete_extended_claim(self, state: CycleState, pod: PodInfo, name: str) -> Status:
        """PostFilter's end for a claim an earlier cycle made for the pod's
        extended resources (deleteClaim): its finalizer removed (a merge patch
        carrying the claim's resourceVersion), then the claim deleted (its uid
        the precondition), so the next attempt makes a new one."""
        kind = RESOURCE_CLAIMS
        obj = self.handle.snapshot.object(kind.group, kind.resource, pod.namespace, name)
        if obj is None:
            return Status.unschedulable(POST_FILTER_STILL)
        claim = Claim(obj)
        log.info(
            "%s: pod %s: deleting claim %s made for its extended resources",
            NAME,
            pod.key,
            claim.key,
        )
        if FINALIZER in claim.finalizers:
            state.add_write(
                ObjectWrite.of_kind(
                    kind,
                    claim.namespace,
                    claim.name,
                    {
                        "metadata": {
                            "resourceVersion": claim.resource_version,
                            "finalizers": [f for f in claim.finalizers if f != FINALIZER],
                        }
                    },
                )
            )
        state.add_write(
            ObjectWrite.of_kind(
                kind,
                claim.namespace,
                claim.name,
                {"metadata": {"uid": claim.uid}},
                delete=True,
            )
        )
        return Status.unschedulable(POST_FILTER_DELETED)

    # -- Score -------------------------------------------------------------------------

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> ScoreArray:
        """Score (DRAPrioritizedList, beta and on): computeScore of the
        allocation Filter found on the node."""
        saved = state.get(STATE)
        out = np.zeros(len(nodes), dtype=np.int64)
        if saved is None or not saved.scoring:
            return out
        for k, name in enumerate(nodes.names):
            out[k] = saved.scores.get(name, 0)
        return out

    def normalize_score(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch, scores: ScoreArray
    ) -> Status:
        """NormalizeScore: helper.DefaultNormalizeScore(MaxNodeScore, false).
        Without prioritized-list scores every score is 0, which it leaves as is."""
        saved = state.get(STATE)
        if saved is not None and saved.scoring:
            default_normalize_score(MAX_NODE_SCORE, False, scores)
        return SUCCESS

    # -- Reserve / Unreserve -------------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Reserve: the allocation Filter found for the chosen node (here found
        again, on this call's snapshot) is kept in flight, on the assumed pod
        (inflight.py), so no later pod gets those devices before PreBind has
        written them."""
        saved = state.get(STATE)
        if saved is None or saved.empty:
            return SUCCESS
        try:
            claims = self._claims(saved, pod)
        except ClaimProblem as exc:
            return Status.error(str(exc))
        indices = [i for i, c in enumerate(claims) if c.allocation is None]
        ni = self.handle.snapshot.nodes.get(node_name)
        ext_claim: dict[str, Any] | None = None
        mappings: list[dict[str, str]] = []
        if saved.extended and ni is not None:
            got, mappings = self._node_extended(saved, pod, ni, self._resolver())
            if isinstance(got, Status):
                return Status.error(f"node {node_name}: {got.message}")
            ext_claim = got
        if not indices and ext_claim is None:
            # Allocated, but perhaps not reserved yet: PreBind reserves them.
            return SUCCESS
        if ni is None:
            return Status.error(f"node {node_name!r} is not in the snapshot")
        to_allocate = [claims[i].data for i in indices]
        if ext_claim is not None:
            to_allocate.append(ext_claim)
        allocator = self._allocator(self.handle.snapshot, pod)
        try:
            results = allocator.allocate(node_name, ni.node.labels, to_allocate)
        except AllocationFailed as exc:
            return Status.error(str(exc))
        if results is None or len(results) != len(to_allocate):
            # We checked before that the node is suitable (upstream's error).
            return Status.error("claim allocation not found for node")
        in_flight_claims: list[InFlightClaim] = []
        extended: dict[str, Any] = {}
        if ext_claim is not None:
            # The claim gets its name now, so the allocation in flight and
            # PreBind's writes name the same claim.
            alloc = results.pop()
            name = generate_claim_name(pod.name)
            extended = {
                "extended_name": name,
                "extended_requests": ext_claim["spec"]["devices"]["requests"],
                "extended_mappings": mappings,
                "extended_allocation": alloc,
            }
            in_flight_claims.append(InFlightClaim(name, saved.extended_uid, alloc, extended=True))
        reserved = dict(zip(indices, results, strict=True))
        state.write(
            STATE,
            msgspec.structs.replace(saved, reserved_node=node_name, reserved=reserved, **extended),
        )
        in_flight_claims[:0] = [
            InFlightClaim(claims[i].name, claims[i].uid, alloc) for i, alloc in reserved.items()
        ]
        state.annotate_assumed_pod(IN_FLIGHT_ANNOTATION, encode(in_flight_claims))
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """Unreserve (dynamicresources.go Unreserve): the allocation in flight
        goes with the caller's assumed pod; the state forgets it. A claim this
        call's snapshot shows allocated and reserved for the pod (PreBind's
        writes went through before the binding failed) gets the pod removed
        from its reservedFor, and the claim PreBind made for the pod's
        extended resources is deleted (unreserveExtendedResourceClaim): writes
        the caller performs best effort, as upstream only logs their errors."""
        saved = state.get(STATE)
        if saved is not None and not saved.empty:
            self._unreserve_writes(state, saved, pod)
        if saved is not None and (saved.reserved or saved.extended_name):
            state.write(
                STATE,
                msgspec.structs.replace(
                    saved,
                    reserved_node="",
                    reserved={},
                    extended_name="",
                    extended_requests=[],
                    extended_mappings=[],
                    extended_allocation={},
                ),
            )

    def _unreserve_writes(self, state: CycleState, saved: DraState, pod: PodInfo) -> None:
        kind = RESOURCE_CLAIMS
        snapshot = self.handle.snapshot
        for name, uid in zip(saved.claims, saved.uids, strict=True):
            obj = snapshot.object(kind.group, kind.resource, pod.namespace, name)
            if obj is None or str(obj.metadata.get("uid") or "") != uid:
                continue
            claim = Claim(obj)
            if claim.allocation is None or not claim.is_reserved_for(pod.uid):
                continue
            # Upstream sends a strategic merge patch deleting the pod's entry
            # with the claim's uid as precondition; a merge patch replaces the
            # whole list, so it carries the resourceVersion too (a claim
            # changed meanwhile answers 409 and keeps the entry, which the
            # resource claim controller drops once the pod is gone).
            log.info("%s: pod %s: unreserving claim %s", NAME, pod.key, claim.key)
            state.add_write(
                ObjectWrite.of_kind(
                    kind,
                    claim.namespace,
                    claim.name,
                    {
                        "metadata": {"uid": claim.uid, "resourceVersion": claim.resource_version},
                        "status": {
                            "reservedFor": [
                                r for r in claim.reserved_for if str(r.get("uid") or "") != pod.uid
                            ]
                        },
                    },
                    subresource="status",
                )
            )
        if saved.extended_name:
            # Only a claim PreBind created is in the API; one Reserve only
            # named stays in memory (isSpecialClaimName), nothing to delete.
            obj = snapshot.object(kind.group, kind.resource, pod.namespace, saved.extended_name)
            if obj is not None and Claim(obj).is_reserved_for(pod.uid):
                self._delete_extended_claim(state, pod, saved.extended_name)

    # -- PreBind ---------------------------------------------------------------------------

    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """PreBindPreFlight: Skip for a pod without claims."""
        saved = state.get(STATE)
        if saved is None or saved.empty:
            return Status.skip()
        return SUCCESS

    def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """PreBind (bindClaim for each claim not reserved for the pod yet): the
        claim's allocation from Reserve, if any, and the pod in reservedFor,
        as merge patches the caller applies before binding. Then, when a
        device has binding conditions, upstream's wait for them
        (isPodReadyForBinding, polled every 5 s up to bindingTimeout) as
        rechecks: PreBind answers Wait and the caller calls it again with
        fresh claims (``_check_binding``)."""
        saved = state.get(STATE)
        if saved is None or saved.empty:
            return SUCCESS
        if saved.binding_wait_start:
            return self._check_binding(state, saved, pod)
        if (saved.reserved or saved.extended_name) and saved.reserved_node != node_name:
            return Status.error("claim allocation not found for node")
        try:
            claims = self._claims(saved, pod)
        except ClaimProblem as exc:
            return Status.error(str(exc))
        writes: list[ObjectWrite] = []
        stamp = _rfc3339(self._clock())
        for index, claim in enumerate(claims):
            if claim.is_reserved_for(pod.uid):
                continue
            try:
                writes += bind_claim(claim, pod.proto, saved.reserved.get(index), stamp)
            except ClaimProblem as exc:
                return Status.error(str(exc))
        if saved.extended_name:
            writes += extended_claim_writes(saved, pod.proto, stamp)
        for w in writes:
            state.add_write(w)
        # The claims as these writes leave them: hasBindingConditions, then
        # the wait's first check (PollUntilContextTimeout's immediate one).
        written = [
            _written_view(c.name, c.data, saved.reserved.get(i), stamp)
            for i, c in enumerate(claims)
        ]
        if saved.extended_name:
            written.append(_written_view(saved.extended_name, {}, saved.extended_allocation, stamp))
        if not any(_has_binding_conditions(alloc) for _, alloc, _ in written):
            return SUCCESS
        start = self._clock()
        log.info(
            "%s: pod %s: waiting for binding conditions for device on node %s",
            NAME,
            pod.key,
            node_name,
        )
        state.write(STATE, msgspec.structs.replace(saved, binding_wait_start=start))
        return self._binding_verdict(state, written, start)

    def _check_binding(self, state: CycleState, saved: DraState, pod: PodInfo) -> Status:
        """A later PreBind call of a binding cycle waiting for binding
        conditions: the pod's claims as this call's snapshot has them (the
        claim made for extended resources too)."""
        kind = RESOURCE_CLAIMS
        snapshot = self.handle.snapshot
        names = [*saved.claims, *([saved.extended_name] if saved.extended_name else [])]
        current: list[tuple[str, Mapping[str, Any] | None, Mapping[str, Any]]] = []
        for name in names:
            obj = snapshot.object(kind.group, kind.resource, pod.namespace, name)
            if obj is None:
                # isPodReadyForBinding: the lister's NotFound.
                return Status.error(f'resourceclaim.resource.k8s.io "{name}" not found')
            claim = Claim(obj)
            current.append((claim.name, claim.allocation, claim.status))
        return self._binding_verdict(state, current, saved.binding_wait_start)

    def _binding_verdict(
        self,
        state: CycleState,
        claims: Sequence[tuple[str, Mapping[str, Any] | None, Mapping[str, Any]]],
        start: float,
    ) -> Status:
        """One poll of PreBind's wait (isPodReadyForBinding): Success when
        every claim's devices have their binding conditions true; an Error
        when a failure condition is true, a claim's allocation is older than
        bindingTimeout, or the wait itself has lasted bindingTimeout; else
        Wait, rechecked in 5 s (or when the wait's deadline comes)."""
        now = self._clock()
        deadline = start + self.binding_timeout
        if now >= deadline:
            # PollUntilContextTimeout's context expired before this poll.
            return Status.error(f"{ERR_DEVICE_BINDING_TIMEOUT}: context deadline exceeded")
        for name, allocation, status in claims:
            try:
                ready = claim_ready_for_binding(name, allocation, status)
            except BindingFailed as exc:
                return Status.error(str(exc))
            if not ready:
                if self._claim_timed_out(allocation):
                    return Status.error(f"{ERR_DEVICE_BINDING_TIMEOUT}: claim={name}")
                state.recheck_pre_bind_after(min(BINDING_POLL_SECONDS, deadline - now))
                return Status.wait(f"waiting for binding conditions of claim {name}")
        return SUCCESS


class BindingFailed(Exception):
    """A device's binding failure condition is true (ErrDeviceBindingFailed);
    the message is upstream's."""


def _has_binding_conditions(allocation: Mapping[str, Any] | None) -> bool:
    """hasBindingConditions, for one claim's allocation."""
    if allocation is None:
        return False
    return any(
        isinstance(r, dict) and as_list(r, "bindingConditions")
        for r in as_list(as_map(allocation, "devices"), "results")
    )


def _written_view(
    name: str, data: Mapping[str, Any], allocation: Mapping[str, Any] | None, stamp: str
) -> tuple[str, Mapping[str, Any] | None, Mapping[str, Any]]:
    """(name, allocation, status) of a claim as PreBind's writes leave it:
    Reserve's allocation stamped with ``stamp`` when it gets one now, its
    own otherwise (stamped when it had no allocationTimestamp)."""
    status = as_map(data, "status")
    current = status.get("allocation")
    if allocation is not None:
        return name, {**allocation, "allocationTimestamp": stamp}, status
    if isinstance(current, dict):
        if not current.get("allocationTimestamp"):
            current = {**current, "allocationTimestamp": stamp}
        return name, current, status
    return name, None, status


def _condition(device: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """apimeta.FindStatusCondition."""
    for c in as_list(device, "conditions"):
        if isinstance(c, dict) and c.get("type") == kind:
            return c
    return None


def claim_ready_for_binding(
    name: str, allocation: Mapping[str, Any] | None, status: Mapping[str, Any]
) -> bool:
    """isClaimReadyForBinding: every allocated device with binding conditions
    has them all true in the claim's status.devices; BindingFailed when one
    of its failure conditions is true."""
    if allocation is None:
        return False
    statuses = [d for d in as_list(status, "devices") if isinstance(d, dict)]
    for result in as_list(as_map(allocation, "devices"), "results"):
        if not isinstance(result, dict) or not as_list(result, "bindingConditions"):
            continue
        device = next(
            (
                d
                for d in statuses
                if (d.get("driver"), d.get("pool"), d.get("device"))
                == (result.get("driver"), result.get("pool"), result.get("device"))
            ),
            None,
        )
        if device is None:
            return False
        for failure in as_list(result, "bindingFailureConditions"):
            cond = _condition(device, str(failure))
            if cond is not None and cond.get("status") == "True":
                raise BindingFailed(
                    f"{ERR_DEVICE_BINDING_FAILED}: claim={name}, "
                    f"reason={str(cond.get('reason') or '')[:1024]}, "
                    f"message={quote(str(cond.get('message') or '')[:32768])}"
                )
        for wanted in as_list(result, "bindingConditions"):
            cond = _condition(device, str(wanted))
            if cond is None or cond.get("status") != "True":
                return False
    return True


def bind_claim(
    claim: Claim, pod: cpb.Pod, allocation: Mapping[str, Any] | None, stamp: str
) -> list[ObjectWrite]:
    """bindClaim's API updates as merge patches: the finalizer first when the
    claim gets its allocation now (a normal update upstream), then the status
    with the allocation (its allocationTimestamp set, as with binding
    conditions on; ``stamp``, the time now) and the pod appended to
    reservedFor. Each patch carries the
    claim's resourceVersion as the plugin saw it, so the API server refuses it
    (409) when the claim changed meanwhile; the caller carries that version
    forward across its own writes to the same claim (protos/README.md,
    "Writes")."""
    if claim.deleting:
        raise ClaimProblem(f"claim {claim.key} got deleted in the meantime")
    rv = claim.resource_version
    writes: list[ObjectWrite] = []
    status: dict[str, Any] = {}
    if allocation is not None:
        if claim.allocation is not None:
            raise ClaimProblem(f"claim {claim.key} got allocated elsewhere in the meantime")
        finalizers = claim.finalizers
        if FINALIZER not in finalizers:
            writes.append(
                ObjectWrite.of_kind(
                    RESOURCE_CLAIMS,
                    claim.namespace,
                    claim.name,
                    {"metadata": {"resourceVersion": rv, "finalizers": [*finalizers, FINALIZER]}},
                )
            )
        status["allocation"] = {**allocation, "allocationTimestamp": stamp}
    elif claim.allocation is None:
        raise ClaimProblem(f"claim {claim.key} got deallocated elsewhere in the meantime")
    elif not claim.allocation.get("allocationTimestamp"):
        status["allocation"] = {"allocationTimestamp": stamp}
    status["reservedFor"] = [*claim.reserved_for, pod_consumer(pod)]
    writes.append(
        ObjectWrite.of_kind(
            RESOURCE_CLAIMS,
            claim.namespace,
            claim.name,
            {"metadata": {"resourceVersion": rv}, "status": status},
            subresource="status",
        )
    )
    return writes


def extended_claim_writes(saved: DraState, pod: cpb.Pod, stamp: str) -> list[ObjectWrite]:
    """bindClaim for the claim of the pod's extended resources, as writes:
    create it (createExtendedResourceClaimInAPI; with the finalizer bindClaim
    adds right after), its status with Reserve's allocation and the pod in
    reservedFor, then the pod's status.extendedResourceClaimStatus
    (patchPodExtendedResourceClaimStatus)."""
    kind = RESOURCE_CLAIMS
    name = saved.extended_name
    return [
        ObjectWrite.of_kind(
            kind,
            pod.namespace,
            name,
            claim_object(pod, name, saved.extended_requests, finalizers=[FINALIZER]),
            create=True,
        ),
        ObjectWrite.of_kind(
            kind,
            pod.namespace,
            name,
            {
                "status": {
                    "allocation": {**saved.extended_allocation, "allocationTimestamp": stamp},
                    "reservedFor": [pod_consumer(pod)],
                }
            },
            subresource="status",
        ),
        ObjectWrite(
            "",
            "v1",
            "pods",
            pod.namespace,
            pod.name,
            {
                "status": {
                    "extendedResourceClaimStatus": {
                        "requestMappings": saved.extended_mappings,
                        "resourceClaimName": name,
                    }
                }
            },
            subresource="status",
        ),
    ]


def compute_score(
    claims: Sequence[Claim], to_allocate: Sequence[int], results: Sequence[Mapping[str, Any]]
) -> int:
    """computeScore: for each subrequest of a prioritized list that the
    allocation picked, FirstAvailableDeviceRequestMaxSize minus its place."""
    score = 0
    fresh = dict(zip(to_allocate, results, strict=False))
    for index, claim in enumerate(claims):
        allocation = claim.allocation if claim.allocation is not None else fresh.get(index)
        if allocation is None:
            continue
        picked = {
            str(r.get("request"))
            for r in as_list(as_map(allocation, "devices"), "results")
            if isinstance(r, dict) and str(r.get("request") or "").count("/") == 1
        }
        for req in claim.requests:
            if req.get("exactly") is not None:
                continue
            for i, sub in enumerate(as_list(req, "firstAvailable")):
                if isinstance(sub, dict) and f"{req.get('name')}/{sub.get('name')}" in picked:
                    score += FIRST_AVAILABLE_MAX - i
    return score


def _allocation_node_selector(
    allocation: Mapping[str, Any],
) -> tuple[tuple[SelectorTerm, ...] | None, list[Any]]:
    """status.allocation.nodeSelector parsed (nodeaffinity.NewNodeSelector);
    (None, []) when it has none."""
    selector = allocation.get("nodeSelector")
    if not isinstance(selector, dict):
        return None, []
    terms = cpb.NodeSelector()
    for t in as_list(selector, "nodeSelectorTerms"):
        term = terms.terms.add()
        if not isinstance(t, dict):
            continue
        for src, dst in (
            (as_list(t, "matchExpressions"), term.match_expressions),
            (as_list(t, "matchFields"), term.match_fields),
        ):
            for r in src:
                if isinstance(r, dict):
                    dst.add(
                        key=str(r.get("key") or ""),
                        operator=str(r.get("operator") or ""),
                        values=[str(v) for v in as_list(r, "values")],
                    )
    parsed, errors = compile_node_selector(terms.terms, "nodeSelector")
    return parsed, list(errors)


# -- queueing hints ------------------------------------------------------------------------


def is_schedulable_after_claim_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """isSchedulableAfterClaimChange, on the pod and the two claims alone (a
    hint sees no cluster state): the pod's own claims are found by name."""
    if not isinstance(new, ClusterObject):
        return QueueingHint.QUEUE
    try:
        names = {name for _, name, _ in claim_names(pod.proto) if name is not None}
    except ClaimProblem:
        return QueueingHint.QUEUE_SKIP
    old_status = as_map(old.data, "status") if isinstance(old, ClusterObject) else None
    new_status = as_map(new.data, "status")
    if (
        old_status is not None
        and isinstance(old_status.get("allocation"), dict)
        and not isinstance(new_status.get("allocation"), dict)
    ):
        # Deallocated: its devices may now be free for this pod.
        return QueueingHint.QUEUE
    if new.namespace != pod.namespace or new.name not in names:
        return QueueingHint.QUEUE_SKIP
    if old_status is None:
        return QueueingHint.QUEUE
    if old_status == new_status:
        return QueueingHint.QUEUE_SKIP
    return QueueingHint.QUEUE


def is_schedulable_after_pod_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """isSchedulableAfterPodChange: the pod itself now names every claim it
    needs (its generated claims are in its status)."""
    if not isinstance(new, PodInfo) or new.uid != pod.uid:
        return QueueingHint.QUEUE_SKIP
    try:
        claim_names(new.proto)
    except ClaimProblem:
        return QueueingHint.QUEUE_SKIP
    return QueueingHint.QUEUE
