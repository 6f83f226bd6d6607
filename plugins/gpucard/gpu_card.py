"""GPUCardFit: a pod's GPU memory must fit on one card; cards are not split.

NodeResourcesFit only checks totals, but GPU memory cannot be split across
cards: a pod asking for 40G must not land on a node with two cards of 30G
free each. So the plugin checks whether one card can hold the pod's need and
rejects the node with ``UnschedulableAndUnresolvable`` and
``no free GPU card`` (preempting pods does not split a card either).

Data: the node's cards come from its first source among DRA ResourceSlices,
NVIDIA GPU Feature Discovery labels, HAMi's annotation and Berth's own
``berth.dev/gpu-cards`` (framework/gpus.py; the README shows each); the
pod's need from ``berth.dev/gpu-memory``, e.g. ``"40Gi"``; what is taken
from the source (DRA: devices allocated in ResourceClaims) and from every
other pod on the node that carries ``berth.dev/gpu-card`` (a card id), which
takes its own ``berth.dev/gpu-memory`` on that card (a DRA device without
multiple allocations: the whole card). Annotation keys are args (args.py).
Decisions name the source: ``no free GPU card (GFD labels)``.

Extension points:

* PreFilter reads the pod's need once; a pod without the annotation is
  skipped (Filter does not run for it), an invalid one is rejected.
* Filter: some card has at least the need free, or UnschedulableAndUnresolvable
  ``no free GPU card``.
* Reserve picks the card (best fit: the card with the least free memory that
  holds the need, the first in the source's order among equals), keeps it in the CycleState and
  puts ``berth.dev/gpu-card: <card id>`` on the caller's assumed copy of the pod
  (``annotate_assumed_pod``): the next cycles, and the next pods of a batch,
  see the pod on that card, so two pods in flight never take the same memory.
* Unreserve forgets the choice; the caller drops its assumed copy, and with
  it the annotation.
* PreBind writes ``berth.dev/gpu-card: <card id>`` on the pod (a merge patch the
  caller applies before binding), for the device plugin to read, and so that
  the card stays taken once the pod is bound.

The plugin server keeps nothing between calls: every number comes from the
snapshot the caller sent.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, ClassVar, Final

import msgspec

from berth.framework.cycle_state import CycleState, StateKey
from berth.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from berth.framework.gpus import (
    GFD_COUNT_LABEL,
    GFD_MEMORY_LABEL,
    GFD_REPLICAS_LABEL,
    HAMI_ANNOTATION,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Card,
    DraInventory,
    NodeGPUs,
    card_use,
    parse_berth_cards,
    parse_card_id,
    parse_memory,
    read_node_gpus,
)
from berth.framework.interfaces import (
    FilterPlugin,
    NodeVerdicts,
    PreBindPlugin,
    PreFilterPlugin,
    PreFilterResult,
    ReservePlugin,
)
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.objects import ClusterObject, ObjectKind, pod_write
from berth.framework.snapshot import NodeBatch
from berth.framework.status import SUCCESS, Status
from berth.framework.units import shorten
from berth.plugins.gpucard.args import GPUCardFitArgs

if TYPE_CHECKING:
    from berth.framework.handle import Handle

__all__ = [
    "CHOSEN_CARD",
    "NAME",
    "POD_NEED",
    "REASON_NO_CARD",
    "ChosenCard",
    "GPUCardFit",
    "GPUNeed",
    "cards_annotation",
    "parse_cards",
    "parse_memory",
]

log = logging.getLogger(__name__)

NAME: Final = "GPUCardFit"
# Filter's reason, with code UnschedulableAndUnresolvable.
REASON_NO_CARD: Final = "no free GPU card"


class GPUNeed(msgspec.Struct, frozen=True):
    """The pod's GPU memory need in bytes (PreFilter, read by Filter)."""

    memory: int


class ChosenCard(msgspec.Struct, frozen=True):
    """The card Reserve gave the pod (read by PreBind)."""

    node: str
    card: str


POD_NEED: Final = StateKey(f"{NAME}/need", GPUNeed)
CHOSEN_CARD: Final = StateKey(f"{NAME}/card", ChosenCard)


# Berth's own annotation's parser, under the name this module has always had.
parse_cards = parse_berth_cards


