"""Where the replicas are: a parsed ``--plugin-server`` target, the DNS look-up
that finds every replica behind a headless Service, and the client's channel
to each (protos/README.md, "Replicas: what to send to whom")."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import grpc

from berth.client.replicas import ReplicaTracker

# The package's logger: every line of the client names berth.client.
log = logging.getLogger("berth.client")


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


# What the client reports to ``on_event``: (kind, endpoint address, replica id).
# Kinds: "full" (a full state sent), "resend" (a STALE_SNAPSHOT answered),
# "failover" (an endpoint unavailable, the call moved on), "replica" (a replica
# id seen for the first time at an endpoint).
EventHook = Callable[[str, str, str], None]


class EndpointPool:
    """The client's endpoints, and which to call next.

    Opaque: one endpoint (a channel as given, or one gRPC target). Endpoint-
    aware (``failover``): one per replica address, from a fixed list or
    resolved again every ``resolve_every`` seconds (``refresh``); calls go
    round robin over the healthy ones (``pick``), and an endpoint found
    unavailable is left alone for a backoff of 0.5 s doubling to 10 s.
    """

    def __init__(self, *, clock: Callable[[], float], on_event: EventHook | None) -> None:
        self.clock = clock
        self.on_event = on_event
        self.target: Target | None = None
        self.endpoints: list[Endpoint] = []
        # Endpoint-aware: an UNAVAILABLE call moves on to the next endpoint.
        self.failover = False
        self.failovers = 0
        # The channels this pool opened, and those closing after a replica left.
        self.owned: list[grpc.aio.Channel] = []
        self._closing: set[asyncio.Task[None]] = set()
        self._next = 0
        # Endpoint-aware: how channels are made and addresses found.
        self.make_endpoint: Callable[[str], tuple[Any, grpc.aio.Channel | None]] | None = None
        self.resolve: Resolve | None = None
        self.resolve_every = 30.0
        self.resolved_at = -1e9

    def stats(self) -> list[EndpointStats]:
        now = self.clock()
        return [
            EndpointStats(
                e.address,
                e.replica,
                e.down_until <= now,
                e.calls,
                e.full_sends,
                e.resends,
                e.failures,
            )
            for e in self.endpoints
        ]

    def set_addresses(self, addresses: list[str]) -> None:
        assert self.make_endpoint is not None
        have = {e.address: e for e in self.endpoints}
        added = [a for a in addresses if a not in have]
        removed = [e for e in self.endpoints if e.address not in addresses]
        if not added and not removed:
            return
        kept = [e for e in self.endpoints if e.address in addresses]
        for a in added:
            stub, ch = self.make_endpoint(a)
            kept.append(Endpoint(a, stub, ch, ReplicaTracker(exclusive=True, clock=self.clock)))
        self.endpoints = sorted(kept, key=lambda e: e.address)
        for e in removed:
            self._retire(e)
        assert self.target is not None
        log.info(
            "plugin servers for %s: %s%s%s",
            self.target.text,
            ", ".join(e.address for e in self.endpoints) or "none",
            f"; added {', '.join(added)}" if added and len(added) < len(addresses) else "",
            f"; gone {', '.join(e.address for e in removed)}" if removed else "",
        )

    def _retire(self, e: Endpoint) -> None:
        if e.channel is None:
            return
        if e.channel in self.owned:
            self.owned.remove(e.channel)
        # In-flight calls get a few seconds to finish.
        task = asyncio.get_running_loop().create_task(e.channel.close(grace=5.0))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def refresh(self, *, failed: bool = False) -> None:
        """Resolves the target again when due (every ``resolve_every``
        seconds, and at most once a second after a failure)."""
        if self.resolve is None or self.target is None:
            return
        now = self.clock()
        due = now - self.resolved_at >= (1.0 if failed else self.resolve_every)
        if not due and self.endpoints:
            return
        self.resolved_at = now
        try:
            addresses = await self.resolve(self.target.host, self.target.port)
        except OSError as exc:
            addresses = []
            log.warning("cannot resolve %s: %s", self.target.text, exc)
        if addresses:
            self.set_addresses(addresses)
        elif not self.endpoints:
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNAVAILABLE,
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                f"plugin server target {self.target.text}: {self.target.host} resolves to "
                "no address",
            )

    def pick(self, tried: set[int]) -> Endpoint | None:
        """The next healthy endpoint, round robin; an unhealthy one when
        nothing else is left."""
        n = len(self.endpoints)
        now = self.clock()
        fallback: Endpoint | None = None
        for i in range(n):
            e = self.endpoints[(self._next + i) % n]
            if id(e) in tried:
                continue
            if e.down_until <= now:
                self._next = (self._next + i + 1) % n
                return e
            if fallback is None or e.down_until < fallback.down_until:
                fallback = e
        return fallback

    def unavailable(self, e: Endpoint, err: grpc.aio.AioRpcError, others: int) -> None:
        e.failures += 1
        e.backoff = min(max(0.5, e.backoff * 2), 10.0)
        e.down_until = self.clock() + e.backoff
        e.stream = None
        self.failovers += 1
        self.event("failover", e, e.replica)
        log.warning(
            "plugin server %s unavailable (%s); %s",
            e.address,
            err.details() or err.code().name,
            f"trying another of {others}" if others else "no other replica left to try",
        )

    def answered(self, e: Endpoint) -> None:
        if e.backoff:
            log.info("plugin server %s answers again", e.address)
        e.backoff = 0.0
        e.down_until = 0.0

    def event(self, kind: str, e: Endpoint, replica: str) -> None:
        if self.on_event is not None:
            self.on_event(kind, e.address, replica)

    def note_replica(self, e: Endpoint, replica: str) -> None:
        if not replica:
            return
        if replica not in e.seen:
            if len(e.seen) > 1024:
                e.seen.clear()
            e.seen.add(replica)
            if e.tracker.exclusive:
                log.info(
                    "plugin server %s is replica %s%s",
                    e.address,
                    replica,
                    f" (was {e.replica}: restarted)" if e.replica else "",
                )
            else:
                log.info(
                    "plugin servers at %s: replica %s answers (%d seen)",
                    e.address,
                    replica,
                    len(e.seen),
                )
            self.event("replica", e, replica)
        e.replica = replica

    async def close_channels(self) -> None:
        for ch in self.owned:
            await ch.close()
        self.owned = []
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
