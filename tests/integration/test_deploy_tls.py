"""deploy/tls: the mTLS component on the base and on an overlay passes ``kubectl apply -k
--dry-run=server``; its flags are ones berth has and point into the Secrets it mounts; the
probes use the plaintext health port; the cert-manager example makes the Secrets it mounts,
with the name the shim verifies; and the rendered flags, with a throw-away PKI in place of
the Secrets, give a server that serves the shim's flags and refuses a client without a
certificate. The base itself says ``--insecure-listen`` (plaintext behind the NetworkPolicy)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from berth.cli import build_parser
from berth.client import ClusterStateLog, SchedulingClient, parse_target
from berth.localcluster import Cluster, KubeClient
from berth.localcluster.rest import JSON
from berth.tls import client_tls_from_args
from tests.contract.serve import free_loopback_ports
from tests.contract.tlscerts import CA
from tests.integration.deploytools import (
    BASE,
    DEPLOY,
    OVERLAYS,
    ROOT,
    berth_system,
    kubectl,
    one,
    render,
)

TLS = DEPLOY / "tls"
SERVER_SECRET = "berth-plugin-server-tls"
SHIM_SECRET = "berth-scheduler-tls"


def with_tls(tmp_path: Path, resource: Path) -> Path:
    rel = os.path.relpath
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [rel(resource, tmp_path)],
                "components": [rel(TLS, tmp_path)],
            }
        )
    )
    return tmp_path


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[JSON]:
    return render(with_tls(tmp_path_factory.mktemp("tls-base"), BASE))


@pytest.fixture(scope="module")
def namespace_ready(kube: KubeClient, cluster: Cluster) -> Iterator[str]:
    with berth_system(kube, cluster.kubeconfig, one(render(BASE), "Namespace")) as ns:
        yield ns


def container(docs: list[JSON], deployment: str) -> tuple[JSON, JSON]:
    spec = one(docs, "Deployment", deployment)["spec"]["template"]["spec"]
    return spec, spec["containers"][0]


@pytest.mark.integration
@pytest.mark.parametrize("resource", [BASE, OVERLAYS / "coscheduling"], ids=["base", "overlay"])
def test_tls_component_passes_server_side_dry_run(
    cluster: Cluster, namespace_ready: str, tmp_path: Path, resource: Path
) -> None:
    directory = with_tls(tmp_path, resource)
    docs = render(directory)
    out = kubectl(
        ["apply", "--dry-run=server", "-k", str(directory)], kubeconfig=cluster.kubeconfig
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.endswith("(server dry run)")]
    reported = sorted(ln.split(" ", 1)[0].split("/", 1)[1] for ln in lines)
    assert reported == sorted(d["metadata"]["name"] for d in docs), lines
    # Pod Security (restricted) included: fsGroup and the Secret volumes are allowed.
    assert "Warning" not in out.stderr, out.stderr


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


def test_base_says_plaintext_explicitly_and_tls_replaces_it(rendered: list[JSON]) -> None:
    parser = build_parser()
    _, base_server = container(render(BASE), "berth-plugin-server")
    assert parser.parse_args(base_server["args"]).insecure_listen is True

    spec, c = container(rendered, "berth-plugin-server")
    args = parser.parse_args(c["args"])
    assert args.insecure_listen is False
    files = {
        flag: _mounted_keys(spec, c, value)
        for flag, value in (
            ("--tls-cert", args.tls_cert),
            ("--tls-key", args.tls_key),
            ("--tls-client-ca", args.tls_client_ca),
        )
    }
    assert files == {
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
    assert spec["securityContext"]["fsGroup"] == spec["securityContext"]["runAsGroup"]

    svc = one(rendered, "Service", "berth-plugin-server")
    grpc_port = next(p for p in svc["spec"]["ports"] if p["name"] == "grpc")
    assert grpc_port["appProtocol"] == "https"

    spec, c = container(rendered, "berth-scheduler")
    sargs = parser.parse_args(c["args"])
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


def test_cert_manager_example_makes_the_mounted_secrets(rendered: list[JSON]) -> None:
    docs = [d for d in yaml.safe_load_all((TLS / "cert-manager.yaml").read_text()) if d]
    certs = {d["spec"]["secretName"]: d["spec"] for d in docs if d["kind"] == "Certificate"}
    assert {SERVER_SECRET, SHIM_SECRET} <= set(certs)
    issuers = {d["metadata"]["name"] for d in docs if d["kind"] == "Issuer"}
    for name in (SERVER_SECRET, SHIM_SECRET):
        assert certs[name]["issuerRef"]["name"] in issuers
    assert certs[SERVER_SECRET]["issuerRef"] == certs[SHIM_SECRET]["issuerRef"], "one CA"
    assert "server auth" in certs[SERVER_SECRET]["usages"]
    assert "client auth" in certs[SHIM_SECRET]["usages"]
    # The shim's per-replica channels verify the host of its dns:/// target.
    _, c = container(rendered, "berth-scheduler")
    target = parse_target(build_parser().parse_args(c["args"]).server)
    assert target.kind == "dns"
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


@pytest.mark.integration
def test_rendered_flags_serve_the_shim_and_refuse_others(
    rendered: list[JSON], tmp_path: Path
) -> None:
    """The component's server and shim flags, run for real with a PKI like the one
    cert-manager.yaml describes (server SAN: the Service's name; loopback addresses)."""
    ca = CA(tmp_path, "berth-ca")
    _, shim_c = container(rendered, "berth-scheduler")
    host = parse_target(build_parser().parse_args(shim_c["args"]).server).host
    server = ca.issue("server", server=True, dns=(host,), ips=())
    shim = ca.issue("shim", server=False)
    ca_file = ca.path
    port, health, metrics = free_loopback_ports(3)

    _, server_c = container(rendered, "berth-plugin-server")
    server_args = _swap(
        server_c["args"],
        {
            "--config": str(ROOT / "deploy" / "base" / "scheduler-config.yaml"),
            "--listen": f"127.0.0.1:{port}",
            "--metrics-listen": f"127.0.0.1:{metrics}",
            "--health-listen": f"127.0.0.1:{health}",
            "--tls-cert": str(server.cert),
            "--tls-key": str(server.key),
            "--tls-client-ca": str(ca_file),
        },
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "berth", *server_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on port" in line, (line, proc.stderr.read() if proc.stderr else "")
        swapped = _swap(
            shim_c["args"],
            {
                "--plugin-server": f"127.0.0.1:{port}",
                "--plugin-server-ca": str(ca_file),
                "--plugin-server-cert": str(shim.cert),
                "--plugin-server-key": str(shim.key),
            },
        )
        shim_args = build_parser().parse_args([*swapped, f"--plugin-server-tls-name={host}"])
        tls = client_tls_from_args(shim_args)
        assert tls is not None
        asyncio.run(_check(port, health, tls.credentials, host))
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


async def _check(port: int, health: int, credentials: grpc.ChannelCredentials, host: str) -> None:
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
    # Plaintext on the API port is refused.
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
