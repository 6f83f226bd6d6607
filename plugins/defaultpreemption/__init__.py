"""PostFilter plugin DefaultPreemption: upstream's preemption (evict
lower-priority pods so a pending pod fits, and nominate the node)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.defaultpreemption.args import (
        DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE,
        DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE,
        DefaultPreemptionArgs,
    )
    from berth.plugins.defaultpreemption.default_preemption import (
        ERR_NO_VICTIMS,
        MSG_NOT_HELPFUL,
        NAME,
        Candidate,
        DefaultPreemption,
        filter_pods_with_pdb_violation,
        pick_one_node_for_preemption,
    )
    from berth.plugins.defaultpreemption.pdb import (
        PDB_KIND,
        PodDisruptionBudget,
        pdb_from_object,
    )

__all__ = [
    "DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE",
    "DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE",
    "ERR_NO_VICTIMS",
    "MSG_NOT_HELPFUL",
    "NAME",
    "PDB_KIND",
    "Candidate",
    "DefaultPreemption",
    "DefaultPreemptionArgs",
    "PodDisruptionBudget",
    "filter_pods_with_pdb_violation",
    "pdb_from_object",
    "pick_one_node_for_preemption",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
