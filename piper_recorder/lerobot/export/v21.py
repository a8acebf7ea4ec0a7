"""LeRobot v2.1 export: the v2.0 layout plus ``meta/episodes_stats.jsonl`` (see ``operation.py``).

Payload files (parquet, mp4, raw headset lines) are hard links to the source (copies across
filesystems); an episode's stats line is ``Source.episode_stats`` (the source's own line when it
is already v2.1, else the recorder's per-episode record, else computed from the parquet and a
decoded sample of each video). On a re-run the lines and payload of the
episodes already exported come from the previous export.
"""

from __future__ import annotations

from pathlib import Path

from ..format import episode_stats, fsutil, layout
from ..format.raw_read import read_json
from .files import carry_meta, iter_progress, link_or_copy, link_tree, write_file, write_json
from .source import ExportError, Source
from .state import State, camera_totals

CODEBASE_VERSION = "v2.1"


def stats_json(src: Source, cameras: dict[str, dict]) -> dict:
    """The source's stats.json plus entries for the cameras it lacks (``CameraTotals.entries``)."""
    path = src.root / layout.STATS
    stats = read_json(path) if path.is_file() else {}
    stats.update(cameras)
    return stats


def build(src: Source, state: State | None, prev: Path | None, staging: Path, progress: bool = False) -> State:
    """Build the v2.1 export of ``src`` in ``staging``, after the ``state`` of the previous one in ``prev``."""
    done = len(state.fingerprints) if state else 0
    lines: list[dict] = []
    if prev is not None:
        link_tree(prev, staging, skip=lambda rel: rel.startswith(f"{layout.META_DIR}/"))
        lines = fsutil.read_jsonl(prev / layout.EPISODES_STATS)[:done]
        if len(lines) != done:
            raise ExportError(
                f"{prev / layout.EPISODES_STATS} has {len(lines)} lines for {done} exported "
                "episodes; export to a fresh directory"
            )
    own = src.own_episode_stats()
    cams = src.cameras_without_stats()
    totals = camera_totals(src, state, own)
    todo = range(done, len(src.episodes))
    for i in iter_progress(todo, len(todo), "export v2.1", progress):
        rels = [src.data_rel(i)] + [src.video_rel(i, k) for k in src.video_keys]
        if (src.root / src.extras_rel(i)).is_file():
            rels.append(src.extras_rel(i))
        for rel in rels:
            link_or_copy(src.root / rel, staging / rel)
        stats, hists = src.episode_stats(i, own, cams)
        totals.add(hists)
        lines.append(episode_stats.stats_line(i, stats))
    info = dict(src.info, codebase_version=CODEBASE_VERSION)
    write_json(staging / layout.INFO, info)
    write_file(staging / layout.EPISODES, fsutil.jsonl_bytes(src.episodes))
    write_file(staging / layout.TASKS, fsutil.jsonl_bytes(src.tasks))
    write_file(staging / layout.EPISODES_STATS, fsutil.jsonl_bytes(lines))
    write_json(staging / layout.STATS, stats_json(src, totals.entries()))
    carry_meta(src, staging)
    return State(CODEBASE_VERSION, str(src.root), extra={"camera_hist": totals.to_json()})
