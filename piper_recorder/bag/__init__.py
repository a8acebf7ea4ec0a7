"""rosbag2 -> dataset conversion with the rosbags library (no ROS runtime): ``piper-bag2dataset``.

Modules, in data-flow order:
- ``source``: open a bag (sqlite3 / MCAP), its topics and messages in receive order; ``BagError``;
  ``bag_fingerprint`` (what provenance and resume record).
- ``config``: the recorders' settings (mirroring the node parameters) from config/*.yaml, and the
  topic map, optionally from a ``--mapping`` file (format in its docstring).
- ``episodes``: episode spans from /episode_events, ``--episode`` ranges, or the whole bag.
- ``convert``: one bag -> a staging dataset through the live recorders' episode controller,
  assembler and writer targets (log time = the node's ``now``).
- ``merge``: append staged episodes to the output through the writers; what the output holds.
- ``run``: many bags: an ``Engine`` converts them (in process, ``--jobs`` worker processes), one
  writer appends in bag order; resume, progress bars.
- ``ray_engine``: the ``--engine ray`` engine (each bag a Ray task; Ray imported only there).
- ``synth``: synthetic bags of the robot graph (tests, bench).
"""
