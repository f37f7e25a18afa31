"""API errors as types, so callers branch on what happened rather than on status codes."""

from __future__ import annotations


class ApiError(Exception):
    """An error answered by the API server (or its in-memory stand-in)."""

    code = 500
    reason = "InternalError"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(ApiError):
    code = 404
    reason = "NotFound"


class Conflict(ApiError):
    """A write carried a stale resourceVersion: someone wrote between our read and write."""

    code = 409
    reason = "Conflict"


class AlreadyExists(ApiError):
    code = 409
    reason = "AlreadyExists"


class Invalid(ApiError):
    code = 422
    reason = "Invalid"


class Forbidden(ApiError):
    code = 403
    reason = "Forbidden"


class Gone(ApiError):
    """The watch's resourceVersion is too old: relist and diff."""

    code = 410
    reason = "Expired"


def from_status(code: int, message: str, reason: str = "") -> ApiError:
    """The typed error for an HTTP status the API server answered."""
    if code == 404:
        return NotFound(message)
    if code == 409:
        return AlreadyExists(message) if reason == "AlreadyExists" else Conflict(message)
    if code == 410:
        return Gone(message)
    if code == 422:
        return Invalid(message)
    if code == 403:
        return Forbidden(message)
    err = ApiError(message)
    err.code = code
    return err
