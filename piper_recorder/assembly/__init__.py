"""Stamped events -> episode rows and frames, shared by the live recorders and the rosbag converter.

No ROS imports. API::

    from piper_recorder.assembly import AssemblyConfig, EpisodeAssembler, LeRobotSink, RgbdSink
    cfg = AssemblyConfig(fps=30, cameras=("cam_front", "cam_wrist"), timestamp_mode="capture",
                         lateness_s=0.05, stale_s=0.25)
    sink = LeRobotSink(lerobot_writer, save_raw_quest=True)        # or RgbdSink(rgbd_writer, "cam_front")
    asm = EpisodeAssembler(cfg, start_ns, sink, depth=False)       # depth=True for RGB-D (frames carry depth)
    asm.add_joint_state(stamp_ns, [j1..j6, gripper_m])             # all stamps: int ns, ROS clock
    asm.add_eef_pose(stamp_ns, (x, y, z), (qx, qy, qz, qw))        # ROS xyzw in; rows hold wxyz
    asm.add_commanded_pose(stamp_ns, (x, y, z), (qx, qy, qz, qw))
    asm.add_commanded_gripper(stamp_ns, width_m)
    asm.add_reward(stamp_ns, r)                                    # optional; 0 until the first one
    asm.add_input(name, stamp_ns, values)                          # any input of cfg.table (features.py)
    asm.add_frame(cam, stamp_ns, rgb_uint8_hwc, depth=None)        # depth: uint16 mm HxW (RGB-D)
    # RGB-D: colour and depth arrive apart; DepthPairer(period_ns) pairs them by nearest stamp (within
    # half a period; EpisodeController.add_color/add_depth do that and count frames_unpaired)
    asm.add_raw_quest(stamp_ns, line)                              # stamp = receive time
    asm.advance(now_ns)                                            # assembles ticks with t_k + cfg.delay_ns() <= now
    counters = asm.finish(end_ns)                                  # remaining ticks with t_k <= end_ns
    record = {**counters.to_dict(), **sink.counters()}             # LeRobotSink; -> writer.save_episode(record)
    rgbd_sink.end(terminal=True, timeout=False)                    # RgbdSink: then writer.end_episode(...)

Determinism: rows depend only on stamps, so the same messages fed in any order give the same rows as
long as each arrives before ``now`` passes its stamp + lateness. To reproduce a live episode from a bag
(the live recorder does exactly this):
  1. ``start_ns`` = the "started" event's start_ns; same fps / cameras / timestamp_mode / lateness_s /
     stale_s as the recorder's parameters (``depth=True`` for RGB-D).
  2. Pre-roll: first feed the newest message of each input (and camera) received before start_ns (of a
     camera whose frames go in rows, also those captured within ``cfg.preroll_frames_ns(depth)`` before it), and
     pass ``history``: per camera the stamps of the captures received before start_ns, as the
     recorder's ``CaptureHistory`` kept them (the newest ``window_captures(fps)``, none before a silence
     of ``HISTORY_GAP_S``); the phase estimate starts from them.
  3. Then each message received in [start_ns, end_ns + cfg.delay_ns(depth)] in receive order: ``advance(t_recv)``
     then ``add_*(stamp, ...)`` (raw headset lines: stamp = receive time).
  4. ``finish(end_ns)`` with the "saved" event's end_ns. The "saved" event's start_ns is ``origin_ns``
     (t_k0; equal to the started start_ns unless inputs were missing at the start) and its rows equal
     ``counters.rows``.
Rules in ``assembler``.
"""
from .assembler import STATE_INPUTS, TIMESTAMP_MODES, AssemblyConfig, Counters, EpisodeAssembler, Frame, Row, Sink
from .features import PIPER_TABLE, Feature, FeatureTable, InputSpec
from .frame_assign import CaptureHistory, window_captures
from .pairing import DepthPairer
from .sinks import LEROBOT_COLUMNS, RGBD_STATE_TERMS, LeRobotSink, RgbdSink

__all__ = [
    "AssemblyConfig", "CaptureHistory", "Counters", "DepthPairer", "EpisodeAssembler", "Feature", "FeatureTable",
    "Frame", "InputSpec", "LEROBOT_COLUMNS", "LeRobotSink", "PIPER_TABLE", "RGBD_STATE_TERMS", "RgbdSink", "Row",
    "STATE_INPUTS", "Sink", "TIMESTAMP_MODES", "window_captures",
]
