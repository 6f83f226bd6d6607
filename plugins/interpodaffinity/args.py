"""InterPodAffinityArgs: the ``pluginConfig`` args of InterPodAffinity.

Field names and defaults are upstream's (staging/src/k8s.io/kube-scheduler/
config/v1/types_pluginargs.go, InterPodAffinityArgs; defaults.go,
SetDefaults_InterPodAffinityArgs: ``hardPodAffinityWeight`` 1).
``validate()`` is ValidateInterPodAffinityArgs
(pkg/scheduler/apis/config/validation/validation_pluginargs.go).
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

__all__ = ["DEFAULT_HARD_POD_AFFINITY_WEIGHT", "InterPodAffinityArgs"]

DEFAULT_HARD_POD_AFFINITY_WEIGHT: Final = 1
MIN_HARD_POD_AFFINITY_WEIGHT: Final = 0
MAX_HARD_POD_AFFINITY_WEIGHT: Final = 100

Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]


class InterPodAffinityArgs(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """Args of InterPodAffinity."""

    # The score weight of an existing pod's required affinity term that the
    # incoming pod matches (symmetric weight), 0..100; 0 turns it off.
    hard_pod_affinity_weight: Int32 = DEFAULT_HARD_POD_AFFINITY_WEIGHT
    # Skip scoring for a pod without preferred pod (anti-)affinity terms of
    # its own (existing pods' terms then do not score it).
    ignore_preferred_terms_of_existing_pods: bool = False

    def validate(self) -> None:
        """validateHardPodAffinityWeight. Raises ValueError as
        ``<field>: <reason>``."""
        w = self.hard_pod_affinity_weight
        if not MIN_HARD_POD_AFFINITY_WEIGHT <= w <= MAX_HARD_POD_AFFINITY_WEIGHT:
            raise ValueError(
                f"hardPodAffinityWeight: Invalid value: {w}: not in valid range "
                f"[{MIN_HARD_POD_AFFINITY_WEIGHT}, {MAX_HARD_POD_AFFINITY_WEIGHT}]"
            )
