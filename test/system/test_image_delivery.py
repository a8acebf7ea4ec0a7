"""Every image subscriber of the sim graph receives (nearly) every frame published: 3 cameras at 640x480,
30 fps, over 22 s, both recorders, quest_video, the policy node and the dashboard (with a page watching).

Counted exactly: the cameras are paused (their fault plan) while the counts are read, so the published
totals (each sim_camera's ~/status) and the received totals (each consumer's ``images_received``) are
both at rest; the difference over a 22 s publishing window is compared per (consumer, camera).
A shared-memory segment smaller than one frame (Fast DDS's default 512 KiB) gave best-effort
subscribers 6-12 of 30 fps: this test is what fails then.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.lerobot_fixtures import small_root
from support.paths import ROOT

CAMS = ["cam_front", "cam_wrist", "cam_side"]
WINDOW_S = 22.0
MIN_DELIVERY = 0.995

pytestmark = [pytest.mark.ros, pytest.mark.timeout(300)]


def three_camera_config(tmp: Path) -> Path:
    from piper_recorder.params.derived import LAUNCH_SECTION

    raw = yaml.safe_load((ROOT / "config" / "sim.yaml").read_text())
    raw["cam_side"] = {
        "ros__parameters": {"serial": "sim-side-0003", "position": [0.30, 0.55, 0.50], "look_at": [0.20, 0.0, 0.38]}
    }
    raw[LAUNCH_SECTION]["ros__parameters"]["cameras"] = CAMS  # the recorders follow (params.derived)
    path = tmp / "sim_3cam.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def training_root(path: Path) -> Path:
    root = small_root(path, cameras=tuple(CAMS))
    info = json.loads((root / "meta" / "info.json").read_text())
    for cam in CAMS:
        info["features"][f"observation.images.{cam}"]["shape"] = [480, 640, 3]
    (root / "meta" / "info.json").write_text(json.dumps(info))
    return root


class Statuses:
    """The newest ~/status JSON of every node named, with the monotonic time it arrived."""

    def __init__(self, node: Any, names: list[str]):
        from std_msgs.msg import String

        self.lock = threading.Lock()
        self.last: dict[str, tuple[float, dict]] = {}
        for n in names:
            node.create_subscription(String, f"/{n}/status", lambda m, n=n: self._on(n, m), 10)

    def _on(self, name: str, msg: Any) -> None:
        with self.lock:
            self.last[name] = (time.monotonic(), json.loads(msg.data))

    def fresh(self, name: str, since: float, timeout: float = 15.0) -> dict:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                got = self.last.get(name)
            if got is not None and got[0] > since:
                return got[1]
            time.sleep(0.05)
        raise AssertionError(f"no /{name}/status since {since:.1f}")


def received(status: dict) -> dict[str, int]:
    return {cam: int(v["count"]) for cam, v in (status.get("images_received") or {}).items()}


def test_every_image_subscriber_gets_every_frame(tmp_path):
    from piper_recorder.graph.sim_session import SimSession

    train = training_root(tmp_path / "train")
    sets = [
        "policy.policy=hold",
        f"policy.root={train}",
        "piper_launch.dashboard=true",
        "dashboard.port=0",
        "dashboard.token=",
        "policy.camera_stale_s=5.0",
        "policy.arm_stale_s=60.0",
    ]
    consumers = ["lerobot_recorder", "rgbd_recorder", "quest_video", "policy", "dashboard"]
    with SimSession(tmp_path / "out", three_camera_config(tmp_path), sets) as s:
        st = Statuses(s._live(), consumers + CAMS)
        dash = _dashboard_url(s)
        watching = threading.Event()
        threading.Thread(target=_watch_page, args=(dash, watching), daemon=True).start()  # images only if watched

        def pause(on: bool) -> None:
            for cam in CAMS:
                if on:
                    s.set_parameter(cam, "pause_s", 1e6)
                s.set_parameter(cam, "pause_at_s", 0.0 if on else -1.0)

        def counts() -> tuple[dict[str, int], dict[str, dict[str, int]]]:
            since = time.monotonic() + 2.0  # queued frames delivered, then a status taken after that
            time.sleep(2.0)
            pub = {cam: int(st.fresh(cam, since)["published"]) for cam in CAMS}
            return pub, {c: received(st.fresh(c, since)) for c in consumers}

        time.sleep(5.0)  # discovery, the dashboard page's first thumbnails
        pause(True)
        p0, c0 = counts()
        pause(False)
        time.sleep(WINDOW_S)
        pause(True)
        p1, c1 = counts()
        watching.set()

    published = {cam: p1[cam] - p0[cam] for cam in CAMS}
    assert all(n >= 0.95 * 30 * WINDOW_S for n in published.values()), published
    expect = {
        "lerobot_recorder": CAMS,
        "rgbd_recorder": ["cam_front"],
        "quest_video": CAMS,
        "policy": CAMS,
        "dashboard": CAMS,
    }
    short = []
    for c, cams in expect.items():
        for cam in cams:
            got = c1[c].get(cam, 0) - c0[c].get(cam, 0)
            if got < MIN_DELIVERY * published[cam] or got > published[cam]:
                short.append(f"{c}/{cam}: {got} of {published[cam]}")
    assert not short, "frames not delivered: " + "; ".join(short)


def _dashboard_url(s: Any) -> str:
    """The dashboard's address from its log line ("dashboard on http://127.0.0.1:PORT/")."""
    log = s.log_dir / "dashboard.log"
    end = time.monotonic() + 30
    while time.monotonic() < end:
        for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
            if "dashboard on http://" in line:
                return line.split("dashboard on ", 1)[1].split()[0].rstrip("/")
        time.sleep(0.2)
    raise AssertionError("the dashboard did not log its address")


def _watch_page(base: str, done: threading.Event) -> None:
    """What an open page does for its thumbnails: ask for each camera's image about twice a second."""
    while not done.is_set():
        for cam in CAMS:
            try:
                urllib.request.urlopen(f"{base}/api/thumb?camera={cam}", timeout=5).read()
            except OSError:
                pass
        done.wait(0.5)
