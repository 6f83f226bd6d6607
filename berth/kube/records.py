"""Kubernetes objects (as decoded from JSON or YAML) to berth.v1 records.

The shim decodes watch events with a fast JSON decoder and converts them
here; ``berth place`` does the same for ``kubectl get -o yaml`` output. Only
the facts plugins read are kept: slim records instead of the ``kubernetes``
package's model objects, which cost milliseconds each.

Where the API server would have defaulted a field that a hand-written
manifest may lack, the default is applied here the same way (namespace
"default", schedulerName "default-scheduler", requests taken from limits when
only limits are given, and pod-level requests completed from the containers
and pod-level limits: pkg/apis/core/v1/defaults.go SetDefaults_Pod,
defaultHugePagePodLimits, defaultPodRequests). Objects from the API server
already carry these defaults; applying them again changes nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard

import orjson
from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.model import (
    CPU,
    EPHEMERAL_STORAGE,
    HUGEPAGES_PREFIX,
    MEMORY,
    PodResourcesOptions,
    ResourceList,
    aggregate_container_limits,
    aggregate_container_requests,
    is_supported_pod_level_resource,
    resource_list,
)
from berth.framework.units import QuantityError, parse_quantity

Obj = Mapping[str, Any]

DEFAULT_SCHEDULER = "default-scheduler"

# What the shim writes on pods that ask for explanations (shim/explain.py);
# left out of pod records.
EXPLAIN_RESULT_ANNOTATION = "explain.berth.dev/result"

# resource.PodResourcesOptions{}: the spec alone, as the defaulting reads it.
_SPEC_ONLY = PodResourcesOptions()


class ObjectError(ValueError):
    """An object that cannot be converted; the message names the field."""


def _int(value: Any, field: str) -> int:
    """An integer field as decoded JSON gives it: a number too large for JSON's
    doubles arrives as infinity (``1e400``), which int() cannot take; refused
    as the record's error, as any other field the API server would refuse."""
    try:
        return int(value)
    except OverflowError:
        raise ObjectError(f"{field}: integer out of range: {value!r}") from None


def _is_map(v: Any) -> TypeGuard[Mapping[str, Any]]:
    """isinstance(v, Mapping) at a fraction of its cost for what decoded JSON
    holds: the ABC check (~2 us) only for a value neither a plain dict nor
    None (an absent field, the common case)."""
    return type(v) is dict or (v is not None and isinstance(v, Mapping))


def _map(obj: Obj, key: str) -> Mapping[str, Any]:
    v = obj.get(key)
    if _is_map(v):
        return v
    return {}


def _update_strings(into: Any, m: Mapping[str, Any]) -> None:
    """A protobuf map field updated with ``m``'s items as strings; nothing for
    an empty ``m`` (the map's update() is Python-level MutableMapping.update,
    several microseconds even when there is nothing to add)."""
    if m:
        into.update({str(k): str(v) for k, v in m.items()})


def _list(obj: Obj, key: str) -> list[Any]:
    v = obj.get(key)
    return v if type(v) is list or isinstance(v, list) else []


def resources(rl: Mapping[str, Any], where: str) -> pb.Resources:
    """A ResourceList ({"cpu": "500m", ...}) as decoded integers."""
    r = pb.Resources()
    r.CopyFrom(_resources(rl, where))
    return r


# Decoded ResourceLists by their items. A cluster's pods ask for few distinct
# lists (a workload's pods all ask the same), and parsing quantities was most
# of a watch event's decoding (~50 of ~90 us per pod); a hit costs a tuple and
# a copy. Only lists of strings (what the API server serves) are kept, so that
# no two inputs that decode differently share a key (1 == True as dict keys).
_RESOURCES: dict[tuple[tuple[str, str], ...], pb.Resources] = {}
_RESOURCES_MAX = 4096


