"""Transport security of the gRPC API (issue 13): ``berth serve --tls-cert/--tls-key
[--tls-client-ca]`` against TLS and mTLS clients, the client flags of ``berth place`` and
``berth shim`` (--plugin-server-ca/-cert/-key/-tls-name) reaching their channels, the
refusal of plaintext unless asked for by --insecure-plaintext (on both sides), the
plaintext health-only port, and
certificate reload. The PKI is made per test with ``cryptography`` (tests/contract/tlscerts.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from cryptography.hazmat.primitives import serialization
from grpc_health.v1 import health_pb2, health_pb2_grpc

from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.cli import build_parser
from berth.client import ClusterStateLog, SchedulingClient
from berth.client.tls import client_tls, client_tls_from_args
from berth.server.app import RunningServer, start_server
from berth.shim.app import ShimSettings, build_service
from berth.tls.serving import ServerTLS, TLSFileError, is_loopback_listen
from tests.contract.fakes import CONFIG, REGISTRY
from tests.contract.tlscerts import CA, Leaf

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cluster"
SERVICE_DNS = "berth-plugin-server.berth-system.svc"


class PKI:
    def __init__(self, directory: Path) -> None:
        self.ca = CA(directory, "berth")
        self.server = self.ca.issue("server", server=True)
        self.client = self.ca.issue("client", server=False)
        self.other_ca = CA(directory, "other")
        self.stranger = self.other_ca.issue("stranger", server=False)


@pytest.fixture
def pki(tmp_path: Path) -> PKI:
    return PKI(tmp_path)


def creds(ca: Path | None = None, leaf: Leaf | None = None) -> grpc.ChannelCredentials:
    return client_tls(ca, leaf.cert if leaf else None, leaf.key if leaf else None).credentials


async def health_check(
    port: int, credentials: grpc.ChannelCredentials | None, name: str | None = None
) -> str:
    """ "SERVING", or the status code of the failed call."""
    options = [("grpc.ssl_target_name_override", name)] if name else []
    addr = f"127.0.0.1:{port}"
    channel = (
        grpc.aio.secure_channel(addr, credentials, options=options)
        if credentials is not None
        else grpc.aio.insecure_channel(addr)
    )
    async with channel:
        try:
            resp = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="berth.v1.SchedulingService"), timeout=5
            )
        except grpc.aio.AioRpcError as exc:
            return str(exc.code().name)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status))


async def synced(client: SchedulingClient) -> str:
    """A Sync through ``client`` (closed after it)."""
    try:
        resp = await client.sync()
    finally:
        await client.close()
    assert resp.generation >= 0
    return "served"


@pytest.fixture
async def tls_server(pki: PKI) -> AsyncIterator[RunningServer]:
    running = await start_server(
        CONFIG, REGISTRY, "127.0.0.1:0", trace=False, tls=ServerTLS(pki.server.cert, pki.server.key)
    )
    try:
        yield running
    finally:
        await running.stop(0)


@pytest.fixture
async def mtls_server(pki: PKI) -> AsyncIterator[RunningServer]:
    running = await start_server(
        CONFIG,
        REGISTRY,
        "127.0.0.1:0",
        trace=False,
        tls=ServerTLS(pki.server.cert, pki.server.key, pki.ca.path),
        health_listen="127.0.0.1:0",
    )
    try:
        yield running
    finally:
        await running.stop(0)


# -- TLS ----------------------------------------------------------------------------------


async def test_tls_client_with_the_ca_is_served(pki: PKI, tls_server: RunningServer) -> None:
    client = SchedulingClient.connect(
        f"127.0.0.1:{tls_server.port}",
        ClusterStateLog(),
        timeout=10,
        credentials=creds(pki.ca.path),
    )
    assert await synced(client) == "served"
    assert await health_check(tls_server.port, creds(pki.ca.path)) == "SERVING"


async def test_plaintext_client_and_untrusting_client_fail(
    pki: PKI, tls_server: RunningServer
) -> None:
    assert await health_check(tls_server.port, None) == "UNAVAILABLE"
    # A client that trusts another CA does not accept the server's certificate.
    assert await health_check(tls_server.port, creds(pki.other_ca.path)) == "UNAVAILABLE"
    # Nor one that expects another name than the certificate's SANs (localhost, 127.0.0.1).
    assert (
        await health_check(tls_server.port, creds(pki.ca.path), name="elsewhere.example")
        == "UNAVAILABLE"
    )


# -- mTLS ---------------------------------------------------------------------------------


async def test_mtls_refuses_clients_without_a_valid_certificate(
    pki: PKI, mtls_server: RunningServer
) -> None:
    port = mtls_server.port
    assert await health_check(port, creds(pki.ca.path)) == "UNAVAILABLE"  # no certificate
    assert await health_check(port, creds(pki.ca.path, pki.stranger)) == "UNAVAILABLE"
    # A server certificate is no client certificate (extendedKeyUsage serverAuth only).
    assert await health_check(port, creds(pki.ca.path, pki.server)) == "UNAVAILABLE"
    assert await health_check(port, None) == "UNAVAILABLE"
    assert await health_check(port, creds(pki.ca.path, pki.client)) == "SERVING"


async def test_mtls_serves_the_scheduling_api_to_a_valid_client(
    pki: PKI, mtls_server: RunningServer
) -> None:
    client = SchedulingClient.connect(
        f"127.0.0.1:{mtls_server.port}",
        ClusterStateLog(),
        timeout=10,
        credentials=creds(pki.ca.path, pki.client),
    )
    assert await synced(client) == "served"
    refused = SchedulingClient.connect(
        f"127.0.0.1:{mtls_server.port}",
        ClusterStateLog(),
        timeout=5,
        credentials=creds(pki.ca.path, pki.stranger),
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await synced(refused)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_health_port_is_plaintext_and_serves_health_only(
    pki: PKI, mtls_server: RunningServer
) -> None:
    """kubelet gRPC probes cannot present certificates: --health-listen serves
    grpc.health.v1 in plaintext, and nothing else."""
    assert mtls_server.health_port not in (0, mtls_server.port)
    assert await health_check(mtls_server.health_port, None) == "SERVING"
    async with grpc.aio.insecure_channel(f"127.0.0.1:{mtls_server.health_port}") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await pb_grpc.SchedulingServiceStub(ch).Sync(pb.SyncRequest(), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # Graceful shutdown shows on the health port too.
    await mtls_server.health.enter_graceful_shutdown()
    assert await health_check(mtls_server.health_port, None) == "NOT_SERVING"


async def test_changed_files_are_used_for_new_connections(
    pki: PKI, mtls_server: RunningServer, tmp_path: Path
) -> None:
    """A rotation (new CA, new server and client certificates written over the old
    files, as a Secret volume update does) is picked up at the next handshake."""
    port = mtls_server.port
    (tmp_path / "new").mkdir()
    new = CA(tmp_path / "new", "berth")
    new_server = new.issue("server", server=True)
    new_client = new.issue("client", server=False)
    assert await health_check(port, creds(new.path, new_client)) == "UNAVAILABLE"
    pki.server.cert.write_bytes(new_server.cert.read_bytes())
    pki.server.key.write_bytes(new_server.key.read_bytes())
    pki.ca.path.write_bytes(new.path.read_bytes())
    assert await health_check(port, creds(new.path, new_client)) == "SERVING"
    old_ca = pki.other_ca.path.parent / "old-ca.crt"
    old_ca.write_bytes(pki.ca.certificate.public_bytes(serialization.Encoding.PEM))
    assert await health_check(port, creds(old_ca, pki.client)) == "UNAVAILABLE"
    # A broken file keeps the last good set in use.
    pki.server.key.write_text("not a key\n")
    assert await health_check(port, creds(new.path, new_client)) == "SERVING"


# -- the client's channels ----------------------------------------------------------------


async def test_every_replica_channel_gets_the_credentials_and_the_service_name(
    tmp_path: Path,
) -> None:
    """dns:///NAME:PORT resolves to replicas dialled by IP; their certificates name the
    Service (no IP SAN), so each per-replica channel verifies NAME."""
    ca = CA(tmp_path, "berth")
    leaf = ca.issue("server", server=True, dns=(SERVICE_DNS,), ips=())
    client_leaf = ca.issue("client", server=False)
    tls = ServerTLS(leaf.cert, leaf.key, ca.path)
    replicas = [
        await start_server(CONFIG, REGISTRY, "127.0.0.1:0", trace=False, tls=tls) for _ in range(2)
    ]
    addresses = [f"127.0.0.1:{r.port}" for r in replicas]

    async def resolve(host: str, port: int) -> list[str]:
        assert host == SERVICE_DNS
        return addresses

    try:
        client = SchedulingClient.connect(
            f"dns:///{SERVICE_DNS}:50051",
            ClusterStateLog(),
            timeout=10,
            credentials=creds(ca.path, client_leaf),
            resolve=resolve,
        )
        try:
            for _ in range(4):
                await client.sync()
            used = {s.address for s in client.stats() if s.calls}
        finally:
            await client.close()
        assert used == set(addresses)
        # A list of IPs has no name to verify unless --plugin-server-tls-name gives one.
        by_ip = SchedulingClient.connect(
            ",".join(addresses),
            ClusterStateLog(),
            timeout=5,
            credentials=creds(ca.path, client_leaf),
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await synced(by_ip)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        named = SchedulingClient.connect(
            ",".join(addresses),
            ClusterStateLog(),
            timeout=10,
            credentials=creds(ca.path, client_leaf),
            tls_name=SERVICE_DNS,
        )
        assert await synced(named) == "served"
    finally:
        for r in replicas:
            await r.stop(0)


async def test_shim_flags_reach_its_plugin_service_channel(
    pki: PKI, mtls_server: RunningServer
) -> None:
    parser = build_parser()
    base = ["shim", "--plugin-server", f"127.0.0.1:{mtls_server.port}"]
    with_cert = parser.parse_args(
        [
            *base,
            "--plugin-server-ca",
            str(pki.ca.path),
            "--plugin-server-cert",
            str(pki.client.cert),
            "--plugin-server-key",
            str(pki.client.key),
            "--plugin-server-tls-name",
            "localhost",
        ]
    )
    tls = client_tls_from_args(with_cert)
    assert tls is not None and tls.server_name == "localhost"
    service = build_service(
        ShimSettings(config=CONFIG, server=with_cert.server, tls=tls), ClusterStateLog()
    )
    assert await synced(service.client) == "served"

    without = parser.parse_args([*base, "--plugin-server-ca", str(pki.ca.path)])
    service = build_service(
        ShimSettings(config=CONFIG, server=without.server, tls=client_tls_from_args(without)),
        ClusterStateLog(),
    )
    service.client.timeout = 5
    with pytest.raises(grpc.aio.AioRpcError):
        await synced(service.client)
    assert client_tls_from_args(parser.parse_args(base)) is None


def test_client_flag_errors_name_the_flag_and_file(pki: PKI, tmp_path: Path) -> None:
    parser = build_parser()
    base = ["shim", "--plugin-server", "127.0.0.1:1"]

    def error(*flags: str) -> str:
        with pytest.raises(TLSFileError) as err:
            client_tls_from_args(parser.parse_args([*base, *flags]))
        return str(err.value)

    missing = tmp_path / "missing.crt"
    msg = error("--plugin-server-ca", str(missing))
    assert "--plugin-server-ca" in msg and str(missing) in msg and "cannot read" in msg
    msg = error("--plugin-server-ca", str(pki.client.key))
    assert "--plugin-server-ca" in msg and "not a PEM certificate" in msg
    msg = error("--plugin-server-cert", str(pki.client.cert))
    assert msg == "--plugin-server-cert needs --plugin-server-key"
    msg = error(
        "--plugin-server-cert", str(pki.client.cert), "--plugin-server-key", str(pki.server.key)
    )
    assert "--plugin-server-key" in msg and "is not the private key" in msg
    assert str(pki.client.cert) in msg


# -- the CLI ------------------------------------------------------------------------------


def berth(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "berth", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )


@pytest.fixture(scope="module")
def served_mtls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PKI, int]]:
    """``berth serve`` with the TLS flags, as a process."""
    pki = PKI(tmp_path_factory.mktemp("pki"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "berth",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            str(pki.server.cert),
            "--tls-key",
            str(pki.server.key),
            "--tls-client-ca",
            str(pki.ca.path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"listening on port (\d+)", line)
        if found is None:
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"berth serve did not start: {line!r}\n{err}")
        yield pki, int(found.group(1))
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def place(port: int, *flags: str) -> subprocess.CompletedProcess[str]:
    return berth(
        "place",
        "--cluster",
        str(EXAMPLE / "cluster.yaml"),
        "--pod",
        str(EXAMPLE / "pod.yaml"),
        "--server",
        f"127.0.0.1:{port}",
        "--json",
        *flags,
    )


def test_place_over_mtls_with_the_client_flags(served_mtls: tuple[PKI, int]) -> None:
    pki, port = served_mtls
    out = place(
        port,
        "--plugin-server-ca",
        str(pki.ca.path),
        "--plugin-server-cert",
        str(pki.client.cert),
        "--plugin-server-key",
        str(pki.client.key),
    )
    assert out.returncode == 0, out.stderr
    assert '"node": "node-a"' in out.stdout


def test_place_without_a_client_certificate_is_refused(served_mtls: tuple[PKI, int]) -> None:
    pki, port = served_mtls
    out = place(port, "--plugin-server-ca", str(pki.ca.path))
    assert out.returncode == 2
    assert "UNAVAILABLE" in out.stderr
    out = place(port)  # plaintext
    assert out.returncode == 2
    assert "UNAVAILABLE" in out.stderr


def test_place_with_a_bad_client_file_exits_2_naming_it(
    served_mtls: tuple[PKI, int], tmp_path: Path
) -> None:
    pki, port = served_mtls
    missing = tmp_path / "nope.key"
    out = place(
        port,
        "--plugin-server-cert",
        str(pki.client.cert),
        "--plugin-server-key",
        str(missing),
    )
    assert out.returncode == 2
    assert f"--plugin-server-key {missing}: cannot read" in out.stderr, out.stderr


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "127.0.0.1:0"])
def test_serve_refuses_plaintext_without_the_explicit_flag(listen: str) -> None:
    """Plaintext on any address, loopback included, only by --insecure-plaintext."""
    out = berth("serve", "--listen", listen)
    assert out.returncode == 2
    assert "--insecure-plaintext" in out.stderr and "--tls-cert" in out.stderr, out.stderr
    assert listen in out.stderr


def test_serve_refuses_plaintext_and_tls_at_once(pki: PKI) -> None:
    out = berth(
        "serve",
        "--tls-cert",
        str(pki.server.cert),
        "--tls-key",
        str(pki.server.key),
        "--insecure-plaintext",
    )
    assert out.returncode == 2
    assert "--insecure-plaintext and --tls-cert exclude each other" in out.stderr, out.stderr


@pytest.mark.parametrize(
    ("flags", "wanted"),
    [
        # Plaintext to a plugin server only when said.
        (
            ["--plugin-server", "127.0.0.1:1"],
            "--plugin-server 127.0.0.1:1 would be called in plaintext",
        ),
        (
            ["--plugin-server", "127.0.0.1:1", "--insecure-plaintext", "--plugin-server-ca", "x"],
            "--insecure-plaintext and the --plugin-server-* TLS flags exclude each other",
        ),
        (["--insecure-plaintext"], "--insecure-plaintext needs --plugin-server"),
    ],
    ids=["no-tls-no-flag", "both", "no-server"],
)
def test_shim_refuses_plaintext_without_the_explicit_flag(
    flags: list[str], wanted: str, pki: PKI
) -> None:
    flags = [str(pki.ca.path) if f == "x" else f for f in flags]
    out = berth("shim", *flags, timeout=60)
    assert out.returncode == 2, out.stderr
    assert wanted in out.stderr, out.stderr
    if "would be called in plaintext" in wanted:
        assert "--plugin-server-ca" in out.stderr and "--insecure-plaintext" in out.stderr


def test_serve_listens_in_plaintext_when_told_explicitly() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "berth", "serve", "--listen", "0.0.0.0:0", "--insecure-plaintext"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        assert "listening on port" in proc.stdout.readline()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "plaintext gRPC on 0.0.0.0:0 (--insecure-plaintext)" in err


@pytest.mark.parametrize(
    ("flags", "wanted"),
    [
        (["--tls-key", "k.pem"], "--tls-key needs --tls-cert"),
        (["--tls-client-ca", "ca.pem"], "--tls-client-ca needs --tls-cert"),
        (["--tls-cert", "c.pem"], "--tls-cert needs --tls-key"),
    ],
)
def test_serve_flag_combinations(flags: list[str], wanted: str) -> None:
    out = berth("serve", *flags)
    assert out.returncode == 2
    assert wanted in out.stderr, out.stderr


def test_serve_bad_tls_files_exit_2_naming_flag_and_file(pki: PKI, tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    out = berth("serve", "--tls-cert", str(missing), "--tls-key", str(pki.server.key))
    assert out.returncode == 2
    assert f"--tls-cert {missing}: cannot read" in out.stderr, out.stderr
    out = berth("serve", "--tls-cert", str(pki.server.cert), "--tls-key", str(pki.client.key))
    assert out.returncode == 2
    assert "--tls-key" in out.stderr and "is not the private key" in out.stderr, out.stderr
    out = berth(
        "serve",
        "--tls-cert",
        str(pki.server.cert),
        "--tls-key",
        str(pki.server.key),
        "--tls-client-ca",
        str(pki.server.key),
    )
    assert out.returncode == 2
    assert f"--tls-client-ca {pki.server.key}: not a PEM certificate" in out.stderr, out.stderr


@pytest.mark.parametrize(
    ("listen", "loopback"),
    [
        ("127.0.0.1:50051", True),
        ("127.0.0.2:1", True),
        ("localhost:50051", True),
        ("[::1]:50051", True),
        ("unix:/tmp/berth.sock", True),
        ("0.0.0.0:50051", False),
        ("[::]:50051", False),
        (":50051", False),
        ("10.1.2.3:50051", False),
        ("berth.example:50051", False),
    ],
)
def test_loopback_addresses(listen: str, loopback: bool) -> None:
    assert is_loopback_listen(listen) is loopback
