"""Certificates Berth makes itself: a CA and the leaf certificates it signs.

Two users:

- ``berth certs`` makes the CA, the plugin servers' serving certificate and the
  shim's client certificate that the base deployment mounts (deploy/README.md).
- ``berth shim`` without ``--tls-cert-file`` serves its secure port with a
  self-signed pair made at start and kept in memory, as kube-scheduler does
  (cmd/kube-scheduler/app/options/options.go calls
  ``SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil,
  [127.0.0.1])``; k8s.io/client-go/util/cert/cert.go
  ``GenerateSelfSignedCertKeyWithFixtures`` makes a CA ``<host>-ca@<unix
  time>`` and a serving certificate ``<host>@<unix time>`` it signs, valid a
  year, the file holding the certificate then the CA).

ECDSA P-256 keys throughout (upstream's self-signed pair is RSA 2048): quick to
make and accepted by Go, OpenSSL and gRPC alike.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import time
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# What upstream's GenerateSelfSignedCertKeyWithFixtures gives its pair.
SELF_SIGNED_VALIDITY = dt.timedelta(days=365)
# Backdated a little against clock skew between hosts.
_BACKDATE = dt.timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class Issued:
    """A certificate and its key, PEM."""

    cert: bytes
    key: bytes


@dataclass(frozen=True, slots=True)
class Authority:
    """A CA that signs leaves (``issue``)."""

    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _key_pem(self.key)

    def issue(
        self,
        common_name: str,
        *,
        days: int,
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        organization: str | None = None,
    ) -> Issued:
        """A leaf signed by this CA: a serving certificate (serverAuth, SANs
        ``dns`` and ``ips``) when any name is given, else a client certificate
        (clientAuth; the subject's CN is the user, O the group, as Kubernetes'
        x509 authenticators read it)."""
        key = ec.generate_private_key(ec.SECP256R1())
        serving = bool(dns or ips)
        builder = (
            _builder(_name(common_name, organization), self.certificate.subject, key, days)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(ca=False), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [
                        ExtendedKeyUsageOID.SERVER_AUTH
                        if serving
                        else ExtendedKeyUsageOID.CLIENT_AUTH
                    ]
                ),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if serving:
            sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns]
            sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def new_authority(common_name: str, *, days: int) -> Authority:
    """A self-signed CA that signs leaves only (path length 0)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = _name(common_name)
    cert = (
        _builder(subject, subject, key, days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return Authority(cert, key)


def self_signed_serving(host: str = "localhost", ips: tuple[str, ...] = ("127.0.0.1",)) -> Issued:
    """Upstream's self-signed serving pair: a throw-away CA
    ``<host>-ca@<unix time>`` and a certificate ``<host>@<unix time>`` for
    ``host`` and ``ips`` it signs; ``cert`` holds the certificate then the CA.
    The CA's key is not kept."""
    stamp = int(time.time())
    days = SELF_SIGNED_VALIDITY.days
    ca = new_authority(f"{host}-ca@{stamp}", days=days)
    leaf = ca.issue(f"{host}@{stamp}", days=days, dns=(host,), ips=ips)
    return Issued(leaf.cert + ca.cert_pem, leaf.key)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, days: int
) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + dt.timedelta(days=days))
    )


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


__all__ = ["SELF_SIGNED_VALIDITY", "Authority", "Issued", "new_authority", "self_signed_serving"]
