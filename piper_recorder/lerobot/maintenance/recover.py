"""Explicit recovery of a LeRobot root the writer refuses as damaged (``piper-recover``).

The writer never moves a saved episode's files on its own (``writer.crash_repair.check_consistent``); this is the
one place that may, only when asked, after showing its plan (``--dry-run``):

* rebuilds the ``episodes.jsonl`` lines of episodes whose files are complete on disk but whose line is
  gone: consecutive episodes from the first missing line, each with a parquet that reads back with the right
  ``episode_index``, ``frame_index``, ``index`` (continuing the previous episode) and a ``task_index`` in
  tasks.jsonl, and an mp4 per camera; the line holds what can be measured (length, task, video frame counts),
  flagged ``"recovered_by": "piper-recover"`` (the recording counters are lost);
* writes ``meta/info.json`` from the given recorder configuration when it is missing or its totals disagree
  with the recovered episodes, once the configuration is checked against the parquet columns and cameras;
* moves every remaining file under data/, videos/, extras/ that no episode names to ``.recovered/<time>/``
  (nothing is deleted but the staging area and ``*.tmp`` leftovers);
* then opens the root with the writer, which regenerates tasks, stats and info totals.

It changes nothing when a saved episode's files are missing or the configuration does not match the root.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow.parquet as pq

from ..format import fsutil, layout, raw_read
from ..format.errors import DatasetError
from ..format.features import BOOKKEEPING
from ..writer import crash_repair, meta_builders
from ..writer.config import WriterConfig

RECOVERED_BY = "piper-recover"


@dataclass
class Plan:
    """What ``piper-recover`` would do to a root, or the problems that stop it."""

    root: Path
    remove: list[str] = field(default_factory=list)  # unsaved leftovers: staging, *.tmp
    rebuilt: list[dict] = field(default_factory=list)  # episodes.jsonl lines rebuilt from disk
    move: list[str] = field(default_factory=list)  # files no episode names -> .recovered/
    write_info: bool = False
    notes: list[str] = field(default_factory=list)  # episodes on disk that could not be rebuilt
    problems: list[str] = field(default_factory=list)  # what stops recovery (nothing is changed)

    def lines(self) -> list[str]:
        """The plan as lines for the operator, one per action."""
        out = [f"remove unsaved {rel}" for rel in self.remove]
        out += [
            f"rebuild {layout.EPISODES} line of episode {r['episode_index']} ({r['length']} rows, "
            f"task {r['tasks'][0]!r}, video frames {r.get('video_frame_lengths', {})})"
            for r in self.rebuilt
        ]
        out += [f"move {rel} to {layout.RECOVERED}/" for rel in self.move]
        if self.write_info:
            out.append(f"write {layout.INFO} from the configuration (missing, or its totals disagree)")
        out += [f"note: {n}" for n in self.notes]
        return out


def plan(root: Path, wcfg: WriterConfig) -> Plan:
    """What ``apply`` would do to ``root`` (reads only)."""
    root = Path(root)
    p = Plan(root)
    if not (root / layout.META_DIR).is_dir():
        p.problems.append(f"{root} is not a LeRobot root (no {layout.META_DIR}/)")
        return p
    staging = root / layout.STAGING
    if staging.exists():
        p.remove.append(layout.STAGING)
    for top in (*layout.PAYLOAD_DIRS, layout.META_DIR):
        if (root / top).exists():
            p.remove += [
                q.relative_to(root).as_posix()
                for q in sorted((root / top).rglob("*" + fsutil.TMP_SUFFIX))
                if q.is_file()
            ]
    try:
        episodes = crash_repair.load_episodes(root)
        tasks = {int(t["task_index"]): t["task"] for t in fsutil.read_jsonl(root / layout.TASKS)}
    except (DatasetError, ValueError, KeyError, TypeError) as e:
        p.problems.append(f"cannot read the commit record: {e}")
        return p
    cameras, cs = list(wcfg.cameras), wcfg.chunks_size
    info_path = root / layout.INFO
    p.write_info = not info_path.exists()
    _check_config(p, root, wcfg, info_path)
    if p.problems:
        return p
    missing = [
        rel
        for rel in sorted(crash_repair.expected_files(episodes, cameras, cs))
        if not rel.startswith(("extras/", layout.STATS_CACHE)) and not (root / rel).exists()
    ]
    if missing:
        p.problems.append(
            f"files of saved episodes are missing: {missing[:5]}; recovery cannot recreate them "
            "(restore them from a backup)"
        )
        return p
    first = sum(int(e["length"]) for e in episodes)
    i = len(episodes)
    while (root / layout.data_relpath(i, cs)).exists():
        rec, why = _rebuild(root, wcfg, i, first, tasks)
        if rec is None:
            p.notes.append(f"episode {i} is on disk but cannot be rebuilt ({why}); its files are moved aside")
            break
        p.rebuilt.append(rec)
        first += rec["length"]
        i += 1
    if not p.write_info:  # totals that disagree with the recovered commit record would be refused again
        total = raw_read.read_json(info_path).get("total_episodes")
        p.write_info = total != len(episodes) + len(p.rebuilt)
    expected = crash_repair.expected_files(episodes + p.rebuilt, cameras, cs)
    p.move = [rel for rel, _ in crash_repair.payload_files(root) if rel not in expected]
    return p


def _check_config(p: Plan, root: Path, wcfg: WriterConfig, info_path: Path) -> None:
    want = meta_builders.features_json(wcfg)
    if info_path.exists():
        try:
            info = raw_read.read_json(info_path)
        except ValueError as e:
            p.problems.append(f"{info_path} is not valid JSON ({e}); move it away to rebuild it from --config")
            return
        if info.get("features") != want or info.get("fps") != wcfg.fps or info.get("chunks_size") != wcfg.chunks_size:
            p.problems.append(
                f"the configuration does not match {layout.INFO} (fps, chunks_size or features); "
                "pass the configuration the root was recorded with"
            )
        return
    columns = {k for k, v in want.items() if v["dtype"] != "video"}
    data = sorted((root / "data").rglob("*.parquet")) if (root / "data").exists() else []
    if data:
        have = set(pq.read_schema(data[0]).names)
        if have != columns:
            p.problems.append(
                f"the configuration's columns differ from {data[0].relative_to(root)}: "
                f"{sorted(have ^ columns)}; pass the configuration the root was recorded with"
            )
    keys = {layout.video_key(c) for c in wcfg.cameras}
    on_disk = (
        {d.name for d in (root / "videos").glob("chunk-*/*") if d.is_dir()} if (root / "videos").exists() else set()
    )
    if on_disk and on_disk != keys:
        p.problems.append(
            f"videos on disk are for {sorted(on_disk)}, the configuration records {sorted(keys)}; "
            "pass the configuration the root was recorded with"
        )


def _rebuild(root: Path, wcfg: WriterConfig, i: int, first: int, tasks: dict[int, str]) -> tuple[dict | None, str]:
    cs = wcfg.chunks_size
    try:
        t = pq.read_table(root / layout.data_relpath(i, cs))
        n = t.num_rows
        cols = {k: np.asarray(t.column(k).to_numpy()) for k in BOOKKEEPING}
    except Exception as e:  # noqa: BLE001 - an unreadable file is a reason not to rebuild, not a crash
        return None, f"parquet unreadable: {type(e).__name__}: {e}"
    if n == 0 or not np.all(cols["episode_index"] == i) or not np.array_equal(cols["frame_index"], np.arange(n)):
        return None, "parquet episode_index/frame_index do not match"
    if not np.array_equal(cols["index"], np.arange(first, first + n)):
        return None, f"parquet index does not continue at {first}"
    ti = np.unique(cols["task_index"])
    if len(ti) != 1 or int(ti[0]) not in tasks:
        return None, f"task_index {ti.tolist()} not in {layout.TASKS}"
    lengths = {}
    for cam in wcfg.cameras:
        path = root / layout.video_relpath(i, cam, cs)
        try:
            with av.open(str(path)) as c:
                lengths[cam] = sum(1 for pkt in c.demux(c.streams.video[0]) if pkt.size)
        except Exception as e:  # noqa: BLE001
            return None, f"{path.relative_to(root)} unreadable: {type(e).__name__}: {e}"
    rec: dict[str, Any] = {"episode_index": i, "tasks": [tasks[int(ti[0])]], "task_index": int(ti[0]), "length": n}
    if lengths:
        rec["video_frame_length"] = min(lengths.values())
        rec["video_frame_lengths"] = lengths
    extras = root / layout.extras_relpath(i)
    if wcfg.save_raw_quest:
        rec["raw_quest_lines"] = extras.read_bytes().count(b"\n") if extras.exists() else 0
    rec["recovered_by"] = RECOVERED_BY
    return rec, ""


def apply(p: Plan, wcfg: WriterConfig) -> list[str]:
    """Carry out ``p`` under the root's writer lock, then let the writer regenerate the derived files."""
    from ..writer.dataset_writer import LeRobotWriter

    if p.problems:
        raise DatasetError("; ".join(p.problems))
    root = p.root
    done: list[str] = []
    fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise DatasetError(f"{root} is open in a writer; stop the recorder or converter first") from None
        for rel in p.remove:
            q = root / rel
            if q.is_dir():
                shutil.rmtree(q)
            else:
                q.unlink(missing_ok=True)
            done.append(f"removed unsaved {rel}")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for rel in p.move:
            dst = root / layout.RECOVERED / stamp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            (root / rel).rename(dst)
            done.append(f"moved {rel} to {dst.relative_to(root).as_posix()}")
        if p.rebuilt:
            episodes = crash_repair.load_episodes(root) + p.rebuilt
            fsutil.atomic_write(root / layout.EPISODES, fsutil.jsonl_bytes(episodes))
            done.append(f"rebuilt {len(p.rebuilt)} lines of {layout.EPISODES}")
        if p.write_info:
            episodes = crash_repair.load_episodes(root)
            n_tasks = len(fsutil.read_jsonl(root / layout.TASKS))
            fsutil.atomic_write(root / layout.INFO, fsutil.json_bytes(meta_builders.info_json(wcfg, episodes, n_tasks)))
            done.append(f"wrote {layout.INFO}")
    finally:
        os.close(fd)
    LeRobotWriter(root, wcfg).close()  # checks the result and regenerates tasks, stats and info totals
    return done
