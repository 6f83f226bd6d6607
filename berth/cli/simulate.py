"""Pods placed one after another through a profile's real plugin chain, as the shim would.

The engine of ``berth what-if``. It drives the same calls the shim makes
(shim/service.py ``PluginService``) against the plugin server's own servicer
(server/service.py ``SchedulingService``) in this process, the shim's in-process
mode: PreEnqueue, the scheduling cycle (PreFilter .. Score, host selection,
Reserve, Permit), then for a placed pod the binding cycle (PreBind, Bind,
PostBind). What the shim does with each answer is done here on the snapshot
instead of the API server:

- a placed pod is assumed on its node with Reserve's annotations
  (shim/cache.py ``assume``, schedule_one.go assume), so later pods see it;
- PreBind's and PostBind's writes (a PVC's selected node, a PV's claimRef, a
  claim's allocation, annotations on the pod) are applied to the snapshot's
  objects as the JSON merge patches they are (RFC 7386), where the shim sends
  them to the API server and puts the answer into its state
  (shim/objects.py ``ObjectSources.written``);
- once bound, the pod's record is the one the informer would bring: the pod
  with its node and the writes made to it;
- a pod a Permit plugin holds (Coscheduling's gang) waits, keeping its node,
  until the plugins allow it (the signals of later pods' cycles) or the run
  ends, when it is rejected as upstream's Permit timeout rejects it and its
  node is given back (Unreserve);
- a PostFilter that preempts (DefaultPreemption) has its victims deleted from
  the snapshot, and the pod tries again at once, as the shim's retry after
  the victims are gone does (schedule_one.go evaluateNominatedNode tries the
  nominated node first).

The pods are tried in the order given, as pods created one after another are
popped by the scheduling queue. Pods left pending are tried again, in order,
while a pass places any pod (at most ``passes`` passes): what the scheduling
queue's retries on cluster events, and at the latest its 5-minute flush of
unschedulable pods (podMaxInUnschedulablePodsDuration), come to.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog
from berth.framework.model import pod_requests
from berth.framework.profile import SchedulerConfig
from berth.shim.fiterror import is_rejected, rejection
from berth.shim.objects import Source, object_record, targets_pod
from berth.shim.service import PluginService

__all__ = [
    "DEFAULT_PASSES",
    "NodeUse",
    "PodOutcome",
    "Run",
    "Simulation",
    "merge_patch",
]

# At most this many passes over the pods left pending.
DEFAULT_PASSES = 5
# Placement progress on stderr every this many pods, for runs of more pods than that.
PROGRESS_PODS = 500

PLACED = "placed"
PENDING = "pending"
GATED = "gated"
PREEMPTED = "preempted"
ERROR = "error"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch of ``target`` (not modified) by ``patch``."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


@dataclass(slots=True)
class PodOutcome:
    """Where one pod went, and why."""

    pod: str
    profile: str
    status: str = PENDING
    node: str = ""
    # Pending: the FailedScheduling text (upstream's FitError words where no node
    # fit); placed: empty, or what it preempted.
    reason: str = ""
    # Pods (namespace/name) deleted to make room for it (DefaultPreemption).
    victims: list[str] = field(default_factory=list)
    attempts: int = 0

    @property
    def placed(self) -> bool:
        return self.status == PLACED


@dataclass(frozen=True, slots=True)
class Amount:
    requested: int
    allocatable: int


@dataclass(frozen=True, slots=True)
class NodeUse:
    """What the pods on a node request against its allocatable, after the run.
    cpu in millicores, memory in bytes; ``extended``: extended resources the
    node offers (GPUs, ...); ``devices``: DRA devices its ResourceSlices publish,
    by driver, and how many claims' allocations use."""

    node: str
    cpu: Amount
    memory: Amount
    pods: Amount
    extended: Mapping[str, Amount]
    devices: Mapping[str, Amount]


@dataclass(slots=True)
class Run:
    """One configuration's answer."""

    name: str
    source: str
    pods: list[PodOutcome]
    nodes: list[NodeUse]
    # Pods of the snapshot (not of the run) deleted as preemption victims.
    evicted: list[str] = field(default_factory=list)
    passes: int = 1

    @property
    def pending(self) -> list[PodOutcome]:
        return [p for p in self.pods if not p.placed]


