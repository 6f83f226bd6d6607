"""``berth demo``: Berth scheduling real pods on a local control plane, end to end.

What it does, in order (each step prints a progress line on stderr):

1. builds the upstream binaries that are missing (``hack/build-k8s.sh``; cached afterwards);
2. starts etcd and kube-apiserver (`berth.localcluster`), its own control plane on free
   loopback ports with its state in ``<state dir>/cluster``, apart from ``berth cluster up``'s;
3. creates the namespace ``berth-demo`` and four fake nodes of different sizes, one cordoned;
4. starts ``berth serve`` (on a free port) and ``berth shim`` (against the plugin server, as
   user system:kube-scheduler) with a configuration of one profile, ``berth-demo``: only pods
   naming that scheduler are Berth's, so no other scheduler competes for them;
5. creates pods with ``schedulerName: berth-demo``: some fit, some cannot (too much CPU, too
   much memory, a GPU no node has);
6. waits until every pod is bound or marked PodScheduled=False, and prints where each went or
   why it could not (the FailedScheduling message the shim wrote).

By default everything keeps running afterwards (processes detached, recorded in
``<state dir>/demo.json``) so kubectl can look at it; ``--down`` stops it all. ``--once``
tears it down right after printing. The state dir is ``--state-dir``, else
``$BERTH_DEMO_DIR``, else ``${BERTH_CACHE:-~/.cache/berth}/demo``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TextIO

import urllib3

from berth.localcluster import binaries, objects
from berth.localcluster.cluster import (
    ClusterConfig,
    ClusterState,
    cluster_status,
    read_state,
    start_cluster,
    stop_cluster,
)
from berth.localcluster.errors import LocalClusterError, StateError
from berth.localcluster.ports import LOOPBACK, free_port
from berth.localcluster.process import ProcessRecord, is_ours, log_tail, spawn, stop
from berth.localcluster.rest import JSON, ApiError, KubeClient

NAMESPACE = "berth-demo"
PROFILE = "berth-demo"
STATE_FILE = "demo.json"
DEFAULT_TIMEOUT = 60.0
START_TIMEOUT = 60.0  # for each of berth serve and berth shim
STEPS = 6
DEMO_LABEL = "berth.dev/demo"

CONFIG_YAML = f"""\
# Written by `berth demo`: one profile, so only pods with schedulerName {PROFILE} are Berth's.
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
  - schedulerName: {PROFILE}
