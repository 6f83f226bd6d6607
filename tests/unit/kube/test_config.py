"""berth.kube.config: where API access comes from, in client-go's order (an explicit
kubeconfig; the in-cluster service account; $KUBECONFIG or ~/.kube/config), through the
``kubernetes`` package's loaders or, for a plain kubeconfig, Berth's own reading of it (the
same attributes and pool as the package's), and what a user is told when none works."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.config import incluster_config

from berth.dev.localcluster import pki
from berth.kube import config as kube_config
from berth.kube.config import (
    ConfigurationError,
    PlainConfiguration,
    authorization,
    load_configuration,
    load_plain_kubeconfig,
    tls_context,
)
from berth.kube.rest import KubeApi, _plain_pool


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
    service_account(monkeypatch, token, certs.ca.cert, "10.0.0.1")
    other = token_kubeconfig(tmp_path / "from-env", "http://127.0.0.1:9999", "t")
    monkeypatch.setenv("KUBECONFIG", str(other))
    cfg = load_configuration()
    assert cfg.host == "https://10.0.0.1:443"
    assert str(authorization(cfg)).lower() == "bearer from-the-pod"  # the package writes "bearer"
    # An empty token: the package's loader refuses it too, and $KUBECONFIG is read.
    token.write_text("")
    assert load_configuration().host == "http://127.0.0.1:9999"


def service_account(monkeypatch: pytest.MonkeyPatch, token: Path, ca: Path, host: str) -> None:
    """The pod's service account environment and files, for Berth's reading and the
    package's loader alike."""
    for proxy in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setattr(kube_config, "SERVICE_TOKEN_FILE", str(token))
    monkeypatch.setattr(kube_config, "SERVICE_CA_FILE", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")


@pytest.mark.parametrize("host", ["10.0.0.1", "fd00::1"])
def test_the_service_account_reads_as_the_package_reads_it(
    host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, certs: pki.Pki
) -> None:
    from kubernetes import client as kclient
    from kubernetes import config as kconfig

    token = tmp_path / "token"
    token.write_text("first")
    service_account(monkeypatch, token, certs.ca.cert, host)
    cfg = load_configuration(pool_size=7)
    assert isinstance(cfg, PlainConfiguration)
    want = kclient.Configuration()
    kconfig.load_incluster_config(client_configuration=want)  # type: ignore[no-untyped-call]
    for attr in ("host", "ssl_ca_cert", "cert_file", "key_file", "verify_ssl", "proxy"):
        assert getattr(cfg, attr) == getattr(want, attr), attr
    assert authorization(cfg) == authorization(want) == "bearer first"
    # The token rotates: read again once TOKEN_REFRESH has passed, not before.
    token.write_text("second")
    assert authorization(cfg) == "bearer first"
    cfg.token_read_at -= kube_config.TOKEN_REFRESH
    assert authorization(cfg) == "bearer second"


def test_a_service_account_without_its_files_is_left_to_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, certs: pki.Pki
) -> None:
    token = tmp_path / "token"
    service_account(monkeypatch, token, certs.ca.cert, "10.0.0.1")
    assert kube_config.load_plain_incluster(None) is None  # no token file
    token.write_text("t")
    assert isinstance(kube_config.load_plain_incluster(None), PlainConfiguration)
    monkeypatch.setattr(kube_config, "SERVICE_CA_FILE", str(tmp_path / "absent"))
    assert kube_config.load_plain_incluster(None) is None


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


# -- a plain kubeconfig, read without the package ---------------------------------------


def package_configuration(path: Path, context: str | None = None) -> Any:
    """What the kubernetes package's loader makes of ``path``."""
    from kubernetes import client as kclient
    from kubernetes import config as kconfig

    cfg = kclient.Configuration()
    cfg.connection_pool_maxsize = 7
    kconfig.load_kube_config(config_file=str(path), context=context, client_configuration=cfg)  # type: ignore[no-untyped-call]
    return cfg


def _content(name: str | None) -> bytes | None:
    return None if name is None else Path(name).read_bytes()