@dataclass(slots=True)
class _Waiting:
    """A pod held at Permit (shim/binding.py WaitingPod)."""

    index: int
    pod: cpb.Pod
    profile: str
    node: str
    cycle: pb.CycleState
    pending: dict[str, float]
    pre_bind_skip: bool


class Simulation:
    """One configuration's run over a snapshot; ``run`` once."""

    def __init__(
        self,
        name: str,
        config: SchedulerConfig,
        service: Any,
        state: ClusterStateLog,
        pods: Sequence[tuple[cpb.Pod, Mapping[str, Any]]],
        *,
        profile: str | None = None,
        passes: int = DEFAULT_PASSES,
        seed: int = 1,
        progress: Callable[[str], None] | None = None,
        pod_sources: Callable[[Mapping[str, str]], Sequence[Source]] = lambda _labels: (),
    ) -> None:
        """``service``: a server.service.SchedulingService for ``config``;
        ``state``: the snapshot's cluster state (the run changes it); ``pods``:
        each pod to place with its manifest (for the kinds that read pods)."""
        self.name = name
        self.config = config
        self._service = service
        self.svc = PluginService.in_process(service, state)
        self.state = state
        self.pods = [p for p, _ in pods]
        self._manifests = [m for _, m in pods]
        self.profile = profile
        self.passes = max(1, passes)
        self.seed = seed
        self._cycles = 0
        self.progress = progress
        self.outcomes: list[PodOutcome] = []
        self._start: dict[str, int] = {}
        self._waiting: dict[str, _Waiting] = {}
        self._index_of: dict[str, int] = {p.uid: i for i, p in enumerate(self.pods)}
        self._evicted: list[str] = []
        # The read kinds a pod shows up in, by its labels (Coscheduling's
        # grouped pods): Snapshot.pod_sources.
        self._pod_sources = pod_sources
        # Waiting pods the last signals allowed (uids) or rejected (uid, plugin,
        # message), handled by _drain once the call that signalled is done.
        self._ready: list[str] = []
        self._rejected: list[tuple[str, str, str]] = []

    # -- the run ------------------------------------------------------------------------

    async def run(self) -> Run:
        profiles = await self.svc.describe()
        self.outcomes = [
            PodOutcome(f"{p.namespace}/{p.name}", self._profile_of(p, profiles)) for p in self.pods
        ]
        # The pods to place exist (pending) from the start, as pods created
        # together: kinds that read pods see all of them.
        for i, pod in enumerate(self.pods):
            self._put_pod_object(i, pod, "")
        passes = 0
        todo = list(range(len(self.pods)))
        while todo and passes < self.passes:
            passes += 1
            placed_before = sum(o.placed for o in self.outcomes) + len(self._waiting)
            for n, i in enumerate(todo):
                if self.progress is not None and n and n % PROGRESS_PODS == 0:
                    self.progress(f"{self.name}: pass {passes}, {n}/{len(todo)} pods tried")
                await self._try(i)
                await self._drain()
            todo = [
                i
                for i, o in enumerate(self.outcomes)
                if not o.placed and o.status != ERROR and self.pods[i].uid not in self._waiting
            ]
            if sum(o.placed for o in self.outcomes) + len(self._waiting) == placed_before:
                break
        for uid in list(self._waiting):
            await self._permit_timed_out(uid)
        self._service.close()
        return Run(
            self.name,
            str(self.config.source),
            self.outcomes,
            utilisation(self.state),
            self._evicted,
            passes,
        )

    def _profile_of(self, pod: cpb.Pod, profiles: Mapping[str, Any]) -> str:
        if self.profile:
            return self.profile
        if pod.scheduler_name in profiles or len(profiles) != 1:
            return pod.scheduler_name
        return next(iter(profiles))

    async def _try(self, i: int, retry_preemption: bool = True) -> None:
        out = self.outcomes[i]
        pod = self.pods[i]
        if out.profile not in self.svc.profiles:
            names = ", ".join(sorted(self.svc.profiles))
            out.status, out.reason = (
                ERROR,
                f"no profile {out.profile!r} in the configuration (profiles: {names})",
            )
            return
        out.attempts += 1
        gate = await self.svc.pre_enqueue(out.profile, pod)
        if gate.code != pb.CODE_SUCCESS:
            out.status = GATED
            out.reason = "; ".join(gate.reasons) or f"turned away by {gate.plugin} at PreEnqueue"
            if gate.plugin:
                out.reason = f"{gate.plugin}: {out.reason}"
            return
        # The shim's PluginService.schedule, with a seed: among equal top scores
        # the pick is random (schedule_one.py select_host), reproducibly here.
        self.state.commit()
        self._cycles += 1
        resp = await self.svc.client.schedule(
            out.profile,
            pod,
            start_index=self._start.get(out.profile, 0),
            reserve_and_permit=True,
            seed=self.seed + self._cycles,
        )
        self._start[out.profile] = resp.next_start_index
        st = resp.status
        if st.code == pb.CODE_SUCCESS and resp.node:
            await self._placed(i, resp)
            return
        # No node: the shim's handle_result for a failed cycle.
        pf = resp.post_filter
        self._signal(pf.signals)
        await self._write(pod, list(pf.writes))
        out.status, out.node = PENDING, ""
        out.reason = resp.diagnosis.message or "; ".join(st.reasons) or "scheduling failed"
        if st.code == pb.CODE_ERROR:
            out.status = ERROR
            return
        if pf.nominated_node_name and pf.victims and retry_preemption:
            await self._preempt(i, pf)

    async def _placed(self, i: int, resp: pb.ScheduleResponse) -> None:
        out, pod = self.outcomes[i], self.pods[i]
        node = resp.node
        rs = resp.reserve_status
        if rs.code != pb.CODE_SUCCESS:
            self._signal(resp.unreserve_signals)
            self._failed(i, node, rs, "Reserve failed")
            return
        permit = resp.permit
        if permit.status.code not in (pb.CODE_SUCCESS, pb.CODE_WAIT, pb.CODE_SKIP):
            self._signal(permit.signals)
            self._signal(resp.unreserve_signals)
            self._failed(i, node, permit.status, "rejected at Permit")
            return
        # shim/cache.py assume: the pod on its node with Reserve's annotations.
        assumed = cpb.Pod()
        assumed.CopyFrom(pod)
        assumed.node_name = node
        if resp.assume_annotations:
            assumed.annotations.update(resp.assume_annotations)
            assumed.assumed = True
        self.state.upsert_pod(assumed)
        out.status, out.node, out.reason = PLACED, node, ""
        if resp.HasField("pre_bind_pre_flight_error"):
            await self._unreserve(i, node, resp.cycle)
            e = resp.pre_bind_pre_flight_error
            self._unplace(i, "; ".join(e.reasons) or f"PreBindPreFlight of {e.plugin} failed")
            return
        w = _Waiting(
            i,
            pod,
            out.profile,
            node,
            resp.cycle,
            dict(permit.wait_timeout_millis),
            resp.pre_bind_skip,
        )
        if permit.status.code == pb.CODE_WAIT:
            out.status = PENDING
            out.reason = f"waiting at Permit on {node} for {', '.join(sorted(w.pending))}"
            self._waiting[pod.uid] = w
            self._signal(permit.signals)
            return
        self._signal(permit.signals)
        await self._bind(w)

    def _failed(self, i: int, node: str, st: pb.Status, fallback: str) -> None:
        """A Reserve or Permit rejection: a FitError over the one node
        (shim/fiterror.py), or an error."""
        out = self.outcomes[i]
        out.node = ""
        if st.code == pb.CODE_ERROR or not is_rejected(st):
            out.status, out.reason = ERROR, "; ".join(st.reasons) or fallback
            return
        out.status, out.reason = PENDING, rejection(node, st)[0]

    def _signal(self, signals: Sequence[pb.WaitingPodSignal]) -> None:
        """Permit's, PostFilter's and Unreserve's answers to waiting pods
        (shim/binding.py WaitingPods.signal): allowed pods go on to bind once
        every plugin allowed them, rejected ones give their node back. Run
        after the current call, in order."""
        for sig in signals:
            w = self._waiting.get(sig.pod_uid)
            if w is None:
                continue
            if sig.allow:
                w.pending.pop(sig.plugin, None)
                if not w.pending:
                    self._ready.append(sig.pod_uid)
            else:
                self._rejected.append((sig.pod_uid, sig.plugin, sig.message or "rejected"))

    async def _drain(self) -> None:
        """The waiting pods the last signals allowed or rejected."""
        while self._ready or self._rejected:
            if self._rejected:
                uid, plugin, message = self._rejected.pop(0)
                w = self._waiting.pop(uid, None)
                if w is not None:
                    await self._unreserve(w.index, w.node, w.cycle)
                    text = f"{message} (plugin {plugin})" if plugin else message
                    self._unplace(
                        w.index,
                        rejection(w.node, pb.Status(code=pb.CODE_UNSCHEDULABLE, reasons=[text]))[0],
                    )
                continue
            uid = self._ready.pop(0)
            w = self._waiting.pop(uid, None)
            if w is not None:
                await self._bind(w)

    async def _permit_timed_out(self, uid: str) -> None:
        """WaitOnPermit's timer: the first plugin to time out rejects the pod
        (shim/binding.py _wait_permit, waiting_pods_map.go)."""
        w = self._waiting.get(uid)
        if w is None:
            return
        plugin = min(w.pending, key=lambda p: w.pending[p]) if w.pending else ""
        seconds = w.pending.get(plugin, 0) / 1000.0
        self._rejected.append(
            (uid, "", f"rejected due to timeout after waiting {seconds:g}s at plugin {plugin}")
        )
        await self._drain()

    async def _bind(self, w: _Waiting) -> None:
        """The binding cycle (shim/binding.py _binding_cycle) on the snapshot."""
        i, pod, profile, node, cycle = w.index, w.pod, w.profile, w.node, w.cycle
        info = self.svc.profiles.get(profile)
        out = self.outcomes[i]
        pod_writes: list[pb.ObjectWrite] = []
        if (info is None or info.has("preBind")) and not w.pre_bind_skip:
            st: pb.StatusResponse = await self.svc.node_call("PreBind", profile, pod, node, cycle)
            if st.status.code == pb.CODE_WAIT and st.recheck_after_ms > 0:
                # A plugin waits for something outside the scheduler (devices'
                # binding conditions): the shim performs the writes, keeps the pod
                # assumed and asks again later. Nothing outside changes a snapshot,
                # so the pod holds its node, reported as waiting.
                await self._write(pod, list(st.writes))
                out.status, out.node = PENDING, node
                out.reason = f"assumed on {node}, binding waits at PreBind: " + (
                    "; ".join(st.status.reasons) or st.status.plugin
                )
                await self._drain()
                return
            if st.status.code not in (pb.CODE_SUCCESS, pb.CODE_SKIP):
                await self._unreserve(i, node, cycle)
                self._unplace(
                    i, "; ".join(st.status.reasons) or f"PreBind of {st.status.plugin} failed"
                )
                return
            pod_writes += await self._write(pod, list(st.writes))
        if info is not None and not info.shim_binds:
            bind: pb.BindResponse = await self.svc.node_call("Bind", profile, pod, node, cycle)
            if bind.status.code != pb.CODE_SUCCESS:
                await self._unreserve(i, node, cycle)
                self._unplace(
                    i,
                    "binding rejected: "
                    + ("; ".join(bind.status.reasons) or "no bind plugin bound the pod"),
                )
                return
        # Bound: the informer's copy replaces the assumed one (the pod, its node,
        # what was written to it).
        bound = cpb.Pod()
        bound.CopyFrom(pod)
        bound.node_name = node
        _apply_to_pod(bound, pod_writes)
        self.state.upsert_pod(bound)
        self._put_pod_object(i, bound, node, pod_writes)
        out.status, out.node = PLACED, node
        if not out.victims:
            out.reason = ""
        if info is None or info.has("postBind"):
            post: pb.StatusResponse = await self.svc.node_call(
                "PostBind", profile, pod, node, cycle
            )
            await self._write(bound, list(post.writes))
        await self._drain()

    async def _unreserve(self, i: int, node: str, cycle: pb.CycleState) -> None:
        out, pod = self.outcomes[i], self.pods[i]
        info = self.svc.profiles.get(out.profile)
        self.state.delete_pod(pod.uid)
        if info is None or info.has("reserve"):
            resp: pb.StatusResponse = await self.svc.node_call(
                "Unreserve", out.profile, pod, node, cycle
            )
            self._signal(resp.signals)
            await self._write(pod, list(resp.writes))

    def _unplace(self, i: int, reason: str) -> None:
        out = self.outcomes[i]
        self.state.delete_pod(self.pods[i].uid)
        self._put_pod_object(i, self.pods[i], "")
        out.status, out.node, out.reason = PENDING, "", reason

    async def _preempt(self, i: int, pf: pb.PostFilterResponse) -> None:
        """The victims are deleted (shim/preemption.py), the pod nominated to
        the node and tried again."""
        out, pod = self.outcomes[i], self.pods[i]
        names = []
        for v in pf.victims:
            names.append(f"{v.namespace}/{v.name}")
            self.state.delete_pod(v.uid)
            self._waiting.pop(v.uid, None)
            k = self._index_of.get(v.uid)
            if k is not None:
                victim = self.outcomes[k]
                victim.status, victim.node = PREEMPTED, ""
                victim.reason = f"preempted by {out.pod} on {pf.nominated_node_name}"
                self._put_pod_object(k, self.pods[k], "")
            else:
                self._evicted.append(f"{v.namespace}/{v.name}")
                # Gone from the kinds that read pods too (a no-op when none does).
                self.state.delete_object(
                    cpb.ObjectRef(resource="pods", namespace=v.namespace, name=v.name)
                )
        nominated = cpb.Pod()
        nominated.CopyFrom(pod)
        nominated.nominated_node_name = pf.nominated_node_name
        self.pods[i] = nominated
        await self._try(i, retry_preemption=False)
        if out.placed:
            out.victims = names
            out.reason = f"preempted {', '.join(names)}"

    # -- writes -------------------------------------------------------------------------

    async def _write(self, pod: cpb.Pod, writes: list[pb.ObjectWrite]) -> list[pb.ObjectWrite]:
        """Applies the writes to the snapshot's objects; returns those that
        target ``pod`` itself (they change its record once it is bound)."""
        mine: list[pb.ObjectWrite] = []
        for w in writes:
            if targets_pod(w, pod):
                mine.append(w)
                continue
            key = (w.ref.group, w.ref.resource, w.ref.namespace, w.ref.name)
            try:
                patch = orjson.loads(w.merge_patch)
            except orjson.JSONDecodeError:
                continue
            held = self.state.objects.get(key)
            if w.delete:
                self.state.delete_object(w.ref)
                continue
            if w.create:
                body = patch if isinstance(patch, dict) else {}
                body.setdefault("metadata", {})
                body["metadata"].update(name=w.ref.name, namespace=w.ref.namespace or None)
                data: Any = {k: v for k, v in body.items()}
            elif held is None:
                # Not a kind the snapshot keeps (the shim would write it and no
                # plugin would read it back).
                continue
            else:
                data = merge_patch(orjson.loads(held.json), patch)
            meta = data.get("metadata") if isinstance(data, dict) else None
            if isinstance(meta, dict):
                meta = {k: v for k, v in meta.items() if v is not None}
                rv = meta.get("resourceVersion")
                meta["resourceVersion"] = (
                    str(int(rv) + 1) if isinstance(rv, str) and rv.isdigit() else "1"
                )
                data["metadata"] = meta
            record = cpb.ClusterObject(
                ref=w.ref,
                version=held.version if held is not None else w.version,
                kind=held.kind if held is not None else str(data.get("kind") or ""),
                json=orjson.dumps(data),
            )
            self.state.upsert_object(record)
        return mine

    def _put_pod_object(
        self, i: int, pod: cpb.Pod, node: str, writes: Sequence[pb.ObjectWrite] = ()
    ) -> None:
        """The pod as the kinds that read pods see it: its manifest, with its
        node and the writes made to it."""
        sources = self._pod_sources(pod.labels)
        if not sources:
            return
        manifest: Any = dict(self._manifests[i])
        meta = dict(manifest.get("metadata") or {})
        meta["uid"] = pod.uid
        meta.setdefault("namespace", pod.namespace)
        manifest["metadata"] = meta
        spec = dict(manifest.get("spec") or {})
        if node:
            spec["nodeName"] = node
        else:
            spec.pop("nodeName", None)
        manifest["spec"] = spec
        for w in writes:
            try:
                manifest = merge_patch(manifest, orjson.loads(w.merge_patch))
            except orjson.JSONDecodeError:
                continue
        for src in sources:
            self.state.upsert_object(object_record(src, manifest))


