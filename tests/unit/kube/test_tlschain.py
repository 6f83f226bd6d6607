"""berth.kube.tlschain: what a client context sends as its certificate chain.

``openssl s_server -msg`` prints the handshake as the server receives it;
over TLS 1.2 the client's Certificate message is in the clear, so the test
counts the certificates in it (RFC 5246 7.4.2: a 3-byte list length, then
each certificate as a 3-byte length and its DER bytes).
"""

from __future__ import annotations

import re
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from berth.dev.localcluster.pki import Pki, generate_pki
from berth.kube.tlschain import send_own_certificate_only

if TYPE_CHECKING:
    from berth.kube.rest import KubeApi


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return generate_pki(tmp_path_factory.mktemp("pki"))


def _client(pki: Pki) -> ssl.SSLContext:
    """A context as the shim's binding pool builds one: the CA to verify the
    server, a client certificate whose file holds the certificate alone."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(pki.ca.cert)
    ctx.load_cert_chain(pki.scheduler.cert, pki.scheduler.key)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _certificates_sent(
    pki: Pki, ctx: ssl.SSLContext | Callable[[int], None], tmp_path: Path
) -> int:
    """The certificates the client sent to a TLS server on a free port: ``ctx``
    connects with that context, or is itself what connects to the port."""
    openssl = shutil.which("openssl")
    assert openssl, "the openssl command is needed (Debian: apt-get install openssl)"
    port = _free_port()
    log = tmp_path / f"s_server-{port}.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                openssl,
                "s_server",
                "-accept",
                f"127.0.0.1:{port}",
                "-cert",
                str(pki.apiserver.cert),
                "-key",
                str(pki.apiserver.key),
                "-CAfile",
                str(pki.ca.cert),
                "-Verify",
                "2",
                "-tls1_2",
                "-msg",
                "-naccept",
                "1",
            ],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 10
            while b"ACCEPT" not in log.read_bytes():
                assert server.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            if isinstance(ctx, ssl.SSLContext):
                with ctx.wrap_socket(
                    socket.create_connection(("127.0.0.1", port), timeout=10)
                ) as s:
                    s.sendall(b"hello\n")
            else:
                ctx(port)
            server.wait(10)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    text = log.read_text()
    m = re.search(
        r"<<< TLS 1\.2, Handshake \[length [0-9a-f]+\], Certificate\n((?:\s+[0-9a-f ]+\n)+)", text
    )
    assert m, text
    data = bytes.fromhex("".join(m.group(1).split()))
    assert data[0] == 11  # HandshakeType certificate
    body = data[4:]
    total = int.from_bytes(body[:3], "big")
    at, count = 3, 0
    while at < 3 + total:
        at += 3 + int.from_bytes(body[at : at + 3], "big")
        count += 1
    return count


def test_openssl_sends_the_ca_with_the_certificate_unless_told_not_to(
    pki: Pki, tmp_path: Path
) -> None:
    """The behaviour the module exists for: with the CA in the trust store,
    OpenSSL completes the client's chain with it."""
    assert _certificates_sent(pki, _client(pki), tmp_path) == 2


def test_the_client_certificate_goes_alone(pki: Pki, tmp_path: Path) -> None:
    ctx = _client(pki)
    options = ctx.options
    assert send_own_certificate_only(ctx) is True
    assert ctx.options == options  # the pointer check flips an option and restores it
    assert _certificates_sent(pki, ctx, tmp_path) == 1


def test_it_refuses_what_is_not_an_ssl_context_layout_it_knows(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    import berth.kube.tlschain as tlschain

    monkeypatch.setattr(tlschain, "_known_layout", lambda: False)
    assert send_own_certificate_only(_client(pki)) is False


def test_the_shims_binding_and_event_pool_sends_the_certificate_alone(
    pki: Pki, tmp_path: Path
) -> None:
    """AsyncApi (bindings and events, one request per pod each) is built from the
    kubeconfig's client certificate without the CA beside it."""
    import urllib3
    from kubernetes import client as kclient

    from berth.kube.asynchttp import AsyncApi
    from berth.kube.rest import KubeApi

    cfg = kclient.Configuration()
    cfg.host = "https://127.0.0.1:6443"
    cfg.ssl_ca_cert = str(pki.ca.cert)
    cfg.cert_file = str(pki.scheduler.cert)
    cfg.key_file = str(pki.scheduler.key)
    api = AsyncApi.from_kubeapi(
        KubeApi(cfg.host, urllib3.PoolManager(), lambda: None, configuration=(cfg, None))
    )
    assert api is not None and api._pool._ssl is not None
    ctx = api._pool._ssl
    ctx.check_hostname = False  # s_server's certificate names the API server's addresses
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    assert _certificates_sent(pki, ctx, tmp_path) == 1


def test_the_shims_kubeapi_pool_sends_the_certificate_alone(pki: Pki, tmp_path: Path) -> None:
    """KubeApi's urllib3 pool (watches, lists, the writes off the hot path, bind-only's
    bindings) gets one context for its connections, loaded once from the kubeconfig,
    that sends the client certificate alone; urllib3's own would send the CA too."""
    import urllib3

    api = _scheduler_api(pki, tmp_path)
    kw = api._pool.connection_pool_kw
    assert isinstance(kw.get("ssl_context"), ssl.SSLContext)
    assert not {"cert_file", "key_file", "ca_certs", "ca_cert_data"} & set(kw)
    kw["ssl_context"].maximum_version = ssl.TLSVersion.TLSv1_2

    def connect(port: int) -> None:
        # A TLS handshake as the pool makes one for a request (hostname checked).
        conn = api._pool.connection_from_url(f"https://127.0.0.1:{port}")._new_conn()
        assert isinstance(conn, urllib3.connection.HTTPSConnection)
        conn.connect()
        conn.sock.sendall(b"hello\n")
        conn.close()

    assert _certificates_sent(pki, connect, tmp_path) == 1
    api.close()


def test_the_write_pool_shares_the_kubeapi_pools_context(pki: Pki, tmp_path: Path) -> None:
    """Built from a KubeApi made from a kubeconfig, AsyncApi's connections use the very
    context KubeApi's pool loaded (the CA and the key pair are loaded once per process)."""
    from berth.kube.asynchttp import AsyncApi

    api = _scheduler_api(pki, tmp_path)
    assert api.tls is not None
    assert api._pool.connection_pool_kw["ssl_context"] is api.tls
    writes = AsyncApi.from_kubeapi(api)
    assert writes is not None and writes._pool._ssl is api.tls
    api.close()


def _scheduler_api(pki: Pki, tmp_path: Path) -> KubeApi:
    """KubeApi from a kubeconfig with the scheduler's client certificate."""
    from berth.dev.localcluster.pki import write_kubeconfig
    from berth.kube.rest import KubeApi

    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig",
        server="https://127.0.0.1:6443",
        ca=pki.ca.cert,
        client=pki.scheduler,
        user="system:kube-scheduler",
    )
    return KubeApi.from_kubeconfig(str(kubeconfig))