"""


class DemoError(Exception):
    """The demo could not run; the message says what happened and what to do next."""


# --- what the demo creates -----------------------------------------------------------------


@dataclass(frozen=True)
class DemoNode:
    name: str
    cpu: str
    memory: str
    cordoned: bool = False


@dataclass(frozen=True)
class DemoPod:
    name: str
    cpu: str
    memory: str
    extended: Mapping[str, str] = field(default_factory=dict)
    # None: must stay Pending; "": fits somewhere; a name: fits only there.
    fits_on: str | None = ""

    @property
    def requests(self) -> str:
        parts = [f"cpu {self.cpu}", f"memory {self.memory}"]
        parts += [f"{name} {value}" for name, value in sorted(self.extended.items())]
        return ", ".join(parts)


NODES: tuple[DemoNode, ...] = (
    DemoNode("demo-small", cpu="2", memory="4Gi"),
    DemoNode("demo-medium", cpu="4", memory="8Gi"),
    DemoNode("demo-large", cpu="8", memory="16Gi"),
    DemoNode("demo-cordoned", cpu="16", memory="64Gi", cordoned=True),
)

# The pods that fit need 7.5 CPUs and 6.5Gi together, so they fit in any order: each outcome is
# the same whatever the scores choose.
PODS: tuple[DemoPod, ...] = (
    DemoPod("web-1", cpu="250m", memory="256Mi"),
    DemoPod("web-2", cpu="250m", memory="256Mi"),
    DemoPod("api", cpu="1", memory="2Gi"),
    DemoPod("batch", cpu="6", memory="4Gi", fits_on="demo-large"),
    DemoPod("too-much-cpu", cpu="12", memory="1Gi", fits_on=None),
    DemoPod("too-much-memory", cpu="500m", memory="48Gi", fits_on=None),
    DemoPod("wants-gpu", cpu="500m", memory="1Gi", extended={"nvidia.com/gpu": "1"}, fits_on=None),
)


def node_objects() -> list[JSON]:
    return [
        objects.node(
            n.name,
            cpu=n.cpu,
            memory=n.memory,
            labels={DEMO_LABEL: "true"},
            unschedulable=n.cordoned,
        )
        for n in NODES
    ]


def pod_objects() -> list[JSON]:
    return [
        objects.pod(
            p.name,
            namespace=NAMESPACE,
            cpu=p.cpu,
            memory=p.memory,
            extended=p.extended or None,
            scheduler_name=PROFILE,
            labels={DEMO_LABEL: "true"},
        )
        for p in PODS
    ]


# --- state ---------------------------------------------------------------------------------


def default_state_dir() -> Path:
    override = os.environ.get("BERTH_DEMO_DIR")
    return Path(override) if override else binaries.cache_root() / "demo"


@dataclass
class DemoState:
    """Contents of ``<state dir>/demo.json``, written after every process start so that
    ``--down`` can stop whatever a demo killed half-way left behind."""

    state_dir: Path
    started_at: str
    kubeconfig: str = ""
    kubectl: str = ""
    server: str = ""  # berth serve's gRPC address
    metrics: str = ""  # berth shim's /healthz, /readyz, /metrics
    processes: list[ProcessRecord] = field(default_factory=list)

    @property
    def cluster_dir(self) -> Path:
        return self.state_dir / "cluster"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def config(self) -> Path:
        return self.state_dir / "scheduler-config.yaml"

    def save(self) -> None:
        data = {
            "state_dir": str(self.state_dir),
            "started_at": self.started_at,
            "kubeconfig": self.kubeconfig,
            "kubectl": self.kubectl,
            "server": self.server,
            "metrics": self.metrics,
            "processes": [p.to_json() for p in self.processes],
        }
        path = self.state_dir / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, state_dir: Path) -> DemoState | None:
        path = state_dir / STATE_FILE
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError) as err:
            raise StateError(
                f"cannot read {path}: {err}; if no demo is running, delete that file"
            ) from err
        try:
            return cls(
                state_dir=state_dir,
                started_at=str(data["started_at"]),
                kubeconfig=str(data.get("kubeconfig", "")),
                kubectl=str(data.get("kubectl", "")),
                server=str(data.get("server", "")),
                metrics=str(data.get("metrics", "")),
                processes=[ProcessRecord.from_json(p) for p in data.get("processes", [])],
            )
        except (KeyError, TypeError, ValueError) as err:
            raise StateError(f"malformed demo state {path}: {err}; delete that file") from err


def running_demo(state_dir: Path) -> DemoState | None:
    """The demo recorded in ``state_dir`` if all of its processes and its cluster are up."""
    state = DemoState.load(state_dir)
    if state is None or not state.processes or not all(is_ours(p) for p in state.processes):
        return None
    status = cluster_status(state.cluster_dir)
    return state if status is not None and status.healthy else None


def stop_demo(state_dir: Path) -> list[str]:
    """Stop the shim, the plugin server and the cluster recorded in ``state_dir`` (only
    processes that are still the ones started). Returns one line per action."""
    done: list[str] = []
    state = DemoState.load(state_dir)
    if state is not None:
        done += [stop(p) for p in reversed(state.processes)]
    cluster_dir = state_dir / "cluster"
    if read_state(cluster_dir) is not None:
        done += stop_cluster(cluster_dir)
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    return done


# --- progress ------------------------------------------------------------------------------


class Progress:
    def __init__(self, out: TextIO) -> None:
        self.out = out

    def step(self, number: int, text: str) -> None:
        print(f"[demo {number}/{STEPS}] {text}", file=self.out, flush=True)

    def detail(self, number: int, text: str) -> None:
        print(f"[demo {number}/{STEPS}]   {text}", file=self.out, flush=True)


# --- starting the pieces -------------------------------------------------------------------


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"  # log lines reach the log files as they happen
    return env


def _berth(*args: str) -> list[str]:
    # sys.executable, not the `berth` script: the recorded argv[0] must be what /proc shows.
    return [sys.executable, "-m", "berth", *args]


def _wait_for(
    what: str,
    record: ProcessRecord,
    proc: subprocess.Popen[bytes],
    check: Callable[[], bool],
    timeout: float,
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc.poll() is not None:
            raise DemoError(
                f"{what} exited with code {proc.returncode} while starting. Last lines of "
                f"{record.log_path}:\n{log_tail(record.log_path)}"
            )
        if time.monotonic() >= deadline:
            raise DemoError(
                f"{what} was not ready within {timeout:g}s. Last lines of {record.log_path}:\n"
                f"{log_tail(record.log_path)}\nIf the machine is just slow, run again"
            )
        time.sleep(0.2)


_LISTENING = re.compile(r"berth serve: listening on port (\d+)")


def _served_port(log_path: str) -> int | None:
    try:
        match = _LISTENING.search(Path(log_path).read_text(errors="replace"))
    except OSError:
        return None
    return int(match.group(1)) if match else None


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start_serve(state: DemoState, *, die_with_parent: bool) -> None:
    log_path = state.logs / "serve.log"
    log_path.unlink(missing_ok=True)
    argv = _berth("serve", "--config", str(state.config), "--listen", f"{LOOPBACK}:0")
    proc, record = spawn(
        "berth serve", argv, log_path, env=_child_env(), die_with_parent=die_with_parent
    )
    state.processes.append(record)
    state.save()
    _wait_for(
        "berth serve",
        record,
        proc,
        lambda: _served_port(record.log_path) is not None,
        START_TIMEOUT,
    )
    state.server = f"{LOOPBACK}:{_served_port(record.log_path)}"
    state.save()


def start_shim(state: DemoState, cluster: ClusterState, *, die_with_parent: bool) -> None:
    log_path = state.logs / "shim.log"
    log_path.unlink(missing_ok=True)
    state.metrics = f"{LOOPBACK}:{free_port()}"
    argv = _berth(
        "shim",
        "--config",
        str(state.config),
        "--server",
        state.server,
        # kube-scheduler's own identity and RBAC role: the shim needs nothing more.
        "--kubeconfig",
        str(cluster.scheduler_kubeconfig),
        "--no-leader-elect",
        "--metrics-listen",
        state.metrics,
    )
    proc, record = spawn(
        "berth shim", argv, log_path, env=_child_env(), die_with_parent=die_with_parent
    )
    state.processes.append(record)
    state.save()
    _wait_for(
        "berth shim",
        record,
        proc,
        lambda: _http_ok(f"http://{state.metrics}/readyz"),
        START_TIMEOUT,
    )


# --- the pods' outcome ---------------------------------------------------------------------


@dataclass(frozen=True)
class PodOutcome:
    name: str
    requests: str
    node: str | None  # None: pending
    message: str  # why it is pending; "" when bound or not tried yet
    settled: bool  # bound, or found unschedulable


def _scheduled_condition(pod: JSON) -> JSON | None:
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            result: JSON = cond
            return result
    return None


def _failed_scheduling_event(client: KubeClient, name: str) -> str:
    """The latest FailedScheduling message for pod ``name``, from the events (core/v1 view)."""
    try:
        events = client.get(
            f"/api/v1/namespaces/{NAMESPACE}/events",
            fieldSelector=f"involvedObject.kind=Pod,involvedObject.name={name},"
            "reason=FailedScheduling",
        ).get("items", [])
    except ApiError:
        return ""
    if not events:
        return ""

    def when(event: JSON) -> str:
        return str(
            event.get("eventTime") or event.get("lastTimestamp") or event.get("firstTimestamp")
        )

    return str(max(events, key=when).get("message", ""))


def pod_outcomes(client: KubeClient) -> list[PodOutcome]:
    """One outcome per demo pod (in the order of PODS), then any pod the user added."""
    listed = client.get(f"/api/v1/namespaces/{NAMESPACE}/pods").get("items", [])
    by_name = {str(p["metadata"]["name"]): p for p in listed}
    known = {p.name: p for p in PODS}
    order = [p.name for p in PODS if p.name in by_name]
    order += sorted(n for n in by_name if n not in known)
    outcomes = []
    for name in order:
        pod = by_name[name]
        requests = known[name].requests if name in known else _requests_of(pod)
        node = pod.get("spec", {}).get("nodeName") or None
        cond = _scheduled_condition(pod)
        unschedulable = (
            node is None
            and cond is not None
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        )
        message = ""
        if node is None and cond is not None and cond.get("status") == "False":
            message = str(cond.get("message") or "") or _failed_scheduling_event(client, name)
        outcomes.append(
            PodOutcome(name, requests, node, message, settled=node is not None or unschedulable)
        )
    return outcomes


def _requests_of(pod: JSON) -> str:
    total: dict[str, list[str]] = {}
    for container in pod.get("spec", {}).get("containers") or []:
        for res, qty in ((container.get("resources") or {}).get("requests") or {}).items():
            total.setdefault(str(res), []).append(str(qty))
    return ", ".join(f"{res} {'+'.join(qs)}" for res, qs in sorted(total.items())) or "-"


def wait_for_outcomes(
    client: KubeClient, progress: Progress, step: int, timeout: float
) -> tuple[list[PodOutcome], bool]:
    """Poll until every pod is settled or ``timeout`` passes; (outcomes, all settled)."""
    deadline = time.monotonic() + timeout
    start = time.monotonic()
    last_line = ""
    last_print = 0.0
    while True:
        outcomes = pod_outcomes(client)
        bound = sum(1 for o in outcomes if o.node)
        failed = sum(1 for o in outcomes if o.settled and not o.node)
        waiting = len(outcomes) - bound - failed
        now = time.monotonic()
        line = f"{bound} bound, {failed} unschedulable, {waiting} not decided yet"
        if line != last_line or now - last_print >= 5.0:
            progress.detail(step, f"{line} ({now - start:.1f}s)")
            last_line, last_print = line, now
        if waiting == 0:
            return outcomes, True
        if now >= deadline:
            return outcomes, False
        time.sleep(0.25)


def unexpected(outcomes: list[PodOutcome]) -> list[str]:
    """Ways the outcome differs from what the demo's pods and nodes imply."""
    problems = []
    got = {o.name: o for o in outcomes}
    for pod in PODS:
        o = got.get(pod.name)
        if o is None:
            problems.append(f"pod {pod.name} is missing")
        elif pod.fits_on is None and o.node:
            problems.append(f"{pod.name} should not fit anywhere but was bound to {o.node}")
        elif pod.fits_on is not None and not o.node:
            problems.append(f"{pod.name} fits but is Pending: {o.message or 'not tried'}")
        elif pod.fits_on and o.node != pod.fits_on:
            problems.append(f"{pod.name} fits only on {pod.fits_on} but went to {o.node}")
    return problems