class GPUCardFit(
    PreFilterPlugin[GPUCardFitArgs],
    FilterPlugin[GPUCardFitArgs],
    ReservePlugin[GPUCardFitArgs],
    PreBindPlugin[GPUCardFitArgs],
):
    name: ClassVar[str] = NAME
    Args: ClassVar[type[Any] | None] = GPUCardFitArgs

    def __init__(self, args: GPUCardFitArgs | None = None, handle: Handle | None = None) -> None:
        cfg = GPUCardFitArgs() if args is None else args
        # Checked here too, so a plugin built in code is checked like one built
        # from a configuration file.
        cfg.validate()
        super().__init__(cfg, handle)
        self.cfg = cfg

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        """ResourceSlices (the DRA source) and ResourceClaims (what their
        allocations take), unless ``draDrivers`` is empty."""
        cfg = args if isinstance(args, GPUCardFitArgs) else GPUCardFitArgs()
        return (RESOURCE_SLICES, RESOURCE_CLAIMS) if cfg.dra_drivers else ()

    # -- queueing hints --------------------------------------------------------------

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """What may free or add a card for a pod this plugin rejected: a node
        added or its card labels or annotations changed, a pod given a card
        deleted, a GPU driver's ResourceSlice added or changed, a
        ResourceClaim's allocation released."""
        node_actions = (
            ActionType.ADD | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_ANNOTATION
        )
        events = [
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, node_actions), self._node_hint),
            ClusterEventWithHint(
                ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE), self._pod_hint
            ),
        ]
        if self.cfg.dra_drivers:
            events += [
                ClusterEventWithHint(
                    ClusterEvent(EventResource.RESOURCE_SLICE, ActionType.ADD | ActionType.UPDATE),
                    self._slice_hint,
                ),
                ClusterEventWithHint(
                    ClusterEvent(
                        EventResource.RESOURCE_CLAIM, ActionType.UPDATE | ActionType.DELETE
                    ),
                    self._claim_hint,
                ),
            ]
        return events

    def _card_keys(self, node: NodeInfo) -> tuple[str | None, ...]:
        """The node's values of every label and annotation a card source reads."""
        labels, annotations = node.node.labels, node.node.annotations
        return (
            labels.get(GFD_COUNT_LABEL),
            labels.get(GFD_MEMORY_LABEL),
            labels.get(GFD_REPLICAS_LABEL),
            annotations.get(HAMI_ANNOTATION),
            annotations.get(self.cfg.node_cards_annotation),
        )

    def _node_hint(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue for a new node with card labels or annotations, or a node
        whose card labels or annotations changed."""
        if not isinstance(new, NodeInfo):
            return QueueingHint.QUEUE_SKIP
        keys = self._card_keys(new)
        if not isinstance(old, NodeInfo):
            changed = any(k is not None for k in keys)
        else:
            changed = keys != self._card_keys(old)
        return QueueingHint.QUEUE if changed else QueueingHint.QUEUE_SKIP

    def _pod_hint(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue when the deleted pod had been given a card."""
        had_card = isinstance(old, PodInfo) and self.cfg.pod_card_annotation in (
            old.proto.annotations
        )
        return QueueingHint.QUEUE if had_card else QueueingHint.QUEUE_SKIP

    def _slice_hint(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue for a slice of a GPU driver."""
        if not isinstance(new, ClusterObject):
            return QueueingHint.QUEUE_SKIP
        try:
            spec = new.data.get("spec")
        except ValueError:
            return QueueingHint.QUEUE_SKIP
        driver = spec.get("driver") if isinstance(spec, dict) else None
        return QueueingHint.QUEUE if driver in self.cfg.dra_drivers else QueueingHint.QUEUE_SKIP

    def _claim_hint(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue when a claim's allocation is released (or the claim with it
        deleted)."""
        if not _allocated(old):
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE_SKIP if _allocated(new) else QueueingHint.QUEUE

    # -- reading the annotations ---------------------------------------------------

    def pod_need(self, pod: PodInfo) -> int | None:
        """The pod's need in bytes, None when it needs no GPU memory;
        ValueError for an annotation that is not a positive quantity."""
        key = self.cfg.pod_memory_annotation
        value = pod.proto.annotations.get(key)
        if value is None:
            return None
        try:
            need = parse_memory(value)
        except ValueError as exc:
            raise ValueError(f"pod annotation {key}: {exc}") from exc
        if need == 0:
            raise ValueError(f"pod annotation {key}: {shorten(value)} must be more than 0")
        return need

    def _need(self, state: CycleState, pod: PodInfo) -> int | None:
        """From PreFilter's state, or read again when PreFilter did not run."""
        saved = state.get(POD_NEED)
        return saved.memory if saved is not None else self.pod_need(pod)

    def inventory(self) -> DraInventory | None:
        """The DRA devices of the snapshot, indexed on first use (one per
        call); None when no DRA driver is configured."""
        if not self.cfg.dra_drivers:
            return None
        return DraInventory(self.handle.snapshot, self.cfg.dra_drivers)

    def free_memory(self, node: NodeInfo, exclude_uid: str = "") -> list[int]:
        """Each card's free memory after the node's pods (other than
        ``exclude_uid``) and, for DRA devices, the claims' allocations; []
        for a node without cards. ValueError when its source does not
        parse. For tools and tests; the extension points use ``_choose``."""
        dra = self.inventory()
        gpus = read_node_gpus(node, dra, self.cfg.node_cards_annotation)
        if gpus is None:
            return []
        if gpus.problem:
            raise ValueError(gpus.problem)
        key, memory_key = self.cfg.pod_card_annotation, self.cfg.pod_memory_annotation
        return card_use(gpus, node, key, memory_key, exclude_uid, dra).free

    def _choose(
        self, pod: PodInfo, need: int, node: NodeInfo, dra: DraInventory | None
    ) -> tuple[NodeGPUs | None, int | None, int, Status]:
        """(the node's cards, the best-fit card's position, its free memory,
        SUCCESS), or a rejection: the node has no card source, its source
        does not parse, or no card holds the need."""
        gpus = read_node_gpus(node, dra, self.cfg.node_cards_annotation)
        if gpus is None:
            return None, None, 0, Status.unresolvable(REASON_NO_CARD)
        if gpus.problem:
            return gpus, None, 0, Status.unresolvable(gpus.problem)
        use = card_use(
            gpus,
            node,
            self.cfg.pod_card_annotation,
            self.cfg.pod_memory_annotation,
            pod.uid,
            dra,
        )
        best = use.best_fit(gpus.cards, need)
        if best is None:
            return gpus, None, 0, Status.unresolvable(f"{REASON_NO_CARD} ({gpus.explain()})")
        return gpus, best, use.free[best], SUCCESS

    # -- extension points --------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        try:
            need = self.pod_need(pod)
        except ValueError as exc:
            return None, Status.unresolvable(str(exc))
        if need is None:
            return None, Status.skip()
        state.write(POD_NEED, GPUNeed(need))
        return None, SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return self._filter(state, pod, node, self.inventory())

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        """The batch form: ResourceSlices and ResourceClaims are indexed once
        for all the nodes."""
        dra = self.inventory()
        return NodeVerdicts.from_statuses([self._filter(state, pod, ni, dra) for ni in nodes])

    def _filter(
        self, state: CycleState, pod: PodInfo, node: NodeInfo, dra: DraInventory | None
    ) -> Status:
        try:
            need = self._need(state, pod)
        except ValueError as exc:
            return Status.unresolvable(str(exc))
        if need is None:
            return SUCCESS
        gpus, best, _, status = self._choose(pod, need, node, dra)
        if gpus is not None and log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s: pod %s on node %s: cards from %s: %s",
                NAME,
                pod.key,
                node.name,
                gpus.name(),
                "fits card " + gpus.cards[best].describe() if best is not None else status.message,
            )
        return status

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        try:
            need = self._need(state, pod)
        except ValueError as exc:
            return Status.unresolvable(str(exc))
        if need is None:
            return SUCCESS
        node = self.handle.snapshot.nodes.get(node_name)
        if node is None:
            return Status.error(f"node {node_name} is not in the snapshot")
        gpus, best, free, status = self._choose(pod, need, node, self.inventory())
        if gpus is None or best is None:
            # Another pod took the memory since Filter (a later snapshot).
            return status
        card: Card = gpus.cards[best]
        state.write(CHOSEN_CARD, ChosenCard(node_name, card.id))
        state.annotate_assumed_pod(self.cfg.pod_card_annotation, card.id)
        log.info(
            "%s: pod %s reserved GPU card %s on node %s, cards from %s "
            "(needs %d bytes, %d free before)",
            NAME,
            pod.key,
            card.describe(),
            node_name,
            gpus.name(),
            need,
            free,
        )
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        state.delete(CHOSEN_CARD)

    def _chosen(self, state: CycleState, pod: PodInfo, node_name: str) -> str | None:
        """Reserve's card: from the CycleState, else from the caller's assumed
        copy of the pod in the snapshot (which carries Reserve's annotation)."""
        chosen = state.get(CHOSEN_CARD)
        if chosen is not None and chosen.node == node_name:
            return chosen.card
        node = self.handle.snapshot.nodes.get(node_name)
        assumed = None if node is None else node.pods.get(pod.uid)
        # Only the caller's assumed copy carries Reserve's annotation
        # (Pod.assumed); any other record's annotation may be stale.
        if assumed is None or not assumed.proto.assumed:
            return None
        text = assumed.proto.annotations.get(self.cfg.pod_card_annotation)
        return None if text is None else parse_card_id(text)

    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Skip for a pod without the GPU memory annotation: its PreBind
        writes nothing. Success otherwise (also for an annotation that does
        not parse: PreBind reports it)."""
        try:
            need = self._need(state, pod)
        except ValueError:
            return SUCCESS
        return Status.skip() if need is None else SUCCESS

    def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        try:
            need = self._need(state, pod)
        except ValueError as exc:
            return Status.unresolvable(str(exc))
        if need is None:
            return SUCCESS
        card = self._chosen(state, pod, node_name)
        if card is None:
            return Status.error(
                f"pod {pod.key} has no GPU card reserved on node {node_name} "
                "(Reserve did not run for this node)"
            )
        state.add_write(
            pod_write(
                pod.namespace,
                pod.name,
                {"metadata": {"annotations": {self.cfg.pod_card_annotation: card}}},
            )
        )
        return SUCCESS


def _allocated(claim: Any) -> bool:
    """Is ``claim`` a ResourceClaim with an allocation?"""
    if not isinstance(claim, ClusterObject):
        return False
    try:
        status = claim.data.get("status")
    except ValueError:
        return False
    return isinstance(status, dict) and isinstance(status.get("allocation"), dict)


def cards_annotation(cards: list[str] | list[int]) -> str:
    """The node annotation's value for ``cards`` (quantities or bytes), for
    tests and tools."""
    return json.dumps(cards)
