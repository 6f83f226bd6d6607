"""PreFilter + Filter + Reserve + PreBind plugin GPUCardFit: a pod's GPU
memory must fit on a single card (Berth's own plugin, not upstream's; never in
the default profile)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.gpucard.args import (
        DEFAULT_NODE_CARDS_ANNOTATION,
        DEFAULT_POD_CARD_ANNOTATION,
        DEFAULT_POD_MEMORY_ANNOTATION,
        GPUCardFitArgs,
    )
    from berth.plugins.gpucard.gpu_card import (
        CHOSEN_CARD,
        NAME,
        POD_NEED,
        REASON_NO_CARD,
        ChosenCard,
        GPUCardFit,
        GPUNeed,
        cards_annotation,
        parse_cards,
        parse_memory,
    )

__all__ = [
    "CHOSEN_CARD",
    "DEFAULT_NODE_CARDS_ANNOTATION",
    "DEFAULT_POD_CARD_ANNOTATION",
    "DEFAULT_POD_MEMORY_ANNOTATION",
    "NAME",
    "POD_NEED",
    "REASON_NO_CARD",
    "ChosenCard",
    "GPUCardFit",
    "GPUCardFitArgs",
    "GPUNeed",
    "cards_annotation",
    "parse_cards",
    "parse_memory",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
