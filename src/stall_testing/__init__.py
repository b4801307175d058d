"""Test support for stall-nudge, not product: what a test of the sweep (ours or yours) needs.

- ``FakeClock`` and ``T0``: the one test clock, a ledger's time authority
  moved by hand (``MemoryBoard(clock=...)``, ``PostgresLedger(pool, clock=...)``).
- ``RecordingWake``: a wake port that records what reached a receiver.
- ``Receiver`` / ``Received``: notify hooks on loopback (aiohttp) that verify
  each request's signature with its hook's secret, record it and answer as
  the test says (a status, the next few, a held answer).
- ``PostgresHost``: the reference host's verbs on the reference schema
  (``stall-nudge migrate --host-schema``), as switchboard makes them.
- ``HostVerbs`` / ``BoardDriver``: the verbs both reference hosts offer, and
  the board the contract scenarios drive; ``MemoryDriver`` and
  ``PostgresDriver`` implement it.
- ``stall_testing.contract.LedgerContract``: the SPEC-0038 scenarios, run
  against any driver (docs/reliability.md, "Running the contract suite").
- ``create_database``, ``drop_database``, ``with_database``,
  ``embedded_postgres``: throwaway databases and a throwaway server.
- ``parse_todo_ready``: a tolerant reader of the ``todo_ready`` payload, for
  a host's LISTEN loop and its tests.
- ``skewed_env``: the environment of a child process on a shifted wall clock
  (libfaketime from its wheel), for clock-skew tests.

Product code (``stall_core``, ``stall_sim``, ``adapters``, ``stall_nudge``) never
imports this package (import-linter holds it); the scratch server and
databases come from ``stall_nudge.scratch``, which the demo uses too.
"""

from stall_nudge.scratch import (
    EmbeddedUnavailable,
    create_database,
    drop_database,
    embedded_postgres,
    with_database,
)

from ._clock import T0, FakeClock
from ._driver import (
    INERT_HOOK_SECRET,
    INERT_HOOK_URL,
    BoardDriver,
    HostVerbs,
    MemoryDriver,
    Operated,
    PostgresDriver,
)
from ._host import HOST_SQL, HostError, PostgresHost
from ._notify import TODO_READY_CHANNEL, parse_todo_ready
from ._receiver import Received, Receiver
from ._skew import SkewUnavailable, skewed_env
from ._wake import RecordingWake

__all__ = [
    "HOST_SQL",
    "INERT_HOOK_SECRET",
    "INERT_HOOK_URL",
    "T0",
    "TODO_READY_CHANNEL",
    "BoardDriver",
    "EmbeddedUnavailable",
    "FakeClock",
    "HostError",
    "HostVerbs",
    "MemoryDriver",
    "Operated",
    "PostgresDriver",
    "PostgresHost",
    "Received",
    "Receiver",
    "RecordingWake",
    "SkewUnavailable",
    "create_database",
    "drop_database",
    "embedded_postgres",
    "parse_todo_ready",
    "skewed_env",
    "with_database",
]
