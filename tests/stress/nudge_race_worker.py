"""One process of the nudge-now race: a fleet sweeper, or an operator, each an ``open_reaper``.

``nudge_race.py`` starts it under libfaketime (its wall clock shifted: no
decision may read it). A ``fleet`` process runs ``Reaper.run`` as the
sidecar does, ticking every ``FLEET_INTERVAL_S`` with a full pass every
``FULL_PASS``, until its input ends; it then answers its tick count. An
``operator`` process reads one JSON command a line: at the monotonic instant
``at`` (the machine's clock, which libfaketime leaves alone, so both
operators start together) it calls ``Reaper.nudge`` on every pair named, at
once, settles the deliveries, and answers one JSON line: per pair, what
``stall_core.nudge_now`` decided and the nudge its tick charged, if any.

``--fault double-hand`` is the positive control: the operator wakes every
nudge it charged a second time (a new message), which the race must count
as a duplicate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from datetime import timedelta
from typing import Any

import stall_nudge
from stall_core import Charge, Idle, Wait

FAULTS = ("none", "double-hand")
#: The fleet's interval: every process tries the lock this often; one sweeps.
FLEET_INTERVAL_S = 0.05
#: A full pass this often, so every pair is judged within it whatever deltas find.
FULL_PASS = timedelta(milliseconds=300)


def _decided(decision: Charge | Idle | Wait) -> str:
    match decision:
        case Idle(reason=why):
            return f"idle:{why.value}"
        case Wait():
            return "wait"
        case _:
            return "charge"


async def _nudge(
    reaper: stall_nudge.Reaper, pair: list[str], by: str, fault: str
) -> dict[str, Any]:
    endpoint_id, queue = pair
    try:
        result, _ = await reaper.nudge(endpoint_id, queue, by=by, reason="race")
    except Exception as exc:
        return {"pair": pair, "error": f"{type(exc).__name__}: {exc}"}
    charged = result.charged
    if fault == "double-hand" and charged is not None:
        # A second message for one charge: what a broken operator path would send.
        await reaper._wake.wake(charged)
    return {
        "pair": pair,
        "decision": _decided(result.decision),
        "charged": None
        if charged is None
        else {"number": charged.number, "charged_at": charged.charged_at.isoformat()},
        # Every charge of its tick, this pair's and others' (a nudge now is a whole tick).
        "ticked": [[n.endpoint_id, n.charged_at.isoformat()] for n in result.outcome.charged],
    }


async def operator(dsn: str, index: int, fault: str) -> int:
    reader = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
    )
    async with stall_nudge.open_reaper(dsn, stop_timeout=10.0) as reaper:
        sys.stdout.write(json.dumps({"ready": index}) + "\n")
        sys.stdout.flush()
        while line := await reader.readline():
            command = json.loads(line)
            await asyncio.sleep(max(0.0, command["at"] - time.monotonic()))
            late_ms = (time.monotonic() - command["at"]) * 1000
            answers = await asyncio.gather(
                *(_nudge(reaper, pair, f"operator-{index}", fault) for pair in command["pairs"])
            )
            await reaper.settle()
            sys.stdout.write(json.dumps({"answers": answers, "late_ms": late_ms}) + "\n")
            sys.stdout.flush()
    return 0


async def fleet(dsn: str, index: int) -> int:
    reader = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
    )
    stop = asyncio.Event()
    async with stall_nudge.open_reaper(
        dsn, stop_timeout=10.0, full_pass_interval=FULL_PASS
    ) as reaper:
        run = asyncio.create_task(reaper.run(interval=FLEET_INTERVAL_S, stop=stop))
        sys.stdout.write(json.dumps({"ready": index}) + "\n")
        sys.stdout.flush()
        await reader.read()  # until the coordinator closes our input
        stop.set()
        ticks = await run
    sys.stdout.write(json.dumps({"ticks": ticks}) + "\n")
    sys.stdout.flush()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--role", choices=("fleet", "operator"), required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--fault", choices=FAULTS, default="none")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.ERROR,
        format=f"%(asctime)s {args.role}{args.index} %(levelname)s %(name)s: %(message)s",
    )
    if args.role == "fleet":
        return asyncio.run(fleet(args.dsn, args.index))
    return asyncio.run(operator(args.dsn, args.index, args.fault))


if __name__ == "__main__":
    sys.exit(main())
