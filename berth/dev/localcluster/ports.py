"""Loopback port selection: defaults when free, any free port otherwise, errors when a port
that was asked for explicitly is taken."""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

from berth.dev.localcluster.errors import PortInUseError

LOOPBACK = "127.0.0.1"


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """True if a TCP listener could bind ``host:port`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # No SO_REUSEADDR: a port in TIME_WAIT is still reported free, exactly as the Go servers
        # (which set SO_REUSEADDR) will see it, but a live listener anywhere makes it "taken".
        try:
            sock.bind((host, port))
        except OSError as err:
            if err.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
        return True


def free_port(host: str = LOOPBACK, avoid: frozenset[int] = frozenset()) -> int:
    """A port the kernel reports free on ``host`` (not in ``avoid``)."""
    for _ in range(64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port: int = sock.getsockname()[1]
        if port not in avoid:
            return port
    raise PortInUseError(f"could not find a free TCP port on {host} after 64 tries")


@dataclass(frozen=True)
class PortRequest:
    """One port a component needs: ``explicit`` ports must be free, defaults may move."""

    purpose: str  # e.g. "kube-apiserver secure port"
    default: int
    explicit: int | None = None


def choose_ports(requests: list[PortRequest], host: str = LOOPBACK) -> list[int]:
    """Pick one port per request, all distinct.

    An explicitly requested port that is taken raises PortInUseError naming the port, its
    purpose and the way out. A default that is taken is replaced by a free port.
    """
    chosen: list[int] = []
    for req in requests:
        taken = frozenset(chosen)
        if req.explicit is not None:
            if req.explicit in taken or not port_is_free(req.explicit, host):
                raise PortInUseError(
                    f"port {host}:{req.explicit} asked for as the {req.purpose} is already in "
                    "use by another process; stop that process, pick another port, or leave the "
                    "option unset to let berth choose a free one"
                )
            chosen.append(req.explicit)
        elif req.default not in taken and port_is_free(req.default, host):
            chosen.append(req.default)
        else:
            chosen.append(free_port(host, avoid=taken))
    return chosen