def _apply_to_pod(pod: cpb.Pod, writes: Sequence[pb.ObjectWrite]) -> None:
    """The labels and annotations merge patches to the pod set (what plugins
    write on the pod they schedule)."""
    for w in writes:
        try:
            patch = orjson.loads(w.merge_patch)
        except orjson.JSONDecodeError:
            continue
        meta = patch.get("metadata") if isinstance(patch, dict) else None
        if not isinstance(meta, dict):
            continue
        for name, into in (("annotations", pod.annotations), ("labels", pod.labels)):
            values = meta.get(name)
            if not isinstance(values, dict):
                continue
            for k, v in values.items():
                if v is None:
                    into.pop(k, None)
                else:
                    into[str(k)] = str(v)


# -- utilisation ------------------------------------------------------------------------------


def utilisation(state: ClusterStateLog) -> list[NodeUse]:
    """Per node, what its pods request against its allocatable (the
    scheduler's view: requests, not measured use), and the DRA devices its
    ResourceSlices publish against those claims' allocations hold."""
    cpu: dict[str, int] = {}
    mem: dict[str, int] = {}
    count: dict[str, int] = {}
    scalar: dict[str, dict[str, int]] = {}
    for pod in state.pods.values():
        n = pod.node_name
        if not n or pod.phase in ("Succeeded", "Failed"):
            continue
        r = pod_requests(pod)
        cpu[n] = cpu.get(n, 0) + r.milli_cpu
        mem[n] = mem.get(n, 0) + r.memory
        count[n] = count.get(n, 0) + 1
        into = scalar.setdefault(n, {})
        for name, v in r.scalar.items():
            into[name] = into.get(name, 0) + v
    total, used = _devices(state)
    out = []
    for name in sorted(state.nodes):
        node = state.nodes[name]
        alloc = node.allocatable
        ext = {
            k: Amount(scalar.get(name, {}).get(k, 0), v)
            for k, v in sorted(alloc.scalar.items())
            if v > 0 and not k.startswith(("attachable-volumes-", "hugepages-"))
        }
        devs = {
            driver: Amount(used.get(name, {}).get(driver, 0), n)
            for driver, n in sorted(total.get(name, {}).items())
        }
        out.append(
            NodeUse(
                name,
                Amount(cpu.get(name, 0), alloc.milli_cpu),
                Amount(mem.get(name, 0), alloc.memory),
                Amount(count.get(name, 0), alloc.pods),
                ext,
                devs,
            )
        )
    return out


