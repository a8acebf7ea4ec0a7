"""Episode controller (no ROS): every wrong order refused, saves/discards whole, auto-stop, shutdown."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from piper_recorder.recording.controller import EpisodeController
from piper_recorder.recording.targets import LeRobotTarget, RgbdTarget

from support.recorder_controller import MS, Clock, FakeLeRobotWriter, feed, make


def test_wrong_orders_are_refused_and_change_nothing():
    w = FakeLeRobotWriter()
    c, events = make(LeRobotTarget(w))
    clock = Clock()
    for ans in (c.stop(clock), c.discard(), c.delete_last()):
        assert not ans.ok and ("no episode in progress" in ans.message or "nothing saved" in ans.message)
    assert not c.start("  ", clock).ok and "task" in c.start("", clock).message
    assert events == [] and w.sessions == []
    assert c.start("pick", clock).ok
    again = c.start("pick", clock)
    assert not again.ok and "already recording episode 0" in again.message
    assert not c.delete_last().ok
    feed(c, clock.t - 20 * MS, 0.5)
    clock.t += 500 * MS
    ans = c.stop(clock)
    assert ans.ok and "saved episode 0" in ans.message, ans.message
    assert len(w.sessions) == 1 and len(w.episodes) == 1
    ep = w.episodes[0]
    assert len(ep["rows"]) == 16 == ans.event["rows"]
    assert np.allclose(np.diff(ep["rows"]), 1 / 30, atol=1e-4)
    assert ep["counters"]["tick_delay_ms"]["ticks"] >= 1 and ep["counters"]["tick_delay_ms"]["max"] < 20
    assert ep["counters"]["rows"] == 16 and ep["counters"]["frames_written"] == {
        "cam_front": len(ep["frames"]["cam_front"])
    }
    assert [e["event"] for e in events] == ["started", "saved"]
    assert events[1]["start_ns"] == events[0]["start_ns"] and events[1]["end_ns"] == clock.t
    # discard, then delete the saved one, then nothing left to delete
    assert c.start("place", clock).ok and c.discard().ok
    assert len(w.episodes) == 1 and w.current is None
    d = c.delete_last()
    assert d.ok and d.event["episode_index"] == 0 and d.event["task"] == "pick" and w.episodes == []
    assert not c.delete_last().ok
    assert [e["event"] for e in events] == ["started", "saved", "started", "discarded", "deleted"]
    assert c.start("again", clock).ok and len(w.sessions) == 1  # one session record per process


def test_empty_episode_is_discarded_with_the_missing_input_named():
    w = FakeLeRobotWriter()
    c, events = make(LeRobotTarget(w))
    clock = Clock()
    assert c.start("pick", clock).ok
    c.add_joint_state(clock.t, [0.0] * 7)
    clock.t += 200 * MS
    ans = c.stop(clock)
    assert not ans.ok and "empty" in ans.message and "commanded_pose" in ans.message and "cam_front" in ans.message
    assert w.episodes == [] and w.current is None and events[-1]["event"] == "discarded"
    assert c.state == "idle" and c.start("pick", clock).ok


def test_writer_error_discards_the_whole_episode():
    w = FakeLeRobotWriter(fail_rows=True)
    c, events = make(LeRobotTarget(w))
    clock = Clock()
    assert c.start("pick", clock).ok
    feed(c, clock.t, 0.3)
    clock.t += 300 * MS
    ans = c.stop(clock)
    assert not ans.ok and "NaN" in ans.message
    assert w.episodes == [] and w.current is None and events[-1]["event"] == "discarded"


def test_preroll_makes_row_zero_the_start():
    w = FakeLeRobotWriter()
    c, _events = make(LeRobotTarget(w))
    clock = Clock()
    feed(c, clock.t - 100 * MS, 0.1)  # samples before start: the newest seeds the episode
    assert c.start("pick", clock).ok
    clock.t += 40 * MS
    assert c.stop(clock).ok
    assert w.episodes[0]["counters"]["skipped_start_ticks"] == 0 and len(w.episodes[0]["rows"]) == 2


def test_the_episode_starts_when_asked_not_when_the_writer_has_opened_its_files():
    """The writer's session and episode start take their time (files, a session record); meanwhile the
    inputs keep arriving into the buffers, so the episode starts at the request, wherever it is aimed.
    """
    clock = Clock()

    class SlowWriter(FakeLeRobotWriter):
        def begin_session(self, record):
            clock.t += 30 * MS
            super().begin_session(record)

        def start_episode(self, task):
            clock.t += 20 * MS
            return super().start_episode(task)

    w = SlowWriter()
    c, events = make(LeRobotTarget(w))
    asked = clock.t
    feed(c, asked - 100 * MS, 0.2)
    assert c.start("pick", clock).ok
    assert [e["start_ns"] for e in events if e["event"] == "started"] == [asked]
    clock.t = asked + 100 * MS
    assert c.stop(clock).ok
    assert w.episodes[0]["rows"] == pytest.approx([0.0, 1 / 30, 2 / 30, 3 / 30])  # rows from the request on


class FakeRgbdWriter:
    def __init__(self):
        self.log, self.ended, self.discarded = [], [], 0

    def start_episode(self, seed=None, meta=None):
        assert "provenance" in meta
        self.log = []
        return len(self.ended)

    def add_observation(self, rgb, depth, state):
        self.log.append("obs")

    def add_transition(self, action, reward, terminal=False, timeout=False):
        self.log.append(("tr", terminal, timeout))

    def end_episode(self, success=None, meta=None):
        self.ended.append((list(self.log), success))
        return {"transitions": self.log.count("obs") - 1}

    def discard_episode(self):
        self.discarded += 1

    def close(self):
        pass


def test_rgbd_max_episode_auto_stop_flags_timeout_and_stop_flags_terminal():
    w = FakeRgbdWriter()
    c, events = make(RgbdTarget(w, "cam_front"), max_s=0.5)
    t0 = time.time_ns()
    assert c.start("", lambda: t0).ok
    feed(c, t0 - 30 * MS, 0.7, depth=True)  # ticks past 0.5 s: the controller stops itself
    assert c.state == "idle" and events[-1]["event"] == "saved" and events[-1]["reason"] == "max_episode_s"
    assert events[-1]["end_ns"] == t0 + 500 * MS and events[-1]["rows"] == 16
    log, success = w.ended[0]
    assert log.count("obs") == 16 and log[-2] == ("tr", False, True) and success is None
    assert c.start("", lambda: t0 + 10**9).ok
    feed(c, t0 + 10**9 - 30 * MS, 0.2, depth=True)
    assert c.stop(lambda: t0 + 10**9 + 150 * MS).ok
    log, success = w.ended[1]
    assert log[-2] == ("tr", True, False) and success is None  # a terminal stop, unlabelled: no success claim
    d = c.delete_last()
    assert not d.ok and "cannot delete" in d.message


@pytest.mark.parametrize("save", [True, False])
def test_shutdown_saves_or_discards_then_closes(save):
    w = FakeLeRobotWriter()
    c, events = make(LeRobotTarget(w))
    clock = Clock()
    assert c.start("pick", clock).ok
    feed(c, clock.t - 20 * MS, 0.3)
    ans = c.shutdown(save=save)
    assert w.closed and c.state == "closed"
    assert len(w.episodes) == (1 if save else 0) and events[-1]["event"] == ("saved" if save else "discarded")
    assert events[-1]["reason"] == "shutdown" and ans.event is events[-1]
    assert not c.start("pick", clock).ok and c.shutdown(save=save).ok


def test_writer_calls_stay_on_one_thread_while_inputs_come_from_many():
    w = FakeLeRobotWriter()
    c, _ = make(LeRobotTarget(w), cams=("a", "b"))
    clock = Clock()
    assert c.start("pick", clock).ok
    t0 = clock.t - 20 * MS
    threads = [threading.Thread(target=feed, args=(c, t0, 0.5, ("a", "b"))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    clock.t = t0 + 500 * MS
    assert c.stop(clock).ok
    assert w.writer_thread == "lerobot_recorder-writer"


def test_refused_session_leaves_recorder_idle_and_retries():
    class Refusing(FakeLeRobotWriter):
        def begin_session(self, record):
            raise RuntimeError("binding keys changed since the previous session (control.backend)")

    w = Refusing()
    c, events = make(LeRobotTarget(w))
    ans = c.start("pick", Clock())
    assert not ans.ok and "binding keys changed" in ans.message
    assert c.state == "idle" and w.current is None and events == []
    assert not c.start("pick", Clock()).ok  # asked again at the next start, still refused


def test_nominal_encoder_drops_show_as_frames_written_below_rows(tmp_path, monkeypatch):
    """An encoder stalled longer than encoder_max_block_s: frames are dropped on the writer thread and
    episodes.jsonl shows it (frames_written < length, each drop counted).
    """
    import dataclasses
    import json

    from piper_recorder.lerobot.writer import LeRobotWriter
    from piper_recorder.lerobot.writer.video_encoder import VideoEncoder
    from piper_recorder.recording.config import LeRobotRecorderConfig, lerobot_writer_config, session_record

    release = threading.Event()
    run = VideoEncoder._run
    monkeypatch.setattr(VideoEncoder, "_run", lambda self: (release.wait(30), run(self)))

    class ReleaseAtSave(LeRobotTarget):
        def save_episode(self, counters, timeout):
            release.set()  # the writer thread has offered every frame of the episode by now
            return super().save_episode(counters, timeout)

    cfg = LeRobotRecorderConfig(
        root=str(tmp_path / "ds"),
        cameras=["cam_front"],
        camera_height=16,
        camera_width=16,
        timestamp_mode="nominal",
        lateness_s=0.0,
        encoder_max_block_s=0.02,
    )
    wcfg = lerobot_writer_config(cfg)
    assert wcfg.video.max_block_s == 0.02
    wcfg = dataclasses.replace(wcfg, video=dataclasses.replace(wcfg.video, queue_size=2))
    c = EpisodeController(
        ReleaseAtSave(LeRobotWriter(cfg.root, wcfg)),
        cfg.assembly(),
        recorder="lerobot_recorder",
        max_episode_s=0,
        publish_event=lambda e: None,
        session_record=lambda: session_record(cfg, "lerobot_recorder", None, None),
        log=lambda m: None,
    )
    clock = Clock()
    try:
        assert c.start("stall", clock).ok
        for i in range(50):
            s = clock.t + i * 10 * MS
            c.add_joint_state(s, [0.1] * 6 + [0.04])
            c.add_eef_pose(s, (0, 0, 0), (0, 0, 0, 1))
            c.add_commanded_pose(s, (0, 0, 0), (0, 0, 0, 1))
            c.add_commanded_gripper(s, 0.02)
            if i % 3 == 0:
                c.add_frame("cam_front", s, np.full((16, 16, 3), i, np.uint8))
            c.tick(s)
        assert c.stop(clock.t + 490 * MS).ok
    finally:
        c.shutdown(save=False)
    (ep,) = [json.loads(x) for x in (tmp_path / "ds/meta/episodes.jsonl").read_text().splitlines()]
    rows = ep["length"]
    assert rows == ep["rows"] == 15 and ep["timestamp_mode"] == "nominal"
    assert ep["frames_written"] == {"cam_front": 2} == ep["video_frame_lengths"]  # what the stalled queue held
    assert ep["frames_rejected_by_encoder"] == {"cam_front": rows - 2}
    assert ep["video_dropped_frames"]["cam_front"]["queue_full"] == rows - 2


def test_full_disk_at_save_keeps_the_episode_and_a_later_stop_saves_it(tmp_path, monkeypatch):
    """ENOSPC while saving: the answer says so, nothing is discarded, start is refused until the episode is
    dealt with, and stop_episode once space is back saves it whole (validated by the independent checker).
    """
    import errno
    import json

    from piper_recorder.lerobot.format import fsutil
    from piper_recorder.lerobot.validate import validate_root
    from piper_recorder.lerobot.writer import LeRobotWriter
    from piper_recorder.recording.config import LeRobotRecorderConfig, lerobot_writer_config, session_record

    cfg = LeRobotRecorderConfig(
        root=str(tmp_path / "ds"), cameras=["cam_front"], camera_height=16, camera_width=16, lateness_s=0.0
    )
    events = []
    c = EpisodeController(
        LeRobotTarget(LeRobotWriter(cfg.root, lerobot_writer_config(cfg))),
        cfg.assembly(),
        recorder="lerobot_recorder",
        max_episode_s=0,
        publish_event=events.append,
        session_record=lambda: session_record(cfg, "lerobot_recorder", None, None),
        log=lambda m: None,
    )
    real = fsutil.write_tmp

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device (injected)")

    clock = Clock()
    try:
        assert c.start("pick", clock).ok
        feed(c, clock.t, 0.5, size=(16, 16))
        monkeypatch.setattr(fsutil, "write_tmp", full)
        ans = c.stop(clock.t + 490 * MS)
        assert not ans.ok and "No space left" in ans.message and "stop_episode" in ans.message, ans.message
        assert c.state == "save_failed" and events[-1]["event"] == "save_failed"
        assert any((tmp_path / "ds/.staging").iterdir()), "the staged episode is kept"
        refused = c.start("next", clock)
        assert not refused.ok and "episode 0 is not saved" in refused.message
        again = c.stop(clock.t + 490 * MS)  # still full: still kept
        assert not again.ok and c.state == "save_failed"
        monkeypatch.setattr(fsutil, "write_tmp", real)
        saved = c.stop(clock.t + 490 * MS)
        assert saved.ok and "saved episode 0" in saved.message, saved.message
        assert c.state == "idle" and events[-1]["event"] == "saved" and events[-1]["rows"] == 15
        assert c.start("next", clock).ok and c.discard().ok
    finally:
        c.shutdown(save=False)
    assert validate_root(tmp_path / "ds", full=True) == []
    (ep,) = [json.loads(x) for x in (tmp_path / "ds/meta/episodes.jsonl").read_bytes().split(b"\n") if x]
    assert ep["episode_index"] == 0 and ep["length"] == 15 and ep["tasks"] == ["pick"]


def test_failed_save_can_be_discarded_and_shutdown_drops_it():
    from piper_recorder.lerobot.format.errors import SaveFailedError

    class FullDisk(FakeLeRobotWriter):
        recording = True

        def save_episode(self, counters=None, annotate=None):
            raise SaveFailedError("saving episode 0 failed ([Errno 28] No space left on device)")

    w = FullDisk()
    c, events = make(LeRobotTarget(w))
    clock = Clock()
    assert c.start("pick", clock).ok
    feed(c, clock.t, 0.3)
    assert not c.stop(clock.t + 300 * MS).ok and c.state == "save_failed" and w.current is not None
    d = c.discard()
    assert d.ok and w.current is None and c.state == "idle" and events[-1]["event"] == "discarded"
    assert c.start("pick", clock).ok
    feed(c, clock.t, 0.3)
    assert not c.stop(clock.t + 300 * MS).ok
    ans = c.shutdown(save=True)  # one more try, then the episode is dropped and the answer says so
    assert not ans.ok and "No space left" in ans.message and w.current is None and w.closed


def test_rgbd_save_failure_is_reported_once_without_a_failed_discard():
    """The RGB-D writer rolls a failed commit back (its journal truncates the episode's frames): the answer
    says the episode is lost, with no misleading "discard failed", and the next episode can start.
    """

    class FullDisk(FakeRgbdWriter):
        recording = False  # what RgbdWriter reports after end_episode rolled back

        def end_episode(self, success=None, meta=None):
            raise OSError(28, "No space left on device")

        def discard_episode(self):
            raise AssertionError("nothing to discard: the writer already rolled the episode back")

    w = FullDisk()
    c, events = make(RgbdTarget(w, "cam_front"))
    t0 = time.time_ns()
    assert c.start("", lambda: t0).ok
    feed(c, t0 - 30 * MS, 0.3, depth=True)
    ans = c.stop(lambda: t0 + 250 * MS)
    assert not ans.ok and "No space left" in ans.message and "lost" in ans.message
    assert "discard failed" not in ans.message and c.state == "idle" and events[-1]["event"] == "discarded"
    assert c.start("", lambda: t0 + 10**9).ok


class ObsLog(FakeRgbdWriter):
    """The RGB-D fake that keeps which capture each observation holds (its pixel value)."""

    def add_observation(self, rgb, depth, state):
        self.log.append(int(rgb[0, 0, 0]))


def test_row_zero_frame_depends_on_stamps_not_on_what_arrived_before_the_start():
    """The bag converter sees a frame arrive after the start request that the live recorder got before it
    (or the other way round): both must pick the same frames. A camera at the row rate captures ~2 ms
    before each row with +-10 ms of jitter, so the locked slot is a period back and row 0's frame is the
    capture ~35 ms before the start; the newest capture before the start (~2 ms) is row 1's. Before, a
    recorder that held the newest one before the start took it for row 0 (what it had) and repeated it.
    """
    rng = np.random.default_rng(7)
    period = 1e9 / 30
    t0 = time.time_ns() // 1_000_000_000 * 1_000_000_000
    stamps = [round(t0 + k * period - 2 * MS + (rng.uniform(-10, 10) * MS if k else 0)) for k in range(-75, 31)]
    obs = []
    for arrived_before_start in (stamps[74], stamps[75]):  # the -2 ms capture (k = 0) arrives after / before the start
        w = ObsLog()
        c, _ = make(RgbdTarget(w, "cam_front"))

        def feed_until(t_ns, since=-1):
            for i, s in enumerate(stamps):
                if since < s <= t_ns:
                    c.add_frame("cam_front", s, np.full((4, 4, 3), i % 250, np.uint8), np.zeros((4, 4), np.uint16))
            for s in range(max(since + 1, t0 - 500 * MS), t_ns + 1, 10 * MS):
                c.add_joint_state(s, [0.1] * 6 + [0.04])
                c.add_eef_pose(s, (0, 0, 0), (0, 0, 0, 1))
                c.add_commanded_pose(s, (0, 0, 0), (0, 0, 0, 1))
                c.add_commanded_gripper(s, 0.02)

        feed_until(arrived_before_start)
        assert c.start("", lambda: t0).ok
        feed_until(t0 + 1_000 * MS, since=arrived_before_start)
        c.tick(t0 + 1_000 * MS)
        assert c.stop(lambda: t0 + 600 * MS).ok
        obs.append([x for x in w.ended[0][0] if isinstance(x, int)])
    assert len(obs[0]) > 10 and obs[0] == obs[1], "the frames depend on what arrived before the start"
    assert obs[0][:3] == [74, 75, 76]  # k = -1, 0, 1: one capture per row, none repeated
