"""The smallest change that would let a pending pod fit, where it can be
worked out from what the scheduler knows: pure functions over the pod, the
nodes and the per-node verdicts of an explained cycle (shim/explain.py calls
them on request, never in a scheduling cycle).

- ``resource_fixes``: for the nodes NodeResourcesFit rejected, how much less
  of each requested resource would let 1, 2, ... of them fit (node
  allocatable minus what the pods on it request, as
  noderesources/fit.go fitsRequest compares).
- ``label_fix``: for the nodes NodeAffinity rejected, the fewest label
  changes on one node that satisfy the pod's nodeSelector and one of its
  required node affinity terms (nodeaffinity/node_affinity.go Filter).
- ``preemption_fix``: the victims DefaultPreemption's PostFilter chose on its
  nominated node (preemption.go Evaluator.Preempt, dry run).
- ``gpu_fix``: GPUCardFit rejected every GPU node: one more node with a free
  card of the pod's size.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from berth.api.v1 import cluster_pb2 as cpb
from berth.framework.model import CPU, MEMORY

__all__ = [
    "LabelFix",
    "ResourceFix",
    "aggregate",
    "format_quantity",
    "gpu_fix",
    "label_fix",
    "preemption_fix",
    "resource_fixes",
]

# What no request can be lowered to make room for: a pod slot.
_NOT_REDUCIBLE = frozenset({"pods"})
_BINARY = (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10))


def format_quantity(resource: str, amount: int) -> str:
    """A ResourceList amount as a user writes it: CPU in cores or millicores
    ("2", "500m"), byte resources in the largest exact binary unit ("1Gi",
    "1536Mi"), anything else as a count."""
    if resource == CPU:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if resource == MEMORY or resource.endswith("storage") or resource.startswith("hugepages-"):
        for suffix, unit in _BINARY:
            if amount and amount % unit == 0:
                return f"{amount // unit}{suffix}"
        return str(amount)
    return str(amount)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


@dataclass(frozen=True, slots=True)
class ResourceFix:
    """With ``less`` (resource to amount) taken off the pod's requests,
    ``count`` of the nodes NodeResourcesFit rejected would have room
    (``nodes``: some of them, by name)."""

    less: Mapping[str, int]
    count: int
    nodes: tuple[str, ...]

    def text(self) -> str:
        less = " and ".join(
            f"{format_quantity(r, v)} less {r}" for r, v in sorted(self.less.items())
        )
        return f"{_plural(self.count, 'node')} would fit with {less}"


def resource_fixes(
    requests: Mapping[str, int],
    free: Mapping[str, Mapping[str, int]],
    *,
    limit: int = 3,
    sample: int = 5,
) -> list[ResourceFix]:
    """``requests``: the pod's requests (pod_request_list); ``free``: for
    each node NodeResourcesFit rejected, its allocatable minus what its pods
    request. Returns up to ``limit`` fixes, each letting more nodes fit than
    the one before, smallest change first. A node that would need a request
    lowered to nothing (or below), or that is out of pod slots, gives none."""
    wanted = {r: v for r, v in requests.items() if v > 0 and r not in _NOT_REDUCIBLE}
    short: dict[str, dict[str, int]] = {}
    for node, room in free.items():
        if room.get("pods", 1) <= 0:
            continue
        gap: dict[str, int] = {}
        for r, v in wanted.items():
            missing = v - room.get(r, 0)
            if missing >= v:
                gap = {}
                break
            if missing > 0:
                gap[r] = missing
        if gap:
            short[node] = gap

    def cost(gap: Mapping[str, int]) -> float:
        return sum(v / wanted[r] for r, v in gap.items())

    order = sorted(short.items(), key=lambda item: (cost(item[1]), item[0]))
    fixes: list[ResourceFix] = []
    less: dict[str, int] = {}
    for _, gap in order:
        for r, v in gap.items():
            less[r] = max(less.get(r, 0), v)
        fitting = sorted(
            n for n, g in short.items() if all(v <= less.get(r, 0) for r, v in g.items())
        )
        if fixes and len(fitting) <= fixes[-1].count:
            continue
        fixes.append(ResourceFix(dict(less), len(fitting), tuple(fitting[:sample])))
        if len(fixes) >= limit:
            break
    return fixes


@dataclass(frozen=True, slots=True)
class LabelFix:
    """Setting ``labels`` (None: removing the label) on ``node`` satisfies
    the pod's nodeSelector and required node affinity."""

    node: str
    labels: Mapping[str, str | None]

    def text(self) -> str:
        changes = ", ".join(
            f"{k}={v}" if v is not None else f"without {k}" for k, v in sorted(self.labels.items())
        )
        return (
            f"labelling node {self.node} {changes} would satisfy the pod's node affinity/selector"
        )

    def command(self) -> str:
        args = " ".join(
            f"{k}={v}" if v is not None else f"{k}-" for k, v in sorted(self.labels.items())
        )
        return f"kubectl label node {self.node} {args}"


