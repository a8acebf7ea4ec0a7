"""HTML report of a LeRobot v2.0 root: overview, provenance, and per-episode videos synced to plots."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow.parquet as pq

from piper_recorder.lerobot.format import metacheck
from piper_recorder.lerobot.format.layout import SESSIONS
from piper_recorder.lerobot.format.provenance import binding_changes, binding_keys, lookup
from piper_recorder.lerobot.format.root import Root
from piper_recorder.viewer.counters import counters_table, summary_cell
from piper_recorder.viewer.page import esc, page, plot_canvas, table, time_controls

STANDARD_EPISODE_KEYS = {
    "episode_index",
    "tasks",
    "task_index",
    "length",
    "video_frame_length",
    "video_frame_lengths",
    "outcome",
    "outcome_note",
    "verdict",
    "verdict_reasons",
}


def session_changes(sessions: list[dict[str, Any]]) -> list[tuple[int, str, Any, Any]]:
    """(session number, key, old, new) for every binding key that changed between consecutive sessions."""
    return [
        (i, k, old, new)
        for i in range(1, len(sessions))
        for k, old, new in binding_changes(sessions[i - 1], sessions[i])
    ]


def _pts_seconds(path: Path) -> np.ndarray:
    """Presentation times of every video packet (demux only: no decoding), sorted."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        pts = [p.pts for p in container.demux(stream) if p.pts is not None]
        tb = stream.time_base
        assert tb is not None  # mp4 streams have one
        return np.sort(np.asarray(pts, dtype=np.float64)) * float(tb)


def _arm_prefixes(columns: list[str]) -> list[str]:
    """The column prefix of each arm: ``[""]`` for one arm, ``["left_", "right_"]`` for two (their column order)."""
    arms = [c[len("observation.") : -len("arm_joint")] for c in columns if c.endswith("_arm_joint")]
    return [a for a in arms if a.endswith("_")] if "observation.arm_joint" not in columns and arms else [""]


def _column(table: Any, name: str) -> np.ndarray | None:
    if name not in table.column_names:
        return None
    col = table.column(name).to_pylist()
    return np.asarray(col, dtype=np.float64).reshape(len(col), -1)


def _series(name: str, values: np.ndarray, dash: bool = False) -> dict[str, Any]:
    return {"name": name, "y": [round(float(v), 6) for v in values], "dash": dash}


def _video_src(path: Path, out_dir: Path, embed: bool) -> str:
    if embed:
        return "data:video/mp4;base64," + base64.b64encode(path.read_bytes()).decode()
    try:
        return str(Path(path).resolve().relative_to(out_dir.resolve()))
    except ValueError:
        return Path(path).resolve().as_uri()


def outcome_cell(ep: dict[str, Any]) -> str:
    """The episode's outcome label (its note as the tooltip), or a dash."""
    o = ep.get("outcome")
    if not isinstance(o, str):
        return '<span class="note">-</span>'
    note = ep.get("outcome_note")
    title = f' title="{esc(note)}"' if isinstance(note, str) and note else ""
    return f'<span class="badge {"ok" if o == "success" else "bad"}"{title}>{esc(o)}</span>'


def verdict_cell(ep: dict[str, Any]) -> str:
    """The save-time integrity verdict (reasons as the tooltip), or a dash for a root saved without one."""
    v = ep.get("verdict")
    if not isinstance(v, str):
        return '<span class="note">-</span>'
    got = ep.get("verdict_reasons")
    reasons: list[Any] = got if isinstance(got, list) else []
    title = f' title="{esc(chr(10).join(str(r) for r in reasons))}"' if reasons else ""
    return (
        f'<span class="badge {"ok" if v == "ok" else "warn" if v == "warn" else "bad"}" data-verdict="{esc(v)}"'
        f"{title}>{esc(v)}</span>"
    )


def verdict_block(ep: dict[str, Any]) -> str:
    """Outcome and verdict with every reason, under the episode's heading."""
    got = ep.get("verdict_reasons")
    reasons: list[Any] = got if isinstance(got, list) else []
    items = "".join(f"<li>{esc(r)}</li>" for r in reasons)
    note = ep.get("outcome_note")
    note_html = f" ({esc(note)})" if isinstance(note, str) and note else ""
    return (
        f'<div class="curation">outcome {outcome_cell(ep)}{note_html} · verdict {verdict_cell(ep)}'
        f"{f'<ul>{items}</ul>' if items else ''}</div>"
    )


