"""The in-memory board: the host's tables and our ledger, as plain values.

A real, public adapter: the unit and contract suites drive it, the pacing
simulator replays against it, and embedders can use it to try policies. Its
state is inspectable (``todos``, ``ledger``, ``hooks``, ``rings``), and every
verb either applies whole or raises ``BoardError`` with nothing changed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import TypeVar

import attrs

from stall_core import (
    CLAIMS_LOOKBACK,
    REACHED_NOBODY,
    RECENT_OUTCOMES,
    Charge,
    ChargeOutcome,
    Claim,
    Clock,
    DeliveryOutcome,
    HistoryEntry,
    HistoryPort,
    HookDirectory,
    HookHealth,
    HookTarget,
    LedgerPort,
    LedgerRow,
    NoSuchPair,
    Nudge,
    NudgeNowResult,
    OperatorPort,
    PacingPolicy,
    PairKey,
    PairState,
    PairStatus,
    Silence,
    TodoRef,
    Unreadable,
    aware,
    charge_row,
    claims_read,
    claims_window,
    covers,
    endpoint_active,
    has_departed,
    has_receiver,
    is_receiver,
    latest_claim,
    nudge_now,
    nudge_now_detail,
    pair_status,
    passes_gate,
    plan_tick,
    readable,
    refunded_row,
    reset_row,
    silenced_until,
    swept_recently,
    work_of,
)

__all__ = [
    "BoardError",
    "Delivery",
    "Endpoint",
    "Hook",
    "MemoryBoard",
    "MemoryHooks",
    "Ring",
    "Todo",
]

_T = TypeVar("_T")

#: The most history entries (and, apart, ended silences) one tick prunes, as on Postgres.
PRUNE_BATCH = 100

ENDPOINT_STATES = frozenset({"active", "paused", "disabled"})


class BoardError(ValueError):
    """A verb on the board named something missing or asked an impossible transition."""


@attrs.frozen(kw_only=True)
class Endpoint:
    """An endpoints row; ``name`` is the host's name for it, where the host keeps one."""

    id: str
    state: str = "active"
    name: str | None = None


@attrs.frozen(kw_only=True)
class Delivery:
    id: str
    endpoint_id: str
    verified: bool
    received_at: datetime


@attrs.frozen(kw_only=True)
class Todo:
    """A todos row, every column the host schema has."""

    id: str
    endpoint_id: str
    queue: str
    delivery_id: str | None
    state: str
    title: str | None
    created_at: datetime
    claimed_at: datetime | None = None
    claim_owner: str | None = None
    lease_expires_at: datetime | None = None
    attempt: int = 0
    ring_attempts: int = 0
    last_ringed_at: datetime | None = None


@attrs.frozen(kw_only=True)
class Hook:
    """A notify_hooks row; ``queues`` None covers every queue of the endpoint."""

    id: str
    endpoint_id: str
    url: str
    secret: str
    queues: tuple[str, ...] | None = None
    enabled: bool = True
    consecutive_failures: int = 0
    disabled_at: datetime | None = None
    disabled_reason: str | None = None


@attrs.frozen(kw_only=True)
class Ring:
    """One MCP channel doorbell ring (SPEC-0011), the host's per-todo path."""

    todo_id: str
    at: datetime


