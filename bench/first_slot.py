"""First-slot repeats and drops of a jittery row-rate camera, through the real recorder core.

Simulates what ``test/system/test_frame_jitter_live.py`` does with real processes, with the real
``EpisodeController`` (pre-roll, idle frames, assembler, phase tracker, ``pick``) and a sink that keeps
each row's frame stamp: a camera at the row rate whose captures are delayed by a uniform 0..20 ms (the
sim camera's ``jitter_ms: 20``), frames arriving ``--latency-ms`` (the sim camera's render latency) plus
1-4 ms of transport after their stamp, arm inputs at 25 Hz (they only complete the rows); a recorder
started ``--lead-s`` after the camera, then episodes of ``--seconds`` with ``--idle-s`` between them,
each started so that the grid lands in the middle of the jitter band (± ``--spread-ms``).

    python bench/first_slot.py --episodes 20000 --jobs 2

Prints, over all episodes: episodes with a repeat / drop in their first ``--first`` rows (the first
slot), and after them; the largest frame age (ms behind its row) and the largest lead (ms after it).
Each episode is checked against the rows' own frame stamps, not the counters. ``--idle-cost`` times
instead what an idle recorder does per received frame.
"""

from __future__ import annotations

import argparse
import bisect
import math
import multiprocessing
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from piper_recorder.assembly import AssemblyConfig, Frame, Row
from piper_recorder.recording.controller import EpisodeController

MS = 1_000_000
SEC = 1_000_000_000
FPS = 30
PERIOD = SEC / FPS
CAM = "cam"
RGB = np.zeros((2, 2, 3), np.uint8)


class _Rows:
    def __init__(self) -> None:
        self.pairs: list[tuple[int, int]] = []  # (row time, its frame's capture stamp)

    def row(self, row: Row) -> None:
        self.pairs.append((row.tick_ns, row.frames[CAM].stamp_ns))

    def frame(self, camera: str, frame: Frame, t: float) -> None:
        raise AssertionError("nominal mode: rows carry the frames")

    def raw_quest(self, line: str) -> None:
        pass


class _Target:
    kind, depth, min_rows, needs_task = "lerobot", False, 1, False

    def __init__(self) -> None:
        self.sinks: list[_Rows] = []

    def begin_session(self, record: Any) -> None:
        pass

    def start_episode(self, task: str, record: Any, source: Any = None) -> tuple[int, _Rows]:
        self.sinks.append(_Rows())
        return len(self.sinks) - 1, self.sinks[-1]

    def save_episode(self, counters: Any, timeout: bool) -> dict[str, Any]:
        return {}

    def label_saved(self, index: int, fields: Any) -> None:
        pass

    def keeps_failed_save(self, exc: BaseException) -> bool:
        return False

    def holds_episode(self) -> bool:
        return False

    def discard_episode(self) -> None:
        pass

    def delete_last_episode(self) -> None:
        pass

    def close(self) -> None:
        pass