# --- output --------------------------------------------------------------------------------


def _table(rows: list[tuple[str, ...]], indent: str = "  ") -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


@dataclass(frozen=True)
class NodeRow:
    name: str
    cpu: str
    memory: str
    cordoned: bool


def node_rows(client: KubeClient) -> list[NodeRow]:
    """The cluster's nodes as they are now (the user may have uncordoned or added some)."""
    rows = []
    for n in client.get("/api/v1/nodes").get("items", []):
        alloc = n.get("status", {}).get("allocatable") or {}
        rows.append(
            NodeRow(
                name=str(n["metadata"]["name"]),
                cpu=str(alloc.get("cpu", "?")),
                memory=str(alloc.get("memory", "?")),
                cordoned=bool(n.get("spec", {}).get("unschedulable")),
            )
        )
    order = {n.name: i for i, n in enumerate(NODES)}
    return sorted(rows, key=lambda r: (order.get(r.name, len(order)), r.name))


def render(nodes: list[NodeRow], outcomes: list[PodOutcome]) -> str:
    lines = ["Nodes (fake: no kubelet; created with their capacity):"]
    rows: list[tuple[str, ...]] = [("NODE", "CPU", "MEMORY", "")]
    rows += [
        (n.name, n.cpu, n.memory, "cordoned (spec.unschedulable)" if n.cordoned else "")
        for n in nodes
    ]
    lines += _table(rows)
    lines += ["", f"Pods in namespace {NAMESPACE} (schedulerName {PROFILE}):"]
    rows = [("POD", "REQUESTS", "NODE")]
    rows += [(o.name, o.requests, o.node or "Pending") for o in outcomes]
    lines += _table(rows)
    pending = [o for o in outcomes if not o.node]
    if pending:
        lines += ["", "Why the Pending pods were not scheduled (FailedScheduling):"]
        width = max(len(o.name) for o in pending)
        lines += [
            f"  {o.name.ljust(width)}  {o.message or '(no scheduling attempt seen yet)'}"
            for o in pending
        ]
    return "\n".join(lines)


