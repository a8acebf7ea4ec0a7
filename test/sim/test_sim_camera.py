"""Sim camera: geometry, rendering and marker finding (pure), and the node's topics, encodings,
stamps and EEF-at-stamp rendering (a real piper-sim-camera process).
"""

from __future__ import annotations

import json
import math
import threading
import time

import numpy as np
import pytest

from piper_recorder.sim.camera import Intrinsics, PinholeCamera
from piper_recorder.sim.faults import FaultPlan
from piper_recorder.sim.history import PoseHistory
from piper_recorder.sim.marker import find_marker
from piper_recorder.sim.scene import FAR_MM, SceneRenderer

FRONT = ([0.9, 0.0, 0.45], [0.25, 0.0, 0.15])


def test_projection_of_optical_axis_and_offsets():
    k = Intrinsics.default(640, 480)
    cam = PinholeCamera.looking_at(k, *FRONT)
    u, v, z = cam.project(FRONT[1])
    assert (u, v) == pytest.approx((k.cx, k.cy), abs=1e-6)
    assert z == pytest.approx(np.linalg.norm(np.subtract(FRONT[1], FRONT[0])))
    # the camera looks along -x (z up), so +y in the base frame is image-right
    u2, _, _ = cam.project([0.25, 0.1, 0.15])
    assert u2 > u
    u3, v3, _ = cam.project([0.25, 0.0, 0.30])  # higher in the world -> smaller v (image up)
    assert v3 < v and u3 == pytest.approx(u, abs=1e-6)
    assert math.isnan(cam.project([2.0, 0.0, 0.45])[0])  # behind the camera


def test_render_marker_and_depth_consistent():
    cam = PinholeCamera.looking_at(Intrinsics.default(320, 240), *FRONT)
    r = SceneRenderer(cam)
    rgb0, depth0 = (a.copy() for a in r.render(None))
    assert find_marker(rgb0) is None
    assert depth0.min() > 0 and depth0.max() <= FAR_MM
    p = np.array([0.3, 0.08, 0.25])
    rgb, depth = r.render(p)
    u, v, z = cam.project(p)
    found = find_marker(rgb)
    assert found is not None and abs(found[0] - u) < 1.0 and abs(found[1] - v) < 1.0
    assert depth[round(v), round(u)] == round(z * 1000)
    assert depth[round(v), round(u)] < depth0[round(v), round(u)]  # marker is in front of the table
    assert r.render(np.array([0.25, 5.0, 0.2]))[0].tolist() == rgb0.tolist()  # out of view: no marker
    stale_rgb, _ = r.render(p, stale=True)  # pose not known at the capture time: yellow, not red
    assert find_marker(stale_rgb) is None
    su, sv = find_marker(stale_rgb, stale=True)
    assert abs(su - u) < 1.0 and abs(sv - v) < 1.0
    assert find_marker(r.render(p)[0], stale=True) is None


def test_a_renderer_draws_into_the_arrays_it_is_given_and_leaves_depth_when_told():
    cam = PinholeCamera.looking_at(Intrinsics.default(320, 240), *FRONT)
    own = SceneRenderer(cam)
    rgb_out, depth_out = np.zeros((240, 320, 3), np.uint8), np.zeros((240, 320), np.uint16)
    given = SceneRenderer(cam, rgb=rgb_out, depth=depth_out)
    p = np.array([0.3, 0.08, 0.25])
    rgb, depth = given.render(p)
    assert rgb is rgb_out and depth is depth_out
    assert rgb.tolist() == own.render(p)[0].tolist() and depth.tolist() == own.render(p)[1].tolist()
    before = depth.copy()
    rgb, depth = given.render(p + np.array([0.0, -0.1, 0.0]), depth=False)  # nobody takes this frame's depth
    assert rgb.tolist() == own.render(p + np.array([0.0, -0.1, 0.0]))[0].tolist()
    assert depth.tolist() == before.tolist()
    with pytest.raises(ValueError, match="rgb buffer"):
        SceneRenderer(cam, rgb=np.zeros((240, 320, 3), np.uint16))
    with pytest.raises(ValueError, match="depth buffer"):
        SceneRenderer(cam, depth=np.zeros((480, 640), np.uint16))


