"""Relative and delta action statistics for a LeRobot v2.0 root (``piper-finalize``).

Writes ``meta/relative_stats.json`` and ``meta/delta_stats.json``; parquet files are only read.

Definitions (per episode of n rows, horizon H, window index ``j(i, k) = min(i + k, n - 1)`` for
``k = 0..H-1``, i.e. windows past the end repeat the last action):

- relative: ``rel(state[i], action[j(i, k)])``
- delta: ``rel(state[i], action[j(i, 0)])`` for k = 0, then ``rel(action[j(i, k-1)], action[j(i, k)])``

``rel(a, b)`` is ``b - a`` for plain columns (gripper-like) and the SE(3) transform
``T_a^-1 @ T_b`` for pose columns ``[x, y, z, qw, qx, qy, qz]``, its rotation written as a wxyz
quaternion with the canonical sign ``w >= 0`` (see :mod:`piper_recorder.lerobot.maintenance.se3`).

Each action column ``action.<name>`` is paired with ``observation.<name>`` (override with
``FinalizeConfig.pairs``). Statistics have the shape of stats.json: per element, over every (i, k)
pair of every episode (n * H samples per episode), ``{mean, std, min, max, q01, q99}`` as lists as
wide as the column; std is the population std, q01/q99 linear-interpolated quantiles. Both files
also carry per-row statistics of every ``observation.*`` column as stored.

Memory stays bounded: mean, std, min and max are exact (streamed per episode); q01/q99 are exact up to
``quantile_sample_cap`` samples a column and come from a seeded uniform subsample of about that size beyond.

A combined ``action`` column is not re-derived: when its values equal the split action columns concatenated in
info.json order, its entry is the concatenation of theirs (exact: statistics are per element); otherwise it is
left out with a note.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from piper_recorder.lerobot.format import fsutil, metacheck
from piper_recorder.lerobot.format.errors import DatasetError
from piper_recorder.lerobot.format.layout import (
    DELTA_STATS,
    EPISODES,
    INFO,
    MODALITY,
    RELATIVE_STATS,
    ROTATION_TYPES,
    data_file,
)
from piper_recorder.lerobot.format.raw_read import column_array, vector_features
from piper_recorder.lerobot.maintenance import se3

STAT_KEYS = ("mean", "std", "min", "max", "q01", "q99")
POSE_NAMES_TAIL = ["qw", "qx", "qy", "qz"]
COMBINED_ACTION = "action"


class FinalizeError(DatasetError):
    """The root cannot be finalized (missing files, no episodes, inconsistent columns)."""


@dataclass
class FinalizeConfig:
    """What ``piper-finalize`` computes: the horizon, the column pairs, the pose columns and the quantile sample cap."""

    horizon: int = 30
    # action column -> observation column; None pairs action.<x> with observation.<x>
    pairs: dict[str, str] | None = None
    # columns holding [x, y, z, qw, qx, qy, qz]; None derives them from modality.json / element names
    pose_columns: tuple[str, ...] | None = None
    quantile_sample_cap: int = 2_000_000
    log: Callable[[str], None] = field(default=print, repr=False)

    def validate(self) -> None:
        """Raise ``ValueError`` for a horizon or a sample cap below 1."""
        if self.horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {self.horizon}")
        if self.quantile_sample_cap < 1:
            raise ValueError("quantile_sample_cap must be >= 1")


class StreamingStats:
    """Exact mean/std/min/max over batches (Chan et al. merge) + a bounded sample for q01/q99."""

    def __init__(self, expected_samples: int, cap: int, seed: int = 0):
        self.keep = min(1.0, cap / max(expected_samples, 1))
        self.rng = np.random.default_rng(seed)
        self.count = 0
        self.mean: np.ndarray | None = None
        self.m2: np.ndarray | None = None
        self.lo: np.ndarray | None = None
        self.hi: np.ndarray | None = None
        self.samples: list[np.ndarray] = []

    def add(self, x: np.ndarray) -> None:
        """Fold a batch of samples (rows) into the statistics."""
        x = np.asarray(x, dtype=np.float64)
        if len(x) == 0:
            return
        n, mean = len(x), x.mean(axis=0)
        m2 = ((x - mean) ** 2).sum(axis=0)
        if self.count == 0:
            self.mean, self.m2, self.lo, self.hi = mean, m2, x.min(axis=0), x.max(axis=0)
        else:
            assert self.mean is not None and self.m2 is not None and self.lo is not None and self.hi is not None
            total = self.count + n
            d = mean - self.mean
            self.mean = self.mean + d * (n / total)
            self.m2 = self.m2 + m2 + d * d * (self.count * n / total)
            self.lo, self.hi = np.minimum(self.lo, x.min(axis=0)), np.maximum(self.hi, x.max(axis=0))
        self.count += n
        self.samples.append(x if self.keep >= 1.0 else x[self.rng.random(n) < self.keep])

    def result(self) -> dict[str, list[float]]:
        """The stats.json-shaped entry: mean, std, min, max, q01, q99 per element."""
        assert self.mean is not None and self.m2 is not None and self.lo is not None and self.hi is not None
        sample = np.concatenate(self.samples)
        if len(sample) == 0:  # subsampling kept nothing: fall back to the extremes
            sample = np.stack([self.lo, self.hi])
        q01, q99 = np.quantile(sample, [0.01, 0.99], axis=0)
        return {
            "mean": self.mean.tolist(),
            "std": np.sqrt(self.m2 / self.count).tolist(),
            "min": self.lo.tolist(),
            "max": self.hi.tolist(),
            "q01": q01.tolist(),
            "q99": q99.tolist(),
        }


def window_indices(n: int, horizon: int) -> np.ndarray:
    """(n, H) row indices of each row's future action window, padded with the last row."""
    return np.minimum(np.arange(n)[:, None] + np.arange(horizon)[None, :], n - 1)


