"""Throw-away PKI for the TLS tests: a CA, and leaf certificates it signs
(server: SANs localhost and 127.0.0.1, serverAuth; client: clientAuth), made with
berth.tls.pki and written into a directory as the local control plane writes its own
(berth/dev/localcluster/pki.py)."""

from __future__ import annotations

from pathlib import Path

from berth.dev.localcluster.pki import KeyPair, write_pair
from berth.tls.pki import new_authority

Leaf = KeyPair

VALIDITY_DAYS = 365


class CA:
    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        self.authority = new_authority(name, days=VALIDITY_DAYS)
        self.certificate = self.authority.certificate
        self.subject = self.certificate.subject
        self.path = directory / f"{name}-ca.crt"
        self.path.write_bytes(self.authority.cert_pem)

    def issue(
        self,
        name: str,
        *,
        server: bool,
        dns: tuple[str, ...] = ("localhost",),
        ips: tuple[str, ...] = ("127.0.0.1",),
    ) -> Leaf:
        """``<name>.crt`` and ``.key``: a serving certificate for ``dns`` and ``ips`` when
        ``server``, else a client certificate."""
        if server and not (dns or ips):
            raise ValueError(f"server certificate {name}: no DNS name or IP address")
        issued = self.authority.issue(
            name, days=VALIDITY_DAYS, dns=dns if server else (), ips=ips if server else ()
        )
        return write_pair(self.directory, name, issued)
