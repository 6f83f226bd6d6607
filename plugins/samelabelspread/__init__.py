"""Score plugin SameLabelSpread: prefer nodes with fewer pods carrying all of
the incoming pod's labels (Berth's own plugin, not upstream's; never in the
default profile)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.samelabelspread.args import SameLabelSpreadArgs
    from berth.plugins.samelabelspread.same_label_spread import (
        SCORE_PER_POD,
        SameLabelSpread,
        count_matching,
        matches_all,
        spread_score,
    )

__all__ = [
    "SCORE_PER_POD",
    "SameLabelSpread",
    "SameLabelSpreadArgs",
    "count_matching",
    "matches_all",
    "spread_score",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
