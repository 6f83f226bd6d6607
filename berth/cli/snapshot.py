"""A cluster snapshot for ``berth place`` and ``berth what-if``: from files or a live cluster.

What a profile's plugins see in the scheduler: every node, every pod bound to a node, and
every object of the kinds its plugins declare they read (``Plugin.reads``; the profile's
merged list is ``Framework.reads``, what DescribeProfiles answers). The shim keeps the same
set by watching (shim/objects.py ``ObjectSources``); this module takes it once:

- from files: YAML or JSON, several documents per file, ``kind: List`` (and ``*List``)
  as ``kubectl get ... -o yaml`` prints them, or single objects. An object is matched to a
  read kind by its apiVersion's group and its kind (``PersistentVolumeClaim`` in the core
  group is ``persistentvolumeclaims``).
- from an API server (``--kubeconfig``): nodes, pods, and a paged list of each read kind
  with its label selector, through berth/kube's REST client.

Objects of a kind no plugin reads are dropped, and the caller is told how many of which
kind (``Snapshot.dropped``): a NodeMetrics object given to a profile without
LowCpuScheduler changes nothing, and saying so is better than silence.

Input is bounded: a file larger than ``Limits.max_bytes`` or a snapshot of more than
``Limits.max_objects`` objects is refused with a message naming the limit and its flag, and
a YAML document whose aliases expand it beyond its size is refused before anything walks
the expansion.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog
from berth.framework.labels import (
    DOES_NOT_EXIST,
    EXISTS,
    IN,
    NOT_IN,
    Requirement,
    Selector,
)
from berth.kube.errors import ApiError
from berth.kube.records import ObjectError, node_record, occupies_node, pod_record
from berth.shim.objects import Source, merge_sources, object_record

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_OBJECTS",
    "Limits",
    "Snapshot",
    "SnapshotError",
    "add_snapshot_flags",
    "load_files",
    "load_live",
    "load_pods",
    "parse_selector",
    "read_documents",
    "reads_of",
    "take_snapshot",
]

# 64 MiB: ``kubectl get nodes,pods -A -o yaml`` of a 5000-node, 50,000-pod cluster
# trimmed of managedFields is about that; a larger file is refused, not parsed.
DEFAULT_MAX_BYTES = 64 * 2**20
# Nodes, pods and objects together, over every file (or every list of a live cluster).
DEFAULT_MAX_OBJECTS = 200_000
# Inputs this large report their progress on stderr.
PROGRESS_OBJECTS = 5_000


class SnapshotError(Exception):
    """The input cannot be taken; the message names the file (or kind) and why."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one run takes (the commands' --max-bytes and --max-objects)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_objects: int = DEFAULT_MAX_OBJECTS


Progress = Callable[[str], None]


def _quiet(_msg: str) -> None:
    return None


def stderr_progress(prefix: str) -> Progress:
    """Progress lines on stderr, ``prefix: message``."""

    def say(msg: str) -> None:
        print(f"{prefix}: {msg}", file=sys.stderr, flush=True)

    return say


def reads_of(frameworks: Mapping[str, Any]) -> list[pb.ObjectKind]:
    """The kinds the profiles' plugins read, as DescribeProfiles lists them
    (server/handlers.py describe_profiles)."""
    from berth.server.handlers import describe_profiles

    return [k for prof in describe_profiles(frameworks).profiles for k in prof.reads]


# -- label selectors in their string form (apimachinery labels.Parse) ------------------


