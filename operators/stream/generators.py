"""Synthetic streams with a seed: keyed events with skewed keys and event-time stamps.

Row r of a stream depends only on the seed and r (counter-based random numbers in a
nogil kernel), and timestamps are a running sum carried from packet to packet, so the
same seed gives the same rows whatever the packet sizes: :func:`events` computes the
stream's first n rows at once (the reference a test compares with) and
:class:`EventSource` emits it packet by packet, optionally paced and unbounded.
"""

from __future__ import annotations

import numpy as np

from bobox_sched.core.sources import GeneratorSource

from operators.stream.kernels import gen_events
from operators.stream.schemas import as_schema

EVENT_SCHEMA = {"ts": np.int64, "key": np.int64, "value": np.float64}


def zipf_cdf(n_keys: int, skew: float) -> np.ndarray:
    """Cumulative probabilities of keys 0..n_keys-1 with P(k) ~ 1 / (k + 1)^skew (skew 0:
    uniform; 1: Zipf's law, key 0 the most frequent)."""
    if not isinstance(n_keys, (int, np.integer)) or n_keys < 1:
        raise ValueError(f"n_keys must be a positive integer, got {n_keys!r}")
    if skew < 0:
        raise ValueError(f"skew must be >= 0, got {skew!r}")
    w = 1.0 / np.power(np.arange(1, n_keys + 1, dtype=np.float64), skew)
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    cdf[-1] = 1.0
    return cdf


def _check(seed, mean_gap):
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if not mean_gap >= 0:
        raise ValueError(f"mean_gap must be >= 0, got {mean_gap!r}")


def events(n: int, seed: int = 0, n_keys: int = 1000, skew: float = 1.0, mean_gap: float = 10.0,
           start_ts: int = 0) -> dict:
    """The first `n` rows of the event stream of `seed` as ``{"ts", "key", "value"}``:
    timestamps from `start_ts` rising by exponential gaps of mean `mean_gap`, keys with
    Zipf skew `skew` over `n_keys` keys, values uniform in [0, 100)."""
    _check(seed, mean_gap)
    out = {c: np.empty(n, dt) for c, dt in EVENT_SCHEMA.items()}
    gen_events(np.uint64(seed), 0, np.int64(start_ts), float(mean_gap), zipf_cdf(n_keys, skew),
               out["ts"], out["key"], out["value"])
    return out


class EventSource(GeneratorSource):
    """Emits the event stream of :func:`events` (columns ``ts``, ``key``, ``value``):
    ``rows`` rows in all (None: unbounded, ends by ``cancel()``), packets of
    ``rows_per_packet`` rows (default: the scheduler's packet size), ``rate`` rows per
    second (None: as fast as consumed), a latency marker after every ``marker_every``-th
    packet."""

    state = "unknown"
    schema = as_schema(EVENT_SCHEMA)

    def __init__(self, rows: int | None = None, seed: int = 0, n_keys: int = 1000, skew: float = 1.0,
                 mean_gap: float = 10.0, start_ts: int = 0, rate: float | None = None,
                 rows_per_packet: int | None = None, marker_every: int = 0):
        super().__init__(self._next, rate, marker_every)
        _check(seed, mean_gap)
        if rows is not None and (not isinstance(rows, (int, np.integer)) or rows < 0):
            raise ValueError(f"rows must be an integer >= 0 or None, got {rows!r}")
        if rows_per_packet is not None and (not isinstance(rows_per_packet, int) or rows_per_packet < 1):
            raise ValueError(f"rows_per_packet must be a positive integer, got {rows_per_packet!r}")
        self.rows = rows
        self.seed = np.uint64(seed)
        self.cdf = zipf_cdf(n_keys, skew)
        self.mean_gap = float(mean_gap)
        self.rows_per_packet = rows_per_packet
        self.produced = 0
        self._ts = np.int64(start_ts)

    def _next(self, ctx, i):
        spec = self.schema.spec
        k = self.rows_per_packet or ctx.rows_for(spec)
        if self.rows is not None:
            k = min(k, self.rows - self.produced)
            if k <= 0:
                return None
        pkt = ctx.new_packet(spec, k)
        c = pkt.columns
        self._ts = gen_events(self.seed, self.produced, self._ts, self.mean_gap, self.cdf, c["ts"], c["key"], c["value"])
        self.produced += k
        return pkt


__all__ = ["EVENT_SCHEMA", "EventSource", "events", "zipf_cdf"]
