"""The caller's side of the SchedulingService protocol (protos/README.md,
"Client contract").

- ``statelog``: ``ClusterStateLog``, the truth the plugins should see, by
  generation, with the recent deltas;
- ``client``: ``SchedulingClient``, which sends each request with the changes
  since a generation the answering replica holds, resends on STALE_SNAPSHOT,
  fails over between replicas and retries OVERLOADED answers;
- ``replicas``: ``ReplicaTracker``, the generation each replica confirmed;
- ``endpoints``: ``--plugin-server`` targets, DNS, one ``Endpoint`` per channel;
- ``errors``: ``ErrorDetail`` (a refusal's ErrorInfo) and the exceptions;
- ``channel``: channels that load ``protos/service_config.json``;
- ``tls``: the ``--plugin-server-ca/-cert/-key/-tls-name`` flags and the
  channel credentials they make.
"""

from berth.client.answers import rejected_by_status, rejected_count, rejected_nodes
from berth.client.channel import (
    CHANNEL_OPTIONS,
    DEFAULT_MAX_MESSAGE_BYTES,
    RPC_NAMES,
    SERVICE_NAME,
    channel_options,
    load_service_config,
    open_channel,
)
from berth.client.client import DEFAULT_TIMEOUT_SECONDS, TOKEN_METADATA, Mode, SchedulingClient
from berth.client.endpoints import (
    Endpoint,
    EndpointStats,
    EventHook,
    Target,
    parse_target,
    resolve_dns,
)
from berth.client.errors import (
    BATCH_TOO_LARGE,
    OVERLOADED,
    SNAPSHOT_PASSED,
    STALE_SNAPSHOT,
    ErrorDetail,
    RequestRefused,
    SnapshotPassed,
    replica_generation,
)
from berth.client.replicas import ReplicaTracker
from berth.client.statelog import TOKEN_ENV, ClusterStateLog

__all__ = [
    "BATCH_TOO_LARGE",
    "CHANNEL_OPTIONS",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_TIMEOUT_SECONDS",
    "OVERLOADED",
    "RPC_NAMES",
    "SERVICE_NAME",
    "SNAPSHOT_PASSED",
    "STALE_SNAPSHOT",
    "TOKEN_ENV",
    "TOKEN_METADATA",
    "ClusterStateLog",
    "Endpoint",
    "EndpointStats",
    "ErrorDetail",
    "EventHook",
    "Mode",
    "ReplicaTracker",
    "RequestRefused",
    "SchedulingClient",
    "SnapshotPassed",
    "Target",
    "channel_options",
    "load_service_config",
    "open_channel",
    "parse_target",
    "rejected_by_status",
    "rejected_count",
    "rejected_nodes",
    "replica_generation",
    "resolve_dns",
]