def parse_selector(text: str) -> Selector:
    """A label selector string as ``ObjectKind.label_selector`` holds it and the API
    server's ``labelSelector`` parameter takes it (k8s.io/apimachinery pkg/labels
    selector.go, Parse): comma-separated ``key``, ``!key``, ``key=v``, ``key==v``,
    ``key!=v``, ``key in (a,b)``, ``key notin (a,b)``. ValueError on anything else."""
    reqs: list[Requirement] = []
    for part in _split_top(text):
        term = part.strip()
        if not term:
            raise ValueError(f"label selector {text!r}: empty requirement")
        words = term.split(None, 1)
        if len(words) == 2 and words[1].split(None, 1)[0] in ("in", "notin"):
            key = words[0]
            op_word, _, rest = words[1].partition(" ")
            rest = rest.strip()
            if not (rest.startswith("(") and rest.endswith(")")):
                raise ValueError(f"label selector {text!r}: {term!r}: expected (values)")
            values = frozenset(v.strip() for v in rest[1:-1].split(",") if v.strip())
            reqs.append(Requirement(key, IN if op_word == "in" else NOT_IN, values))
        elif "!=" in term:
            key, _, value = term.partition("!=")
            reqs.append(Requirement(key.strip(), NOT_IN, frozenset((value.strip(),))))
        elif "=" in term:
            key, _, value = term.partition("==") if "==" in term else term.partition("=")
            reqs.append(Requirement(key.strip(), IN, frozenset((value.strip(),))))
        elif term.startswith("!"):
            reqs.append(Requirement(term[1:].strip(), DOES_NOT_EXIST, frozenset()))
        elif " " in term or "(" in term:
            raise ValueError(f"label selector {text!r}: cannot parse {term!r}")
        else:
            reqs.append(Requirement(term, EXISTS, frozenset()))
    return Selector(tuple(reqs))


def _split_top(text: str) -> Iterator[str]:
    """``text`` split at the commas outside parentheses."""
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            yield text[start:i]
            start = i + 1
    if text.strip():
        yield text[start:]


# -- the snapshot ------------------------------------------------------------------------


@dataclass(slots=True)
class Snapshot:
    """Nodes, the pods bound to them and the read objects, with what was left out."""

    nodes: list[cpb.Node] = field(default_factory=list)
    # Pods bound to a node and not finished: they count on their node.
    pods: list[cpb.Pod] = field(default_factory=list)
    objects: list[cpb.ClusterObject] = field(default_factory=list)
    # Objects of each read kind, by kind name ("persistentvolumeclaims").
    kinds: Counter[str] = field(default_factory=Counter)
    # Objects dropped because no plugin reads their kind: "Kind (apiVersion)" -> count.
    dropped: Counter[str] = field(default_factory=Counter)
    # Pods with no node yet, finished pods: not counted on any node.
    unbound_pods: int = 0
    finished_pods: int = 0
    # Read kinds a live cluster could not list: kind name -> why.
    unlisted: dict[str, str] = field(default_factory=dict)
    sources: dict[tuple[str, str], Source] = field(default_factory=dict)
    # The read kinds' label selectors (None: every object).
    selectors: dict[tuple[str, str], Selector | None] = field(default_factory=dict)

    def pod_sources(self, labels: Mapping[str, str]) -> list[Source]:
        """The read kinds that would hold a pod with ``labels`` (a kind of core
        pods whose label selector, if any, selects them: Coscheduling's grouped
        pods)."""
        out = []
        for key, src in self.sources.items():
            if key != ("", "pods"):
                continue
            sel = self.selectors.get(key)
            if sel is None or sel.matches(labels):
                out.append(src)
        return out

    def state_log(self) -> ClusterStateLog:
        """A cluster-state log holding the snapshot, committed, as the shim's
        cache holds the cluster (what ``SchedulingClient`` ships)."""
        log = ClusterStateLog()
        for n in self.nodes:
            log.upsert_node(n)
        for p in self.pods:
            log.upsert_pod(p)
        for o in self.objects:
            log.upsert_object(o)
        log.commit()
        return log

    def warnings(self) -> list[str]:
        """One line per dropped kind, per kind a live cluster did not list, and
        for pods the snapshot does not place."""
        out = []
        for kind, n in sorted(self.dropped.items()):
            out.append(
                f"dropped {n} {kind} object{'s' if n != 1 else ''}: no plugin of the "
                "profile(s) reads that kind"
            )
        for kind, why in sorted(self.unlisted.items()):
            out.append(f"{kind}: not listed ({why}); the plugins that read it see none")
        if self.unbound_pods:
            out.append(
                f"{self.unbound_pods} pod(s) with no node are not counted on any node "
                "(to place them, give them as pods to place)"
            )
        return out


