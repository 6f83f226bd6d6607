"""A fault-injecting HTTPS proxy in front of the real kube-apiserver, for integration tests.

The shim talks to the proxy (a kubeconfig of its own, trusting the proxy's CA); the proxy
forwards every request to the API server with the cluster's admin credentials, streaming
watches as they come, and answers the requests a ``Fault`` matches in its own way:

- ``answer``: the fault's status, the request never reaches the API server (a 429 of
  API Priority and Fairness, a 503 of an overloaded server, a spurious 409);
- ``answer_after``: forwarded, and once the API server has done it, the fault's status
  replaces its answer (a 5xx after the write, or the 409 a repeated binding gets);
- ``drop_after``: forwarded, and once done the connection is closed without an answer,
  after ``delay`` seconds (a call that timed out although it was carried out);
- ``hold``: held until ``release()``, then forwarded (a slow write, a window for a test).

Only HTTP/1.1 is spoken, which is all the shim's clients use.
"""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Literal

import orjson
import urllib3
import yaml

from berth.dev.localcluster import Cluster
from berth.dev.localcluster.pki import write_pair
from berth.kube.config import load_configuration, tls_context
from berth.tls.pki import new_authority

Action = Literal["answer", "answer_after", "drop_after", "hold"]
# A binding of any pod: POST .../pods/<name>/binding.
BINDING = r"/api/v1/namespaces/[^/]+/pods/[^/]+/binding"


@dataclass
class Fault:
    """What to do with the next ``times`` requests whose method is ``method`` and whose
    path (without the query) matches ``path``."""

    method: str
    path: str
    action: Action
    status: int = 0
    times: int = 1
    delay: float = 0.0
    hits: list[str] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        self.released.set()

    def matches(self, method: str, path: str) -> bool:
        return (
            len(self.hits) < self.times
            and method == self.method
            and re.fullmatch(self.path, path) is not None
        )


def _status_body(status: int, message: str) -> bytes:
    reason = {409: "Conflict", 429: "TooManyRequests", 500: "InternalError"}.get(
        status, "ServiceUnavailable"
    )
    return orjson.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": status,
        }
    )


class FaultProxy:
    def __init__(self, cluster: Cluster, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        upstream = load_configuration(cluster.kubeconfig)
        self.upstream = upstream.host
        self._pool = urllib3.PoolManager(
            maxsize=128, ssl_context=tls_context(upstream), retries=False, timeout=None
        )
        authority = new_authority("berth-test-proxy-ca", days=1)
        self.ca = directory / "proxy-ca.crt"
        self.ca.write_bytes(authority.cert_pem)
        serving = write_pair(
            directory, "proxy", authority.issue("berth-test-proxy", days=1, ips=("127.0.0.1",))
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(serving.cert, serving.key)
        self.faults: list[Fault] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.kubeconfig = directory / "proxy.kubeconfig"
        self._write_kubeconfig(cluster.kubeconfig)

    def _write_kubeconfig(self, admin: Path) -> None:
        """The admin kubeconfig, but for the proxy's address and CA (the proxy does
        not ask for the client certificate; it uses the admin identity upstream)."""
        config = yaml.safe_load(admin.read_text())
        for entry in config["clusters"]:
            entry["cluster"] = {
                "server": f"https://127.0.0.1:{self.port}",
                "certificate-authority": str(self.ca),
            }
        self.kubeconfig.write_text(yaml.safe_dump(config))

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        for f in self.faults:
            f.release()
        self._server.shutdown()
        self._server.server_close()
        self._pool.clear()

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def take(self, method: str, path: str) -> Fault | None:
        """The first fault that applies to this request, counting the hit."""
        with self._lock:
            for f in self.faults:
                if f.matches(method, path):
                    f.hits.append(path)
                    return f
        return None


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        return None

    def do_GET(self) -> None:
        self._proxy()

    def do_POST(self) -> None:
        self._proxy()

    def do_PUT(self) -> None:
        self._proxy()

    def do_PATCH(self) -> None:
        self._proxy()

    def do_DELETE(self) -> None:
        self._proxy()

    def _proxy(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        path = self.path.split("?", 1)[0]
        fault = self.owner.take(self.command, path)
        if fault is not None and fault.action == "answer":
            self._answer(fault.status, _status_body(fault.status, "injected by the test proxy"))
            return
        if fault is not None and fault.action == "hold":
            fault.released.wait(60)
        headers = {
            k: v
            for k, v in self.headers.items()
            if k.lower() in ("content-type", "accept", "user-agent")
        }
        try:
            resp = self.owner._pool.request(
                self.command,
                self.owner.upstream + self.path,
                body=body,
                headers=headers,
                preload_content=False,
                decode_content=False,
            )
        except urllib3.exceptions.HTTPError as exc:
            self._answer(502, _status_body(503, f"upstream: {exc}"))
            return
        try:
            if fault is not None and fault.action in ("answer_after", "drop_after"):
                resp.read()
                if fault.action == "drop_after":
                    time.sleep(fault.delay)
                    # No answer: the client's read ends at the connection's end.
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self._answer(
                    fault.status,
                    _status_body(fault.status, "injected by the test proxy after the write"),
                )
                return
            self._relay(resp)
        finally:
            resp.release_conn()

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _relay(self, resp: urllib3.BaseHTTPResponse) -> None:
        self.send_response(resp.status)
        for k, v in resp.headers.items():
            if k.lower() in ("content-type", "content-encoding", "audit-id"):
                self.send_header(k, v)
        length = resp.headers.get("Content-Length")
        if length is not None:
            self.send_header("Content-Length", length)
            self.end_headers()
            self.wfile.write(resp.read())
            return
        # A watch, or any answer of unknown length: chunk by chunk as it comes.
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in _chunks(resp):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (urllib3.exceptions.HTTPError, OSError):
            self.close_connection = True


def _chunks(resp: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    while True:
        data = resp.read1(64 * 1024)
        if not data:
            return
        yield data


@contextmanager
def fault_proxy(cluster: Cluster, directory: Path) -> Iterator[FaultProxy]:
    proxy = FaultProxy(cluster, directory).start()
    try:
        yield proxy
    finally:
        proxy.stop()


__all__ = ["BINDING", "Fault", "FaultProxy", "fault_proxy"]
