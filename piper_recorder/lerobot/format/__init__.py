"""The LeRobot v2.x format: where files live and what they are called (``layout``), columns
(``features``), reading a root (``root``, ``metacheck``, ``raw_read``), per-episode statistics
(``episode_stats``), provenance, crash-safe file primitives (``fsutil``) and errors. Imports nothing
else of ``piper_recorder.lerobot``."""
