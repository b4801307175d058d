"""The hook directory: where the dispatcher finds a pair's hooks and books their health.

Resolution and bookkeeping live behind one small port so the dispatcher
works the same over the memory board and the host's ``notify_hooks`` table.
The disable threshold is an argument (``DeliveryPolicy.disable_after``), so
the number is written once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

import attrs

from adapters.memory import BoardError, Hook, MemoryBoard

__all__ = ["HookDirectory", "HookHealth", "HookTarget", "MemoryHooks"]


@attrs.frozen(kw_only=True)
class HookTarget:
    """One enabled hook to deliver to; its URL and secret stay out of reprs and logs."""

    id: str
    endpoint_id: str
    url: str = attrs.field(repr=False)
    secret: str = attrs.field(repr=False)


@attrs.frozen(kw_only=True)
class HookHealth:
    """A hook's standing after a failure was booked."""

    consecutive_failures: int
    enabled: bool


class HookDirectory(Protocol):
    """The host's notify hooks, as the dispatcher needs them."""

    async def hooks_covering(self, endpoint_id: str, queue: str) -> Sequence[HookTarget]:
        """The endpoint's enabled hooks whose queue filter covers ``queue`` (None = all), by id."""
        ...

    async def record_success(self, hook_id: str) -> None:
        """Book a delivered message: the consecutive failure count goes back to 0."""
        ...

    async def record_failure(
        self, hook_id: str, *, at: datetime, reason: str, disable_after: int
    ) -> HookHealth | None:
        """Book a failed delivery atomically; the ``disable_after``-th in a row disables the hook.

        Disabling sets ``enabled`` false, ``disabled_at = at`` and
        ``disabled_reason = reason``; an already disabled hook keeps its
        original reason and time. Returns None when the hook no longer exists.
        """
        ...


def _target(hook: Hook) -> HookTarget:
    return HookTarget(id=hook.id, endpoint_id=hook.endpoint_id, url=hook.url, secret=hook.secret)


class MemoryHooks:
    """The hook directory over a ``MemoryBoard``; each verb applies without awaiting."""

    def __init__(self, board: MemoryBoard) -> None:
        self._board = board

    async def hooks_covering(self, endpoint_id: str, queue: str) -> tuple[HookTarget, ...]:
        return tuple(_target(hook) for hook in self._board.hooks_covering(endpoint_id, queue))

    async def record_success(self, hook_id: str) -> None:
        try:
            self._board.record_hook_delivery(hook_id, ok=True)
        except BoardError:
            return  # the hook was deleted while its message was in flight

    async def record_failure(
        self, hook_id: str, *, at: datetime, reason: str, disable_after: int
    ) -> HookHealth | None:
        try:
            hook = self._board.record_hook_delivery(hook_id, ok=False)
        except BoardError:
            return None
        if hook.enabled and hook.consecutive_failures >= disable_after:
            hook = self._board.set_hook_enabled(hook_id, False, at=at, reason=reason)
        return HookHealth(consecutive_failures=hook.consecutive_failures, enabled=hook.enabled)


def _conforms(hooks: MemoryHooks) -> HookDirectory:
    """mypy checks here that the memory directory satisfies the port."""
    return hooks
