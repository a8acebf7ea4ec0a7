"""piper-view: the HTML report renders in a real headless browser, plots drawn, videos playable, cursor synced."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from support.browser import open_page
from support.lerobot_fixtures import small_root

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent

CANVAS_INK = """cv => { const g = cv.getContext('2d'); const d = g.getImageData(0, 0, cv.width, cv.height).data;
  let ink = 0; for (let i = 0; i < d.length; i += 4) if (d[i] < 200 || d[i+1] < 200 || d[i+2] < 200) ink++; return ink; }"""


def _sessions(root: Path) -> None:
    base = {
        "control": {
            "backend": "position",
            "impedance": {"kp": [5] * 6, "kd": [0.3] * 6, "t_ff": 0.0, "gravity_ff": False},
        },
        "arm": {"firmware": "S-V1.6-3"},
        "recording": {"fps": 30},
    }
    changed = json.loads(json.dumps(base))
    changed["control"]["backend"] = "impedance"
    (root / "meta" / "collection_sessions.jsonl").write_text(json.dumps(base) + "\n" + json.dumps(changed) + "\n")


def test_lerobot_report_in_browser(tmp_path):
    root = small_root(tmp_path / "ds", lengths=(40, 25))
    _sessions(root)
    out = tmp_path / "report.html"
    res = subprocess.run([str(BIN / "piper-view"), str(root), "--out", str(out)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    assert "http://" not in text and "https://" not in text, "report must be self-contained"
    with open_page(str(out)) as (page, errors):
        page.wait_for_function(
            "Array.from(document.querySelectorAll('video')).every(v => v.readyState >= 2)", timeout=15000
        )
        videos = page.eval_on_selector_all("video", "vs => vs.map(v => [v.videoWidth, v.duration, v.dataset.camera])")
        assert len(videos) == 4  # 2 episodes x 2 cameras
        assert all(w == 64 and d > 0 for w, d, _ in videos)
        canvases = page.query_selector_all("canvas")
        assert len(canvases) >= 2 * 5  # joints, EEF x/y/z, gripper (frame intervals all 1/fps: a note, no plot)
        for cv in canvases:
            assert int(cv.get_attribute("data-drawn")) > 0
            assert page.evaluate(CANVAS_INK, cv) > 50
        # The shared cursor: moving the slider seeks every video of the episode and redraws its plots.
        before = page.evaluate("document.querySelector('canvas[data-group=\"ep0\"]').toDataURL()")
        page.eval_on_selector("#slider-ep0", "s => { s.value = 0.5; s.dispatchEvent(new Event('input')); }")
        page.wait_for_function(
            "Array.from(document.querySelectorAll('video[data-group=\"ep0\"]'))"
            ".every(v => Math.abs(v.currentTime - 0.5) < 0.05)",
            timeout=5000,
        )
        after = page.evaluate("document.querySelector('canvas[data-group=\"ep0\"]').toDataURL()")
        assert before != after
        assert page.inner_text("#cursor-ep0").startswith("0.500")
        # Provenance: the backend change between the two sessions is called out.
        assert "control.backend" in page.inner_text("body") and "impedance" in page.inner_text("body")
        assert errors == []


def test_lerobot_report_single_episode_and_linked_videos(tmp_path):
    root = small_root(tmp_path / "ds", lengths=(10, 10, 10))
    out = tmp_path / "one.html"
    subprocess.run(
        [str(BIN / "piper-view"), str(root), "--episode", "1", "--link-videos", "--out", str(out)],
        check=True,
        capture_output=True,
    )
    text = out.read_text()
    assert 'id="episode-1"' in text and 'id="episode-0"' not in text
    assert "data:video/mp4" not in text and "episode_000001.mp4" in text
    with open_page(str(out)) as (page, errors):
        page.wait_for_function(
            "Array.from(document.querySelectorAll('video')).every(v => v.readyState >= 2)", timeout=15000
        )
        assert errors == []


def test_colorize_depth_marks_invalid_black():
    from piper_recorder.viewer.rgbd_report import colorize_depth

    d = np.array([[0, 100, 6000, 3000]], dtype=np.uint16)
    rgb = colorize_depth(d, 100, 6000)
    assert rgb.shape == (1, 4, 3) and rgb.dtype == np.uint8
    assert (rgb[0, 0] == 0).all()
    assert not (rgb[0, 1] == rgb[0, 2]).all()


def test_rgbd_report_in_browser(tmp_path):
    from rgbd_writer import RgbdConfig, RgbdWriter

    rng = np.random.default_rng(0)
    path = tmp_path / "rgbd.hdf5"
    w = RgbdWriter(path, RgbdConfig(width=64, height=48))
    for ep, steps in enumerate((8, 5)):
        w.start_episode(seed=ep)
        for t in range(steps + 1):
            depth = rng.uniform(0.2, 3.0, (48, 64)).astype(np.float32)
            depth[:8, :8] = np.nan  # invalid -> sentinel 0 -> drawn black
            w.add_observation(
                rng.integers(0, 256, (48, 64, 3), dtype=np.uint8),
                depth,
                {"arm_joint": rng.normal(size=6).astype(np.float32)},
            )
            if t < steps:
                w.add_transition(rng.normal(size=8).astype(np.float32), float(t), terminal=t == steps - 1)
        w.end_episode(success=True)
    w.close()
    out = tmp_path / "rgbd.html"
    subprocess.run([str(BIN / "piper-view"), str(path), "--out", str(out)], check=True, capture_output=True)
    with open_page(str(out)) as (page, errors):
        imgs = page.eval_on_selector_all("img", "xs => xs.map(i => i.complete && i.naturalWidth > 0)")
        assert len(imgs) == 2 * (6 + 6) and all(imgs)  # rgb + depth thumbnails, up to 6 per episode
        canvases = page.query_selector_all("canvas")
        assert len(canvases) == 4
        for cv in canvases:
            assert page.evaluate(CANVAS_INK, cv) > 50
        body = page.inner_text("body")
        assert "rlroverlab.offline_rgbd_v2" in body and "demo_1: 5 transitions" in body
        assert errors == []


def _with_counters(root: Path) -> None:
    """Give the episodes the record a recorder writes: one problem in episode 0."""
    path = root / "meta" / "episodes.jsonl"
    eps = [json.loads(line) for line in path.read_text().splitlines()]
    for ep in eps:
        cams = {"cam_front": 0, "cam_wrist": 0}
        ep.update(
            {
                "timestamp_mode": "nominal",
                "rows": ep["length"],
                "skipped_start_ticks": 0,
                "messages_late": {},
                "messages_invalid": {},
                "values_stale": {"joint_states": 0},
                "frames_received": {"cam_front": ep["length"] + 2, "cam_wrist": ep["length"] + 2},
                "frames_sent": {"cam_front": ep["length"], "cam_wrist": ep["length"]},
                "frames_dropped": dict(cams),
                "frames_repeated": dict(cams),
                "frames_late": dict(cams),
                "frames_stale": dict(cams),
                "frames_missing": {},
                "frames_beyond_half_period": dict(cams),
                "frame_offset_max_ms": {"cam_front": 9.8, "cam_wrist": 12.1},
                "tick_delay_ms": {"ticks": ep["length"], "p50": 0.4, "p99": 2.1, "max": 3.0},
                "frames_written": {"cam_front": ep["length"], "cam_wrist": ep["length"]},
                "frames_rejected_by_encoder": {},
                "video_dropped_frames": {c: {"non_increasing_pts": 0, "queue_full": 0} for c in cams},
            }
        )
    eps[0]["frames_repeated"]["cam_wrist"] = 3
    eps[0]["video_dropped_frames"]["cam_front"]["queue_full"] = 1
    path.write_text("".join(json.dumps(e) + "\n" for e in eps))


def test_lerobot_report_counters_table_highlights_problems(tmp_path):
    root = small_root(tmp_path / "ds", lengths=(40, 25))
    _with_counters(root)
    out = tmp_path / "report.html"
    res = subprocess.run([str(BIN / "piper-view"), str(root), "--out", str(out)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    with open_page(str(out)) as (page, errors):
        page.wait_for_function(
            "Array.from(document.querySelectorAll('video')).every(v => v.readyState >= 2)", timeout=15000
        )
        overview = page.inner_text("section")
        assert "{&quot;" not in page.content() and "{" not in overview  # no raw JSON dump
        # overview: episode 0 flags its two problems, episode 1 none
        badges = page.eval_on_selector_all("span.badge.bad", "bs => bs.map(b => [b.dataset.counter, b.innerText])")
        assert sorted(c for c, _ in badges) == ["frames_repeated", "video_dropped_frames"]
        assert [t for c, t in badges if c == "frames_repeated"] == ["frames repeated 3"]
        assert page.locator("section").first.locator(".ok", has_text="none").count() == 1
        # per episode: the counters table, problems highlighted only where non-zero
        bad0 = page.eval_on_selector_all("#counters-ep0 tr.bad", "rs => rs.map(r => r.dataset.counter)")
        assert sorted(bad0) == ["frames_repeated", "video_dropped_frames"]
        assert page.eval_on_selector_all("#counters-ep1 tr.bad", "rs => rs.length") == 0
        rep = page.inner_text('#counters-ep0 tr[data-counter="frames_repeated"]')
        assert "3" in rep and "cam_wrist 3" in rep and "cam_front 0" in rep
        bg = page.eval_on_selector(
            '#counters-ep0 tr[data-counter="frames_repeated"] td', "td => getComputedStyle(td).backgroundColor"
        )
        plain = page.eval_on_selector(
            '#counters-ep0 tr[data-counter="frames_dropped"] td', "td => getComputedStyle(td).backgroundColor"
        )
        assert bg != plain
        assert "p99 2.1" in page.inner_text('#counters-ep0 tr[data-counter="tick_delay_ms"]')
        assert page.inner_text('#counters-ep0 tr[data-counter="frame_offset_max_ms"] td:nth-child(2)') == "12.1"
        # the row-interval plot (float rounding only) is gone; nominal frame intervals are a note, not a plot
        titles = page.evaluate(
            "Object.values(JSON.parse(document.getElementById('report-data').textContent).plots).map(p => p.title)"
        )
        assert not any("row interval" in t or "tick jitter" in t for t in titles)
        page.locator("#counters-ep0").scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / "counters.png"), full_page=True)
        assert errors == []
