"""The secure port's transport (shim/serving.py) with shim.health.HealthServer: HTTPS with
a self-signed certificate when none is given (as kube-scheduler's
MaybeDefaultWithSelfSignedCerts), or the given one; plain HTTP refused on it; a silent
client does not hold up others; refusals answered before the endpoint runs. Authorization
decisions come from a fake here; tests/integration/test_shim_secure_port.py has the API
server's."""

from __future__ import annotations

import asyncio
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from berth.shim import health as health_module
from berth.shim.delegation import DelegatedAuth
from berth.shim.health import HealthServer
from berth.shim.healthchecks import HealthChecks
from berth.shim.serving import (
    DebugAnswer,
    DebugRequest,
    DebugRoutes,
    SecureServing,
    SecureServingOptions,
    ServingCertificate,
)
from tests.contract.tlscerts import CA
from tests.unit.shim.test_delegation import FakeReviews


def _reviews() -> FakeReviews:
    api = FakeReviews()
    api.users["good"] = {"username": "scraper", "groups": ["system:authenticated"]}
    api.grants.add(("scraper", "get", "/metrics"))
    return api


def _serve(certificate: ServingCertificate) -> Iterator[tuple[HealthServer, FakeReviews]]:
    api = _reviews()
    secure = SecureServing(certificate, DelegatedAuth(api))
    health = HealthServer("127.0.0.1:0", HealthChecks(lambda: (True, "ok: scheduling")), secure)
    health.start()
    try:
        yield health, api
    finally:
        health.stop()


@pytest.fixture
def self_signed() -> Iterator[tuple[HealthServer, FakeReviews]]:
    yield from _serve(ServingCertificate())


def _get(
    port: int, path: str, token: str | None = None, context: ssl.SSLContext | None = None
) -> tuple[int, bytes]:
    if context is None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_self_signed_certificate_like_upstreams(
    self_signed: tuple[HealthServer, FakeReviews],
) -> None:
    """client-go util/cert GenerateSelfSignedCertKeyWithFixtures: a serving certificate
    "localhost@<time>" for localhost and 127.0.0.1, signed by a CA "localhost-ca@<time>"."""
    health, _ = self_signed
    assert health.scheme == "https"
    pem = ssl.get_server_certificate(("127.0.0.1", health.port))
    cert = x509.load_pem_x509_certificate(pem.encode())
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    issuer = cert.issuer.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert str(cn).startswith("localhost@") and str(issuer).startswith("localhost-ca@")
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


def test_health_is_open_and_metrics_need_an_authorized_token(
    self_signed: tuple[HealthServer, FakeReviews],
) -> None:
    health, api = self_signed
    for path in ("/healthz", "/livez"):
        assert _get(health.port, path) == (200, b"ok")
    assert _get(health.port, "/readyz") == (200, b"ok: scheduling")
    assert _get(health.port, "/metrics")[0] == 403
    assert _get(health.port, "/metrics", "wrong")[0] == 401
    status, body = _get(health.port, "/metrics", "good")
    assert status == 200 and b"# HELP" in body
    # Health paths asked nothing: SAR anonymous, TokenReview wrong, TokenReview and SAR good.
    assert len(api.calls) == 4


def test_plain_http_on_the_secure_port_gets_no_answer(
    self_signed: tuple[HealthServer, FakeReviews],
) -> None:
    health, _ = self_signed
    conn = http.client.HTTPConnection("127.0.0.1", health.port, timeout=10)
    with pytest.raises((http.client.HTTPException, OSError)):
        conn.request("GET", "/healthz")
        conn.getresponse()
    conn.close()


def test_a_silent_client_does_not_hold_up_the_others(
    self_signed: tuple[HealthServer, FakeReviews],
) -> None:
    """The TLS handshake runs on the connection's thread, not the accepting one."""
    health, _ = self_signed
    with socket.create_connection(("127.0.0.1", health.port)):
        assert _get(health.port, "/healthz") == (200, b"ok")


def _cut_off(sock: socket.socket | ssl.SSLSocket, head: bytes, cap: float = 10.0) -> bool:
    """Sends ``head``, then one more header byte every 50 ms: True once the server has
    closed the connection, False if it still listens after ``cap`` seconds."""
    sock.sendall(head)
    sock.settimeout(0.05)
    end = time.monotonic() + cap
    while time.monotonic() < end:
        try:
            if sock.recv(1024) == b"":
                return True
        except TimeoutError:
            pass
        except (ssl.SSLError, OSError):
            return True
        try:
            sock.send(b"x")
        except (ssl.SSLError, OSError):
            return True
    return False


