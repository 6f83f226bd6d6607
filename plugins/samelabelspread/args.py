"""SameLabelSpreadArgs: the plugin takes no settings (its score,
``100 - 10 * count``, has none). ``{}`` decodes to this empty struct; any
field is refused as unknown."""

from __future__ import annotations

import msgspec

__all__ = ["SameLabelSpreadArgs"]


class SameLabelSpreadArgs(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """No fields: ``{}`` (or no pluginConfig entry) is the only valid value."""