class MemoryBoard:
    """Endpoints, deliveries, todos, notify hooks and the nudge ledger, in memory.

    ``clock`` is the board's one time authority, as the database's clock is
    on Postgres: the ledger decides at ``clock()`` and a claim without an
    explicit instant is stamped with it. ``charge_due`` decides with
    ``stall_core.plan_tick`` and applies the result without awaiting, so
    concurrent sweeps on one event loop are serialised exactly as the
    Postgres ledger's tick lock and single statement serialise them.

    Progress is read from the todos as the Postgres ledger reads it: the
    pair's new claims (``stall_core.latest_claim``: inside the claims window,
    from ``lookback`` before the last tick, and not read by that tick), and
    whether the todo its ledger row names is still pending there
    (``stall_core.made_progress``).
    """

    def __init__(
        self,
        *,
        clock: Clock,
        lookback: timedelta = CLAIMS_LOOKBACK,
        history_retention: timedelta = timedelta(days=7),
    ) -> None:
        self._clock = clock
        self._lookback = lookback
        self._history_retention = history_retention
        self._silences: dict[tuple[str, str | None], Silence] = {}
        #: The history, oldest first (the Postgres ledger's ``history`` table).
        self._history: list[HistoryEntry] = []
        self._tick_held = False
        self._endpoints: dict[str, Endpoint] = {}
        self._deliveries: dict[str, Delivery] = {}
        self._todos: dict[str, Todo] = {}
        self._hooks: dict[str, Hook] = {}
        self._ledger: dict[PairKey, LedgerRow] = {}
        self._rings: list[Ring] = []
        #: When the last tick swept, and the claims it read (the fleet's record, as on
        #: Postgres).
        self._swept_at: datetime | None = None
        self._read: frozenset[Claim] = frozenset()

    # -- inspectable state ---------------------------------------------------

    @property
    def endpoints(self) -> Mapping[str, Endpoint]:
        return MappingProxyType(self._endpoints)

    @property
    def todos(self) -> Mapping[str, Todo]:
        return MappingProxyType(self._todos)

    @property
    def hooks(self) -> Mapping[str, Hook]:
        return MappingProxyType(self._hooks)

    @property
    def ledger(self) -> Mapping[PairKey, LedgerRow]:
        return MappingProxyType(self._ledger)

    @property
    def history_entries(self) -> tuple[HistoryEntry, ...]:
        """The whole history, oldest first."""
        return tuple(self._history)

    @property
    def rings(self) -> tuple[Ring, ...]:
        return tuple(self._rings)

    # -- host verbs ----------------------------------------------------------

    def add_endpoint(
        self, endpoint_id: str, *, state: str = "active", name: str | None = None
    ) -> Endpoint:
        self._fresh_id("endpoint", endpoint_id, self._endpoints)
        _check_state(state)
        endpoint = Endpoint(id=endpoint_id, state=state, name=name)
        self._endpoints[endpoint_id] = endpoint
        return endpoint

    def set_endpoint_state(self, endpoint_id: str, state: str) -> Endpoint:
        endpoint = self._get("endpoint", endpoint_id, self._endpoints)
        _check_state(state)
        self._endpoints[endpoint_id] = endpoint = attrs.evolve(endpoint, state=state)
        return endpoint

    def add_delivery(
        self, delivery_id: str, *, endpoint_id: str, verified: bool, received_at: datetime
    ) -> Delivery:
        self._fresh_id("delivery", delivery_id, self._deliveries)
        self._get("endpoint", endpoint_id, self._endpoints)
        delivery = Delivery(
            id=delivery_id,
            endpoint_id=endpoint_id,
            verified=verified,
            received_at=aware("received_at", received_at),
        )
        self._deliveries[delivery_id] = delivery
        return delivery

    def add_hook(
        self,
        hook_id: str,
        *,
        endpoint_id: str,
        url: str,
        secret: str,
        queues: Iterable[str] | None = None,
        enabled: bool = True,
    ) -> Hook:
        self._fresh_id("hook", hook_id, self._hooks)
        self._get("endpoint", endpoint_id, self._endpoints)
        hook = Hook(
            id=hook_id,
            endpoint_id=endpoint_id,
            url=url,
            secret=secret,
            queues=_queues(queues),
            enabled=enabled,
        )
        self._hooks[hook_id] = hook
        return hook

    def set_delivery_verified(self, delivery_id: str, verified: bool) -> Delivery:
        """Change whether a delivery passes the sender gate (a late verification, a revocation)."""
        delivery = attrs.evolve(
            self._get("delivery", delivery_id, self._deliveries), verified=verified
        )
        self._deliveries[delivery_id] = delivery
        return delivery

    def set_hook_enabled(
        self, hook_id: str, enabled: bool, *, at: datetime | None = None, reason: str | None = None
    ) -> Hook:
        """Enable (clearing the failure count) or disable a hook, as the host or dispatcher does."""
        hook = self._get("hook", hook_id, self._hooks)
        if enabled:
            hook = attrs.evolve(
                hook, enabled=True, consecutive_failures=0, disabled_at=None, disabled_reason=None
            )
        else:
            hook = attrs.evolve(hook, enabled=False, disabled_at=at, disabled_reason=reason)
        self._hooks[hook_id] = hook
        return hook

    def set_hook_queues(self, hook_id: str, queues: Iterable[str] | None) -> Hook:
        hook = attrs.evolve(self._get("hook", hook_id, self._hooks), queues=_queues(queues))
        self._hooks[hook_id] = hook
        return hook

    def record_hook_delivery(self, hook_id: str, *, ok: bool) -> Hook:
        """Count one delivery outcome: a success resets the consecutive failures."""
        hook = self._get("hook", hook_id, self._hooks)
        failures = 0 if ok else hook.consecutive_failures + 1
        hook = attrs.evolve(hook, consecutive_failures=failures)
        self._hooks[hook_id] = hook
        return hook

    def hooks_covering(self, endpoint_id: str, queue: str) -> tuple[Hook, ...]:
        """The pair's receivers (``stall_core.is_receiver``), by id."""
        return tuple(
            hook
            for _, hook in sorted(self._hooks.items())
            if is_receiver(hook.enabled, hook.endpoint_id, hook.queues, endpoint_id, queue)
        )

    def create_todo(
        self,
        todo_id: str,
        *,
        endpoint_id: str,
        queue: str,
        created_at: datetime,
        delivery_id: str | None = None,
        title: str | None = None,
    ) -> Todo:
        self._fresh_id("todo", todo_id, self._todos)
        self._get("endpoint", endpoint_id, self._endpoints)
        if delivery_id is not None:
            delivery = self._get("delivery", delivery_id, self._deliveries)
            if delivery.endpoint_id != endpoint_id:
                raise BoardError(
                    f"delivery {delivery_id!r} belongs to endpoint {delivery.endpoint_id!r}, "
                    f"not {endpoint_id!r}"
                )
        todo = Todo(
            id=todo_id,
            endpoint_id=endpoint_id,
            queue=queue,
            delivery_id=delivery_id,
            state="pending",
            title=title,
            created_at=aware("created_at", created_at),
        )
        self._todos[todo_id] = todo
        return todo

    def claim(
        self,
        todo_id: str,
        *,
        owner: str,
        at: datetime | None = None,
        lease: timedelta = timedelta(minutes=5),
    ) -> Todo:
        """Claim a pending todo (pull ignores the sender gate, as the host's claim verb does).

        ``claimed_at`` is ``at``, or the board's clock: the ledger's own time.
        """
        todo = self._get("todo", todo_id, self._todos)
        if todo.state != "pending":
            raise BoardError(f"todo {todo_id!r} is {todo.state}, not pending")
        at = aware("clock()", self._clock()) if at is None else aware("at", at)
        todo = attrs.evolve(
            todo,
            state="claimed",
            claimed_at=at,
            claim_owner=owner,
            lease_expires_at=at + lease,
        )
        self._todos[todo_id] = todo
        return todo

    def claim_next(
        self, endpoint_id: str, queue: str, *, owner: str, at: datetime | None = None
    ) -> Todo | None:
        """Claim the oldest pending todo of the pair, or return None when there is none."""
        pending = [
            t
            for t in self._todos.values()
            if t.endpoint_id == endpoint_id and t.queue == queue and t.state == "pending"
        ]
        if not pending:
            return None
        oldest = min(pending, key=lambda t: (t.created_at, t.id))
        return self.claim(oldest.id, owner=owner, at=at)

    def complete(self, todo_id: str, *, unstamp: bool = False) -> Todo:
        """Mark a claimed todo done; its claimed_at stays, or goes with ``unstamp`` (some hosts)."""
        todo = self._get("todo", todo_id, self._todos)
        if todo.state != "claimed":
            raise BoardError(f"todo {todo_id!r} is {todo.state}, not claimed")
        todo = attrs.evolve(
            todo,
            state="done",
            claim_owner=None,
            lease_expires_at=None,
            claimed_at=None if unstamp else todo.claimed_at,
        )
        self._todos[todo_id] = todo
        return todo

    def requeue(self, todo_id: str, *, unstamp: bool = False) -> Todo:
        """Return a claimed todo to pending; claimed_at stays (the claim happened), or goes."""
        todo = self._get("todo", todo_id, self._todos)
        if todo.state != "claimed":
            raise BoardError(f"todo {todo_id!r} is {todo.state}, not claimed")
        todo = attrs.evolve(
            todo,
            state="pending",
            claim_owner=None,
            lease_expires_at=None,
            attempt=todo.attempt + 1,
            claimed_at=None if unstamp else todo.claimed_at,
        )
        self._todos[todo_id] = todo
        return todo

    def move_todo(self, todo_id: str, queue: str) -> Todo:
        """Move a todo to another queue of its endpoint, as a rebalancer or an operator does."""
        todo = attrs.evolve(self._get("todo", todo_id, self._todos), queue=queue)
        self._todos[todo_id] = todo
        return todo

    def delete_todo(self, todo_id: str) -> Todo:
        """Remove a todo whatever its state, as a host purging done work or a TRUNCATE does."""
        return self._todos.pop(self._get("todo", todo_id, self._todos).id)

    def ring(self, todo_id: str, *, at: datetime) -> Ring:
        """Ring the session doorbell for one todo: the SPEC-0011 path, never the nudge's."""
        todo = self._get("todo", todo_id, self._todos)
        self._todos[todo_id] = attrs.evolve(
            todo, ring_attempts=todo.ring_attempts + 1, last_ringed_at=aware("at", at)
        )
        ring = Ring(todo_id=todo_id, at=at)
        self._rings.append(ring)
        return ring

    # -- the sweep's view and the ledger --------------------------------------

    def _sendable(self, todo: Todo) -> bool:
        """``stall_core.passes_gate`` on the todo's delivery row (None when it is missing)."""
        delivery = None if todo.delivery_id is None else self._deliveries.get(todo.delivery_id)
        return passes_gate(todo.delivery_id, None if delivery is None else delivery.verified)

    def pair_states(
        self,
        ledger: Mapping[PairKey, LedgerRow] | None = None,
        since: datetime | None = None,
        read: Collection[Claim] | None = None,
    ) -> list[PairState]:
        """The state of every pair with a pending todo or a ledger row.

        ``ledger`` (this board's own by default) is the ledger whose rows say
        which todo each pair's last nudge named, ``since`` where the claims
        read start and ``read`` the claims the last tick read (by default a
        tick's now, on this board's record): a test may read the board's host
        rows against another ledger's.
        """
        if since is None:
            since = claims_window(self._swept_at, aware("clock()", self._clock()), self._lookback)
        read = self._read if read is None else read
        rows = self._ledger if ledger is None else ledger
        by_pair: dict[PairKey, list[Todo]] = {}
        for todo in self._todos.values():
            by_pair.setdefault((todo.endpoint_id, todo.queue), []).append(todo)
        keys = {key for key, todos in by_pair.items() if any(t.state == "pending" for t in todos)}
        keys.update(rows)
        return [
            self._pair_state(key, by_pair.get(key, []), rows, since, read) for key in sorted(keys)
        ]

    def _pair_state(
        self,
        key: PairKey,
        todos: list[Todo],
        ledger: Mapping[PairKey, LedgerRow],
        since: datetime,
        read: Collection[Claim],
    ) -> PairState:
        endpoint_id, queue = key
        oldest = work_of(
            (
                TodoRef(id=t.id, created_at=t.created_at, title=t.title)
                for t in todos
                if t.state == "pending" and self._sendable(t)
            ),
            endpoint_id=endpoint_id,
            queue=queue,
        )
        endpoint = self._endpoints.get(endpoint_id)
        hooks = ((h.enabled, h.endpoint_id, h.queues) for h in self._hooks.values())
        pending = {t.id for t in todos if t.state == "pending"}
        return PairState(
            endpoint_id=endpoint_id,
            queue=queue,
            oldest=oldest,
            endpoint_active=endpoint_active(None if endpoint is None else endpoint.state),
            has_receiver=has_receiver(hooks, endpoint_id, queue),
            latest_claim=latest_claim(_claims(todos), since, read),
            named_departed=has_departed(ledger.get(key), pending),
            silenced_until=silenced_until(self._silences.values(), endpoint_id, queue, self._now()),
        )

    async def status(self, *, policy: PacingPolicy) -> tuple[datetime, list[PairStatus]]:
        """Every pair with a pending todo or a ledger row, judged by the sweep's own decision.

        As the Postgres ledger's ``status``: counts past and held by the sender
        gate, the covering hooks' health, the first host value the sweep cannot
        read, the endpoint's name, the pair's silence and its last charges'
        outcomes, at ``clock()``.
        """
        now = self._now()
        silences = [s for s in self._silences.values() if now < s.ends_at]
        charges: dict[PairKey, list[HistoryEntry]] = {}
        for entry in reversed(self._history):
            if entry.event == "charged" and entry.queue is not None:
                charges.setdefault((entry.endpoint_id, entry.queue), []).append(entry)
        by_pair: dict[PairKey, list[Todo]] = {}
        for todo in sorted(self._todos.values(), key=lambda t: t.id):
            by_pair.setdefault((todo.endpoint_id, todo.queue), []).append(todo)
        found = []
        for pair in self.pair_states():
            todos = by_pair.get(pair.key, [])
            pending = [t for t in todos if t.state == "pending"]
            sendable = sum(1 for t in pending if self._sendable(t))
            covering = [
                h for h in self._hooks.values() if covers(h.endpoint_id, h.queues, *pair.key)
            ]
            history = charges.get(pair.key, [])
            endpoint = self._endpoints.get(pair.endpoint_id)
            found.append(
                pair_status(
                    pair,
                    self._ledger.get(pair.key),
                    sendable=sendable,
                    held_by_gate=len(pending) - sendable,
                    now=now,
                    policy=policy,
                    hook_failures=max(
                        (h.consecutive_failures for h in covering if h.enabled), default=0
                    ),
                    hooks_disabled=sum(1 for h in covering if not h.enabled),
                    unreadable=_unreadable(pending, todos),
                    endpoint_name=None if endpoint is None else endpoint.name,
                    last_failure_at=max(
                        (
                            e.settled_at
                            for e in history
                            if e.outcome in REACHED_NOBODY and e.settled_at is not None
                        ),
                        default=None,
                    ),
                    silences=silences,
                    last_outcomes=history[:RECENT_OUTCOMES],
                )
            )
        return now, found

    async def charge_due(
        self, *, policy: PacingPolicy, every: timedelta | None = None
    ) -> ChargeOutcome:
        """Plan and apply one tick at ``clock()`` with no await in between: atomic on one loop."""
        now = aware("clock()", self._clock())
        swept = self._swept_at
        if self._tick_held or swept_recently(swept, now, every):
            return ChargeOutcome(now=now, skipped=True, swept_at=swept)
        since = claims_window(swept, now, self._lookback)
        pairs = self.pair_states(since=since)
        self._swept_at = now
        self._read = frozenset(claims_read(_claims(self._todos.values()), since))
        plan = plan_tick(pairs, self._ledger, now, policy)
        for key in plan.cleared:
            del self._ledger[key]
        for key in plan.reset:
            self._ledger[key] = reset_row(self._ledger[key], now)
        for nudge in plan.charges:
            self._ledger[nudge.key] = charge_row(nudge)
            self._history.append(
                HistoryEntry(
                    at=now,
                    endpoint_id=nudge.endpoint_id,
                    queue=nudge.queue,
                    event="charged",
                    nudge=nudge.number,
                    todo_id=nudge.todo.id,
                )
            )
        self._prune(now)
        return ChargeOutcome(
            now=now,
            charged=plan.charges,
            cleared=plan.cleared,
            swept_at=now,
            kind="full",
            judged=len(pairs),
        )

    async def refund(self, nudge: Nudge) -> bool:
        """Refund a nudge that reached nobody if the row is still its charge's (compare-and-set)."""
        row = refunded_row(self._ledger.get(nudge.key), nudge)
        if row is None:
            return False
        self._ledger[nudge.key] = row
        return True

    # -- what a person on call does (stall_core.OperatorPort) -----------------

    def _now(self) -> datetime:
        return aware("clock()", self._clock())

    def _prune(self, now: datetime) -> None:
        """Drop at most ``PRUNE_BATCH`` history entries, and ended silences, past the retention."""
        cutoff = now - self._history_retention
        old = [i for i, e in enumerate(self._history) if e.at < cutoff][:PRUNE_BATCH]
        for i in reversed(old):
            del self._history[i]
        ended = [k for k, v in self._silences.items() if v.ends_at < cutoff][:PRUNE_BATCH]
        for key in ended:
            del self._silences[key]

    def _exists(self, endpoint_id: str, queue: str | None) -> None:
        if endpoint_id not in self._endpoints:
            raise NoSuchPair(f"no endpoint {endpoint_id!r}")
        if queue is None or (endpoint_id, queue) in self._ledger:
            return
        if not any(t.endpoint_id == endpoint_id and t.queue == queue for t in self._todos.values()):
            raise NoSuchPair(
                f"endpoint {endpoint_id!r} has no queue {queue!r}: no todo, no ledger row"
            )

    def _act(
        self,
        now: datetime,
        key: tuple[str, str | None],
        event: str,
        *,
        by: str,
        detail: str,
        until: datetime | None = None,
    ) -> None:
        self._history.append(
            HistoryEntry(
                at=now,
                endpoint_id=key[0],
                queue=key[1],
                event=event,
                by=by,
                detail=detail,
                until=until,
            )
        )

    async def silence(
        self, endpoint_id: str, queue: str | None, *, lasting: timedelta, by: str, reason: str
    ) -> Silence:
        """Silence the pair (or every queue of the endpoint), replacing its silence."""
        if not lasting > timedelta(0):
            raise ValueError(f"a silence must last a positive time, got {lasting!r}")
        self._exists(endpoint_id, queue)
        now = self._now()
        silence = Silence(
            endpoint_id=endpoint_id,
            queue=queue,
            starts_at=now,
            ends_at=now + lasting,
            by=by,
            reason=reason,
        )
        self._silences[(endpoint_id, queue)] = silence
        self._act(
            now, (endpoint_id, queue), "silenced", by=by, detail=reason, until=silence.ends_at
        )
        return silence

    async def unsilence(
        self, endpoint_id: str, queue: str | None, *, by: str, reason: str
    ) -> Silence | None:
        """End the silence of exactly this pair (or endpoint) now; None when none holds."""
        self._exists(endpoint_id, queue)
        now = self._now()
        silence = self._silences.get((endpoint_id, queue))
        if silence is None or not now < silence.ends_at:
            return None
        silence = attrs.evolve(silence, ends_at=now)
        self._silences[(endpoint_id, queue)] = silence
        self._act(now, (endpoint_id, queue), "unsilenced", by=by, detail=reason)
        return silence

    async def reset(
        self, endpoint_id: str, queue: str, *, by: str, reason: str
    ) -> LedgerRow | None:
        """Start the pair over (``reset_row``): its next nudge is nudge 1, due at once."""
        self._exists(endpoint_id, queue)
        now = self._now()
        row = self._ledger.get((endpoint_id, queue))
        if row is None:
            return None
        row = self._ledger[row.key] = reset_row(row, now)
        self._act(now, (endpoint_id, queue), "reset", by=by, detail=reason)
        return row

    async def nudge_now(
        self, endpoint_id: str, queue: str, *, policy: PacingPolicy, by: str, reason: str
    ) -> NudgeNowResult:
        """Reset the pair if ``nudge_now`` allows, and tick at once: atomic on one loop."""
        self._exists(endpoint_id, queue)
        if self._tick_held:
            raise BoardError("the tick is held")
        now = self._now()
        key = (endpoint_id, queue)
        row = self._ledger.get(key)
        states = [p for p in self.pair_states() if p.key == key]
        pair = (
            states[0]
            if states
            else PairState(
                endpoint_id=endpoint_id,
                queue=queue,
                oldest=None,
                endpoint_active=False,
                has_receiver=False,
            )
        )
        decision = nudge_now(pair, row, now, policy)
        self._act(now, key, "nudged", by=by, detail=nudge_now_detail(decision, reason))
        if not isinstance(decision, Charge):  # only a candidate ticks
            outcome = ChargeOutcome(now=now, skipped=True)
            return NudgeNowResult(outcome=outcome, decision=decision, charged=None, row=row)
        if row is not None:
            self._ledger[key] = reset_row(row, now)
        outcome = await self.charge_due(policy=policy)
        charged = next((n for n in outcome.charged if n.key == key), None)
        return NudgeNowResult(outcome=outcome, decision=decision, charged=charged, row=row)

    async def silences(self) -> tuple[datetime, tuple[Silence, ...]]:
        """Every silence not ended yet, by endpoint and queue."""
        now = self._now()
        live = (s for s in self._silences.values() if now < s.ends_at)
        return now, tuple(
            sorted(live, key=lambda s: (s.endpoint_id, s.queue or "", s.queue is not None))
        )

    async def history(
        self,
        *,
        endpoint_id: str | None = None,
        queue: str | None = None,
        since: timedelta | None = None,
        limit: int = 1000,
    ) -> tuple[HistoryEntry, ...]:
        """The history newest first, of one endpoint (and queue), within ``since``."""
        now = self._now()
        found = [
            e
            for e in reversed(self._history)
            if (since is None or e.at >= now - since)
            and (endpoint_id is None or e.endpoint_id == endpoint_id)
            and (queue is None or e.queue in (queue, None))
        ]
        return tuple(found[:limit])

    async def record_outcome(self, outcome: DeliveryOutcome) -> None:
        """Book the outcome on the charge's history entry, once."""
        n = outcome.nudge
        for i, e in enumerate(self._history):
            charge = (e.at, e.endpoint_id, e.queue, e.nudge, e.event, e.outcome)
            if charge == (n.charged_at, n.endpoint_id, n.queue, n.number, "charged", None):
                self._history[i] = attrs.evolve(
                    e, outcome=outcome.outcome, detail=outcome.detail, settled_at=self._now()
                )
                return

    @contextmanager
    def hold_tick(self) -> Iterator[None]:
        """Hold the tick as another instance mid-sweep would: ``charge_due`` skips meanwhile."""
        if self._tick_held:
            raise BoardError("the tick is already held")
        self._tick_held = True
        try:
            yield
        finally:
            self._tick_held = False

    # -- helpers ---------------------------------------------------------------

    @staticmethod
    def _fresh_id(kind: str, key: str, table: Mapping[str, object]) -> None:
        if not isinstance(key, str) or not key:
            raise BoardError(f"{kind} id must be a non-empty string, got {key!r}")
        if key in table:
            raise BoardError(f"{kind} {key!r} already exists")

    @staticmethod
    def _get(kind: str, key: str, table: Mapping[str, _T]) -> _T:
        try:
            return table[key]
        except KeyError:
            raise BoardError(f"no {kind} {key!r}") from None


