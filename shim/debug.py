"""The shim's debugging surface, as kube-scheduler's:

- ``CacheDumper``: the cache's nodes with their pods and the queue's pending
  pods, written to the log on SIGUSR2 (pkg/scheduler/backend/cache/debugger
  dumper.go ``DumpAll``, signal.go ``compareSignal``) and served at
  ``/debug/cache``;
- ``/configz``: the effective configuration (component-base configz);
- with ``enableProfiling`` (cmd/kube-scheduler/app/server.go
  ``newEndpointsHandler`` installs routes.Profiling only then):
  ``/debug/pprof/goroutine``, every thread's stack and every asyncio task's
  (Go's ``goroutine?debug=2``), and ``/debug/pprof/profile?seconds=N``, a CPU
  profile of every thread over N seconds (Go's default 30).

The CPU profile is yappi's: it profiles every thread, the event loop's
included, and may be started and stopped from the request's own thread; the
standard library's cProfile sees only the thread that runs it.

All of them are routes of the secure port's ``DebugRoutes``
(shim/serving.py), behind its authentication and authorization.
"""

from __future__ import annotations

import asyncio
import io
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable

import orjson

from berth.framework.configz import configz
from berth.framework.model import Resource, pod_requests
from berth.framework.profile import SchedulerConfig
from berth.shim.cache import SchedulerCache
from berth.shim.queue import ACTIVE, BACKOFF, GATED, IN_FLIGHT, UNSCHEDULABLE, SchedulingQueue
from berth.shim.serving import DebugAnswer, DebugRequest, DebugRoutes

log = logging.getLogger(__name__)

# Go's net/http/pprof Profile: ?seconds= defaults to 30.
DEFAULT_PROFILE_SECONDS = 30.0
# The longest profile one request may ask for.
MAX_PROFILE_SECONDS = 300.0
# Functions listed in a profile's text answer, most time first.
PROFILE_TOP = 200


def _resource(r: Resource) -> str:
    """A Resource as dumper.go prints framework.Resource with %+v."""
    scalar = " ".join(f"{k}:{v}" for k, v in sorted(r.scalar.items()))
    return (
        f"{{MilliCPU:{r.milli_cpu} Memory:{r.memory} EphemeralStorage:{r.ephemeral_storage} "
        f"AllowedPodNumber:{r.allowed_pod_number} ScalarResources:map[{scalar}]}}"
    )


class CacheDumper:
    """dumper.go CacheDumper over the shim's cache and queue. Read on the
    event loop (the only place they are consistent)."""

    def __init__(self, cache: SchedulerCache, queue: SchedulingQueue) -> None:
        self._cache = cache
        self._queue = queue

    @staticmethod
    def _pod_line(namespace: str, name: str, uid: str, phase: str, nominated: str) -> str:
        # dumper.go printPod.
        return (
            f"name: {name}, namespace: {namespace}, uid: {uid}, phase: {phase}, "
            f"nominated node: {nominated}\n"
        )

    def nodes(self) -> str:
        """dumpNodes: each node, what its pods request, what it has, its
        pods, and the pods nominated to it; a blank line between nodes."""
        cache = self._cache
        on_node: dict[str, list[str]] = {}
        requested: dict[str, Resource] = {}
        nominated: dict[str, list[str]] = {}
        for uid, pod in cache.state.pods.items():
            nominee = cache.nominated_to(uid)
            line = self._pod_line(
                pod.namespace, pod.name, pod.uid, pod.phase, pod.nominated_node_name or nominee
            )
            if nominee:
                nominated.setdefault(nominee, []).append(line)
                continue
            if not pod.node_name:
                continue
            on_node.setdefault(pod.node_name, []).append(line)
            requested.setdefault(pod.node_name, Resource()).add(pod_requests(pod))
        names = sorted(set(cache.nodes) | set(on_node))
        blocks = []
        for name in names:
            node = cache.nodes.get(name)
            alloc = Resource.from_proto(node.allocatable) if node is not None else Resource()
            pods = on_node.get(name, [])
            text = (
                f"Node name: {name}\nDeleted: {node is None}\n"
                f"Requested Resources: {_resource(requested.get(name, Resource()))}\n"
                f"Allocatable Resources:{_resource(alloc)}\n"
                f"Scheduled Pods(number: {len(pods)}):\n" + "".join(pods)
            )
            if nominated.get(name):
                text += f"Nominated Pods(number: {len(nominated[name])}):\n"
                text += "".join(nominated[name])
            blocks.append(text)
        return "\n\n".join(blocks)

    def queue(self) -> tuple[str, str]:
        """dumpSchedulingQueue: (summary, pods). The summary is
        PendingPods' ``activeQ:..; backoffQ:..; unschedulablePods:..``, then
        the pods gated and in a cycle (which upstream counts elsewhere); the
        pods are listed by queue."""
        by_where: dict[str, list[str]] = {}
        for qp in self._queue.pods():
            pod = qp.pod
            line = self._pod_line(
                pod.namespace, pod.name, pod.uid, pod.phase, pod.nominated_node_name
            )
            by_where.setdefault(qp.where or "incoming", []).append(line)
        counts = {w: len(v) for w, v in by_where.items()}
        summary = (
            f"activeQ:{counts.get(ACTIVE, 0)}; backoffQ:{counts.get(BACKOFF, 0)}; "
            f"unschedulablePods:{counts.get(UNSCHEDULABLE, 0)}; gated:{counts.get(GATED, 0)}; "
            f"inFlight:{counts.get(IN_FLIGHT, 0)}"
        )
        pods = "".join(
            f"{where}:\n" + "".join(sorted(lines)) for where, lines in sorted(by_where.items())
        )
        return summary, pods

    def log_all(self, logger: logging.Logger = log) -> None:
        """DumpAll: two lines at V(0), as upstream's logger.Info."""
        logger.info("Dump of cached NodeInfo", extra={"nodes": self.nodes()})
        summary, pods = self.queue()
        logger.info("Dump of scheduling queue", extra={"summary": summary, "pods": pods})

    def text(self) -> str:
        summary, pods = self.queue()
        return (
            f"Dump of cached NodeInfo\n\n{self.nodes()}\n\n"
            f"Dump of scheduling queue\nsummary: {summary}\n{pods}"
        )


