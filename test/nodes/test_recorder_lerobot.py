"""lerobot_recorder as a real process, fed by synthetic arm/camera topics and driven by its services."""

from __future__ import annotations

import json
import signal
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from support.proc import ProcGroup

pytest.importorskip("rclpy")  # ROS nodes or messages: skipped where ROS is not installed
from piper_recorder.lerobot.validate import validate_root

from support.recorder_rig import REC, Rig, episodes, recorder_args

pytestmark = pytest.mark.timeout(90)


def episode_files(root: Path, idx: int) -> tuple[Path, dict[str, Path]]:
    info = json.loads((root / "meta" / "info.json").read_text())
    chunk = idx // info["chunks_size"]
    data = root / info["data_path"].format(episode_chunk=chunk, episode_index=idx)
    vids = {
        cam: root
        / info["video_path"].format(episode_chunk=chunk, episode_index=idx, video_key=f"observation.images.{cam}")
        for cam in ("cam_front", "cam_wrist")
    }
    return data, vids


def video_pts(path: Path) -> list[Fraction]:
    """Every decoded frame's presentation time, exactly (pts x time base), in order."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        assert s.time_base == Fraction(1, 90000)
        return sorted(f.pts * s.time_base for f in c.decode(s))


def ok(resp, what):
    assert resp.success, f"{what}: {resp.message}"
    return resp.message


def refused(resp, needle):
    assert not resp.success and needle in resp.message, resp.message


def test_services_wrong_orders_save_discard_delete(ros_domain, tmp_path):
    root = tmp_path / "ds"
    rig = Rig(ros_domain)
    try:
        with ProcGroup(ros_domain.env(), tmp_path / "logs") as g:
            p = g.start(*recorder_args(root, "timestamp_mode:=capture"))
            refused(rig.call(REC, "stop_episode"), "no episode in progress")
            refused(rig.call(REC, "discard_episode"), "no episode in progress")
            refused(rig.call(REC, "delete_last_episode"), "nothing saved")
            ok(rig.call(REC, "start_episode"), "start")
            refused(rig.call(REC, "start_episode"), "already recording episode 0")
            refused(rig.call(REC, "delete_last_episode"), "stop or discard")
            time.sleep(1.5)
            msg = ok(rig.call(REC, "stop_episode"), "stop")
            assert "saved episode 0" in msg
            rig.set_param(REC, "task", "place the cube")  # read again at every start
            ok(rig.call(REC, "start_episode"), "start 2")
            time.sleep(0.5)
            ok(rig.call(REC, "discard_episode"), "discard")
            refused(rig.call(REC, "discard_episode"), "no episode in progress")
            eps = episodes(root)
            assert [e["episode_index"] for e in eps] == [0]
            assert not any(root.glob("data/*/episode_000001.parquet"))
            assert not any(root.glob("videos/*/*/episode_000001.mp4"))
            ev = rig.wait_events(4)
            assert [e["event"] for e in ev] == ["started", "saved", "started", "discarded"]
            assert ev[2]["task"] == ev[3]["task"] == "place the cube"
            saved = ev[1]
            assert saved["rows"] == eps[0]["length"] and saved["task"] == "pick the cube"
            assert saved["end_ns"] > saved["start_ns"] and saved["reason"] == "stop_episode"
            # the saved episode read back with independent readers
            data, vids = episode_files(root, 0)
            t = pq.read_table(data)
            n = t.num_rows
            # every grid tick from the origin to the stop is a row (1.5 s at 30 fps plus service latency)
            assert n == (saved["end_ns"] - saved["start_ns"]) * 30 // 10**9 + 1 and n >= 45, n
            ts = t.column("timestamp").to_numpy()
            assert ts[0] == 0.0 and np.all(np.abs(np.diff(ts) - 1 / 30) < 1e-4)
            q = np.stack(t.column("observation.arm_eef").to_numpy(zero_copy_only=False))
            assert np.allclose(q[:, 3], 1.0)  # wxyz: w first
            a = np.stack(t.column("action.arm_eef").to_numpy(zero_copy_only=False))
            assert np.allclose(a[:, 3:], [0.8, 0.0, 0.0, 0.6], atol=1e-6)
            for cam, path in vids.items():
                pts = video_pts(path)
                # every frame the recorder took is in the video; the publisher itself may lag under load
                assert eps[0]["video_frame_lengths"][cam] == len(pts) == eps[0]["frames_written"][cam]
                assert eps[0]["frames_sent"][cam] == len(pts) and len(pts) >= 0.6 * n, (cam, len(pts), n)
                assert pts[0] == 0.0 and pts[-1] <= float(ts[-1]) + 0.05
            assert eps[0]["frames_rejected_by_encoder"] == {} and eps[0]["tick_delay_ms"]["ticks"] >= n // 2
            assert eps[0]["timestamp_mode"] == "capture" and validate_root(root) == []
            # late messages depend on the machine's load (counted, not asserted); the pre-roll makes row 0 the start
            assert eps[0]["skipped_start_ticks"] == 0 and set(eps[0]["messages_late"]) <= {
                "joint_states",
                "eef_pose",
                "commanded_pose",
                "commanded_gripper",
            }
            # delete the saved episode, then nothing is left to delete
            assert "deleted episode 0" in ok(rig.call(REC, "delete_last_episode"), "delete")
            refused(rig.call(REC, "delete_last_episode"), "nothing saved")
            assert episodes(root) == []
            assert validate_root(root) == []
            sess = [json.loads(x) for x in (root / "meta" / "collection_sessions.jsonl").read_text().splitlines()]
            assert sess[-1]["control"]["backend"] == "emulator" and sess[-1]["arm"]["firmware"] == "S-V1.6-3"
            assert sess[-1]["recording"]["fps"] == 30 and "cam_front" in sess[-1]["cameras"]
            assert p.stop() == 0
    finally:
        rig.close()


def test_stop_episode_at_ends_200_ms_before_its_arrival_with_exact_rows(ros_domain, tmp_path):
    """A stop stamped 200 ms before it is sent (a headset press delivered late) ends there: the saved
    end is the stamp and the rows are the grid ticks from the start to it. ``stop_reach_s`` 0.4: rows wait
    that much more than ``lateness_s``, so 200 ms back is not yet written when the stop arrives, however
    loaded this machine (``assembled_until_ns``).
    """
    from piper_recorder.names import STOP_EPISODE_AT

    root = tmp_path / "ds"
    rig = Rig(ros_domain)
    try:
        with ProcGroup(ros_domain.env(), tmp_path / "logs") as g:
            g.start(*recorder_args(root, "stop_reach_s:=0.4"))
            refused(rig.call_json(REC, STOP_EPISODE_AT, {"end_ns": time.time_ns()}), "no episode in progress")
            ok(rig.call(REC, "start_episode"), "start")
            for bad, needle in (
                ("not json", 'wants a JSON object {"end_ns"'),
                ({"end_ns": 1.5e18}, "end_ns must be a positive integer"),
                ({"end_ns": time.time_ns(), "why": "x"}, "wants a JSON object"),
                ({"end_ns": time.time_ns() - 60 * 10**9}, "a stop for an earlier episode"),
            ):
                refused(rig.call_json(REC, STOP_EPISODE_AT, bad), needle)
            time.sleep(1.5)
            end = time.time_ns() - 200_000_000
            msg = ok(rig.call_json(REC, STOP_EPISODE_AT, {"end_ns": end}), "stop_episode_at")
            assert "saved episode 0" in msg and "after end_ns" not in msg, msg
            saved = next(e for e in rig.wait_events(2) if e["event"] == "saved")
            assert saved["end_ns"] == end and saved["reason"] == "stop_episode"
            n = pq.read_table(episode_files(root, 0)[0]).num_rows
            assert n == (end - saved["start_ns"]) * 30 // 10**9 + 1 == saved["rows"] == episodes(root)[0]["length"]
            assert validate_root(root) == []
    finally:
        rig.close()


def test_nominal_mode_and_sigint_saves_the_episode_in_flight(ros_domain, tmp_path):
    root = tmp_path / "ds"
    rig = Rig(ros_domain)
    try:
        with ProcGroup(ros_domain.env(), tmp_path / "logs") as g:
            p = g.start(*recorder_args(root, "on_shutdown:=save"))  # nominal: the node's default
            ok(rig.call(REC, "start_episode"), "start")
            time.sleep(0.6)
            rig.publish_late_joint_state(0.5)  # far beyond the lateness allowance: counted, grid intact
            rig.paused.set()  # a 0.3 s gap in every stream: repeats are counted
            time.sleep(0.3)
            rig.paused.clear()
            time.sleep(0.6)
            p.signal(signal.SIGINT)
            assert p.popen.wait(30) == 0
            eps = episodes(root)
            assert len(eps) == 1
            n = eps[0]["length"]
            data, vids = episode_files(root, 0)
            table = pq.read_table(data)
            ts = table.column("timestamp").to_numpy()
            joints = np.stack(table.column("observation.arm_joint").to_numpy(zero_copy_only=False))
            assert not np.any(joints == 9.0)  # the late sample never replaced a newer one
            assert len(ts) == n and np.all(np.abs(np.diff(ts) - 1 / 30) < 1e-4)
            for cam, path in vids.items():
                pts = video_pts(path)
                assert len(pts) == n, (cam, len(pts), n)  # nominal: one frame per row
                # both lookup rules, exactly: the frame at or before the row, less than 1e-4 s before it
                assert all(pv <= Fraction(float(t)) < pv + Fraction(1, 10_000) for pv, t in zip(pts, ts))
                assert eps[0]["frames_repeated"][cam] >= 5
            assert eps[0]["timestamp_mode"] == "nominal" and eps[0]["messages_late"]["joint_states"] >= 1
            assert validate_root(root) == []
    finally:
        rig.close()


def test_sigkill_mid_episode_then_restart_keeps_saved_episodes(ros_domain, tmp_path):
    root = tmp_path / "ds"
    rig = Rig(ros_domain)
    rig.watch_status(REC)
    try:
        with ProcGroup(ros_domain.env(), tmp_path / "logs") as g:
            p = g.start(*recorder_args(root))
            ok(rig.call(REC, "start_episode"), "start")
            time.sleep(0.7)
            ok(rig.call(REC, "stop_episode"), "stop")
            saved = episodes(root)
            data0, _ = episode_files(root, 0)
            rows0 = pq.read_table(data0).num_rows
            ok(rig.call(REC, "start_episode"), "start 2")
            time.sleep(0.7)
            p.signal(signal.SIGKILL)
            p.popen.wait(10)
            restart = time.monotonic()
            p2 = g.start(*recorder_args(root, "on_shutdown:=discard"), name="recorder2")
            assert rig.wait_up(REC, restart)["state"] == "idle"
            ok(rig.call(REC, "start_episode"), "start after restart")
            time.sleep(0.5)
            msg = ok(rig.call(REC, "stop_episode"), "stop after restart")
            assert "saved episode 1" in msg
            ok(rig.call(REC, "start_episode"), "start 4")
            time.sleep(0.3)
            assert p2.stop(sig=signal.SIGINT) == 0  # on_shutdown=discard: episode 2 leaves nothing
            eps = episodes(root)
            assert [e["episode_index"] for e in eps] == [0, 1] and eps[0] == saved[0]
            assert pq.read_table(data0).num_rows == rows0
            assert validate_root(root, full=True) == []
    finally:
        rig.close()
