"""The HTTP wake: signed todo.ready deliveries to the host's notify hooks (SPEC-0024, -0038).

``HookDispatcher`` is the ``stall_core.WakePort`` the sweep drives, and the
one path for the host's ``created`` and ``requeued`` wakes too. It finds
hooks through a ``stall_core.HookDirectory``: ``adapters.memory.MemoryHooks``
over the memory board, or ``adapters.postgres.PostgresHooks`` over the host's
``notify_hooks`` table (the composition root picks one).
docs/architecture.md is the consumer's side of the contract.
"""

from ._address import (
    METADATA_HOSTS,
    RANGES,
    AddressRefused,
    AddressRefusedError,
    GuardedResolver,
    address_refusal,
    check_host,
    guarded_socket,
)
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
from ._retry import is_delivered, is_retryable, parse_retry_after, retry_delay
from ._signing import (
    HookRefused,
    MalformedSecret,
    UnsupportedUrl,
    check_text,
    parse_secret,
    safe_url,
    sign,
    signed_headers,
)

__all__ = [
    "CREATED",
    "METADATA_HOSTS",
    "RANGES",
    "REQUEUED",
    "STALLED",
    "AddressRefused",
    "AddressRefusedError",
    "DeliveryPolicy",
    "DispatchStats",
    "GuardedResolver",
    "HookDispatcher",
    "HookRefused",
    "MalformedSecret",
    "ReadyMessage",
    "ReadyMeta",
    "ReadyTodo",
    "UnsupportedUrl",
    "address_refusal",
    "check_host",
    "check_text",
    "decode_message",
    "encode_message",
    "guarded_socket",
    "is_delivered",
    "is_retryable",
    "parse_retry_after",
    "parse_secret",
    "retry_delay",
    "safe_url",
    "sign",
    "signed_headers",
]
