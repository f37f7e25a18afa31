"""Bind requests' answers, as this process's world receives them: one watch for every
waiting admission.

Each admission used to watch the namespace's GPUBindRequests itself until its own was
answered: a burst of N starts opened N watches, each sent every request's events, N² for
the API server to send and this process to parse, and a TLS handshake per admission. The
process already watches every GPUBindRequest for its world (the leader's answers enter it
by write-through as soon as they are written); the webhook waits on that. The leader's
own requests, handed to its reconciler in memory (World.asked), are answered here too
(Reconciler.on_answer), or abandoned when it stops leading.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from gpu_binder.api.types import GPUBindRequest, RequestPhase

# "abandoned": an in-memory request no one will answer, its process no longer leading.
Answer = GPUBindRequest | Literal["deleted", "abandoned"]


class Answers:
    """Futures of the bind requests admissions wait for, resolved by `seen`."""

    def __init__(self) -> None:
        self._waiting: dict[str, list[asyncio.Future[Answer]]] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    async def wait(self, created: GPUBindRequest, current: GPUBindRequest | None) -> Answer:
        """The answer to `created` (or "deleted"); `current` is the request as the world
        holds it now, which may be answered already. Cancel it to stop waiting."""
        key = _key(created)
        if current is not None and current.status.phase != RequestPhase.PENDING:
            return current
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(future)
        try:
            return await future
        finally:
            waiting = self._waiting.get(key, [])
            if future in waiting:
                waiting.remove(future)
            if not waiting:
                self._waiting.pop(key, None)

    def seen(self, request: GPUBindRequest, deleted: bool) -> None:
        """A change of a bind request reached the world: wake whoever waits for its answer."""
        waiting = self._waiting.get(_key(request))
        if not waiting:
            return
        if deleted:
            answer: Answer = "deleted"
        elif request.status.phase != RequestPhase.PENDING:
            answer = request
        else:
            return
        self._wake(waiting, answer)

    def abandon(self, request: GPUBindRequest) -> None:
        """No answer will come to this in-memory request: wake whoever waits for it."""
        waiting = self._waiting.get(_key(request))
        if waiting:
            self._wake(waiting, "abandoned")

    @staticmethod
    def _wake(waiting: list[asyncio.Future[Answer]], answer: Answer) -> None:
        for future in waiting:
            if not future.done():
                future.set_result(answer)


def _key(request: GPUBindRequest) -> str:
    return f"{request.metadata.namespace}/{request.metadata.name}"
