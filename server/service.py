"""SchedulingService: each RPC runs one extension point of a profile, or a
whole cycle, over the one prologue of server/prologue.py.

A request the server cannot serve ends with a gRPC status code, a message that
names the field, and a google.rpc.ErrorInfo detail (server/errors.py):
INVALID_ARGUMENT (malformed request), NOT_FOUND (unknown profile or node),
FAILED_PRECONDITION (this replica's snapshot is behind), ABORTED (a pinned
request found the replica past its generation), RESOURCE_EXHAUSTED (batch too
large, overloaded), DEADLINE_EXCEEDED, INTERNAL. Plugin verdicts, including
plugin errors, travel inside the response as Status. Every response carries
the replica's id (trailer ``berth-replica``), and every response that used
cluster state the generation it used.

The handlers: server/handlers.py (one extension point, Sync,
DescribeProfiles), server/schedule.py (Schedule, ScheduleBatch); the
messages they build: server/convert.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc

from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.framework.profile import SchedulerConfig
from berth.framework.runtime import Framework
from berth.server import errors, handlers, telemetry
from berth.server.admission import Admission
from berth.server.errors import Replica, ServiceError
from berth.server.handlers import named_profile
from berth.server.identity import Callers
from berth.server.prologue import (
    DEFAULT_SLICE_SECONDS,
    ClusterLocks,
    Prologue,
    Worker,
    deadline_of,
    parse,
    refusal,
    state_key,
)
from berth.server.schedule import check_batch, schedule, schedule_batch, schedule_streamed
from berth.server.state import ANONYMOUS, SnapshotStore, Upload

# Most pods one ScheduleBatch may carry (berth serve --max-batch-pods).
DEFAULT_MAX_BATCH_PODS = 256
# The method each ScheduleStream message is counted under
# (berth_plugin_server_calls_total).
STREAM_METHOD = "ScheduleStream"

# Longest an UploadState stream may wait for its next part (or its end),
# whatever its deadline: an upload holds its bytes until it ends.
DEFAULT_UPLOAD_IDLE_SECONDS = 60.0


class SchedulingService(pb_grpc.SchedulingServiceServicer):
    """The servicer. A unary RPC's request arrives as bytes from the network
    (server/app.py) or as a message from an in-process caller."""

    def __init__(
        self,
        config: SchedulerConfig,
        frameworks: Mapping[str, Framework],
        store: SnapshotStore | None = None,
        max_batch_pods: int = DEFAULT_MAX_BATCH_PODS,
        replica: Replica | None = None,
        slice_seconds: float = DEFAULT_SLICE_SECONDS,
        callers: Callers | None = None,
        admission: Admission | None = None,
        *,
        daemon_worker: bool = True,
    ) -> None:
        self.config = config
        self.callers = callers or Callers()
        self.admission = admission or Admission()
        self.frameworks = dict(frameworks)
        self.store = store or SnapshotStore()
        self.max_batch_pods = max_batch_pods
        # This server's id in trailers and error details.
        self.replica = replica or Replica()
        self.locks = ClusterLocks()
        # The one thread plugin work runs on (server/prologue.py).
        self.worker = Worker(slice_seconds, daemon=daemon_worker)
        # An upload whose next part does not come within this long ends.
        self.upload_idle_seconds = DEFAULT_UPLOAD_IDLE_SECONDS
        self.prologue = Prologue(
            profiles=self.frameworks,
            store=self.store,
            callers=self.callers,
            admission=self.admission,
            replica=self.replica,
            locks=self.locks,
            worker=self.worker,
        )

    def close(self) -> None:
        """Stops the worker once the work queued on it is done."""
        self.worker.close()

    # -- RPCs of one extension point ------------------------------------------

    async def Sync(self, request: pb.SyncRequest | bytes, context: Any) -> pb.SyncResponse:
        return await self.prologue.run(context, request, pb.SyncRequest, handlers.sync)

    async def DescribeProfiles(
        self, request: pb.DescribeProfilesRequest | bytes, context: Any
    ) -> pb.DescribeProfilesResponse:
        """Answered on the event loop from the configuration, for any caller."""

        async def serve(
            _request: pb.DescribeProfilesRequest, _context: Any
        ) -> pb.DescribeProfilesResponse:
            return handlers.describe_profiles(self.frameworks)

        return await self.prologue.unary(context, request, pb.DescribeProfilesRequest, serve)

    async def PreEnqueue(
        self, request: pb.PreEnqueueRequest | bytes, context: Any
    ) -> pb.PreEnqueueResponse:
        return await self.prologue.run(
            context,
            request,
            pb.PreEnqueueRequest,
            handlers.pre_enqueue,
            handlers.pre_enqueue_checks,
        )

    async def QueueSort(
        self, request: pb.QueueSortRequest | bytes, context: Any
    ) -> pb.QueueSortResponse:
        return await self.prologue.run(
            context, request, pb.QueueSortRequest, handlers.queue_sort, handlers.queue_sort_checks
        )

    async def QueueingHints(
        self, request: pb.QueueingHintsRequest | bytes, context: Any
    ) -> pb.QueueingHintsResponse:
        return await self.prologue.run(
            context,
            request,
            pb.QueueingHintsRequest,
            handlers.queueing_hints,
            handlers.queueing_hints_checks,
        )

    async def PreFilter(
        self, request: pb.CycleRequest | bytes, context: Any
    ) -> pb.PreFilterResponse:
        return await self.prologue.run(
            context, request, pb.CycleRequest, handlers.pre_filter, named_profile
        )

    async def Filter(self, request: pb.NodesRequest | bytes, context: Any) -> pb.FilterResponse:
        return await self.prologue.run(
            context, request, pb.NodesRequest, handlers.filter_nodes, named_profile
        )

    async def PostFilter(
        self, request: pb.PostFilterRequest | bytes, context: Any
    ) -> pb.PostFilterResponse:
        return await self.prologue.run(
            context, request, pb.PostFilterRequest, handlers.post_filter, named_profile
        )

    async def PreScore(self, request: pb.NodesRequest | bytes, context: Any) -> pb.PreScoreResponse:
        return await self.prologue.run(
            context, request, pb.NodesRequest, handlers.pre_score, named_profile
        )

    async def Score(self, request: pb.NodesRequest | bytes, context: Any) -> pb.ScoreResponse:
        return await self.prologue.run(
            context, request, pb.NodesRequest, handlers.score, named_profile
        )

    async def NormalizeScore(
        self, request: pb.NormalizeScoreRequest | bytes, context: Any
    ) -> pb.NormalizeScoreResponse:
        return await self.prologue.run(
            context, request, pb.NormalizeScoreRequest, handlers.normalize_score, named_profile
        )

    async def Reserve(self, request: pb.NodeRequest | bytes, context: Any) -> pb.StatusResponse:
        return await self.prologue.run(
            context, request, pb.NodeRequest, handlers.reserve, named_profile
        )

    async def Unreserve(self, request: pb.NodeRequest | bytes, context: Any) -> pb.StatusResponse:
        return await self.prologue.run(
            context, request, pb.NodeRequest, handlers.unreserve, named_profile
        )

    async def Permit(self, request: pb.NodeRequest | bytes, context: Any) -> pb.PermitResponse:
        return await self.prologue.run(
            context, request, pb.NodeRequest, handlers.permit, named_profile
        )

    async def PreBind(self, request: pb.NodeRequest | bytes, context: Any) -> pb.StatusResponse:
        return await self.prologue.run(
            context, request, pb.NodeRequest, handlers.pre_bind, named_profile
        )

    async def Bind(self, request: pb.NodeRequest | bytes, context: Any) -> pb.BindResponse:
        return await self.prologue.run(
            context, request, pb.NodeRequest, handlers.bind, named_profile
        )

    async def PostBind(self, request: pb.NodeRequest | bytes, context: Any) -> pb.StatusResponse:
        return await self.prologue.run(
            context, request, pb.NodeRequest, handlers.post_bind, named_profile
        )

    # -- RPCs of whole cycles --------------------------------------------------

    async def Schedule(
        self, request: pb.ScheduleRequest | bytes, context: Any
    ) -> pb.ScheduleResponse:
        return await self.prologue.run(
            context, request, pb.ScheduleRequest, schedule, named_profile
        )

    async def ScheduleBatch(
        self, request: pb.ScheduleBatchRequest | bytes, context: Any
    ) -> pb.ScheduleBatchResponse:
        async def serve(request: pb.ScheduleBatchRequest, context: Any) -> pb.ScheduleBatchResponse:
            check_batch(request, self.max_batch_pods)
            call = self.prologue.call(context)
            # The batch holds its cluster for its whole run, so no other call
            # sees the pods it assumes.
            async with self.prologue.cluster(call, request.state) as held:
                return await schedule_batch(held, request, self.worker)

        return await self.prologue.unary(context, request, pb.ScheduleBatchRequest, serve)

    async def ScheduleStream(
        self, requests: AsyncIterator[pb.ScheduleRequest | bytes], context: Any
    ) -> AsyncIterator[pb.ScheduleStreamResponse]:
        caller = await self._stream_start(context)
        async for item in requests:
            yield await self._stream_answer(item, caller, context)

    async def schedule_stream_direct(
        self, requests: AsyncIterator[pb.ScheduleRequest | bytes], context: Any
    ) -> None:
        """ScheduleStream through context.read/write instead of an async
        generator: fewer event-loop hops per message. Used when no
        interceptor wraps the handler (the tracing interceptor expects a
        generator)."""
        caller = await self._stream_start(context)
        while True:
            item = await context.read()
            if item is grpc.aio.EOF:
                return
            await context.write(await self._stream_answer(item, caller, context))

    async def _stream_start(self, context: Any) -> str:
        """A stream names its replica up front (initial metadata) and at its
        end; its caller is known from its start (an unknown one ends it)."""
        context.set_trailing_metadata(self.replica.trailers)
        try:
            caller = self.callers.identify(context)
        except ServiceError as exc:
            await self.replica.abort(context, exc)
        await context.send_initial_metadata(self.replica.trailers)
        return caller

    async def _stream_answer(
        self, item: pb.ScheduleRequest | bytes, caller: str, context: Any
    ) -> pb.ScheduleStreamResponse:
        """One stream message, over the prologue's steps: a response, or the
        refusal as ``error``. Its deadline: ``timeout_millis`` from now, or
        the stream's, the earlier."""
        read = time.perf_counter()
        size = len(item) if isinstance(item, bytes) else item.ByteSize()
        try:
            with self.admission.admitted(size):
                request = await self.prologue.parse(pb.ScheduleRequest, item)
                deadline = deadline_of(context)
                if request.timeout_millis > 0:
                    own = read + request.timeout_millis / 1000
                    deadline = own if deadline is None else min(deadline, own)
                call = self.prologue.call_as(caller, deadline)
                answer = await self.prologue.whole(call, request, schedule_streamed, named_profile)
            telemetry.call_done(STREAM_METHOD, "OK", time.perf_counter() - read)
            return answer
        except Exception as exc:
            out = self._stream_refusal(exc)
            telemetry.call_done(
                STREAM_METHOD, telemetry.code_name(out.error.grpc_code), time.perf_counter() - read
            )
            return out

    def schedule_or_error(self, item: pb.ScheduleRequest | bytes) -> pb.ScheduleStreamResponse:
        """One stream message run whole on the calling thread, for in-process
        callers (berth bench, tests) that run no other call concurrently."""
        try:
            request = parse(pb.ScheduleRequest, item)
            call = self.prologue.call_as(ANONYMOUS, None)
            return schedule_streamed(call, request)
        except Exception as exc:
            return self._stream_refusal(exc)

    def _stream_refusal(self, exc: Exception) -> pb.ScheduleStreamResponse:
        """A stream message's refusal as the unary call would give it (call
        from the except block: an unexpected error logs its stack)."""
        return pb.ScheduleStreamResponse(
            error=self.replica.request_error(refusal(exc, "a stream request"))
        )

    # -- cluster state in parts ------------------------------------------------

    async def UploadState(
        self, requests: AsyncIterator[pb.UploadStateRequest | bytes], context: Any
    ) -> pb.UploadStateResponse:
        """A full state in parts, built aside and swapped in when the stream
        ends (protos/README.md, "Large clusters"). Each part is admitted and
        parsed as a unary request is; the cluster's lock is taken to swap the
        state in."""
        context.set_trailing_metadata(self.replica.trailers)
        return await self.prologue.answer(context, lambda: self._upload(requests, context))

    async def _upload(
        self, requests: AsyncIterator[pb.UploadStateRequest | bytes], context: Any
    ) -> pb.UploadStateResponse:
        call = self.prologue.call(context)
        upload: Upload | None = None
        parts = 0
        items = aiter(requests)
        try:
            while True:
                try:
                    item = await asyncio.wait_for(anext(items), self.upload_idle_seconds)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    after = f"parts[{parts - 1}]" if parts else "the stream began"
                    raise errors.deadline(
                        f"deadline: no part for {self.upload_idle_seconds:g} s after "
                        f"{after}; nothing of the upload was kept: send its parts "
                        "without pausing, and end the stream after the last"
                    ) from None
                size = len(item) if isinstance(item, bytes) else item.ByteSize()
                with self.admission.admitted(size):
                    msg = await self.prologue.parse(pb.UploadStateRequest, item)
                    field_name = f"parts[{parts}].state"
                    if not msg.HasField("state"):
                        raise errors.invalid(field_name, "required")
                    if upload is None:
                        upload = self.store.begin_upload(msg.state, field_name, call.caller)
                    await self.worker.in_slices(
                        upload.add(msg.state, field_name),
                        call.deadline,
                        "deadline: passed while this replica built the uploaded state; nothing "
                        "of it was kept: upload it again with a longer deadline",
                    )
                parts += 1
            if upload is None:
                raise errors.invalid("parts", "the stream carried no part; send at least one")
            done = upload
            async with self.locks.hold(state_key(call.caller, done.cluster_id)):
                entry = await self.worker.run(done.finish)
        finally:
            if upload is not None:
                upload.close()
        snap = entry.snapshot
        return pb.UploadStateResponse(
            generation=entry.generation,
            node_count=len(snap.nodes),
            pod_count=len(snap.pods),
            object_count=snap.object_count,
            parts=parts,
        )


__all__ = ["DEFAULT_MAX_BATCH_PODS", "SchedulingService"]
