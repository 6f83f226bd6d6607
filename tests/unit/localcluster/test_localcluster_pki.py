"""Generated certificates chain to the CA and carry the identities the API server expects."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from berth.dev.localcluster import pki
from berth.kube.config import authorization, load_configuration, tls_context


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> pki.Pki:
    return pki.generate_pki(tmp_path_factory.mktemp("pki"))


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _names(cert: x509.Certificate, oid: x509.ObjectIdentifier) -> list[str]:
    return [str(a.value) for a in cert.subject.get_attributes_for_oid(oid)]


@pytest.mark.parametrize("which", ["apiserver", "admin", "scheduler"])
def test_leaf_certificates_are_signed_by_the_ca(certs: pki.Pki, which: str) -> None:
    ca = _load(certs.ca.cert)
    leaf = _load(getattr(certs, which).cert)
    leaf.verify_directly_issued_by(ca)


def test_admin_is_in_system_masters(certs: pki.Pki) -> None:
    admin = _load(certs.admin.cert)
    assert _names(admin, NameOID.ORGANIZATION_NAME) == ["system:masters"]
    usage = admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_scheduler_identity_is_system_kube_scheduler(certs: pki.Pki) -> None:
    assert _names(_load(certs.scheduler.cert), NameOID.COMMON_NAME) == ["system:kube-scheduler"]


def test_serving_certificate_covers_loopback_and_service_names(certs: pki.Pki) -> None:
    cert = _load(certs.apiserver.cert)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)
    assert "kubernetes.default.svc" in san.get_values_for_type(x509.DNSName)
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in list(usage)


def test_private_keys_are_owner_only(certs: pki.Pki) -> None:
    for key in (certs.ca.key, certs.admin.key, certs.service_account_key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_service_account_key_pair_matches(certs: pki.Pki) -> None:
    from cryptography.hazmat.primitives import serialization

    private = serialization.load_pem_private_key(certs.service_account_key.read_bytes(), None)
    public = serialization.load_pem_public_key(certs.service_account_pub.read_bytes())
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert private.public_key() == public


def test_kubeconfig_round_trips_and_yields_a_client_tls_context(
    certs: pki.Pki, tmp_path: Path
) -> None:
    path = pki.write_kubeconfig(
        tmp_path / "kubeconfig",
        server="https://127.0.0.1:6443",
        ca=certs.ca.cert,
        client=certs.admin,
        user=pki.ADMIN_USER,
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    cfg = load_configuration(path)
    assert cfg.host == "https://127.0.0.1:6443"
    assert Path(cfg.ssl_ca_cert).read_bytes() == certs.ca.cert.read_bytes()
    assert Path(cfg.cert_file).read_bytes() == certs.admin.cert.read_bytes()
    assert Path(cfg.key_file).read_bytes() == certs.admin.key.read_bytes()
    assert authorization(cfg) is None
    tls_context(cfg)  # loads the CA and the client key pair without error
