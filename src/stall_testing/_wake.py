"""A recording wake port: what the sweep handed over, and what reached a receiver."""

from __future__ import annotations

import asyncio

import attrs

from stall_core import Nudge, WakeError, WakePort, WakeReceipt

__all__ = ["RecordingWake"]


@attrs.define
class RecordingWake:
    """A WakePort that records every nudge it is handed.

    ``sent`` holds the nudges that reached a receiver. Set ``refuse`` to
    make the transport refuse outright (``refused``), or ``reach`` to False
    to accept nudges that then reach nobody (``lost``), as a dead receiver's.
    """

    sent: list[Nudge] = attrs.field(factory=list)
    refused: list[Nudge] = attrs.field(factory=list)
    lost: list[Nudge] = attrs.field(factory=list)
    refuse: bool = False
    reach: bool = True

    async def wake(self, nudge: Nudge) -> WakeReceipt:
        if self.refuse:
            self.refused.append(nudge)
            raise WakeError(f"wake refused for {nudge.endpoint_id}/{nudge.queue}")
        (self.sent if self.reach else self.lost).append(nudge)
        receipt: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        receipt.set_result(self.reach)
        return receipt


def _conforms(wake: RecordingWake) -> WakePort:
    """mypy checks here that the recording wake satisfies the core's port."""
    return wake
