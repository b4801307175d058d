"""The sweep's bookkeeping: which ticks to look at, and the due pairs the tick limit holds back."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import attrs

from .board import SimPair
from .rules import ChargeOrder

__all__ = ["DuePairs", "SweepAgenda"]


@attrs.define
class SweepAgenda:
    """The ticks the sweep must look at, each with the pairs that become due or are cleared on it.

    A pair listed on a tick it is no longer scheduled for (its
    ``agenda_tick`` moved since) is stale and skipped.
    """

    #: Pairs to look at, by tick. A tick with held-back pairs is swept whether
    #: or not it is listed here (``DuePairs.count``).
    pairs_at: dict[int, list[SimPair]] = attrs.field(factory=dict)

    def add(self, pair: SimPair, tick: int) -> None:
        """Look at ``pair`` on ``tick``."""
        pairs = self.pairs_at.get(tick)
        if pairs is None:
            self.pairs_at[tick] = [pair]
        else:
            pairs.append(pair)

    def pop(self, tick: int) -> list[SimPair] | None:
        """The pairs listed on ``tick``, now taken off; None when none was listed."""
        return self.pairs_at.pop(tick, None)


@attrs.define
class DuePairs:
    """Pairs found due and not charged yet, in plan_tick's order; each tick takes the best.

    Ranks wait in a heap. A pair whose state changes is dropped by clearing
    its ``held_rank``; its heap entry goes stale and is skipped when it
    comes up, or swept out when stale entries outnumber the rest. Two
    entries of one rank name the same pair at the same place, so whichever
    comes up first stands for both.
    """

    order: ChargeOrder
    ranks: list[int] = attrs.field(factory=list)
    #: Pairs held now (stale heap entries not counted).
    count: int = 0

    def add(self, pair: SimPair, spent: int, oldest_created_us: int) -> None:
        """Hold ``pair`` until the tick limit lets it through.

        It spent ``spent`` nudges since progress; its oldest sendable todo was
        created ``oldest_created_us`` after the start.
        """
        rank = self.order.rank(spent, oldest_created_us, pair.index)
        pair.held_rank = rank
        self.count += 1
        heapq.heappush(self.ranks, rank)

    def drop(self, pair: SimPair) -> None:
        """Stop holding ``pair`` (charged, or its state changed)."""
        pair.held_rank = None
        self.count -= 1

    def take(self, limit: int, pairs: Sequence[SimPair]) -> list[tuple[int, SimPair]]:
        """Remove up to ``limit`` held pairs, best first; each comes with the nudges it spent."""
        chosen: list[tuple[int, SimPair]] = []
        ranks, order = self.ranks, self.order
        if len(ranks) > 2 * self.count + 1024:
            # Mostly stale entries: rebuilding from the pairs held now is cheaper
            # than popping them one by one.
            ranks[:] = [pair.held_rank for pair in pairs if pair.held_rank is not None]
            heapq.heapify(ranks)
        while ranks and len(chosen) < limit:
            rank = heapq.heappop(ranks)
            pair = pairs[order.pair_index(rank)]
            if pair.held_rank == rank:
                self.drop(pair)
                chosen.append((order.spent(rank), pair))
        return chosen
