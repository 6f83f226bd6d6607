"""The server's error model (protos/README.md, "Errors").

Every request the server refuses ends with a gRPC status code, a message that
names the field or object at fault, and a ``google.rpc.Status`` in the
``grpc-status-details-bin`` trailer carrying one ``google.rpc.ErrorInfo``:
domain ``berth.dev``, reason an ``ErrorReason`` name without its prefix
(``STALE_SNAPSHOT``), metadata as scheduling.proto documents per reason, plus
``replica``, the id of the replica that answered. ScheduleStream answers the
same refusal in-stream as a ``RequestError`` with the same reason, domain and
metadata.

Call sites raise ``ServiceError`` through the constructors below
(``invalid``, ``unknown_node``, ...): the gRPC code follows from the reason,
and ``Replica`` turns the error into trailers or a RequestError, so no call
site builds a status by hand.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn, TypeAlias

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from berth.api.v1 import scheduling_pb2 as pb

# ErrorInfo.domain of every error this server sends.
DOMAIN = "berth.dev"
# Trailing metadata naming the replica that answered (every response).
REPLICA_TRAILER = "berth-replica"
# The replica's generation on STALE_SNAPSHOT and SNAPSHOT_PASSED (-1: none),
# as plain ASCII trailing metadata for callers that predate ErrorInfo.
GENERATION_TRAILER = "berth-replica-generation"
# Where gRPC carries a serialized google.rpc.Status.
DETAILS_TRAILER = "grpc-status-details-bin"

Reason: TypeAlias = pb.ErrorReason.ValueType

# The gRPC code each reason is answered with (the ErrorReason comments).
_CODE_OF: dict[int, grpc.StatusCode] = {
    pb.ERROR_REASON_STALE_SNAPSHOT: grpc.StatusCode.FAILED_PRECONDITION,
    pb.ERROR_REASON_SNAPSHOT_PASSED: grpc.StatusCode.ABORTED,
    pb.ERROR_REASON_INVALID_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    pb.ERROR_REASON_UNKNOWN_PROFILE: grpc.StatusCode.NOT_FOUND,
    pb.ERROR_REASON_UNKNOWN_NODE: grpc.StatusCode.NOT_FOUND,
    pb.ERROR_REASON_BATCH_TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    pb.ERROR_REASON_DEADLINE: grpc.StatusCode.DEADLINE_EXCEEDED,
    pb.ERROR_REASON_INTERNAL: grpc.StatusCode.INTERNAL,
    pb.ERROR_REASON_OVERLOADED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    pb.ERROR_REASON_STATE_TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    pb.ERROR_REASON_UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
}

INTERNAL_MESSAGE = "internal error in the plugin server; see its log"


def reason_name(reason: Reason) -> str:
    """``ERROR_REASON_STALE_SNAPSHOT`` -> ``STALE_SNAPSHOT``."""
    return pb.ErrorReason.Name(reason).removeprefix("ERROR_REASON_")


class ServiceError(Exception):
    """Ends an RPC (or answers a stream message) with a typed refusal."""

    def __init__(
        self, reason: Reason, message: str, metadata: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.code = _CODE_OF[reason]
        self.message = message
        self.metadata: dict[str, str] = dict(metadata or {})

    @property
    def replica_generation(self) -> int | None:
        """The replica's generation, on STALE_SNAPSHOT and SNAPSHOT_PASSED."""
        value = self.metadata.get("replica_generation")
        return None if value is None else int(value)


def invalid(field: str, reason: str) -> ServiceError:
    """INVALID_ARGUMENT, ``field: reason``."""
    return ServiceError(pb.ERROR_REASON_INVALID_REQUEST, f"{field}: {reason}", {"field": field})


def unknown_profile(profile: str, configured: Iterable[str]) -> ServiceError:
    names = sorted(configured)
    return ServiceError(
        pb.ERROR_REASON_UNKNOWN_PROFILE,
        f"profile {profile!r} is not configured on this server; configured: " + ", ".join(names),
        {"profile": profile, "profiles": ",".join(names)},
    )


def unknown_node(field: str, node: str, generation: int, message: str) -> ServiceError:
    return ServiceError(
        pb.ERROR_REASON_UNKNOWN_NODE,
        message,
        {"node": node, "field": field, "generation": str(generation)},
    )


def stale_snapshot(message: str, have: int) -> ServiceError:
    return ServiceError(pb.ERROR_REASON_STALE_SNAPSHOT, message, {"replica_generation": str(have)})


def snapshot_passed(message: str, have: int) -> ServiceError:
    return ServiceError(pb.ERROR_REASON_SNAPSHOT_PASSED, message, {"replica_generation": str(have)})


