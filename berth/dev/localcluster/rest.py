"""A small, fast Kubernetes REST client for tests and benchmarks.

Plain dicts in and out (orjson), one pooled HTTPS connection per worker thread (urllib3), no
model objects: creating thousands of nodes and pods costs what the API server costs, not what
the client's object mapping costs. Configured from a kubeconfig (client certificates or a
bearer token).
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import orjson
import urllib3
import yaml

from berth.dev.localcluster.errors import LocalClusterError

JSON = dict[str, Any]


class ApiError(LocalClusterError):
    """The API server answered with an error status."""

    def __init__(self, method: str, path: str, status: int, body: bytes) -> None:
        self.status = status
        self.reason = ""
        message = body.decode(errors="replace")[:500]
        try:
            parsed = orjson.loads(body)
            if isinstance(parsed, dict):
                self.reason = str(parsed.get("reason", ""))
                message = str(parsed.get("message", message))
        except orjson.JSONDecodeError:
            pass
        self.message = message
        super().__init__(f"{method} {path} -> HTTP {status} {self.reason}: {message}")


@dataclass(frozen=True)
class KubeconfigAuth:
    server: str
    ca_pem: bytes | None
    cert_pem: bytes | None
    key_pem: bytes | None
    token: str | None
    insecure: bool


def _data_or_file(entry: Mapping[str, Any], key: str, base: Path) -> bytes | None:
    if entry.get(f"{key}-data"):
        return base64.b64decode(entry[f"{key}-data"])
    if entry.get(key):
        return (base / str(entry[key])).read_bytes()
    return None


def load_kubeconfig(path: Path, context: str | None = None) -> KubeconfigAuth:
    """The server and credentials of ``context`` (default: current-context) in ``path``."""
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise LocalClusterError(f"cannot read kubeconfig {path}: {err}") from err
    if not isinstance(config, dict):
        raise LocalClusterError(f"kubeconfig {path} is not a YAML mapping")
    name = context or config.get("current-context")

    def find(section: str, wanted: str | None) -> dict[str, Any]:
        for item in config.get(section) or []:
            if item.get("name") == wanted:
                return dict(item.get(section[:-1]) or {})
        raise LocalClusterError(f"kubeconfig {path}: no {section[:-1]} named {wanted!r}")

    ctx = find("contexts", name)
    cluster = find("clusters", ctx.get("cluster"))
    user = find("users", ctx.get("user")) if ctx.get("user") else {}
    base = path.parent
    token = user.get("token")
    if user.get("tokenFile"):
        token = (base / str(user["tokenFile"])).read_text().strip()
    return KubeconfigAuth(
        server=str(cluster["server"]).rstrip("/"),
        ca_pem=_data_or_file(cluster, "certificate-authority", base),
        cert_pem=_data_or_file(user, "client-certificate", base),
        key_pem=_data_or_file(user, "client-key", base),
        token=str(token) if token else None,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
    )


def ssl_context(auth: KubeconfigAuth) -> ssl.SSLContext:
    ctx = ssl.create_default_context(
        cadata=auth.ca_pem.decode() if auth.ca_pem else None,
    )
    if auth.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if auth.cert_pem and auth.key_pem:
        # load_cert_chain only reads files: write them to a private temp dir for a moment.
        with tempfile.TemporaryDirectory(prefix="berth-kube-") as tmp:
            cert, key = Path(tmp, "client.crt"), Path(tmp, "client.key")
            cert.write_bytes(auth.cert_pem)
            fd = os.open(key, os.O_WRONLY | os.O_CREAT, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(auth.key_pem)
            ctx.load_cert_chain(cert, key)
    return ctx


class KubeClient:
    """Thread-safe; ``maxsize`` bounds the pooled connections (one per concurrent worker)."""

    def __init__(self, auth: KubeconfigAuth, *, maxsize: int = 32, timeout: float = 30.0) -> None:
        self.server = auth.server
        headers = {"Accept": "application/json", "User-Agent": "berth-localcluster"}
        if auth.token:
            headers["Authorization"] = f"Bearer {auth.token}"
        self._headers = headers
        self._timeout = timeout
        self._pool = urllib3.PoolManager(
            maxsize=maxsize,
            block=True,
            ssl_context=ssl_context(auth),
            retries=False,
            timeout=urllib3.Timeout(connect=5.0, read=timeout),
        )

    @classmethod
    def from_kubeconfig(cls, path: Path | str, **kwargs: Any) -> KubeClient:
        return cls(load_kubeconfig(Path(path)), **kwargs)

    def close(self) -> None:
        self._pool.clear()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _url(self, path: str, params: Mapping[str, Any] | None) -> str:
        query = (
            f"?{urlencode({k: v for k, v in params.items() if v is not None})}" if params else ""
        )
        return f"{self.server}{path}{query}"

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JSON:
        headers = dict(self._headers)
        data = None
        if body is not None:
            data = orjson.dumps(body)
            headers["Content-Type"] = content_type
        resp = self._pool.request(
            method, self._url(path, params), body=data, headers=headers, preload_content=True
        )
        if resp.status >= 400:
            raise ApiError(method, path, resp.status, resp.data)
        if not resp.data:
            return {}
        result: JSON = orjson.loads(resp.data)
        return result

    def get(self, path: str, **params: Any) -> JSON:
        return self.request("GET", path, params=params)

    def get_bytes(self, path: str, *, timeout: float | None = None, **params: Any) -> bytes:
        """A GET whose answer is not JSON (``/debug/pprof/profile``, ``/metrics``), with
        its own read timeout for answers that take long on purpose."""
        resp = self._pool.request(
            "GET",
            self._url(path, params),
            headers=self._headers,
            preload_content=True,
            timeout=urllib3.Timeout(connect=5.0, read=timeout or self._timeout),
        )
        if resp.status >= 400:
            raise ApiError("GET", path, resp.status, resp.data)
        return bytes(resp.data)

    def create(self, path: str, body: JSON) -> JSON:
        return self.request("POST", path, body=body)

    def delete(self, path: str, **params: Any) -> JSON:
        return self.request("DELETE", path, params=params)

    def merge_patch(self, path: str, patch: JSON) -> JSON:
        return self.request("PATCH", path, body=patch, content_type="application/merge-patch+json")

    def watch(self, path: str, *, timeout_seconds: int = 60, **params: Any) -> Iterator[JSON]:
        """Yield watch events ({"type": ..., "object": {...}}) until the server ends the stream.

        Pass ``resourceVersion`` from a list to see only what came after it.
        """
        query = {**params, "watch": "1", "timeoutSeconds": str(timeout_seconds)}
        resp = self._pool.request(
            "GET",
            self._url(path, query),
            headers=self._headers,
            preload_content=False,
            timeout=urllib3.Timeout(connect=5.0, read=timeout_seconds + 10.0),
        )
        try:
            if resp.status >= 400:
                raise ApiError("WATCH", path, resp.status, resp.read())
            buffer = b""
            for chunk in resp.stream(64 * 1024, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        event: JSON = orjson.loads(line)
                        yield event
        finally:
            # A half-read watch stream cannot go back to the pool: close its connection.
            resp.close()
            resp.release_conn()


def path_segment(value: str) -> str:
    return quote(value, safe="")