class _Builder:
    """Sorts objects into a Snapshot, by kind, within the limits."""

    def __init__(self, reads: Sequence[pb.ObjectKind], limits: Limits, progress: Progress) -> None:
        self.snap = Snapshot(sources=merge_sources(reads))
        self.limits = limits
        self.progress = progress
        self.count = 0
        # (group, Kind) -> source, to match a file's objects; (group, resource) for lists.
        self.by_kind: dict[tuple[str, str], Source] = {}
        self.selectors = self.snap.selectors
        for src in self.snap.sources.values():
            if src.kind:
                self.by_kind[(src.group, src.kind)] = src
            try:
                self.selectors[src.key] = (
                    parse_selector(src.label_selector) if src.label_selector else None
                )
            except ValueError:
                # A selector this parser does not take: every object (a superset of
                # what the API server would answer; the plugins select again).
                self.selectors[src.key] = None

    def _counted(self, where: str) -> None:
        self.count += 1
        if self.count > self.limits.max_objects:
            raise SnapshotError(
                f"{where}: more than {self.limits.max_objects} objects "
                "(raise the limit with --max-objects)"
            )
        if self.count % PROGRESS_OBJECTS == 0:
            self.progress(f"{self.count} objects read")

    def _as_object(self, src: Source, obj: Mapping[str, Any], where: str) -> None:
        selector = self.selectors.get(src.key)
        if selector is not None:
            meta = obj.get("metadata")
            labels = meta.get("labels") if isinstance(meta, Mapping) else None
            if not selector.matches(labels if isinstance(labels, Mapping) else {}):
                return
        try:
            record = object_record(src, dict(obj))
        except (ObjectError, TypeError, ValueError) as exc:
            raise SnapshotError(f"{where}: {exc}") from exc
        self.snap.objects.append(record)
        self.snap.kinds[src.name] += 1

    def add(self, obj: Mapping[str, Any], where: str) -> None:
        """One object of a file (not a List)."""
        self._counted(where)
        kind = obj.get("kind")
        api_version = obj.get("apiVersion")
        if not isinstance(kind, str) or not kind:
            raise SnapshotError(f"{where}: an object without a kind")
        group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
        src = self.by_kind.get((group, kind))
        if kind == "Node" and group == "":
            self.add_node(obj, where)
        elif kind == "Pod" and group == "":
            self.add_pod(obj, where)
        elif src is None:
            self.snap.dropped[f"{kind} ({api_version or '?'})"] += 1
            return
        if src is not None:
            self._as_object(src, obj, where)

    def add_node(self, obj: Mapping[str, Any], where: str) -> None:
        try:
            self.snap.nodes.append(node_record(obj))
        except (ObjectError, TypeError, ValueError) as exc:
            raise SnapshotError(f"{where}: {exc}") from exc
        self.snap.kinds["nodes"] += 1

    def add_pod(self, obj: Mapping[str, Any], where: str) -> None:
        try:
            rec = pod_record(obj, assign_uid=True)
        except (ObjectError, TypeError, ValueError) as exc:
            raise SnapshotError(f"{where}: {exc}") from exc
        self.snap.kinds["pods"] += 1
        if occupies_node(rec):
            self.snap.pods.append(rec)
        elif rec.phase in ("Succeeded", "Failed"):
            self.snap.finished_pods += 1
        else:
            self.snap.unbound_pods += 1

    def add_listed(self, src: Source, obj: Mapping[str, Any], where: str) -> None:
        """One object a live list of ``src`` answered."""
        self._counted(where)
        self._as_object(src, obj, where)


def _object_count_budget(size: int) -> int:
    """How many JSON values a document of ``size`` bytes may hold: each takes at
    least a byte or so of text unless YAML aliases repeat it."""
    return 2 * size + 1000