def usage_hints(state: DemoState, *, detached: bool) -> str:
    if not detached:
        return (
            "--once: everything stops now. Run without --once to keep the cluster, the "
            "server and the shim running for kubectl."
        )
    kubectl = shlex.quote(state.kubectl)
    example = next((p.name for p in PODS if p.fits_on is None), "POD")
    return "\n".join(
        [
            "Look at it with kubectl (pods stay STATUS Pending there: no kubelet runs them; "
            "NODE is where Berth bound them):",
            f"  export KUBECONFIG={shlex.quote(state.kubeconfig)}",
            f"  {kubectl} get pods -n {NAMESPACE} -o wide",
            f"  {kubectl} describe pod -n {NAMESPACE} {example}",
            f"  {kubectl} uncordon demo-cordoned    # Pending pods that fit there get scheduled",
            "",
            f"Berth keeps running: berth serve at {state.server}, berth shim with health and "
            f"metrics at http://{state.metrics}/metrics.",
            f"Logs: {state.logs / 'serve.log'}, {state.logs / 'shim.log'}, "
            f"{state.cluster_dir / 'logs'}/",
            f"Stop everything: berth demo --down{_state_dir_flag(state.state_dir)}"
            "   (or ./hack/demo.sh --down)",
        ]
    )


def _state_dir_flag(state_dir: Path) -> str:
    return "" if state_dir == default_state_dir() else f" --state-dir {shlex.quote(str(state_dir))}"


