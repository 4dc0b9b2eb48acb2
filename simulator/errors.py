"""The error envelope as an exception the routes turn into a response."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error answered as ``{"error", "message"[, "next_action"]}``."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        next_action: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.next_action = next_action
        self.extra = dict(extra or {})

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.next_action is not None:
            out["next_action"] = self.next_action
            out["retryable"] = True
        out.update(self.extra)
        return out


def reference_error(status: int, code: str, message: str) -> ApiError:
    """A changed, invalid or expired reference: the client must search again."""
    return ApiError(status, code, message, next_action="search_knowledge")
