"""berth.kube.config: where API access comes from, in client-go's order (an explicit
kubeconfig; the in-cluster service account; $KUBECONFIG or ~/.kube/config), through the
``kubernetes`` package's loaders, and what a user is told when none of them works."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes.config import incluster_config

from berth.dev.localcluster import pki
from berth.kube.config import ConfigurationError, authorization, load_configuration, tls_context
from berth.kube.rest import KubeApi


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> pki.Pki:
    return pki.generate_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def no_service_account(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)


def token_kubeconfig(path: Path, server: str, token: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_kubeconfig_gives_the_server_ca_and_client_certificate(
    certs: pki.Pki, tmp_path: Path
) -> None:
    path = pki.write_kubeconfig(
        tmp_path / "kubeconfig",
        server="https://127.0.0.1:6443",
        ca=certs.ca.cert,
        client=certs.admin,
        user=pki.ADMIN_USER,
    )
    cfg = load_configuration(path)
    assert cfg.host == "https://127.0.0.1:6443"
    assert Path(cfg.ssl_ca_cert).read_bytes() == certs.ca.cert.read_bytes()
    assert Path(cfg.cert_file).read_bytes() == certs.admin.cert.read_bytes()
    assert Path(cfg.key_file).read_bytes() == certs.admin.key.read_bytes()
    assert authorization(cfg) is None
    tls_context(cfg)  # loads the CA and the client key pair without error


def test_a_token_user_gets_a_bearer_authorization(tmp_path: Path) -> None:
    path = token_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:8080", "s3cret")
    cfg = load_configuration(path)
    assert cfg.host == "http://127.0.0.1:8080"
    assert authorization(cfg) == "Bearer s3cret"
    api = KubeApi.from_kubeconfig(path)
    assert api.host == "http://127.0.0.1:8080"
    assert api.auth_header() == "Bearer s3cret"


def test_kubeconfig_env_is_read_when_no_file_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_service_account: None
) -> None:
    path = token_kubeconfig(tmp_path / "from-env", "http://127.0.0.1:9999", "t")
    monkeypatch.setenv("KUBECONFIG", str(path))
    assert load_configuration().host == "http://127.0.0.1:9999"


def test_the_service_account_comes_before_kubeconfig_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, certs: pki.Pki
) -> None:
    token = tmp_path / "token"
    token.write_text("from-the-pod")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(certs.ca.cert))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    other = token_kubeconfig(tmp_path / "from-env", "http://127.0.0.1:9999", "t")
    monkeypatch.setenv("KUBECONFIG", str(other))
    cfg = load_configuration()
    assert cfg.host == "https://10.0.0.1:443"
    assert str(authorization(cfg)).lower() == "bearer from-the-pod"  # the package writes "bearer"


@pytest.mark.parametrize(
    "content",
    [None, "not: [a, kubeconfig", "apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n"],
    ids=["missing", "not-yaml", "no-such-context"],
)
def test_an_unusable_kubeconfig_is_named_with_what_to_do(
    tmp_path: Path, content: str | None
) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigurationError) as err:
        KubeApi.from_kubeconfig(path, hint="pass --kubeconfig FILE")
    message = str(err.value)
    assert message.startswith(f"cannot configure API access from {path}: ")
    assert message.endswith("; pass --kubeconfig FILE")


def test_nothing_to_configure_from_names_every_place_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_service_account: None
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(ConfigurationError, match=r"in-cluster config, \$KUBECONFIG or ~/.kube"):
        load_configuration()
