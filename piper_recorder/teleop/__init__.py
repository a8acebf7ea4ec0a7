"""Teleoperation math (no ROS): Quest controller -> safe Piper flange targets.

``mapper.TeleopCore`` is the entry point (fed messages with monotonic times, ``tick(t)`` at the
control rate); it composes ``clutch`` (grip hysteresis + interlocks), ``frames`` (XR stage -> arm
base remap with yaw offset), ``filters`` (one-euro, position and orientation), ``limits``
(tether, workspace box, per-tick speed caps, final hard check) and ``rotations`` (xyzw helpers).
``session.TeleopSession`` coordinates one session around the core (recorder calls, labels, haptics,
limits, status); the ROS adapter ``piper_recorder.nodes.teleop`` only converts messages for it.
"""
