"""A host value the sweep cannot read stops nothing: every other pair is judged as without it.

PostgreSQL's timestamptz holds ``-infinity``, ``infinity`` and years from
4713 BC to 294276; a Python datetime holds years 1 to 9999, and asyncpg
decodes the infinities to naive ``datetime.min``/``max`` and raises on the
rest. The sweep reads such a value as none (docs/operations.md, "Host
values we tolerate"): a todo created at one is not work, a claim stamped
with one is not progress, and ``status`` shows the pair as needing a person
with the value escaped.
"""

from __future__ import annotations

import json
from datetime import timedelta

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.postgres import PostgresLedger
from stall_core import PacingPolicy, PairKey, PairStatus
from stall_nudge.cli.status import status_json
from stall_nudge.status_page import render_page
from stall_testing import PostgresHost
from tests import pg
from tests.cli.conftest import cli
from tests.support import T0, FakeClock, examples, minutes

pytestmark = pytest.mark.postgres

SECRET = "whsec_" + "A" * 32
NOW = T0 + minutes(30)
#: A policy whose tick limit charges every due pair, so one pair never crowds out another.
POLICY = PacingPolicy(tick_limit=1000)
#: Values of timestamptz no Python datetime holds, or that asyncpg writes as an infinity.
ODD = (
    "-infinity",
    "infinity",
    "0001-01-01 00:00:00+00 BC",
    "4713-01-01 00:00:00+00 BC",
    "10000-01-01 00:00:00+00",
    "294276-12-31 23:59:59.999999+00",
    "0001-01-01 00:00:00+00",
    "9999-12-31 23:59:59.999999+00",
)
#: The healthy pairs every test starts from: stalled work, a claim, fresh work.
HEALTHY = ("lane-a", "lane-b", "lane-c")


async def healthy_board(pool: asyncpg.Pool) -> PostgresHost:
    """One active endpoint with a hook covering every queue, and the three healthy pairs."""
    host = PostgresHost(pool)
    await host.add_endpoint("ep-1")
    await host.add_hook("hook-1", endpoint_id="ep-1", url="http://127.0.0.1:9/", secret=SECRET)
    await host.create_todo("a-1", endpoint_id="ep-1", queue="lane-a", created_at=T0)
    await host.create_todo("b-1", endpoint_id="ep-1", queue="lane-b", created_at=T0)
    await host.create_todo("b-2", endpoint_id="ep-1", queue="lane-b", created_at=T0)
    await host.claim("b-1", owner="worker", at=T0 + minutes(1))
    await host.create_todo("c-1", endpoint_id="ep-1", queue="lane-c", created_at=NOW)
    return host


async def set_instant(
    pool: asyncpg.Pool, table: str, column: str, row: str, value: str | None
) -> None:
    """Write ``value`` (timestamptz text, or None) to one column of one host row, as a host may."""
    assert table in {"todos", "deliveries", "notify_hooks"}
    assert column in {"created_at", "claimed_at", "lease_expires_at", "last_ringed_at"} | {
        "received_at",
        "disabled_at",
    }
    await pool.execute(
        f"UPDATE {table} SET {column} = $1::text::timestamptz WHERE id = $2", value, row
    )


def needs_person(pair: PairStatus) -> bool:
    """Whether `status --json` says the pair needs a person."""
    [record] = json.loads(status_json([pair], NOW, POLICY))["pairs"]
    return bool(record["needs_person"])


@pytest.mark.parametrize("column", ["created_at", "claimed_at"])
async def test_an_odd_instant_stops_no_tick_and_status_shows_it(
    pools: pg.Pools, column: str
) -> None:
    """A todo created at an instant Python cannot hold is not work, one claimed at one is
    not progress; every pair charges as without it; status marks the pair as needing a person.
    """
    host = await healthy_board(pools.host)
    await host.create_todo("odd", endpoint_id="ep-1", queue="lane-odd", created_at=T0)
    if column == "claimed_at":
        await host.create_todo("odd-2", endpoint_id="ep-1", queue="lane-odd", created_at=T0)
        await host.claim("odd", owner="worker", at=T0)
    seen = {}
    for value in ODD:
        await set_instant(pools.host, "todos", column, "odd", value)
        await pools.admin.execute("DELETE FROM stall_nudge.queue_stall_nudges")
        clock = FakeClock(NOW)
        ledger = PostgresLedger(pools.sweeper, clock=clock)
        first = await ledger.charge_due(policy=POLICY)
        _, pairs = await ledger.status(policy=POLICY)
        # Half an hour on: a full pass again, and a claim read as progress would reset.
        clock.set(NOW + minutes(30))
        later = await ledger.charge_due(policy=POLICY)
        odd = {p.queue: p for p in pairs}["lane-odd"].unreadable
        seen[value] = (
            [(n.queue, n.number) for n in (*first.charged, *later.charged)],
            [(p.queue, needs_person(p)) for p in pairs],
            None if odd is None else (odd.todo_id, odd.column),
        )

    # With a claim, lane-odd's other todo is work and the claim no progress: it backs off
    # as lane-a does. Least nudged first: lane-c's first nudge leads the later tick.
    odd = column == "claimed_at"
    charged = [("lane-a", 1), ("lane-b", 1)] + [("lane-odd", 1)] * odd
    charged += [("lane-c", 1), ("lane-a", 2), ("lane-b", 2)] + [("lane-odd", 2)] * odd
    flags = [("lane-a", False), ("lane-b", False), ("lane-c", False), ("lane-odd", True)]
    assert dict.fromkeys(ODD, (charged, flags, ("odd", column))) == seen


