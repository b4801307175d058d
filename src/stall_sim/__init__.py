"""The pacing simulator: what-if runs of a nudge policy on the sweep's own decisions.

Theory of operation
-------------------
A run is a board of ``pairs`` (endpoint, queue) pairs, each with one
consumer, over ``duration`` of virtual time. Instants are whole microseconds
since ``start``; the sweep runs only on reaper ticks (``start + k * tick``).

The host does two things, as typed events (``events``): an ``Arrival``
creates todos and sends each one's creation wake to the pair's notify hook,
if one covers it; a started consumer's ``ConsumerClaims`` claims. A wake
reaching a running consumer is ignored (the one-shot shape of the spec's
reported case); one reaching an idle consumer starts it, and ``latency``
later it claims one todo (one-shot), up to ``batch`` (batch), one with
probability ``claim_probability`` (flaky) or none (dead: it exits at once).
It stays busy ``service`` per claimed todo. A claim takes the pair's oldest
pending todo, verified or not, as the host's claim verb does.

``wake_loss`` loses that share of wakes, creation wakes and nudges alike,
past the receiver: its hook answered and the consumer never ran. Such a
nudge counts toward the cap. A nudge that reaches no receiver at all is
refunded and does not count: ``faults`` models the receiver outages that
cause it, as the real dispatcher retries, refunds and disables, with
sweeper outages and creation wakes dropped before any request.

``replay`` runs the same engine over a host's own history (``history``:
its records, file formats and errors), its consumers modelled from the
claims that followed each wake.

The host's rules are the core's own: a todo is sendable by
``passes_gate``, a pair has a receiver by ``has_receiver``, and its
endpoint is active by ``endpoint_active``. The sweep makes the core's
decisions with plain integers. A pair is
looked at only on the first tick where ``decide`` would charge it or clear
its row, and due pairs wait behind the tick limit in ``plan_tick``'s order
(``run``, ``sweep``); a charge is nudge ``effective_nudges + 1``,
stamped with the tick's instant, as ``charge_row`` does. Those
restatements live in ``rules``, each pinned to the core by
tests/unit/test_sim_rules.py. ``simulate(..., check=True)`` also runs
``plan_tick`` over the whole board on every tick and raises unless it
charges and clears exactly what the run did; the tests run random boards
that way, and tests/unit/test_sim_faithful.py replays runs on the real
``Sweeper``.

Randomness comes from two generators the caller seeds (``random.Random``
satisfies ``RandomSource``): ``workload`` draws the layout and arrivals
only, so every policy sees the same todos; ``chance`` draws wake losses and
flaky claims. Like the rest of ``stall_core`` this package reads no clock
and draws no randomness of its own.

Modules: ``scenario`` (what is asked), ``events`` (host events and the
trace), ``board`` (one pair's state), ``rules`` (the restated rules),
``sweep`` (the agenda and the held-back pairs), ``run`` (the loop),
``result`` (counts, samples and the result), ``faults`` (outages, dropped
wakes), ``history`` and ``replay`` (a host's own traffic), ``plot``
(results drawn side by side; matplotlib, the ``plot`` extra, loads only
when it draws).
"""

from .events import Claimed, Created
from .faults import Delivery, Faults, Hang, ReceiverOutage, Window
from .history import History, HistoryError, parse_csv, parse_jsonl, parse_nudges, parse_records
from .replay import NudgeMatch, Prepared, compare_nudges, prepare, replay
from .result import SimResult, WaitStats
from .run import simulate
from .scenario import (
    UNCAPPED,
    Bursts,
    Consumer,
    ConsumerKind,
    Poisson,
    RandomSource,
    Scenario,
    SimPolicy,
)

__all__ = [
    "UNCAPPED",
    "Bursts",
    "Claimed",
    "Consumer",
    "ConsumerKind",
    "Created",
    "Delivery",
    "Faults",
    "Hang",
    "History",
    "HistoryError",
    "NudgeMatch",
    "Poisson",
    "Prepared",
    "RandomSource",
    "ReceiverOutage",
    "Scenario",
    "SimPolicy",
    "SimResult",
    "WaitStats",
    "Window",
    "compare_nudges",
    "parse_csv",
    "parse_jsonl",
    "parse_nudges",
    "parse_records",
    "prepare",
    "replay",
    "simulate",
]
