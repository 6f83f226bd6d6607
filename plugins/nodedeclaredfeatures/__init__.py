"""NodeDeclaredFeatures: pods that need a node feature go to nodes that declare it."""

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