def test_two_arms_are_two_discs_where_the_scene_puts_their_bases():
    from piper_recorder.sim.scene import arm_bases

    bases = arm_bases(["left", "right"])
    assert bases["left"].tolist() == [0.0, 0.3, 0.0] and bases["right"].tolist() == [0.0, -0.3, 0.0]
    cam = PinholeCamera.looking_at(Intrinsics.default(320, 240), [0.9, 0.0, 0.6], [0.2, 0.0, 0.2])
    r = SceneRenderer(cam)
    flange = np.array([0.25, 0.0, 0.25])  # the same flange pose in each arm's own base frame
    rgb, depth = (a.copy() for a in r.render([flange + bases["left"], flange + bases["right"]]))
    for base in bases.values():
        u, v, z = cam.project(flange + base)
        assert tuple(rgb[round(v), round(u)]) == (255, 0, 0) and depth[round(v), round(u)] == round(z * 1000)
    # each disc where its arm is: the left arm (+y) is image-right seen from the front camera
    ul, _, _ = cam.project(flange + bases["left"])
    ur, _, _ = cam.project(flange + bases["right"])
    assert ul > ur + 50
    one = r.render(flange + bases["left"])[0]
    assert tuple(one[round(cam.project(flange + bases["right"])[1]), round(ur)]) != (255, 0, 0)


def test_find_marker_survives_h264():
    av = pytest.importorskip("av")
    import io

    cam = PinholeCamera.looking_at(Intrinsics.default(320, 240), *FRONT)
    r = SceneRenderer(cam)
    buf = io.BytesIO()
    points = [np.array([0.25 + 0.01 * i, 0.1 - 0.02 * i, 0.2 + 0.01 * i]) for i in range(10)]
    with av.open(buf, "w", format="mp4") as out:
        s = out.add_stream("libx264", rate=30)
        s.width, s.height, s.pix_fmt = 320, 240, "yuv420p"
        s.options = {"crf": "23", "preset": "veryfast"}
        for p in points:
            for pkt in s.encode(av.VideoFrame.from_ndarray(r.render(p)[0], format="rgb24")):
                out.mux(pkt)
        for pkt in s.encode():
            out.mux(pkt)
    buf.seek(0)
    with av.open(buf) as inp:
        frames = [f.to_ndarray(format="rgb24") for f in inp.decode(video=0)]
    assert len(frames) == len(points)
    for f, p in zip(frames, points):
        u, v, _ = cam.project(p)
        found = find_marker(f)
        assert found is not None and math.hypot(found[0] - u, found[1] - v) < 1.5


def test_pose_history_interpolates_and_holds_ends():
    h = PoseHistory()
    assert h.at(5) is None
    h.add(100, [0, 0, 0])
    h.add(200, [1, 2, 3])
    h.add(150, [9, 9, 9])  # out of order: ignored
    assert h.at(150).tolist() == [0.5, 1.0, 1.5]
    assert h.at(50).tolist() == [0, 0, 0] and h.at(300).tolist() == [1, 2, 3]


def test_fault_plan():
    f = FaultPlan(pause_at_s=1.0, pause_s=0.5, drop_every_n=3, origin_s=10.0)
    assert not f.paused(10.9) and f.paused(11.0) and f.paused(11.49) and not f.paused(11.5)
    assert [f.dropped(i) for i in range(6)] == [False, False, True, False, False, True]
    assert FaultPlan().jitter_s() == 0.0
    with pytest.raises(ValueError):
        FaultPlan(pause_s=-1)


# ---- the node as a real process ------------------------------------------------------------------