def _resources(rl: Mapping[str, Any], where: str) -> pb.Resources:
    """``resources``, from the cache when it can: the message returned is
    shared, for CopyFrom or reading only."""
    key = tuple(rl.items())
    try:
        hit = _RESOURCES.get(key)
    except TypeError:  # an unhashable value: no quantity, decoding says why
        return _decode_resources(rl, where)
    if hit is not None:
        return hit
    r = _decode_resources(rl, where)
    if all(type(k) is str and type(v) is str for k, v in key):
        if len(_RESOURCES) >= _RESOURCES_MAX:
            _RESOURCES.clear()
        _RESOURCES[key] = r
    return r


def _decode_resources(rl: Mapping[str, Any], where: str) -> pb.Resources:
    r = pb.Resources()
    for name, raw in rl.items():
        try:
            q = parse_quantity(str(raw))
        except QuantityError as exc:
            raise ObjectError(f"{where}.{name}: {exc}") from exc
        if name == "cpu":
            r.milli_cpu = q.milli()
        elif name == "memory":
            r.memory = q.value()
        elif name == "ephemeral-storage":
            r.ephemeral_storage = q.value()
        elif name == "pods":
            r.pods = q.value()
        elif name == "storage":
            continue
        else:
            # Extended resources, hugepages-*, attachable-volumes-*: upstream's
            # IsScalarResourceName.
            r.scalar[name] = q.value()
    return r


def _resources_of_list(rl: ResourceList) -> pb.Resources:
    """The inverse of model.resource_list (CPU in millicores)."""
    r = pb.Resources()
    for name, value in rl.items():
        if name == CPU:
            r.milli_cpu = value
        elif name == MEMORY:
            r.memory = value
        elif name == EPHEMERAL_STORAGE:
            r.ephemeral_storage = value
        else:
            r.scalar[name] = value
    return r


def parse_time_micros(value: Any) -> int:
    if not value:
        return 0
    text = str(value).replace("Z", "+00:00")
    try:
        return int(dt.datetime.fromisoformat(text).timestamp() * 1_000_000)
    except ValueError:
        return 0


def node_record(obj: Obj) -> pb.Node:
    meta = _map(obj, "metadata")
    spec = _map(obj, "spec")
    status = _map(obj, "status")
    name = meta.get("name")
    if not name:
        raise ObjectError("Node metadata.name: required")
    n = pb.Node(
        name=str(name), uid=str(meta.get("uid", "")), unschedulable=bool(spec.get("unschedulable"))
    )
    _update_strings(n.labels, _map(meta, "labels"))
    _update_strings(n.annotations, _map(meta, "annotations"))
    where = f"Node {name} status"
    n.capacity.CopyFrom(_resources(_map(status, "capacity"), f"{where}.capacity"))
    alloc = _map(status, "allocatable") or _map(status, "capacity")
    n.allocatable.CopyFrom(_resources(alloc, f"{where}.allocatable"))
    for t in _list(spec, "taints"):
        n.taints.add(
            key=str(t.get("key", "")),
            value=str(t.get("value", "")),
            effect=str(t.get("effect", "")),
        )
    for img in _list(status, "images"):
        n.images.add(
            names=[str(x) for x in img.get("names") or []],
            size_bytes=_int(img.get("sizeBytes") or 0, "sizeBytes"),
        )
    n.declared_features.extend(str(f) for f in status.get("declaredFeatures") or ())
    return n


def _container(
    c: Obj,
    where: str,
    into: RepeatedCompositeFieldContainer[pb.Container],
    restartable: bool = False,
) -> None:
    """A container, added to ``into`` (a pod's containers or init containers):
    built in place, not as a message of its own copied in (with the upb runtime
    a message of its own has its own arena, and copying it in costs more than
    building it)."""
    res = _map(c, "resources")
    requests = _map(res, "requests")
    limits = _map(res, "limits")
    if limits:
        # SetDefaults_Pod: a resource with a limit and no request requests its limit.
        requests = dict(requests)
        for name, value in limits.items():
            requests.setdefault(name, value)
    out = into.add(
        name=str(c.get("name", "")), image=str(c.get("image", "")), restartable=restartable
    )
    out.requests.CopyFrom(_resources(requests, f"{where}.resources.requests"))
    out.limits.CopyFrom(_resources(limits, f"{where}.resources.limits"))
    for p in _list(c, "ports"):
        out.ports.add(
            container_port=_int(p.get("containerPort") or 0, "containerPort"),
            host_port=_int(p.get("hostPort") or 0, "hostPort"),
            protocol=str(p.get("protocol") or "TCP"),
            host_ip=str(p.get("hostIP") or ""),
        )
    rules = c.get("restartPolicyRules")
    if rules:
        out.restart_rule_actions.extend(str(r.get("action") or "") for r in rules)


