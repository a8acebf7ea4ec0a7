"""Loader for ``rlroverlab.offline_rgbd_v2`` files: random transitions, sequences, frame stacks, splits.

- Keeps one h5py handle per process, opened lazily and reopened when ``os.getpid()`` changes, so the
  datasets can be forked into DataLoader workers (or pickled for spawn: handles are not pickled).
- Each sample decodes every observation row it needs exactly once: a transition's next_obs is the
  same timeline row as the following obs, so a sequence of L transitions decodes L+1 rows (not 2L),
  and a stack of k frames for obs and next_obs decodes at most k+1 rows.
- Decoding runs on a small per-process thread pool (libjpeg-turbo and OpenJPEG release the GIL).
  ``decoder="fast"`` uses imagecodecs' libjpeg-turbo and OpenJPEG 2.5 directly (the same pixels as
  Pillow, bit for bit; handles HTJ2K); ``"pillow"`` is the reference loader's decoder.
- Output: RGB float32 x recommended_rgb_scale, depth float32 metres with ``depth_valid`` (stored 0
  is never a distance), ``layout="CHW"`` ((3,H,W), (1,H,W)) or ``"HWC"``; stacks add a leading axis.
- Sequences and stacks never cross an episode boundary (stacks repeat the episode's first frame).
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import h5py
import numpy as np

from . import codecs, schema

if TYPE_CHECKING:
    from torch.utils.data import Dataset
    from typing_extensions import Buffer

# decoded observations: arrays with a leading row axis, nested by name ("state" holds one per key)
Batch: TypeAlias = "np.ndarray | dict[str, Batch]"


class RgbdFile:
    """Metadata in memory, payloads read and decoded on demand through a per-process handle."""

    def __init__(
        self, path: str | os.PathLike[str], decoder: str = "fast", threads: int = 2, allow_incomplete: bool = False
    ):
        if decoder not in ("fast", "pillow"):
            raise ValueError("decoder must be 'fast' or 'pillow'")
        self.path = os.fspath(path)
        self.decoder = decoder
        self.threads = max(1, int(threads))
        self._pid: int | None = None
        self._h5: h5py.File | None = None
        self._pool: cf.ThreadPoolExecutor | None = None
        f = self.h5
        a = f.attrs
        if a.get("schema_name") != schema.SCHEMA_NAME or not a.get("zero_structural_duplication", False):
            raise ValueError(f"{self.path}: not an {schema.SCHEMA_NAME} file")
        if a.get("writer_status") != "complete" and not allow_incomplete:
            raise ValueError(
                f"{self.path}: writer_status is {a.get('writer_status')!r}; pass allow_incomplete=True "
                "to read the episodes committed so far"
            )
        self.rgb_scale = float(a["recommended_rgb_scale"])
        self.depth_scale = float(a["recommended_depth_scale_m"])
        self.sentinel = int(a["depth_invalid_sentinel"])
        self.n_episodes = int(a["total_episodes"])
        idx = {k: f[f"index/{k}"][()] for k in schema.PER_TRANSITION_INDEX + schema.PER_EPISODE_INDEX}
        # Only what the committed episodes cover (an incomplete file's totals are those of its last commit).
        n_tr = int(a["total_transitions"])
        self.obs_index = idx["obs_index"][:n_tr]
        self.next_obs_index = idx["next_obs_index"][:n_tr]
        self.episode_id = idx["episode_id"][:n_tr]
        self.episode_transition_index = idx["episode_transition_index"][:n_tr]
        self.episode_lengths = idx["episode_lengths"][: self.n_episodes]
        self.obs_offsets = idx["obs_offsets"][: self.n_episodes]
        self.transition_offsets = idx["transition_offsets"][: self.n_episodes]
        tr = f["transitions"]
        self.actions = tr["actions"][:n_tr] if "actions" in tr else np.zeros((0, 0), np.float32)
        self.rewards = tr["rewards"][:n_tr]
        self.terminals = tr["terminals"][:n_tr]
        self.timeouts = tr["timeouts"][:n_tr]
        self.dones = tr["dones"][:n_tr] if "dones" in tr else self.terminals | self.timeouts
        self.state_keys = sorted(f[schema.STATE].keys()) if schema.STATE in f else []
        if "camera_height" in a and "camera_width" in a:
            self.hw = (int(a["camera_height"]), int(a["camera_width"]))
        elif schema.RGB in f and len(f[schema.RGB]):  # the spec lets a file omit them: read the first frame's
            w, h = codecs.probe(bytes(f[schema.RGB][0]), "rgb")
            self.hw = (h, w)
        else:
            self.hw = (0, 0)

    def __getstate__(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d.update(_h5=None, _pool=None, _pid=None)
        return d

    @property
    def h5(self) -> h5py.File:
        """The handle of this process (reopened after fork)."""
        if self._pid != os.getpid():
            self._h5 = h5py.File(self.path, "r")
            self._pool = None
            self._pid = os.getpid()
        return self._h5

    def _executor(self) -> cf.ThreadPoolExecutor | None:
        if self._pool is None and self.threads > 1:  # the calling thread is the last decoder
            self._pool = cf.ThreadPoolExecutor(self.threads - 1, thread_name_prefix="rgbd-decode")
        return self._pool

    def _decode_one(
        self, rgb_bytes: Buffer | None, depth_bytes: Buffer | None
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        fast = self.decoder == "fast"
        rgb = (
            None
            if rgb_bytes is None
            else codecs.decode_rgb_fast(rgb_bytes)
            if fast
            else codecs.decode_rgb_jpeg(rgb_bytes)
        )
        if depth_bytes is None:
            depth = None
        elif fast:
            depth = codecs.decode_depth_fast(depth_bytes)
        else:
            depth = codecs.decode_depth_pillow(depth_bytes)
        return rgb, depth

    def read_rows(
        self, rows: np.ndarray, rgb: bool = True, depth: bool = True, state: bool = True, layout: str = "CHW"
    ) -> dict[str, Batch]:
        """Decode observation rows (global timeline indices, ascending and unique) to training arrays.

        RGB float32 x rgb_scale, depth float32 metres and ``depth_valid`` (stored value != sentinel),
        with a leading row axis; ``"CHW"`` returns channel-first views. Rows are handed out one at a
        time to the pool's threads and to the calling thread (which would otherwise sit idle), and
        each row is converted by the thread that decoded it, straight into the output arrays.
        """
        rows = np.asarray(rows, dtype=np.int64)
        f = self.h5
        n = rows.size
        contiguous = n > 1 and rows[-1] - rows[0] == n - 1
        sel = slice(int(rows[0]), int(rows[-1]) + 1) if contiguous else rows
        rb = f[schema.RGB][sel] if rgb else [None] * n
        db = f[schema.DEPTH][sel] if depth else [None] * n
        hw = self.hw
        out_rgb = np.empty((n, *hw, 3) if rgb else 0, np.float32)  # empty unless asked for
        out_d = np.empty((n, *hw, 1) if depth else 0, np.float32)
        out_v = np.empty((n, *hw, 1) if depth else 0, np.bool_)
        rgb_scale, depth_scale = np.float32(self.rgb_scale), np.float32(self.depth_scale)
        todo = iter(range(n))
        lock = threading.Lock()

        def work() -> None:
            while True:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                r8, mm = self._decode_one(rb[i], db[i])
                for name, img, want in (("rgb", r8, (*hw, 3)), ("depth", mm, hw)):
                    if img is not None and img.shape != want:
                        raise ValueError(
                            f"{self.path}: observation {int(rows[i])} {name} is {img.shape}, the file says {want}"
                        )
                if r8 is not None:
                    np.multiply(r8, rgb_scale, out=out_rgb[i])
                if mm is not None:
                    np.multiply(mm, depth_scale, out=out_d[i, ..., 0])
                    np.not_equal(mm, self.sentinel, out=out_v[i, ..., 0])

        pool = self._executor() if n > 1 else None
        helpers = [pool.submit(work) for _ in range(min(self.threads - 1, n - 1))] if pool else []
        try:
            work()
        finally:
            for h in helpers:
                h.result()
        chw = layout == "CHW"
        out: dict[str, Batch] = {}
        if rgb:
            out["rgb"] = np.moveaxis(out_rgb, -1, -3) if chw else out_rgb
        if depth:
            out["depth"] = np.moveaxis(out_d, -1, -3) if chw else out_d
            out["depth_valid"] = np.moveaxis(out_v, -1, -3) if chw else out_v
        if state:
            out["state"] = {k: f[schema.STATE][k][sel] for k in self.state_keys}
        return out

    def close(self) -> None:
        """Close this process's file handle."""
        if self._h5 is not None and self._pid == os.getpid():
            self._h5.close()
        self._h5 = None
        self._pid = None


