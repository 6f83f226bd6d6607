"""Filter plugin AvoidNodePlugin: keep pods off nodes labelled ``avoid=true``
(Berth's own plugin, not upstream's; never in the default profile)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.avoidnode.args import AvoidNodePluginArgs
    from berth.plugins.avoidnode.avoid_node import (
        AVOID_LABEL,
        AVOID_VALUE,
        AvoidNode,
        reason_for,
    )

__all__ = ["AVOID_LABEL", "AVOID_VALUE", "AvoidNode", "AvoidNodePluginArgs", "reason_for"]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
