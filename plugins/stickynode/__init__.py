"""PreFilter + Filter + PostBind plugin StickyNode (also registered as
StickyVM): the pods of a VM-like owner go back to the node where the owner
first ran (Berth's own plugin, not upstream's; never in the default profile)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.stickynode.args import (
        DEFAULT_ANNOTATION_KEY,
        DEFAULT_OWNER_CHAIN,
        OwnerKind,
        StickyNodeArgs,
    )
    from berth.plugins.stickynode.sticky_node import (
        NAME,
        SEED_NAME,
        StickyNode,
        StickyState,
        StickyVM,
        find_sticky_owner,
        gone_reason,
        mismatch_reason,
    )

__all__ = [
    "DEFAULT_ANNOTATION_KEY",
    "DEFAULT_OWNER_CHAIN",
    "NAME",
    "SEED_NAME",
    "OwnerKind",
    "StickyNode",
    "StickyNodeArgs",
    "StickyState",
    "StickyVM",
    "find_sticky_owner",
    "gone_reason",
    "mismatch_reason",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
