"""Filter plugin AvoidNodePlugin: keep pods off nodes labelled ``avoid=true``
(Berth's own plugin, not upstream's; never in the default profile)."""

from berth.plugins.avoidnode.args import AvoidNodePluginArgs
from berth.plugins.avoidnode.avoid_node import AVOID_LABEL, AVOID_VALUE, AvoidNode, reason_for

__all__ = ["AVOID_LABEL", "AVOID_VALUE", "AvoidNode", "AvoidNodePluginArgs", "reason_for"]
