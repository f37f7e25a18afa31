"""Raw HTTPS requests to the control plane's apiserver, answered whatever their status."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .process import ControlPlaneError


@dataclass(frozen=True)
class ApiResponse:
    """A raw answer of the apiserver (any status; nothing is raised for 4xx/5xx)."""

    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        return json.loads(self.body)


# (method, path, body) -> the answer, as the admin.
Request = Callable[[str, str, Any], ApiResponse]


def request(
    url: str,
    ctx: ssl.SSLContext,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = "application/json",
    timeout: float = 30.0,
) -> ApiResponse:
    """One HTTPS request to url + path; ``body`` (if not bytes) is sent as JSON."""
    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method)
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=timeout) as resp:
            return ApiResponse(resp.status, resp.read(), dict(resp.headers.items()))
    except urllib.error.HTTPError as e:
        return ApiResponse(e.code, e.read(), dict(e.headers.items()))


def raise_unless_ok(resp: ApiResponse, what: str) -> None:
    if not resp.ok:
        try:
            message = resp.json().get("message", "")
        except ValueError:
            message = resp.body[:500].decode(errors="replace")
        raise ControlPlaneError(f"{what}: HTTP {resp.status}: {message}")