def _term_changes(
    term: cpb.NodeSelectorTerm, labels: Mapping[str, str], name: str
) -> dict[str, str | None] | None:
    """The label changes that make ``term`` match a node, None when labels
    cannot (a matchFields term on another node, Gt/Lt, an Exists with no
    value to pick)."""
    for f in term.match_fields:
        if f.key != "metadata.name":
            return None
        if (f.operator == "In") != (name in f.values):
            return None
    changes: dict[str, str | None] = {}
    for req in term.match_expressions:
        have = labels.get(req.key)
        if req.operator == "In":
            if have not in req.values:
                if not req.values:
                    return None
                changes[req.key] = req.values[0]
        elif req.operator == "NotIn":
            if have is not None and have in req.values:
                changes[req.key] = None
        elif req.operator == "Exists":
            if have is None:
                return None
        elif req.operator == "DoesNotExist":
            if have is not None:
                changes[req.key] = None
        else:
            return None
    return changes


def label_fix(pod: cpb.Pod, nodes: Mapping[str, Mapping[str, str]]) -> LabelFix | None:
    """Of ``nodes`` (name to labels: those NodeAffinity rejected), the one
    needing the fewest label changes to satisfy the pod's spec.nodeSelector
    and one term of its required node affinity (terms are ORed, a term's
    requirements ANDed); ties go to the first name. None when no change of
    labels would do."""
    required = None
    if pod.HasField("affinity") and pod.affinity.HasField("node_affinity"):
        na = pod.affinity.node_affinity
        if na.HasField("required"):
            required = na.required
    best: LabelFix | None = None
    for name in sorted(nodes):
        labels = nodes[name]
        changes: dict[str, str | None] = {
            k: v for k, v in pod.node_selector.items() if labels.get(k) != v
        }
        if required is not None and required.terms:
            options = [_term_changes(t, labels, name) for t in required.terms]
            usable: list[dict[str, str | None]] = [
                o
                for o in options
                if o is not None and all(changes.get(k, v) == v for k, v in o.items())
            ]
            if not usable:
                continue
            fewest: dict[str, str | None] = min(usable, key=len)
            changes.update(fewest)
        if not changes:
            continue
        if best is None or len(changes) < len(best.labels):
            best = LabelFix(name, changes)
    return best


def preemption_fix(node: str, victims: Sequence[tuple[str, str, int]], *, sample: int = 5) -> str:
    """``victims``: (namespace, name, priority) DefaultPreemption chose on
    ``node``."""
    names = ", ".join(f"{ns}/{name}" for ns, name, _ in victims[:sample])
    if len(victims) > sample:
        names += f" and {len(victims) - sample} more"
    prios = sorted({p for _, _, p in victims})
    prio = f"priority {prios[0]}" if len(prios) == 1 else f"priorities {prios[0]}..{prios[-1]}"
    return (
        f"evicting {_plural(len(victims), 'pod')} {names} on node {node} ({prio}) would make room"
    )


def gpu_fix(rejected: int, memory: str | None) -> str:
    """GPUCardFit rejected ``rejected`` nodes for want of a free card;
    ``memory``: the pod's GPU memory request as written (its annotation), or
    None for a whole card."""
    card = f"a free {memory} GPU card" if memory else "a free GPU card"
    return f"one more node with {card} (GPUCardFit found none on {_plural(rejected, 'node')})"


def aggregate(counts: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """Reason counts summed and sorted, most first: a group's members'
    node-level reasons as one histogram."""
    total: dict[str, int] = {}
    for reason, n in counts:
        total[reason] = total.get(reason, 0) + n
    return sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))
