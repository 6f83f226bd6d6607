"""berth.kube.rest.KubeApi against a small HTTP server on a local socket: the query each
call sends, decoded watch events, raw answers, and errors as ApiError."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest
import urllib3

from berth.kube.errors import ApiError
from berth.kube.rest import KubeApi

pytestmark = pytest.mark.timeout(30)


class Recorder(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str, dict[str, list[str]], bytes]]] = []

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        query = parse_qs(url.query)
        self.seen.append((self.command, url.path, query, body))
        if url.path == "/metrics":
            payload = b"# plain text\nmetric 1\n"
        elif url.path == "/missing":
            self.send_response(404)
            payload = orjson.dumps({"kind": "Status", "reason": "NotFound", "message": "gone"})
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        elif url.path == "/api/v1/pods" and "limit" in query:
            # Three pages of one pod each; the third page's token is refused (410).
            page = int(query.get("continue", ["0"])[0])
            if query.get("fail") == ["true"] and page == 2:
                self.send_response(410)
                payload = orjson.dumps({"kind": "Status", "reason": "Expired", "message": "old"})
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            if query.get("slow") == ["true"] and page == 1:
                time.sleep(2)
            meta = {"resourceVersion": str(10 + page)}
            if page < 2:
                meta["continue"] = str(page + 1)
            payload = orjson.dumps(
                {"metadata": meta, "items": [{"metadata": {"name": f"p{page}"}}]}
            )
        elif "watch" in query:
            events = [{"type": "ADDED", "object": {"metadata": {"name": "a"}}}]
            if query.get("allowWatchBookmarks") == ["true"]:
                events.append({"type": "BOOKMARK", "object": {"metadata": {}}})
            payload = b"".join(orjson.dumps(e) + b"\n" for e in events)
        else:
            payload = b"{}"
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_DELETE = _answer


@pytest.fixture
def api() -> Iterator[KubeApi]:
    Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with KubeApi(
            f"http://127.0.0.1:{server.server_address[1]}", urllib3.PoolManager(), lambda: None
        ) as client:
            yield client
    finally:
        server.shutdown()
        server.server_close()


def test_delete_sends_its_query_and_a_uid_precondition(api: KubeApi) -> None:
    api.delete("/api/v1/namespaces/ns/pods", gracePeriodSeconds=0, labelSelector="a=b")
    api.delete("/api/v1/namespaces/ns/pods/p", uid="u-1")
    (m1, p1, q1, b1), (m2, p2, q2, b2) = Recorder.seen
    assert (m1, p1, q1, b1) == (
        "DELETE",
        "/api/v1/namespaces/ns/pods",
        {"gracePeriodSeconds": ["0"], "labelSelector": ["a=b"]},
        b"",
    )
    assert (m2, p2, q2) == ("DELETE", "/api/v1/namespaces/ns/pods/p", {})
    assert orjson.loads(b2)["preconditions"] == {"uid": "u-1"}


@pytest.mark.parametrize("bookmarks", [False, True], ids=["plain", "bookmarks"])
def test_watch_decodes_events_and_asks_for_bookmarks_only_when_told(
    api: KubeApi, bookmarks: bool
) -> None:
    events = list(
        api.watch("/api/v1/pods", timeout_seconds=5, resourceVersion="7", bookmarks=bookmarks)
    )
    assert [e["type"] for e in events] == (["ADDED", "BOOKMARK"] if bookmarks else ["ADDED"])
    query = Recorder.seen[0][2]
    assert query["resourceVersion"] == ["7"] and query["timeoutSeconds"] == ["5"]
    assert ("allowWatchBookmarks" in query) is bookmarks


def test_get_bytes_answers_raw_and_errors_are_api_errors(api: KubeApi) -> None:
    assert api.get_bytes("/metrics") == b"# plain text\nmetric 1\n"
    with pytest.raises(ApiError) as err:
        api.get_bytes("/missing")
    assert err.value.not_found and err.value.message == "gone"


def _pod_lists() -> list[dict[str, list[str]]]:
    return [q for m, p, q, _ in list(Recorder.seen) if p == "/api/v1/pods"]


def test_list_pages_asks_for_the_next_page_while_the_caller_holds_this_one(
    api: KubeApi,
) -> None:
    """client-go's pager (tools/pager ListPager, 500 items a page), with the next page
    fetched while the caller decodes the current one."""
    pages = api.list_pages("/api/v1/pods")
    first = next(pages)
    assert [i["metadata"]["name"] for i in first.items] == ["p0"]
    # The caller has not asked for page 2, and its request is already sent.
    deadline = time.monotonic() + 10
    while len(_pod_lists()) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [q.get("continue") for q in _pod_lists()] == [None, ["1"]]
    rest = list(pages)
    assert [i["metadata"]["name"] for p in rest for i in p.items] == ["p1", "p2"]
    assert rest[-1].resource_version == "12"
    assert all(q["limit"] == ["500"] for q in _pod_lists())
    assert api.list("/api/v1/pods").resource_version == "12"


def test_list_pages_raises_the_error_of_a_page_fetched_ahead(api: KubeApi) -> None:
    pages = api.list_pages("/api/v1/pods", fail="true")
    assert [next(pages).resource_version, next(pages).resource_version] == ["10", "11"]
    with pytest.raises(ApiError) as err:
        next(pages)
    assert err.value.gone


def test_a_list_abandoned_early_does_not_wait_for_the_page_ahead(api: KubeApi) -> None:
    pages = api.list_pages("/api/v1/pods", slow="true")
    assert isinstance(pages, Generator)
    next(pages)
    start = time.monotonic()
    pages.close()  # page 2 takes the server 2 s to answer
    assert time.monotonic() - start < 1.0


def test_an_unreachable_server_is_status_zero() -> None:
    api = KubeApi("http://127.0.0.1:9", urllib3.PoolManager(), lambda: None)
    with pytest.raises(ApiError) as err:
        api.get("/api/v1/nodes")
    assert err.value.status == 0 and err.value.temporary


def _requests(code: str, method: str, host: str) -> float:
    from prometheus_client import REGISTRY

    value = REGISTRY.get_sample_value(
        "rest_client_requests_total", {"code": code, "method": method, "host": host}
    )
    return value or 0.0


def _latencies(verb: str, host: str) -> float:
    from prometheus_client import REGISTRY

    value = REGISTRY.get_sample_value(
        "rest_client_request_duration_seconds_count", {"verb": verb, "host": host}
    )
    return value or 0.0


def test_every_request_counts_in_rest_client_metrics_by_code_method_and_host(
    api: KubeApi,
) -> None:
    """client-go rest/request.go: rest_client_requests_total{code,method,host} with the
    answer's status (updateRequestResultMetric), rest_client_request_duration_seconds
    {verb,host} per request (Request.request); host is the server's host:port."""
    host = api.host.removeprefix("http://")
    assert api.metric_host == host
    ok, missing, deletes, gets = (
        _requests("200", "GET", host),
        _requests("404", "GET", host),
        _requests("200", "DELETE", host),
        _latencies("GET", host),
    )
    api.get("/api/v1/namespaces")
    with pytest.raises(ApiError):
        api.get("/missing")
    api.delete("/api/v1/namespaces/ns/pods/p")
    api.get_bytes("/metrics")
    list(api.watch("/api/v1/pods"))
    assert _requests("200", "GET", host) == ok + 3
    assert _requests("404", "GET", host) == missing + 1
    assert _requests("200", "DELETE", host) == deletes + 1
    assert _latencies("GET", host) == gets + 4


def test_a_request_that_got_no_answer_counts_as_error() -> None:
    """sanitize: no response, so code is "<error>"."""
    api = KubeApi("http://127.0.0.1:9", urllib3.PoolManager(), lambda: None)
    before = _requests("<error>", "POST", "127.0.0.1:9")
    with pytest.raises(ApiError):
        api.create("/api/v1/namespaces", {})
    assert _requests("<error>", "POST", "127.0.0.1:9") == before + 1


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://10.0.0.1:6443", "10.0.0.1:6443"),
        ("https://api.example.com", "api.example.com"),
        ("https://[::1]:6443/", "[::1]:6443"),
        ("https://user:secret@api:443", "api:443"),
        ("", "none"),
    ],
)
def test_host_label_is_the_servers_host_and_port(url: str, host: str) -> None:
    from berth.kube.metrics import host_label

    assert host_label(url) == host
