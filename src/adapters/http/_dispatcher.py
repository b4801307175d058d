"""The notify-hook dispatcher: every todo.ready (created, requeued, stalled) goes through here.

Theory of operation
-------------------
``notify`` resolves the pair's hooks, builds one message (one body, one
``webhook-id``) and queues one delivery per usable hook. Admission is all
or nothing: when the deliveries accepted and not yet finished (queued,
in flight or waiting to retry) would exceed ``queue_size``, the message is
dropped, counted and logged, and the caller gets ``WakeError``. Dropping is
safe because the sweep is level-triggered: pending work is surfaced again.

Each hook has its own lane: its deliveries in order and at most
``workers`` workers, started when a delivery arrives and ended when the
lane is empty. A worker makes one attempt at a time; a retry waits on a
timer, not on a worker. So a hook that hangs holds at most its own
``workers`` attempts in flight and never a worker or a connection another
hook needs: the lanes share only the ``ClientSession``, whose connection
pool has no global limit (the queue bound caps it). Each attempt is
re-signed with the current timestamp; body and id stay the same.

The outcome of the last attempt is booked once in the hook directory
(``_bookings``), which disables the hook after
``DeliveryPolicy.disable_after`` failures in a row: failures at once,
successes in batches ``booking_interval`` seconds apart and on
``settle()`` and ``close()``.

Where a hook may point is checked before the request and again on the
address actually connected to, after DNS (``_address``); a refused
address is a final failure, booked like a malformed hook.

Each message has a receipt, a future the sweep's wake awaits: True as soon
as one of its hooks answers 2xx, False once all its deliveries ended
without one (failed, crashed, or abandoned at close).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit

import aiohttp
import attrs
from aiohttp.abc import AbstractResolver
from aiohttp.resolver import DefaultResolver

from stall_core import (
    HookDirectory,
    HookTarget,
    Nudge,
    TodoRef,
    WakeError,
    WakePort,
    WakeReceipt,
    aware,
    format_duration,
    format_seconds,
    positive_int,
    positive_seconds,
    printable,
    printable_text,
)

from ._address import AddressRefusedError, GuardedResolver, check_host, guarded_socket
from ._bookings import Bookings
from ._message import STALLED, ReadyMessage, ReadyMeta, ReadyTodo, encode_message
from ._policy import DeliveryPolicy
from ._retry import is_delivered, is_retryable, parse_retry_after, retry_delay
from ._signing import HookRefused, check_text, parse_secret, safe_url, signed_headers

__all__ = ["DispatchStats", "HookDispatcher"]

log = logging.getLogger("adapters.http")


#: Usable hooks whose checks are remembered; past this many the memory starts over.
_CHECKED_HOOKS = 1024


def _wall_clock() -> datetime:
    return datetime.now(UTC)


@attrs.frozen(kw_only=True)
class DispatchStats:
    """Counters since start: messages and per-hook deliveries."""

    accepted: int = 0  # messages queued for at least one hook
    dropped: int = 0  # messages refused because the queue was full
    refused: int = 0  # deliveries refused: unusable secret or URL, or a refused address
    delivered: int = 0  # deliveries a hook answered with 2xx
    failed: int = 0  # deliveries whose attempts all failed
    retries: int = 0  # attempts after the first
    abandoned: int = 0  # deliveries cut off by close()'s deadline
    notified: int = 0  # notify()'s messages (creation wakes) some hook answered with 2xx
    unnotified: int = 0  # notify()'s messages that reached no hook


class _Explained(asyncio.Future[bool]):
    """A receipt that says why a message reached nobody (``stall_core.ExplainedReceipt``)."""

    detail: str | None = None
    hook_disabled: bool = False


@attrs.define(eq=False)  # one per message, hashed by identity
class _Receipt:
    """Whether a message reached any of its hooks; resolved once, by the first answer that tells."""

    future: _Explained
    unfinished: int

    def finished(
        self, *, delivered: bool, detail: str | None = None, disabled: bool = False
    ) -> None:
        self.unfinished -= 1
        if not delivered:
            self.future.detail = detail or self.future.detail
            self.future.hook_disabled = self.future.hook_disabled or disabled
        if not self.future.done() and (delivered or self.unfinished == 0):
            self.future.set_result(delivered)


@attrs.frozen(kw_only=True)
class _Delivery:
    """One message for one hook; the key never reaches a repr."""

    message_id: str
    body: bytes = attrs.field(repr=False)
    hook: HookTarget
    key: bytes = attrs.field(repr=False)
    shown_url: str
    label: str  # endpoint/queue todo reason, for logs
    receipt: _Receipt = attrs.field(eq=False, repr=False)


@attrs.define
class _Job:
    delivery: _Delivery
    attempts_made: int = 0
    timer: asyncio.TimerHandle | None = None
    #: The last attempt's failure, for the outcome (``gave-up: HTTP 500``).
    detail: str | None = None


@attrs.define(eq=False)
class _Lane:
    """One hook's deliveries waiting for a worker, and how many of its workers run."""

    jobs: deque[_Job] = attrs.Factory(deque)
    workers: int = 0


