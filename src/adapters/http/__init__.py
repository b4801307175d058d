"""The HTTP wake: signed todo.ready deliveries to the host's notify hooks (SPEC-0024, -0038).

``HookDispatcher`` is the ``stall_core.WakePort`` the sweep drives, and the
one path for the host's ``created`` and ``requeued`` wakes too. It finds
hooks through a ``stall_core.HookDirectory``: ``adapters.memory.MemoryHooks``
over the memory board, or ``adapters.postgres.PostgresHooks`` over the host's
``notify_hooks`` table (the composition root picks one).
docs/wake-contract.md is the consumer's side of the contract.
"""

from ._dispatcher import DispatchStats, HookDispatcher
from ._message import (
    CREATED,
    REQUEUED,
    STALLED,
    ReadyMessage,
    ReadyMeta,
    ReadyTodo,
    decode_message,
    encode_message,
)
from ._policy import DeliveryPolicy
from ._signing import (
    HookRefused,
    MalformedSecret,
    UnsupportedUrl,
    parse_secret,
    safe_url,
    sign,
    signed_headers,
)

__all__ = [
    "CREATED",
    "REQUEUED",
    "STALLED",
    "DeliveryPolicy",
    "DispatchStats",
    "HookDispatcher",
    "HookRefused",
    "MalformedSecret",
    "ReadyMessage",
    "ReadyMeta",
    "ReadyTodo",
    "UnsupportedUrl",
    "decode_message",
    "encode_message",
    "parse_secret",
    "safe_url",
    "sign",
    "signed_headers",
]