def relative_windows(state: np.ndarray, action: np.ndarray, horizon: int, pose: bool) -> np.ndarray:
    """(n * H, w) samples of action[i + k] relative to state[i]."""
    idx = window_indices(len(action), horizon)
    target = action[idx]
    base = np.broadcast_to(state[:, None, :], target.shape)
    out = se3.relative_pose(base, target) if pose else target - base
    return out.reshape(-1, action.shape[1])


def delta_windows(state: np.ndarray, action: np.ndarray, horizon: int, pose: bool) -> np.ndarray:
    """(n * H, w) samples of each window step relative to the previous one (state[i] before the first)."""
    idx = window_indices(len(action), horizon)
    target = action[idx]
    base = np.concatenate([state[:, None, :], target[:, :-1, :]], axis=1)
    out = se3.relative_pose(base, target) if pose else target - base
    return out.reshape(-1, action.shape[1])


def default_pairs(features: dict[str, dict]) -> dict[str, str]:
    """action.<x> -> observation.<x> for every split action column with a same-width counterpart."""
    pairs = {}
    for key, feat in features.items():
        if not key.startswith("action."):
            continue
        obs = "observation." + key[len("action.") :]
        if obs in features and list(features[obs]["shape"]) == list(feat["shape"]):
            pairs[key] = obs
    return pairs


def default_pose_columns(features: dict[str, dict], modality: dict | None) -> set[str]:
    """Width-7 columns with a quaternion at [3:7], declared by modality.json or by element names."""
    poses = set()
    for section in ("state", "action"):
        for entry in (modality or {}).get(section, {}).values():
            if entry.get("rotation_type") in ROTATION_TYPES and entry.get("start") == 3 and entry.get("end") == 7:
                poses.add(entry.get("original_key"))
    for key, feat in features.items():
        names = feat.get("names")
        if list(feat.get("shape", [])) == [7] and isinstance(names, list) and names[3:] == POSE_NAMES_TAIL:
            poses.add(key)
    return {k for k in poses if k in features and list(features[k]["shape"]) == [7]}


@dataclass
class FinalizeResult:
    """What ``finalize`` wrote: the relative and delta statistics, with the counts behind them and notes."""

    relative: dict[str, dict]
    delta: dict[str, dict]
    episodes: int
    rows: int
    samples: int
    notes: list[str]


