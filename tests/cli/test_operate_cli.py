"""The operator's verbs on a real database: silence, unsilence, reset, nudge and history."""

from __future__ import annotations

import json
import shlex

import pytest

from stall_testing import PostgresHost, Receiver
from tests.cli.conftest import cli, stalled

pytestmark = pytest.mark.postgres


async def test_nudge_now_wakes_the_pair_once_and_the_history_shows_it(
    pg_dsn: str, board: PostgresHost, receiver: Receiver
) -> None:
    """A nudge now delivers one wake; a second, at once, says when the first was; both kept."""
    first = await cli(
        "nudge", "ep-1", "lane-l", "--by", "ann", "--reason", "stuck", "--dsn", pg_dsn
    )
    second = await cli("nudge", "ep-1", "lane-l", "--by", "bob", "--dsn", pg_dsn)
    shown = await cli("history", "ep-1", "lane-l", "--json", "--dsn", pg_dsn)

    assert (0, "nudged ep-1/lane-l: nudge 1 naming todo l-0, delivered\n") == (
        first.status,
        first.out,
    )
    assert 0 == second.status
    assert second.out.startswith("not nudged again: ep-1/lane-l was nudged ")
    assert [("l-0", "lane-l")] == stalled(receiver)
    entries = json.loads(shown.out)["entries"]
    assert [("charged", None, "delivered"), ("nudged", "ann", None), ("nudged", "bob", None)] == (
        sorted((e["event"], e["by"], e["outcome"]) for e in entries)
    )


async def test_a_silenced_pair_is_not_nudged_and_says_why(
    pg_dsn: str, board: PostgresHost, receiver: Receiver
) -> None:
    """A silence on the endpoint keeps a nudge now from its queues; unsilence lifts it."""
    silenced = await cli(
        "silence", "ep-1", "--for", "2h", "--by", "ann", "--reason", "deploy", "--dsn", pg_dsn
    )
    refused = await cli("nudge", "ep-1", "lane-l", "--dsn", pg_dsn)
    lifted = await cli("unsilence", "ep-1", "--dsn", pg_dsn)
    again = await cli("unsilence", "ep-1", "--dsn", pg_dsn)

    assert 0 == silenced.status
    assert silenced.out.startswith("silenced ep-1 (every queue) until ")
    assert (3, "not nudged: ep-1/lane-l: it is silenced: unsilence it first\n") == (
        refused.status,
        refused.out,
    )
    assert [] == stalled(receiver)
    assert (0, "unsilenced ep-1\n") == (lifted.status, lifted.out)
    assert (0, "ep-1 was not silenced\n") == (again.status, again.out)


async def test_reset_of_a_pair_without_a_row_says_so(pg_dsn: str, board: PostgresHost) -> None:
    """Reset of a pair never nudged changes nothing and says its next nudge is a first one."""
    result = await cli("reset", "ep-1", "lane-l", "--dsn", pg_dsn)

    assert (0, "ep-1/lane-l has no ledger row: its next nudge is nudge 1 already\n") == (
        result.status,
        result.out,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("reset", "ep-9", "lane-l"), "no endpoint 'ep-9'"),
        (("nudge", "ep-1", "lane-typo"), "endpoint 'ep-1' has no queue 'lane-typo'"),
        (("silence", "ep-1", "--reason", "x", "--for", "0s"), "must be a positive duration"),
        (("silence", "ep-1", "--for", "1h"), "the following arguments are required: --reason"),
        (("unsilence", ""), "ENDPOINT must not be empty"),
        (("history", "--limit", "0"), "--limit must be 1 or more"),
    ],
)
async def test_bad_input_is_one_line_and_exit_2(
    pg_dsn: str, board: PostgresHost, args: tuple[str, ...], message: str
) -> None:
    """A pair the host does not have, or a bad option, is refused: exit 2, one line naming it."""
    result = await cli(*args, "--dsn", pg_dsn)

    assert 2 == result.status
    assert "" == result.out
    assert 1 == len(result.err.splitlines())
    assert message in result.err


async def test_the_operations_guide_verbs_run_as_printed(
    pg_dsn: str, board: PostgresHost, receiver: Receiver
) -> None:
    """docs/operations.md's verbs, in its order, on a stalled ep-1/lane-l: each exits 0."""
    from tests.embed.test_doc_examples import ROOT, blocks, commands

    (block,) = [b for b in blocks(ROOT / "docs/operations.md") if "stall-nudge silence" in b.source]
    statuses = []
    for line in commands(block):
        words = shlex.split(line, comments=True)
        assert "stall-nudge" == words[0]
        statuses.append((words[1], (await cli(*words[1:], "--dsn", pg_dsn)).status))

    assert [(v, 0) for v in ("silence", "unsilence", "reset", "nudge", "history")] == statuses
    assert [("l-0", "lane-l")] == stalled(receiver)


async def test_a_nudge_says_why_a_fresh_or_quarantined_queue_is_not_a_candidate(
    pg_dsn: str, board: PostgresHost, receiver: Receiver
) -> None:
    """Fresh work names the policy's threshold; the quarantine queue is named as such."""
    created = await board.todos()
    await board.create_todo(
        "q-0", endpoint_id="ep-1", queue="quarantine", created_at=created["l-0"]["created_at"]
    )

    fresh = await cli("nudge", "ep-1", "fresh", "--dsn", pg_dsn)
    held = await cli("nudge", "ep-1", "quarantine", "--dsn", pg_dsn)

    assert (3, "not nudged: ep-1/fresh: its oldest work is within the threshold (2m): the sweep "
            "nudges it then\n") == (fresh.status, fresh.out)  # fmt: skip
    assert (3, "not nudged: ep-1/quarantine: it is the quarantine queue: its deliveries are "
            "held, never nudged\n") == (held.status, held.out)  # fmt: skip
    assert [] == stalled(receiver)
