"""PreFilter + Filter + Reserve + PreBind plugin GPUCardFit: a pod's GPU
memory must fit on a single card (Berth's own plugin, not upstream's; never in
the default profile)."""

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