def batch_too_large(pods: int, limit: int) -> ServiceError:
    return ServiceError(
        pb.ERROR_REASON_BATCH_TOO_LARGE,
        f"pods: {pods} pods in one batch, this server takes at most {limit} "
        "(berth serve --max-batch-pods); split the batch",
        {"max_batch_pods": str(limit), "field": "pods"},
    )


def deadline(message: str) -> ServiceError:
    return ServiceError(pb.ERROR_REASON_DEADLINE, message)


def overloaded(limit: str, maximum: int, flag: str, what: str) -> ServiceError:
    """RESOURCE_EXHAUSTED: the replica is at its ``limit`` ("calls",
    "bytes", "snapshots", "state_bytes" or "uploads"); nothing of the call
    was done."""
    return ServiceError(
        pb.ERROR_REASON_OVERLOADED,
        f"this replica is serving {what}, the most it takes at once (berth serve {flag} "
        f"{maximum}); nothing of this call was done: retry it after a backoff",
        {"limit": limit, "max": str(maximum)},
    )


def state_too_large(message: str, size: int, limit: int) -> ServiceError:
    return ServiceError(
        pb.ERROR_REASON_STATE_TOO_LARGE,
        message,
        {"state_bytes": str(size), "max_caller_state_bytes": str(limit), "field": "state"},
    )


def unauthenticated(message: str) -> ServiceError:
    return ServiceError(pb.ERROR_REASON_UNAUTHENTICATED, message)


def internal(message: str = INTERNAL_MESSAGE) -> ServiceError:
    return ServiceError(pb.ERROR_REASON_INTERNAL, message)


class Replica:
    """This server's identity in errors and trailers: a random id per server
    (one per ``berth serve`` process), so a caller can tell replicas behind
    one address apart and track what each confirmed."""

    def __init__(self, replica_id: str | None = None) -> None:
        self.id = replica_id or secrets.token_hex(8)
        # Sent on every response; built once.
        self.trailers: tuple[tuple[str, str], ...] = ((REPLICA_TRAILER, self.id),)

    def error_info(self, err: ServiceError) -> error_details_pb2.ErrorInfo:
        info = error_details_pb2.ErrorInfo(reason=reason_name(err.reason), domain=DOMAIN)
        info.metadata.update(err.metadata)
        info.metadata["replica"] = self.id
        return info

    def status(self, err: ServiceError) -> status_pb2.Status:
        st = status_pb2.Status(code=err.code.value[0], message=err.message)
        st.details.add().Pack(self.error_info(err))
        return st

    def error_trailers(self, err: ServiceError) -> tuple[tuple[str, str | bytes], ...]:
        """Trailing metadata of a refused call: the google.rpc.Status, the
        replica id and, for callers that predate ErrorInfo, the replica's
        generation as ASCII."""
        out: list[tuple[str, str | bytes]] = list(
            rpc_status.to_status(self.status(err)).trailing_metadata
        )
        out.extend(self.trailers)
        generation = err.replica_generation
        if generation is not None:
            out.append((GENERATION_TRAILER, str(generation)))
        return tuple(out)

    async def abort(self, context: Any, err: ServiceError) -> NoReturn:
        """End the call with ``err``; raises (as ``context.abort`` does)."""
        await context.abort(err.code, err.message, trailing_metadata=self.error_trailers(err))
        raise AssertionError("context.abort returned")  # pragma: no cover

    def request_error(self, err: ServiceError) -> pb.RequestError:
        """The same refusal on a stream (ScheduleStreamResponse.error)."""
        out = pb.RequestError(
            grpc_code=err.code.value[0],
            message=err.message,
            reason=reason_name(err.reason),
            domain=DOMAIN,
        )
        out.metadata.update(err.metadata)
        out.metadata["replica"] = self.id
        generation = err.replica_generation
        if generation is not None:
            out.replica_generation = generation
        return out


def decode_error_info(
    trailers: Sequence[tuple[str, str | bytes]] | None,
) -> error_details_pb2.ErrorInfo | None:
    """The ErrorInfo of a refused call's trailing metadata, or None. For
    callers and tests; any gRPC language has the same in its status helpers."""
    for key, value in trailers or ():
        if key != DETAILS_TRAILER or not isinstance(value, bytes):
            continue
        st = status_pb2.Status.FromString(value)
        for detail in st.details:
            if detail.TypeName() == error_details_pb2.ErrorInfo.DESCRIPTOR.full_name:
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                return info
    return None


__all__ = [
    "DOMAIN",
    "GENERATION_TRAILER",
    "REPLICA_TRAILER",
    "Replica",
    "ServiceError",
    "batch_too_large",
    "deadline",
    "decode_error_info",
    "internal",
    "invalid",
    "overloaded",
    "reason_name",
    "snapshot_passed",
    "stale_snapshot",
    "state_too_large",
    "unauthenticated",
    "unknown_node",
    "unknown_profile",
]
