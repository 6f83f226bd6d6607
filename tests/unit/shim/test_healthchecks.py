"""shim/healthchecks.py: what /healthz, /livez and /readyz answer, as kube-scheduler
wires them (cmd/kube-scheduler/app/server.go: healthz and readyz carry the
leader-election watchdog, client-go healthzadaptor.go; livez only pings), plus the API
server's reachability for /readyz. Served by shim/health.py on a loopback port."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import orjson
import pytest
import urllib3

from berth.kube.errors import ApiError
from berth.kube.rest import KubeApi
from berth.shim.health import HealthServer
from berth.shim.healthchecks import ApiServerProbe, HealthChecks


class ProbedApi(KubeApi):
    """``probe`` answers with what the test sets: None (200) or an ApiError."""

    def __init__(self) -> None:
        super().__init__("https://fake.invalid", urllib3.PoolManager(), lambda: None)
        self.answer: ApiError | None = None
        self.paths: list[str] = []

    def probe(self, path: str = "/readyz", timeout: float = 5.0) -> None:
        self.paths.append(path)
        if self.answer is not None:
            raise self.answer


def status(code: int, reason: str) -> ApiError:
    return ApiError("GET", "/readyz", code, orjson.dumps({"reason": reason, "message": reason}))


@pytest.mark.parametrize(
    ("answer", "reachable"),
    [
        pytest.param(None, True, id="200"),
        pytest.param(status(403, "Forbidden"), True, id="403-answers-so-reachable"),
        pytest.param(status(401, "Unauthorized"), True, id="401-answers-so-reachable"),
        pytest.param(status(500, "InternalError"), False, id="500-not-ready"),
        pytest.param(
            ApiError("GET", "/readyz", 0, b"Read timed out"), False, id="no-answer-unreachable"
        ),
    ],
)
def test_the_api_server_probe_asks_readyz(answer: ApiError | None, reachable: bool) -> None:
    api = ProbedApi()
    api.answer = answer
    probe = ApiServerProbe(api)
    assert (probe.probe_once() is None) == reachable
    assert (probe.failure is None) == reachable
    assert api.paths == ["/readyz"]


def test_readyz_fails_while_the_api_server_is_unreachable_and_recovers() -> None:
    api = ProbedApi()
    probe = ApiServerProbe(api)
    checks = HealthChecks(lambda: (True, "ok: scheduling"), api_server=probe)
    probe.probe_once()
    assert checks.readyz() == (200, "ok: scheduling")
    api.answer = ApiError("GET", "/readyz", 0, b"Read timed out. (read timeout=5.0)")
    probe.probe_once()
    code, body = checks.readyz()
    assert code == 503
    assert body.startswith("the API server is unreachable")
    # Liveness is not readiness: restarting would not bring the API server back.
    assert checks.healthz() == (200, "ok")
    assert checks.livez() == (200, "ok")
    api.answer = None
    probe.probe_once()
    assert checks.readyz() == (200, "ok: scheduling")


def test_the_watchdog_fails_healthz_and_readyz_but_not_livez() -> None:
    why: list[str | None] = [None]
    checks = HealthChecks(lambda: (True, "ok: scheduling"), watchdog=lambda: why[0])
    assert checks.healthz() == (200, "ok")
    why[0] = "failed election to renew leadership on lease ns/l"
    code, body = checks.healthz()
    assert code == 500
    assert body == (
        "[-]leaderElection failed: failed election to renew leadership on lease ns/l\n"
        "healthz check failed"
    )
    assert checks.readyz()[0] == 503
    assert checks.livez() == (200, "ok")


def test_readyz_says_what_the_scheduler_waits_for() -> None:
    checks = HealthChecks(lambda: (False, "informers not synced yet"))
    assert checks.readyz() == (503, "informers not synced yet")


@pytest.fixture
def served() -> Iterator[tuple[HealthServer, list[str | None], ProbedApi, ApiServerProbe]]:
    why: list[str | None] = [None]
    api = ProbedApi()
    probe = ApiServerProbe(api)
    checks = HealthChecks(
        lambda: (True, "ok: scheduling"), watchdog=lambda: why[0], api_server=probe
    )
    server = HealthServer("127.0.0.1:0", checks)
    server.start()
    yield server, why, api, probe
    server.stop()


def get(server: HealthServer, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_the_health_server_serves_the_answers(
    served: tuple[HealthServer, list[str | None], ProbedApi, ApiServerProbe],
) -> None:
    server, why, api, probe = served
    assert get(server, "/healthz") == (200, "ok")
    assert get(server, "/readyz") == (200, "ok: scheduling")
    why[0] = "stuck"
    assert get(server, "/healthz")[0] == 500
    assert get(server, "/livez") == (200, "ok")
    why[0] = None
    api.answer = ApiError("GET", "/readyz", 0, b"connection refused")
    probe.probe_once()
    code, body = get(server, "/readyz")
    assert code == 503 and "unreachable" in body