def _check_expansion(doc: Any, budget: int, where: str) -> None:
    """Refuses a document whose values outnumber ``budget`` (YAML aliases that
    expand it, a "billion laughs"), counting shared values each time they are
    reached and stopping at the budget, so the walk itself is bounded."""
    seen = 0
    stack = [doc]
    while stack:
        value = stack.pop()
        seen += 1
        if seen > budget:
            raise SnapshotError(
                f"{where}: expands to more than {budget} values, beyond what its size "
                "allows (YAML aliases?); refused"
            )
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def read_documents(path: str | Path, limits: Limits = Limits(), what: str = "input") -> list[Any]:
    """The documents of a YAML or JSON file (several YAML documents allowed),
    within ``limits.max_bytes``; SnapshotError names the file and the reason."""
    file = Path(path)
    if not file.is_file():
        raise SnapshotError(f"{what} file {str(path)!r} does not exist")
    size = file.stat().st_size
    if size > limits.max_bytes:
        raise SnapshotError(
            f"{path}: {size} bytes, more than the limit of {limits.max_bytes} "
            "(raise it with --max-bytes)"
        )
    data = file.read_bytes()
    stripped = data.lstrip()
    docs: list[Any]
    if stripped[:1] in (b"{", b"["):
        try:
            docs = [orjson.loads(data)]
        except orjson.JSONDecodeError:
            docs = _yaml_documents(data, path)
    else:
        docs = _yaml_documents(data, path)
    budget = _object_count_budget(size)
    for i, doc in enumerate(docs):
        _check_expansion(doc, budget, f"{path} (document {i + 1})")
    return [d for d in docs if d is not None]


