"""Objects beyond nodes and pods: what the plugins read, and what they write.

The plugin server holds no credentials (protos/README.md, "Data beyond nodes
and pods"). Each profile lists in DescribeProfiles the kinds its plugins read
(Profile.reads); ``ObjectSources`` keeps every object of those kinds in the
cluster state the shim ships:

- a kind with a watch (``poll_seconds`` 0) gets a list+watch ``Informer``
  (the same machinery as nodes and pods: resumed watches, relist on 410);
- a kind without one (metrics.k8s.io NodeMetrics) is listed every
  ``poll_seconds``; objects a list no longer has are deleted.

Objects go into the state as JSON with ``metadata.managedFields`` dropped.
A kind's ``label_selector`` is passed to the API server.

``perform_writes`` applies the ObjectWrites a PreBind or PostBind returned, in
order, as JSON merge patches with the shim's credentials (a write with
``create`` POSTs its object instead, one with ``delete`` deletes it). A patch that carries
``metadata.resourceVersion`` (a precondition: the object as the plugin saw
it) and follows an earlier write of the same list to the same object is sent
with the version that earlier write's answer gave, since the shim's own write
is what changed the object since (e.g. DynamicResources' finalizer, then the
claim's status). ``ObjectSources.written`` puts what the API server answered
into the cluster state at once, as upstream's assume cache does
(assumecache.go Assume): the next cycle sees the written object even before
its watch event arrives, and a watch event older than it is ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog
from berth.kube.errors import ApiError
from berth.kube.records import ObjectError
from berth.kube.rest import JSON, KubeApi, segment
from berth.shim.informer import DELETED, Event, Informer

log = logging.getLogger(__name__)

# How long the shim waits for the first list of a kind before it schedules
# anyway (a missing CRD must not stop every profile); the watch keeps trying.
SYNC_TIMEOUT_SECONDS = 30.0


def kind_name(group: str, resource: str) -> str:
    """``podgroups.scheduling.x-k8s.io``, ``pods`` (core): how logs name a kind."""
    return f"{resource}.{group}" if group else resource


def collection_path(group: str, version: str, resource: str, namespace: str = "") -> str:
    """The REST path of a collection, across namespaces unless ``namespace``."""
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if namespace:
        base += f"/namespaces/{segment(namespace)}"
    return f"{base}/{resource}"


def object_path(
    group: str, version: str, resource: str, namespace: str, name: str, subresource: str = ""
) -> str:
    path = f"{collection_path(group, version, resource, namespace)}/{segment(name)}"
    return f"{path}/{subresource}" if subresource else path


@dataclass(frozen=True, slots=True)
class Source:
    """One kind the shim keeps, merged over the profiles that read it."""

    group: str
    version: str
    resource: str
    kind: str
    poll_seconds: int
    label_selector: str
    plugins: frozenset[str] = field(default_factory=frozenset)
    # Read only where the API server serves it (ObjectKind.if_served).
    if_served: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.resource)

    @property
    def name(self) -> str:
        return kind_name(self.group, self.resource)

    @property
    def path(self) -> str:
        return collection_path(self.group, self.version, self.resource)

    def params(self) -> dict[str, Any]:
        return {"labelSelector": self.label_selector} if self.label_selector else {}


def merge_sources(reads: Iterable[pb.ObjectKind]) -> dict[tuple[str, str], Source]:
    """One source per (group, resource), as the plugin server files objects:
    different label selectors mean all objects; any poller polls at the
    shortest interval asked. A version conflict keeps the first and logs it
    (the plugin server refuses one within a profile; across profiles the
    first profile wins)."""
    out: dict[tuple[str, str], Source] = {}
    for k in reads:
        if not k.resource or not k.version:
            log.error(
                "ignoring a read without resource or version: %s",
                kind_name(k.group, k.resource) or "?",
            )
            continue
        new = Source(
            k.group,
            k.version,
            k.resource,
            k.kind,
            max(0, k.poll_seconds),
            k.label_selector,
            frozenset(k.plugins),
            k.if_served,
        )
        have = out.get(new.key)
        if have is None:
            out[new.key] = new
            continue
        if have.version != new.version:
            log.error(
                "%s is read as version %s and %s; keeping %s",
                new.name,
                have.version,
                new.version,
                have.version,
            )
        polls = [s for s in (have.poll_seconds, new.poll_seconds) if s > 0]
        out[new.key] = Source(
            have.group,
            have.version,
            have.resource,
            have.kind or new.kind,
            min(polls) if polls else 0,
            have.label_selector if have.label_selector == new.label_selector else "",
            have.plugins | new.plugins,
            have.if_served and new.if_served,
        )
    return out


def object_record(source: Source, obj: JSON) -> cpb.ClusterObject:
    """An API object as the cluster state carries it: managedFields dropped,
    apiVersion and kind filled in when a list left them out."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not meta.get("name"):
        raise ObjectError(f"{source.name}: metadata.name: required")
    if "managedFields" in meta:
        meta = {k: v for k, v in meta.items() if k != "managedFields"}
        obj = {**obj, "metadata": meta}
    api_version = f"{source.group}/{source.version}" if source.group else source.version
    if not obj.get("apiVersion") or not obj.get("kind"):
        obj = {
            **obj,
            "apiVersion": obj.get("apiVersion") or api_version,
            "kind": obj.get("kind") or source.kind,
        }
    version = str(obj["apiVersion"]).rpartition("/")[2] or source.version
    return cpb.ClusterObject(
        ref=cpb.ObjectRef(
            group=source.group,
            resource=source.resource,
            namespace=str(meta.get("namespace") or ""),
            name=str(meta["name"]),
        ),
        version=version,
        kind=str(obj.get("kind") or source.kind),
        json=orjson.dumps(obj),
    )


