"""TLS for the gRPC API: the server's certificate and key, and optionally a
CA whose client certificates the server requires (mTLS).

The files are read when the server starts (a bad file stops it with an error
naming the flag and the file) and checked again at every new TLS handshake:
when one of them changed (a Secret volume updated by the kubelet, cert-manager
renewing), the new certificate/key/CA is loaded and used for new connections;
connections already open keep their session. A changed set that does not load
(a key that does not match its certificate, a half-written file) is logged and
the previous set stays in use until the files are good again.

Also: which listen addresses are loopback-only (``berth serve --insecure-plaintext``
warns about any other).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

# cryptography is imported where a certificate or key file is read: a server
# or shim without TLS files never loads it (tests/unit/cli/test_startup.py).
if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

log = logging.getLogger(__name__)


class TLSFileError(ValueError):
    """A certificate, key or CA file that cannot be used; the message names
    the flag and the file."""


def read_pem_certificates(path: str | os.PathLike[str], flag: str) -> bytes:
    """The PEM bytes of ``path``, which must hold one or more X.509
    certificates."""
    from cryptography import x509

    data = _read(path, flag)
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise TLSFileError(
            f"{flag} {path}: not a PEM certificate file (want '-----BEGIN CERTIFICATE-----' "
            f"blocks): {exc}"
        ) from None
    if not certs:
        raise TLSFileError(f"{flag} {path}: holds no certificate")
    return data


def read_pem_key(path: str | os.PathLike[str], flag: str) -> tuple[bytes, PrivateKeyTypes]:
    """The PEM bytes of an unencrypted private key and the key itself."""
    from cryptography.hazmat.primitives import serialization

    data = _read(path, flag)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise TLSFileError(
            f"{flag} {path}: not an unencrypted PEM private key ('-----BEGIN ... PRIVATE "
            f"KEY-----'): {exc}"
        ) from None
    return data, key


def read_key_pair(
    cert_path: str | os.PathLike[str],
    key_path: str | os.PathLike[str],
    cert_flag: str,
    key_flag: str,
) -> tuple[bytes, bytes]:
    """(key PEM, certificate chain PEM), checked to belong together: the
    first certificate's public key is the key's."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    chain = read_pem_certificates(cert_path, cert_flag)
    key_pem, key = read_pem_key(key_path, key_flag)
    leaf = x509.load_pem_x509_certificates(chain)[0]
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if leaf.public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        raise TLSFileError(
            f"{key_flag} {key_path} is not the private key of the certificate in "
            f"{cert_flag} {cert_path}"
        )
    return key_pem, chain


def _read(path: str | os.PathLike[str], flag: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TLSFileError(f"{flag} {path}: cannot read: {exc.strerror or exc}") from None


@dataclass(frozen=True, slots=True)
class ServerTLS:
    """``berth serve --tls-cert --tls-key [--tls-client-ca]``."""

    cert: Path
    key: Path
    # Set: clients must present a certificate this CA (bundle) signed.
    client_ca: Path | None = None

    @property
    def mutual(self) -> bool:
        return self.client_ca is not None

    def load(self) -> grpc.ServerCertificateConfiguration:
        """The current files as a gRPC certificate configuration; TLSFileError
        names the flag and file at fault."""
        key, chain = read_key_pair(self.cert, self.key, "--tls-cert", "--tls-key")
        ca = (
            read_pem_certificates(self.client_ca, "--tls-client-ca")
            if self.client_ca is not None
            else None
        )
        return grpc.ssl_server_certificate_configuration([(key, chain)], root_certificates=ca)

    def credentials(self) -> grpc.ServerCredentials:
        """Server credentials that pick up changed files at the next handshake.
        Raises TLSFileError when the files do not load now."""
        reloader = _Reloader(self)
        return grpc.dynamic_ssl_server_credentials(
            reloader.initial,
            reloader.fetch,
            require_client_authentication=self.mutual,
        )


class _Reloader:
    """gRPC calls ``fetch`` before each handshake: None keeps the
    configuration in use, a configuration replaces it."""

    def __init__(self, tls: ServerTLS) -> None:
        self.tls = tls
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self.initial = tls.load()
        # A failed reload is logged once per change of the files, not per handshake.
        self._failed: object = None

    def _paths(self) -> list[Path]:
        return [p for p in (self.tls.cert, self.tls.key, self.tls.client_ca) if p is not None]

    def _stat(self) -> object:
        out: list[tuple[int, int, int] | None] = []
        for p in self._paths():
            try:
                st = p.stat()  # follows the symlinks a Secret volume swaps
            except OSError:
                out.append(None)
                continue
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(out)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        with self._lock:
            stamp = self._stat()
            if stamp == self._stamp:
                return None
            try:
                config = self.tls.load()
            except TLSFileError as exc:
                if stamp != self._failed:
                    log.warning("TLS files changed but do not load; keeping the previous: %s", exc)
                    self._failed = stamp
                return None
            self._stamp = stamp
            self._failed = None
        log.info(
            "TLS files changed: new connections use the certificate in %s%s",
            self.tls.cert,
            f" and client CA {self.tls.client_ca}" if self.tls.client_ca else "",
        )
        return config


def is_loopback_listen(listen: str) -> bool:
    """True when a ``--listen`` address (``host:port``, ``[v6]:port``,
    ``unix:path``) can only be reached from this host: a loopback IP,
    ``localhost``, or a Unix socket. ``0.0.0.0``, ``[::]``, ``:port``, other
    names and IPs are not."""
    if listen.startswith(("unix:", "unix-abstract:")):
        return True
    host = listen.rpartition(":")[0] if ":" in listen else listen
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = [
    "ServerTLS",
    "TLSFileError",
    "is_loopback_listen",
    "read_key_pair",
    "read_pem_certificates",
    "read_pem_key",
]
