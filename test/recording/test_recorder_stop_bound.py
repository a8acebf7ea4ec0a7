"""A stop always answers (no ROS): a recorder whose writer cannot keep up still ends the episode at its
stop time, within lateness + the writer's lag bound + the save, with the shed frames counted.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from piper_recorder.assembly import AssemblyConfig
from piper_recorder.recording.controller import EpisodeController
from piper_recorder.recording.targets import LeRobotTarget
from piper_recorder.recording.worker import QueuedSink, WriterWorker

from support.recorder_controller import MS, FakeLeRobotWriter

pytestmark = pytest.mark.slow  # a slowed writer measured against its wall-clock bound


class SlowFrames(FakeLeRobotWriter):
    """A writer that takes ``frame_s`` per frame: 10x slower than 30 fps, like a starved encoder."""

    def __init__(self, frame_s: float):
        super().__init__()
        self.frame_s = frame_s

    def add_frame(self, cam, rgb, t):
        time.sleep(self.frame_s)
        return super().add_frame(cam, rgb, t)


def run_live(c: EpisodeController, seconds: float, stop_early_s: float = 0.0) -> int:
    """Feed 100 Hz inputs and 30 fps frames in real time while a tick thread runs; returns the start stamp."""
    done = threading.Event()

    def ticker():
        while not done.is_set():
            c.tick(time.time_ns())
            time.sleep(0.005)

    t = threading.Thread(target=ticker, daemon=True)
    t.start()
    t0 = time.time_ns()
    assert c.start("pick", time.time_ns).ok
    i = 0
    while time.time_ns() - t0 < seconds * 1e9:
        s = time.time_ns()
        c.add_joint_state(s, [0.1] * 6 + [0.04])
        c.add_eef_pose(s, (0, 0, 0), (0, 0, 0, 1))
        c.add_commanded_pose(s, (0, 0, 0), (0, 0, 0, 1))
        c.add_commanded_gripper(s, 0.02)
        if i % 3 == 0:
            c.add_frame("cam_front", s, np.zeros((4, 4, 3), np.uint8))
        i += 1
        time.sleep(0.01)
    done.set()
    t.join()
    return t0


def test_a_writer_that_cannot_keep_up_still_answers_stop_within_its_bound():
    w = SlowFrames(frame_s=0.33)  # ~3 frames/s written of 30 arriving
    lateness, lag = 0.2, 1.0
    c = EpisodeController(
        LeRobotTarget(w),
        AssemblyConfig(fps=30, cameras=("cam_front",), lateness_s=lateness),
        recorder="lerobot_recorder",
        max_episode_s=0,
        publish_event=lambda e: None,
        session_record=dict,
        log=lambda m: None,
        max_lag_s=lag,
    )
    run_live(c, 4.0)
    st = c.status(time.time_ns())
    assert st["falling_behind"] and st["writer_lag_s"] > 0.5 * lag, st  # it says so at once
    asked = time.monotonic()
    end = time.time_ns()
    ans = c.stop(end)
    answered = time.monotonic() - asked
    assert ans.ok, ans.message
    # lateness, then at most ~lag of queued work plus one frame being written, then the save
    assert answered < lateness + lag + 2 * w.frame_s + 0.5, answered
    ep = w.episodes[0]
    start_ns = ans.event["start_ns"] or 0
    assert abs(len(ep["rows"]) - round((end - start_ns) / 1e9 * 30)) <= 1  # ends at the stop, not later
    shed = ep["counters"]["frames_dropped_writer_behind"]["cam_front"]
    written = len(ep["frames"]["cam_front"])
    assert shed > 50 and written + shed >= len(ep["rows"]) - 2  # every frame written or counted
    c.shutdown(save=False)


def test_the_old_unbounded_writer_would_not_have_answered():
    """The same flood without the lag bound: the save waits for every queued frame (what stop did)."""
    w = SlowFrames(frame_s=0.05)
    worker = WriterWorker("t")
    sink = QueuedSink(_Frames(w), worker, max_lag_s=float("inf"))
    for i in range(60):  # 2 s of frames at 30 fps, posted at once
        sink.frame("cam_front", np.zeros((1, 1, 3), np.uint8), i / 30)
    t = time.monotonic()
    worker.call(lambda: None)
    assert time.monotonic() - t > 60 * 0.05 * 0.9  # ~3 s behind: grows without bound under a flood
    bounded = QueuedSink(_Frames(w), worker, max_lag_s=0.2)
    for i in range(60):
        bounded.frame("cam_front", np.zeros((1, 1, 3), np.uint8), i / 30)
    t = time.monotonic()
    worker.call(lambda: None)
    assert time.monotonic() - t < 0.2 + 2 * 0.05 + 0.1 and bounded.behind["cam_front"] > 50
    worker.stop()


class _Frames:
    def __init__(self, w):
        self.w = w

    def frame(self, camera, frame, t):
        time.sleep(self.w.frame_s)


def test_rows_end_at_a_requested_stop_even_when_the_stop_runs_late():
    """request_stop (the service's arrival) caps the rows before the stop itself gets the service lock."""
    w = FakeLeRobotWriter()
    c = EpisodeController(
        LeRobotTarget(w),
        AssemblyConfig(fps=30, cameras=("cam_front",), lateness_s=0.0),
        recorder="lerobot_recorder",
        max_episode_s=0,
        publish_event=lambda e: None,
        session_record=dict,
        log=lambda m: None,
    )
    t0 = time.time_ns() - 10_000 * MS
    assert c.start("pick", lambda: t0).ok
    for i in range(1000):  # 10 s of inputs at 100 Hz
        s = t0 + i * 10 * MS
        c.add_joint_state(s, [0.1] * 6 + [0.04])
        c.add_eef_pose(s, (0, 0, 0), (0, 0, 0, 1))
        c.add_commanded_pose(s, (0, 0, 0), (0, 0, 0, 1))
        c.add_commanded_gripper(s, 0.02)
        if i % 3 == 0:
            c.add_frame("cam_front", s, np.zeros((4, 4, 3), np.uint8))
        if i == 400:
            c.request_stop(s)  # the stop arrived at 4 s; the ticks after it must not grow the episode
        c.tick(s)
    ans = c.stop(t0 + 9_990 * MS)  # handled at ~10 s
    assert ans.ok and w.episodes[0]["counters"]["rows"] == 121 == len(w.episodes[0]["rows"])  # 0..4 s
