"""Delegated authentication and authorization of the shim's secure port, as
kube-scheduler does it (k8s.io/apiserver pkg/server/options/authentication.go
``DelegatingAuthenticationOptions`` and authorization.go
``DelegatingAuthorizationOptions``): the API server decides who a caller is
and what it may do.

Authentication, in upstream's order (pkg/authentication/authenticatorfactory
``DelegatingAuthenticatorConfig.New``):

1. a client certificate verified against ``--client-ca-file`` (when given):
   the subject's CN is the user, its O entries the groups (x509.go
   ``CommonNameUserConversion``);
2. ``Authorization: Bearer <token>``: a TokenReview; a token the API server
   does not accept is answered 401 (so is a TokenReview that fails);
3. nothing: the anonymous user ``system:anonymous`` in
   ``system:unauthenticated``, as upstream's delegating config always enables
   anonymous requests (``Anonymous: &AnonymousAuthConfig{Enabled: true}`` in
   ``DelegatingAuthenticationOptions.ApplyTo``); authorization then refuses it
   (403) unless the cluster's RBAC grants it the path.

Authorization (authorizerfactory ``DelegatingAuthorizerConfig`` behind a
union with the path and group authorizers, authorization.go ``toAuthorizer``):
paths in ``--authorization-always-allow-paths`` (default ``/healthz``,
``/readyz``, ``/livez``; a trailing ``*`` matches a prefix) are allowed to
anyone, the group ``system:masters`` is allowed everything, and every other
request is a SubjectAccessReview of the non-resource path with the request's
verb (the method in lower case, as pkg/endpoints/request/requestinfo.go sets
it for non-resource requests). A denial is 403, a review that fails 500.

Answers are cached as upstream caches them: tokens for
``--authentication-token-webhook-cache-ttl`` (10 s, accepted and refused
alike), decisions for ``--authorization-webhook-cache-authorized-ttl`` and
``-unauthorized-ttl`` (10 s each). Each cache holds at most ``CACHE_SIZE``
entries, so callers that send many distinct tokens cost reviews, not memory.

Unlike upstream, a request for an always-allowed path is not authenticated at
all: kubelet probes send no credentials, and a probe must not wait on the API
server.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import orjson

from berth.shim.securedefaults import DEFAULT_ALWAYS_ALLOW_PATHS, DEFAULT_CACHE_TTL

log = logging.getLogger(__name__)

JSON = dict[str, Any]

ANONYMOUS_USER = "system:anonymous"
UNAUTHENTICATED_GROUP = "system:unauthenticated"
AUTHENTICATED_GROUP = "system:authenticated"
# authorization.go NewDelegatingAuthorizationOptions: AlwaysAllowGroups.
MASTERS_GROUP = "system:masters"
# Entries per cache: pkg/authentication/token/cache and the webhook
# authorizer's cache are bounded LRUs too.
CACHE_SIZE = 4096
# authentication.go TokenRequestTimeout, authorization.go ClientTimeout.
REVIEW_TIMEOUT = 10.0

TOKENREVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECTACCESSREVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class ReviewApi(Protocol):
    """What the reviews need of the API client (berth.kube.rest.KubeApi)."""

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        limit: bool = True,
        timeout: float | None = None,
    ) -> JSON: ...


@dataclass(frozen=True, slots=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


ANONYMOUS = User(ANONYMOUS_USER, groups=(UNAUTHENTICATED_GROUP,))


@dataclass(frozen=True, slots=True)
class Refusal:
    """An answer in place of the endpoint's: code and a metav1 Status body,
    worded as the API server words them."""

    code: int
    body: bytes
    content_type: str = "application/json"


def _status(code: int, reason: str, message: str) -> Refusal:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {},
        "code": code,
    }
    return Refusal(code, orjson.dumps(body))


# pkg/endpoints/handlers/responsewriters: Unauthorized and Forbidden.
UNAUTHORIZED = _status(401, "Unauthorized", "Unauthorized")


def forbidden(user: str, verb: str, path: str, reason: str) -> Refusal:
    message = f'forbidden: User "{user}" cannot {verb} path "{path}"'
    if reason:
        message += f": {reason}"
    return _status(403, "Forbidden", message)


K = TypeVar("K")
V = TypeVar("V")


@dataclass
class TTLCache(Generic[K, V]):
    """A bounded LRU whose entries expire; thread-safe."""

    size: int = CACHE_SIZE
    clock: Callable[[], float] = time.monotonic
    _items: OrderedDict[K, tuple[float, V]] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, key: K) -> V | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            expires, value = hit
            if expires <= self.clock():
                del self._items[key]
                return None
            self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        with self._lock:
            self._items[key] = (self.clock() + ttl, value)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def _bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header
    (pkg/authentication/request/bearertoken: the scheme is case-insensitive,
    an empty token is no token)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None


def user_of_certificate(peer: Mapping[str, Any] | None) -> User | None:
    """The user of a verified client certificate (``ssl.getpeercert()``): CN
    the name, O the groups (x509.go CommonNameUserConversion)."""
    if not peer:
        return None
    name = ""
    groups: list[str] = []
    for rdn in peer.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                name = value
            elif key == "organizationName":
                groups.append(value)
    if not name:
        return None
    return User(name, groups=(*groups, AUTHENTICATED_GROUP))


class DelegatedAuth:
    """Decides each request to the secure port (``refuse``)."""

    def __init__(
        self,
        api: ReviewApi,
        *,
        always_allow_paths: Sequence[str] = DEFAULT_ALWAYS_ALLOW_PATHS,
        token_ttl: float = DEFAULT_CACHE_TTL,
        allowed_ttl: float = DEFAULT_CACHE_TTL,
        denied_ttl: float = DEFAULT_CACHE_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._exact = frozenset(p for p in always_allow_paths if not p.endswith("*"))
        self._prefixes = tuple(p[:-1] for p in always_allow_paths if p.endswith("*"))
        self._token_ttl = token_ttl
        self._allowed_ttl = allowed_ttl
        self._denied_ttl = denied_ttl
        # sha256 of the token -> (the user,) or (None,) when refused.
        self._tokens: TTLCache[bytes, tuple[User | None]] = TTLCache(clock=clock)
        self._decisions: TTLCache[tuple[User, str, str], tuple[bool, str]] = TTLCache(clock=clock)
        self.reviews = {"tokenreviews": 0, "subjectaccessreviews": 0}

    def always_allowed(self, path: str) -> bool:
        """pkg/authorization/path ``NewAuthorizer``: exact paths, and prefixes
        given with a trailing ``*``."""
        return path in self._exact or any(path.startswith(p) for p in self._prefixes)

    def refuse(
        self,
        method: str,
        path: str,
        authorization: str | None,
        peer: Mapping[str, Any] | None = None,
    ) -> Refusal | None:
        """None to serve the request, else the answer to send instead."""
        if self.always_allowed(path):
            return None
        user = user_of_certificate(peer)
        if user is None:
            token = _bearer(authorization)
            if token is None:
                user = ANONYMOUS
            else:
                found = self._authenticate(token)
                if found is None:
                    return UNAUTHORIZED
                user = found
        if MASTERS_GROUP in user.groups:
            return None
        verb = method.lower()
        try:
            allowed, reason = self._authorize(user, verb, path)
        except _ReviewFailed as exc:
            log.warning("secure port: %s %s by %s: %s", method, path, user.name, exc)
            return _status(500, "InternalError", f"Internal error occurred: {exc}")
        if allowed:
            return None
        log.debug("secure port: %s %s refused to %s: %s", method, path, user.name, reason)
        return forbidden(user.name, verb, path, reason)

    def _authenticate(self, token: str) -> User | None:
        key = hashlib.sha256(token.encode()).digest()
        cached = self._tokens.get(key)
        if cached is not None:
            return cached[0]
        review = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        self.reviews["tokenreviews"] += 1
        try:
            answer = self._api.request(
                "POST", TOKENREVIEWS, body=review, limit=False, timeout=REVIEW_TIMEOUT
            )
        except Exception as exc:
            # Upstream answers a failed TokenReview 401 too (and does not cache it).
            log.warning("secure port: TokenReview failed, request refused: %s", exc)
            return None
        status = answer.get("status") or {}
        user: User | None = None
        if status.get("authenticated"):
            info = status.get("user") or {}
            extra = info.get("extra") or {}
            user = User(
                str(info.get("username") or ""),
                str(info.get("uid") or ""),
                tuple(str(g) for g in info.get("groups") or ()),
                tuple(sorted((str(k), tuple(str(x) for x in v or ())) for k, v in extra.items())),
            )
            if not user.name:
                user = None
        self._tokens.put(key, (user,), self._token_ttl)
        return user

    def _authorize(self, user: User, verb: str, path: str) -> tuple[bool, str]:
        key = (user, verb, path)
        cached = self._decisions.get(key)
        if cached is not None:
            return cached
        spec: JSON = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        self.reviews["subjectaccessreviews"] += 1
        try:
            answer = self._api.request(
                "POST", SUBJECTACCESSREVIEWS, body=review, limit=False, timeout=REVIEW_TIMEOUT
            )
        except Exception as exc:
            raise _ReviewFailed(f"SubjectAccessReview failed: {exc}") from exc
        status = answer.get("status") or {}
        decision = (bool(status.get("allowed")), str(status.get("reason") or ""))
        if status.get("evaluationError") and not decision[0]:
            log.debug("SubjectAccessReview evaluation error: %s", status["evaluationError"])
        self._decisions.put(key, decision, self._allowed_ttl if decision[0] else self._denied_ttl)
        return decision


class _ReviewFailed(Exception):
    pass


__all__ = [
    "ANONYMOUS_USER",
    "CACHE_SIZE",
    "DEFAULT_ALWAYS_ALLOW_PATHS",
    "DEFAULT_CACHE_TTL",
    "SUBJECTACCESSREVIEWS",
    "TOKENREVIEWS",
    "DelegatedAuth",
    "Refusal",
    "ReviewApi",
    "TTLCache",
    "User",
    "user_of_certificate",
]