def _eef(t: float) -> np.ndarray:
    """A fast circle so that a one-frame misalignment is many pixels."""
    return np.array([0.28 + 0.08 * math.cos(2.0 * t), 0.10 * math.sin(2.0 * t), 0.22])


def test_node_topics_stamps_and_marker_at_stamp(ros_domain, tmp_path):
    from support.proc import ProcGroup

    ros_domain.apply()
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import CameraInfo, Image

    from piper_recorder.assembly.messages import stamp_to_ns
    from piper_recorder.nodes.plumbing.stamps import ns_to_stamp

    with ProcGroup(ros_domain.env(), tmp_path) as procs:
        cam_proc = procs.start(
            "piper-sim-camera",
            "--ros-args",
            "-r",
            "__node:=cam_t",
            "-p",
            "width:=320",
            "-p",
            "height:=240",
            "-p",
            "fps:=30.0",
            "-p",
            "pose_wait_ms:=1000.0",
        )
        ctx = rclpy.Context()
        rclpy.init(context=ctx)
        node = rclpy.create_node("probe", context=ctx)
        got: dict[str, list] = {"color": [], "depth": [], "info": []}
        node.create_subscription(Image, "/cam_t/color/image_raw", lambda m: got["color"].append(m), 50)
        node.create_subscription(Image, "/cam_t/aligned_depth_to_color/image_raw", lambda m: got["depth"].append(m), 50)
        node.create_subscription(CameraInfo, "/cam_t/color/camera_info", lambda m: got["info"].append(m), 50)
        pub = node.create_publisher(PoseStamped, "/arm/eef_pose", 50)
        ex = SingleThreadedExecutor(context=ctx)
        ex.add_node(node)
        t0 = time.time()
        stop = threading.Event()

        def publish_poses():  # 200 Hz, stamped with the time the pose is "measured"
            while not stop.is_set():
                now = time.time_ns()
                p = _eef(now / 1e9 - t0)
                msg = PoseStamped()
                msg.header.stamp = ns_to_stamp(now)
                msg.header.frame_id = "arm_base"
                msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = (float(x) for x in p)
                msg.pose.orientation.w = 1.0
                pub.publish(msg)
                time.sleep(0.005)

        th = threading.Thread(target=publish_poses, daemon=True)
        th.start()
        try:
            deadline = time.time() + 30
            while time.time() < deadline and len(got["color"]) < 45:
                ex.spin_once(timeout_sec=0.05)
                assert cam_proc.alive(), procs.logs()
        finally:
            stop.set()
            th.join()
            node.destroy_node()
            rclpy.shutdown(context=ctx)
        assert len(got["color"]) >= 45, procs.logs()
        color = got["color"][10:]  # skip frames rendered before the pose stream settled
        assert all(m.encoding == "rgb8" and m.width == 320 and m.height == 240 and m.step == 960 for m in color)
        depth_by_stamp = {stamp_to_ns(m.header.stamp): m for m in got["depth"]}
        assert all(m.encoding == "16UC1" and m.step == 640 for m in got["depth"])
        info = got["info"][-1]
        k = Intrinsics.default(320, 240)
        assert list(info.k) == pytest.approx(k.k_matrix())
        cam = PinholeCamera.looking_at(k, *FRONT)
        gaps = np.diff([stamp_to_ns(m.header.stamp) for m in color]) / 1e9
        # stamps lie on a steady 1/fps grid: gaps are whole periods (several when a loaded machine stalls)
        periods = gaps * 30
        assert np.all(np.abs(periods - np.round(periods)) < 0.05) and np.all(periods > 0.5), gaps
        errors, shifted = [], []
        paired = [m for m in color if stamp_to_ns(m.header.stamp) in depth_by_stamp]  # same capture, same stamp
        assert len(paired) >= len(color) - 3  # the last depth images may still be in flight
        for m in paired:
            s = stamp_to_ns(m.header.stamp)
            rgb = np.frombuffer(bytes(m.data), np.uint8).reshape(240, 320, 3)
            u, v = find_marker(rgb)
            pu, pv, z = cam.project(_eef(s / 1e9 - t0))
            errors.append(math.hypot(u - pu, v - pv))
            su, sv, _ = cam.project(_eef(s / 1e9 - t0 - 1 / 30))
            shifted.append(math.hypot(u - su, v - sv))
            d = np.frombuffer(bytes(depth_by_stamp[s].data), np.uint16).reshape(240, 320)
            assert abs(int(d[round(v), round(u)]) - z * 1000) < 15  # marker depth = optical depth (mm)
        # the marker is the EEF at the frame stamp, far better than one frame off
        assert np.median(errors) < 1.5 and max(errors) < 3.0, (errors, procs.logs())
        assert np.median(shifted) > 3 * max(np.median(errors), 0.5)