def render(root: Path, out: Path, episodes: list[int] | None = None, embed_videos: bool = True) -> str:
    """Write the report for ``root`` to ``out`` and return the HTML."""
    root = Path(root)
    model = Root.open(root)  # a damaged root: DatasetError naming the file (piper-view exits 2)
    info, eps = model.info, model.episodes
    sessions = metacheck.load_jsonl(model.path / SESSIONS)
    fps = float(info.fps)
    video_keys, cams = list(info.video_keys), list(info.cameras)

    overview_rows = []
    shown = {e.index for e in eps if episodes is None or e.index in episodes}
    for e in eps:
        line = dict(e.raw)
        extra = {k: v for k, v in line.items() if k not in STANDARD_EPISODE_KEYS}
        frames = e.extras.get("video_frame_lengths", {})
        overview_rows.append(
            [
                e.index,
                esc(", ".join(e.tasks)),
                e.length,
                f"{e.length / fps:.2f}",
                *[frames.get(c, "") for c in cams],
                outcome_cell(line),
                verdict_cell(line),
                summary_cell(extra, f"counters-ep{e.index}" if e.index in shown else None),
            ]
        )
    body = [
        (
            f"<section><h2>Dataset</h2><p><code>{esc(root)}</code> — {esc(info.codebase_version)}, "
            f"robot <b>{esc(info.robot_type)}</b>, {fps:g} fps, {info.total_episodes} episodes, "
            f"{info.total_frames} rows, {info.total_tasks} tasks, cameras: {esc(', '.join(cams))}</p>"
        ),
        table(
            ["episode", "task", "rows", "duration s", *[f"{c} frames" for c in cams], "outcome", "verdict", "problems"],
            overview_rows,
            left=2,
        ),
        "</section>",
    ]

    prov = ["<section><h2>Provenance</h2>"]
    if sessions:
        last = sessions[-1]
        prov.append(
            table(["binding key", "latest session"], [[esc(k), esc(lookup(last, k))] for k in binding_keys(last)])
        )
        changes = session_changes(sessions)
        prov.append(f"<p>{len(sessions)} collection session(s).</p>")
        if changes:
            prov.append('<p class="warn">Binding keys changed between sessions (mixed controllers):</p>')
            prov.append(
                table(["session", "key", "old", "new"], [[i, esc(k), esc(o), esc(n)] for i, k, o, n in changes], left=2)
            )
        else:
            prov.append('<p class="ok">No binding-key changes across sessions.</p>')
    else:
        prov.append(f"<p>No {SESSIONS}.</p>")
    prov.append("</section>")
    body += prov

    plots: dict[str, Any] = {}
    chosen = [e for e in eps if episodes is None or e.index in episodes]
    for episode in chosen:
        idx, ep = episode.index, dict(episode.raw)
        tbl = pq.read_table(model.data_file(idx))
        ts = _column(tbl, "timestamp")
        if ts is None:
            raise ValueError(f"{model.data_file(idx)}: no timestamp column")
        t = ts[:, 0]
        group = f"ep{idx}"
        tl = [round(float(v), 4) for v in t]
        sec = [
            f'<section id="episode-{idx}"><h2>Episode {idx}: {esc(", ".join(episode.tasks))}</h2>',
            verdict_block(ep),
            time_controls(group, float(t[-1]) if len(t) else 0.0),
            '<div class="videos">',
        ]
        counters = counters_table({k: v for k, v in ep.items() if k not in STANDARD_EPISODE_KEYS}, f"counters-{group}")
        frame_iv: list[dict[str, Any]] = []
        for key, cam in zip(video_keys, cams):
            vpath = model.video_file(idx, key)
            if not vpath.exists():
                sec.append(f'<p class="warn">missing video {esc(vpath.name)} for {esc(cam)}</p>')
                continue
            sec.append(
                f'<figure><video data-group="{group}" data-camera="{esc(cam)}" muted playsinline controls '
                f'preload="auto" src="{_video_src(vpath, out.parent, embed_videos)}"></video>'
                f"<figcaption>{esc(cam)}</figcaption></figure>"
            )
            pts = _pts_seconds(vpath)
            if len(pts) > 1:
                frame_iv.append({"cam": cam, "t": pts[1:], "dt": np.diff(pts) * 1000.0})
        sec.append("</div>")
        flat = []  # frame intervals that are all 1/fps (nominal mode) carry no information: say so, no plot
        for fi in frame_iv:
            if np.all(np.abs(fi["dt"] - 1000.0 / fps) < 1.0):
                flat.append(fi["cam"])
        if flat:
            sec.append(
                f'<p class="note">Frame intervals of {esc(", ".join(flat))}: every one 1/fps (one frame per row).</p>'
            )
        sec.append('<div class="plots">')

        def add(pid: str, title: str, unit: str, series: list[dict[str, Any]], tt: list[float] = tl) -> None:
            plots[f"{group}-{pid}"] = {"title": title, "unit": unit, "t": tt, "series": series}
            sec.append(plot_canvas(f"{group}-{pid}", group))

        for arm in _arm_prefixes(tbl.column_names):  # "" for one arm; "left_", "right_" for several
            who = f"{arm[:-1]}: " if arm else ""
            joints = _column(tbl, f"observation.{arm}arm_joint")
            if joints is not None:
                add(
                    f"{arm}joints",
                    f"{who}joint positions",
                    "rad",
                    [_series(f"joint{j + 1}", joints[:, j]) for j in range(joints.shape[1])],
                )
            eef, cmd = _column(tbl, f"observation.{arm}arm_eef"), _column(tbl, f"action.{arm}arm_eef")
            for axis, name in enumerate("xyz"):
                series = []
                if eef is not None:
                    series.append(_series(f"measured {name}", eef[:, axis]))
                if cmd is not None:
                    series.append(_series(f"commanded {name}", cmd[:, axis], dash=True))
                if series:
                    add(f"{arm}eef-{name}", f"{who}EEF {name}: commanded vs measured", "m", series)
            grip, gcmd = _column(tbl, f"observation.{arm}gripper"), _column(tbl, f"action.{arm}gripper")
            gs = ([_series("measured", grip[:, 0])] if grip is not None else []) + (
                [_series("commanded", gcmd[:, 0], dash=True)] if gcmd is not None else []
            )
            if gs:
                add(f"{arm}gripper", f"{who}gripper width", "m", gs)
        for fi in (f for f in frame_iv if f["cam"] not in flat):
            add(
                f"frames-{fi['cam']}",
                f"{fi['cam']} frame intervals",
                "ms",
                [_series("interval", fi["dt"])],
                [round(float(v), 4) for v in fi["t"]],
            )
        sec.append("</div>")
        if counters:
            sec.append(f"<h3>Counters</h3>{counters}")
        sec.append("</section>")
        body += sec

    html_text = page(f"piper_recorder report — {root.name}", "".join(body), {"plots": plots})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html_text)
    return html_text
