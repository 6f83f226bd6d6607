"""The secure port's delegated authentication and authorization (shim/delegation.py) against
a fake review API: who a request is, what is asked of the API server, what is cached and for
how long, and how refusals are worded (k8s.io/apiserver DelegatingAuthenticationOptions and
DelegatingAuthorizationOptions). The real API server's answers: tests/integration/
test_shim_secure_port.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from berth.shim.delegation import (
    ANONYMOUS_USER,
    CACHE_SIZE,
    SUBJECTACCESSREVIEWS,
    TOKENREVIEWS,
    DelegatedAuth,
    TTLCache,
    user_of_certificate,
)

JSON = dict[str, Any]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeReviews:
    """TokenReview: tokens in ``users`` are those users. SubjectAccessReview: allowed when
    (user, verb, path) is in ``grants``."""

    def __init__(self) -> None:
        self.users: dict[str, JSON] = {}
        self.grants: set[tuple[str, str, str]] = set()
        self.calls: list[tuple[str, JSON]] = []
        self.fail = False

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        limit: bool = True,
        timeout: float | None = None,
    ) -> JSON:
        assert method == "POST" and not limit and timeout
        self.calls.append((path, body))
        if self.fail:
            raise OSError("connection refused")
        if path == TOKENREVIEWS:
            user = self.users.get(body["spec"]["token"])
            return {"status": {"authenticated": True, "user": user} if user else {}}
        assert path == SUBJECTACCESSREVIEWS
        spec = body["spec"]
        attrs = spec["nonResourceAttributes"]
        allowed = (spec["user"], attrs["verb"], attrs["path"]) in self.grants
        return {"status": {"allowed": allowed, "reason": "" if allowed else "no RBAC policy"}}

    def count(self, path: str) -> int:
        return sum(1 for p, _ in self.calls if p == path)


@pytest.fixture
def api() -> FakeReviews:
    api = FakeReviews()
    api.users["good"] = {
        "username": "system:serviceaccount:monitoring:prometheus",
        "uid": "u-1",
        "groups": ["system:serviceaccounts", "system:authenticated"],
        "extra": {"authentication.kubernetes.io/pod-name": ["prom-0"]},
    }
    api.users["admin"] = {"username": "root", "groups": ["system:masters"]}
    api.grants.add(("system:serviceaccount:monitoring:prometheus", "get", "/metrics"))
    return api


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def auth(api: FakeReviews, clock: Clock) -> DelegatedAuth:
    return DelegatedAuth(api, clock=clock)


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/livez"])
def test_always_allow_paths_need_no_credentials_and_no_review(
    auth: DelegatedAuth, api: FakeReviews, path: str
) -> None:
    """authorization.go NewDelegatingAuthorizationOptions: AlwaysAllowPaths."""
    assert auth.refuse("GET", path, None) is None
    assert auth.refuse("GET", path, "Bearer nonsense") is None
    assert api.calls == []


def test_always_allow_prefix_with_a_star(api: FakeReviews) -> None:
    auth = DelegatedAuth(api, always_allow_paths=["/debug/*"])
    assert auth.refuse("GET", "/debug/pprof/heap", None) is None
    assert auth.refuse("GET", "/healthz", None) is not None  # not listed any more


def test_no_token_is_the_anonymous_user_and_forbidden(
    auth: DelegatedAuth, api: FakeReviews
) -> None:
    """Upstream's delegating authenticator always allows anonymous requests; the
    SubjectAccessReview then decides (403, worded as the API server words it)."""
    refusal = auth.refuse("GET", "/metrics", None)
    assert refusal is not None and refusal.code == 403
    status = json.loads(refusal.body)
    assert status["reason"] == "Forbidden" and status["code"] == 403
    assert status["message"].startswith(
        f'forbidden: User "{ANONYMOUS_USER}" cannot get path "/metrics"'
    )
    ((path, review),) = api.calls
    assert path == SUBJECTACCESSREVIEWS
    assert review["spec"]["user"] == ANONYMOUS_USER
    assert review["spec"]["groups"] == ["system:unauthenticated"]


def test_an_unknown_token_is_401_and_asks_for_no_authorization(
    auth: DelegatedAuth, api: FakeReviews
) -> None:
    refusal = auth.refuse("GET", "/metrics", "Bearer stolen")
    assert refusal is not None and refusal.code == 401
    assert json.loads(refusal.body)["reason"] == "Unauthorized"
    assert api.count(SUBJECTACCESSREVIEWS) == 0


def test_an_allowed_token_is_served_and_the_review_carries_the_whole_user(
    auth: DelegatedAuth, api: FakeReviews
) -> None:
    assert auth.refuse("GET", "/metrics", "Bearer good") is None
    (sar,) = [b for p, b in api.calls if p == SUBJECTACCESSREVIEWS]
    assert sar["spec"] == {
        "user": "system:serviceaccount:monitoring:prometheus",
        "uid": "u-1",
        "groups": ["system:serviceaccounts", "system:authenticated"],
        "extra": {"authentication.kubernetes.io/pod-name": ["prom-0"]},
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }
    # Another path, or another verb, is another question.
    refusal = auth.refuse("GET", "/debug", "bearer good")
    assert refusal is not None and refusal.code == 403
    refusal = auth.refuse("HEAD", "/metrics", "Bearer good")
    assert refusal is not None and refusal.code == 403


def test_system_masters_need_no_subject_access_review(
    auth: DelegatedAuth, api: FakeReviews
) -> None:
    """authorization.go: AlwaysAllowGroups system:masters."""
    assert auth.refuse("GET", "/metrics", "Bearer admin") is None
    assert api.count(SUBJECTACCESSREVIEWS) == 0


def test_answers_are_cached_for_their_ttl(
    auth: DelegatedAuth, api: FakeReviews, clock: Clock
) -> None:
    """10 s for tokens (accepted and refused) and decisions, as upstream's delegating
    defaults."""
    for _ in range(3):
        assert auth.refuse("GET", "/metrics", "Bearer good") is None
        assert auth.refuse("GET", "/metrics", "Bearer stolen") is not None
        assert auth.refuse("GET", "/metrics", None) is not None
    assert api.count(TOKENREVIEWS) == 2
    assert api.count(SUBJECTACCESSREVIEWS) == 2
    clock.now += 9.9
    auth.refuse("GET", "/metrics", "Bearer good")
    assert api.count(TOKENREVIEWS) == 2
    clock.now += 0.2
    auth.refuse("GET", "/metrics", "Bearer good")
    auth.refuse("GET", "/metrics", "Bearer stolen")
    auth.refuse("GET", "/metrics", None)
    assert api.count(TOKENREVIEWS) == 4
    assert api.count(SUBJECTACCESSREVIEWS) == 4


def test_a_failed_token_review_is_401_and_not_cached(auth: DelegatedAuth, api: FakeReviews) -> None:
    api.fail = True
    refusal = auth.refuse("GET", "/metrics", "Bearer good")
    assert refusal is not None and refusal.code == 401
    api.fail = False
    assert auth.refuse("GET", "/metrics", "Bearer good") is None


def test_a_failed_subject_access_review_is_500(auth: DelegatedAuth, api: FakeReviews) -> None:
    api.fail = True
    refusal = auth.refuse("GET", "/metrics", None)
    assert refusal is not None and refusal.code == 500
    assert "SubjectAccessReview failed" in json.loads(refusal.body)["message"]


def test_many_distinct_tokens_cost_reviews_not_memory(auth: DelegatedAuth) -> None:
    for i in range(CACHE_SIZE + 100):
        auth.refuse("GET", "/metrics", f"Bearer t{i}")
    assert len(auth._tokens) == CACHE_SIZE


def test_ttl_cache_evicts_the_least_recently_used(clock: Clock) -> None:
    cache: TTLCache[str, int] = TTLCache(size=2, clock=clock)
    cache.put("a", 1, 10)
    cache.put("b", 2, 10)
    assert cache.get("a") == 1
    cache.put("c", 3, 10)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)


def test_client_certificate_user_is_cn_and_groups_are_o() -> None:
    """x509.go CommonNameUserConversion."""
    peer = {
        "subject": (
            (("commonName", "scraper"),),
            (("organizationName", "metrics"),),
            (("organizationName", "ops"),),
        )
    }
    user = user_of_certificate(peer)
    assert user is not None
    assert user.name == "scraper"
    assert user.groups == ("metrics", "ops", "system:authenticated")
    assert user_of_certificate(None) is None
    assert user_of_certificate({"subject": ((("organizationName", "x"),),)}) is None
