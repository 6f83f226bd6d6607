"""What every RPC runs over, before and around its handler.

A unary call, in order (``Prologue.unary``, then ``Prologue.whole``):

1. names the replica in its trailing metadata (``berth-replica``);
2. is admitted (server/admission.py) when it came over the network (its
   request arrives as bytes): beyond the caps on calls and bytes in flight it
   is refused OVERLOADED before anything of it is done. An in-process caller
   hands over messages and is bounded by its own concurrency;
3. its request is parsed: a malformed one is INVALID_ARGUMENT naming the
   expected type; a large one is parsed on the worker;
4. its caller is identified (server/identity.py) and its deadline read: a
   ``Call``, the one value its handler gets of the call;
5. when it carries cluster state it takes that cluster's lock
   (``ClusterLocks``) before its handler runs and holds it until its response
   is built, so no other call reads or changes that snapshot meanwhile; a
   large full state is built under the lock in slices on the worker, other
   clusters' calls getting turns in between;
6. its handler runs whole on the worker thread, resolving its profile and
   its state through the ``Call`` in the order it checks its request;
7. whatever it raises becomes its gRPC status (``refusal``).

A stream's messages (ScheduleStream) take the same steps, their caller
identified once when the stream starts and each refusal answered in-stream;
an upload's parts (UploadState) are admitted and parsed each, and the
cluster's lock is taken to swap the uploaded state in. A chain of the same
kind stands in front of kube-apiserver's handlers
(staging/src/k8s.io/apiserver/pkg/server/config.go, DefaultBuildHandlerChain).

Plugin work never runs on the event loop: every call's cycle runs on one
worker thread (``Worker``), so grpc.health.v1 and gRPC's own I/O are answered
whatever a plugin computes. One worker keeps the service's single-threaded
model: a profile's Framework and the snapshot cache are used by one call at a
time. The caller's gRPC deadline is checked before every plugin call
(``Framework.begin_request``), between a batch's pods and between slices:
past it the call ends DEADLINE_EXCEEDED and the snapshot stays as a whole
call left it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping
from contextlib import asynccontextmanager, nullcontext, suppress
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar, cast

from google.protobuf.message import DecodeError, Message

from berth.api.v1 import cluster_pb2 as cpb
from berth.framework.cycle_state import StateDecodeError
from berth.framework.runtime import DeadlineExceeded, Framework
from berth.framework.snapshot import Snapshot
from berth.server import errors
from berth.server.admission import Admission
from berth.server.errors import Replica, ServiceError
from berth.server.identity import Callers
from berth.server.state import (
    STEPWISE_ENTRIES,
    CacheFull,
    Entry,
    InvalidState,
    SnapshotPassed,
    SnapshotStore,
    StaleReplica,
    StateTooLarge,
    UploadsFull,
    full_entries,
)

log = logging.getLogger(__name__)

R = TypeVar("R")
Resp = TypeVar("Resp")
Req = TypeVar("Req", bound=Message)

# Longest a batch or a large full state works on the worker before another
# call gets a turn there (berth serve --slice-ms).
DEFAULT_SLICE_SECONDS = 0.002

# Requests larger than this are parsed on the worker, not on the event loop.
PARSE_INLINE_BYTES = 256 * 1024

# A handler: runs whole on the worker with its call and its request.
Handler = Callable[["Call", Req], Resp]
# What a handler refuses before it reads the state (``Prologue.whole``).
Check = Callable[["Call", Req], object]


@dataclass(frozen=True, slots=True)
class Call:
    """One call as its handler sees it: who calls, until when, and what it
    may use to resolve its profile and its state. Made per call by the
    prologue and passed to the handler; the service keeps none."""

    # Who calls (server/identity.py): the snapshots it may use.
    caller: str
    # The caller's deadline (time.perf_counter clock); None: none.
    deadline: float | None
    profiles: Mapping[str, Framework]
    store: SnapshotStore
    # A large full state the prologue built in slices before the handler ran.
    prepared: Entry | None = None

    def profile(self, name: str) -> Framework:
        """The profile the request names (a schedulerName); refused when it
        names none or one this server does not serve."""
        if not name:
            raise errors.invalid(
                "profile",
                "must name a profile (a schedulerName); configured: "
                + ", ".join(sorted(self.profiles)),
            )
        fw = self.profiles.get(name)
        if fw is None:
            raise errors.unknown_profile(name, self.profiles)
        return fw

    def framework(self, name: str) -> Framework:
        """``profile``, ready to run this call's plugins until its deadline
        (on the worker only: the Framework is the worker's)."""
        fw = self.profile(name)
        fw.begin_request(self.deadline)
        return fw

    def cluster(self, has_state: bool, state: cpb.ClusterState) -> tuple[Snapshot, int]:
        """The snapshot the request's state resolves to, and its generation
        (protos/README.md, the generation protocol)."""
        if not has_state:
            raise errors.invalid("state", "required")
        if self.prepared is not None:
            return self.prepared.snapshot, self.prepared.generation
        entry = self.store.resolve(state, caller=self.caller)
        return entry.snapshot, entry.generation


def state_key(caller: str, cluster_id: str) -> str:
    """The key of a caller's cluster in ClusterLocks."""
    return f"{caller}\x00{cluster_id}"


class ClusterLocks:
    """One asyncio lock per caller's cluster (``state_key``). Every call that
    carries cluster state takes it before its handler runs and holds it until
    its response is built; work that lets other calls onto the worker
    part-way (a batch, a full state built in slices) thus has its snapshot to
    itself throughout. A lock exists only while someone holds or awaits it."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    def busy_cluster(self, cluster_id: str) -> bool:
        """Is ``cluster_id`` held under any caller (tests, diagnostics)?"""
        tail = "\x00" + cluster_id
        return any(k.endswith(tail) and lock.locked() for k, lock in self._locks.items())

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        self._users[key] = self._users.get(key, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key]
                del self._locks[key]


class _Job:
    """One piece of work for the worker thread and the way its outcome gets
    back to the event loop (``Worker``)."""

    __slots__ = ("done", "error", "finished", "fn", "future", "loop", "stop", "value")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self.fn: Callable[[], Any] = lambda: None
        # Set on the loop when the call that awaits the job is cancelled: work
        # going on in slices stops at the next one.
        self.stop = False
        self.finished = False
        self.value: Any = None
        self.error: BaseException | None = None
        # Made when a cancelled call waits for the work it started.
        self.done: asyncio.Event | None = None

    def settle(self, value: Any, error: BaseException | None) -> None:
        """On the loop: the work ended with ``value`` or ``error``."""
        self.finished = True
        self.value, self.error = value, error
        if not self.future.done():
            if error is None:
                self.future.set_result(value)
            else:
                self.future.set_exception(error)
        if self.done is not None:
            self.done.set()


class Worker:
    """The one thread plugin work runs on (module docstring), and work that
    runs there in slices of ``slice_seconds``.

    A call hands its work over on a queue the thread takes from in order, and
    the thread hands the outcome back with one ``call_soon_threadsafe``. Work
    in slices keeps the thread from one slice to the next only while no other
    call's work is queued, its call was not cancelled and its deadline has not
    passed; otherwise the slice's answer goes back to the loop, and the next
    slice is queued behind whatever came meanwhile, so another call waits at
    most one slice, as the health checks on the loop do."""

    def __init__(
        self, slice_seconds: float = DEFAULT_SLICE_SECONDS, *, daemon: bool = True
    ) -> None:
        self.slice_seconds = slice_seconds
        # A daemon thread ends with its process, for owners that never close
        # the worker (tests, in-process callers); ``berth serve``'s is not
        # one: its stop closes and joins it, so no job is cut off at exit.
        self.daemon = daemon
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False

    def _serve(self) -> None:
        jobs = self._jobs
        while (job := jobs.get()) is not None:
            value: Any = None
            error: BaseException | None = None
            if job.stop:
                # Its call was cancelled before the work began (the caller went
                # away, its deadline passed, or the server is stopping): it never
                # runs, and the call, which waits for it, is let go.
                error = asyncio.CancelledError()
            else:
                try:
                    value = job.fn()
                except BaseException as exc:  # handed to the call that awaits it
                    error = exc
            # RuntimeError: the loop closed, and no one awaits the outcome any more.
            with suppress(RuntimeError):
                job.loop.call_soon_threadsafe(job.settle, value, error)

    def _submit(self, job: _Job, fn: Callable[[], Any]) -> None:
        if self._closed:
            raise RuntimeError("the worker is closed")
        # In the caller's context (contextvars: the trace the interceptor
        # continued).
        job.fn = functools.partial(contextvars.copy_context().run, fn)
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._serve, name="berth-cycle", daemon=self.daemon
            )
            self._thread.start()
        self._jobs.put(job)

    async def _outcome(self, job: _Job) -> Any:
        """The job's value. A cancelled call (the caller went away, its
        deadline passed) still waits for the work it started: the thread
        cannot be stopped, and nothing else may touch what it touches
        meanwhile; the deadline stops it at the next plugin."""
        try:
            return await job.future
        except asyncio.CancelledError:
            job.stop = True
            while not job.finished:
                if job.done is None:
                    job.done = asyncio.Event()
                try:
                    await job.done.wait()
                except asyncio.CancelledError:
                    continue
            if isinstance(job.error, DeadlineExceeded):
                log.info("a call stopped at its deadline: %s", job.error)
            raise

    async def run(self, fn: Callable[[], R]) -> R:
        """``fn()`` on the worker thread, in the caller's context."""
        job = _Job(asyncio.get_running_loop())
        self._submit(job, fn)
        return cast(R, await self._outcome(job))

    async def run_slices(self, step: Callable[[], bool], deadline: float | None = None) -> bool:
        """``step()`` (a slice of work, True when the work is done) on the
        worker thread, again and again while it keeps the thread (class
        docstring; ``deadline`` on the perf_counter clock). True when the work
        is done, False when the thread is to be given up first."""
        job = _Job(asyncio.get_running_loop())
        jobs = self._jobs

        def slices() -> bool:
            while not step():
                if (
                    job.stop
                    or not jobs.empty()
                    or (deadline is not None and time.perf_counter() >= deadline)
                ):
                    return False
            return True

        self._submit(job, slices)
        return cast(bool, await self._outcome(job))

    async def in_slices(
        self, steps: Generator[None, None, R], deadline: float | None, late: str
    ) -> R:
        """Runs ``steps`` on the worker a slice at a time, other calls getting
        turns in between, and returns what it returns. Past ``deadline``
        between two slices it stops, DEADLINE_EXCEEDED with message ``late``."""
        slice_seconds = self.slice_seconds
        done: list[R] = []

        def run_slice() -> bool:
            began = time.perf_counter()
            try:
                while time.perf_counter() - began < slice_seconds:
                    next(steps)
            except StopIteration as stop:
                done.append(stop.value)
                return True
            return False

        while not await self.run_slices(run_slice, deadline):
            if deadline is not None and time.perf_counter() >= deadline:
                steps.close()
                raise errors.deadline(late)
        return done[0]

    def close(self) -> None:
        """Stops the thread once the work queued on it is done."""
        self._closed = True
        self._jobs.put(None)

    def join(self, timeout: float | None = None) -> bool:
        """After ``close``: waits up to ``timeout`` for the thread to end.
        True when no thread is left."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return thread is None or not thread.is_alive()


class Prologue:
    """The steps of the module docstring, over the service's collaborators."""

    def __init__(
        self,
        *,
        profiles: Mapping[str, Framework],
        store: SnapshotStore,
        callers: Callers,
        admission: Admission,
        replica: Replica,
        locks: ClusterLocks,
        worker: Worker,
    ) -> None:
        self.profiles = profiles
        self.store = store
        self.callers = callers
        self.admission = admission
        self.replica = replica
        self.locks = locks
        self.worker = worker

    async def unary(
        self,
        context: Any,
        item: Req | bytes,
        cls: type[Req],
        serve: Callable[[Req, Any], Awaitable[Resp]],
    ) -> Resp:
        """Steps 1-3 and 7 around ``serve``, which does the rest."""
        context.set_trailing_metadata(self.replica.trailers)

        async def work() -> Resp:
            size = len(item) if isinstance(item, bytes) else None
            with nullcontext() if size is None else self.admission.admitted(size):
                request = await self.parse(cls, item)
                return await serve(request, context)

        return await self.answer(context, work)

    async def run(
        self,
        context: Any,
        item: Req | bytes,
        cls: type[Req],
        handler: Handler[Req, Resp],
        before_state: Check[Req] | None = None,
    ) -> Resp:
        """A unary RPC whose handler runs whole: every step."""

        async def serve(request: Req, context: Any) -> Resp:
            return await self.whole(self.call(context), request, handler, before_state)

        return await self.unary(context, item, cls, serve)

    async def answer(self, context: Any, work: Callable[[], Awaitable[Resp]]) -> Resp:
        """Awaits the work; a refusal ends the call with its typed status."""
        try:
            return await work()
        except Exception as exc:
            err = refusal(exc, "a request")
        await self.replica.abort(context, err)

    async def parse(self, cls: type[Req], item: Req | bytes) -> Req:
        """A request message from its bytes; a large one is parsed on the
        worker (parsing 64 MiB takes long enough to delay health checks)."""
        if isinstance(item, bytes) and len(item) > PARSE_INLINE_BYTES:
            return await self.worker.run(lambda: parse(cls, item))
        return parse(cls, item)

    def call(self, context: Any) -> Call:
        """Step 4: who calls, and its deadline."""
        return self.call_as(self.callers.identify(context), deadline_of(context))

    def call_as(self, caller: str, deadline: float | None) -> Call:
        return Call(caller, deadline, self.profiles, self.store)

    async def whole(
        self,
        call: Call,
        request: Req,
        handler: Handler[Req, Resp],
        before_state: Check[Req] | None = None,
    ) -> Resp:
        """Steps 5-6: ``handler`` whole on the worker, holding the lock of
        the cluster the request carries (if any). ``before_state``: what the
        handler refuses before it reads the state, checked before a large
        full state is built, so a request refused anyway builds nothing."""

        def checks() -> None:
            if before_state is not None:
                before_state(call, request)

        async with self.cluster(call, state_of(request), checks) as held:
            return await self.worker.run(functools.partial(handler, held, request))

    @asynccontextmanager
    async def cluster(
        self,
        call: Call,
        state: cpb.ClusterState | None,
        before_build: Callable[[], object] = lambda: None,
    ) -> AsyncIterator[Call]:
        """Step 5: holds the lock of the cluster ``state`` names (nothing
        without a state) and yields the call, with its full state built when
        it is large (``STEPWISE_ENTRIES``). The build stores nothing until
        the whole state is built: a deadline that passes part-way leaves the
        cache as it was."""
        if state is None:
            yield call
            return
        async with self.locks.hold(state_key(call.caller, state.cluster_id)):
            if state.full and full_entries(state) > STEPWISE_ENTRIES:
                before_build()
                entry = await self.worker.in_slices(
                    self.store.replace_stepwise(state, caller=call.caller),
                    call.deadline,
                    "deadline: passed while this replica built the full state; nothing of it "
                    "was kept: send it again with a longer deadline",
                )
                call = replace(call, prepared=entry)
            yield call


