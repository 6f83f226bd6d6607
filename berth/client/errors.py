"""Why a replica refused a request, as the caller reads it: the ErrorInfo of a
gRPC status or a stream's RequestError (protos/README.md, "Error model" and
"Error reasons"), and the exceptions the client raises for them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import grpc
from google.protobuf.message import DecodeError
from google.rpc.error_details_pb2 import ErrorInfo
from google.rpc.status_pb2 import Status as RpcStatus

from berth.api.v1 import scheduling_pb2 as pb

# Trailing metadata: the replica's generation on STALE_SNAPSHOT and
# SNAPSHOT_PASSED (-1: none; sent beside the ErrorInfo), and the id a server
# process picks at random when it starts, on every answer.
GENERATION_TRAILER = "berth-replica-generation"
REPLICA_TRAILER = "berth-replica"
# google.rpc.Status, serialised, in the trailers of a failed call.
STATUS_DETAILS_KEY = "grpc-status-details-bin"
ERROR_DOMAIN = "berth.dev"

_CODES = {c.value[0]: c for c in grpc.StatusCode}

# ErrorReason names as sent (protos/berth/v1/scheduling.proto, ErrorReason).
STALE_SNAPSHOT = "STALE_SNAPSHOT"
SNAPSHOT_PASSED = "SNAPSHOT_PASSED"
BATCH_TOO_LARGE = "BATCH_TOO_LARGE"
OVERLOADED = "OVERLOADED"


def metadata_value(metadata: Iterable[tuple[str, str | bytes]] | None, key: str) -> str | None:
    """The value of ``key`` in gRPC metadata (bytes decoded); None if absent."""
    for k, v in metadata or ():
        if k == key:
            return v.decode(errors="replace") if isinstance(v, bytes) else v
    return None


def _int_or(value: str | None, default: int) -> int:
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        return default


@dataclass(frozen=True, slots=True)
class ErrorDetail:
    """Why a replica refused a request: the google.rpc.ErrorInfo of the gRPC
    status (domain berth.dev), or on a stream the RequestError; the
    ``berth-replica-generation`` trailer when a server sends no ErrorInfo."""

    code: grpc.StatusCode
    message: str
    # An ErrorReason name without its prefix ("STALE_SNAPSHOT"); "" for none.
    reason: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    # The replica's generation of the cluster (-1: none or not said).
    replica_generation: int = -1
    # The id of the server process that answered ("": not said).
    replica: str = ""

    @property
    def stale(self) -> bool:
        return self.reason == STALE_SNAPSHOT

    @classmethod
    def from_rpc_error(cls, err: grpc.aio.AioRpcError) -> ErrorDetail:
        trailers = err.trailing_metadata() or ()
        reason, metadata = "", {}
        raw = None
        for k, v in trailers:
            if k == STATUS_DETAILS_KEY:
                raw = v
        if isinstance(raw, bytes):
            status = RpcStatus()
            with contextlib.suppress(DecodeError):
                status.ParseFromString(raw)
            for detail in status.details:
                info = ErrorInfo()
                # Unpack is False for a detail of another type.
                if detail.Unpack(info) and info.domain == ERROR_DOMAIN:
                    reason, metadata = info.reason, dict(info.metadata)
                    break
        trailer_generation = metadata_value(trailers, GENERATION_TRAILER)
        if (
            not reason
            and trailer_generation is not None
            and err.code() == grpc.StatusCode.FAILED_PRECONDITION
        ):
            # A server that sends no ErrorInfo: FAILED_PRECONDITION with this
            # trailer is a stale snapshot (protos/README.md, "Error model").
            reason = STALE_SNAPSHOT
        generation = _int_or(metadata.get("replica_generation"), _int_or(trailer_generation, -1))
        replica = metadata.get("replica") or metadata_value(trailers, REPLICA_TRAILER) or ""
        return cls(
            err.code(),
            err.details() or "",
            reason,
            metadata,
            generation,
            replica,
        )

    @classmethod
    def from_request_error(cls, err: pb.RequestError) -> ErrorDetail:
        code = _CODES.get(err.grpc_code, grpc.StatusCode.UNKNOWN)
        reason = err.reason
        if not reason and code == grpc.StatusCode.FAILED_PRECONDITION:
            reason = STALE_SNAPSHOT
        generation = err.replica_generation
        if reason not in (STALE_SNAPSHOT, SNAPSHOT_PASSED):
            generation = -1
        elif "replica_generation" in err.metadata:
            generation = _int_or(err.metadata["replica_generation"], generation)
        return cls(
            code,
            err.message,
            reason,
            dict(err.metadata),
            generation,
            err.metadata.get("replica", ""),
        )


def overloaded(err: grpc.aio.AioRpcError | RequestRefused) -> bool:
    """Was the call refused because the replica was at its in-flight caps
    (RESOURCE_EXHAUSTED, reason OVERLOADED)? Nothing of it was done."""
    if isinstance(err, RequestRefused):
        return err.detail.reason == OVERLOADED
    if err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return False
    return ErrorDetail.from_rpc_error(err).reason == OVERLOADED


def replica_generation(err: grpc.aio.AioRpcError) -> int:
    """The generation a replica reported in a STALE_SNAPSHOT answer (-1: none)."""
    return ErrorDetail.from_rpc_error(err).replica_generation


class RequestRefused(Exception):
    """The server refused a streamed request (what the unary RPC would have
    raised as a gRPC error)."""

    def __init__(
        self, code: grpc.StatusCode, message: str, detail: ErrorDetail | None = None
    ) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.detail = detail or ErrorDetail(code, message)


class SnapshotPassed(Exception):
    """A pinned request cannot be served at its generation: the replica
    already holds a later one (ABORTED, SNAPSHOT_PASSED), or the caller can no
    longer build that generation. Restart the cycle at the current one."""

    def __init__(self, generation: int, replica_generation: int, message: str = "") -> None:
        super().__init__(
            message
            or f"cycle pinned to generation {generation}, but the replica holds "
            f"{replica_generation}: restart the cycle"
        )
        self.generation = generation
        self.replica_generation = replica_generation
