"""Dataset statistics from per-episode sketches, so stats.json stays current in well under a second.

Each saved episode gets a sketch per element (one row per scalar of every cached column):
``[n, mean, M2, min, max, q(l) for l in LEVELS]`` in float64. Merging is

* exact for mean, std (population, Chan et al. parallel combination of mean/M2), min and max;
* approximate for q01/q99: the global CDF is the row-weighted mixture of each episode's CDF, itself
  interpolated linearly between its stored order statistics (``np.quantile`` at ``LEVELS``, dense
  (0.1 %) in both 5 % tails, 5 % steps in between), and solved for 0.01 / 0.99 by bisection. With a
  single episode this is ``np.quantile(..., method="linear")``; in general an episode whose values
  near the answer lie in its tails contributes at most 0.1 % rank error (a coarser-grid episode at
  most 5 % times its row share). Rebuilding from parquet reproduces the same sketches.
"""

from __future__ import annotations

import numpy as np

LEVELS = np.unique(
    np.concatenate([np.linspace(0.0, 0.05, 51), np.linspace(0.05, 0.95, 19), np.linspace(0.95, 1.0, 51)])
)
HEAD = 5  # n, mean, M2, min, max
STAT_KEYS = ("mean", "std", "min", "max", "q01", "q99")


def sketch(values: np.ndarray) -> np.ndarray:
    """Sketch of an episode's ``[rows, elements]`` values -> ``[elements, HEAD + len(LEVELS)]``."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or v.shape[0] == 0:
        raise ValueError("sketch needs a non-empty [rows, elements] array")
    mean = v.mean(axis=0)
    out = np.empty((v.shape[1], HEAD + len(LEVELS)))
    out[:, 0] = v.shape[0]
    out[:, 1] = mean
    out[:, 2] = ((v - mean) ** 2).sum(axis=0)
    out[:, 3] = v.min(axis=0)
    out[:, 4] = v.max(axis=0)
    out[:, HEAD:] = np.quantile(v, LEVELS, axis=0).T
    return out


def merge(sketches: np.ndarray) -> dict[str, np.ndarray]:
    """Combine ``[episodes, elements, HEAD+L]`` sketches into per-element mean/std/min/max/q01/q99."""
    s = np.asarray(sketches, dtype=np.float64)
    n = s[:, :, 0]
    total = n.sum(axis=0)
    mean = (n * s[:, :, 1]).sum(axis=0) / total
    m2 = (s[:, :, 2] + n * (s[:, :, 1] - mean) ** 2).sum(axis=0)
    std = np.sqrt(np.maximum(m2 / total, 0.0))
    q = s[:, :, HEAD:].transpose(1, 0, 2)  # [elements, episodes, L]
    w = (n / total).T  # [elements, episodes]
    return {
        "mean": mean,
        "std": std,
        "min": s[:, :, 3].min(axis=0),
        "max": s[:, :, 4].max(axis=0),
        "q01": _mixture_quantile(q, w, 0.01),
        "q99": _mixture_quantile(q, w, 0.99),
    }


def _mixture_cdf(qw: np.ndarray, lev: np.ndarray, j0: np.ndarray, w: np.ndarray, x: np.ndarray, L: int) -> np.ndarray:
    """Weighted mixture of piecewise-linear CDFs at x (one x per element).

    ``qw`` [elements, episodes, width] is a window of the stored points starting at column ``j0``
    (per element) with levels ``lev`` [elements, width]; every point left of it is below x and
    every point right of it above x, so only the window needs comparing.
    """
    cnt = j0[:, None] + (qw <= x[:, None, None]).sum(axis=2)  # points <= x, [elements, episodes]
    jl = np.clip(cnt - 1 - j0[:, None], 0, qw.shape[2] - 2)
    lo = np.take_along_axis(qw, jl[:, :, None], 2)[:, :, 0]
    hi = np.take_along_axis(qw, (jl + 1)[:, :, None], 2)[:, :, 0]
    l_lo = np.take_along_axis(lev, jl, 1)
    l_hi = np.take_along_axis(lev, jl + 1, 1)
    span = hi - lo
    frac = np.where(span > 0, (x[:, None] - lo) / np.where(span > 0, span, 1.0), 1.0)
    f = l_lo + np.clip(frac, 0.0, 1.0) * (l_hi - l_lo)
    f = np.where(cnt == 0, 0.0, np.where(cnt >= L, 1.0, f))
    return (w * f).sum(axis=1)


def _mixture_quantile(q: np.ndarray, w: np.ndarray, p: float, iters: int = 60) -> np.ndarray:
    L = q.shape[2]
    k = int(np.argmin(np.abs(LEVELS - p)))
    lo = q[:, :, k].min(axis=1)  # mixture CDF at lo <= p, at hi >= p
    hi = q[:, :, k].max(axis=1)
    out = lo.copy()
    if q.shape[1] == 1:
        return out
    # Only points inside [lo, hi] (plus one neighbour each side) matter while bisecting, so each
    # group of elements is solved on a window of columns; elements are grouped by window width
    # so that one wide column (e.g. the global index) does not widen every other's window.
    below = (q < lo[:, None, None]).sum(axis=2)
    upto = (q <= hi[:, None, None]).sum(axis=2)
    j0 = np.maximum(below.min(axis=1) - 1, 0)
    width = np.maximum(2, np.minimum(upto.max(axis=1) + 1, L) - j0)
    bucket = np.ceil(np.log2(width)).astype(int)
    for b in np.unique(bucket[hi > lo]):
        sel = np.nonzero((bucket == b) & (hi > lo))[0]
        wd = int(width[sel].max())
        s0 = np.minimum(j0[sel], L - wd)
        cols = s0[:, None] + np.arange(wd)
        qs = q[sel]
        qw = np.take_along_axis(qs, np.broadcast_to(cols[:, None, :], qs.shape[:2] + (wd,)), 2)
        out[sel] = _bisect(qw, LEVELS[cols], s0, w[sel], lo[sel], hi[sel], p, L, iters)
    return out


def _bisect(
    qw: np.ndarray,
    lev: np.ndarray,
    j0: np.ndarray,
    w: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    p: float,
    L: int,
    iters: int,
) -> np.ndarray:
    for _ in range(iters):
        mid = 0.5 * (a + b)
        below_p = _mixture_cdf(qw, lev, j0, w, mid, L) < p
        a = np.where(below_p, mid, a)
        b = np.where(below_p, b, mid)
        if np.all(b - a <= 1e-7 * np.maximum(np.abs(a), np.abs(b)) + 1e-12):
            break
    return b


def to_json(merged: dict[str, np.ndarray], layout: list[tuple[str, int]], combined: dict[str, tuple[str, ...]]) -> dict:
    """Split merged element arrays back into ``{column: {mean, std, min, max, q01, q99}}``.

    ``layout`` is the ordered (column, width) list the sketch rows were built from; ``combined``
    maps a combined column to the split columns it concatenates (its stats are theirs, joined).
    """
    out: dict[str, dict[str, list[float]]] = {}
    pos = 0
    for key, width in layout:
        out[key] = {k: merged[k][pos : pos + width].astype(float).tolist() for k in STAT_KEYS}
        pos += width
    for key, parts in combined.items():
        out[key] = {k: [v for p in parts for v in out[p][k]] for k in STAT_KEYS}
    return out
