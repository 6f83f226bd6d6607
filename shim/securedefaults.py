"""The secure port's defaults, as kube-scheduler's flags have them: read by the
``berth shim`` parser (its help), the secure port's options (shim/serving.py) and its
delegated authn/authz (shim/delegation.py), without importing either module."""

from __future__ import annotations

# authorization.go NewDelegatingAuthorizationOptions: AlwaysAllowPaths.
DEFAULT_ALWAYS_ALLOW_PATHS = ("/healthz", "/readyz", "/livez")
# authentication.go NewDelegatingAuthenticationOptions (CacheTTL) and
# authorization.go NewDelegatingAuthorizationOptions (AllowCacheTTL, DenyCacheTTL).
DEFAULT_CACHE_TTL = 10.0

__all__ = ["DEFAULT_ALWAYS_ALLOW_PATHS", "DEFAULT_CACHE_TTL"]
