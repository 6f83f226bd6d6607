"""PodDisruptionBudgets (policy/v1) as preemption reads them.

DefaultPreemption reads every PodDisruptionBudget (``Plugin.reads``: the
caller lists and watches them and ships them in the cluster state) and uses
three facts of each: its ``spec.selector``, ``status.disruptionsAllowed`` and
the pod names in ``status.disruptedPods``
(default_preemption.go, filterPodsWithPDBViolation).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from berth.framework.labels import Selector, SelectorError, selector_from_json
from berth.framework.objects import ClusterObject, ObjectKind
from berth.framework.snapshot import Snapshot

__all__ = ["PDB_KIND", "PodDisruptionBudget", "pdb_from_object", "pdbs_of"]

log = logging.getLogger(__name__)

# What preemption.NewEvaluator lists (Policy().V1().PodDisruptionBudgets()).
PDB_KIND: Final = ObjectKind(
    group="policy",
    version="v1",
    resource="poddisruptionbudgets",
    kind="PodDisruptionBudget",
    namespaced=True,
)


@dataclass(frozen=True, slots=True)
class PodDisruptionBudget:
    """The facts of a PDB preemption uses. ``selector`` is None when
    ``spec.selector`` does not parse: such a PDB matches no pod (upstream's
    LabelSelectorAsSelector error, skipped)."""

    namespace: str
    name: str
    selector: Selector | None
    disruptions_allowed: int
    disrupted_pods: frozenset[str]

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Does this PDB cover a pod of ``namespace`` with ``labels``? A nil
        or empty selector covers nothing."""
        if namespace != self.namespace:
            return False
        sel = self.selector
        if sel is None or sel.nothing or sel.empty:
            return False
        return sel.matches(labels)


def pdb_from_object(obj: ClusterObject) -> PodDisruptionBudget:
    """Decodes one PDB object. A malformed field is read as its zero value
    (a bad selector as matching nothing), with a warning naming the PDB."""
    where = f"PodDisruptionBudget {obj.namespace}/{obj.name}"
    try:
        data = obj.data
    except ValueError as exc:
        log.warning("%s: %s; it covers no pod", where, exc)
        return PodDisruptionBudget(obj.namespace, obj.name, None, 0, frozenset())
    spec = _mapping(data.get("spec"))
    status = _mapping(data.get("status"))
    selector: Selector | None
    try:
        selector = selector_from_json(spec.get("selector"), "spec.selector")
    except SelectorError as exc:
        log.warning("%s: %s; it covers no pod", where, exc)
        selector = None
    allowed = status.get("disruptionsAllowed", 0)
    if isinstance(allowed, bool) or not isinstance(allowed, int):
        log.warning("%s: status.disruptionsAllowed is not an integer: %r", where, allowed)
        allowed = 0
    disrupted = status.get("disruptedPods")
    names = frozenset(str(k) for k in disrupted) if isinstance(disrupted, Mapping) else frozenset()
    return PodDisruptionBudget(obj.namespace, obj.name, selector, allowed, names)


def pdbs_of(snapshot: Snapshot) -> list[PodDisruptionBudget]:
    """Every PDB of the snapshot (getPodDisruptionBudgets), in a stable
    order (namespace, name)."""
    objs = snapshot.objects(PDB_KIND.group, PDB_KIND.resource)
    return [pdb_from_object(objs[key]) for key in sorted(objs)]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
