"""LeRobot v2.0 / v2.1 dataset writer, statistics, finalize and validation (no ROS imports).

Writer (import from the submodules; nothing heavy is re-exported here)::

    from piper_recorder.lerobot.writer import LeRobotWriter, WriterConfig, CameraSpec, VideoConfig
    from piper_recorder.lerobot.features import FeatureSpec, piper_features
    from piper_recorder.lerobot.errors import DatasetError, SchemaError, EpisodeStateError, BindingChangeError

Modules: ``writer`` (streaming API, save/commit protocol), ``video`` (per-camera encoder threads,
PTS and GOP choices), ``features`` (columns, Piper default set, combined columns), ``meta``
(info/modality/episodes/tasks content), ``stats`` (per-episode sketches -> stats.json),
``episode_stats`` (LeRobot v2.1 per-episode stats, camera image stats, aggregation),
``provenance`` (collection sessions, binding-key warning), ``repair`` (open-time crash repair),
``layout`` (path templates, bookkeeping directories), ``writer_config``,
``fsutil`` (atomic writes, fsync, the root lock); ``finalize``, ``validate`` and ``retime`` (old roots' video PTS -> the
1/90000 grid by remux, nominal row timestamps -> k/fps rounded up) for piper-finalize /
piper-validate / piper-repair.
"""