@pytest.mark.parametrize("secure", [True, False], ids=["https", "insecure-metrics"])
def test_a_request_dribbled_a_byte_at_a_time_is_cut_off(
    monkeypatch: pytest.MonkeyPatch, secure: bool
) -> None:
    """secure_serving.go ReadHeaderTimeout (32 s): the request head must arrive whole
    within the bound. Each byte here comes well within the socket's own timeout, so
    without a bound on the whole head the connection (and its thread) is held as long as
    the client keeps dribbling; shortened to 0.5 s for the test."""
    monkeypatch.setattr(health_module, "REQUEST_HEAD_TIMEOUT", 0.5, raising=False)
    checks = HealthChecks(lambda: (True, "ok: scheduling"))
    context = None
    if secure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    server = HealthServer(
        "127.0.0.1:0",
        checks,
        SecureServing(ServingCertificate(), DelegatedAuth(_reviews())) if secure else None,
    )
    server.start()
    try:
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        sock = context.wrap_socket(raw) if context is not None else raw
        with sock:
            assert _cut_off(sock, b"GET /healthz HTTP/1.1\r\nX-Slow: ")
        # Others are served meanwhile and after.
        if secure:
            assert _get(server.port, "/healthz") == (200, b"ok")
    finally:
        server.stop()


def test_a_given_certificate_and_client_certificates(tmp_path: Path) -> None:
    ca = CA(tmp_path, "serving")
    leaf = ca.issue("shim", server=True)
    clients = CA(tmp_path, "clients")
    client = clients.issue("scraper", server=False)
    certificate = ServingCertificate(str(leaf.cert), str(leaf.key), str(clients.path))
    for health, api in _serve(certificate):
        context = ssl.create_default_context(cafile=str(ca.path))
        status, _ = _get(health.port, "/metrics", context=context)
        assert status == 403  # verified server, anonymous caller
        context.load_cert_chain(str(client.cert), str(client.key))
        status, body = _get(health.port, "/metrics", context=context)
        assert status == 200 and b"# HELP" in body
        # The certificate's CN was the user; no TokenReview was needed.
        assert [p for p, _ in api.calls].count("/apis/authentication.k8s.io/v1/tokenreviews") == 0


def test_bad_files_name_the_flag() -> None:
    with pytest.raises(ValueError, match="--tls-cert-file /nonexistent: cannot read"):
        ServingCertificate("/nonexistent", "/nonexistent").context()
    with pytest.raises(ValueError, match="go together"):
        ServingCertificate("/a", None).context()


def test_secure_serving_flags() -> None:
    from berth.cli import build_parser
    from berth.shim.cli import secure_serving_from_args

    parser = build_parser()

    def options(*flags: str) -> SecureServingOptions | None:
        return secure_serving_from_args(parser.parse_args(["shim", *flags]))

    default = options()
    assert default is not None
    assert default.always_allow_paths == ("/healthz", "/readyz", "/livez")
    assert default.token_ttl == default.allowed_ttl == default.denied_ttl == 10.0
    ttl = options("--authorization-webhook-cache-authorized-ttl", "5m")
    assert ttl is not None and ttl.allowed_ttl == 300.0
    assert options("--insecure-metrics") is None
    for flags, wanted in [
        (["--insecure-metrics", "--tls-cert-file", "c"], "drop --tls-cert-file"),
        (["--tls-cert-file", "c"], "go together"),
        (["--authorization-always-allow-paths", "healthz"], "must start with /"),
    ]:
        with pytest.raises(ValueError, match=wanted):
            options(*flags)
    with pytest.raises(SystemExit):
        parser.parse_args(["shim", "--authentication-token-webhook-cache-ttl", "soon"])


# The debug route registry (shim/serving.py DebugRoutes): routes behind the same
# authentication and authorization as /metrics, as kube-scheduler's handler chain guards
# /configz and /debug/pprof (cmd/kube-scheduler/app/server.go buildHandlerChain).


@pytest.fixture
def loop_thread() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def _serve_routes(routes: DebugRoutes) -> Iterator[tuple[HealthServer, FakeReviews]]:
    api = _reviews()
    api.grants.add(("scraper", "get", "/debug/echo"))
    secure = SecureServing(ServingCertificate(), DelegatedAuth(api))
    checks = HealthChecks(lambda: (True, "ok: scheduling"))
    health = HealthServer("127.0.0.1:0", checks, secure, routes)
    health.start()
    try:
        yield health, api
    finally:
        health.stop()


