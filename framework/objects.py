"""Kubernetes objects beyond nodes and pods, as plugins read and write them.

The plugin server holds no API credentials and keeps nothing between calls
(protos/README.md, "Data beyond nodes and pods"). A plugin that needs more
than nodes and pods declares it with ``Plugin.reads`` (a tuple of
``ObjectKind``); the caller watches (or polls) those kinds and ships every
object in the cluster state, where ``Snapshot.objects``/``Snapshot.object``
find them. A plugin that must change an object returns the change as data
(``ObjectWrite``, added with ``CycleState.add_write`` in PreBind/PostBind) and
the caller performs it with its own credentials.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as spb


@dataclass(frozen=True, slots=True)
class ObjectKind:
    """A kind of object a plugin reads (proto ObjectKind, without the plugin
    names the server adds).

    ``group`` is "" for the core group; ``resource`` is the plural resource
    name ("podgroups"); ``poll_seconds`` above 0 means the API has no watch
    (metrics.k8s.io) and the caller lists it that often; ``label_selector``
    (Kubernetes syntax) narrows what the caller ships, "" for all;
    ``if_served``: the caller reads the kind only where the API server serves
    it (discovery), for an API that may be off, such as an alpha group.
    """

    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool = True
    poll_seconds: int = 0
    label_selector: str = ""
    if_served: bool = False

    def __post_init__(self) -> None:
        if not self.version:
            raise ValueError(f"ObjectKind {self.group}/{self.resource}: version must not be empty")
        if not self.resource:
            raise ValueError(f"ObjectKind in group {self.group!r}: resource must not be empty")
        if self.poll_seconds < 0:
            raise ValueError(
                f"ObjectKind {self.group}/{self.resource}: poll_seconds must be >= 0, "
                f"got {self.poll_seconds}"
            )

    @property
    def key(self) -> tuple[str, str]:
        """(group, resource), how the snapshot files objects of this kind."""
        return (self.group, self.resource)


_EMPTY: Mapping[str, str] = {}


class ClusterObject:
    """One object of a kind a plugin reads, as the caller shipped it.

    ``data`` is the object's JSON, decoded on first use and kept; plugins must
    treat it as read-only (the snapshot shares it between cycles).
    """

    __slots__ = ("_data", "_raw", "group", "kind", "name", "namespace", "resource", "version")

    def __init__(
        self,
        group: str,
        resource: str,
        namespace: str,
        name: str,
        version: str = "",
        kind: str = "",
        raw: bytes | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        self.group = group
        self.resource = resource
        self.namespace = namespace
        self.name = name
        self.version = version
        self.kind = kind
        self._raw = raw
        self._data = data

    @classmethod
    def from_proto(cls, obj: cpb.ClusterObject) -> ClusterObject:
        ref = obj.ref
        return cls(
            ref.group, ref.resource, ref.namespace, ref.name, obj.version, obj.kind, obj.json
        )

    def to_proto(self) -> cpb.ClusterObject:
        return cpb.ClusterObject(
            ref=cpb.ObjectRef(
                group=self.group, resource=self.resource, namespace=self.namespace, name=self.name
            ),
            version=self.version,
            kind=self.kind,
            json=self.raw,
        )

    @property
    def raw(self) -> bytes:
        """The JSON bytes (encoded from ``data`` when built from a mapping)."""
        if self._raw is None:
            self._raw = json.dumps(self._data or {}, separators=(",", ":")).encode()
        return self._raw

    @property
    def data(self) -> Mapping[str, Any]:
        """The decoded object. Malformed JSON (or JSON that is not an object)
        raises ValueError naming the object. Decoded by orjson, as the server
        checks every object it takes (server/state.py): what it took reads
        here, at any depth it allows (1024 levels), where Python's json
        recurses and fails near 1000 with a RecursionError."""
        if self._data is None:
            raw = self._raw or b"{}"
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"object {self.describe()}: json does not decode: {exc}") from exc
            if not isinstance(value, dict):
                raise ValueError(
                    f"object {self.describe()}: json is a {type(value).__name__}, not an object"
                )
            self._data = value
        return self._data

    @property
    def metadata(self) -> Mapping[str, Any]:
        meta = self.data.get("metadata")
        return meta if isinstance(meta, dict) else _EMPTY

    @property
    def labels(self) -> Mapping[str, str]:
        labels = self.metadata.get("labels")
        return labels if isinstance(labels, dict) else _EMPTY

    @property
    def annotations(self) -> Mapping[str, str]:
        annotations = self.metadata.get("annotations")
        return annotations if isinstance(annotations, dict) else _EMPTY

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name) within its kind."""
        return (self.namespace, self.name)

    def describe(self) -> str:
        kind = f"{self.resource}.{self.group}" if self.group else self.resource
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{kind} {where}"

    def __repr__(self) -> str:
        return f"ClusterObject({self.describe()})"