def object_key(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise ObjectError("metadata.name: required")
    return f"{meta.get('namespace') or ''}/{name}"


class _Runner:
    """A kind's runner whose work is one task on the event loop: ``start``
    creates it, ``stop`` cancels it, and ``synced`` is set by the task once
    the kind's objects are in (or it has given up on them)."""

    def __init__(self) -> None:
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    async def _run(self) -> None:
        raise NotImplementedError


class Poller(_Runner):
    """Lists a kind every ``poll_seconds`` (for APIs without watch), and
    delivers the differences as informer events: ADDED/MODIFIED when an
    object is new or its JSON changed, DELETED when a list no longer has it.
    A failed list changes nothing (the objects grow stale; plugins see their
    timestamps)."""

    def __init__(
        self,
        api: KubeApi,
        source: Source,
        on_events: Callable[[list[Event[cpb.ClusterObject]]], None],
    ) -> None:
        super().__init__()
        self.api = api
        self.source = source
        self.on_events = on_events
        self.polls = 0
        self.errors = 0
        self._known: dict[str, cpb.ClusterObject] = {}
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()
        super().stop()

    async def _run(self) -> None:
        while not self._stop.is_set():
            try:
                await self.poll()
            except ApiError as exc:
                self.errors += 1
                log.warning(
                    "%s: list failed (%s); keeping the last objects, next try in %ds",
                    self.source.name,
                    exc,
                    self.source.poll_seconds,
                )
            except Exception:
                self.errors += 1
                log.exception("%s: poll failed", self.source.name)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.source.poll_seconds)

    async def poll(self) -> None:
        """One list, its differences delivered."""
        src = self.source
        result = await asyncio.to_thread(self.api.list, src.path, **src.params())
        self.polls += 1
        seen: dict[str, cpb.ClusterObject] = {}
        events: list[Event[cpb.ClusterObject]] = []
        for obj in result.items:
            try:
                key = object_key(obj)
                record = object_record(src, obj)
            except (ObjectError, TypeError, ValueError) as exc:
                log.warning("%s: skipping an object: %s", src.name, exc)
                continue
            seen[key] = record
            old = self._known.get(key)
            if old is None or old.json != record.json:
                events.append(Event("ADDED" if old is None else "MODIFIED", key, record, ""))
        for key, old in self._known.items():
            if key not in seen:
                events.append(Event(DELETED, key, old, ""))
        self._known = seen
        if events:
            self.on_events(events)
        if not self._synced.is_set():
            log.info("%s: polled %d objects (every %ds)", src.name, len(seen), src.poll_seconds)
        self._synced.set()


def served(api: KubeApi, source: Source) -> bool:
    """Does the API server serve ``source``'s group, version and resource?
    One discovery GET (``/apis/<group>/<version>``, the APIResourceList
    kubectl's discovery reads); 404 means the group version is off."""
    path = (
        f"/api/{source.version}" if not source.group else f"/apis/{source.group}/{source.version}"
    )
    try:
        found = api.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    resources = found.get("resources") if isinstance(found, dict) else None
    if not isinstance(resources, list):
        return False
    return any(isinstance(r, dict) and r.get("name") == source.resource for r in resources)


