"""Channels that load the client contract, ``protos/service_config.json``:
per-method deadlines, retries of UNAVAILABLE and message sizes
(protos/README.md, "Deadlines, retries, message sizes")."""

from __future__ import annotations

import importlib.resources
import json
from typing import Any

import grpc

from berth.api.v1 import scheduling_pb2 as pb

SERVICE_NAME = "berth.v1.SchedulingService"
RPC_NAMES = tuple(m.name for m in pb.DESCRIPTOR.services_by_name["SchedulingService"].methods)

# berth serve --max-message-bytes's default: the contract's largest request
# and response (a full state of 5000 nodes and 50k pods is ~11 MiB).
DEFAULT_MAX_MESSAGE_BYTES = 64 * 2**20

# protos/service_config.json, copied into the berth.api package by
# hack/gen-protos.sh (checked there), so an installed package carries it.
SERVICE_CONFIG_RESOURCE = "service_config.json"


def load_service_config(max_message_bytes: int | None = None) -> dict[str, Any]:
    """The client contract: protos/service_config.json as the berth.api
    package carries it, with the message size limits replaced when
    ``max_message_bytes`` is given (a server run with another
    --max-message-bytes)."""
    resource = importlib.resources.files("berth.api") / SERVICE_CONFIG_RESOURCE
    try:
        config: dict[str, Any] = json.loads(resource.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"berth/api/{SERVICE_CONFIG_RESOURCE}: not a readable JSON service config: {exc}"
        ) from exc
    if max_message_bytes is not None:
        for method in config.get("methodConfig", ()):
            for key in ("maxRequestMessageBytes", "maxResponseMessageBytes"):
                if key in method:
                    method[key] = max_message_bytes
    return config


def channel_options(
    *, retries: bool = True, max_message_bytes: int | None = None
) -> list[tuple[str, Any]]:
    """Channel arguments that load the client contract. ``retries`` turns on
    gRPC's own retries of UNAVAILABLE (the service config's retryPolicy): on
    for a channel that load balances, off for a channel to one replica whose
    calls the client moves to another replica itself."""
    limit = max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES
    return [
        ("grpc.service_config", json.dumps(load_service_config(max_message_bytes))),
        # The contract above, not whatever a DNS TXT record says.
        ("grpc.service_config_disable_resolution", 1),
        ("grpc.enable_retries", 1 if retries else 0),
        # gRPC applies the smaller of these and the service config's limits.
        ("grpc.max_send_message_length", limit),
        ("grpc.max_receive_message_length", limit),
        # A replica restarted on its address is reached again within seconds,
        # not after gRPC's default reconnect backoff of up to 2 minutes.
        ("grpc.initial_reconnect_backoff_ms", 250),
        ("grpc.min_reconnect_backoff_ms", 250),
        ("grpc.max_reconnect_backoff_ms", 5000),
    ]


# For callers that build their own channel: the contract's options.
CHANNEL_OPTIONS = tuple(channel_options())


def open_channel(
    address: str,
    *,
    retries: bool = True,
    max_message_bytes: int | None = None,
    credentials: grpc.ChannelCredentials | None = None,
    **kwargs: Any,
) -> grpc.aio.Channel:
    """A channel to a plugin server (or a load-balanced set of them) that
    follows the client contract and can carry a full state."""
    options = channel_options(retries=retries, max_message_bytes=max_message_bytes)
    options += list(kwargs.pop("options", ()))
    if credentials is not None:
        return grpc.aio.secure_channel(address, credentials, options=options, **kwargs)
    return grpc.aio.insecure_channel(address, options=options, **kwargs)
