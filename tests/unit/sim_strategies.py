"""The random scenarios the simulator's tests draw, written once."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from hypothesis import strategies as st

from stall_sim import Bursts, Consumer, ConsumerKind, Poisson, Scenario


def scenarios(
    *, max_pairs: int, durations: Sequence[timedelta], latencies: Sequence[timedelta]
) -> st.SearchStrategy[Scenario]:
    """Small boards with every arrival shape, consumer kind and loss the simulator models."""
    return st.builds(
        Scenario,
        pairs=st.integers(1, max_pairs),
        duration=st.sampled_from(list(durations)),
        tick=st.sampled_from([timedelta(seconds=15), timedelta(seconds=20), timedelta(seconds=45)]),
        queues_per_endpoint=st.integers(1, 4),
        arrivals=st.one_of(
            st.builds(Poisson, per_hour=st.sampled_from([0.0, 1.0, 4.0])),
            st.builds(Bursts, per_hour=st.sampled_from([0.5, 2.0]), size=st.integers(2, 4)),
        ),
        backlog=st.integers(0, 3),
        unverified_share=st.sampled_from([0.0, 0.3]),
        hookless_share=st.sampled_from([0.0, 0.3]),
        consumer=st.builds(
            Consumer,
            kind=st.sampled_from(list(ConsumerKind)),
            latency=st.sampled_from(list(latencies)),
            service=st.sampled_from([timedelta(0), timedelta(seconds=10), timedelta(minutes=2)]),
            batch=st.integers(1, 3),
            claim_probability=st.sampled_from([0.0, 0.5]),
        ),
        wake_loss=st.sampled_from([0.0, 0.2, 0.6]),
    )