def compute(root: Path, cfg: FinalizeConfig) -> FinalizeResult:
    """Read every episode of ``root`` and compute both statistic maps (nothing written)."""
    cfg.validate()
    root = Path(root)
    modality_path = root / MODALITY
    try:
        info = metacheck.load_info(root)
        episodes = metacheck.check_episodes(metacheck.load_jsonl(root / EPISODES, missing_ok=False), root / EPISODES)
        modality = metacheck.load_json_object(modality_path) if modality_path.exists() else None
    except DatasetError as e:
        raise FinalizeError(f"cannot read the root's metadata: {e}") from e
    if not episodes:
        raise FinalizeError(f"{root / EPISODES}: no episodes to finalize")
    features = vector_features(info)
    pairs = dict(cfg.pairs) if cfg.pairs is not None else default_pairs(features)
    if not pairs:
        raise FinalizeError("no action.<x> column with a matching observation.<x> column")
    poses = set(cfg.pose_columns) if cfg.pose_columns is not None else default_pose_columns(features, modality)
    for act, obs in pairs.items():
        for col in (act, obs):
            if col not in features:
                raise FinalizeError(f"column {col} is not a feature in {INFO}")
        if (act in poses) != (obs in poses):
            raise FinalizeError(f"{act} and {obs} must both be poses or both plain columns")
        if list(features[act]["shape"]) != list(features[obs]["shape"]):
            raise FinalizeError(f"{act} and {obs} have different widths")
    observations = [k for k in features if k.startswith("observation.")]
    combined = COMBINED_ACTION if COMBINED_ACTION in features else None
    split_order = [k for k in features if k in pairs]  # concatenation order of a combined column
    widths = {k: int(np.prod(features[k]["shape"])) for k in features}

    n_rows = sum(int(ep.get("length", 0)) for ep in episodes)
    cap = cfg.quantile_sample_cap
    rel = {a: StreamingStats(n_rows * cfg.horizon, cap, seed=1) for a in pairs}
    dlt = {a: StreamingStats(n_rows * cfg.horizon, cap, seed=2) for a in pairs}
    rows = {o: StreamingStats(n_rows, cap, seed=3) for o in observations}
    combined_matches = combined is not None
    total_rows = 0
    for ep in episodes:
        path = data_file(root, info, int(ep["episode_index"]))
        wanted = sorted(set(pairs) | set(pairs.values()) | set(observations) | ({combined} if combined else set()))
        try:
            table = pq.read_table(path, columns=wanted)
        except (OSError, KeyError, ValueError) as e:
            raise FinalizeError(f"{path}: {e}") from e
        if table.num_rows == 0:
            raise FinalizeError(f"{path}: empty episode")
        cols = {k: column_array(table.column(k), widths[k]) for k in wanted}
        total_rows += table.num_rows
        for act, obs in pairs.items():
            pose = act in poses
            rel[act].add(relative_windows(cols[obs], cols[act], cfg.horizon, pose))
            dlt[act].add(delta_windows(cols[obs], cols[act], cfg.horizon, pose))
        for obs in observations:
            rows[obs].add(cols[obs])
        if combined_matches and combined is not None:
            joined = np.concatenate([cols[k] for k in split_order], axis=1)
            combined_matches = joined.shape == cols[combined].shape and np.array_equal(joined, cols[combined])

    notes = []
    obs_stats = {o: rows[o].result() for o in observations}
    relative = {a: rel[a].result() for a in pairs}
    delta = {a: dlt[a].result() for a in pairs}
    if combined is not None:
        if combined_matches:
            for out in (relative, delta):
                out[combined] = {s: [v for k in split_order for v in out[k][s]] for s in STAT_KEYS}
        else:
            notes.append(f"'{combined}' is not {' + '.join(split_order)} concatenated; left out of both files")
    relative.update(obs_stats)
    delta.update(obs_stats)
    return FinalizeResult(
        relative=relative,
        delta=delta,
        episodes=len(episodes),
        rows=total_rows,
        samples=total_rows * cfg.horizon,
        notes=notes,
    )


def finalize_root(root: Path, cfg: FinalizeConfig | None = None) -> FinalizeResult:
    """Compute and atomically write ``meta/relative_stats.json`` and ``meta/delta_stats.json``."""
    cfg = cfg or FinalizeConfig()
    result = compute(root, cfg)
    fsutil.atomic_write(Path(root) / RELATIVE_STATS, fsutil.json_bytes(result.relative, indent=2))
    fsutil.atomic_write(Path(root) / DELTA_STATS, fsutil.json_bytes(result.delta, indent=2))
    for note in result.notes:
        cfg.log(f"note: {note}")
    return result