class _CarriesState(Protocol):
    state: cpb.ClusterState


def state_of(request: Message) -> cpb.ClusterState | None:
    """The cluster state a request carries; None when it has none."""
    if "state" in request.DESCRIPTOR.fields_by_name and request.HasField("state"):
        return cast(_CarriesState, request).state
    return None


def deadline_of(context: Any) -> float | None:
    """The call's deadline on the perf_counter clock; None without one (or for
    an in-process context, which has none)."""
    remaining = getattr(context, "time_remaining", None)
    left = remaining() if remaining is not None else None
    return None if left is None else time.perf_counter() + left


def parse(cls: type[Req], item: Req | bytes) -> Req:
    if not isinstance(item, bytes):
        return item
    try:
        return cls.FromString(item)
    except DecodeError as exc:
        raise errors.invalid(
            "request", f"not a valid {cls.DESCRIPTOR.full_name} message: {exc}"
        ) from exc


StateRefusal = (
    InvalidState | StaleReplica | SnapshotPassed | StateTooLarge | CacheFull | UploadsFull
)
_STATE_REFUSALS = (
    InvalidState,
    StaleReplica,
    SnapshotPassed,
    StateTooLarge,
    CacheFull,
    UploadsFull,
)


def refusal(exc: Exception, serving: str) -> ServiceError:
    """The refusal ``exc`` gives the caller. Call from the except block: an
    unexpected error logs its stack, naming what was served (``serving``)."""
    if isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, StateDecodeError):
        return errors.invalid("cycle.data", str(exc))
    if isinstance(exc, DeadlineExceeded):
        return deadline_error(exc)
    if isinstance(exc, _STATE_REFUSALS):
        return state_error(exc)
    log.exception("internal error serving %s", serving)
    return errors.internal()


