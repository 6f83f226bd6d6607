"""HTTP scheduler extenders, as kube-scheduler v1.36.3 runs them
(pkg/scheduler/extender.go HTTPExtender; schedule_one.go
findNodesThatPassExtenders, prioritizeNodes, extendersBinding).

The plugin service runs PreFilter and Filter and stops (ScheduleRequest
.stop_after_filter); the shim sends the feasible nodes through each
interested extender's filter verb in turn, asks the prioritizers for their
scores, and the plugin service goes on at Score with what is left and those
scores added (ScheduleRequest.resume). The extender with a bind verb that is
interested in the pod binds it instead of the default binder
(shim/binding.py). The shim holds the full objects the extenders are sent:
``ObjectJson`` keeps the JSON of every node (only when some extender is not
nodeCacheCapable, which is when node objects are sent) and of the pending
pods of this scheduler's profiles, as the informers deliver them.

What is sent and answered is upstream's ``k8s.io/kube-scheduler/extender/v1``
in Go's JSON encoding (field names as the Go structs spell them; answers'
names matched without regard to case, as encoding/json matches them). Each
call is one POST to ``<urlPrefix>/<verb>`` over a keep-alive pool
(berth.kube.http1), timed out after ``httpTimeout`` (5 s when unset), its
answer bounded (``MAX_RESPONSE_BYTES``) and decoded with orjson.

Differences from upstream, on purpose:

- A filter answer that names a node not among the nodes sent is an error
  also when it comes as ``Nodes`` (upstream then schedules onto the object
  the extender returned, which the scheduler's cache may not hold);
- a prioritize score outside -2^31..2^31 makes the answer an error (upstream
  adds any int64, which may overflow).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import orjson

from berth.framework.extenders import MAX_EXTENDER_PRIORITY, ExtenderConfig
from berth.framework.status import Code, Status
from berth.kube.http1 import Http1Pool, HttpError
from berth.kube.rest import JSON
from berth.kube.tlschain import client_context

log = logging.getLogger(__name__)

__all__ = [
    "EXTENDER_PLUGIN",
    "MAX_RESPONSE_BYTES",
    "ExtenderError",
    "ExtenderSetupError",
    "Extenders",
    "FilterOutcome",
    "HTTPExtender",
    "ObjectJson",
    "PodJson",
]

# framework/types.go ExtenderName: the name a pod's UnschedulablePlugins
# carries when extenders rejected nodes; it registers every cluster event
# (framework.go defaultEnqueueExtension), so any event may retry the pod.
EXTENDER_PLUGIN = "Extender"
# The longest answer taken from an extender. A filter answer of full Node
# objects for thousands of nodes is tens of MiB.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
# fwk.MaxNodeScore / extenderv1.MaxExtenderPriority.
_SCORE_SCALE = 100 // MAX_EXTENDER_PRIORITY
_MAX_SCORE = 2**31
# Connections per extender (calls in one scheduling cycle are sequential;
# binding cycles may bind concurrently).
_CONNECTIONS = 16

R = TypeVar("R")


class ExtenderSetupError(Exception):
    """An extender's client cannot be built (its TLS files or data are
    unreadable or not PEM): the scheduler does not start."""


class ExtenderError(Exception):
    """An extender call failed (no answer, not 200, an answer that is not
    what the verb returns, or the answer's Error field)."""


@dataclass(frozen=True, slots=True)
class PodJson:
    """A pod as the extenders are sent it: its JSON as the API server gave
    it, and the resource names its containers request or limit (for
    managedResources)."""

    uid: str
    namespace: str
    name: str
    body: bytes
    resources: frozenset[str]


def _container_resources(spec: Mapping[str, Any]) -> frozenset[str]:
    """The resource names in requests or limits of the containers and init
    containers (extender.go hasManagedResources)."""
    names: set[str] = set()
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        if not isinstance(containers, list):
            continue
        for c in containers:
            res = c.get("resources") if isinstance(c, dict) else None
            if not isinstance(res, dict):
                continue
            for part in ("requests", "limits"):
                values = res.get(part)
                if isinstance(values, dict):
                    names.update(k for k in values if isinstance(k, str))
    return frozenset(names)


def _meta(obj: JSON) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


class ObjectJson:
    """The full JSON of nodes and of this scheduler's pending pods, from the
    informers (``node_decoder``/``pod_decoder`` wrap their decode functions,
    on the informer threads; ``on_deleted_*`` drop what a DELETED event
    removes, on the event loop)."""

    def __init__(self, profiles: Iterable[str], *, keep_nodes: bool) -> None:
        self._profiles = frozenset(profiles)
        self.keep_nodes = keep_nodes
        # name -> (resourceVersion, JSON); uid -> (resourceVersion, PodJson).
        self._nodes: dict[str, tuple[str, bytes]] = {}
        self._pods: dict[str, tuple[str, PodJson]] = {}

    def node(self, name: str) -> bytes:
        """The node's JSON; a node the informer no longer has is sent by name
        alone (it was deleted during the cycle)."""
        held = self._nodes.get(name)
        if held is not None:
            return held[1]
        return orjson.dumps({"metadata": {"name": name}})

    def pod(self, uid: str) -> PodJson | None:
        held = self._pods.get(uid)
        return None if held is None else held[1]

    def node_decoder(self, decode: Callable[[JSON], R]) -> Callable[[JSON], R]:
        if not self.keep_nodes:
            return decode

        def wrapped(obj: JSON) -> R:
            record = decode(obj)
            meta = _meta(obj)
            name = meta.get("name")
            if isinstance(name, str):
                self._nodes[name] = (str(meta.get("resourceVersion", "")), orjson.dumps(obj))
            return record

        return wrapped

    def pod_decoder(self, decode: Callable[[JSON], R]) -> Callable[[JSON], R]:
        def wrapped(obj: JSON) -> R:
            record = decode(obj)
            meta = _meta(obj)
            uid = meta.get("uid")
            spec = obj.get("spec")
            if not isinstance(uid, str) or not isinstance(spec, dict):
                return record
            if spec.get("nodeName") or spec.get("schedulerName") not in self._profiles:
                self._pods.pop(uid, None)
                return record
            pod = PodJson(
                uid,
                str(meta.get("namespace", "")),
                str(meta.get("name", "")),
                orjson.dumps(obj),
                _container_resources(spec),
            )
            self._pods[uid] = (str(meta.get("resourceVersion", "")), pod)
            return record

        return wrapped

    def on_deleted_node(self, name: str, resource_version: str) -> None:
        held = self._nodes.get(name)
        if held is not None and held[0] == resource_version:
            del self._nodes[name]

    def on_deleted_pod(self, uid: str, resource_version: str) -> None:
        held = self._pods.get(uid)
        if held is not None and held[0] == resource_version:
            del self._pods[uid]


def _ci(obj: Mapping[str, Any], name: str) -> Any:
    """obj[name], matched as encoding/json matches a struct field: the exact
    key first, else any key equal to it without regard to case."""
    if name in obj:
        return obj[name]
    low = name.lower()
    for k, v in obj.items():
        if isinstance(k, str) and k.lower() == low:
            return v
    return None


def _string_map(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ExtenderError(f"decoding the answer: {what} must map node names to strings")
    return value


def _tls_context(cfg: ExtenderConfig, scheme: str) -> tuple[ssl.SSLContext | None, str | None]:
    """extender.go makeTransport: the extender's tlsConfig; with enableHTTPS
    and no CA, verification is off. Data takes precedence over files."""
    if scheme != "https":
        return None, None
    tls = cfg.tls_config
    insecure = bool(tls and tls.insecure)
    if cfg.enable_https and not (tls and tls.has_ca):
        insecure = True
    if tls is None:
        return client_context(verify=not insecure), None
    ca = _pem(tls.ca_data, tls.ca_file, "caFile")
    cert = _pem(tls.cert_data, tls.cert_file, "certFile")
    key = _pem(tls.key_data, tls.key_file, "keyFile")
    with _PemFiles(cert, key) as (cert_tmp, key_tmp):
        ctx = client_context(
            verify=not insecure,
            ca_data=ca.decode() if ca else None,
            cert_file=cert_tmp or None,
            key_file=key_tmp or None,
        )
    return ctx, tls.server_name or None


def _pem(data: bytes, path: str, field: str) -> bytes:
    """The PEM of one tlsConfig item: its data, else its file's content
    (client-go's loadTLSFiles: data takes precedence)."""
    if data or not path:
        return data
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ValueError(f"{field} {path}: {exc.strerror or exc}") from exc


class _PemFiles:
    """PEM data written to private temporary files for the length of a
    ``with`` (ssl loads client certificates from files only)."""

    def __init__(self, *datas: bytes) -> None:
        self._datas = datas
        self._paths: list[str] = []

    def __enter__(self) -> tuple[str, ...]:
        out: list[str] = []
        for data in self._datas:
            if not data:
                out.append("")
                continue
            fd, path = tempfile.mkstemp(prefix="berth-extender-", suffix=".pem")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            self._paths.append(path)
            out.append(path)
        return tuple(out)

    def __exit__(self, *exc: object) -> None:
        for path in self._paths:
            os.unlink(path)


@dataclass(frozen=True, slots=True)
class FilterOutcome:
    """What the extenders left of the feasible nodes, and the statuses of
    those they rejected with a message (FailedNodes: Unschedulable;
    FailedAndUnresolvableNodes: UnschedulableAndUnresolvable)."""

    nodes: list[str]
    statuses: dict[str, Status]
    # Did the extenders filter out any node (Diagnosis gets "Extender")?
    filtered: bool


class HTTPExtender:
    """One configured extender (extender.go HTTPExtender)."""

    def __init__(
        self, cfg: ExtenderConfig, *, max_response_bytes: int = MAX_RESPONSE_BYTES
    ) -> None:
        self.cfg = cfg
        url = urlsplit(cfg.url_prefix)
        self._base = cfg.url_prefix.rstrip("/")
        self._path = url.path.rstrip("/")
        if url.query:
            self._path += "?" + url.query
        ctx, server_name = _tls_context(cfg, url.scheme)
        port = url.port or (443 if url.scheme == "https" else 80)
        host = url.hostname or ""
        self._pool = Http1Pool(
            host,
            port,
            ssl_context=ctx,
            server_hostname=server_name or (host if ctx is not None else None),
            connections=_CONNECTIONS,
            timeout=cfg.http_timeout,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
            max_body=max_response_bytes,
        )
        self.managed = frozenset(r.name for r in cfg.managed_resources)
        self._netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @property
    def name(self) -> str:
        return self.cfg.url_prefix

    @property
    def ignorable(self) -> bool:
        return self.cfg.ignorable

    @property
    def is_filter(self) -> bool:
        return bool(self.cfg.filter_verb)

    @property
    def is_prioritizer(self) -> bool:
        return bool(self.cfg.prioritize_verb)

    @property
    def is_binder(self) -> bool:
        return bool(self.cfg.bind_verb)

    @property
    def supports_preemption(self) -> bool:
        return bool(self.cfg.preempt_verb)

    def is_interested(self, pod: PodJson) -> bool:
        """IsInterested: no managedResources, or the pod's containers
        request or limit one of them."""
        return not self.managed or not self.managed.isdisjoint(pod.resources)

    async def close(self) -> None:
        await self._pool.close()

    async def send(self, verb: str, body: bytes) -> Any:
        """extender.go send: POST the args to <urlPrefix>/<verb>; anything but
        200 is an error; the answer decoded."""
        url = f"{self._base}/{verb}"
        try:
            status, payload = await self._pool.request("POST", f"{self._path}/{verb}", body=body)
        except HttpError as exc:
            raise ExtenderError(f'Post "{url}": {self._why(exc)}') from exc
        if status != 200:
            raise ExtenderError(f"failed {verb} with extender at URL {url}, code {status}")
        try:
            return orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise ExtenderError(f"decoding the answer of {url}: {exc}") from exc

    def _why(self, exc: HttpError) -> str:
        """net/http's words for the common failures, so a FailedScheduling
        message reads as kube-scheduler's."""
        cause = exc.__cause__
        if isinstance(cause, ConnectionRefusedError):
            return f"dial tcp {self._netloc}: connect: connection refused"
        if isinstance(cause, TimeoutError):
            return "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        return str(exc)

    def _args(self, pod: PodJson, nodes: Sequence[str], objects: ObjectJson) -> bytes:
        """ExtenderArgs: the pod, and the nodes as a NodeList, or as names
        when the extender caches nodes (nodeCacheCapable)."""
        if self.cfg.node_cache_capable:
            return b'{"Pod":%s,"Nodes":null,"NodeNames":%s}' % (pod.body, orjson.dumps(list(nodes)))
        items = b",".join(objects.node(n) for n in nodes)
        return b'{"Pod":%s,"Nodes":{"metadata":{},"items":[%s]},"NodeNames":null}' % (
            pod.body,
            items,
        )

    async def filter(
        self, pod: PodJson, nodes: Sequence[str], objects: ObjectJson
    ) -> tuple[list[str], dict[str, str], dict[str, str]]:
        """extender.go Filter: the nodes kept, FailedNodes and
        FailedAndUnresolvableNodes."""
        if not self.is_filter:
            return list(nodes), {}, {}
        answer = await self.send(self.cfg.filter_verb, self._args(pod, nodes, objects))
        if not isinstance(answer, dict):
            raise ExtenderError("decoding the answer: want an ExtenderFilterResult object")
        error = _ci(answer, "Error")
        if error:
            raise ExtenderError(str(error))
        sent = set(nodes)
        kept: list[str] = []
        names = _ci(answer, "NodeNames")
        node_list = _ci(answer, "Nodes")
        if self.cfg.node_cache_capable and names is not None:
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ExtenderError("decoding the answer: NodeNames must be a list of strings")
            kept = names
        elif node_list is not None:
            items = _ci(node_list, "items") if isinstance(node_list, dict) else None
            if not isinstance(items, list):
                raise ExtenderError("decoding the answer: Nodes must be a NodeList")
            for item in items:
                meta = _ci(item, "metadata") if isinstance(item, dict) else None
                name = _ci(meta, "name") if isinstance(meta, dict) else None
                if not isinstance(name, str):
                    raise ExtenderError("decoding the answer: a node in Nodes has no name")
                kept.append(name)
        for name in kept:
            if name not in sent:
                raise ExtenderError(
                    f"extender {self.name!r} claims a filtered node {name!r} which is not "
                    "found in the input node list"
                )
        failed = _string_map(_ci(answer, "FailedNodes"), "FailedNodes")
        unresolvable = _string_map(
            _ci(answer, "FailedAndUnresolvableNodes"), "FailedAndUnresolvableNodes"
        )
        return kept, failed, unresolvable

    async def prioritize(
        self, pod: PodJson, nodes: Sequence[str], objects: ObjectJson
    ) -> list[tuple[str, int]]:
        """extender.go Prioritize: (host, score) as answered."""
        answer = await self.send(self.cfg.prioritize_verb, self._args(pod, nodes, objects))
        if answer is None:
            return []
        if not isinstance(answer, list):
            raise ExtenderError("decoding the answer: want a HostPriorityList")
        out: list[tuple[str, int]] = []
        for entry in answer:
            host = _ci(entry, "Host") if isinstance(entry, dict) else None
            score = _ci(entry, "Score") if isinstance(entry, dict) else None
            if not isinstance(host, str) or not isinstance(score, int) or isinstance(score, bool):
                raise ExtenderError("decoding the answer: want {Host: string, Score: integer}")
            if abs(score) > _MAX_SCORE:
                raise ExtenderError(f"score {score} of node {host!r} is out of range")
            out.append((host, score))
        return out

    async def process_preemption(
        self,
        pod: PodJson,
        victims: Mapping[str, tuple[list[str], int]],
        full: Mapping[str, bytes] | None,
    ) -> dict[str, tuple[list[str], int]]:
        """extender.go ProcessPreemption: the candidates (node to victims'
        uids and PDB violations) as NodeNameToMetaVictims when the extender
        caches nodes (nodeCacheCapable), else as NodeNameToVictims with the
        victims' full objects (``full``, by uid); the answer's
        NodeNameToMetaVictims, as uids."""
        parts: list[bytes] = []
        for node, (uids, violations) in victims.items():
            if self.cfg.node_cache_capable:
                pods = orjson.dumps([{"UID": u} for u in uids])
            else:
                assert full is not None
                pods = b"[" + b",".join(full[u] for u in uids) + b"]"
            parts.append(
                orjson.dumps(node) + b':{"Pods":%s,"NumPDBViolations":%d}' % (pods, violations)
            )
        table = b"{" + b",".join(parts) + b"}"
        if self.cfg.node_cache_capable:
            body = b'{"Pod":%s,"NodeNameToVictims":null,"NodeNameToMetaVictims":%s}'
        else:
            body = b'{"Pod":%s,"NodeNameToVictims":%s,"NodeNameToMetaVictims":null}'
        answer = await self.send(self.cfg.preempt_verb, body % (pod.body, table))
        if answer is not None and not isinstance(answer, dict):
            raise ExtenderError("decoding the answer: want an ExtenderPreemptionResult object")
        meta = _ci(answer, "NodeNameToMetaVictims") if isinstance(answer, dict) else None
        if meta is None:
            return {}
        if not isinstance(meta, dict):
            raise ExtenderError("decoding the answer: NodeNameToMetaVictims must be a mapping")
        out: dict[str, tuple[list[str], int]] = {}
        for node, entry in meta.items():
            pods_in = _ci(entry, "Pods") if isinstance(entry, dict) else None
            count = _ci(entry, "NumPDBViolations") if isinstance(entry, dict) else None
            if pods_in is not None and not isinstance(pods_in, list):
                raise ExtenderError("decoding the answer: Pods must be a list")
            named: list[str] = []
            for p in pods_in or []:
                uid = _ci(p, "UID") if isinstance(p, dict) else None
                if not isinstance(uid, str):
                    raise ExtenderError("decoding the answer: a victim has no UID")
                named.append(uid)
            if count is not None and (not isinstance(count, int) or isinstance(count, bool)):
                raise ExtenderError("decoding the answer: NumPDBViolations must be an integer")
            out[node] = (named, count or 0)
        return out

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """extender.go Bind: ExtenderBindingArgs; the answer's Error fails it."""
        body = orjson.dumps(
            {"PodName": name, "PodNamespace": namespace, "PodUID": uid, "Node": node}
        )
        answer = await self.send(self.cfg.bind_verb, body)
        error = _ci(answer, "Error") if isinstance(answer, dict) else None
        if error:
            raise ExtenderError(str(error))


class Extenders:
    """The configured extenders in the order upstream calls them
    (scheduler.go buildExtenders: the ignorable ones last)."""

    def __init__(self, configs: Sequence[ExtenderConfig], profiles: Iterable[str]) -> None:
        ordered = [c for c in configs if not c.ignorable] + [c for c in configs if c.ignorable]
        self.list = []
        for c in ordered:
            try:
                self.list.append(HTTPExtender(c))
            except (OSError, ssl.SSLError, ValueError) as exc:
                # scheduler.go New: "couldn't build extenders".
                i = list(configs).index(c)
                raise ExtenderSetupError(
                    f"couldn't build extenders: extenders[{i}] ({c.url_prefix}): "
                    f"tlsConfig: {exc}; check the certificate, key and CA it names"
                ) from exc
        self.objects = ObjectJson(
            profiles, keep_nodes=any(not c.node_cache_capable for c in configs)
        )
        for ext in self.list:
            log.info(
                "extender %s: filter %r, prioritize %r (weight %d), bind %r, preempt %r, "
                "nodeCacheCapable %s, ignorable %s, managedResources %s, httpTimeout %gs",
                ext.name,
                ext.cfg.filter_verb,
                ext.cfg.prioritize_verb,
                ext.cfg.weight,
                ext.cfg.bind_verb,
                ext.cfg.preempt_verb,
                ext.cfg.node_cache_capable,
                ext.ignorable,
                sorted(ext.managed) or "all pods",
                ext.cfg.http_timeout,
            )

    async def close(self) -> None:
        await asyncio.gather(*(e.close() for e in self.list))

    def pod(self, uid: str) -> PodJson | None:
        return self.objects.pod(uid)

    def interested(self, pod: PodJson | None) -> bool:
        """Does any extender filter or prioritize this pod?"""
        return pod is not None and any(
            (e.is_filter or e.is_prioritizer) and e.is_interested(pod) for e in self.list
        )

    def preempts(self, pod: PodJson | None) -> bool:
        """Does any extender with a preempt verb want this pod's preemptions?"""
        return pod is not None and any(
            e.supports_preemption and e.is_interested(pod) for e in self.list
        )

    @property
    def any_preempt(self) -> bool:
        return any(e.supports_preemption for e in self.list)

    async def process_preemption(
        self,
        pod: PodJson,
        victims: dict[str, tuple[list[str], int]],
        fetch: Callable[[list[str]], Awaitable[dict[str, bytes]]],
        check: Callable[[str, str, str], str | None],
    ) -> dict[str, tuple[list[str], int]]:
        """preemption.go callExtenders: each interested extender with a
        preempt verb in turn narrows the candidates (node to victims' uids
        and PDB violations). ``fetch`` gives victims' full objects for the
        extenders that are sent them; ``check(extender, node, uid)`` says
        why a victim an extender names cannot be (convertToVictims), or
        None. An ignorable extender's error, or a node it left without
        victims, is skipped; any other is an ExtenderError."""
        for ext in self.list:
            if not victims:
                break
            if not ext.supports_preemption or not ext.is_interested(pod):
                continue
            try:
                full = None
                if not ext.cfg.node_cache_capable:
                    full = await fetch([u for uids, _ in victims.values() for u in uids])
                answer = await ext.process_preemption(pod, victims, full)
                for node, (uids, _) in answer.items():
                    for uid in uids:
                        why = check(ext.name, node, uid)
                        if why is not None:
                            raise ExtenderError(why)
            except ExtenderError as exc:
                if ext.ignorable:
                    log.info(
                        "Skipped extender as it returned error and has ignorable flag set",
                        extra={"extender": ext.name, "err": str(exc), "pod": _key(pod)},
                    )
                    continue
                raise
            for node, (uids, _) in list(answer.items()):
                if uids:
                    continue
                if not ext.ignorable:
                    raise ExtenderError(f'expected at least one victim pod on node "{node}"')
                del answer[node]
                log.info(
                    "Ignored node for which the extender didn't report victims",
                    extra={"node": node, "extender": ext.name},
                )
            victims = answer
        return victims

    def binder(self, pod: PodJson | None) -> HTTPExtender | None:
        """The extender that binds this pod (extendersBinding: a binder
        interested in it); None: the profile's Bind plugins do."""
        if pod is None:
            return None
        for e in self.list:
            if e.is_binder and e.is_interested(pod):
                return e
        return None

    async def filter(self, pod: PodJson, feasible: Sequence[str]) -> FilterOutcome:
        """schedule_one.go findNodesThatPassExtenders: each interested
        extender in turn narrows the nodes; an ignorable one's error is
        logged and skipped, any other's fails the cycle (ExtenderError)."""
        nodes = list(feasible)
        statuses: dict[str, Status] = {}
        for ext in self.list:
            if not nodes:
                break
            if not ext.is_interested(pod):
                continue
            try:
                kept, failed, unresolvable = await ext.filter(pod, nodes, self.objects)
            except ExtenderError as exc:
                if ext.ignorable:
                    log.info(
                        "Skipping extender as it returned error and has ignorable flag set",
                        extra={"extender": ext.name, "err": str(exc), "pod": _key(pod)},
                    )
                    continue
                raise
            for node, msg in unresolvable.items():
                statuses[node] = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (msg,))
            for node, msg in failed.items():
                if node not in unresolvable:
                    statuses[node] = Status(Code.UNSCHEDULABLE, (msg,))
            nodes = kept
        return FilterOutcome(nodes, statuses, len(nodes) != len(feasible))

    async def prioritize(self, pod: PodJson, nodes: Sequence[str]) -> dict[str, int]:
        """prioritizeNodes' extender part: the interested prioritizers,
        concurrently; each score times weight times MaxNodeScore /
        MaxExtenderPriority, summed per node. A failing extender gives no
        scores (logged at V5, as upstream)."""
        chosen = [e for e in self.list if e.is_prioritizer and e.is_interested(pod)]

        async def one(ext: HTTPExtender) -> list[tuple[str, int]]:
            try:
                return await ext.prioritize(pod, nodes, self.objects)
            except ExtenderError as exc:
                log.debug(
                    "Failed to run extender's priority function. No score given by this extender.",
                    extra={"error": str(exc), "pod": _key(pod), "extender": ext.name},
                )
                return []

        totals: dict[str, int] = {}
        for ext, scores in zip(
            chosen, await asyncio.gather(*(one(e) for e in chosen)), strict=True
        ):
            for host, score in scores:
                totals[host] = totals.get(host, 0) + score * ext.cfg.weight * _SCORE_SCALE
        return totals


def _key(pod: PodJson) -> str:
    return f"{pod.namespace}/{pod.name}"
