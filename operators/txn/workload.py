"""Seedable, fast (numba) generators of the TStream benchmark's key accesses (spec 5).

Keys are drawn Zipf(theta) over a table's keys -- rank r is key r, so the hot keys are
the small ones -- and grouped into transactions the way the authors' generator does:

* records are partitioned by key (key mod P, the same rule as the chain pools and PAT,
  ``bobox_sched.txn.config.partition_of_key``), so partitions hold equal numbers of
  records;
* a single-partition transaction draws its first key Zipf over all keys and the others
  Zipf over the keys of the first key's partition;
* a multi-partition transaction (probability ``mp_ratio``) of length L spreads its keys
  over L distinct, consecutive partitions (L clipped to P; the clipping is reported by
  ``clip_length``).
"""

from __future__ import annotations

import numpy as np
from numba import njit


def zipf_cdf(n: int, theta: float) -> np.ndarray:
    """Cumulative distribution of Zipf(theta) over ranks 0..n-1 (theta 0: uniform)."""
    w = 1.0 / np.power(np.arange(1, n + 1, dtype=np.float64), theta)
    c = np.cumsum(w)
    return c / c[-1]


def clip_length(mp_len: int, nparts: int) -> int:
    return max(1, min(int(mp_len), int(nparts)))


@njit(nogil=True, cache=True)
def _draw(cdf, u):
    lo = 0
    hi = cdf.shape[0] - 1
    while lo < hi:
        mid = (lo + hi) >> 1
        if cdf[mid] < u:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(nogil=True, cache=True)
def _gen_keys(n, length, nkeys, cdf_all, cdf_part, nparts, mp_ratio, mp_len, distinct, seed, out, multi):
    np.random.seed(seed)
    for e in range(n):
        k0 = _draw(cdf_all, np.random.random())
        out[e, 0] = k0
        p0 = k0 % nparts
        is_multi = nparts > 1 and length > 1 and mp_len > 1 and np.random.random() < mp_ratio
        multi[e] = is_multi
        lp = mp_len if is_multi else 1
        for i in range(1, length):
            p = (p0 + (i % lp)) % nparts
            k = -1
            for _attempt in range(64):
                r = _draw(cdf_part, np.random.random())
                k = p + r * nparts
                if k >= nkeys:
                    continue
                if distinct:
                    clash = False
                    for j in range(i):
                        if out[e, j] == k:
                            clash = True
                            break
                    if clash:
                        continue
                break
            if k < 0 or k >= nkeys:
                k = p  # a partition's first key always exists (p < nparts <= nkeys)
            out[e, i] = k


def gen_keys(n: int, length: int, nkeys: int, theta: float, nparts: int = 1, mp_ratio: float = 0.0,
             mp_len: int = 1, distinct: bool = False, seed: int = 0):
    """``(keys[n, length], multi[n])``: each row one transaction's keys (module doc)."""
    nparts = max(1, min(int(nparts), nkeys))
    mp_len = clip_length(mp_len, nparts)
    cdf_all = zipf_cdf(nkeys, theta)
    cdf_part = zipf_cdf(-(-nkeys // nparts), theta)
    out = np.empty((n, length), np.int64)
    multi = np.zeros(n, np.bool_)
    _gen_keys(n, length, nkeys, cdf_all, cdf_part, nparts, float(mp_ratio), mp_len, distinct, int(seed), out, multi)
    return out, multi


__all__ = ["clip_length", "gen_keys", "zipf_cdf"]