class IfServed(_Runner):
    """Runs ``runner`` only when the API server serves the source
    (ObjectKind.if_served): an alpha API that is off (Kubernetes v1.36's
    scheduling.k8s.io/v1alpha2 without ``--runtime-config``) costs one
    discovery request and one info line, not a list retried for ever. A
    discovery request that fails for another reason starts the runner,
    which retries as for any kind. Asked once per start."""

    def __init__(self, api: KubeApi, source: Source, runner: Informer[cpb.ClusterObject]) -> None:
        super().__init__()
        self.api = api
        self.source = source
        self.runner = runner
        self.started = False

    def stop(self) -> None:
        super().stop()
        if self.started:
            self.runner.stop()

    async def _run(self) -> None:
        src = self.source
        try:
            ok = await asyncio.to_thread(served, self.api, src)
        except ApiError as exc:
            log.warning("%s: discovery failed (%s); watching it anyway", src.name, exc)
            ok = True
        if not ok:
            log.info(
                "%s/%s %s is not served by the API server; plugin(s) %s run without it "
                "(a Kubernetes alpha API is served with --runtime-config=%s/%s=true and its "
                "feature gate)",
                src.group,
                src.version,
                src.resource,
                ", ".join(sorted(src.plugins)),
                src.group,
                src.version,
            )
            self._synced.set()
            return
        self.started = True
        self.runner.start()
        await self.runner.wait_synced()
        self._synced.set()


# One change of an object: (informer event type, old object or None, new
# object or None).
ObjectChange = tuple[str, cpb.ClusterObject | None, cpb.ClusterObject | None]


class ObjectSources:
    """The watchers and pollers of every kind the profiles read, feeding the
    cluster state. ``on_change(source, changes)`` is called after a batch of
    changes of a kind, each (informer event type, old object, new object),
    so the scheduler can move the pods those changes may help."""

    def __init__(
        self,
        api: KubeApi,
        state: ClusterStateLog,
        on_change: Callable[[Source, Sequence[ObjectChange]], None] | None = None,
    ) -> None:
        self.api = api
        self.state = state
        self.on_change = on_change
        self.sources: dict[tuple[str, str], Source] = {}
        self._runners: dict[tuple[str, str], Informer[cpb.ClusterObject] | Poller | IfServed] = {}
        self.sync_timeout = SYNC_TIMEOUT_SECONDS
        # Objects the shim wrote, by (group, resource, namespace, name): the
        # resourceVersion the API server answered, until a watch event at
        # that version or later arrives.
        self._written: dict[tuple[str, str, str, str], int] = {}

    def update(self, reads: Iterable[pb.ObjectKind]) -> None:
        """Starts what a new read needs, stops (and forgets the objects of)
        what no profile reads any more. Must run on the event loop."""
        wanted = merge_sources(reads)
        for key, src in list(self.sources.items()):
            if wanted.get(key) != src:
                self._stop_source(key)
        for key, src in wanted.items():
            if key not in self.sources:
                self._start(src)

    def _start(self, src: Source) -> None:
        loop = asyncio.get_running_loop()

        def deliver(events: list[Event[cpb.ClusterObject]]) -> None:
            self._apply(src, events)

        runner: Informer[cpb.ClusterObject] | Poller | IfServed
        if src.poll_seconds > 0:
            runner = Poller(self.api, src, deliver)
            how = f"polling every {src.poll_seconds}s"
        else:
            runner = Informer(
                self.api,
                src.path,
                name=src.name,
                decode=lambda obj: object_record(src, obj),
                key_of=object_key,
                on_events=deliver,
                loop=loop,
                label_selector=src.label_selector or None,
            )
            how = "watching"
            if src.if_served:
                runner = IfServed(self.api, src, runner)
                how = "watching where served"
        log.info(
            "%s %s%s for plugin(s) %s",
            how,
            src.name,
            f" (labelSelector {src.label_selector})" if src.label_selector else "",
            ", ".join(sorted(src.plugins)),
        )
        self.sources[src.key] = src
        self._runners[src.key] = runner
        runner.start()

    def _stop_source(self, key: tuple[str, str]) -> None:
        """Stops a source and drops its objects; a source that changed (say,
        its label selector) is started again and lists what still exists."""
        src = self.sources.pop(key)
        self._runners.pop(key).stop()
        gone = [obj.ref for k, obj in self.state.objects.items() if k[:2] == key]
        for ref in gone:
            self.state.delete_object(ref)
        log.info("stopped keeping %s (%d objects dropped)", src.name, len(gone))

    def _apply(self, src: Source, events: Sequence[Event[cpb.ClusterObject]]) -> None:
        if self.sources.get(src.key) != src:
            return  # a stopped source's last events
        changes: list[ObjectChange] = []
        for ev in events:
            ref = ev.record.ref
            key = (ref.group, ref.resource, ref.namespace, ref.name)
            old = self.state.objects.get(key)
            if ev.type == DELETED:
                self._written.pop(key, None)
                self.state.delete_object(ev.record.ref)
                changes.append((ev.type, old or ev.record, None))
                continue
            written = self._written.get(key)
            if written is not None:
                version = _resource_version(ev.record.json)
                if version is not None and version < written:
                    # Older than what the shim wrote (assumecache.go: an
                    # informer update older than the assumed object is
                    # ignored).
                    continue
                del self._written[key]
            self.state.upsert_object(ev.record)
            changes.append((ev.type, old, ev.record))
        if self.on_change is not None and changes:
            self.on_change(src, changes)

    async def wait_synced(self) -> list[str]:
        """Waits for the first list of every kind; returns the kinds that
        did not list within ``sync_timeout`` (scheduling goes on without
        them)."""
        timeout = self.sync_timeout
        waits = {key: asyncio.ensure_future(r.wait_synced()) for key, r in self._runners.items()}
        if not waits:
            return []
        _done, pending = await asyncio.wait(waits.values(), timeout=timeout)
        for fut in pending:
            fut.cancel()
        late = [self.sources[k].name for k, f in waits.items() if f in pending]
        for name in late:
            log.warning(
                "%s: not listed within %.0fs (is the API or CRD installed, and may the shim "
                "list and watch it? see shim/README.md); scheduling without it meanwhile",
                name,
                timeout,
            )
        return late

    def written(self, answers: Sequence[tuple[pb.ObjectWrite, JSON]]) -> None:
        """What the API server answered to the shim's writes (perform_writes),
        into the cluster state at once for the kinds the shim keeps (its
        Assume). Must run on the event loop."""
        for write, obj in answers:
            src = self.sources.get((write.ref.group, write.ref.resource))
            if src is None or not isinstance(obj, dict):
                continue
            if write.delete:
                # Its watch event removes it (a finalizer may keep it a while).
                continue
            try:
                record = object_record(src, obj)
            except (ObjectError, TypeError, ValueError) as exc:
                log.warning("%s: the answer to a write is not an object: %s", src.name, exc)
                continue
            version = _resource_version(record.json)
            if version is None:
                continue
            ref = record.ref
            key = (ref.group, ref.resource, ref.namespace, ref.name)
            held = self.state.objects.get((ref.group, ref.resource, ref.namespace, ref.name))
            if held is not None:
                current = _resource_version(held.json)
                if current is not None and current > version:
                    continue
            self._written[key] = version
            self.state.upsert_object(record)
            if self.on_change is not None:
                # The change is an event now (e.g. a claim's allocation moves
                # the pods that wait for it); its watch event, when it
                # arrives, finds the state already as it says.
                self.on_change(src, [("MODIFIED", held, record)])

    def stop(self) -> None:
        for runner in self._runners.values():
            runner.stop()

    @property
    def count(self) -> int:
        return len(self.state.objects)


