"""The policy node and the dashboard follow the recorders' ``image_topic_pattern``: with a RealSense-style
namespace (``/camera/{cam}/color/image_raw``, what realsense2_camera publishes with camera_namespace
"camera") both receive the camera's frames, and nothing is published where the default pattern points.

Real processes in a leased ROS domain: a sim_camera node put into the ``/camera`` namespace by a ROS
remap, ``piper-dashboard`` (no camera list: it finds the camera through the pattern in the graph, and
subscribes while a client fetches thumbnails) and ``piper-policy`` (the ``hold`` backend on a small
training root with that camera). Each reports the frames it received per camera on its ``~/status``.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from piper_recorder.names import COLOR_TOPIC_PATTERN, camera_topic, image_key

from support.lerobot_fixtures import small_root
from support.proc import ProcGroup

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]
PATTERN = "/camera/{cam}/color/image_raw"
CAM = "cam_front"


def _training_root(path: Path) -> Path:
    root = small_root(path, cameras=(CAM,))
    info = json.loads((root / "meta/info.json").read_text())
    info["features"][image_key(CAM)]["shape"] = [120, 160, 3]  # the camera below publishes 160x120
    (root / "meta/info.json").write_text(json.dumps(info))
    return root


def _dashboard_url(log: Path, timeout: float = 30.0) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
            if "dashboard on http://" in line:
                return line.split("dashboard on ", 1)[1].split()[0].rstrip("/")
        time.sleep(0.2)
    raise AssertionError(f"the dashboard did not log its address:\n{log.read_text(errors='replace')}")


def test_policy_and_dashboard_follow_a_realsense_style_pattern(tmp_path, ros_domain):
    import rclpy
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    root = _training_root(tmp_path / "train")
    pattern = f"image_topic_pattern:={PATTERN}"
    with ProcGroup(ros_domain.env(), tmp_path / "logs") as g:
        g.start(
            "piper-sim-camera",
            "--ros-args",
            "-r",
            f"__node:={CAM}",
            "-r",
            "__ns:=/camera",
            "-p",
            "width:=160",
            "-p",
            "height:=120",
            "-p",
            "fps:=15.0",
            name="camera",
        )
        dash = g.start("piper-dashboard", "--ros-args", "-p", "port:=0", "-p", pattern, name="dashboard")
        g.start("piper-policy", "--ros-args", "-p", "policy:=hold", "-p", f"root:={root}", "-p", pattern, name="policy")
        ros_domain.apply()
        rclpy.init()
        node = rclpy.create_node("pattern_probe")
        last: dict[str, dict[str, Any]] = {}
        lock = threading.Lock()

        def on_status(name: str, msg: Any) -> None:
            with lock:
                last[name] = json.loads(msg.data)

        for name in ("policy", "dashboard"):
            node.create_subscription(String, f"/{name}/status", lambda m, n=name: on_status(n, m), 10)
        default_topic: list[int] = []
        node.create_subscription(Image, camera_topic(COLOR_TOPIC_PATTERN, CAM), lambda _m: default_topic.append(1), 10)
        spin = threading.Thread(target=rclpy.spin, args=(node,), daemon=True)
        spin.start()
        try:
            base = _dashboard_url(dash.log_path)

            def received(name: str) -> int:
                with lock:
                    st = last.get(name) or {}
                return int(((st.get("images_received") or {}).get(CAM) or {}).get("count", 0))

            end = time.monotonic() + 60
            while time.monotonic() < end and not (received("policy") >= 10 and received("dashboard") >= 10):
                try:  # what an open page does: thumbnails, so the dashboard subscribes the images
                    urllib.request.urlopen(f"{base}/api/thumb?camera={CAM}", timeout=5).read()
                except OSError:
                    pass
                time.sleep(0.5)
            state = json.loads(urllib.request.urlopen(f"{base}/api/state", timeout=5).read())
            assert received("policy") >= 10, (last.get("policy"), g.logs())
            assert received("dashboard") >= 10, (last.get("dashboard"), g.logs())
            assert [c["name"] for c in state["cameras"]] == [CAM]  # found through the pattern
            assert default_topic == []  # the default pattern's topic is silent
        finally:
            node.destroy_node()
            rclpy.shutdown()
            spin.join(5)
