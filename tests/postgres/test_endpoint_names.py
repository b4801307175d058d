"""The endpoint's name, where the host keeps one: read through our view, granted, and shown.

The reference host has no ``endpoints.name``; these hosts add one, as a DBA
would (tests/pg.py), before migrate or after it. Our view of endpoints
carries the name as text where the host has one of a type of PostgreSQL's
own, else NULL; a sweeping role needs SELECT on it exactly then.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

import pytest

import stall_nudge
from adapters.memory import MemoryBoard
from adapters.postgres import check, migrate, uninstall
from stall_core import PacingPolicy
from stall_testing import FakeClock, HostVerbs, MemoryDriver
from tests import pg
from tests.cli.conftest import cli
from tests.postgres.test_grants import EXPECTED, privileges

pytestmark = pytest.mark.postgres

#: What --grant gives a new role on a host that names its endpoints, beyond EXPECTED.
NAME_PRIVILEGE = "column endpoints.name: SELECT"
#: Column types a host may name its endpoints with, and what the type needs first.
NAME_TYPES = {
    "text": "",
    "varchar(40)": "",
    "sb.label": "CREATE DOMAIN sb.label AS varchar(80);",
}


@pytest.fixture(name="role")
async def _role(bare_site: pg.Site) -> AsyncIterator[str]:
    """A login role of its own, granted nothing."""
    async with pg.login_role(bare_site.dsn, bare_site.dsn, "stall_sweeper") as (role, _):
        yield role


async def add_names(site: pg.Site, column_type: str, before: str = "") -> None:
    """The host's owner adds ``endpoints.name``; ep-1 is named, ep-2 is not (resolving
    nothing in ``planted``'s public schema)."""
    await pg.execute(
        site.dsn,
        f'SET search_path = pg_catalog; SET ROLE "{site.cast.owner}"; {before}'
        f" ALTER TABLE sb.endpoints ADD COLUMN name {column_type};"
        " UPDATE sb.endpoints SET name = 'Billing' WHERE id = 'ep-1'; RESET ROLE",
    )


async def add_endpoints(site: pg.Site) -> None:
    """Two endpoints with a pending todo each, as the host writes them."""
    await pg.execute(
        site.dsn,
        "INSERT INTO sb.endpoints (id, state) VALUES ('ep-1', 'active'), ('ep-2', 'active');"
        " INSERT INTO sb.todos (id, endpoint_id, queue, state, created_at)"
        " VALUES ('t-1', 'ep-1', 'lane', 'pending', now()),"
        " ('t-2', 'ep-2', 'lane', 'pending', now())",
    )


async def migrated(site: pg.Site, grant: str | None = None) -> None:
    async with site.connect(site.cast.migrator) as conn:
        await migrate(conn, grant=grant)


async def problems(site: pg.Site) -> tuple[str, ...]:
    async with site.connect(site.cast.migrator) as conn:
        return (await check(conn)).problems


async def shown(site: pg.Site, role: str) -> tuple[list[str], list[tuple[str, str | None]]]:
    """``status`` as ``role``: each row's endpoint cell, and JSON's (id, name) of each pair."""
    text = await cli("status", "--dsn", site.as_role(role))
    as_json = await cli("status", "--json", "--dsn", site.as_role(role))
    assert (0, 0) == (text.status, as_json.status), text.err + as_json.err
    cells = [line[2:].split("  ")[0] for line in text.out.splitlines() if "  lane  " in line]
    pairs = json.loads(as_json.out)["pairs"]
    return cells, [(p["endpoint_id"], p["endpoint_name"]) for p in pairs]


@pytest.mark.parametrize("column_type", sorted(NAME_TYPES))
async def test_a_host_that_names_its_endpoints_shows_each_name_beside_its_id(
    bare_site: pg.Site, role: str, column_type: str
) -> None:
    """migrate reads the name, check is clean, --grant gives SELECT on it; status shows it."""
    await add_endpoints(bare_site)
    await add_names(bare_site, column_type, NAME_TYPES[column_type])
    await migrated(bare_site, grant=role)

    assert () == await problems(bare_site)
    assert {*EXPECTED, NAME_PRIVILEGE} == await privileges(bare_site, role)
    cells, pairs = await shown(bare_site, role)
    assert ["Billing (ep-1)", "ep-2"] == cells
    assert [("ep-1", "Billing"), ("ep-2", None)] == pairs


async def test_the_reference_host_shows_ids_and_grants_nothing_more(
    bare_site: pg.Site, role: str
) -> None:
    """No endpoints.name: status shows ids alone, and a role gets no privilege for names."""
    await add_endpoints(bare_site)
    await migrated(bare_site, grant=role)

    assert () == await problems(bare_site)
    assert EXPECTED == await privileges(bare_site, role)
    assert (["ep-1", "ep-2"], [("ep-1", None), ("ep-2", None)]) == await shown(bare_site, role)