def plain_kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "other", "cluster": {"server": "https://elsewhere:1"}},
            {"name": "c", "cluster": cluster},
        ],
        "users": [{"name": "u", "user": user}],
        "contexts": [
            {"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "ns"}},
            {"name": "y", "context": {"cluster": "other", "user": "u"}},
        ],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


Section = Callable[[pki.Pki], dict[str, Any]]

# name: (the cluster section, the user section), from the test certificates.
PLAIN_CASES: dict[str, tuple[Section, Section]] = {
    "files-relative": (
        lambda c: {"server": "https://127.0.0.1:6443", "certificate-authority": "pki/ca.crt"},
        lambda c: {"client-certificate": "pki/admin.crt", "client-key": "pki/admin.key"},
    ),
    "data-inline": (
        lambda c: {
            "server": "https://127.0.0.1:6443/",
            "certificate-authority-data": _b64(c.ca.cert),
        },
        lambda c: {
            "client-certificate-data": _b64(c.admin.cert),
            "client-key-data": _b64(c.admin.key),
        },
    ),
    "token-skip-verify-server-name": (
        lambda c: {
            "server": "https://10.1.2.3:443",
            "insecure-skip-tls-verify": True,
            "tls-server-name": "kubernetes.default",
        },
        lambda c: {"token": "s3cret"},
    ),
    "http-ignores-certificates": (
        lambda c: {"server": "http://127.0.0.1:8080", "certificate-authority": "pki/ca.crt"},
        lambda c: {"client-certificate": "pki/admin.crt", "client-key": "pki/admin.key"},
    ),
    "no-user": (lambda c: {"server": "https://127.0.0.1:6443"}, lambda c: {}),
}


@pytest.fixture
def pki_beside(certs: pki.Pki, tmp_path: Path) -> Path:
    """The certificates in tmp_path/pki, where the relative paths of PLAIN_CASES point."""
    (tmp_path / "pki").mkdir()
    for name, src in (
        ("ca.crt", certs.ca.cert),
        ("admin.crt", certs.admin.cert),
        ("admin.key", certs.admin.key),
    ):
        (tmp_path / "pki" / name).write_bytes(src.read_bytes())
    return tmp_path


@pytest.mark.parametrize("case", sorted(PLAIN_CASES))
@pytest.mark.parametrize("context", [None, "y"])
def test_a_plain_kubeconfig_reads_as_the_package_reads_it(
    case: str,
    context: str | None,
    certs: pki.Pki,
    pki_beside: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_service_account: None,
) -> None:
    for proxy in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(proxy, raising=False)
    cluster, user = PLAIN_CASES[case]
    path = plain_kubeconfig(pki_beside / "kubeconfig", cluster(certs), user(certs))
    cfg = load_configuration(path, context=context, pool_size=7)
    assert isinstance(cfg, PlainConfiguration)
    want = package_configuration(path, context)
    for attr in ("host", "verify_ssl", "tls_server_name", "proxy", "assert_hostname"):
        assert getattr(cfg, attr) == getattr(want, attr), attr
    for attr in ("ssl_ca_cert", "cert_file", "key_file"):
        assert _content(getattr(cfg, attr)) == _content(getattr(want, attr)), attr
    assert authorization(cfg) == authorization(want)
    # The pool urllib3 gets, as the package's RESTClientObject builds it.
    from kubernetes import client as kclient

    package_pool = kclient.ApiClient(want).rest_client.pool_manager.connection_pool_kw
    plain_pool = _plain_pool(cfg).connection_pool_kw
    assert plain_pool.keys() == package_pool.keys()
    for key, value in package_pool.items():
        if key in ("ca_certs", "cert_file", "key_file"):
            assert _content(plain_pool[key]) == _content(value), key
        else:
            assert plain_pool[key] == value, key


@pytest.mark.parametrize(
    ("cluster", "user", "env"),
    [
        ({"server": "https://h:1"}, {"exec": {"command": "x", "apiVersion": "v1"}}, {}),
        ({"server": "https://h:1"}, {"auth-provider": {"name": "oidc"}}, {}),
        ({"server": "https://h:1"}, {"tokenFile": "token"}, {}),
        ({"server": "https://h:1"}, {"username": "a", "password": "b"}, {}),
        ({"server": "https://h:1", "proxy-url": "http://proxy:3128"}, {}, {}),
        ({"server": "https://h:1", "certificate-authority": "absent.crt"}, {}, {}),
        ({"server": "https://h:1", "certificate-authority-data": "not base64!"}, {}, {}),
        ({"server": "https://h:1"}, {"token": "t"}, {"https_proxy": "http://proxy:3128"}),
    ],
    ids=[
        "exec",
        "auth-provider",
        "tokenFile",
        "basic",
        "proxy-url",
        "missing-ca-file",
        "bad-ca-data",
        "proxy-env",
    ],
)
def test_anything_else_is_left_to_the_package(
    cluster: dict[str, Any],
    user: dict[str, Any],
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    path = plain_kubeconfig(tmp_path / "kubeconfig", cluster, user)
    assert load_plain_kubeconfig(str(path), None, None) is None


def test_a_kubeconfig_list_and_the_service_account_are_left_to_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_service_account: None
) -> None:
    one = token_kubeconfig(tmp_path / "one", "http://127.0.0.1:1", "a")
    two = token_kubeconfig(tmp_path / "two", "http://127.0.0.1:2", "b")
    assert isinstance(load_configuration(one), PlainConfiguration)
    monkeypatch.setenv("KUBECONFIG", f"{one}{os.pathsep}{two}")
    cfg = load_configuration()
    assert not isinstance(cfg, PlainConfiguration)
    assert cfg.host == "http://127.0.0.1:1"
    # With the service account's environment the package's in-cluster loader goes
    # first (it falls back to $KUBECONFIG when the token is not there).
    monkeypatch.setenv("KUBECONFIG", str(one))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    assert not isinstance(load_configuration(), PlainConfiguration)