def _yaml_documents(data: bytes, path: str | Path) -> list[Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return list(yaml.load_all(data, Loader=loader))
    except yaml.YAMLError as exc:
        raise SnapshotError(f"{path}: not valid YAML or JSON: {exc}") from exc


def _items(doc: Any, where: str, into: Callable[[Mapping[str, Any], str], None]) -> None:
    """Each object of a document: single objects, ``kind: List`` / ``*List`` or
    a plain sequence, nested."""
    stack: list[tuple[Any, str]] = [(doc, where)]
    while stack:
        value, at = stack.pop()
        if value is None:
            continue
        if isinstance(value, list):
            stack.extend((x, f"{at}[{i}]") for i, x in reversed(list(enumerate(value))))
            continue
        if not isinstance(value, Mapping):
            raise SnapshotError(f"{at}: expected a Kubernetes object, got {type(value).__name__}")
        kind = value.get("kind")
        if (isinstance(kind, str) and kind.endswith("List")) or (kind is None and "items" in value):
            items = value.get("items") or []
            if not isinstance(items, list):
                raise SnapshotError(f"{at}: items is not a list")
            stack.extend((x, f"{at}.items[{i}]") for i, x in reversed(list(enumerate(items))))
            continue
        into(value, f"{at} ({kind} {_name_of(value)})")


def _name_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return "?"
    ns, name = meta.get("namespace"), meta.get("name") or meta.get("generateName")
    return f"{ns}/{name}" if ns else str(name)


def load_files(
    paths: Sequence[str | Path],
    reads: Sequence[pb.ObjectKind],
    *,
    limits: Limits = Limits(),
    progress: Progress = _quiet,
) -> Snapshot:
    """A snapshot of the objects in ``paths``, keeping the kinds in ``reads``."""
    b = _Builder(reads, limits, progress)
    for path in paths:
        for i, doc in enumerate(read_documents(path, limits, "cluster")):
            _items(doc, f"{path}: document {i + 1}", b.add)
    if not b.snap.nodes:
        raise SnapshotError(f"{', '.join(map(str, paths))}: no Node objects")
    if b.count >= PROGRESS_OBJECTS:
        progress(f"{b.count} objects read from {len(paths)} file(s)")
    return b.snap


def load_pods(
    path: str | Path, limits: Limits = Limits()
) -> list[tuple[cpb.Pod, Mapping[str, Any]]]:
    """The pods of a file, in order (other kinds refused), each given a uid
    and no node: pods to place, each with its manifest."""
    out: list[tuple[cpb.Pod, Mapping[str, Any]]] = []

    def take(obj: Mapping[str, Any], where: str) -> None:
        if obj.get("kind") != "Pod":
            raise SnapshotError(f"{where}: only Pods can be placed")
        if len(out) >= limits.max_objects:
            raise SnapshotError(
                f"{path}: more than {limits.max_objects} pods (raise the limit with --max-objects)"
            )
        try:
            rec = pod_record(obj, assign_uid=True)
        except (ObjectError, TypeError, ValueError) as exc:
            raise SnapshotError(f"{where}: {exc}") from exc
        rec.node_name = ""
        rec.phase = ""
        out.append((rec, obj))

    for i, doc in enumerate(read_documents(path, limits, "pods")):
        _items(doc, f"{path}: document {i + 1}", take)
    if not out:
        raise SnapshotError(f"{path}: holds no Pod objects")
    keys = Counter(f"{p.namespace}/{p.name}" for p, _ in out)
    twice = sorted(k for k, n in keys.items() if n > 1)
    if twice:
        raise SnapshotError(f"{path}: pods named more than once: {', '.join(twice[:5])}")
    return out


def load_live(
    kubeconfig: str | None,
    context: str | None,
    reads: Sequence[pb.ObjectKind],
    *,
    limits: Limits = Limits(),
    progress: Progress = _quiet,
) -> Snapshot:
    """A snapshot listed from the API server the kubeconfig names: nodes, pods,
    and each read kind (with its label selector). A read kind the server does
    not serve or lets this user not list is reported in ``Snapshot.unlisted``;
    failing to list nodes or pods is an error."""
    from berth.kube.config import ConfigurationError
    from berth.kube.rest import KubeApi

    try:
        api = KubeApi.from_kubeconfig(
            kubeconfig, context=context, hint="pass --kubeconfig FILE (and --context NAME)"
        )
    except ConfigurationError as exc:
        raise SnapshotError(str(exc)) from exc
    b = _Builder(reads, limits, progress)
    with api:
        for path, what, add in (
            ("/api/v1/nodes", "nodes", b.add_node),
            ("/api/v1/pods", "pods", b.add_pod),
        ):
            try:
                for page in api.list_pages(path):
                    for obj in page.items:
                        b._counted(f"{api.host}{path}")
                        add(obj, f"{what} {_name_of(obj)}")
            except ApiError as exc:
                raise SnapshotError(f"listing {what} at {api.host}: {exc}") from exc
        for src in b.snap.sources.values():
            try:
                for page in api.list_pages(src.path, **src.params()):
                    for obj in page.items:
                        b.add_listed(src, obj, f"{src.name} {_name_of(obj)}")
            except ApiError as exc:
                b.snap.unlisted[src.name] = (
                    "the API server does not serve it"
                    if exc.status == 404
                    else f"{exc}; may this user list it?"
                    if exc.status == 403
                    else str(exc)
                )
                continue
    listed = [f"{n} {kind}" for kind, n in b.snap.kinds.items() if n]
    empty = len(b.snap.sources) + 2 - len(listed) - len(b.snap.unlisted)
    progress(
        f"listed from {api.host}: {', '.join(listed)}"
        + (f" (and none of {empty} other kind(s) read)" if empty else "")
    )
    if not b.snap.nodes:
        raise SnapshotError(f"the cluster at {api.host} has no nodes")
    return b.snap


# -- the commands' flags ---------------------------------------------------------------


def add_snapshot_flags(p: argparse.ArgumentParser, *, cluster_help: str) -> None:
    """--cluster FILE... | --kubeconfig FILE [--context NAME], and the input limits."""
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--cluster",
        nargs="+",
        action="extend",
        metavar="FILE",
        help=cluster_help,
    )
    source.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="take the snapshot from the cluster this kubeconfig names (lists nodes, pods and "
        "every kind the plugins read; the user needs list on them)",
    )
    p.add_argument("--context", metavar="NAME", help="kubeconfig context (with --kubeconfig)")
    p.add_argument(
        "--max-bytes",
        type=int,
        default=DEFAULT_MAX_BYTES,
        metavar="N",
        help="refuse an input file larger than N bytes (default %(default)s)",
    )
    p.add_argument(
        "--max-objects",
        type=int,
        default=DEFAULT_MAX_OBJECTS,
        metavar="N",
        help="refuse a snapshot (or a pods file) of more than N objects (default %(default)s)",
    )


def take_snapshot(args: argparse.Namespace, reads: Sequence[Any], prog: str) -> Snapshot:
    """The snapshot the flags name, with its warnings on stderr."""
    limits = Limits(max_bytes=args.max_bytes, max_objects=args.max_objects)
    progress = stderr_progress(prog)
    if args.context and not args.kubeconfig:
        raise SnapshotError("--context needs --kubeconfig")
    if args.kubeconfig:
        snap = load_live(args.kubeconfig, args.context, reads, limits=limits, progress=progress)
    else:
        snap = load_files(args.cluster, reads, limits=limits, progress=progress)
    for line in snap.warnings():
        print(f"{prog}: warning: {line}", file=sys.stderr)
    return snap