@pytest.mark.parametrize("bare_site", pg.SETUPS, indirect=True)
async def test_a_host_that_adds_names_after_migrate_has_its_view_made_again(
    bare_site: pg.Site, role: str
) -> None:
    """Until migrate, nothing changes (the role still starts); check then finds the view
    different and the role lacking SELECT on the names; migrate repairs both."""
    await add_endpoints(bare_site)
    await migrated(bare_site, grant=role)
    await add_names(bare_site, "varchar(40)")

    before = await shown(bare_site, role)
    found = await problems(bare_site)
    await migrated(bare_site)

    assert (["ep-1", "ep-2"], [("ep-1", None), ("ep-2", None)]) == before
    assert "different: view host_endpoints" in found
    assert f'grants: role {role} lacks SELECT (name) on "sb"."endpoints"' in found
    assert () == await problems(bare_site)
    assert {*EXPECTED, NAME_PRIVILEGE} == await privileges(bare_site, role)
    assert [("ep-1", "Billing"), ("ep-2", None)] == (await shown(bare_site, role))[1]


async def test_a_role_that_may_not_read_the_names_our_view_reads_cannot_start(
    bare_site: pg.Site, role: str
) -> None:
    """Every read of the view asks for the name: the start-up check says so, in one line."""
    await add_names(bare_site, "text")
    await migrated(bare_site, grant=role)
    await pg.execute(bare_site.dsn, f'REVOKE SELECT (name) ON sb.endpoints FROM "{role}"')

    with pytest.raises(stall_nudge.StartupError) as refused:
        async with stall_nudge.open_reaper(bare_site.as_role(role)):
            pass

    assert 'this role lacks SELECT (name) on "sb"."endpoints"' in str(refused.value)
    assert f'grants: role {role} lacks SELECT (name) on "sb"."endpoints"' in await problems(
        bare_site
    )


async def test_a_host_that_drops_its_names_leaves_nothing_to_revoke(
    bare_site: pg.Site, role: str
) -> None:
    """Dropping the names takes our view with them: migrate makes it again, forgets the grant
    it recorded, and uninstall then revokes the rest."""
    await add_names(bare_site, "text")
    await migrated(bare_site, grant=role)
    await pg.execute(bare_site.dsn, "ALTER TABLE sb.endpoints DROP COLUMN name CASCADE")

    found = await problems(bare_site)
    await migrated(bare_site)
    after = await problems(bare_site)
    async with bare_site.connect(bare_site.cast.migrator) as conn:
        await uninstall(conn)

    assert "missing: view host_endpoints" in found
    assert (
        "extra: the record of SELECT (name) on endpoints, a column the host no longer has" in found
    )
    assert () == after
    # A dropped column keeps its ACL in the catalog, as no privilege on anything.
    assert set() == {p for p in await privileges(bare_site, role) if "pg.dropped" not in p}


async def test_names_of_a_type_not_postgresqls_own_are_not_read(
    bare_site: pg.Site, role: str
) -> None:
    """An enum's text form is its owner's code: status shows ids, check says why."""
    await add_endpoints(bare_site)
    await add_names(bare_site, "sb.tag", "CREATE TYPE sb.tag AS ENUM ('Billing');")
    await migrated(bare_site, grant=role)
    async with bare_site.connect(bare_site.cast.migrator) as conn:
        report = await check(conn)

    assert () == report.problems
    assert any("endpoints.name is of type sb.tag" in line for line in report.advice)
    assert EXPECTED == await privileges(bare_site, role)
    assert [("ep-1", None), ("ep-2", None)] == (await shown(bare_site, role))[1]


AddEndpoint = Callable[[str, str | None], Awaitable[None]]
#: When the scenario's todos were created: before any board's clock starts.
START = FakeClock().now - timedelta(minutes=10)


async def named_board(host: HostVerbs, add_endpoint: AddEndpoint) -> None:
    """Two endpoints, one named, each with a pending todo."""
    await add_endpoint("ep-1", "Billing")
    await add_endpoint("ep-2", None)
    for endpoint in ("ep-1", "ep-2"):
        await host.create_todo(
            f"t-{endpoint}", endpoint_id=endpoint, queue="lane", created_at=START
        )


async def test_memory_and_postgres_show_the_same_names(site: pg.Site) -> None:
    """The same board on the memory board and on a host with names: the same status."""
    await add_names(site, "text")
    await migrated(site)
    memory = MemoryDriver()
    board: MemoryBoard = memory.board

    async def add_in_memory(endpoint_id: str, name: str | None) -> None:
        board.add_endpoint(endpoint_id, name=name)

    await named_board(memory, add_in_memory)
    async with site.driver() as driver, site.pools() as pools:

        async def add_on_postgres(endpoint_id: str, name: str | None) -> None:
            await driver.add_endpoint(endpoint_id)
            await pools.admin.execute(
                "UPDATE endpoints SET name = $2 WHERE id = $1", endpoint_id, name
            )

        await named_board(driver, add_on_postgres)
        on_postgres = (await driver.operated.status(policy=PacingPolicy()))[1]
    in_memory = (await memory.operated.status(policy=PacingPolicy()))[1]

    expected = [("ep-1", "lane", "Billing"), ("ep-2", "lane", None)]
    assert expected == [(p.endpoint_id, p.queue, p.endpoint_name) for p in in_memory]
    assert expected == [(p.endpoint_id, p.queue, p.endpoint_name) for p in on_postgres]