async def test_status_check_exits_3_and_shows_the_odd_value_escaped(
    site: pg.Site, pools: pg.Pools
) -> None:
    """`status --check` exits 3 for a pair with an odd instant and names it; the table and
    the page escape the value and the id it is quoted with."""
    host = PostgresHost(pools.host)
    await host.add_endpoint("ep-1")
    await host.add_hook("hook-1", endpoint_id="ep-1", url="http://127.0.0.1:9/", secret=SECRET)
    todo = "odd\x1b[2J<b>"
    await host.create_todo(todo, endpoint_id="ep-1", queue="lane", created_at=T0)
    await set_instant(pools.host, "todos", "created_at", todo, "0001-01-01 00:00:00+00 BC")
    dsn = site.as_role(site.cast.sweeper)

    text = await cli("status", "--check", "--dsn", dsn)
    as_json = await cli("status", "--check", "--json", "--dsn", dsn)
    now, pairs = await PostgresLedger(pools.sweeper, clock=FakeClock(NOW)).status(policy=POLICY)
    page = render_page(now, pairs, policy=POLICY, refresh_s=10)

    assert (3, 3) == (text.status, as_json.status), text.err
    [pair] = json.loads(as_json.out)["pairs"]
    assert ("unreadable", todo, "created_at") == (
        pair["verdict"],
        pair["unreadable"]["todo_id"],
        pair["unreadable"]["column"],
    )
    assert "\x1b" not in text.out
    assert "! ep-1/lane: todo odd\\x1b[2J<b> has created_at 0001-01-01 00:00:00+00 BC" in text.out
    assert (False, False, True) == ("\x1b" in page, "<b>" in page, "0001-01-01" in page)


#: The timestamptz columns of each host row the property poisons, and whether NULL fits.
COLUMNS = {
    "todos": (
        ("created_at", False),
        ("claimed_at", True),
        ("lease_expires_at", True),
        ("last_ringed_at", True),
        ("id", False),
    ),
    "deliveries": (("received_at", False),),
    "notify_hooks": (("disabled_at", True),),
    "endpoints": (("id", False),),
}


@st.composite
def timestamptz_text(draw: st.DrawFn) -> str:
    """Any value timestamptz admits, as text: the infinities, BC, year 10000+ or a usual one."""
    special = st.sampled_from(ODD)
    year = st.integers(min_value=-4712, max_value=294276)
    usual = st.integers(min_value=-3600 * 24, max_value=3600 * 24).map(
        lambda s: (T0 + timedelta(seconds=s)).isoformat()
    )
    kind = draw(st.sampled_from(("special", "year", "usual")))
    if kind == "special":
        return draw(special)
    if kind == "usual":
        return draw(usual)
    y = draw(year)
    month, day = draw(st.integers(1, 12)), draw(st.integers(1, 28))
    micro = draw(st.integers(0, 86_400_000_000 - 1))
    clock = f"{micro // 3_600_000_000:02d}:{micro // 60_000_000 % 60:02d}:" + (
        f"{micro // 1_000_000 % 60:02d}.{micro % 1_000_000:06d}"
    )
    era = "" if y > 0 else " BC"
    return f"{abs(y) if y > 0 else 1 - y:04d}-{month:02d}-{day:02d} {clock}+00{era}"


#: Ids a host may hold that no scenario uses: empty, blank, a payload's separator, markup,
#: terminal escapes, bidi controls, a name too long for an index entry.
ODD_IDS = ("", " ", "a:b", "<b>&amp;", "\x1b[2J", "\u202egnp.exe", "NULL", "x" * 3000)
ODD_ID = st.sampled_from(ODD_IDS) | st.text(
    st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20
).filter(lambda t: t not in {"ep-1", "a-1", "b-1", "b-2", "c-1"})