def split_episodes(n_episodes: int, val_fraction: float = 0.1, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random train/val split by whole episodes (so no val frame has a near-duplicate in train)."""
    perm = np.random.default_rng(seed).permutation(n_episodes)
    n_val = int(round(n_episodes * val_fraction)) if n_episodes > 1 else 0
    n_val = min(max(n_val, 1 if val_fraction > 0 and n_episodes > 1 else 0), n_episodes - 1 if n_episodes else 0)
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


def _pick(tree: Batch, idx: int | slice | np.ndarray) -> Batch:
    if isinstance(tree, dict):
        return {k: _pick(v, idx) for k, v in tree.items()}
    return tree[idx]


class _Base:
    def __init__(
        self,
        path: str | os.PathLike[str],
        episodes: Sequence[int] | None,
        layout: str,
        rgb: bool,
        depth: bool,
        decoder: str,
        threads: int,
        allow_incomplete: bool,
    ) -> None:
        if layout not in ("CHW", "HWC"):
            raise ValueError("layout must be 'CHW' or 'HWC'")
        self.file = RgbdFile(path, decoder=decoder, threads=threads, allow_incomplete=allow_incomplete)
        n = self.file.n_episodes
        self.episodes = np.arange(n) if episodes is None else np.asarray(sorted({int(e) for e in episodes}))
        if self.episodes.size and (self.episodes.min() < 0 or self.episodes.max() >= n):
            raise IndexError(f"episodes must be in 0..{n - 1}")
        self.layout, self.rgb, self.depth = layout, rgb, depth

    def _obs(self, rows: np.ndarray) -> tuple[dict[str, Batch], np.ndarray]:
        """Decode the unique rows once; return the decoded tree and the positions of ``rows`` in it."""
        uniq, inv = np.unique(rows, return_inverse=True)
        return self.file.read_rows(uniq, rgb=self.rgb, depth=self.depth, layout=self.layout), inv.reshape(rows.shape)


class TransitionDataset(_Base):
    """Random-access transitions (obs, action, reward, next_obs, done, terminal, timeout)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        episodes: Sequence[int] | None = None,
        frame_stack: int = 1,
        layout: str = "CHW",
        rgb: bool = True,
        depth: bool = True,
        decoder: str = "fast",
        threads: int = 2,
        allow_incomplete: bool = False,
    ) -> None:
        super().__init__(path, episodes, layout, rgb, depth, decoder, threads, allow_incomplete)
        if frame_stack < 1:
            raise ValueError("frame_stack must be >= 1")
        self.frame_stack = frame_stack
        fl = self.file
        self.rows = (
            np.concatenate(
                [
                    np.arange(fl.transition_offsets[e], fl.transition_offsets[e] + fl.episode_lengths[e])
                    for e in self.episodes
                ]
            ).astype(np.int64)
            if self.episodes.size
            else np.zeros(0, np.int64)
        )

    def __len__(self) -> int:
        return int(self.rows.size)

    def __getitem__(self, k: int) -> dict:
        fl = self.file
        i = int(self.rows[k])
        o = int(fl.obs_index[i])
        e = int(fl.episode_id[i])
        first = int(fl.obs_offsets[e])
        K = self.frame_stack
        # obs stack rows o-K+1..o and next_obs rows o-K+2..o+1, clamped to the episode's first row
        rows = np.maximum(np.arange(o - K + 1, o + 2), first)
        tree, pos = self._obs(rows)
        if K == 1:
            obs, nxt = _pick(tree, pos[0]), _pick(tree, pos[1])
        else:
            obs, nxt = _pick(tree, pos[:K]), _pick(tree, pos[1:])
        return {
            "obs": obs,
            "next_obs": nxt,
            "action": fl.actions[i],
            "reward": fl.rewards[i],
            "done": fl.dones[i],
            "terminal": fl.terminals[i],
            "timeout": fl.timeouts[i],
            "episode": e,
            "step": int(fl.episode_transition_index[i]),
        }