# --- the command ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    state_dir: Path
    once: bool
    timeout: float
    build: bool
    bin_dir: Path | None


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so a terminated demo still stops what it started."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_demo(opts: Options, out: TextIO, err: TextIO) -> int:
    progress = Progress(err)
    state_dir = opts.state_dir
    if DemoState.load(state_dir) is not None or read_state(state_dir / "cluster") is not None:
        if not opts.once:
            current = running_demo(state_dir)
            if current is not None:
                return show_running(current, out, err)
        elif running_demo(state_dir) is not None:
            raise DemoError(
                f"a demo is already running from {state_dir}; stop it first "
                f"(berth demo --down{_state_dir_flag(state_dir)}) or pass another --state-dir"
            )
        print(f"berth demo: cleaning up a stopped demo in {state_dir}", file=err)
        for line in stop_demo(state_dir):
            print(f"  {line}", file=err)

    progress.step(
        1,
        "upstream binaries (hack/build-k8s.sh builds what is missing; a cold build "
        "takes 10-20 minutes, later runs reuse the cache)",
    )
    try:
        bin_dir = binaries.ensure_binaries(opts.bin_dir, build=opts.build)
    except LocalClusterError as exc:
        raise DemoError(str(exc)) from exc
    progress.detail(1, f"using {bin_dir}")

    state_dir.mkdir(parents=True, exist_ok=True)
    state = DemoState(
        state_dir=state_dir,
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        kubectl=str(bin_dir / "kubectl"),
    )
    state.logs.mkdir(exist_ok=True)
    state.config.write_text(CONFIG_YAML)
    state.save()
    finished = False
    try:
        with _sigterm_as_exit():
            code = _run_steps(opts, state, bin_dir, progress, out, err)
            finished = True
    finally:
        if opts.once or not finished:
            _teardown(state_dir, "--once" if finished else "the demo did not finish", err)
    return code