def thread_stacks(loop: asyncio.AbstractEventLoop | None = None) -> str:
    """Every thread's stack, innermost call last, then every asyncio task's
    (pprof ``goroutine?debug=2``: all goroutines with full stacks). Read from
    the caller's thread, so it answers while the event loop is stuck."""
    out = io.StringIO()
    frames = sys._current_frames()
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or -1)
        kind = "daemon" if thread.daemon else "non-daemon"
        out.write(f"thread {thread.name} (id {thread.ident}, {kind}):\n")
        if frame is not None:
            out.write("".join(traceback.format_stack(frame)))
        out.write("\n")
    if loop is not None and not loop.is_closed():
        try:
            tasks = list(asyncio.all_tasks(loop))
        except RuntimeError:  # the set changed while copied, more than all_tasks retries
            tasks = []
        for task in sorted(tasks, key=lambda t: t.get_name()):
            task.print_stack(file=out)
            out.write("\n")
    return out.getvalue()


class CpuProfiler:
    """One yappi profile at a time over every thread."""

    def __init__(self, sleep: Callable[[float], None] = time.sleep) -> None:
        self._lock = threading.Lock()
        self._sleep = sleep

    def profile(self, req: DebugRequest) -> DebugAnswer:
        import yappi

        text = req.arg("seconds", str(DEFAULT_PROFILE_SECONDS)) or ""
        try:
            seconds = float(text)
        except ValueError:
            seconds = -1.0
        if not 0 < seconds <= MAX_PROFILE_SECONDS:
            return DebugAnswer.text(
                f"seconds={text!r}: give a number of seconds in (0, {MAX_PROFILE_SECONDS:g}]\n",
                400,
            )
        clock = req.arg("clock", "cpu")
        if clock not in ("cpu", "wall"):
            return DebugAnswer.text(f"clock={clock!r}: cpu or wall\n", 400)
        if not self._lock.acquire(blocking=False):
            return DebugAnswer.text("a profile is already running; try again after it\n", 409)
        try:
            yappi.clear_stats()
            yappi.set_clock_type(clock)
            yappi.start(builtins=False, profile_threads=True)
            try:
                self._sleep(seconds)
            finally:
                yappi.stop()
            stats = yappi.get_func_stats()
            stats.sort("ttot", "desc")
            out = io.StringIO()
            out.write(
                f"{clock} time profile of every thread over {seconds:g}s (yappi); "
                f"top {PROFILE_TOP} functions by total time\n"
                f"{'ncall':>10} {'tsub':>10} {'ttot':>10}  function\n"
            )
            for i, fn in enumerate(stats):
                if i >= PROFILE_TOP:
                    break
                out.write(
                    f"{fn.ncall:>10} {fn.tsub:>10.4f} {fn.ttot:>10.4f}  "
                    f"{fn.module}:{fn.lineno} {fn.name}\n"
                )
            yappi.clear_stats()
            return DebugAnswer.text(out.getvalue())
        finally:
            self._lock.release()


def install(
    routes: DebugRoutes,
    config: SchedulerConfig,
    dumper: CacheDumper,
    loop: asyncio.AbstractEventLoop | None = None,
) -> None:
    """The shim's own routes: /configz and /debug/cache always, the
    profiling routes when ``config.enable_profiling``."""
    body = orjson.dumps(configz(config))
    routes.register("/configz", lambda _req: DebugAnswer.json(body), on_loop=False)
    routes.register("/debug/cache", lambda _req: DebugAnswer.text(dumper.text()))
    if not config.enable_profiling:
        return
    routes.register(
        "/debug/pprof/goroutine",
        lambda _req: DebugAnswer.text(thread_stacks(loop)),
        on_loop=False,
    )
    profiler = CpuProfiler()
    routes.register("/debug/pprof/profile", profiler.profile, on_loop=False)


__all__ = [
    "DEFAULT_PROFILE_SECONDS",
    "MAX_PROFILE_SECONDS",
    "CacheDumper",
    "CpuProfiler",
    "install",
    "thread_stacks",
]
