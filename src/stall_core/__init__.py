"""stall_core: the pure core of the SPEC-0038 queue-stall nudge.

Import rule: this package imports only the standard library, attrs and
itself. Its decisions read no clock and draw no randomness (time, policy and
random generators are arguments; only the Sweeper times its ticks, with the
event loop's monotonic clock), and it reaches Postgres and HTTP only through
the ports below. ruff's banned-api rule and tests/unit/test_purity.py enforce it.
"""

from ._decide import (
    FULL_PASS_INTERVAL,
    Capped,
    Charge,
    Decision,
    Drain,
    Idle,
    IdleReason,
    TickPlan,
    Wait,
    charge_row,
    charge_stamp,
    decide,
    effective_nudges,
    full_pass_due,
    is_candidate,
    made_progress,
    next_due_at,
    plan_tick,
    refunded_row,
    starts_over,
)
from ._durations import format_duration, parse_duration
from ._policy import PacingPolicy
from ._ports import HookDirectory, LedgerError, LedgerPort, WakeError, WakePort, WakeReceipt
from ._status import PairStatus, Verdict, pair_status
from ._sweeper import Clock, Sweeper, TickFailure, TickReport
from ._values import (
    QUARANTINE_QUEUE,
    ChargeOutcome,
    HookHealth,
    HookTarget,
    LedgerRow,
    Nudge,
    PairKey,
    PairState,
    TodoRef,
    aware,
    positive_int,
    positive_seconds,
)

__all__ = [
    "FULL_PASS_INTERVAL",
    "QUARANTINE_QUEUE",
    "Capped",
    "Charge",
    "ChargeOutcome",
    "Clock",
    "Decision",
    "Drain",
    "HookDirectory",
    "HookHealth",
    "HookTarget",
    "Idle",
    "IdleReason",
    "LedgerError",
    "LedgerPort",
    "LedgerRow",
    "Nudge",
    "PacingPolicy",
    "PairKey",
    "PairState",
    "PairStatus",
    "Sweeper",
    "TickFailure",
    "TickPlan",
    "TickReport",
    "TodoRef",
    "Verdict",
    "Wait",
    "WakeError",
    "WakePort",
    "WakeReceipt",
    "aware",
    "charge_row",
    "charge_stamp",
    "decide",
    "effective_nudges",
    "format_duration",
    "full_pass_due",
    "is_candidate",
    "made_progress",
    "next_due_at",
    "pair_status",
    "parse_duration",
    "plan_tick",
    "positive_int",
    "positive_seconds",
    "refunded_row",
    "starts_over",
]