@dataclass(frozen=True, slots=True)
class ObjectWrite:
    """A JSON merge patch (RFC 7386) a plugin asks the caller to apply, in
    PreBind (before binding; a failed write fails the binding cycle) or in
    PostBind (after; a failure is only logged). ``subresource`` is "" or e.g.
    "status". The runtime fills in the plugin's name. With ``create`` the
    caller creates the object instead: ``merge_patch`` is the whole object,
    made under ``name`` in ``namespace`` (proto ObjectWrite.create). With
    ``delete`` the caller deletes it, ``merge_patch``'s metadata.uid (if any)
    the precondition (proto ObjectWrite.delete)."""

    group: str
    version: str
    resource: str
    namespace: str
    name: str
    merge_patch: Mapping[str, Any]
    subresource: str = ""
    create: bool = False
    delete: bool = False

    @classmethod
    def of_kind(
        cls,
        kind: ObjectKind,
        namespace: str,
        name: str,
        merge_patch: Mapping[str, Any],
        *,
        subresource: str = "",
        create: bool = False,
        delete: bool = False,
    ) -> ObjectWrite:
        """A write to an object of a kind the plugin declares (its group,
        version and resource)."""
        return cls(
            kind.group,
            kind.version,
            kind.resource,
            namespace,
            name,
            merge_patch,
            subresource=subresource,
            create=create,
            delete=delete,
        )

    def to_proto(self, plugin: str) -> spb.ObjectWrite:
        """The proto ObjectWrite (scheduling.proto), attributed to ``plugin``."""
        return spb.ObjectWrite(
            ref=cpb.ObjectRef(
                group=self.group, resource=self.resource, namespace=self.namespace, name=self.name
            ),
            version=self.version,
            subresource=self.subresource,
            merge_patch=json.dumps(self.merge_patch, separators=(",", ":")).encode(),
            plugin=plugin,
            create=self.create,
            delete=self.delete,
        )


def pod_write(pod_namespace: str, pod_name: str, merge_patch: Mapping[str, Any]) -> ObjectWrite:
    """A merge patch on a pod (core group, v1), e.g. to persist the
    annotations a plugin put on the assumed pod at Reserve."""
    return ObjectWrite("", "v1", "pods", pod_namespace, pod_name, merge_patch)


@dataclass(frozen=True, slots=True)
class ProfileRead:
    """One kind a profile reads and the plugins that read it (proto
    ObjectKind with its plugin names, as DescribeProfiles lists it)."""

    kind: ObjectKind
    plugins: tuple[str, ...]


def merge_reads(reads: Iterable[tuple[str, ObjectKind]]) -> tuple[ProfileRead, ...]:
    """Merges (plugin, kind) pairs into one entry per (group, resource), since
    the snapshot files objects by (group, resource): the caller then watches
    each kind once. Plugins that read a kind with different label selectors
    get every object (no selector); a kind polled by any plugin is polled at
    the shortest interval asked; it is read only where served when every
    plugin says so (``if_served``). Plugins that disagree on the version, kind
    name or scope of the same resource cannot share it: ValueError names
    both."""
    merged: dict[tuple[str, str], tuple[ObjectKind, list[str]]] = {}
    for plugin, kind in reads:
        if not isinstance(kind, ObjectKind):
            raise ValueError(
                f"plugin {plugin}: reads() must return ObjectKind values, got {type(kind).__name__}"
            )
        seen = merged.get(kind.key)
        if seen is None:
            merged[kind.key] = (kind, [plugin])
            continue
        have, plugins = seen
        for attr in ("version", "kind", "namespaced"):
            if getattr(have, attr) != getattr(kind, attr):
                raise ValueError(
                    f"plugins {plugins[0]} and {plugin} both read {kind.resource}"
                    f"{'.' + kind.group if kind.group else ''} but with different {attr} "
                    f"({getattr(have, attr)!r} and {getattr(kind, attr)!r})"
                )
        polls = [s for s in (have.poll_seconds, kind.poll_seconds) if s > 0]
        selector = have.label_selector if have.label_selector == kind.label_selector else ""
        merged[kind.key] = (
            ObjectKind(
                have.group,
                have.version,
                have.resource,
                have.kind,
                have.namespaced,
                min(polls) if polls else 0,
                selector,
                # Read only where served when every reader says so.
                have.if_served and kind.if_served,
            ),
            plugins if plugin in plugins else [*plugins, plugin],
        )
    return tuple(ProfileRead(kind, tuple(plugins)) for kind, plugins in merged.values())