def test_a_debug_route_is_refused_without_credentials_and_answered_with_them(
    loop_thread: asyncio.AbstractEventLoop,
) -> None:
    routes = DebugRoutes(loop_thread)
    ran_on: list[asyncio.AbstractEventLoop] = []

    def echo(req: DebugRequest) -> DebugAnswer:
        ran_on.append(asyncio.get_running_loop())
        return DebugAnswer.text(f"pod={req.arg('pod')}")

    routes.register("/debug/echo", echo)
    for health, _ in _serve_routes(routes):
        assert _get(health.port, "/debug/echo?pod=a/b")[0] == 403  # anonymous
        assert _get(health.port, "/debug/echo?pod=a/b", "wrong")[0] == 401
        assert _get(health.port, "/debug/echo?pod=a/b", "good") == (200, b"pod=a/b")
        assert ran_on == [loop_thread]
        # Authorized for /metrics and /debug/echo only: another path is the API server's 403.
        routes.register("/debug/other", echo)
        assert _get(health.port, "/debug/other", "good")[0] == 403
        # Unknown paths: authorized first (403), so nothing is told about the routes.
        assert _get(health.port, "/nothing", "good")[0] == 403


def test_debug_routes_may_be_async_and_are_cut_off_at_their_timeout(
    loop_thread: asyncio.AbstractEventLoop,
) -> None:
    routes = DebugRoutes(loop_thread)
    cancelled = threading.Event()

    async def slow(_req: DebugRequest) -> DebugAnswer:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return DebugAnswer.text("late")

    async def quick(_req: DebugRequest) -> DebugAnswer:
        await asyncio.sleep(0)
        return DebugAnswer.json(b"{}")

    def broken(_req: DebugRequest) -> DebugAnswer:
        raise RuntimeError("bug")

    routes.register("/debug/slow", slow, timeout=0.2)
    routes.register("/debug/quick", quick)
    routes.register("/debug/broken", broken)
    assert routes.serve(DebugRequest("/debug/quick", {})) == DebugAnswer(
        200, b"{}", "application/json"
    )
    answer = routes.serve(DebugRequest("/debug/slow", {}))
    assert answer is not None and answer.code == 503
    assert cancelled.wait(5)
    answer = routes.serve(DebugRequest("/debug/broken", {}))
    assert answer is not None and answer.code == 500
    assert routes.serve(DebugRequest("/debug/none", {})) is None


def test_off_loop_routes_run_on_the_request_thread() -> None:
    routes = DebugRoutes()  # no loop at all
    routes.register("/debug/here", lambda _r: DebugAnswer.text("here"), on_loop=False)
    routes.register("/debug/loop", lambda _r: DebugAnswer.text("loop"))
    assert routes.serve(DebugRequest("/debug/here", {})) == DebugAnswer.text("here")
    answer = routes.serve(DebugRequest("/debug/loop", {}))
    assert answer is not None and answer.code == 503


@pytest.mark.parametrize(
    "path", ["/metrics", "/healthz", "debug/x", "/debug/x?y=1", "/debug/twice"], ids=str
)
def test_registering_a_bad_or_taken_path_is_refused(path: str) -> None:
    routes = DebugRoutes()
    routes.register("/debug/twice", lambda _r: DebugAnswer.text(""))
    with pytest.raises(ValueError, match="debug route"):
        routes.register(path, lambda _r: DebugAnswer.text(""))


def test_insecure_port_serves_routes_and_lists_them_on_404() -> None:
    routes = DebugRoutes()
    routes.register("/debug/here", lambda _r: DebugAnswer.text("here"), on_loop=False)
    health = HealthServer("127.0.0.1:0", HealthChecks(lambda: (True, "ok")), None, routes)
    health.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", health.port, timeout=10)
        conn.request("GET", "/debug/here")
        assert conn.getresponse().read() == b"here"
        conn.request("GET", "/nope")
        resp = conn.getresponse()
        assert resp.status == 404 and b"/debug/here" in resp.read()
        conn.request("GET", "/debug/here?" + "&".join(f"a{i}=1" for i in range(100)))
        assert conn.getresponse().status == 400
        conn.close()
    finally:
        health.stop()