class WriteFailed(Exception):
    """A plugin's ObjectWrite failed; ``index`` is its place in the list."""

    def __init__(self, index: int, write: pb.ObjectWrite, reason: str) -> None:
        self.index = index
        self.write = write
        self.reason = reason
        super().__init__(f"write by plugin {write.plugin!r} to {describe_write(write)}: {reason}")


def describe_write(w: pb.ObjectWrite) -> str:
    ref = w.ref
    where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
    sub = f" ({w.subresource})" if w.subresource else ""
    return f"{kind_name(ref.group, ref.resource)} {where}{sub}"


def write_path(w: pb.ObjectWrite) -> str:
    ref = w.ref
    return object_path(ref.group, w.version, ref.resource, ref.namespace, ref.name, w.subresource)


def targets_pod(w: pb.ObjectWrite, pod: cpb.Pod) -> bool:
    """Is ``w`` a write to ``pod`` (core v1 pods, its namespace and name)?"""
    ref = w.ref
    return (
        ref.group == ""
        and ref.resource == "pods"
        and w.version == "v1"
        and (ref.namespace, ref.name) == (pod.namespace, pod.name)
    )


def perform_writes(
    api: KubeApi, writes: Sequence[pb.ObjectWrite], pod: cpb.Pod | None = None
) -> list[tuple[pb.ObjectWrite, JSON]]:
    """Applies ``writes`` in order as JSON merge patches; the first failure
    stops and raises WriteFailed (the writes before it stay applied). Returns
    each write with the object the API server answered. A write to ``pod``
    (the pod being scheduled, by namespace and name) carries its uid as a
    precondition, as the shim's own pod patches do: a pod replaced by another
    of the same name meanwhile is answered 422 on metadata.uid instead of
    getting what was meant for the first. A write whose resourceVersion
    precondition is the one an earlier write of the list to the same object
    carried is sent with the version that write's answer gave (the module's
    docstring says why)."""
    answers: list[tuple[pb.ObjectWrite, JSON]] = []
    # (group, resource, namespace, name) -> (version a write carried, version
    # its answer gave).
    moved: dict[tuple[str, str, str, str], tuple[str, str]] = {}
    for i, w in enumerate(writes):
        if not w.ref.resource or not w.ref.name or not w.version:
            raise WriteFailed(i, w, "ref.resource, ref.name and version must be set")
        try:
            patch = orjson.loads(w.merge_patch)
        except orjson.JSONDecodeError as exc:
            raise WriteFailed(i, w, f"merge_patch is not JSON: {exc}") from exc
        if not isinstance(patch, dict):
            raise WriteFailed(i, w, "merge_patch must be a JSON object")
        if w.create:
            answers.append((w, _create(api, i, w, patch)))
            continue
        if w.delete:
            answers.append((w, _delete(api, i, w, patch)))
            continue
        if pod is not None and targets_pod(w, pod):
            meta = patch.setdefault("metadata", {})
            if isinstance(meta, dict):
                meta["uid"] = pod.uid
        key = (w.ref.group, w.ref.resource, w.ref.namespace, w.ref.name)
        meta = patch.get("metadata")
        sent = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if isinstance(meta, dict) and isinstance(sent, str) and key in moved:
            carried, answered = moved[key]
            if sent == carried:
                meta["resourceVersion"] = answered
        try:
            answer = api.merge_patch(write_path(w), patch)
        except ApiError as exc:
            raise WriteFailed(i, w, str(exc)) from exc
        log.info("%s: merge patch by plugin %s applied", describe_write(w), w.plugin or "?")
        answers.append((w, answer))
        got = (
            answer.get("metadata", {}).get("resourceVersion") if isinstance(answer, dict) else None
        )
        if isinstance(sent, str) and isinstance(got, str):
            moved[key] = (sent, got)
    return answers


