"""Where the replicas are: a parsed ``--plugin-server`` target, the DNS look-up
that finds every replica behind a headless Service, and the client's channel
to each (protos/README.md, "Replicas: what to send to whom")."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import grpc

from berth.client.replicas import ReplicaTracker


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed ``--plugin-server`` value."""

    # "dns": resolve host:port to every replica's address (a headless Service);
    # "list": these addresses; "single": one gRPC target, balanced by gRPC or a proxy.
    kind: Literal["dns", "list", "single"]
    text: str
    addresses: tuple[str, ...] = ()
    host: str = ""
    port: int = 0


def check_host_port(text: str, entry: str) -> tuple[str, int]:
    """``entry`` (a part of the target ``text``) as host and port; ValueError
    naming both when it is not host:port."""
    host, sep, port = entry.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"plugin server target {text!r}: {entry!r} is not host:port (e.g. 10.0.0.5:50051)"
        )
    return host, int(port)


def parse_target(text: str) -> Target:
    """``dns:///name:port`` (or ``dns://authority/name:port``), a list
    ``host:port,host:port``, or any other gRPC target (``host:port``,
    ``ipv4:a:p,b:p``, ``unix:...``) used as one channel."""
    text = text.strip()
    if not text:
        raise ValueError("plugin server target: must not be empty")
    if text.startswith("dns:"):
        rest = text[len("dns:") :]
        if rest.startswith("//"):
            # dns://[authority]/name:port: the authority (a DNS server) is
            # gRPC's; the system resolver is used here.
            rest = rest[2:].partition("/")[2]
        host, port = check_host_port(text, rest)
        return Target("dns", text, host=host.strip("[]"), port=port)
    if "," in text and ":" in text.split(",", 1)[0] and "://" not in text:
        first = text.split(",", 1)[0]
        if first.partition(":")[0] in ("ipv4", "ipv6", "unix", "unix-abstract", "vsock"):
            return Target("single", text, addresses=(text,))
        entries = tuple(e.strip() for e in text.split(",") if e.strip())
        for e in entries:
            check_host_port(text, e)
        return Target("list", text, addresses=entries)
    return Target("single", text, addresses=(text,))


Resolve = Callable[[str, int], Awaitable[list[str]]]


async def resolve_dns(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, as ``ip:port`` (``[ip]:port`` for IPv6)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    out: list[str] = []
    for family, _, _, _, sockaddr in infos:
        ip = str(sockaddr[0])
        addr = f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}"
        if addr not in out:
            out.append(addr)
    return sorted(out)


class Endpoint:
    """One channel: to one replica's address (endpoint-aware), or to whatever
    the channel balances over (opaque)."""

    def __init__(
        self, address: str, stub: Any, channel: grpc.aio.Channel | None, tracker: ReplicaTracker
    ) -> None:
        self.address = address
        self.stub = stub
        self.channel = channel
        self.tracker = tracker
        # ScheduleStream: one stream per endpoint, one exchange at a time.
        self.stream: Any = None
        self.stream_acked = 0
        self.stream_replica = ""
        self.stream_lock = asyncio.Lock()
        # Held while a full state is in flight on this endpoint.
        self.full_lock = asyncio.Lock()
        # The replica id last seen here, and every id seen here.
        self.replica = ""
        self.seen: set[str] = set()
        self.down_until = 0.0
        self.backoff = 0.0
        self.calls = 0
        self.full_sends = 0
        self.resends = 0
        self.failures = 0


@dataclass(frozen=True, slots=True)
class EndpointStats:
    address: str
    replica: str
    healthy: bool
    calls: int
    full_sends: int
    resends: int
    failures: int
