"""A partition the shim is not told about: its connections to the API server stay open
but nothing arrives, as when a NAT entry or a load balancer's flow is dropped. The shim
reaches the real API server through a TCP proxy in this test; the proxy then drops every
byte of the connections it has (a blackhole: nothing forwarded, nothing closed), and of new
ones until it heals. After healing it forwards new connections only: the old ones stay
dead, as they would.

What must happen (issue 22, "Partitions go unseen"):

- ``/readyz`` answers 503 while the API server cannot be reached, 200 again after;
- each watch is replaced within 90 s (shim/informer.py: a stream silent for 85 s is
  taken for dead, where the API server ends a live one within 72 s even when nothing
  changes), so a pod created during the partition is seen and bound once connections
  work again. Before, the dead watch was noticed only when its 315 s read timeout ran
  out;
- and a live watch with nothing to say is not taken for dead: the shim first idles,
  through the healthy proxy, longer than the idle timeout.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.pki import user_kubeconfig
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.rest import KubeApi
from berth.shim.informer import WATCH_IDLE_TIMEOUT
from tests.integration.shimtools import (
    Shim,
    pod_path,
    profile_for,
    running,
    wait_for,
    wait_node_of,
    write_config,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

# The shim's promise, from the moment the path dies.
REPLACED_WITHIN = 90.0


class BlackholeProxy:
    """A TCP proxy to ``upstream`` on a loopback port. ``blackhole()``: from now on the
    bytes of every connection are read and dropped, both ways, and the connections kept
    open. ``heal()``: connections accepted from now on are forwarded again; the earlier
    ones stay blackholed."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._generation = 0  # connections of an older generation are blackholed
        self._blackholed = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._spawn(self._accept)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def blackhole(self) -> None:
        with self._lock:
            self._blackholed = True
            self._generation += 1

    def heal(self) -> None:
        with self._lock:
            self._blackholed = False

    def close(self) -> None:
        self._stop.set()
        self.listener.close()
        with self._lock:
            for s in self._sockets:
                s.close()

    def _spawn(self, target: object, *args: object) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        t.start()
        self._threads.append(t)

    def _dead(self, generation: int) -> bool:
        with self._lock:
            return self._blackholed or generation != self._generation

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                generation = self._generation
                blackholed = self._blackholed
                if blackholed:
                    generation = -1  # never forwarded
                self._sockets.append(client)
            server: socket.socket | None = None
            if not blackholed:
                try:
                    server = socket.create_connection(self.upstream, timeout=5)
                except OSError:
                    client.close()
                    continue
                with self._lock:
                    self._sockets.append(server)
            self._spawn(self._relay, client, server, generation)
            if server is not None:
                self._spawn(self._relay, server, client, generation)

    def _relay(self, src: socket.socket, dst: socket.socket | None, generation: int) -> None:
        src.settimeout(0.2)
        while not self._stop.is_set():
            try:
                data = src.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                if dst is not None and not self._dead(generation):
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                return
            if dst is None or self._dead(generation):
                continue  # dropped
            try:
                dst.sendall(data)
            except OSError:
                return


@pytest.fixture
def proxy(cluster: Cluster) -> Iterator[BlackholeProxy]:
    parts = urlsplit(cluster.server)
    assert parts.hostname is not None and parts.port is not None
    p = BlackholeProxy((parts.hostname, parts.port))
    yield p
    p.close()


def replaced_watches(log: str) -> set[str]:
    """The informers that logged a replaced watch."""
    return set(re.findall(r"(\S+): watch replaced: no data for", log))


def test_a_silently_dead_watch_is_replaced_and_readyz_fails_meanwhile(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    proxy: BlackholeProxy,
    tmp_path: Path,
) -> None:
    profile = profile_for(namespace)
    config = write_config(tmp_path / "c.yaml", profile)
    fake_nodes(2, cpu="4")
    kubeconfig = user_kubeconfig(
        cluster.kubeconfig.parent / "pki",
        tmp_path / "through-proxy.kubeconfig",
        server=proxy.url,
        user="berth-shim-partition",
        group="system:masters",
    )

    def pod(name: str) -> None:
        objects.create_pods(
            kube,
            [
                objects.pod(
                    name,
                    namespace=namespace,
                    scheduler_name=profile,
                    node_selector={TEST_LABEL: namespace},
                )
            ],
        )

    shim = Shim(config, kubeconfig, tmp_path / "shim.log").start()
    with running(shim):
        pod("before")
        wait_node_of(kube, namespace, "before", shim)
        assert shim.get("/readyz") == (200, "ok: scheduling")
        # Idle watches on a healthy path are not mistaken for dead ones (the API server
        # sends no bookmark on a kind that does not change; it ends the watch instead).
        time.sleep(WATCH_IDLE_TIMEOUT + 5)
        assert replaced_watches(shim.text()) == set()

        proxy.blackhole()
        dead_since = time.monotonic()
        wait_for(lambda: shim.get("/readyz")[0] == 503, 30, "/readyz 503", shim.log)
        status, body = shim.get("/readyz")
        assert status == 503 and "the API server is unreachable" in body, body
        # Liveness stays: restarting the shim would not bring the API server back.
        assert shim.get("/healthz") == (200, "ok")

        pod("during")  # created while the shim's watches are dead
        proxy.heal()
        wait_for(lambda: shim.get("/readyz")[0] == 200, 30, "/readyz 200 again", shim.log)

        # Each watch the shim had is noticed dead and replaced within 90 s.
        wait_for(
            lambda: {"nodes", "pods"} <= replaced_watches(shim.text()),
            REPLACED_WITHIN + 30,
            "the node and pod watches replaced",
            shim.log,
        )
        replaced_after = time.monotonic() - dead_since
        assert replaced_after <= REPLACED_WITHIN, replaced_after
        # The pod created meanwhile comes through the new watch and is bound.
        node = wait_node_of(kube, namespace, "during", shim, timeout=120)
        assert kube.get(pod_path(namespace, "during"))["spec"]["nodeName"] == node