@attrs.frozen(kw_only=True)
class _Outcome:
    status: int | None  # None: no response (connection error or timeout)
    detail: str
    retry_after: str | None = None
    final: bool = False  # no attempt can succeed (the HTTP client refused the URL)
    refused: bool = False  # the address connected to is one a hook may not use


class HookDispatcher:
    """Delivers signed todo.ready messages to notify hooks; a ``stall_core.WakePort``.

    Use as ``async with HookDispatcher(...) as dispatcher:`` or call
    ``start()`` and ``close()``. ``clock`` gives ``sent_at`` and each
    attempt's ``webhook-timestamp``; it defaults to the UTC wall clock.
    ``workers`` bounds each hook's attempts in flight. ``refuse_private``
    also refuses loopback, private and every other special-purpose address
    (``RANGES``; link-local and metadata ones always are). ``resolver`` looks names up (aiohttp's
    default when None); whatever it answers is checked. Successes are
    booked in batches at most ``booking_interval`` seconds apart and on
    ``settle()`` and ``close()``; failures at once.
    """

    def __init__(
        self,
        *,
        hooks: HookDirectory,
        policy: DeliveryPolicy | None = None,
        clock: Callable[[], datetime] = _wall_clock,
        queue_size: int = 1000,
        workers: int = 32,
        refuse_private: bool = False,
        resolver: AbstractResolver | None = None,
        booking_interval: float = 0.5,
    ) -> None:
        positive_int("queue_size", queue_size)
        positive_int("workers", workers)
        positive_seconds("booking_interval", booking_interval)
        if not isinstance(refuse_private, bool):
            raise TypeError("refuse_private must be a bool")
        self._hooks = hooks
        self._policy = policy if policy is not None else DeliveryPolicy()
        self._clock = clock
        self._queue_size = queue_size
        self._worker_count = workers
        self._refuse_private = refuse_private
        self._resolver = resolver
        self._own_resolver: AbstractResolver | None = None
        self._lanes: dict[str, _Lane] = {}
        # The checks are pure functions of (url, secret): done once per hook, not per message.
        self._checked: dict[tuple[str, str], tuple[bytes, str]] = {}
        self._workers: set[asyncio.Task[None]] = set()
        self._timers: set[asyncio.TimerHandle] = set()
        self._receipts: set[_Receipt] = set()
        self._session: aiohttp.ClientSession | None = None
        self._accepting = False
        self._outstanding = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._bookings = Bookings(
            hooks,
            clock=clock,
            disable_after=self._policy.disable_after,
            interval=booking_interval,
        )
        # Plain counters on the hot path; ``stats`` snapshots them into a value.
        self._counts = dict.fromkeys(attrs.fields_dict(DispatchStats), 0)

    @property
    def policy(self) -> DeliveryPolicy:
        return self._policy

    @property
    def stats(self) -> DispatchStats:
        return DispatchStats(**self._counts)

    @property
    def outstanding(self) -> int:
        """Deliveries accepted and not yet finished (queued, in flight, waiting to retry)."""
        return self._outstanding

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Open the shared session; needs a running event loop."""
        if self._session is not None:
            raise RuntimeError("dispatcher already started")
        # A resolver we were given is the caller's to close; the default one is ours.
        self._own_resolver = DefaultResolver() if self._resolver is None else None
        resolver = self._resolver if self._resolver is not None else self._own_resolver
        assert resolver is not None
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                # No global limit: a hook that hangs must not hold connections another
                # hook needs. Lanes bound each hook, the queue bound bounds them all.
                limit=0,
                resolver=GuardedResolver(resolver, refuse_private=self._refuse_private),
                socket_factory=guarded_socket(refuse_private=self._refuse_private),
            ),
            cookie_jar=aiohttp.DummyCookieJar(),  # one hook's cookies never reach another
            timeout=aiohttp.ClientTimeout(total=self._policy.timeout.total_seconds()),
        )
        self._accepting = True
        self._bookings.open()

    async def settle(self) -> None:
        """Wait until every accepted delivery, retries included, has finished and been booked.

        A booking that fails stays kept for the next flush.
        """
        await self._idle.wait()
        await self._bookings.flush_now()

    async def close(self, deadline: float = 10.0) -> None:
        """Stop taking messages, give the outstanding ones ``deadline`` seconds, cancel the rest.

        The bookings still kept are made within what is left of ``deadline``.
        """
        if self._session is None:
            return
        self._accepting = False
        loop = asyncio.get_running_loop()
        ends = loop.time() + deadline
        if not self._idle.is_set():
            try:
                await asyncio.wait_for(self._idle.wait(), timeout=deadline)
            except TimeoutError:
                log.warning(
                    "closing with %d deliveries unfinished after %s: abandoned",
                    self._outstanding,
                    format_seconds(deadline),
                )
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers.clear()
        self._lanes.clear()  # abandoned jobs must not run after a restart
        if self._outstanding:
            self._count(abandoned=self._outstanding)
            self._outstanding = 0
            self._idle.set()
        for receipt in self._receipts:
            if not receipt.future.done():
                receipt.future.detail = "abandoned: the dispatcher closed"
                receipt.future.set_result(False)  # abandoned: reached nobody
        self._receipts.clear()
        await self._bookings.close(ends)
        session, self._session = self._session, None
        await session.close()
        if self._own_resolver is not None:
            await self._own_resolver.close()
            self._own_resolver = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- the wake port and the host's other reasons ---------------------------

    async def wake(self, nudge: Nudge) -> WakeReceipt:
        """Queue the nudge's todo.ready (reason "stalled") for every hook covering its pair.

        Returns the message's receipt. Raises ``WakeError`` when the message
        is dropped or no usable hook covers the pair: it reached nobody.
        """
        receipt = await self._submit(
            endpoint_id=nudge.endpoint_id, queue=nudge.queue, todo=nudge.todo, reason=STALLED
        )
        if receipt is None:
            raise WakeError(f"no usable notify hook covers {nudge.endpoint_id}/{nudge.queue}")
        return receipt.future

    async def notify(self, *, endpoint_id: str, queue: str, todo: TodoRef, reason: str) -> int:
        """Queue one todo.ready for the pair's hooks; returns how many deliveries were queued.

        The host calls this for ``created`` and ``requeued``; ``wake`` for
        ``stalled``. ``todo`` must pass the sender gate: its title is sent.
        Raises ``WakeError`` when not running, when the hooks cannot be
        resolved, or when the queue is full (the message is dropped).
        """
        receipt = await self._submit(endpoint_id=endpoint_id, queue=queue, todo=todo, reason=reason)
        if receipt is None:
            return 0
        receipt.future.add_done_callback(self._count_notified)
        return receipt.unfinished

    def _count_notified(self, reached: asyncio.Future[bool]) -> None:
        if reached.cancelled() or reached.exception() is not None or not reached.result():
            self._count(unnotified=1)
        else:
            self._count(notified=1)

    async def _submit(
        self, *, endpoint_id: str, queue: str, todo: TodoRef, reason: str
    ) -> _Receipt | None:
        """Queue one message for every usable hook; None when there is none."""
        if not reason:
            raise ValueError("reason must be a non-empty string")
        if not self._accepting:
            raise WakeError("the notify-hook dispatcher is not running")
        try:
            for field, value in (
                ("endpoint_id", endpoint_id),
                ("queue", queue),
                ("todo id", todo.id),
                ("todo title", todo.title),
                ("reason", reason),
            ):
                check_text(field, value)
        except HookRefused as exc:
            raise WakeError(f"message refused: {exc}") from None
        # For log lines: names a sender chose, escaped and cut (D22).
        label = (
            f"{printable(endpoint_id)}/{printable(queue)} todo {printable(todo.id)} "
            f"({printable(reason)})"
        )
        try:
            hooks = await self._hooks.hooks_covering(endpoint_id, queue)
        except Exception as exc:
            raise WakeError(f"could not resolve notify hooks for {endpoint_id}/{queue}") from exc
        if not hooks:
            return None
        message = ReadyMessage(
            meta=ReadyMeta(
                endpoint_id=endpoint_id,
                queue=queue,
                todo_id=todo.id,
                reason=reason,
                sent_at=aware("clock()", self._clock()),
            ),
            todo=ReadyTodo(id=todo.id, queue=queue, title=todo.title, created_at=todo.created_at),
        )
        body = encode_message(message)
        message_id = f"msg_{uuid.uuid4().hex}"
        usable: list[tuple[HookTarget, bytes, str]] = []
        for hook in hooks:
            try:
                usable.append((hook, *self._check_hook(hook)))
            except HookRefused as exc:
                self._count(refused=1)
                log.error(
                    "hook %s: refused for %s: %s; no request sent",
                    printable(hook.id),
                    label,
                    printable_text(str(exc)),
                )
                await self._bookings.failed(hook, f"refused: {exc}")
        if not usable:
            return None
        if not self._accepting:
            raise WakeError("the notify-hook dispatcher closed while resolving hooks")
        if self._outstanding + len(usable) > self._queue_size:
            self._count(dropped=1)
            log.warning(
                "queue full (%d of %d deliveries outstanding): dropped %s; the sweep resurfaces it",
                self._outstanding,
                self._queue_size,
                label,
            )
            raise WakeError(f"notify-hook queue full: dropped {label}")
        receipt = _Receipt(
            future=_Explained(loop=asyncio.get_running_loop()), unfinished=len(usable)
        )
        self._receipts.add(receipt)
        receipt.future.add_done_callback(lambda _: self._receipts.discard(receipt))
        self._count(accepted=1)
        self._outstanding += len(usable)
        self._idle.clear()
        for hook, key, shown in usable:
            delivery = _Delivery(
                message_id=message_id,
                body=body,
                hook=hook,
                key=key,
                shown_url=shown,
                label=label,
                receipt=receipt,
            )
            self._enqueue(_Job(delivery=delivery))
        return receipt

    def _check_hook(self, hook: HookTarget) -> tuple[bytes, str]:
        """The hook's key and shown URL, or ``HookRefused`` naming what makes it unusable."""
        checked = self._checked.get((hook.url, hook.secret))
        if checked is not None:
            return checked
        check_text("secret", hook.secret)
        check_text("url", hook.url)
        key = parse_secret(hook.secret)
        shown = safe_url(hook.url)
        check_host(urlsplit(hook.url).hostname or "", refuse_private=self._refuse_private)
        if len(self._checked) >= _CHECKED_HOOKS:
            self._checked.clear()
        self._checked[hook.url, hook.secret] = key, shown
        return key, shown

    # -- lanes and their workers --------------------------------------------------

    def _enqueue(self, job: _Job) -> None:
        """Put a job in its hook's lane; start a worker there if the lane has room for one."""
        hook_id = job.delivery.hook.id
        lane = self._lanes.get(hook_id)
        if lane is None:
            lane = self._lanes[hook_id] = _Lane()
        lane.jobs.append(job)
        if lane.workers < self._worker_count:
            lane.workers += 1
            worker = asyncio.create_task(self._work(hook_id, lane), name="notify-hook-worker")
            self._workers.add(worker)
            worker.add_done_callback(self._workers.discard)

    async def _work(self, hook_id: str, lane: _Lane) -> None:
        try:
            while lane.jobs:
                job = lane.jobs.popleft()
                try:
                    finished, delivered = await self._attempt(job)
                except Exception as exc:
                    # Type only: an unexpected exception's text might quote the URL.
                    reason = f"delivery crashed ({type(exc).__name__})"
                    log.error(
                        "hook %s: %s of %s",
                        printable(job.delivery.hook.id),
                        reason,
                        job.delivery.label,
                    )
                    # Booked like any failed delivery, so a hook that always crashes still
                    # reaches auto-disable instead of failing silently forever.
                    self._count(failed=1)
                    await self._bookings.failed(job.delivery.hook, reason)
                    finished, delivered = True, False
                    job.detail = reason
                if finished:
                    job.delivery.receipt.finished(
                        delivered=delivered,
                        detail=job.detail,
                        disabled=self._bookings.take_disabled(job.delivery.hook.id),
                    )
                    self._finish()
        finally:
            lane.workers -= 1
            if not lane.workers and not lane.jobs and self._lanes.get(hook_id) is lane:
                del self._lanes[hook_id]

    async def _attempt(self, job: _Job) -> tuple[bool, bool]:
        """Make one attempt; returns (finished, delivered): not finished when a retry waits."""
        delivery = job.delivery
        job.attempts_made += 1
        if job.attempts_made > 1:
            self._count(retries=1)
        outcome = await self._post(delivery)
        job.detail = outcome.detail
        if outcome.status is not None and is_delivered(outcome.status):
            self._count(delivered=1)
            self._bookings.delivered(delivery.hook.id)
            return True, True
        delay = None
        if not outcome.final and is_retryable(outcome.status):
            delay = retry_delay(
                attempts_made=job.attempts_made,
                policy=self._policy,
                retry_after=parse_retry_after(outcome.retry_after, self._clock()),
            )
        if delay is not None:
            log.info(
                "hook %s (%s): attempt %d of %s failed (%s); retrying in %s",
                printable(delivery.hook.id),
                printable(delivery.shown_url),
                job.attempts_made,
                delivery.label,
                printable_text(outcome.detail),
                format_duration(delay),
            )
            job.timer = asyncio.get_running_loop().call_later(
                delay.total_seconds(), self._requeue, job
            )
            self._timers.add(job.timer)
            return False, False
        if outcome.refused:
            self._count(refused=1)
            log.error(
                "hook %s (%s): refused for %s: %s; no request sent",
                printable(delivery.hook.id),
                printable(delivery.shown_url),
                delivery.label,
                printable_text(outcome.detail.removeprefix("refused: ")),
            )
            await self._bookings.failed(delivery.hook, outcome.detail)
            return True, False
        self._count(failed=1)
        log.warning(
            "hook %s (%s): delivery of %s failed after %d attempt(s): %s",
            printable(delivery.hook.id),
            printable(delivery.shown_url),
            delivery.label,
            job.attempts_made,
            printable_text(outcome.detail),
        )
        await self._bookings.failed(delivery.hook, outcome.detail)
        return True, False

    async def _post(self, delivery: _Delivery) -> _Outcome:
        assert self._session is not None  # workers run only between start and close
        timestamp = int(self._clock().timestamp())
        headers = signed_headers(delivery.key, delivery.message_id, timestamp, delivery.body)
        try:
            async with self._session.post(
                delivery.hook.url, data=delivery.body, headers=headers, allow_redirects=False
            ) as response:
                await self._discard_body(response)
                return _Outcome(
                    status=response.status,
                    detail=f"HTTP {response.status}",
                    retry_after=response.headers.get("Retry-After"),
                )
        except TimeoutError:
            timeout = format_duration(self._policy.timeout)
            return _Outcome(status=None, detail=f"timed out after {timeout}")
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, AddressRefusedError):
                return _Outcome(
                    status=None, detail=f"refused: {exc.os_error}", final=True, refused=True
                )
            return _Outcome(status=None, detail=f"connection error ({type(exc).__name__})")
        except aiohttp.InvalidURL:
            return _Outcome(status=None, detail="URL refused by the HTTP client", final=True)
        except aiohttp.ClientError as exc:
            # The exception text can quote the URL; name only its type.
            return _Outcome(status=None, detail=f"connection error ({type(exc).__name__})")

    async def _discard_body(self, response: aiohttp.ClientResponse) -> None:
        """Read at most ``max_response_bytes``; an unread rest closes the connection."""
        remaining = self._policy.max_response_bytes
        while remaining > 0:
            chunk = await response.content.read(remaining)
            if not chunk:
                return
            remaining -= len(chunk)

    def _requeue(self, job: _Job) -> None:
        if job.timer is not None:
            self._timers.discard(job.timer)
            job.timer = None
        self._enqueue(job)

    def _finish(self) -> None:
        self._outstanding -= 1
        if self._outstanding == 0:
            self._idle.set()

    def _count(self, **increments: int) -> None:
        for name, step in increments.items():
            self._counts[name] += step


def _conforms(dispatcher: HookDispatcher) -> WakePort:
    """mypy checks here that the dispatcher satisfies the core's wake port."""
    return dispatcher
