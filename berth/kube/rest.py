"""Raw JSON requests against one API server (k8s.io/client-go/rest, as the shim needs it).

Configuration and authentication come from `berth.kube.config` (the ``kubernetes``
package's loaders, or Berth's reading of a plain kubeconfig). Requests do not go through the
package's generated API classes: they are sent through the urllib3 pool the package
configured, or one built as it builds it (TLS included), and their bodies
decoded with orjson, so no ``V1Pod`` model object is ever built: the model objects cost
milliseconds each, and the watch and list paths decode every object the cluster holds.

Calls are synchronous and thread-safe. Writes pass a token bucket with the configured
QPS and burst, like client-go's default rate limiter; with leader election, a write fence.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, urlencode

import orjson
import urllib3

from berth.kube import metrics
from berth.kube.config import (
    DEFAULT_HINT,
    PlainConfiguration,
    authorization,
    load_configuration,
    tls_context,
)
from berth.kube.errors import ApiError, WatchStalled
from berth.kube.flowcontrol import TokenBucket

JSON = dict[str, Any]

USER_AGENT = "berth-shim"


class WriteFence(Protocol):
    """What a write consults right before it is sent (``berth.shim.fence.LeaderFence``)."""

    def check(self, method: str, path: str) -> None:
        """Raises ApiError when the write may not be sent."""

    def in_flight(self, method: str, path: str) -> contextlib.AbstractAsyncContextManager[None]:
        """Around a write sent from the event loop, cancelled if the fence closes."""


# POSTs that only ask a question (TokenReview, SubjectAccessReview: nothing is stored),
# so a standby or a deposed leader may still send them.
UNFENCED_PREFIXES = ("/apis/authentication.k8s.io/", "/apis/authorization.k8s.io/")


def fenced_write(method: str, path: str) -> bool:
    """Does this request change the cluster, so that only the leader may send it?"""
    return method not in ("GET", "HEAD", "OPTIONS") and not path.startswith(UNFENCED_PREFIXES)


# Items per list page: client-go's pager default (tools/pager, defaultPageSize).
LIST_PAGE = 500


@dataclass(frozen=True, slots=True)
class ListResult:
    items: list[JSON]
    resource_version: str


def _plain_pool(cfg: PlainConfiguration) -> urllib3.PoolManager:
    """The pool the kubernetes package would build for ``cfg`` (kubernetes/client/rest.py
    ``RESTClientObject.__init__``; a plain configuration has no proxy, retries or socket
    options)."""
    kw: dict[str, Any] = {
        "cert_reqs": ssl.CERT_REQUIRED if cfg.verify_ssl else ssl.CERT_NONE,
        "ca_certs": cfg.ssl_ca_cert,
        "cert_file": cfg.cert_file,
        "key_file": cfg.key_file,
        "ca_cert_data": cfg.ca_cert_data,
        # Configuration's default pool size when none is given.
        "maxsize": cfg.connection_pool_maxsize or (os.cpu_count() or 1) * 5,
    }
    if cfg.tls_server_name:
        kw["server_hostname"] = cfg.tls_server_name
    return urllib3.PoolManager(**kw)


class KubeApi:
    """Raw JSON requests against one API server, thread-safe."""

    # With leader election, the leader's fence (berth.shim.fence): every write asks it right
    # before it is sent. None: writes are never refused.
    fence: WriteFence | None = None
    # The client TLS context the pool's connections use when this was built from a
    # configuration (``from_kubeconfig``), for other connections to the same server to
    # share: loading the CA and the client certificate is a few milliseconds of start-up.
    tls: ssl.SSLContext | None = None

    def __init__(
        self,
        host: str,
        pool: urllib3.PoolManager,
        auth_header: Any,
        *,
        qps: float = 50.0,
        burst: int = 100,
        timeout: float = 30.0,
        configuration: Any = None,
        user_agent: str = USER_AGENT,
    ) -> None:
        self.host = host.rstrip("/")
        # rest_client_* metrics' host label (berth/kube/metrics.py).
        self.metric_host = metrics.host_label(self.host)
        self.user_agent = user_agent
        self._pool = pool
        # A callable returning the Authorization header value (None: no token);
        # the kubernetes package refreshes rotating tokens inside it.
        self._auth_header = auth_header
        self._limiter = TokenBucket(qps, burst)
        self._timeout = timeout
        # The kubernetes.client.Configuration this came from (kept alive: it
        # owns temp files for inline certificates).
        self.configuration = configuration

    # -- construction ---------------------------------------------------------

    @classmethod
    def from_kubeconfig(
        cls,
        kubeconfig: str | Path | None = None,
        *,
        context: str | None = None,
        qps: float = 50.0,
        burst: int = 100,
        pool_size: int = 128,
        user_agent: str = USER_AGENT,
        hint: str = DEFAULT_HINT,
    ) -> KubeApi:
        """Configured like client-go (`berth.kube.config.load_configuration`): the given
        kubeconfig; else in-cluster (service account token, re-read as it rotates); else
        $KUBECONFIG or ~/.kube/config. Raises ``ConfigurationError`` naming the file and
        ending with ``hint``. ``qps <= 0``: writes are not rate-limited."""
        cfg = load_configuration(kubeconfig, context=context, pool_size=pool_size, hint=hint)
        owner: Any
        if isinstance(cfg, PlainConfiguration):
            pool = _plain_pool(cfg)
            owner = cfg
        else:
            from kubernetes import client as kclient

            api_client = kclient.ApiClient(cfg)
            pool = api_client.rest_client.pool_manager
            # The ApiClient owns the pool; keep it alive beside its configuration.
            owner = (cfg, api_client)
        if type(pool) is urllib3.PoolManager and cfg.cert_file and cfg.host.startswith("https:"):
            # urllib3 builds a context per connection, and OpenSSL completes its
            # client certificate with the CA (berth/kube/tlschain.py); this one, loaded
            # once, sends the certificate alone, as client-go does.
            kw = pool.connection_pool_kw
            tls = kw["ssl_context"] = tls_context(cfg)
            for loaded in ("ca_certs", "ca_cert_data", "cert_file", "key_file"):
                kw.pop(loaded, None)
        else:
            tls = None

        def auth_header() -> str | None:
            return authorization(cfg)

        api = cls(
            cfg.host,
            pool,
            auth_header,
            qps=qps,
            burst=burst,
            configuration=owner,
            user_agent=user_agent,
        )
        api.tls = tls
        return api

    def close(self) -> None:
        self._pool.clear()

    def __enter__(self) -> KubeApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests -------------------------------------------------------------

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        h = {"Accept": "application/json", "User-Agent": self.user_agent}
        token = self._auth_header()
        if token:
            h["Authorization"] = token
        if content_type:
            h["Content-Type"] = content_type
        return h

    def url(self, path: str, params: Mapping[str, Any] | None = None) -> str:
        query = ""
        if params:
            query = "?" + urlencode({k: v for k, v in params.items() if v is not None})
        return f"{self.host}{path}{query}"

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        limit: bool = True,
        timeout: float | None = None,
        fenced: bool = True,
    ) -> JSON:
        """One request; the decoded body (``{}`` when empty). Raises ApiError
        for an error status or an unreachable server (status 0). A write asks
        ``fence`` right before it is sent (``fenced=False``: the Lease's own
        writes) and is refused with its ApiError when the fence is closed."""
        start = time.perf_counter()
        if limit:
            self._limiter.wait()
        data = None if body is None else orjson.dumps(body)
        fence = self.fence
        if fenced and fence is not None and fenced_write(method, path):
            fence.check(method, path)
        try:
            resp = self._pool.request(
                method,
                self.url(path, params),
                body=data,
                headers=self._headers(content_type if data is not None else None),
                preload_content=True,
                retries=False,
                timeout=urllib3.Timeout(connect=5.0, read=timeout or self._timeout),
            )
        except urllib3.exceptions.HTTPError as exc:
            metrics.request_done(method, self.metric_host, 0, time.perf_counter() - start)
            raise ApiError(method, path, 0, str(exc).encode()) from exc
        metrics.request_done(method, self.metric_host, resp.status, time.perf_counter() - start)
        if resp.status >= 400:
            raise ApiError(method, path, resp.status, resp.data)
        if not resp.data:
            return {}
        out: JSON = orjson.loads(resp.data)
        return out

    def wait_for_token(self) -> None:
        """Waits for the rate limiter, for a caller that checks something just
        before its request (then sent with ``limit=False``)."""
        self._limiter.wait()

    def reserve_token(self) -> float:
        """Takes a token of the rate limiter without waiting; returns how long
        the caller must wait before its request (berth.kube.asynchttp)."""
        return self._limiter.reserve()

    def auth_header(self) -> str | None:
        """The Authorization header value (None: none), current."""
        token: str | None = self._auth_header()
        return token

    @property
    def timeout(self) -> float:
        return self._timeout

    def get(self, path: str, **params: Any) -> JSON:
        return self.request("GET", path, params=params, limit=False)

    def list(self, path: str, **params: Any) -> ListResult:
        """A whole collection, paged (``limit``/``continue``) as client-go's
        pager does, at one resourceVersion."""
        items: list[JSON] = []
        rv = ""
        for page in self.list_pages(path, **params):
            items.extend(page.items)
            rv = page.resource_version or rv
        return ListResult(items, rv)

    def list_pages(self, path: str, **params: Any) -> Iterator[ListResult]:
        """The same collection a page (``limit`` 500) at a time; the last page's
        resourceVersion is the list's. A caller that turns each page into
        records of its own holds one page of decoded JSON at a time instead
        of the whole collection (50,000 pods are ~1 GiB of Python dicts).

        The next page is asked for as soon as this one's continue token is
        read, on a helper thread, and held as the bytes the API server sent
        (a few MB a page) until the caller is done with this one: the API
        server prepares it on another core while the caller decodes, instead
        of each page's round trip waiting behind the last page's decoding."""
        query: dict[str, Any] = {**params, "limit": LIST_PAGE}
        raw = self.get_bytes(path, **query)
        prefetch: ThreadPoolExecutor | None = None
        try:
            while True:
                page = orjson.loads(raw) if raw else {}
                del raw
                meta = page.get("metadata") or {}
                cont = meta.get("continue") or None
                ahead: Future[bytes] | None = None
                if cont:
                    if prefetch is None:
                        prefetch = ThreadPoolExecutor(1, thread_name_prefix="berth-list-page")
                    ahead = prefetch.submit(self.get_bytes, path, **{**query, "continue": cont})
                result = ListResult(page.get("items") or [], str(meta.get("resourceVersion") or ""))
                del page, meta
                yield result
                del result
                if ahead is None:
                    return
                raw = ahead.result()
        finally:
            if prefetch is not None:
                # A caller that stops early (an error, a closed generator) does not
                # wait for a page it will not read.
                prefetch.shutdown(wait=False, cancel_futures=True)

    def create(self, path: str, body: JSON) -> JSON:
        return self.request("POST", path, body=body)

    def update(self, path: str, body: JSON) -> JSON:
        return self.request("PUT", path, body=body)

    def delete(self, path: str, *, uid: str = "", **params: Any) -> JSON:
        """DELETE; with ``uid``, only the object with that uid (a DeleteOptions
        precondition: another object of the same name is answered 409). ``params``:
        the query (``gracePeriodSeconds``, ``labelSelector`` for a collection)."""
        body = None
        if uid:
            body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}}
        return self.request("DELETE", path, params=params, body=body)

    def strategic_patch(self, path: str, patch: JSON) -> JSON:
        return self.request(
            "PATCH", path, body=patch, content_type="application/strategic-merge-patch+json"
        )

    def merge_patch(self, path: str, patch: JSON) -> JSON:
        return self.request("PATCH", path, body=patch, content_type="application/merge-patch+json")

    def probe(self, path: str = "/readyz", timeout: float = 5.0) -> None:
        """GET ``path`` (a health endpoint answering text, such as the API server's
        ``/readyz``, open to every client by the system:public-info-viewer role);
        raises ApiError unless it answers 200 within ``timeout`` seconds."""
        resp = self._get(path, None, urllib3.Timeout(connect=timeout, read=timeout))
        if resp.status != 200:
            raise ApiError("GET", path, resp.status, resp.data)

    def get_bytes(self, path: str, *, timeout: float | None = None, **params: Any) -> bytes:
        """A GET whose answer is not JSON (``/metrics``, ``/debug/pprof/profile``), with
        its own read timeout for answers that take long on purpose."""
        resp = self._get(path, params, urllib3.Timeout(connect=5.0, read=timeout or self._timeout))
        if resp.status >= 400:
            raise ApiError("GET", path, resp.status, resp.data)
        return bytes(resp.data)

    def _get(
        self, path: str, params: Mapping[str, Any] | None, timeout: urllib3.Timeout
    ) -> urllib3.BaseHTTPResponse:
        """A GET read whole, not rate-limited, counted in rest_client_*;
        ApiError (status 0) when no answer came."""
        start = time.perf_counter()
        try:
            resp = self._pool.request(
                "GET",
                self.url(path, params),
                headers=self._headers(),
                preload_content=True,
                retries=False,
                timeout=timeout,
            )
        except urllib3.exceptions.HTTPError as exc:
            metrics.request_done("GET", self.metric_host, 0, time.perf_counter() - start)
            raise ApiError("GET", path, 0, str(exc).encode()) from exc
        metrics.request_done("GET", self.metric_host, resp.status, time.perf_counter() - start)
        return resp

    def watch_lines(
        self,
        path: str,
        *,
        timeout_seconds: int,
        stop: threading.Event | None = None,
        idle_timeout: float | None = None,
        bookmarks: bool = True,
        **params: Any,
    ) -> Iterator[bytes]:
        """Raw watch event lines (one JSON object each) until the server ends
        the stream after ``timeout_seconds``. Raises ApiError for an error
        status or a broken connection, and WatchStalled when no byte has come
        for ``idle_timeout`` seconds (default: the stream's whole length plus
        15 s): a connection that died without a word (a dropped NAT entry, a
        partition) is noticed then. The API server ends a live watch at
        ``timeout_seconds`` even when it has nothing to say, so an idle timeout
        longer than that is never reached by a live one. ``bookmarks``: ask for
        BOOKMARK events (allowWatchBookmarks)."""
        query = {**params, "watch": "true", "timeoutSeconds": str(timeout_seconds)}
        if bookmarks:
            query["allowWatchBookmarks"] = "true"
        idle = idle_timeout if idle_timeout is not None else timeout_seconds + 15.0
        start = time.perf_counter()
        try:
            resp = self._pool.request(
                "GET",
                self.url(path, query),
                headers=self._headers(),
                preload_content=False,
                retries=False,
                timeout=urllib3.Timeout(connect=5.0, read=idle),
            )
        except urllib3.exceptions.ReadTimeoutError as exc:
            metrics.request_done("GET", self.metric_host, 0, time.perf_counter() - start)
            raise WatchStalled(path, idle) from exc
        except urllib3.exceptions.HTTPError as exc:
            metrics.request_done("GET", self.metric_host, 0, time.perf_counter() - start)
            raise ApiError("WATCH", path, 0, str(exc).encode()) from exc
        # A watch counts once its answer's headers are in (client-go's
        # Request.Watch: a GET whose result is its response's status).
        metrics.request_done("GET", self.metric_host, resp.status, time.perf_counter() - start)
        try:
            if resp.status >= 400:
                raise ApiError("WATCH", path, resp.status, resp.read())
            buffer = b""
            for chunk in resp.stream(256 * 1024, decode_content=True):
                if stop is not None and stop.is_set():
                    return
                buffer += chunk
                if b"\n" not in buffer:
                    continue
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line:
                        yield line
        except urllib3.exceptions.ReadTimeoutError as exc:
            raise WatchStalled(path, idle) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ApiError("WATCH", path, 0, str(exc).encode()) from exc
        finally:
            # A half-read watch stream cannot go back to the pool.
            resp.close()
            resp.release_conn()

    def watch(
        self, path: str, *, timeout_seconds: int = 60, bookmarks: bool = False, **params: Any
    ) -> Iterator[JSON]:
        """`watch_lines` decoded: watch events (``{"type": ..., "object": {...}}``) until
        the server ends the stream. Pass ``resourceVersion`` from a list to see only what
        came after it; BOOKMARK events only with ``bookmarks``."""
        for line in self.watch_lines(
            path, timeout_seconds=timeout_seconds, bookmarks=bookmarks, **params
        ):
            event: JSON = orjson.loads(line)
            yield event


def segment(value: str) -> str:
    """A path segment (namespace, name) escaped for a URL."""
    return quote(value, safe="")


def pod_path(namespace: str, name: str, sub: str = "") -> str:
    p = f"/api/v1/namespaces/{segment(namespace)}/pods/{segment(name)}"
    return f"{p}/{sub}" if sub else p


__all__ = [
    "JSON",
    "USER_AGENT",
    "KubeApi",
    "ListResult",
    "WriteFence",
    "fenced_write",
    "pod_path",
    "segment",
]