def _devices(
    state: ClusterStateLog,
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """Devices per node and driver that ResourceSlices publish, and those
    allocated to ResourceClaims (status.allocation.devices.results, by driver,
    pool and device)."""
    total: dict[str, dict[str, int]] = {}
    where: dict[tuple[str, str], str] = {}
    for (group, resource, _ns, _name), obj in state.objects.items():
        if group != "resource.k8s.io" or resource != "resourceslices":
            continue
        spec = _json(obj).get("spec") or {}
        node = spec.get("nodeName")
        driver = spec.get("driver")
        pool = (spec.get("pool") or {}).get("name")
        if not isinstance(node, str) or not node or not isinstance(driver, str):
            continue
        devices = spec.get("devices") or []
        into = total.setdefault(node, {})
        into[driver] = into.get(driver, 0) + (len(devices) if isinstance(devices, list) else 0)
        if isinstance(pool, str):
            where[(driver, pool)] = node
    used: dict[str, dict[str, int]] = {}
    for (group, resource, _ns, _name), obj in state.objects.items():
        if group != "resource.k8s.io" or resource != "resourceclaims":
            continue
        alloc = ((_json(obj).get("status") or {}).get("allocation") or {}).get("devices") or {}
        for res in alloc.get("results") or []:
            if not isinstance(res, dict):
                continue
            node = where.get((str(res.get("driver")), str(res.get("pool"))))
            if node is not None:
                into = used.setdefault(node, {})
                d = str(res.get("driver"))
                into[d] = into.get(d, 0) + 1
    return total, used


def _json(obj: cpb.ClusterObject) -> dict[str, Any]:
    try:
        value = orjson.loads(obj.json)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
