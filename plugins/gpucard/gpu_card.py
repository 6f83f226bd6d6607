"""GPUCardFit: a pod's GPU memory must fit on one card; cards are not split.

NodeResourcesFit only checks totals, but GPU memory cannot be split across
cards: a pod asking for 40G must not land on a node with two cards of 30G
free each. So the plugin checks whether one card can hold the pod's need and
rejects the node with ``UnschedulableAndUnresolvable`` and
``no free GPU card`` (preempting pods does not split a card either).

Data (annotation keys are args; see args.py):

* the node's cards: ``berth.dev/gpu-cards``, a JSON list of each card's
  memory available to pods, e.g. ``["80Gi", "40Gi"]``;
* the pod's need: ``berth.dev/gpu-memory``, e.g. ``"40Gi"``;
* what is taken: every other pod in the snapshot on the node that carries
  ``berth.dev/gpu-card`` (a card index) takes its own ``berth.dev/gpu-memory``
  on that card. A card's free memory is its memory minus what is taken.

Extension points:

* PreFilter reads the pod's need once; a pod without the annotation is
  skipped (Filter does not run for it), an invalid one is rejected.
* Filter: some card has at least the need free, or UnschedulableAndUnresolvable
  ``no free GPU card``.
* Reserve picks the card (best fit: the card with the least free memory that
  holds the need, lowest index among equals), keeps it in the CycleState and
  puts ``berth.dev/gpu-card: <index>`` on the caller's assumed copy of the pod
  (``annotate_assumed_pod``): the next cycles, and the next pods of a batch,
  see the pod on that card, so two pods in flight never take the same memory.
* Unreserve forgets the choice; the caller drops its assumed copy, and with
  it the annotation.
* PreBind writes ``berth.dev/gpu-card: <index>`` on the pod (a merge patch the
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
from berth.framework.interfaces import (
    FilterPlugin,
    PreBindPlugin,
    PreFilterPlugin,
    PreFilterResult,
    ReservePlugin,
)
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.objects import pod_write
from berth.framework.snapshot import NodeBatch
from berth.framework.status import SUCCESS, Status
from berth.framework.units import QuantityError, parse_quantity, shorten
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
    "best_fit",
    "cards_annotation",
    "parse_card_index",
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
    card: int


POD_NEED: Final = StateKey(f"{NAME}/need", GPUNeed)
CHOSEN_CARD: Final = StateKey(f"{NAME}/card", ChosenCard)


def parse_memory(value: object) -> int:
    """A memory amount in bytes (rounded up) from a quantity string or an
    integer; ValueError saying why not. Bounded cost whatever the value
    (framework/units.py)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f'{shorten(value)} is not a quantity (e.g. "40Gi", "40G")')
    if isinstance(value, int) and value.bit_length() > 63:
        raise ValueError(f"{shorten(value)} is out of range (an int64)")
    try:
        amount = parse_quantity(str(value)).value()
    except QuantityError as exc:
        raise ValueError(str(exc)) from exc
    if amount < 0:
        raise ValueError(f"{shorten(value)} is negative")
    return amount


# A node's card list longer than this is refused: more GPUs than any node
# holds, and each Filter call walks the list.
MAX_CARDS: Final = 64
# The annotation's text beyond this is refused before it is decoded.
MAX_CARDS_TEXT: Final = 8 * 1024


def parse_cards(text: str) -> list[int]:
    """The node annotation's card list as bytes per card; ValueError saying
    what is wrong (with the entry's index)."""
    if len(text) > MAX_CARDS_TEXT:
        raise ValueError(
            f"{len(text)} characters, at most {MAX_CARDS_TEXT} are read "
            '(want a JSON list such as ["80Gi", "40Gi"])'
        )
    try:
        cards = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f'not JSON (want e.g. ["80Gi", "40Gi"]): {shorten(str(exc))}') from exc
    if not isinstance(cards, list):
        raise ValueError(f'want a JSON list such as ["80Gi", "40Gi"], got {type(cards).__name__}')
    if len(cards) > MAX_CARDS:
        raise ValueError(f"{len(cards)} cards, at most {MAX_CARDS} are read")
    out: list[int] = []
    for i, entry in enumerate(cards):
        try:
            out.append(parse_memory(entry))
        except ValueError as exc:
            raise ValueError(f"card {i}: {exc}") from exc
    return out


