"""Filter plugin AvoidNodePlugin: keep pods off nodes labelled ``avoid=true``
(the first example of the seed document scheduler-framework-plugins.txt)."""

from berth.plugins.avoidnode.args import AvoidNodePluginArgs
from berth.plugins.avoidnode.avoid_node import AVOID_LABEL, AVOID_VALUE, AvoidNode, reason_for

__all__ = ["AVOID_LABEL", "AVOID_VALUE", "AvoidNode", "AvoidNodePluginArgs", "reason_for"]
