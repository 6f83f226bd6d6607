"""shim/prefetch.py: the nodes' and pods' first LISTs sent at start-up and taken by
the informers (shim/informer.py ``prefetch``) instead of their own first list.

A fake API server over plain HTTP answers the LISTs (in pages of ``limit``, with
continue tokens) from the data it holds at the time, counts them, and holds each
watch open until the test ends; the informers and the prefetch reach it through a
plain kubeconfig, as in the shim."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.kube.records import pod_record
from berth.kube.rest import JSON, KubeApi
from berth.shim.informer import ADDED, Event, Informer, pod_key
from berth.shim.prefetch import (
    NODES_PATH,
    POD_FIELD_SELECTOR,
    PODS_PATH,
    ListPrefetch,
    start_for_shim,
)

TIMEOUT = 5.0


def pod(name: str, rv: int) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": name,
            "resourceVersion": str(rv),
        },
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Pending"},
    }


class FakeApiServer:
    """Pods and nodes at a resourceVersion; ``fail_lists`` answers that many LISTs 500."""

    def __init__(self) -> None:
        self.pods: list[JSON] = []
        self.rv = "1"
        self.fail_lists = 0
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.released = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if query.get("watch") == "true":
                    with server._lock:
                        server.requests.append((url.path, query))
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.flush()
                    server.released.wait(TIMEOUT)
                    return
                status, body = server.answer(url.path, query)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True

    def answer(self, path: str, query: dict[str, str]) -> tuple[int, bytes]:
        with self._lock:
            # Recorded with the data it is answered from.
            self.requests.append((path, query))
            if self.fail_lists:
                self.fail_lists -= 1
                return 500, b'{"kind":"Status","code":500,"message":"etcd is down"}'
            items = self.pods if path == PODS_PATH else []
            start = int(query.get("continue") or 0)
            limit = int(query.get("limit") or len(items) or 1)
            page = items[start : start + limit]
            more = start + limit < len(items)
            body = {
                "kind": "List",
                "metadata": {
                    "resourceVersion": self.rv,
                    **({"continue": str(start + limit)} if more else {}),
                },
                "items": page,
            }
        return 200, orjson.dumps(body)

    def lists(self, path: str) -> list[dict[str, str]]:
        with self._lock:
            return [q for p, q in self.requests if p == path and q.get("watch") != "true"]

    def watches(self, path: str) -> list[dict[str, str]]:
        with self._lock:
            return [q for p, q in self.requests if p == path and q.get("watch") == "true"]

    def kubeconfig(self, directory: Path) -> str:
        path = directory / "kubeconfig"
        port = self.http.server_address[1]
        path.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            f"clusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\n"
            "contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n"
            "users:\n- name: u\n  user:\n    token: t\n"
        )
        return str(path)


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    s = FakeApiServer()
    thread = threading.Thread(target=s.http.serve_forever, daemon=True)
    thread.start()
    try:
        yield s
    finally:
        s.released.set()
        s.http.shutdown()
        s.http.server_close()


class Collector:
    def __init__(self) -> None:
        self.events: list[Event[cpb.Pod]] = []

    def on_events(self, events: list[Event[cpb.Pod]]) -> None:
        self.events.extend(events)


@asynccontextmanager
async def pods_informer(
    kubeconfig: str, prefetch: ListPrefetch | None, collector: Collector
) -> AsyncIterator[Informer[cpb.Pod]]:
    api = KubeApi.from_kubeconfig(kubeconfig)
    informer: Informer[cpb.Pod] = Informer(
        api,
        PODS_PATH,
        name="pods",
        decode=pod_record,
        key_of=pod_key,
        on_events=collector.on_events,
        loop=asyncio.get_running_loop(),
        field_selector=POD_FIELD_SELECTOR,
        backoff_initial=0.01,
        prefetch=prefetch,
    )
    informer.start()
    try:
        yield informer
    finally:
        informer.stop()
        api.close()


async def until(cond: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def test_the_first_list_is_the_prefetched_one_and_the_watch_starts_from_its_version(
    server: FakeApiServer, tmp_path: Path
) -> None:
    """What the prefetch listed is what the informer delivers, even when the server
    has moved on since: the informer sends no LIST of its own, and its watch starts
    from the listed resourceVersion (Reflector.ListAndWatch), so the changes since
    come from the watch, as after any list."""
    server.pods = [pod("a", 5), pod("b", 6)]
    server.rv = "6"
    kubeconfig = server.kubeconfig(tmp_path)
    prefetch = ListPrefetch(kubeconfig)
    prefetch.start()
    await until(lambda: server.lists(PODS_PATH), "the prefetch's list")
    # The server moves on before the informer starts.
    server.pods = [pod("a", 5), pod("b", 6), pod("c", 9)]
    server.rv = "9"
    c = Collector()
    async with pods_informer(kubeconfig, prefetch, c) as informer:
        await until(
            lambda: informer.synced and server.watches(PODS_PATH), "the synced informer's watch"
        )
        assert [(e.type, e.key, e.resource_version) for e in c.events] == [
            (ADDED, "a", "5"),
            (ADDED, "b", "6"),
        ]
        assert server.lists(PODS_PATH) == [{"fieldSelector": POD_FIELD_SELECTOR, "limit": "500"}], (
            "the prefetch's LIST alone"
        )
        assert server.watches(PODS_PATH)[0]["resourceVersion"] == "6"
        assert informer.resource_version == "6"
        assert informer.synced
        assert (informer.stats.lists, informer.stats.errors) == (1, 0)


async def test_a_failed_prefetch_surfaces_as_the_first_lists_error_and_is_retried(
    server: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An error answer to the prefetched LIST is the informer's first list's error: logged,
    counted and retried with backoff, the retry a LIST of its own."""
    server.pods = [pod("a", 5)]
    server.rv = "5"
    server.fail_lists = 2  # the prefetch's nodes and pods LISTs
    kubeconfig = server.kubeconfig(tmp_path)
    prefetch = ListPrefetch(kubeconfig)
    prefetch.start()
    await until(
        lambda: len(server.lists(PODS_PATH)) + len(server.lists(NODES_PATH)) == 2, "the prefetch"
    )
    c = Collector()
    with caplog.at_level(logging.WARNING, logger="berth.shim.informer"):
        async with pods_informer(kubeconfig, prefetch, c) as informer:
            await until(
                lambda: informer.synced and server.watches(PODS_PATH), "the synced informer's watch"
            )
            assert [(e.type, e.key) for e in c.events] == [(ADDED, "a")]
            assert informer.stats.errors == 1
            assert len(server.lists(PODS_PATH)) == 2
            assert server.watches(PODS_PATH)[0]["resourceVersion"] == "5"
    assert any("500" in r.getMessage() and "retrying" in r.getMessage() for r in caplog.records)