def _requirements(items: list[Any], into: Any) -> None:
    """{key, operator, values} entries (label or node selector requirements)."""
    for e in items:
        into.add(
            key=str(e.get("key", "")),
            operator=str(e.get("operator", "")),
            values=[str(v) for v in e.get("values") or []],
        )


def _label_selector(sel: Obj | None, into: pb.LabelSelector) -> None:
    if not sel:
        return
    into.match_labels.update({str(k): str(v) for k, v in _map(sel, "matchLabels").items()})
    _requirements(_list(sel, "matchExpressions"), into.match_expressions)


def _node_selector_term(term: Obj, into: pb.NodeSelectorTerm) -> None:
    _requirements(_list(term, "matchExpressions"), into.match_expressions)
    _requirements(_list(term, "matchFields"), into.match_fields)


def _pod_affinity_term(term: Obj, into: pb.PodAffinityTerm) -> None:
    if term.get("labelSelector") is not None:
        into.label_selector.SetInParent()
        _label_selector(_map(term, "labelSelector"), into.label_selector)
    into.namespaces.extend(str(x) for x in term.get("namespaces") or [])
    into.topology_key = str(term.get("topologyKey", ""))
    if term.get("namespaceSelector") is not None:
        into.namespace_selector.SetInParent()
        _label_selector(_map(term, "namespaceSelector"), into.namespace_selector)
    into.match_label_keys.extend(str(x) for x in term.get("matchLabelKeys") or [])
    into.mismatch_label_keys.extend(str(x) for x in term.get("mismatchLabelKeys") or [])


def _pod_affinity(src: Obj, into: pb.PodAffinity) -> None:
    into.SetInParent()
    for t in _list(src, "requiredDuringSchedulingIgnoredDuringExecution"):
        _pod_affinity_term(t, into.required.add())
    for w in _list(src, "preferredDuringSchedulingIgnoredDuringExecution"):
        wt = into.preferred.add(weight=_int(w.get("weight") or 0, "weight"))
        _pod_affinity_term(_map(w, "podAffinityTerm"), wt.term)


def _affinity(aff: Obj, into: pb.Affinity) -> None:
    na = aff.get("nodeAffinity")
    if _is_map(na):
        into.node_affinity.SetInParent()
        req = na.get("requiredDuringSchedulingIgnoredDuringExecution")
        if _is_map(req):
            into.node_affinity.required.SetInParent()
            for term in _list(req, "nodeSelectorTerms"):
                _node_selector_term(term, into.node_affinity.required.terms.add())
        for p in _list(na, "preferredDuringSchedulingIgnoredDuringExecution"):
            pt = into.node_affinity.preferred.add(weight=_int(p.get("weight") or 0, "weight"))
            _node_selector_term(_map(p, "preference"), pt.preference)
    if _is_map(aff.get("podAffinity")):
        _pod_affinity(_map(aff, "podAffinity"), into.pod_affinity)
    if _is_map(aff.get("podAntiAffinity")):
        _pod_affinity(_map(aff, "podAntiAffinity"), into.pod_anti_affinity)


# Converted spec.affinity by its JSON text. A workload's pods carry the same
# affinity, and converting its terms field by field (~40 us for one pod
# anti-affinity term) was most of such a pod's decoding; a hit costs the
# encoding of the key and a copy. Cleared when full; texts longer than
# _AFFINITY_KEY_MAX are converted every time, so that what a pod creator can
# make the cache hold stays bounded (1024 x 8 KiB of keys).
_AFFINITY: dict[bytes, pb.Affinity] = {}
_AFFINITY_MAX = 1024
_AFFINITY_KEY_MAX = 8192


