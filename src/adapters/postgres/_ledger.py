"""The Postgres nudge ledger: one statement decides, charges and deletes."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import asyncpg

from adapters._sql import queries
from stall_core import (
    QUARANTINE_QUEUE,
    ChargeOutcome,
    LedgerRow,
    Nudge,
    PacingPolicy,
    PairKey,
    PairState,
    PairStatus,
    TodoRef,
    aware,
    pair_status,
)

from ._errors import as_ledger_error

if TYPE_CHECKING:
    from stall_core import LedgerPort

__all__ = ["PostgresLedger", "charge_due_parameters"]

_SQL = queries("adapters.postgres", "ledger.sql")


class PostgresLedger:
    """LedgerPort over switchboard's tables and our ``queue_stall_nudges``.

    Safe with any number of instances on one database: ``charge_due`` is a
    single statement whose ON CONFLICT clause re-checks the due predicate on
    the locked row, so only one instance gets each charge back.
    """

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def charge_due(self, *, now: datetime, policy: PacingPolicy) -> ChargeOutcome:
        aware("now", now)
        with as_ledger_error("charging due pairs failed"):
            rows = await self._pool.fetch(_SQL["charge_due"], *charge_due_parameters(now, policy))
        charged = tuple(
            Nudge(
                endpoint_id=r["endpoint_id"],
                queue=r["queue"],
                todo=TodoRef(id=r["todo_id"], created_at=r["created_at"], title=r["title"]),
                number=r["nudges"],
                charged_at=now,
            )
            for r in rows
            if r["kind"] == "charge"
        )
        deleted = tuple(
            sorted((r["endpoint_id"], r["queue"]) for r in rows if r["kind"] == "delete")
        )
        return ChargeOutcome(charged=charged, deleted=deleted)

    async def ledger_rows(self) -> Mapping[PairKey, LedgerRow]:
        """Every ledger row, keyed by pair."""
        with as_ledger_error("reading the ledger failed"):
            rows = await self._pool.fetch(_SQL["ledger_rows"])
        return {
            (r["endpoint_id"], r["queue"]): LedgerRow(
                endpoint_id=r["endpoint_id"],
                queue=r["queue"],
                nudges=r["nudges"],
                last_nudged_at=r["last_nudged_at"],
            )
            for r in rows
        }

    async def status(self, *, now: datetime, policy: PacingPolicy) -> list[PairStatus]:
        """Every pair with pending work or a ledger row, judged by the sweep's own decision."""
        aware("now", now)
        with as_ledger_error("reading the queue status failed"):
            rows = await self._pool.fetch(_SQL["pair_status"])
        return [
            pair_status(
                PairState(
                    endpoint_id=r["endpoint_id"],
                    queue=r["queue"],
                    oldest=None
                    if r["todo_id"] is None
                    else TodoRef(id=r["todo_id"], created_at=r["created_at"], title=r["title"]),
                    endpoint_active=r["endpoint_active"],
                    has_receiver=r["has_receiver"],
                    last_claimed_at=r["last_claimed_at"],
                ),
                None
                if r["nudges"] is None
                else LedgerRow(
                    endpoint_id=r["endpoint_id"],
                    queue=r["queue"],
                    nudges=r["nudges"],
                    last_nudged_at=r["last_nudged_at"],
                ),
                pending_gated=r["gated"],
                pending_ungated=r["ungated"],
                now=now,
                policy=policy,
            )
            for r in rows
        ]


def charge_due_parameters(now: datetime, policy: PacingPolicy) -> tuple[object, ...]:
    """$1..$6 of ledger.sql's charge_due: every number from the policy, none written twice.

    Durations go as whole microseconds: an interval with a days field would be
    added as calendar days in the session time zone.
    """
    return (
        now,
        _microseconds(policy.threshold),
        [_microseconds(step) for step in policy.backoff],
        policy.cap,
        policy.tick_limit,
        QUARANTINE_QUEUE,
    )


def _microseconds(delta: timedelta) -> int:
    return delta // timedelta(microseconds=1)


def _conforms(ledger: PostgresLedger) -> LedgerPort:
    """mypy checks here that PostgresLedger satisfies the core's LedgerPort."""
    return ledger
