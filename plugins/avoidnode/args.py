"""AvoidNodePluginArgs: the plugin takes no settings. A configuration that
passes ``args: {}`` decodes to this empty struct; any field is refused as
unknown."""

from __future__ import annotations

import msgspec

__all__ = ["AvoidNodePluginArgs"]


class AvoidNodePluginArgs(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """No fields: ``{}`` (or no pluginConfig entry) is the only valid value."""