def run(seed: int, episodes: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One recorder process: ``episodes`` episodes against one camera; per episode what its rows hold."""
    rng = random.Random(seed)
    t0 = 1_600_000_000 * SEC + rng.randrange(SEC)  # camera origin (in the past: stop never sleeps)
    jitter = args.jitter_ms * MS
    latency = round(args.latency_ms * MS)
    target = _Target()
    cfg = AssemblyConfig(fps=FPS, cameras=(CAM,), lateness_s=args.lateness_s)
    c = EpisodeController(
        target,
        cfg,
        recorder="bench",
        max_episode_s=0,
        publish_event=lambda e: None,
        session_record=dict,
        log=lambda m: None,
        tick_stats=False,
    )
    # the episodes' starts: the grid in the middle of the jitter band, after the lead / the idle time
    spans, t = [], t0 + round(args.lead_s * SEC)
    for _ in range(episodes):
        k = int((t - t0) / PERIOD) + 1
        start = t0 + round(k * PERIOD + jitter / 2 + rng.uniform(-args.spread_ms, args.spread_ms) * MS)
        end = start + round(args.seconds * SEC)
        spans.append((start, end, (start - t0 - jitter / 2) % PERIOD))
        t = end + round(args.idle_s * SEC)
    horizon = spans[-1][1] + round(cfg.delay_ns() + 0.2 * SEC)
    msgs: list[tuple[int, int, int]] = []  # (arrival, kind, stamp): 0 arm, 1 frame
    for i in range(int((horizon - t0) / PERIOD) + 1):
        s = t0 + round(i * PERIOD + rng.uniform(0, jitter))
        msgs.append((s + latency + MS + rng.randrange(3 * MS), 1, s))
    for i in range(int((horizon - t0) / (40 * MS)) + 1):  # arm inputs at 25 Hz: they only complete the rows
        s = t0 + i * 40 * MS
        msgs.append((s + MS, 0, s))
    msgs.sort()
    out: list[dict[str, Any]] = []
    j, active = 0, None
    stamps = sorted(s for _, kind, s in msgs if kind == 1)
    for arrival, kind, s in msgs:
        if active is not None and arrival > spans[active][1] + cfg.delay_ns():
            c.stop(spans[active][1])
            out.append(_episode(target.sinks[-1].pairs, stamps, args.first))
            out[-1]["landed_ms"] = min(spans[active][2], PERIOD - spans[active][2]) / 1e6
            active, j = None, j + 1
        if active is None and j < len(spans) and arrival >= spans[j][0]:
            ans = c.start("bench", lambda: spans[j][0])
            assert ans.ok, ans.message
            active = j
        c.tick(arrival)
        if kind == 0:
            c.add_joint_state(s, [0.0] * 7)
            c.add_eef_pose(s, (0, 0, 0), (0, 0, 0, 1))
            c.add_commanded_pose(s, (0, 0, 0), (0, 0, 0, 1))
            c.add_commanded_gripper(s, 0.0)
        else:
            c.add_frame(CAM, s, RGB)
    c.shutdown(save=False)
    return out


def _episode(pairs: list[tuple[int, int]], stamps: list[int], first: int) -> dict[str, Any]:
    used = [s for _, s in pairs]
    assert used == sorted(used)
    rep = [k for k in range(1, len(used)) if used[k] == used[k - 1]]
    # a drop at row k: a capture between row k-1's and row k's frames that no row took
    drop = [
        k
        for k in range(1, len(used))
        if bisect.bisect_left(stamps, used[k]) - bisect.bisect_right(stamps, used[k - 1]) > 0
    ]
    return {
        "rows": len(used),
        "rep_first": sum(1 for k in rep if k < first),
        "rep_later": len(rep) - sum(1 for k in rep if k < first),
        "drop_first": sum(1 for k in drop if k < first),
        "drop_later": len(drop) - sum(1 for k in drop if k < first),
        # over each row's new frame (a repeat is counted as such), as the recorder's frame_behind_max_ms
        "behind_ms": max(t - s for j, (t, s) in enumerate(pairs) if j == 0 or s != pairs[j - 1][1]) / 1e6,
        "ahead_ms": max(s - t for t, s in pairs) / 1e6,
        "rep_rows": rep[:5],
    }


def idle_cost(n: int = 5000, repeat: int = 40) -> None:
    """What an idle recorder does per frame: ``EpisodeController.add_frame`` while no episode runs (the
    pre-roll and, with the capture history, one append), best of ``repeat`` runs of ``n`` frames.
    """
    c = EpisodeController(
        _Target(),
        AssemblyConfig(fps=FPS, cameras=(CAM,)),
        recorder="bench",
        max_episode_s=0,
        publish_event=lambda e: None,
        session_record=dict,
        log=lambda m: None,
    )
    t0 = 1_600_000_000 * SEC
    best = math.inf
    for r in range(repeat):
        stamps = [t0 + round((r * n + i) * PERIOD) for i in range(n)]
        t = time.perf_counter()
        for s in stamps:
            c.add_frame(CAM, s, RGB)
        best = min(best, (time.perf_counter() - t) / n)
    c.shutdown(save=False)
    print(
        f"idle add_frame: {best * 1e6:.3f} us per frame (best of {repeat} x {n}; load "
        f"{'/'.join(f'{x:.1f}' for x in os.getloadavg())})"
    )
    try:
        from piper_recorder.assembly.frame_assign import CaptureHistory, window_captures
    except ImportError:  # a tree without the capture history
        return
    hist = {CAM: CaptureHistory(window_captures(FPS))}
    best = math.inf
    for r in range(repeat):
        stamps = [t0 + round((r * n + i) * PERIOD) for i in range(n)]
        t = time.perf_counter()
        for s in stamps:
            h = hist.get(CAM)
            if h is not None:
                h.add(s)
        best = min(best, (time.perf_counter() - t) / n)
    print(f"  of which the capture history (dict lookup + CaptureHistory.add): {best * 1e6:.3f} us per frame")


def _job(a: tuple[int, int, argparse.Namespace]) -> list[dict[str, Any]]:
    os.nice(0)
    return run(*a)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--per-recorder", type=int, default=5, help="episodes per simulated recorder process")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--lead-s", type=float, default=2.0, help="camera running before the recorder's first start")
    ap.add_argument("--idle-s", type=float, default=1.3, help="between an episode's end and the next start")
    ap.add_argument("--spread-ms", type=float, default=2.0)
    ap.add_argument("--jitter-ms", type=float, default=20.0)
    ap.add_argument("--latency-ms", type=float, default=20.0, help="stamp to publish (sim camera render latency)")
    ap.add_argument("--lateness-s", type=float, default=0.15)
    ap.add_argument("--first", type=int, default=12, help="rows that count as the first slot")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--idle-cost", action="store_true", help="only time an idle recorder's work per frame")
    args = ap.parse_args()
    if args.idle_cost:
        idle_cost()
        return
    n_rec = -(-args.episodes // args.per_recorder)
    jobs = [(args.seed * 1_000_003 + i, args.per_recorder, args) for i in range(n_rec)]
    t = time.perf_counter()
    load0 = "/".join(f"{x:.1f}" for x in os.getloadavg())
    if args.jobs > 1:
        with multiprocessing.Pool(args.jobs) as pool:
            res = [e for r in pool.imap_unordered(_job, jobs, chunksize=4) for e in r]
    else:
        res = [e for j in jobs for e in run(*j)]
    res = res[: args.episodes]
    n = len(res)

    def count(key: str) -> int:
        return sum(1 for e in res if e[key])

    print(
        f"{n} episodes of {args.seconds} s ({args.per_recorder} per recorder, lead {args.lead_s} s, idle "
        f"{args.idle_s} s, grid at the band middle ±{args.spread_ms} ms, jitter 0..{args.jitter_ms} ms); "
        f"{time.perf_counter() - t:.0f} s, load {load0} -> {'/'.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    for key in ("rep_first", "drop_first", "rep_later", "drop_later"):
        print(f"  episodes with {key:10s}: {count(key):6d}  ({100 * count(key) / n:.2f} %)")
    by_pos = [
        sum(1 for e in res[i :: args.per_recorder] if e["rep_first"] or e["drop_first"])
        for i in range(args.per_recorder)
    ]
    print(f"  first-slot faults by episode of the recorder (1st..): {by_pos}")
    rows = {}
    for e in res:
        for k in e["rep_rows"]:
            rows[k] = rows.get(k, 0) + 1
    print(f"  repeats by row: {dict(sorted(rows.items())[:15])}")
    bins: dict[int, list[int]] = {}
    for e in res:
        b = bins.setdefault(int(e["landed_ms"] // 2) * 2, [0, 0, 0])
        b[0] += 1
        b[1] += bool(e["rep_first"] or e["drop_first"] or e["rep_later"] or e["drop_later"])
        b[2] = max(b[2], round(e["behind_ms"]))
    print(
        "  by |grid - band centre| (ms): episodes, with a repeat or drop, frame age max (ms): "
        + ", ".join(f"{k}-{k + 2}: {v[0]} {v[1]} {v[2]}" for k, v in sorted(bins.items()))
    )
    bound = 1e3 / FPS + args.jitter_ms + 1e3 / FPS * 0.125  # a period + the band + the first margin (frame_assign)
    print(
        f"  new frames: age max {max(e['behind_ms'] for e in res):.2f} ms (episodes past the {bound:.1f} ms bound: "
        f"{sum(1 for e in res if e['behind_ms'] > bound)}), lead max {max(e['ahead_ms'] for e in res):.2f} ms"
    )


if __name__ == "__main__":
    main()
