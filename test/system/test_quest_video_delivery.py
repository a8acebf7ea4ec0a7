"""Delivery health in real processes: quest_video's ~/status carries, per camera, the frames it received
(count, rates) and the panels it sent against their target; sim_camera's ~/status its published rate;
the HUD the headset decodes carries the resulting health (nothing degraded on a quiet loopback).
"""

from __future__ import annotations

import json
import threading
import time

import pytest

rclpy = pytest.importorskip("rclpy")
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from piper_recorder.process.delivery import link_health  # noqa: E402
from piper_recorder.quest.sim_video import SimVideoServer  # noqa: E402

from support.proc import ProcGroup  # noqa: E402

pytestmark = pytest.mark.timeout(90)


def test_quest_video_and_camera_status_carry_delivery(ros_domain, tmp_path):
    ros_domain.apply()
    headset = SimVideoServer()
    vport = headset.start()
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node("delivery_probe", context=ctx)
    got: dict[str, dict] = {}
    for topic in ("/quest_video/status", "/cam_t/status"):
        node.create_subscription(String, topic, lambda m, tp=topic: got.__setitem__(tp, json.loads(m.data)), 10)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    stop = threading.Event()

    def _spin() -> None:
        while not stop.is_set():
            ex.spin_once(timeout_sec=0.05)

    spin = threading.Thread(target=_spin, daemon=True)
    spin.start()
    try:
        with ProcGroup(ros_domain.env(), tmp_path) as procs:
            procs.start(
                "piper-sim-camera",
                "--ros-args",
                "-r",
                "__node:=cam_t",
                "-p",
                "width:=160",
                "-p",
                "height:=120",
                "-p",
                "fps:=30.0",
                "-p",
                "pose_wait_ms:=0.0",
            )
            procs.start(
                "piper-quest-video",
                "--ros-args",
                "-p",
                f"port:={vport}",
                "-p",
                "cameras:=[cam_t]",
                "-p",
                "fps:=15.0",
                "-p",
                "reconnect_s:=0.2",
            )

            def ready() -> bool:
                st = got.get("/quest_video/status", {})
                rec = (st.get("images_received") or {}).get("cam_t") or {}
                sent = (st.get("panels") or {}).get("cam_t") or {}
                return (
                    bool(rec.get("stamp_fps"))
                    and (sent.get("fps") or 0) > 0
                    and rec["count"] > 150
                    and bool(got.get("/cam_t/status", {}).get("fps"))
                )

            end = time.monotonic() + 60
            while not ready():
                assert time.monotonic() < end, f"no delivery fields: {got}\n{procs.logs()}"
                time.sleep(0.2)
            time.sleep(2.0)  # a full rate window of panels
            st, cam = got["/quest_video/status"], got["/cam_t/status"]
            assert cam["fps"] == pytest.approx(30.0, rel=0.03) and cam["nominal_fps"] == 30.0, cam
            rec = st["images_received"]["cam_t"]
            assert rec["stamp_fps"] == pytest.approx(cam["fps"], rel=0.05), (rec, cam)
            panel = st["panels"]["cam_t"]
            assert panel["target_fps"] == pytest.approx(15.0) and panel["min_fps"] == pytest.approx(12.0)
            assert panel["fps"] == pytest.approx(15.0, rel=0.25), panel
            links = link_health({"quest_video": st}, {"cam_t": cam["fps"]})
            assert {link.kind for link in links} == {"images", "panels"} and all(link.ok for link in links), links
            hud = headset.report()["hud"]
            assert hud is not None and hud["degraded"] == [], hud
    finally:
        stop.set()
        spin.join(2.0)
        node.destroy_node()
        ctx.try_shutdown()
        headset.stop()