def parse_card_index(text: str) -> int | None:
    """A pod's card annotation as an index, None when it is not one."""
    # A card index has a few digits; int() of a long one would be refused.
    return int(text) if len(text) <= 6 and text.isascii() and text.isdigit() else None


def best_fit(free: list[int], need: int) -> int | None:
    """The card with the least free memory that still holds ``need`` (lowest
    index among equals); None when no card does."""
    best: int | None = None
    for i, left in enumerate(free):
        if left >= need and (best is None or left < free[best]):
            best = i
    return best


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

    def free_memory(self, node: NodeInfo, exclude_uid: str = "") -> list[int]:
        """Each card's memory minus what the node's pods (other than
        ``exclude_uid``) took on it; [] for a node without the annotation.
        ValueError for an annotation that does not parse."""
        key = self.cfg.node_cards_annotation
        text = node.node.annotations.get(key)
        if text is None:
            return []
        try:
            free = parse_cards(text)
        except ValueError as exc:
            raise ValueError(f"node annotation {key}: {exc}") from exc
        card_key, memory_key = self.cfg.pod_card_annotation, self.cfg.pod_memory_annotation
        for uid, other in node.pods.items():
            if uid == exclude_uid:
                continue
            annotations = other.proto.annotations
            card_text = annotations.get(card_key)
            if card_text is None:
                continue
            card = parse_card_index(card_text)
            if card is None or card >= len(free):
                log.debug(
                    "%s: pod %s on node %s has %s=%r, not a card of the node (%d cards): "
                    "not counted",
                    NAME,
                    other.key,
                    node.name,
                    card_key,
                    card_text,
                    len(free),
                )
                continue
            try:
                free[card] -= parse_memory(annotations.get(memory_key, "0"))
            except ValueError as exc:
                log.debug(
                    "%s: pod %s on node %s: %s %s: not counted",
                    NAME,
                    other.key,
                    node.name,
                    memory_key,
                    exc,
                )
        return free

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
        try:
            need = self._need(state, pod)
            if need is None:
                return SUCCESS
            free = self.free_memory(node, pod.uid)
        except ValueError as exc:
            return Status.unresolvable(str(exc))
        if best_fit(free, need) is None:
            return Status.unresolvable(REASON_NO_CARD)
        return SUCCESS

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        try:
            need = self._need(state, pod)
            if need is None:
                return SUCCESS
            node = self.handle.snapshot.nodes.get(node_name)
            if node is None:
                return Status.error(f"node {node_name} is not in the snapshot")
            free = self.free_memory(node, pod.uid)
        except ValueError as exc:
            return Status.unresolvable(str(exc))
        card = best_fit(free, need)
        if card is None:
            # Another pod took the memory since Filter (a later snapshot).
            return Status.unresolvable(REASON_NO_CARD)
        state.write(CHOSEN_CARD, ChosenCard(node_name, card))
        state.annotate_assumed_pod(self.cfg.pod_card_annotation, str(card))
        log.info(
            "%s: pod %s reserved GPU card %d on node %s (needs %d bytes, %d free before)",
            NAME,
            pod.key,
            card,
            node_name,
            need,
            free[card],
        )
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        state.delete(CHOSEN_CARD)

    def _chosen(self, state: CycleState, pod: PodInfo, node_name: str) -> int | None:
        """Reserve's card: from the CycleState, else from the caller's assumed
        copy of the pod in the snapshot (which carries Reserve's annotation)."""
        chosen = state.get(CHOSEN_CARD)
        if chosen is not None and chosen.node == node_name:
            return chosen.card
        node = self.handle.snapshot.nodes.get(node_name)
        assumed = None if node is None else node.pods.get(pod.uid)
        if assumed is None:
            return None
        text = assumed.proto.annotations.get(self.cfg.pod_card_annotation)
        return None if text is None else parse_card_index(text)

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
                {"metadata": {"annotations": {self.cfg.pod_card_annotation: str(card)}}},
            )
        )
        return SUCCESS


def cards_annotation(cards: list[str] | list[int]) -> str:
    """The node annotation's value for ``cards`` (quantities or bytes), for
    tests and tools."""
    return json.dumps(cards)
