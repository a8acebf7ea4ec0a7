"""The streaming LeRobot v2.0 / v2.1 writer (``dataset_writer.LeRobotWriter``), its configuration, video
encoders, meta builders, statistics sketches and its own open-time crash repair (``crash_repair``; the
explicit ``piper-recover`` is ``maintenance.recover``). Imports ``format`` only."""