def test_node_publishes_with_the_qos_the_robot_launch_gives_realsense(ros_domain):
    """sim_camera's writers are a real camera's: the profiles the launch sets on realsense2_camera (its images
    reliable keep-last 10, the aligned depth with the colour stream's QoS as the driver does), so what the
    graph tests measure (test_image_delivery) holds for the robot.
    """
    ros_domain.apply()
    import rclpy
    from rclpy.qos import QoSPresetProfiles, ReliabilityPolicy

    from piper_recorder.graph.realsense import REALSENSE_QOS
    from piper_recorder.nodes.sim_camera import SimCamera

    rclpy.init(args=["--ros-args", "-r", "__node:=cam_q", "-p", "width:=64", "-p", "height:=48"])
    try:
        node = SimCamera()
        try:
            for pub, key in (
                (node.pub_color, "color_qos"),
                (node.pub_depth, "color_qos"),
                (node.pub_color_info, "color_info_qos"),
                (node.pub_depth_info, "color_info_qos"),
            ):
                assert pub.qos_profile == QoSPresetProfiles[REALSENSE_QOS[key]].value, (pub.topic_name, key)
            assert node.pub_color.qos_profile.depth == 10
            assert node.pub_color.qos_profile.reliability == ReliabilityPolicy.RELIABLE
        finally:
            node.on_shutdown()
            node.destroy_node()
    finally:
        rclpy.shutdown()


def test_a_stalled_capture_thread_skips_the_slots_it_missed_and_says_so(ros_domain, monkeypatch, capfd):
    """A capture thread that wakes whole frame periods late (a stall) skips the slots it missed, never bursts
    them out, counts them and logs how late it woke.
    """
    ros_domain.apply()
    import rclpy

    from piper_recorder.nodes.sim_camera import SimCamera

    from support.waiting import wait_for

    publish = SimCamera._publish_frame
    stamps: list[int] = []

    def stalling(self, stamp: int) -> None:
        stamps.append(stamp)
        if len(stamps) == 3:
            time.sleep(0.25)  # 7.5 periods at 30 fps
        publish(self, stamp)

    monkeypatch.setattr(SimCamera, "_publish_frame", stalling)
    rclpy.init(args=["--ros-args", "-r", "__node:=cam_s", "-p", "width:=64", "-p", "height:=48"])
    try:
        node = SimCamera()
        try:
            wait_for(lambda: len(stamps) >= 8, 10, "frames after the stall")
        finally:
            node.on_shutdown()
            node.destroy_node()
    finally:
        rclpy.shutdown()
    periods = np.round(np.diff(stamps) * 30 / 1e9).astype(int)
    assert 5 <= node.late_skipped <= 8, node.late_skipped
    assert periods[2] == node.late_skipped + 1 and all(periods[3:] == 1), periods  # the gap, then no burst
    err = capfd.readouterr().err
    assert err.count("capture thread woke") == 1 and f"skipped {node.late_skipped} frame slot(s)" in err, err