def _affinity_record(aff: Obj) -> pb.Affinity:
    """spec.affinity as a record, from the cache when it can: the message
    returned is shared, for CopyFrom or reading only. Kept only where the
    text tells the value apart: not for what orjson refuses (a YAML
    manifest's dates, integers past 64 bits) nor for a text holding null,
    which is also how orjson writes infinity and NaN (a JSON 1e400 decodes
    as infinity, which the conversion refuses where an integer is due)."""
    try:
        key: bytes | None = orjson.dumps(aff)
    except TypeError:
        key = None
    if key is not None and (len(key) > _AFFINITY_KEY_MAX or b"null" in key):
        key = None
    hit = None if key is None else _AFFINITY.get(key)
    if hit is not None:
        return hit
    out = pb.Affinity()
    _affinity(aff, out)
    if key is not None:
        if len(_AFFINITY) >= _AFFINITY_MAX:
            _AFFINITY.clear()
        _AFFINITY[key] = out
    return out


def _is_overcommit_allowed(name: str) -> bool:
    """v1 helper IsOvercommitAllowed, for the names pod-level resources
    support: cpu and memory, not hugepages."""
    return not name.startswith(HUGEPAGES_PREFIX)


def _pod_level_resources(res: Obj, p: pb.Pod, where: str) -> None:
    """spec.resources into pod_level_requests/limits, after the API server's
    defaulting with PodLevelResources on (SetDefaults_Pod, after the
    containers' limits became their requests): defaultHugePagePodLimits, then
    defaultPodRequests."""
    raw_requests, raw_limits = _map(res, "requests"), _map(res, "limits")
    requests = resource_list(_resources(raw_requests, f"{where}.requests"))
    limits = resource_list(_resources(raw_limits, f"{where}.limits"))
    if raw_requests or raw_limits:
        # defaultHugePagePodLimits: hugepages limited in the containers and
        # neither requested nor limited at pod level are limited at pod level
        # by the containers' aggregate.
        for name, value in aggregate_container_limits(p).items():
            if not name.startswith(HUGEPAGES_PREFIX) or name in requests:
                continue
            limits.setdefault(name, value)
    if raw_limits or limits:
        # defaultPodRequests: cpu and memory from the containers' aggregate
        # requests, then any supported resource from the pod-level limit.
        for name, value in aggregate_container_requests(p, _SPEC_ONLY).items():
            if is_supported_pod_level_resource(name) and _is_overcommit_allowed(name):
                requests.setdefault(name, value)
        for name, value in limits.items():
            if is_supported_pod_level_resource(name):
                requests.setdefault(name, value)
    if requests:
        p.pod_level_requests.CopyFrom(_resources_of_list(requests))
    if limits:
        p.pod_level_limits.CopyFrom(_resources_of_list(limits))


def _resize_status(status: Obj, p: pb.Pod, where: str) -> None:
    """What in-place resize leaves in the status, as resource.PodRequests
    reads it with UseStatusResources: per container (matched by name, init
    container statuses taking precedence as in upstream's lookup map)
    allocatedResources and resources.requests; the pod-level ones; and
    whether the PodResizePending condition says Infeasible."""
    statuses: dict[str, tuple[str, Obj]] = {}
    for field in ("containerStatuses", "initContainerStatuses"):
        for i, cs in enumerate(_list(status, field)):
            if _is_map(cs):
                statuses[str(cs.get("name", ""))] = (f"{where}.{field}[{i}]", cs)
    if statuses:
        for c in (*p.containers, *p.init_containers):
            found = statuses.get(c.name)
            if found is not None:
                _status_requests(found[1], c.allocated_requests, c.actuated_requests, found[0])
    _status_requests(status, p.pod_level_allocated_requests, p.pod_level_actuated_requests, where)
    resize_seen = disruption_seen = False
    for cond in _list(status, "conditions"):
        if not _is_map(cond):
            continue
        kind = cond.get("type")
        if kind == "PodResizePending" and not resize_seen:
            # IsPodResizeInfeasible: the first such condition decides.
            resize_seen = True
            p.resize_infeasible = cond.get("reason") == "Infeasible"
        elif kind == "DisruptionTarget" and not disruption_seen:
            # default_preemption.go podTerminatingByPreemption: the first
            # DisruptionTarget condition decides.
            disruption_seen = True
            p.preempted_by_scheduler = (
                cond.get("status") == "True" and cond.get("reason") == "PreemptionByScheduler"
            )


