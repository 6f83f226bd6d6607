"""The transport of the shim's secure port (``--metrics-listen``, 10259 in the
deployment): HTTPS, as kube-scheduler serves /healthz, /readyz, /livez and
/metrics (k8s.io/apiserver pkg/server/options/serving.go
``SecureServingOptions``), with the callers authenticated and authorized by
the API server (shim/delegation.py).

The serving certificate is ``--tls-cert-file``/``--tls-private-key-file``; with
neither, a self-signed pair for ``localhost`` and 127.0.0.1 made at start and
kept in memory, as kube-scheduler does (options.go ``Config`` calls
``MaybeDefaultWithSelfSignedCerts``; see berth/tls/pki.py). ``--client-ca-file``
also accepts client certificates that CA signed (the request is then
authenticated by its certificate). TLS 1.2 at least.

Each connection's handshake runs on that connection's own thread with a
deadline, so a client that connects and sends nothing holds one thread for at
most ``HANDSHAKE_TIMEOUT`` and never the accepting thread.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from berth.shim.delegation import (
    DEFAULT_ALWAYS_ALLOW_PATHS,
    DEFAULT_CACHE_TTL,
    DelegatedAuth,
    Refusal,
    ReviewApi,
)

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class ServingCertificate:
    """``--tls-cert-file``, ``--tls-private-key-file`` and ``--client-ca-file``."""

    cert_file: str | None = None
    key_file: str | None = None
    client_ca_file: str | None = None

    def context(self) -> ssl.SSLContext:
        """The server's TLS context; ValueError naming the flag and file when
        one does not load."""
        from berth.tls.serving import read_key_pair, read_pem_certificates

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.cert_file is not None or self.key_file is not None:
            if self.cert_file is None or self.key_file is None:
                raise ValueError("--tls-cert-file and --tls-private-key-file go together")
            key_pem, chain = read_key_pair(
                self.cert_file, self.key_file, "--tls-cert-file", "--tls-private-key-file"
            )
        else:
            from berth.tls.pki import self_signed_serving

            pair = self_signed_serving()
            key_pem, chain = pair.key, pair.cert
        _load_chain(ctx, chain, key_pem)
        if self.client_ca_file is not None:
            ca = read_pem_certificates(self.client_ca_file, "--client-ca-file")
            ctx.load_verify_locations(cadata=ca.decode())
            # Optional: a caller without a certificate authenticates by token.
            ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx

    @property
    def self_signed(self) -> bool:
        return self.cert_file is None


def _load_chain(ctx: ssl.SSLContext, chain: bytes, key: bytes) -> None:
    """``load_cert_chain`` reads files only: the PEMs go through a private
    temporary directory that is removed at once."""
    with tempfile.TemporaryDirectory(prefix="berth-serving-") as d:
        cert_path, key_path = Path(d) / "tls.crt", Path(d) / "tls.key"
        cert_path.write_bytes(chain)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        ctx.load_cert_chain(cert_path, key_path)


class _TLSServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: Callable[..., BaseHTTPRequestHandler],
        context: ssl.SSLContext,
    ) -> None:
        self.context = context
        super().__init__(address, handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        # No I/O here: the handshake runs on the connection's thread.
        tls = self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return tls, addr

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(HANDSHAKE_TIMEOUT)
        try:
            request.do_handshake()
        except (OSError, ValueError) as exc:
            log.debug("secure port: TLS handshake with %s failed: %s", client_address, exc)
            return
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug(
            "secure port: connection from %s ended on an error", client_address, exc_info=True
        )


class SecureServing:
    """HTTPS and delegated authn/authz for shim.health.HealthServer."""

    scheme = "https"

    def __init__(self, certificate: ServingCertificate, auth: DelegatedAuth) -> None:
        self.certificate = certificate
        self.context = certificate.context()
        self.auth = auth

    def server(
        self, address: tuple[str, int], handler: Callable[..., BaseHTTPRequestHandler]
    ) -> ThreadingHTTPServer:
        return _TLSServer(address, handler, self.context)

    def refuse(self, handler: BaseHTTPRequestHandler, path: str) -> Refusal | None:
        """None to answer the request, else what to answer instead."""
        peer = None
        if self.certificate.client_ca_file is not None:
            conn = handler.request
            if isinstance(conn, ssl.SSLSocket):
                peer = conn.getpeercert()
        return self.auth.refuse(handler.command, path, handler.headers.get("Authorization"), peer)


@dataclass(frozen=True, slots=True)
class SecureServingOptions:
    """``berth shim``'s flags for the secure port."""

    certificate: ServingCertificate = ServingCertificate()
    always_allow_paths: tuple[str, ...] = DEFAULT_ALWAYS_ALLOW_PATHS
    token_ttl: float = DEFAULT_CACHE_TTL
    allowed_ttl: float = DEFAULT_CACHE_TTL
    denied_ttl: float = DEFAULT_CACHE_TTL

    def build(self, api: ReviewApi) -> SecureServing:
        """The secure port's TLS and authn/authz, reviews sent through ``api``.
        ValueError (a bad certificate file) names the flag and file."""
        auth = DelegatedAuth(
            api,
            always_allow_paths=self.always_allow_paths,
            token_ttl=self.token_ttl,
            allowed_ttl=self.allowed_ttl,
            denied_ttl=self.denied_ttl,
        )
        return SecureServing(self.certificate, auth)


__all__ = ["HANDSHAKE_TIMEOUT", "SecureServing", "SecureServingOptions", "ServingCertificate"]