class SequenceDataset(_Base):
    """Windows of ``seq_len`` consecutive transitions inside one episode (obs/next_obs share decodes)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        seq_len: int = 16,
        episodes: Sequence[int] | None = None,
        stride: int = 1,
        layout: str = "CHW",
        rgb: bool = True,
        depth: bool = True,
        decoder: str = "fast",
        threads: int = 2,
        allow_incomplete: bool = False,
    ) -> None:
        super().__init__(path, episodes, layout, rgb, depth, decoder, threads, allow_incomplete)
        if seq_len < 1 or stride < 1:
            raise ValueError("seq_len and stride must be >= 1")
        self.seq_len = seq_len
        fl = self.file
        starts = [(e, s) for e in self.episodes for s in range(0, int(fl.episode_lengths[e]) - seq_len + 1, stride)]
        self.windows = np.asarray(starts, dtype=np.int64).reshape(-1, 2)

    def __len__(self) -> int:
        return int(self.windows.shape[0])

    def __getitem__(self, k: int) -> dict:
        fl = self.file
        e, s = (int(x) for x in self.windows[k])
        L = self.seq_len
        t0 = int(fl.transition_offsets[e]) + s
        o0 = int(fl.obs_offsets[e]) + s
        tree = fl.read_rows(np.arange(o0, o0 + L + 1), rgb=self.rgb, depth=self.depth, layout=self.layout)
        sl = slice(t0, t0 + L)
        return {
            "obs": _pick(tree, slice(0, L)),
            "next_obs": _pick(tree, slice(1, L + 1)),
            "actions": fl.actions[sl],
            "rewards": fl.rewards[sl],
            "dones": fl.dones[sl],
            "terminals": fl.terminals[sl],
            "timeouts": fl.timeouts[sl],
            "episode": e,
            "start": s,
        }


def collate(samples: list[dict]) -> dict:
    """Stack a list of samples into a batch (numpy), recursing into nested dicts."""
    first = samples[0]
    if isinstance(first, dict):
        return {k: collate([s[k] for s in samples]) for k in first}
    return np.stack([np.asarray(s) for s in samples])


def as_torch_dataset(ds: TransitionDataset | SequenceDataset) -> Dataset:
    """Wrap a TransitionDataset/SequenceDataset as ``torch.utils.data.Dataset`` (needs torch installed)."""
    try:
        import torch
        from torch.utils.data import Dataset
    except ImportError as e:
        raise ImportError("as_torch_dataset needs PyTorch, which is optional for rgbd_writer") from e

    def to_tensor(x: object) -> object:
        if isinstance(x, dict):
            return {k: to_tensor(v) for k, v in x.items()}
        return torch.from_numpy(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else torch.as_tensor(x)

    class TorchRgbdDataset(Dataset):
        def __init__(self, inner: TransitionDataset | SequenceDataset) -> None:
            self.inner = inner

        def __len__(self) -> int:
            return len(self.inner)

        def __getitem__(self, k: int) -> object:
            return to_tensor(self.inner[k])

    return TorchRgbdDataset(ds)
