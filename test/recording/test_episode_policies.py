"""Every policy that acted in an episode is named in its episodes.jsonl line, with when (#21 item 10).

An episode started before /policy/start recorded policy rows (actor 1) and named no policy: the
recorder named only the policy active at the episode's start. ``recording.policy_log`` (no ROS) keeps
/policy/provenance and /policy/actor as the recorder receives them; the controller's
``episode_fields`` hook adds them to the saved record. Here with the real LeRobot writer.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from piper_recorder.lerobot.writer import LeRobotWriter
from piper_recorder.recording.config import LeRobotRecorderConfig, lerobot_writer_config, session_record
from piper_recorder.recording.controller import EpisodeController
from piper_recorder.recording.policy_log import UNKNOWN, PolicyLog, episode_fields
from piper_recorder.recording.targets import LeRobotTarget

MS = 1_000_000
S = 1_000_000_000
ACT = {"backend": "http", "url": "http://127.0.0.1:8000", "content_hash": "sha256:aa", "active": True}
GR00T = {"backend": "gr00t", "url": "gr00t://127.0.0.1:5555", "active": True}


def test_intervals_on_the_episode_axis_and_the_policy_that_ran_them():
    log = PolicyLog()
    t0 = 1000 * S
    log.on_actor(t0 - 5 * S, "none")
    log.on_actor(t0 + 2 * S, "policy")  # the actor arrived before the provenance
    log.on_provenance(t0 + 2 * S + 3 * MS, ACT)
    log.on_actor(t0 + 4 * S, "operator")  # takeover
    log.on_actor(t0 + 5 * S, "policy")  # resume
    log.on_provenance(t0 + 6 * S, {**ACT, "active": False})
    log.on_actor(t0 + 6 * S + 10 * MS, "none")
    log.on_provenance(t0 + 7 * S, GR00T)  # another policy node
    log.on_actor(t0 + 7 * S + 5 * MS, "policy")
    got = log.acted(t0, t0 + 8 * S)
    assert [g["backend"] for g in got] == ["http", "gr00t"]
    assert got[0]["acted_s"] == [[2.0, 4.0], [5.0, 6.01]] and got[0]["first_s"] == 2.0 and got[0]["last_s"] == 6.01
    assert "active" not in got[0] and got[0]["content_hash"] == "sha256:aa"
    assert got[1]["acted_s"] == [[7.005, 8.0]]
    assert log.acted(t0 + 4 * S + 1, t0 + 4 * S + 2) == []  # the operator's stretch: nobody
    assert log.acted(t0 - 10 * S, t0)[:1] == []


def test_an_actor_without_any_provenance_is_still_named():
    log = PolicyLog()
    log.on_actor(5 * S, "policy")
    (got,) = log.acted(4 * S, 6 * S)
    assert {k: got[k] for k in UNKNOWN} == UNKNOWN and got["acted_s"] == [[1.0, 2.0]]


def test_an_episode_started_before_the_policy_names_it_in_episodes_jsonl(tmp_path: Path):
    cfg = LeRobotRecorderConfig(
        root=str(tmp_path / "ds"), cameras=["cam_front"], camera_height=16, camera_width=16, lateness_s=0.0
    )
    log = PolicyLog()
    log.on_actor(time.time_ns() - 10 * S, "none")
    c = EpisodeController(
        LeRobotTarget(LeRobotWriter(cfg.root, lerobot_writer_config(cfg))),
        cfg.assembly(),
        recorder="lerobot_recorder",
        max_episode_s=0,
        publish_event=lambda e: None,
        session_record=lambda: session_record(cfg, "lerobot_recorder", None, None),
        log=lambda m: None,
        episode_fields=lambda o, e: episode_fields(log, o, e),
    )
    t = time.time_ns()
    try:
        assert c.start("pick", lambda: t).ok  # no policy active yet
        for i in range(100):  # 1 s of rows
            s = t + i * 10 * MS
            if i == 30:
                log.on_provenance(s, ACT)  # /policy/start mid-episode
                log.on_actor(s + MS, "policy")
            if i == 70:
                log.on_actor(s, "operator")  # the operator's grip
            c.add_joint_state(s, [0.1] * 6 + [0.04])
            c.add_eef_pose(s, (0, 0, 0), (0, 0, 0, 1))
            c.add_commanded_pose(s, (0, 0, 0), (0, 0, 0, 1))
            c.add_commanded_gripper(s, 0.02)
            if i % 3 == 0:
                c.add_frame("cam_front", s, np.full((16, 16, 3), i, np.uint8))
            c.tick(s)
        assert c.stop(t + 990 * MS).ok
    finally:
        c.shutdown(save=False)
    (ep,) = [json.loads(x) for x in (tmp_path / "ds/meta/episodes.jsonl").read_text().splitlines()]
    assert ep["policy"] == {k: v for k, v in ACT.items() if k != "active"}
    (pol,) = ep["policies"]
    assert pol["url"] == ACT["url"] and pol["content_hash"] == "sha256:aa"
    # on the rows' timestamp axis: row 0 is the episode's first grid tick
    first_row_ns = t + ep["skipped_start_ticks"] * round(1e9 / 30)
    assert pol["acted_s"] == [
        [round((t + 301 * MS - first_row_ns) / 1e9, 3), round((t + 700 * MS - first_row_ns) / 1e9, 3)]
    ]


def test_the_log_says_who_acts_as_last_heard():
    log = PolicyLog()
    assert log.actor() is None
    log.on_actor(1_000, "policy")
    log.on_actor(2_000, "operator")
    log.on_actor(3_000, "operator")  # a repeat changes nothing
    assert log.actor() == "operator"
