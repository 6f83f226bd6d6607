"""Throw-away PKI for the TLS tests: a CA, and leaf certificates it signs
(server: SANs localhost and 127.0.0.1, serverAuth; client: clientAuth), written into a
directory with the local control plane's certificate helpers (berth/dev/localcluster/pki.py)."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization

from berth.dev.localcluster.pki import KeyPair, certificate_name, issue_certificate, new_ca

Leaf = KeyPair


class CA:
    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        self.certificate, self.key = new_ca(name)
        self.subject = self.certificate.subject
        self.path = directory / f"{name}-ca.crt"
        self.path.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

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
        return issue_certificate(
            self.directory,
            name,
            self.certificate,
            self.key,
            certificate_name(name),
            server_names=dns if server else (),
            server_ips=ips if server else (),
        )
