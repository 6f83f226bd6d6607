"""TLS in the base deployment: the plugin servers serve the gRPC API with mTLS only and the
shim calls them with its client certificate, from the Secrets ``berth certs`` (or
cert-manager) makes; nothing in the base says plaintext. The shim's secure port is HTTPS
(probes included) with the auth-delegator binding its delegated authn/authz needs.

``berth certs``' Secrets are applied to a real API server and read back; mounted where the
base mounts them, the rendered server and shim flags serve the shim over mTLS and refuse a
plaintext client and one without a certificate."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from berth.cli import build_parser
from berth.client import ClusterStateLog, SchedulingClient, parse_target
from berth.client.tls import client_tls, client_tls_from_args
from berth.dev.localcluster import Cluster
from berth.kube.rest import JSON, KubeApi
from tests.contract.serve import free_loopback_ports
from tests.integration.deploytools import (
    BASE,
    DEPLOY,
    NAMESPACE,
    ROOT,
    SHIM_SA,
    berth_system,
    kubectl,
    one,
    render,
)

SERVER_SECRET = "berth-plugin-server-tls"
SHIM_SECRET = "berth-scheduler-tls"
BERTH = [sys.executable, "-m", "berth"]


@pytest.fixture(scope="module")
def base() -> list[JSON]:
    return render(BASE)


@pytest.fixture(scope="module")
def namespace_ready(kube: KubeApi, cluster: Cluster, base: list[JSON]) -> Iterator[str]:
    with berth_system(kube, cluster.kubeconfig, one(base, "Namespace")) as ns:
        yield ns


def container(docs: list[JSON], deployment: str) -> tuple[JSON, JSON]:
    spec = one(docs, "Deployment", deployment)["spec"]["template"]["spec"]
    return spec, spec["containers"][0]


def _mounted_keys(spec: JSON, c: JSON, path: str) -> tuple[str, str]:
    """(Secret name, file) that a path in the container comes from (the deepest mount
    holding it)."""
    mounts = sorted(c["volumeMounts"], key=lambda m: -len(m["mountPath"]))
    for m in mounts:
        prefix = m["mountPath"].rstrip("/") + "/"
        if path.startswith(prefix):
            volume = next(v for v in spec["volumes"] if v["name"] == m["name"])
            assert "secret" in volume, f"{path} is in volume {volume}, not a Secret"
            assert "items" not in volume["secret"], "every key of the Secret is mounted"
            return volume["secret"]["secretName"], path[len(prefix) :]
    raise AssertionError(f"{path} is in no volume of {c['name']}")


def test_base_serves_the_grpc_api_with_mtls_only(base: list[JSON]) -> None:
    parser = build_parser()
    spec, c = container(base, "berth-plugin-server")
    args = parser.parse_args(c["args"])
    assert args.insecure_plaintext is False
    assert {
        flag: _mounted_keys(spec, c, value)
        for flag, value in (
            ("--tls-cert", args.tls_cert),
            ("--tls-key", args.tls_key),
            ("--tls-client-ca", args.tls_client_ca),
        )
    } == {
        "--tls-cert": (SERVER_SECRET, "tls.crt"),
        "--tls-key": (SERVER_SECRET, "tls.key"),
        "--tls-client-ca": (SERVER_SECRET, "ca.crt"),
    }
    # kubelet gRPC probes speak plaintext: they use the health-only port.
    health = int(args.health_listen.rpartition(":")[2])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["health"] == health and ports["grpc"] != health
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[kind]["grpc"]["port"] == health, kind
    assert c["readinessProbe"]["grpc"]["service"] == "berth.v1.SchedulingService"
    # The key is readable by the container's group only.
    assert spec["securityContext"]["fsGroup"] == spec["securityContext"]["runAsGroup"]
    tls_volume = next(v for v in spec["volumes"] if v["name"] == "tls")
    assert tls_volume["secret"]["defaultMode"] == 0o440

    svc = one(base, "Service", "berth-plugin-server")
    grpc_port = next(p for p in svc["spec"]["ports"] if p["name"] == "grpc")
    assert grpc_port["appProtocol"] == "https"

    spec, c = container(base, "berth-scheduler")
    sargs = parser.parse_args(c["args"])
    assert sargs.insecure_plaintext is False
    assert {
        flag: _mounted_keys(spec, c, value)
        for flag, value in (
            ("--plugin-server-ca", sargs.plugin_server_ca),
            ("--plugin-server-cert", sargs.plugin_server_cert),
            ("--plugin-server-key", sargs.plugin_server_key),
        )
    } == {
        "--plugin-server-ca": (SHIM_SECRET, "ca.crt"),
        "--plugin-server-cert": (SHIM_SECRET, "tls.crt"),
        "--plugin-server-key": (SHIM_SECRET, "tls.key"),
    }


def test_base_shim_port_is_https_with_delegated_auth(base: list[JSON]) -> None:
    """kube-scheduler's secure port: HTTPS probes, and the shim's account bound to
    system:auth-delegator for its TokenReviews and SubjectAccessReviews."""
    _, c = container(base, "berth-scheduler")
    args = build_parser().parse_args(c["args"])
    assert args.metrics_listen and args.insecure_metrics is False
    assert args.authorization_always_allow_paths.split(",") == ["/healthz", "/readyz", "/livez"]
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[kind]["httpGet"]["scheme"] == "HTTPS", kind
        assert c[kind]["httpGet"]["path"] in ("/healthz", "/readyz", "/livez"), kind
    delegator = [
        d
        for d in base
        if d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"] == "system:auth-delegator"
    ]
    assert len(delegator) == 1
    assert delegator[0]["subjects"] == [
        {"kind": "ServiceAccount", "name": SHIM_SA, "namespace": NAMESPACE}
    ]


def berth_certs(*flags: str) -> list[JSON]:
    out = subprocess.run(
        [*BERTH, "certs", *flags], capture_output=True, text=True, timeout=60, check=True
    )
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _pem(secret: JSON, key: str) -> bytes:
    return base64.b64decode(secret["data"][key])


def test_berth_certs_makes_the_secrets_the_base_mounts(base: list[JSON]) -> None:
    secrets = {s["metadata"]["name"]: s for s in berth_certs()}
    assert set(secrets) == {SERVER_SECRET, SHIM_SECRET}
    for s in secrets.values():
        assert s["metadata"]["namespace"] == NAMESPACE
        assert set(s["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    ca = _pem(secrets[SERVER_SECRET], "ca.crt")
    assert _pem(secrets[SHIM_SECRET], "ca.crt") == ca, "one CA verifies both sides"
    server = x509.load_pem_x509_certificate(_pem(secrets[SERVER_SECRET], "tls.crt"))
    client = x509.load_pem_x509_certificate(_pem(secrets[SHIM_SECRET], "tls.crt"))
    usage = x509.ExtendedKeyUsage
    assert ExtendedKeyUsageOID.SERVER_AUTH in server.extensions.get_extension_for_class(usage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in client.extensions.get_extension_for_class(usage).value
    # The shim's per-replica channels verify the host of its dns:/// target.
    _, c = container(base, "berth-scheduler")
    target = parse_target(build_parser().parse_args(c["args"]).server)
    assert target.kind == "dns"
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert target.host in sans.get_values_for_type(x509.DNSName)
    # Another namespace and domain move the names with it.
    other = berth_certs("--namespace", "sched", "--cluster-domain", "example.org")
    other_server = x509.load_pem_x509_certificate(_pem(other[0], "tls.crt"))
    other_sans = other_server.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert "berth-plugin-server.sched.svc.example.org" in other_sans.value.get_values_for_type(
        x509.DNSName
    )


def test_cert_manager_example_makes_the_mounted_secrets(base: list[JSON]) -> None:
    docs = [d for d in yaml.safe_load_all((DEPLOY / "tls" / "cert-manager.yaml").read_text()) if d]
    certs = {d["spec"]["secretName"]: d["spec"] for d in docs if d["kind"] == "Certificate"}
    assert {SERVER_SECRET, SHIM_SECRET} <= set(certs)
    issuers = {d["metadata"]["name"] for d in docs if d["kind"] == "Issuer"}
    for name in (SERVER_SECRET, SHIM_SECRET):
        assert certs[name]["issuerRef"]["name"] in issuers
    assert certs[SERVER_SECRET]["issuerRef"] == certs[SHIM_SECRET]["issuerRef"], "one CA"
    assert "server auth" in certs[SERVER_SECRET]["usages"]
    assert "client auth" in certs[SHIM_SECRET]["usages"]
    _, c = container(base, "berth-scheduler")
    target = parse_target(build_parser().parse_args(c["args"]).server)
    assert target.host in certs[SERVER_SECRET]["dnsNames"]


def _swap(args: list[str], values: dict[str, str]) -> list[str]:
    out, seen = [], set()
    for a in args:
        flag = a.split("=", 1)[0]
        if flag in values:
            out.append(f"{flag}={values[flag]}")
            seen.add(flag)
        else:
            out.append(a)
    assert seen == set(values), f"{args} lack {set(values) - seen}"
    return out


def _mount(
    kube: KubeApi, spec: JSON, c: JSON, args: list[str], flags: tuple[str, ...], root: Path
) -> dict[str, str]:
    """Each flag's file as the kubelet would mount it: the key of the Secret (read back from
    the API server) that the Deployment's volume puts at the flag's path, under ``root``."""
    values = dict(a.split("=", 1) for a in args if a.startswith("--") and "=" in a)
    out = {}
    for flag in flags:
        secret, key = _mounted_keys(spec, c, values[flag])
        data = kube.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/{secret}")["data"]
        path = root / secret / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data[key]))
        out[flag] = str(path)
    return out


@pytest.mark.integration
def test_base_server_and_shim_talk_mtls_with_berth_certs(
    kube: KubeApi,
    cluster: Cluster,
    namespace_ready: str,
    base: list[JSON],
    tmp_path: Path,
) -> None:
    """``berth certs | kubectl apply -f -``, then the base's server and shim flags with the
    Secrets where the base mounts them: the shim's channel syncs over mTLS; plaintext and a
    client without a certificate are refused."""
    secrets = berth_certs()
    kubectl(["apply", "-f", "-"], kubeconfig=cluster.kubeconfig, stdin=yaml.safe_dump_all(secrets))
    port, health, metrics = free_loopback_ports(3)
    server_spec, server_c = container(base, "berth-plugin-server")
    files = _mount(
        kube,
        server_spec,
        server_c,
        server_c["args"],
        ("--tls-cert", "--tls-key", "--tls-client-ca"),
        tmp_path / "server",
    )
    server_args = _swap(
        server_c["args"],
        {
            "--config": str(ROOT / "deploy" / "base" / "scheduler-config.yaml"),
            "--listen": f"127.0.0.1:{port}",
            "--metrics-listen": f"127.0.0.1:{metrics}",
            "--health-listen": f"127.0.0.1:{health}",
            **files,
        },
    )
    shim_spec, shim_c = container(base, "berth-scheduler")
    shim_files = _mount(
        kube,
        shim_spec,
        shim_c,
        shim_c["args"],
        ("--plugin-server-ca", "--plugin-server-cert", "--plugin-server-key"),
        tmp_path / "shim",
    )
    host = parse_target(build_parser().parse_args(shim_c["args"]).server).host
    swapped = _swap(shim_c["args"], {"--plugin-server": f"127.0.0.1:{port}", **shim_files})
    # The replica is dialled by IP; its certificate must name the Service, as in the cluster.
    shim_args = build_parser().parse_args([*swapped, f"--plugin-server-tls-name={host}"])
    tls = client_tls_from_args(shim_args)
    assert tls is not None
    no_cert = client_tls(Path(shim_files["--plugin-server-ca"])).credentials

    proc = subprocess.Popen(
        [*BERTH, *server_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on port" in line, (line, proc.stderr.read() if proc.stderr else "")
        asyncio.run(_check(port, health, tls.credentials, no_cert, host))
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "plaintext gRPC" not in err


async def _check(
    port: int,
    health: int,
    credentials: grpc.ChannelCredentials,
    no_cert: grpc.ChannelCredentials,
    host: str,
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{health}") as ch:
        resp = await health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service="berth.v1.SchedulingService"), timeout=10
        )
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    client = SchedulingClient.connect(
        f"127.0.0.1:{port}", ClusterStateLog(), timeout=10, credentials=credentials, tls_name=host
    )
    try:
        await client.sync()
    finally:
        await client.close()
    # Plaintext on the API port is refused, and so is TLS without a client certificate.
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    options = [("grpc.ssl_target_name_override", host)]
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", no_cert, options=options) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