def state_error(exc: StateRefusal) -> ServiceError:
    """The snapshot cache's refusals (server/state.py) as the caller sees them."""
    if isinstance(exc, InvalidState):
        return errors.invalid(exc.field, exc.reason)
    if isinstance(exc, UploadsFull):
        return errors.overloaded(
            "uploads",
            exc.limit,
            exc.flag,
            f"uploads of {exc.held} bytes under way (built aside until they end) and this "
            f"part has {exc.size}",
        )
    if isinstance(exc, CacheFull):
        return errors.overloaded(
            "snapshots" if exc.flag == "--max-clusters" else "state_bytes",
            exc.limit,
            exc.flag,
            f"{exc.held} snapshots of other callers, all in use",
        )
    if isinstance(exc, StateTooLarge):
        return errors.state_too_large(str(exc), exc.size, exc.limit)
    if isinstance(exc, StaleReplica):
        return errors.stale_snapshot(str(exc), exc.have)
    return errors.snapshot_passed(str(exc), exc.have)


def deadline_error(exc: DeadlineExceeded) -> ServiceError:
    log.info("a call stopped at its deadline: %s", exc)
    return errors.deadline(
        f"deadline: {exc}; the cycle stopped there and nothing of it was kept: retry with "
        "a longer deadline"
    )


__all__ = [
    "DEFAULT_SLICE_SECONDS",
    "Call",
    "ClusterLocks",
    "Prologue",
    "Worker",
    "refusal",
]