def _teardown(state_dir: Path, why: str, err: TextIO) -> None:
    """Stop everything; a terminal or pipe gone away (BrokenPipeError) must not stop that."""
    with contextlib.suppress(OSError):
        print(f"[demo] stopping everything ({why})", file=err, flush=True)
    done = stop_demo(state_dir)
    with contextlib.suppress(OSError):
        for line in done:
            print(f"  {line}", file=err, flush=True)


def _run_steps(
    opts: Options, state: DemoState, bin_dir: Path, progress: Progress, out: TextIO, err: TextIO
) -> int:
    die = opts.once  # a --once demo's processes die with it, whatever kills it
    api_port = free_port()
    etcd_port = free_port(avoid=frozenset({api_port}))
    peer_port = free_port(avoid=frozenset({api_port, etcd_port}))
    progress.step(2, f"starting etcd and kube-apiserver (state in {state.cluster_dir}) ...")
    began = time.monotonic()
    try:
        cluster = start_cluster(
            ClusterConfig(
                state_dir=state.cluster_dir,
                bin_dir=bin_dir,
                default_apiserver_port=api_port,
                default_etcd_client_port=etcd_port,
                default_etcd_peer_port=peer_port,
                die_with_parent=die,
            )
        )
    except LocalClusterError as exc:
        raise DemoError(str(exc)) from exc
    state.kubeconfig = str(cluster.kubeconfig)
    state.save()
    progress.detail(
        2,
        f"ready in {time.monotonic() - began:.1f}s: Kubernetes {cluster.kubernetes_version} at "
        f"{cluster.server} (" + ", ".join(f"{p.name} pid {p.pid}" for p in cluster.processes) + ")",
    )

    with cluster.cluster.client() as client:
        progress.step(3, f"creating namespace {NAMESPACE} and {len(NODES)} nodes")
        try:
            objects.create_namespace(client, NAMESPACE)
            objects.create_nodes(client, node_objects())
        except LocalClusterError as exc:
            raise DemoError(f"could not create the demo's objects: {exc}") from exc

        progress.step(
            4, f"starting berth serve and berth shim, profile {PROFILE} (config {state.config})"
        )
        start_serve(state, die_with_parent=die)
        progress.detail(
            4,
            f"berth serve at {state.server} (pid {state.processes[-1].pid}), log "
            f"{state.logs / 'serve.log'}",
        )
        start_shim(state, cluster, die_with_parent=die)
        progress.detail(
            4,
            f"berth shim ready (pid {state.processes[-1].pid}), health and metrics at "
            f"http://{state.metrics}, log {state.logs / 'shim.log'}",
        )

        progress.step(5, f"creating {len(PODS)} pods with schedulerName {PROFILE}")
        try:
            objects.create_pods(client, pod_objects())
        except LocalClusterError as exc:
            raise DemoError(f"could not create the demo's pods: {exc}") from exc

        progress.step(
            6, f"waiting for every pod to be bound or found unschedulable (up to {opts.timeout:g}s)"
        )
        outcomes, settled = wait_for_outcomes(client, progress, 6, opts.timeout)
        nodes = node_rows(client)

    pids = [*cluster.processes, *state.processes]
    print(
        "Processes: " + ", ".join(f"{p.name} pid {p.pid}" for p in pids),
        file=err,
        flush=True,
    )
    print(file=out)
    print(render(nodes, outcomes), file=out)
    print(file=out)
    print(usage_hints(state, detached=not opts.once), file=out, flush=True)
    logs = f"{state.logs / 'shim.log'} and {state.logs / 'serve.log'}"
    left = (
        ""
        if opts.once
        else "\nThe demo is left running for a look; stop it with: berth demo --down"
        + _state_dir_flag(state.state_dir)
    )
    if not settled:
        print(
            f"berth demo: error: not every pod was bound or found unschedulable within "
            f"{opts.timeout:g}s. Last lines of {state.logs / 'shim.log'}:\n"
            f"{log_tail(state.logs / 'shim.log')}\nSee {logs}; a slow machine may need "
            f"--timeout{left}",
            file=err,
        )
        return 1
    problems = unexpected(outcomes)
    if problems:
        print(
            "berth demo: error: the scheduling outcome is not the expected one (a bug in "
            f"berth; see {logs}):\n  " + "\n  ".join(problems) + left,
            file=err,
        )
        return 1
    return 0


