"""Teleoperation math (no ROS): Quest controller -> safe Piper flange targets, for one arm or two.

``mapper.TeleopCore`` is the single-arm entry point (fed messages with monotonic times, ``tick(t)`` at
the control rate), ``bimanual.BimanualCore`` the two-arm one (each hand drives the arm of its name).
Both are a ``coordinator.Coordinator`` over one place per concept: ``arm_engine`` (one arm: its clutch,
mapping, filters, limits, watchdogs, final check), ``episode_buttons`` (the buttons that start, stop,
discard, label and delete episodes), ``inputs`` (the checked poses and joys), ``config`` (the
parameters). Below them: ``clutch`` (grip hysteresis + interlocks), ``frames`` (XR stage -> arm base
remap with yaw offset, and each arm's base calibration), ``filters`` (one-euro, position and
orientation), ``limits`` (tether, workspace box, per-tick speed caps, final hard check) and
``rotations`` (xyzw helpers). ``session.TeleopSession`` coordinates one session around the core
(recorder calls, labels, haptics, limits, status); the ROS adapter ``piper_recorder.nodes.teleop``
only converts messages for it.
"""