@st.composite
def poisons(draw: st.DrawFn) -> tuple[str, str, str | None, str, str]:
    """One host row, one of its columns, the value, the todo's state and queue.

    A timestamptz column gets any value of the type (NULL where nullable); an
    id column (a todo's, or a new endpoint's with its own hook and todo) any
    text PostgreSQL stores.
    """
    table = draw(st.sampled_from(sorted(COLUMNS)))
    column, nullable = draw(st.sampled_from(COLUMNS[table]))
    if column == "id":
        value: str | None = draw(ODD_ID)
    elif nullable:
        value = draw(timestamptz_text() | st.none())
    else:
        value = draw(timestamptz_text())
    state = draw(st.sampled_from(("pending", "claimed", "done")))
    queue = draw(st.sampled_from((*HEALTHY, "lane-odd")))
    return table, column, value, state, queue


async def poison(
    pool: asyncpg.Pool, table: str, column: str, value: str | None, state: str, queue: str
) -> None:
    """Add the odd row: a todo, hook or endpoint, or a verified delivery and a todo of it."""
    host = PostgresHost(pool)
    if table == "endpoints":
        assert value is not None
        await host.add_endpoint(value)
        await host.add_hook("odd-h", endpoint_id=value, url="http://127.0.0.1:9/", secret=SECRET)
        await host.create_todo("odd", endpoint_id=value, queue=queue, created_at=T0)
        return
    if column == "id":
        assert value is not None
        await host.create_todo(value, endpoint_id="ep-1", queue=queue, created_at=T0)
        return
    if table == "notify_hooks":
        await host.add_hook("odd-h", endpoint_id="ep-1", url="http://127.0.0.1:9/", secret=SECRET)
        await set_instant(pool, table, column, "odd-h", value)
        return
    delivery = None
    if table == "deliveries":
        delivery = "odd-d"
        await host.add_delivery(delivery, endpoint_id="ep-1", verified=True, received_at=T0)
        await set_instant(pool, table, column, delivery, value)
    await host.create_todo(
        "odd", endpoint_id="ep-1", queue=queue, created_at=T0 - minutes(5), delivery_id=delivery
    )
    if state != "pending":
        await host.claim("odd", owner="worker", at=T0)
    if state == "done":
        await host.complete("odd")
    if table == "todos":
        await set_instant(pool, table, column, "odd", value)


async def sweeps(pool: asyncpg.Pool) -> tuple[list[dict[PairKey, tuple[object, ...]]], ...]:
    """Two ticks of one ledger (a full pass, then a delta) and status at each: what each decided."""
    clock = FakeClock(NOW)
    ledger = PostgresLedger(pool, clock=clock)
    charged: list[dict[PairKey, tuple[object, ...]]] = []
    verdicts: list[dict[PairKey, tuple[object, ...]]] = []
    for step in (0, 30):
        clock.set(NOW + minutes(step))
        outcome = await ledger.charge_due(policy=POLICY)
        charged.append({n.key: (n.number, n.todo.id, n.charged_at) for n in outcome.charged})
        _, pairs = await ledger.status(policy=POLICY)
        verdicts.append({(p.endpoint_id, p.queue): (p.verdict, needs_person(p)) for p in pairs})
    return charged, verdicts


async def clear(pool: asyncpg.Pool) -> None:
    """Empty the host's tables and ours, for the next example."""
    for table in (
        "todos",
        "deliveries",
        "notify_hooks",
        "endpoints",
        "stall_nudge.queue_stall_nudges",
        "stall_nudge.ticks",
        "stall_nudge.held",
    ):
        await pool.execute(f"DELETE FROM {table}")


def others(
    decided: list[dict[PairKey, tuple[object, ...]]], pair: PairKey
) -> list[dict[PairKey, tuple[object, ...]]]:
    """What was decided at each tick for every pair but ``pair``."""
    return [{k: v for k, v in d.items() if k != pair} for d in decided]


#: What the healthy board alone decides, at each of the two ticks (charges, verdicts).
BASELINE: list[list[dict[PairKey, tuple[object, ...]]]] = []


@settings(max_examples=examples(15), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(odd=poisons())
async def test_any_value_in_one_row_leaves_every_other_pair_as_it_was(
    pools: pg.Pools, odd: tuple[str, str, str | None, str, str]
) -> None:
    """Any timestamptz, NULL or id in one host row leaves the other pairs' charges and verdicts."""
    table, column, value, state, queue = odd
    pair = (str(value) if table == "endpoints" else "ep-1", queue)
    if not BASELINE:  # the healthy board alone, swept once: the same for every example
        await clear(pools.admin)
        await healthy_board(pools.host)
        BASELINE.extend(await sweeps(pools.sweeper))
    baseline = BASELINE
    await clear(pools.admin)
    await healthy_board(pools.host)
    await poison(pools.host, table, column, value, state, queue)

    charged, verdicts = await sweeps(pools.sweeper)

    assert (others(baseline[0], pair), others(baseline[1], pair)) == (
        others(charged, pair),
        others(verdicts, pair),
    )
