"""HTML report of an RGB-D HDF5 file: index summary, RGB and colour-mapped depth thumbnails, actions, rewards."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from PIL import Image

from piper_recorder.viewer.page import esc, page, plot_canvas, table

THUMBS_PER_EPISODE = 6
# A perceptual blue->yellow ramp (viridis anchors); invalid depth (0) is drawn black.
_ANCHORS = np.array([[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], dtype=np.float64)
_LUT = np.stack([np.interp(np.linspace(0, 4, 256), np.arange(5), _ANCHORS[:, c]) for c in range(3)], 1).astype(np.uint8)


def colorize_depth(depth_mm: np.ndarray, lo_mm: float, hi_mm: float) -> np.ndarray:
    """uint16 millimetres -> RGB uint8 with the invalid sentinel (0) black."""
    scaled = np.clip((depth_mm.astype(np.float32) - lo_mm) / max(hi_mm - lo_mm, 1.0), 0.0, 1.0)
    rgb = _LUT[(scaled * 255).astype(np.uint8)]
    rgb[depth_mm == 0] = 0
    return rgb


def _data_uri(img: Image.Image, width: int = 160) -> str:
    img = img.copy()
    img.thumbnail((width, width * 4))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=80)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()


def render(path: Path, out: Path, episodes: list[int] | None = None) -> str:
    """Write the report for the RGB-D file ``path`` to ``out`` and return the HTML.

    h5py raises KeyError, TypeError, RuntimeError, ... on a damaged file; if reading fails and the
    validator finds problems, that is an RgbdError listing them (piper-view exits 2), while a failure
    on a file the validator accepts is a bug here and propagates.
    """
    try:
        return _render(Path(path), out, episodes)
    except Exception as exc:
        from rgbd_writer.errors import RgbdError
        from rgbd_writer.validate import validate_file

        try:
            problems = validate_file(str(path))
        except Exception as vexc:  # noqa: BLE001 - as piper-validate: unreadable even for the validator
            problems = [f"cannot validate: {type(vexc).__name__}: {vexc}"]
        if not problems:
            raise
        more = f" (and {len(problems) - 1} more: piper-validate lists them)" if len(problems) > 1 else ""
        raise RgbdError(f"{path}: cannot show a damaged file: {problems[0]}{more}") from exc


def _action_names(f: h5py.File) -> list[str]:
    """The action's element names where the file states them (``env_args.action_names``: several arms)."""
    try:
        names = json.loads(f["data"].attrs["env_args"]).get("action_names")
    except (KeyError, TypeError, ValueError, AttributeError):
        return []
    return [str(n) for n in names] if isinstance(names, list) else []


def _element(names: list[str], k: int) -> str:
    return names[k] if k < len(names) else f"a[{k}]"


def _render(path: Path, out: Path, episodes: list[int] | None) -> str:
    plots: dict[str, Any] = {}
    with h5py.File(path, "r") as f:
        attrs = dict(f.attrs)
        lengths = f["index/episode_lengths"][:]
        obs_off = f["index/obs_offsets"][:]
        tr_off = f["index/transition_offsets"][:]
        rgb_ds, depth_ds = f["observations/rgb_jpeg"], f["observations/depth_jp2"]
        actions, rewards = f["transitions/actions"], f["transitions/rewards"]
        lo, hi = float(attrs.get("depth_min_m", 0.1)) * 1000, float(attrs.get("depth_max_m", 6.0)) * 1000
        action_names = _action_names(f)
        summary = [
            [esc(k), esc(attrs[k].decode() if isinstance(attrs[k], bytes) else attrs[k])]
            for k in (
                "schema_name",
                "format_version",
                "writer_status",
                "total_episodes",
                "total_transitions",
                "total_observations",
                "camera_width",
                "camera_height",
                "rgb_codec",
                "depth_codec",
            )
            if k in attrs
        ]
        index_rows = [
            [
                e,
                int(lengths[e]),
                int(lengths[e]) + 1,
                int(obs_off[e]),
                int(tr_off[e]),
                esc(f[f"episodes/demo_{e}"].attrs.get("success", "")) if f"episodes/demo_{e}" in f else "",
            ]
            for e in range(len(lengths))
        ]
        body = [
            f"<section><h2>File</h2><p><code>{esc(path)}</code></p>",
            table(["attribute", "value"], summary, 2),
            "<h3>Index</h3>",
            table(["episode", "transitions", "observations", "obs_offset", "transition_offset", "success"], index_rows),
            "</section>",
        ]
        for e in range(len(lengths)):
            if episodes is not None and e not in episodes:
                continue
            n_obs = int(lengths[e]) + 1
            picks = np.unique(np.linspace(0, n_obs - 1, min(THUMBS_PER_EPISODE, n_obs)).astype(int))
            thumbs = []
            for j in picks:
                row = int(obs_off[e]) + int(j)
                rgb = Image.open(io.BytesIO(rgb_ds[row].tobytes())).convert("RGB")
                depth = np.asarray(Image.open(io.BytesIO(depth_ds[row].tobytes())))
                thumbs.append(
                    f'<figure><img alt="rgb {j}" src="{_data_uri(rgb)}">'
                    f'<img alt="depth {j}" src="{_data_uri(Image.fromarray(colorize_depth(depth, lo, hi)))}">'
                    f"<figcaption>obs {j}</figcaption></figure>"
                )
            a = actions[int(tr_off[e]) : int(tr_off[e]) + int(lengths[e])]
            r = rewards[int(tr_off[e]) : int(tr_off[e]) + int(lengths[e])]
            steps = list(range(len(a)))
            group = f"demo{e}"
            a2 = a.reshape(len(a), -1)
            plots[f"{group}-actions"] = {
                "title": "actions",
                "unit": "",
                "t": steps,
                "series": [
                    {"name": _element(action_names, k), "y": [round(float(v), 6) for v in a2[:, k]]}
                    for k in range(a2.shape[1])
                ],
            }
            plots[f"{group}-rewards"] = {
                "title": "rewards",
                "unit": "",
                "t": steps,
                "series": [{"name": "reward", "y": [round(float(v), 6) for v in r.reshape(-1)]}],
            }
            body += [
                f'<section id="demo-{e}"><h2>demo_{e}: {int(lengths[e])} transitions</h2>',
                f'<div class="thumbs">{"".join(thumbs)}</div><div class="plots">',
                plot_canvas(f"{group}-actions", group),
                plot_canvas(f"{group}-rewards", group),
                "</div></section>",
            ]
    html_text = page(f"piper_recorder report — {path.name}", "".join(body), {"plots": plots})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html_text)
    return html_text