def _create(api: KubeApi, index: int, w: pb.ObjectWrite, body: JSON) -> JSON:
    """A write with ``create``: the object ``body`` POSTed to its kind's
    collection under the ref's namespace and name (protos/README.md,
    "Writes")."""
    if w.subresource:
        raise WriteFailed(index, w, "a create names no subresource")
    meta = body.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise WriteFailed(index, w, "metadata must be a JSON object")
    meta["name"] = w.ref.name
    meta.pop("generateName", None)
    if w.ref.namespace:
        meta["namespace"] = w.ref.namespace
    ref = w.ref
    try:
        answer = api.create(
            collection_path(ref.group, w.version, ref.resource, ref.namespace), body
        )
    except ApiError as exc:
        raise WriteFailed(index, w, str(exc)) from exc
    log.info("%s: created for plugin %s", describe_write(w), w.plugin or "?")
    return answer


def _delete(api: KubeApi, index: int, w: pb.ObjectWrite, body: JSON) -> JSON:
    """A write with ``delete``: the object ``ref`` names deleted, with the
    body's metadata.uid, if any, as the precondition."""
    if w.subresource or w.create:
        raise WriteFailed(index, w, "a delete names no subresource and does not create")
    meta = body.get("metadata")
    uid = meta.get("uid") if isinstance(meta, dict) else None
    ref = w.ref
    try:
        answer = api.delete(
            object_path(ref.group, w.version, ref.resource, ref.namespace, ref.name),
            uid=uid if isinstance(uid, str) else "",
        )
    except ApiError as exc:
        raise WriteFailed(index, w, str(exc)) from exc
    log.info("%s: deleted for plugin %s", describe_write(w), w.plugin or "?")
    return answer


def _resource_version(raw: bytes) -> int | None:
    """metadata.resourceVersion of an object's JSON as a number; None when it
    has none, or one that is not a decimal (compared only as the API server
    hands them out, etcd revisions)."""
    try:
        meta = orjson.loads(raw).get("metadata") or {}
        version = meta.get("resourceVersion")
        return int(version) if isinstance(version, str) and version.isdigit() else None
    except (orjson.JSONDecodeError, AttributeError):
        return None


__all__ = [
    "SYNC_TIMEOUT_SECONDS",
    "ObjectChange",
    "ObjectSources",
    "Poller",
    "Source",
    "WriteFailed",
    "collection_path",
    "describe_write",
    "merge_sources",
    "object_path",
    "object_record",
    "perform_writes",
    "write_path",
]