async def test_a_list_longer_than_the_prefetch_goes_on_from_its_continue_token(
    server: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most ``max_pages`` pages are listed ahead; the informer asks for the rest
    with the last one's continue token, at the same resourceVersion."""
    monkeypatch.setattr("berth.kube.rest.LIST_PAGE", 2)
    server.pods = [pod(n, i) for i, n in enumerate("abcde", 1)]
    server.rv = "5"
    kubeconfig = server.kubeconfig(tmp_path)
    prefetch = ListPrefetch(kubeconfig, max_pages=1)
    prefetch.start()
    await until(lambda: server.lists(PODS_PATH), "the prefetch")
    c = Collector()
    async with pods_informer(kubeconfig, prefetch, c) as informer:
        await until(
            lambda: informer.synced and server.watches(PODS_PATH), "the synced informer's watch"
        )
        assert [e.key for e in c.events] == list("abcde")
        continues = [q.get("continue") for q in server.lists(PODS_PATH)]
        # The prefetch's page, then the informer's own pages from the token (and
        # maybe, at any time, the page the prefetch's list_pages asked for ahead).
        assert continues[0] is None
        assert sorted(str(c) for c in continues[1:]) in (["2", "4"], ["2", "2", "4"])
        assert informer.stats.lists == 1


async def test_a_prefetch_is_used_once_and_not_when_too_old(
    server: FakeApiServer, tmp_path: Path
) -> None:
    """A list taken by one informer is not taken again, and one older than MAX_AGE
    is not taken at all: the informer lists afresh, seeing the server's data now."""
    server.pods = [pod("a", 5)]
    server.rv = "5"
    kubeconfig = server.kubeconfig(tmp_path)
    prefetch = ListPrefetch(kubeconfig)
    prefetch.start()
    await until(lambda: server.lists(PODS_PATH), "the prefetch")
    params = {"fieldSelector": POD_FIELD_SELECTOR}
    assert prefetch.take(PODS_PATH, params) is not None
    assert prefetch.take(PODS_PATH, params) is None
    assert prefetch.take(PODS_PATH, {}) is None, "other selectors are another list"

    old = ListPrefetch(kubeconfig, max_age=0.0)
    old.start()
    await until(lambda: len(server.lists(PODS_PATH)) == 2, "the second prefetch")
    server.pods = [pod("a", 5), pod("b", 7)]
    server.rv = "7"
    c = Collector()
    async with pods_informer(kubeconfig, old, c) as informer:
        await until(
            lambda: informer.synced and server.watches(PODS_PATH), "the synced informer's watch"
        )
        assert [e.key for e in c.events] == ["a", "b"]
        assert server.watches(PODS_PATH)[0]["resourceVersion"] == "7"
        assert len(server.lists(PODS_PATH)) == 3


async def test_no_prefetch_without_a_readable_plain_kubeconfig(tmp_path: Path) -> None:
    """A kubeconfig the plain reader does not take (here: missing) sends nothing, and
    the informer lists as without a prefetch (its own KubeApi reports the problem)."""
    prefetch = ListPrefetch(str(tmp_path / "missing"))
    prefetch.start()
    assert (
        await asyncio.to_thread(prefetch.take, PODS_PATH, {"fieldSelector": POD_FIELD_SELECTOR})
        is None
    )


def test_start_for_shim_reads_the_kubeconfig_as_the_shim_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flag, else clientConnection.kubeconfig; nothing with delayCacheUntilActive
    (the informers wait for the lease) or a configuration that cannot be read."""
    started: list[str | None] = []
    monkeypatch.setattr(ListPrefetch, "start", lambda self: started.append(self.kubeconfig))
    config = tmp_path / "config.yaml"
    config.write_text("clientConnection:\n  kubeconfig: /from/config\n")
    assert start_for_shim("/from/flag", str(config)) is not None
    assert start_for_shim(None, str(config)) is not None
    assert start_for_shim(None, None) is not None
    assert started == ["/from/flag", "/from/config", None]
    config.write_text("delayCacheUntilActive: true\n")
    assert start_for_shim("/from/flag", str(config)) is None
    config.write_text("clientConnection: [unclosed\n")
    assert start_for_shim(None, str(config)) is None
    assert start_for_shim(None, str(tmp_path / "missing.yaml")) is None
    assert started == ["/from/flag", "/from/config", None]


def test_a_prefetch_is_used_only_with_the_kubeconfig_it_listed_with() -> None:
    """shim/app.py hands the informers a prefetch only if the kubeconfig it resolves
    (flag, clientConnection.kubeconfig, defaults) is the one the prefetch read."""
    prefetch = ListPrefetch("/a/kubeconfig")
    assert prefetch.for_kubeconfig("/a/kubeconfig") is prefetch
    assert prefetch.for_kubeconfig("/b/kubeconfig") is None
    assert prefetch.for_kubeconfig(None) is None
    assert ListPrefetch(None).for_kubeconfig(None) is not None