def _status_requests(
    status: Obj, allocated: pb.Resources, actuated: pb.Resources, where: str
) -> None:
    """allocatedResources into ``allocated``; resources.requests into
    ``actuated``, which is set (even empty) exactly when ``resources`` is."""
    if _is_map(status.get("allocatedResources")):
        allocated.CopyFrom(
            _resources(_map(status, "allocatedResources"), f"{where}.allocatedResources")
        )
    res = status.get("resources")
    if _is_map(res):
        # CopyFrom sets the field even when the requests are empty.
        actuated.CopyFrom(_resources(_map(res, "requests"), f"{where}.resources.requests"))


def pod_record(
    obj: Obj,
    *,
    assign_uid: bool = False,
    into: RepeatedCompositeFieldContainer[pb.Pod] | None = None,
) -> pb.Pod:
    """A Pod object as a record. ``assign_uid`` gives a pod that was never
    created (a manifest) a random uid. ``into``: the record is added to this
    repeated field and shares its message's memory (``PodSlabs``) instead of
    being a message of its own; on ObjectError a partial entry stays there
    (``PodSlabs`` removes it)."""
    meta = _map(obj, "metadata")
    spec = _map(obj, "spec")
    status = _map(obj, "status")
    name = meta.get("name") or meta.get("generateName")
    if not name:
        raise ObjectError("Pod metadata.name: required")
    uid = str(meta.get("uid") or "")
    if not uid:
        if not assign_uid:
            raise ObjectError(f"Pod {name} metadata.uid: required")
        uid = str(uuid.uuid4())
    where = f"Pod {name} spec"
    p = (pb.Pod if into is None else into.add)(
        uid=uid,
        name=str(name),
        namespace=str(meta.get("namespace") or "default"),
        node_name=str(spec.get("nodeName") or ""),
        scheduler_name=str(spec.get("schedulerName") or DEFAULT_SCHEDULER),
        priority=_int(spec.get("priority") or 0, "priority"),
        phase=str(status.get("phase") or ""),
        creation_unix_micros=parse_time_micros(meta.get("creationTimestamp")),
        start_unix_micros=parse_time_micros(status.get("startTime")),
        terminating=bool(meta.get("deletionTimestamp")),
        nominated_node_name=str(status.get("nominatedNodeName") or ""),
        preemption_policy=str(spec.get("preemptionPolicy") or "PreemptLowerPriority"),
        host_network=bool(spec.get("hostNetwork")),
    )
    _update_strings(p.labels, _map(meta, "labels"))
    _update_strings(p.annotations, _map(meta, "annotations"))
    if EXPLAIN_RESULT_ANNOTATION in p.annotations:
        # The scheduler's own output (shim/explain.py), not an input: writing
        # it must not look like a change of the pod.
        del p.annotations[EXPLAIN_RESULT_ANNOTATION]
    for i, c in enumerate(_list(spec, "containers")):
        _container(c, f"{where}.containers[{i}]", p.containers)
    for i, c in enumerate(_list(spec, "initContainers")):
        _container(
            c,
            f"{where}.initContainers[{i}]",
            p.init_containers,
            restartable=c.get("restartPolicy") == "Always",
        )
    if spec.get("hostUsers") is not None:
        p.host_users = bool(spec["hostUsers"])
    if spec.get("overhead"):
        p.overhead.CopyFrom(_resources(_map(spec, "overhead"), f"{where}.overhead"))
    if _is_map(spec.get("resources")):
        _pod_level_resources(_map(spec, "resources"), p, f"{where}.resources")
    _resize_status(status, p, f"Pod {name} status")
    _update_strings(p.node_selector, _map(spec, "nodeSelector"))
    if _is_map(spec.get("affinity")):
        p.affinity.CopyFrom(_affinity_record(_map(spec, "affinity")))
    for t in _list(spec, "tolerations"):
        tol = p.tolerations.add(
            key=str(t.get("key") or ""),
            operator=str(t.get("operator") or ""),
            value=str(t.get("value") or ""),
            effect=str(t.get("effect") or ""),
        )
        if t.get("tolerationSeconds") is not None:
            tol.toleration_seconds = _int(t["tolerationSeconds"], "tolerationSeconds")
    for c in _list(spec, "topologySpreadConstraints"):
        tsc = p.topology_spread_constraints.add(
            max_skew=_int(c.get("maxSkew") or 0, "maxSkew"),
            topology_key=str(c.get("topologyKey") or ""),
            when_unsatisfiable=str(c.get("whenUnsatisfiable") or ""),
            node_affinity_policy=str(c.get("nodeAffinityPolicy") or ""),
            node_taints_policy=str(c.get("nodeTaintsPolicy") or ""),
        )
        if c.get("labelSelector") is not None:
            tsc.label_selector.SetInParent()
            _label_selector(_map(c, "labelSelector"), tsc.label_selector)
        if c.get("minDomains") is not None:
            tsc.min_domains = _int(c["minDomains"], "minDomains")
        tsc.match_label_keys.extend(str(x) for x in c.get("matchLabelKeys") or [])
    p.scheduling_gates.extend(str(g.get("name", "")) for g in _list(spec, "schedulingGates"))
    group = _map(spec, "schedulingGroup").get("podGroupName")
    if group:
        p.scheduling_group = _scheduling_group(group, f"{where}.schedulingGroup.podGroupName")
    _volumes(_list(spec, "volumes"), p)
    _resource_claims(_list(spec, "resourceClaims"), _list(status, "resourceClaimStatuses"), p)
    for ref in _list(meta, "ownerReferences"):
        if ref.get("controller"):
            p.owner_kind = str(ref.get("kind", ""))
            p.owner_name = str(ref.get("name", ""))
    return p


