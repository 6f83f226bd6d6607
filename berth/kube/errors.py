"""What a request to the API server raises: the answer's status, reason and message
(a ``Status`` object, k8s.io/apimachinery/pkg/apis/meta/v1 types.go), and what the caller
should make of it (k8s.io/apimachinery/pkg/api/errors/errors.go, ``IsNotFound``,
``IsConflict``, ``IsGone``, ...)."""

from __future__ import annotations

import orjson


class ApiError(Exception):
    """The API server answered with an error status (or could not be reached:
    ``status`` 0)."""

    def __init__(self, method: str, path: str, status: int, body: bytes = b"") -> None:
        self.method = method
        self.path = path
        self.status = status
        self.reason = ""
        # The fields a 422 Invalid names (Status.details.causes[].field).
        self.fields: tuple[str, ...] = ()
        message = body.decode(errors="replace")[:500]
        try:
            parsed = orjson.loads(body) if body else None
            if isinstance(parsed, dict):
                self.reason = str(parsed.get("reason", ""))
                message = str(parsed.get("message", message))
                details = parsed.get("details")
                if isinstance(details, dict) and isinstance(details.get("causes"), list):
                    self.fields = tuple(
                        str(c.get("field", "")) for c in details["causes"] if isinstance(c, dict)
                    )
        except orjson.JSONDecodeError:
            pass
        self.message = message
        where = "unreachable" if status == 0 else f"HTTP {status} {self.reason}"
        super().__init__(f"{method} {path} -> {where}: {message}")

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def uid_mismatch(self) -> bool:
        """A write that named the object's uid (``metadata.uid`` in a patch)
        found another object under that name: 422 Invalid on metadata.uid,
        which may not change. The object the writer meant is gone."""
        return self.status == 422 and "metadata.uid" in self.fields

    @property
    def temporary(self) -> bool:
        """Worth retrying: the server is unreachable, overloaded or restarting."""
        return self.status in (0, 429, 500, 502, 503, 504)


class WatchStalled(ApiError):
    """A watch stream stayed silent past its idle timeout: taken for dead."""

    def __init__(self, path: str, idle: float) -> None:
        super().__init__("WATCH", path, 0)
        self.idle = idle
        self.message = (
            f"no data for {idle:g}s, not even the end of the watch: the connection is "
            "taken for dead"
        )
        self.args = (f"WATCH {path}: {self.message}",)


__all__ = ["ApiError", "WatchStalled"]
