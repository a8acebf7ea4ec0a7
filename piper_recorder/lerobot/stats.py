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

LEVELS = np.unique(np.concatenate([
    np.linspace(0.0, 0.05, 51), np.linspace(0.05, 0.95, 19), np.linspace(0.95, 1.0, 51)]))
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
    return {"mean": mean, "std": std, "min": s[:, :, 3].min(axis=0), "max": s[:, :, 4].max(axis=0),
            "q01": _mixture_quantile(q, w, 0.01), "q99": _mixture_quantile(q, w, 0.99)}


def _mixture_cdf(q: np.ndarray, w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Weighted mixture of piecewise-linear CDFs at x (one x per element)."""
    L = q.shape[2]
    xx = x[:, None, None]
    cnt = (q <= xx).sum(axis=2)  # points <= x, [elements, episodes]
    j = np.clip(cnt - 1, 0, L - 2)
    lo = np.take_along_axis(q, j[:, :, None], 2)[:, :, 0]
    hi = np.take_along_axis(q, (j + 1)[:, :, None], 2)[:, :, 0]
    span = hi - lo
    frac = np.where(span > 0, (x[:, None] - lo) / np.where(span > 0, span, 1.0), 1.0)
    f = LEVELS[j] + np.clip(frac, 0.0, 1.0) * (LEVELS[j + 1] - LEVELS[j])
    f = np.where(cnt == 0, 0.0, np.where(cnt >= L, 1.0, f))
    return (w * f).sum(axis=1)


def _mixture_quantile(q: np.ndarray, w: np.ndarray, p: float, iters: int = 48) -> np.ndarray:
    k = int(np.argmin(np.abs(LEVELS - p)))
    lo = q[:, :, k].min(axis=1)  # mixture CDF at lo <= p, at hi >= p
    hi = q[:, :, k].max(axis=1)
    active = hi > lo
    if q.shape[1] == 1 or not active.any():
        return lo
    qa, wa, a, b = q[active], w[active], lo[active], hi[active]
    for _ in range(iters):
        mid = 0.5 * (a + b)
        below = _mixture_cdf(qa, wa, mid) < p
        a = np.where(below, mid, a)
        b = np.where(below, b, mid)
        if np.all(b - a <= 1e-7 * np.maximum(np.abs(a), np.abs(b)) + 1e-12):
            break
    out = lo.copy()
    out[active] = b
    return out


def to_json(merged: dict[str, np.ndarray], layout: list[tuple[str, int]],
            combined: dict[str, tuple[str, ...]]) -> dict:
    """Split merged element arrays back into ``{column: {mean, std, min, max, q01, q99}}``.

    ``layout`` is the ordered (column, width) list the sketch rows were built from; ``combined``
    maps a combined column to the split columns it concatenates (its stats are theirs, joined).
    """
    out: dict[str, dict[str, list[float]]] = {}
    pos = 0
    for key, width in layout:
        out[key] = {k: merged[k][pos:pos + width].astype(float).tolist() for k in STAT_KEYS}
        pos += width
    for key, parts in combined.items():
        out[key] = {k: [v for p in parts for v in out[p][k]] for k in STAT_KEYS}
    return out
