"""LeRobot v2.0 / v2.1 datasets: the format, its writer, validation, export and maintenance (no ROS imports).

Writer (import from the submodules; nothing heavy is re-exported here)::

    from piper_recorder.lerobot.writer.dataset_writer import LeRobotWriter, WriterConfig, CameraSpec, VideoConfig
    from piper_recorder.lerobot.format.features import FeatureSpec, piper_features
    from piper_recorder.lerobot.format.errors import DatasetError, SchemaError, EpisodeStateError, BindingChangeError

Subpackages, each importing only those listed before it (test/test_module_graph.py):

* ``format``: what a v2.x root is and how to read it: ``layout`` (path templates, meta file names,
  bookkeeping directories), ``features`` (columns, Piper default set, combined columns), ``root`` (the
  typed read model), ``metacheck`` (shape checks of the meta files), ``raw_read`` (raw json/jsonl/column
  reads), ``episode_stats`` (LeRobot v2.1 per-episode stats, camera image stats, aggregation),
  ``provenance`` (collection sessions, binding keys), ``fsutil`` (atomic writes, JSON lines, the root
  lock), ``errors``;
* ``writer``: the streaming writer: ``dataset_writer`` (``LeRobotWriter``: streaming API, save/commit
  protocol), ``config`` (``WriterConfig``, ``CameraSpec``), ``video_encoder`` (per-camera encoder threads,
  PTS and GOP choices), ``meta_builders`` (info/modality/episodes/tasks content), ``stats_sketch``
  (per-episode sketches -> stats.json), ``crash_repair`` (the writer's open-time repair after a crash);
* ``validate`` (a module): piper-validate's independent checks (reads the raw files, never the writer);
* ``export``: piper-export to LeRobot v2.1 / v3.0: ``operation`` (the source checks, the append state,
  the staged commit), ``v21`` and ``v30`` (the target layouts), ``video_concat`` (v3.0 mp4s by remux);
* ``maintenance``: tools that rewrite or add to a saved root: ``retime`` (piper-repair: old roots' video
  PTS -> the 1/90000 grid by remux, nominal row timestamps -> k/fps rounded up), ``recover``
  (piper-recover: rebuilds what the writer refuses as damaged), ``action_stats`` (piper-finalize:
  relative and delta action statistics) and ``se3`` (its pose maths).
"""