# A DNS subdomain's longest (core/v1 PodSchedulingGroup.PodGroupName: "Must be
# a DNS subdomain"); the API server refuses longer.
MAX_POD_GROUP_NAME = 253


def _scheduling_group(value: Any, field: str) -> str:
    """spec.schedulingGroup.podGroupName: a string of at most 253 characters,
    else the record's error (the API server validates it the same way)."""
    if not isinstance(value, str):
        raise ObjectError(f"{field}: must be a string, got {type(value).__name__}")
    if len(value) > MAX_POD_GROUP_NAME:
        raise ObjectError(
            f"{field}: {len(value)} characters, a DNS subdomain has at most {MAX_POD_GROUP_NAME}"
        )
    return value


# Pods per shared message of ``PodSlabs``: enough to spread a message's fixed cost
# (its arena's first blocks, ~1.4 KB) thin, few enough that a record kept alive
# alone keeps little else alive with it.
POD_SLAB = 64


class PodSlabs:
    """``pod_record`` for many pods at once (an informer's list): the records go
    into shared messages of ``size`` pods each instead of a message each. With the
    upb protobuf runtime every message made on its own has its own arena, whose
    first blocks are most of a slim record's memory: ~3.0 KB a pod alone against
    ~1.7 KB in a shared message (berth/dev/memprobe.py measures the processes).
    A shared message lives while any record of it does: meant for records that
    are decoded together and mostly live long (the first list's), not for watch
    events one at a time. Not thread-safe: one decoding thread per instance."""

    def __init__(self, size: int = POD_SLAB) -> None:
        self._size = size
        self._slab: RepeatedCompositeFieldContainer[pb.Pod] | None = None

    def __call__(self, obj: Obj) -> pb.Pod:
        """``pod_record(obj)``, all or nothing: a pod that fails leaves no
        entry in the shared message: it holds whole records only."""
        slab = self._slab
        if slab is None or len(slab) >= self._size:
            slab = self._slab = pb.ClusterDelta().upsert_pods
        whole = len(slab)
        try:
            return pod_record(obj, into=slab)
        except BaseException:
            del slab[whole:]
            raise