def _claims(todos: Iterable[Todo]) -> Iterator[tuple[str, str, datetime | None]]:
    """Each todo as the sweep reads claims: id, state, claimed_at."""
    return ((t.id, t.state, t.claimed_at) for t in todos)


def _unreadable(pending: Iterable[Todo], todos: Iterable[Todo]) -> Unreadable | None:
    """The pair's first todo (by id) holding an instant the sweep cannot read (``readable``).

    A pending todo's ``created_at`` first (not work), else any todo's
    ``claimed_at`` (not progress), printed as PostgreSQL prints the ends of
    the range it stands for.
    """
    for todo in pending:
        if not readable(todo.created_at):
            return Unreadable(todo_id=todo.id, column="created_at", value=_printed(todo.created_at))
    for todo in todos:
        if todo.claimed_at is not None and not readable(todo.claimed_at):
            return Unreadable(todo_id=todo.id, column="claimed_at", value=_printed(todo.claimed_at))
    return None


def _printed(at: datetime) -> str:
    """An instant ``readable`` refuses, as PostgreSQL prints it: asyncpg writes a Python
    datetime's ends as its infinities."""
    return "-infinity" if at <= datetime.min.replace(tzinfo=UTC) else "infinity"


def _check_state(state: str) -> None:
    if state not in ENDPOINT_STATES:
        raise BoardError(f"endpoint state must be one of {sorted(ENDPOINT_STATES)}, got {state!r}")


