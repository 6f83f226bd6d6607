"""NodeDeclaredFeatures: pods that need a node feature go to nodes that declare it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.nodedeclaredfeatures.node_declared_features import (
        ERR_REASON_UNSATISFIED_REQUIREMENTS,
        FEATURES,
        NodeDeclaredFeatures,
        required_features,
    )

__all__ = [
    "ERR_REASON_UNSATISFIED_REQUIREMENTS",
    "FEATURES",
    "NodeDeclaredFeatures",
    "required_features",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