# The inline sources (spec.volumes[] other than a claim) that volume plugins
# inspect; Volume.source_json carries the whole entry for them (cluster.proto).
_INLINE_SOURCES = frozenset(
    {"gcePersistentDisk", "awsElasticBlockStore", "rbd", "iscsi", "azureDisk", "cinder", "csi"}
)


def _resource_claims(claims: list[Any], statuses: list[Any], p: pb.Pod) -> None:
    """spec.resourceClaims and status.resourceClaimStatuses (DynamicResources).
    A null or absent resourceClaimName / resourceClaimTemplateName stays unset,
    as upstream's nil pointers (resourceclaim.Name tells them apart)."""
    for c in claims:
        if not _is_map(c):
            continue
        rc = p.resource_claims.add(name=str(c.get("name") or ""))
        if c.get("resourceClaimName") is not None:
            rc.resource_claim_name = str(c["resourceClaimName"])
        if c.get("resourceClaimTemplateName") is not None:
            rc.resource_claim_template_name = str(c["resourceClaimTemplateName"])
    for st in statuses:
        if not _is_map(st):
            continue
        rs = p.resource_claim_statuses.add(name=str(st.get("name") or ""))
        if st.get("resourceClaimName") is not None:
            rs.resource_claim_name = str(st["resourceClaimName"])


def _volumes(volumes: list[Any], p: pb.Pod) -> None:
    """spec.volumes into ``p.volumes`` (claims, generic ephemeral volumes with
    the claim the API creates for them, ``<pod name>-<volume name>`` as
    component-helpers ephemeral.VolumeClaimName names it, and the inline
    sources plugins inspect), and the claim names into ``p.pvc_names``. Other
    volumes (configMap, secret, emptyDir, ...) are left out."""
    for v in volumes:
        if not _is_map(v):
            continue
        name = str(v.get("name") or "")
        claim = v.get("persistentVolumeClaim")
        if _is_map(claim):
            claim_name = str(claim.get("claimName") or "")
            if claim_name:
                p.pvc_names.append(claim_name)
            p.volumes.add(name=name, claim_name=claim_name, read_only=bool(claim.get("readOnly")))
        elif _is_map(v.get("ephemeral")):
            p.volumes.add(name=name, claim_name=f"{p.name}-{name}", ephemeral=True)
        elif not _INLINE_SOURCES.isdisjoint(v):
            p.volumes.add(name=name, source_json=json.dumps(v, separators=(",", ":")).encode())


def occupies_node(pod: pb.Pod) -> bool:
    """Does the pod count against its node's resources? Bound and not
    finished (upstream's cache skips Succeeded/Failed pods)."""
    return bool(pod.node_name) and pod.phase not in ("Succeeded", "Failed")


def split_objects(docs: Iterable[Any]) -> tuple[list[Obj], list[Obj]]:
    """Nodes and pods from YAML documents: single objects, ``kind: List``
    (``kubectl get nodes,pods -o yaml``) or plain lists."""
    nodes: list[Obj] = []
    pods: list[Obj] = []

    def visit(obj: Any) -> None:
        if obj is None:
            return
        if isinstance(obj, list):
            for x in obj:
                visit(x)
            return
        if not _is_map(obj):
            raise ObjectError(f"expected a Kubernetes object, got {type(obj).__name__}")
        kind = obj.get("kind")
        if kind in ("List", "NodeList", "PodList") or (kind is None and "items" in obj):
            visit(obj.get("items") or [])
        elif kind == "Node":
            nodes.append(obj)
        elif kind == "Pod":
            pods.append(obj)
        # Other kinds are not cluster state the plugins read yet.

    for d in docs:
        visit(d)
    return nodes, pods
