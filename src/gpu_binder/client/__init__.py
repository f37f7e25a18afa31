"""The client interface the binder, webhook and agent talk through, and its errors."""

from gpu_binder.client.errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
)
from gpu_binder.client.interface import Client, ListResult, WatchEvent

__all__ = [
    "AlreadyExists",
    "ApiError",
    "Client",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "ListResult",
    "NotFound",
    "WatchEvent",
]