def _queues(queues: Iterable[str] | None) -> tuple[str, ...] | None:
    if queues is None:
        return None
    if isinstance(queues, str):
        raise BoardError("hook queues must be a collection of queue names, not one string")
    return tuple(queues)


def _target(hook: Hook) -> HookTarget:
    return HookTarget(id=hook.id, endpoint_id=hook.endpoint_id, url=hook.url, secret=hook.secret)


class MemoryHooks:
    """The hook directory (a core port) over a ``MemoryBoard``; each verb applies at once."""

    def __init__(self, board: MemoryBoard) -> None:
        self._board = board

    async def hooks_covering(self, endpoint_id: str, queue: str) -> tuple[HookTarget, ...]:
        return tuple(_target(hook) for hook in self._board.hooks_covering(endpoint_id, queue))

    async def record_success(self, hook_id: str) -> None:
        try:
            self._board.record_hook_delivery(hook_id, ok=True)
        except BoardError:
            return  # the hook was deleted while its message was in flight

    async def record_successes(self, hook_ids: Collection[str]) -> None:
        for hook_id in hook_ids:
            await self.record_success(hook_id)

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


def _conforms(
    board: MemoryBoard, hooks: MemoryHooks
) -> tuple[LedgerPort, HookDirectory, OperatorPort, HistoryPort]:
    """mypy checks here that the memory adapters satisfy the core's ports."""
    return board, hooks, board, board
