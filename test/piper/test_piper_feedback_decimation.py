"""FeedbackDecimator (no ROS): the arm's 200 Hz feedback sets reach piper_sdk's parser at 100 Hz, each set whole."""

from __future__ import annotations

from piper_recorder.piper.link import FeedbackDecimator
from piper_recorder.piper.wire import ID_GRIPPER, ID_HIGH_SPD, ID_JOINTS, ID_LOW_SPD, ID_POSE, ID_STATUS


def test_sets_are_parsed_whole_at_the_rate_and_motor_frames_always():
    d = FeedbackDecimator(100.0)
    parsed: dict[int, list[int]] = {}
    for tick in range(200):  # 1 s of a 200 Hz arm, with +-0.4 ms of arrival jitter
        t = tick * 0.005 + (0.0004 if tick % 3 else -0.0004)
        frames = [ID_STATUS, *ID_POSE, *ID_JOINTS, ID_GRIPPER] + (list(ID_HIGH_SPD) if tick % 2 else [])
        frames += list(ID_LOW_SPD) if tick % 10 == 0 else []
        for k, fid in enumerate(frames):
            if not d.skip(fid, t + k * 2e-5):
                parsed.setdefault(fid, []).append(tick)
    for fid in (ID_STATUS, *ID_POSE, *ID_JOINTS, ID_GRIPPER):
        assert len(parsed[fid]) == 100, (hex(fid), len(parsed[fid]))  # every other set
    assert parsed[ID_POSE[0]] == parsed[ID_POSE[1]] == parsed[ID_POSE[2]]  # never a mix of two ticks
    assert parsed[ID_JOINTS[0]] == parsed[ID_JOINTS[1]] == parsed[ID_JOINTS[2]]
    assert all(len(parsed[f]) == 100 for f in ID_HIGH_SPD) and all(len(parsed[f]) == 20 for f in ID_LOW_SPD)
    assert not d.skip(0x4AF, 0.0)  # anything else (firmware answers, ...) always goes through


def test_a_late_set_after_a_gap_is_parsed_at_once():
    d = FeedbackDecimator(100.0)
    assert not d.skip(ID_JOINTS[0], 0.0)
    assert d.skip(ID_JOINTS[0], 0.005) and d.skip(ID_JOINTS[2], 0.005)
    assert not d.skip(ID_JOINTS[0], 0.5) and not d.skip(ID_JOINTS[1], 0.5)  # after silence: the first set
