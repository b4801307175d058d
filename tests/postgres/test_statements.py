"""Every statement `stall-nudge sql` prints is valid PostgreSQL as printed, once migrated."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.postgres import shipped_sql
from tests import pg

pytestmark = pytest.mark.postgres


async def test_psql_prepares_every_printed_statement(site: pg.Site, tmp_path: Path) -> None:
    """psql parses, resolves and plans each statement of the sweep, status, hooks and migrate.

    As the sweeping role in a DBA's database, under the search_path our
    transactions set, in one transaction rolled back: PREPARE binds each $n to
    the type PostgreSQL infers for it.
    """
    sources = {
        s: named
        for s, named in shipped_sql().items()
        if s in ("tick", "ledger", "hooks", "migrate")
    }
    script = ["BEGIN;", "SET LOCAL search_path = pg_catalog, stall_nudge, pg_temp;"]
    for source, named in sources.items():
        script += [
            f"PREPARE {source}_{name} AS\n{sql.rstrip().rstrip(';')};"
            for name, sql in named.items()
        ]
    script.append("ROLLBACK;")

    status, errors = await pg.psql_file(
        site.as_role(site.cast.sweeper), "\n".join(script), tmp_path
    )

    assert (0, b"") == (status, errors)
    assert sum(len(named) for named in sources.values()) >= 30
