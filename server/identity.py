"""Who is calling: the identity a caller's cluster states are kept under.

A replica keys each cached snapshot by (caller, cluster_id) (server/state.py),
so a caller who learns another's cluster_id reaches only a snapshot of its
own under that id, never the other's. The caller is, in order:

1. the subject of its client certificate, when the server runs mTLS
   (``--tls-client-ca``): ``x509:<subject>``; the TLS handshake proved it;
2. else the secret token it sends in the ``berth-caller-token`` metadata.
   With ``--caller-tokens FILE`` the token must be one the file lists
   (compared in constant time, hmac.compare_digest) and the caller is
   ``token:<name>``; an unknown token is UNAUTHENTICATED. Without the file a
   caller picks its token itself (berth's client: a random one per process
   unless told one) and the caller is a digest of it: knowing a cluster_id
   is not enough to reach its state, knowing the token is;
3. else ``anonymous``, shared by every caller that sends neither (such
   callers are not told apart, and reach each other's state by cluster_id).

Neither tokens nor identities are logged.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from berth.server import errors
from berth.server.state import ANONYMOUS

# The metadata key of a caller's token (protos/README.md, "Callers").
TOKEN_METADATA = "berth-caller-token"
# Longest token taken; longer ones are refused (a token is a short secret).
MAX_TOKEN_CHARS = 512


class CallerTokensError(ValueError):
    """--caller-tokens names a file that does not load."""


def load_tokens(path: Path) -> dict[str, str]:
    """``--caller-tokens FILE``: one ``NAME TOKEN`` pair a line; blank lines
    and lines starting with ``#`` are skipped. Names and tokens must be unique;
    tokens at least 16 characters."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise CallerTokensError(f"--caller-tokens {path}: cannot read it: {exc}") from exc
    tokens: dict[str, str] = {}
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        where = f"--caller-tokens {path}, line {number}"
        if len(parts) != 2:
            raise CallerTokensError(f"{where}: want 'NAME TOKEN', got {len(parts)} fields")
        name, token = parts
        if name in tokens:
            raise CallerTokensError(f"{where}: caller {name!r} appears twice")
        if len(token) < 16 or len(token) > MAX_TOKEN_CHARS:
            raise CallerTokensError(
                f"{where}: the token of {name!r} must have 16 to {MAX_TOKEN_CHARS} characters"
            )
        if token in seen:
            raise CallerTokensError(f"{where}: the token of {name!r} is another caller's too")
        seen.add(token)
        tokens[name] = token
    if not tokens:
        raise CallerTokensError(f"--caller-tokens {path}: lists no caller")
    return tokens


class Callers:
    """Tells callers apart (module docstring)."""

    def __init__(self, tokens: Mapping[str, str] | None = None) -> None:
        self._tokens = [(name, token.encode()) for name, token in (tokens or {}).items()]

    @property
    def closed(self) -> bool:
        """Only the tokens of --caller-tokens are taken."""
        return bool(self._tokens)

    def identify(self, context: Any) -> str:
        """The caller of a call (its ServicerContext); ServiceError
        UNAUTHENTICATED for a token the server does not know."""
        subject = _peer_subject(context)
        if subject:
            return "x509:" + subject
        token = _token(context)
        if token is None:
            if self.closed:
                raise errors.unauthenticated(
                    f"no {TOKEN_METADATA} metadata: this server takes only the callers of its "
                    "--caller-tokens file; send your token in that metadata"
                )
            return ANONYMOUS
        if len(token) > MAX_TOKEN_CHARS:
            raise errors.unauthenticated(
                f"{TOKEN_METADATA}: longer than {MAX_TOKEN_CHARS} bytes; send the token you "
                "were given"
            )
        if self.closed:
            found = ""
            # Every entry compared, in constant time each, whatever matches.
            for name, known in self._tokens:
                if hmac.compare_digest(known, token):
                    found = name
            if not found:
                raise errors.unauthenticated(
                    f"{TOKEN_METADATA}: not a token of this server's --caller-tokens file; "
                    "check the token the caller was given"
                )
            return "token:" + found
        return "token:" + hashlib.sha256(token).hexdigest()


def _peer_subject(context: Any) -> str:
    """The verified client certificate's subject (mTLS), or ""."""
    auth = getattr(context, "auth_context", None)
    if auth is None:
        return ""
    props: Mapping[str, Any] = auth() or {}
    for key in ("x509_subject", "x509_common_name"):
        values = props.get(key)
        if values:
            first = values[0]
            return first.decode("utf-8", "replace") if isinstance(first, bytes) else str(first)
    return ""


def _token(context: Any) -> bytes | None:
    meta = getattr(context, "invocation_metadata", None)
    for key, value in (meta() if meta is not None else None) or ():
        if key == TOKEN_METADATA:
            return value.encode() if isinstance(value, str) else bytes(value)
    return None


__all__ = ["TOKEN_METADATA", "CallerTokensError", "Callers", "load_tokens"]