def show_running(state: DemoState, out: TextIO, err: TextIO) -> int:
    print(
        f"berth demo: a demo is already running from {state.state_dir} (started "
        f"{state.started_at}); its pods now:",
        file=err,
    )
    try:
        with KubeClient.from_kubeconfig(state.kubeconfig) as client:
            outcomes = pod_outcomes(client)
            nodes = node_rows(client)
    except (LocalClusterError, urllib3.exceptions.HTTPError) as exc:
        raise DemoError(
            f"the running demo's API server did not answer: {exc}; restart it: "
            f"berth demo --down{_state_dir_flag(state.state_dir)} && berth demo"
        ) from exc
    print(render(nodes, outcomes), file=out)
    print(file=out)
    print(usage_hints(state, detached=True), file=out)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    if args.down:
        try:
            if DemoState.load(state_dir) is None and read_state(state_dir / "cluster") is None:
                print(f"no demo recorded in {state_dir}; nothing to stop", file=sys.stderr)
                return 0
            for line in stop_demo(state_dir):
                print(line, file=sys.stderr)
        except LocalClusterError as exc:
            print(f"berth demo --down: error: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.timeout <= 0:
        print(f"berth demo: error: --timeout must be > 0, got {args.timeout:g}", file=sys.stderr)
        return 2
    env_bin = os.environ.get("BERTH_K8S_BIN_DIR")
    opts = Options(
        state_dir=state_dir,
        once=args.once,
        timeout=args.timeout,
        build=not args.no_build,
        bin_dir=Path(env_bin) if env_bin else None,
    )
    try:
        return run_demo(opts, sys.stdout, sys.stderr)
    except (DemoError, LocalClusterError) as exc:
        print(f"berth demo: error: {exc}", file=sys.stderr)
        return 1
    except (OSError, urllib3.exceptions.HTTPError) as exc:
        print(
            f"berth demo: error: lost the demo's API server or a file ({exc}); what was "
            "started is stopped; run again, and if it recurs look at the logs in "
            f"{state_dir / 'logs'} and {state_dir / 'cluster' / 'logs'}",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("berth demo: interrupted; everything it started is stopped", file=sys.stderr)
        return 130


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="Berth scheduling pods on a local cluster: start it all, show where pods went",
        description=(
            "Build what is missing, start a local etcd + kube-apiserver, a plugin server "
            "(berth serve) and the scheduler (berth shim), create four nodes and a few pods "
            f"with schedulerName {PROFILE} in namespace {NAMESPACE}, wait until each is bound "
            "or found unschedulable, and print where each went or why it could not. "
            "Everything keeps running afterwards for kubectl (the command prints how) until "
            "'berth demo --down'. Run again to see the running demo's pods."
        ),
        epilog=(
            "The demo has its own control plane on free loopback ports (state in the state "
            "dir's cluster/ folder), apart from 'berth cluster up'. Logs: <state dir>/logs/ "
            "(serve.log, shim.log) and <state dir>/cluster/logs/."
        ),
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--down", action="store_true", help="stop the shim, the plugin server and the cluster"
    )
    mode.add_argument(
        "--once",
        action="store_true",
        help="stop everything right after printing the result (exit 0 only if every pod "
        "ended where expected)",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=default_state_dir(),
        help="where the demo's state, cluster, config and logs live "
        "(default: $BERTH_DEMO_DIR or ${BERTH_CACHE:-~/.cache/berth}/demo: %(default)s)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="how long to wait for the pods to be scheduled (default %(default)s)",
    )
    p.add_argument(
        "--no-build",
        action="store_true",
        help=f"fail instead of running {binaries.BUILD_SCRIPT.name} when binaries are missing",
    )
    p.set_defaults(func=cmd_demo)