def test_camera_process_runs_each_camera_under_its_own_name_and_section(ros_domain, tmp_path):
    """piper-sim-cameras (the simulated graph's cameras, one process): each camera is a node under its own
    name, with its own parameter section (size, serial), topics and frames; the process's ``arms`` reach every
    camera (each subscribes to both arms' poses); a stop ends them all, each logging its counters.
    """
    from support.proc import ProcGroup
    from support.waiting import wait_for

    ros_domain.apply()
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    params = tmp_path / "params.yaml"
    params.write_text(
        "sim_cameras:\n  ros__parameters:\n    cameras: [cam_a, cam_b]\n    arms: [left, right]\n"
        "cam_a:\n  ros__parameters:\n    width: 160\n    height: 120\n    serial: serial-a\n"
        "cam_b:\n  ros__parameters:\n    width: 320\n    height: 240\n"
    )
    with ProcGroup(ros_domain.env(), tmp_path / "logs") as procs:
        host = procs.start("piper-sim-cameras", "--ros-args", "--params-file", str(params))
        ctx = rclpy.Context()
        rclpy.init(context=ctx)
        node = rclpy.create_node("probe", context=ctx)
        frames: dict[str, list[Image]] = {"cam_a": [], "cam_b": []}
        status: dict[str, str] = {}
        for cam, got in frames.items():
            node.create_subscription(Image, f"/{cam}/color/image_raw", got.append, 10)
            node.create_subscription(String, f"/{cam}/status", lambda m, c=cam: status.__setitem__(c, m.data), 10)
        ex = SingleThreadedExecutor(context=ctx)
        ex.add_node(node)

        def spun(cond):
            def check():
                ex.spin_once(timeout_sec=0.02)
                assert host.alive(), procs.logs()
                return cond()

            return check

        try:
            wait_for(spun(lambda: all(len(f) >= 10 for f in frames.values())), 30, "both cameras' frames", procs.logs)
            names = {n for n, _ in node.get_node_names_and_namespaces()}
            assert {"sim_cameras", "cam_a", "cam_b"} <= names, names
            for arm in ("left", "right"):  # each camera takes each arm's flange pose
                readers = {i.node_name for i in node.get_subscriptions_info_by_topic(f"/{arm}/arm/eef_pose")}
                assert readers == {"cam_a_inputs", "cam_b_inputs"}, (arm, readers)
            wait_for(spun(lambda: len(status) == 2), 10, "both cameras' status", procs.logs)
        finally:
            node.destroy_node()
            rclpy.shutdown(context=ctx)
        a, b = frames["cam_a"][-1], frames["cam_b"][-1]
        assert (a.width, a.height, a.header.frame_id) == (160, 120, "cam_a_color_optical_frame")
        assert (b.width, b.height, b.header.frame_id) == (320, 240, "cam_b_color_optical_frame")
        assert json.loads(status["cam_a"])["camera"] == "cam_a" and json.loads(status["cam_b"])["camera"] == "cam_b"
        assert host.stop() == 0, procs.logs()
        log = host.output()
        assert "[cam_a]: published" in log and "[cam_b]: published" in log, log
        assert "sim camera cam_a (serial-a) 160x120" in log, log


def test_camera_process_with_a_bad_camera_section_stops_the_cameras_it_started_and_says_why(ros_domain, tmp_path):
    """A later camera's bad section ends the process with exit 2 and that camera's problem as its last line;
    the camera already running is stopped (its summary) and no traceback is printed.
    """
    import subprocess
    import sys
    from pathlib import Path

    exe = Path(sys.executable).parent / "piper-sim-cameras"
    args = ["--ros-args", "-p", "cameras:=[cam_a, cam_b]", "-p", "cam_b:width:=-1"]
    p = subprocess.run([str(exe), *args], env=ros_domain.env(), capture_output=True, text=True, timeout=60)
    out = p.stdout + p.stderr
    assert p.returncode == 2 and "Traceback" not in out, out
    assert out.strip().splitlines()[-1] == "piper-sim-cameras: error: cam_b: width/height out of range: -1x480", out
    assert "[cam_a]: published" in out, out  # cam_a had started: stopped, with its counters
