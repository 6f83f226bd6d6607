"""An out-of-tree Berth plugin: PreferLabel (Filter, Score), found by Berth
through the ``berth.plugins`` entry point this distribution declares."""

from berth_example_plugin.args import PreferLabelArgs
from berth_example_plugin.plugin import NAME, PreferLabel

__all__ = ["NAME", "PreferLabel", "PreferLabelArgs"]
