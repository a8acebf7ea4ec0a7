"""piper-bag2dataset: convert rosbag2 bags (sqlite3 or MCAP) into what the live recorders would have written.

Uses the rosbags library (no ROS runtime) and the live recorders' own assembler, episode controller
and writers. See piper_recorder/bag/config.py for the mapping file format.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack

from piper_recorder.cli.errors import exits_2_on_bad_input
from piper_recorder.lerobot.format.layout import EPISODES_STATS
from piper_recorder.names import EPISODE_EVENTS
from piper_recorder.storage.outpaths import overlapping_input

EPILOG = """\
episodes: from the bag's /episode_events when present (the "saved" events of the matching recorder:
  the same grid origin, end and task as live), else every --episode START:END range (seconds from the
  bag's first message), else the whole bag as one episode. Task: from the events, else --task, else
  the recorder's `task` parameter.
topics: the recorder node's parameters from --config (sim, robot or a ROS 2 parameter file; default:
  the recorder's own defaults), optionally overridden by --mapping FILE.yaml for other layouts, e.g.
  AgileX's driver:
    joint_states: {topic: /joint_states_single, names: [joint1, joint2, joint3, joint4, joint5,
                   joint6, joint7], gripper_scale: 1.0}
    eef_pose: /end_pose_stamped
    commanded_pose: /end_pose_stamped
    commanded_gripper: {topic: /joint_ctrl_single, name: joint7, scale: 1.0}
    cameras: {cam_front: {color: /camera/color/image_raw,
                          depth: /camera/aligned_depth_to_color/image_raw, height: 480, width: 640}}
  other keys: raw_quest, reward, provenance, hello, episode_events (topic or null).
output: --out is created or appended to. Each bag's session record carries a `source` block (bag
  paths, fingerprints, converter version); each episode records its bag fingerprint and span, so a
  re-run skips what is already converted (resume). --jobs N converts N bags in parallel processes;
  the output is appended in bag order by one writer and stays valid if the run is killed.
engines: local (default): --jobs processes of this machine. ray: each bag a Ray task (pip install
  'piper_recorder[ray]'): --address ADDR (or RAY_ADDRESS) joins a cluster, else a local one of --jobs
  CPUs (default: all) starts. Bags and --staging (default: beside --out) must be on a path every
  node mounts; a worker or node lost mid-bag is retried (--retries), then fails that bag alone.
exit status: 0 all bags converted or skipped; 1 some bags failed (each is reported, the others are
  converted); 2 bad arguments or an unusable output.
"""


@exits_2_on_bad_input("piper-bag2dataset")
def main(argv: list[str] | None = None) -> int:
    """Run ``piper-bag2dataset`` on ``argv`` (default: the command line); returns the exit status."""
    ap = argparse.ArgumentParser(
        prog="piper-bag2dataset",
        description=__doc__.splitlines()[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("bags", nargs="+", metavar="BAG", help="rosbag2 bag directories (metadata.yaml + .db3 or .mcap)")
    ap.add_argument("--format", required=True, choices=("lerobot", "rgbd"))
    ap.add_argument("--out", required=True, help="LeRobot root directory or RGB-D .hdf5 file")
    ap.add_argument("--config", help="sim | robot | ROS 2 parameter file with the recorder's ros__parameters")
    ap.add_argument("--mapping", help="topic mapping YAML for other layouts (see above)")
    ap.add_argument(
        "--episode",
        action="append",
        default=[],
        metavar="START:END",
        help=f"episode range in seconds (repeatable); used when a bag has no {EPISODE_EVENTS}",
    )
    ap.add_argument("--task", help="task for episodes whose events carry none (LeRobot needs one)")
    ap.add_argument("--recorder", help=f"follow this recorder's {EPISODE_EVENTS} (default: the format's recorder)")
    ap.add_argument(
        "--jobs",
        type=int,
        help="bags converted in parallel (local processes; default 1), or the "
        "CPUs of a local Ray cluster (default: all)",
    )
    ap.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="where bags convert: local processes (default) or a Ray cluster",
    )
    ap.add_argument("--address", help="--engine ray: the cluster to join (ray.init address, e.g. HOST:6379)")
    ap.add_argument(
        "--staging",
        metavar="DIR",
        help="directory for the per-bag staging datasets (default: beside --out); on a cluster, "
        "a path every node mounts",
    )
    ap.add_argument(
        "--retries", type=int, default=2, help="--engine ray: re-runs of a bag whose worker or node died (default 2)"
    )
    ap.add_argument(
        "--lerobot-version",
        choices=("v2.0", "v2.1"),
        help="LeRobot codebase version to write (default: the config's lerobot_version, v2.0); "
        f"v2.1 adds {EPISODES_STATS}",
    )
    bar = ap.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None, help="progress bars")
    bar.add_argument("--no-progress", dest="progress", action="store_false")
    a = ap.parse_args(argv)

    from piper_recorder.bag.config import topic_map
    from piper_recorder.bag.convert import ConvertOptions
    from piper_recorder.bag.run import convert_many
    from piper_recorder.recording.config import RECORDER_CONFIGS, LeRobotRecorderConfig, load_config

    try:
        config = a.config
        if config in ("sim", "robot"):
            from piper_recorder.graph.install import config_path

            config = config_path(config)
        settings = load_config(RECORDER_CONFIGS[a.format], config)
        if a.lerobot_version:
            if not isinstance(settings, LeRobotRecorderConfig):
                raise ValueError("--lerobot-version applies to --format lerobot only")
            settings.lerobot_version = a.lerobot_version
        topics = topic_map(a.format, settings, a.mapping)
        if a.format == "rgbd" and not a.out.endswith((".hdf5", ".h5")):
            raise ValueError(f"--out must be an .hdf5 file for --format rgbd, got {a.out!r}")
        inside = overlapping_input(a.out, a.bags)
        if inside is not None:  # resolved: a symlinked directory is no way into a bag
            raise ValueError(f"--out {a.out} must be outside the input {inside} and not contain it")
        if a.jobs is not None and a.jobs < 1:
            raise ValueError("--jobs must be >= 1")
        if a.engine != "ray" and a.address:
            raise ValueError("--address applies to --engine ray only")
        if a.address and a.jobs is not None:
            raise ValueError("--jobs sizes a local Ray cluster; with --address the cluster's own CPUs are used")
        if a.retries < 0:
            raise ValueError("--retries must be >= 0")
        if a.episode:
            from piper_recorder.bag.episodes import spans_from_ranges

            spans_from_ranges(
                a.episode,
                0,
                settings.assembly(list(topics.cameras)).delay_ns(depth=a.format == "rgbd"),  # validate before any work
            )
    except (OSError, ValueError) as exc:
        print(f"piper-bag2dataset: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - e.g. LaunchError for a missing packaged config
        print(f"piper-bag2dataset: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    opts = ConvertOptions(
        fmt=a.format, settings=settings, topics=topics, ranges=tuple(a.episode), task=a.task, recorder=a.recorder
    )
    progress = sys.stderr.isatty() if a.progress is None else a.progress
    with ExitStack() as stack:
        engine = None
        if a.engine == "ray":
            from piper_recorder.bag.ray_engine import RayEngine, RayUnavailable

            try:
                engine = stack.enter_context(RayEngine(address=a.address, cpus=a.jobs, retries=a.retries))
            except RayUnavailable as exc:
                print(f"piper-bag2dataset: {exc}", file=sys.stderr)
                return 2
        try:
            summary = convert_many(
                a.bags,
                opts,
                a.out,
                jobs=a.jobs or 1,
                progress=progress,
                log=lambda m: print(m, file=sys.stderr),
                engine=engine,
                staging=a.staging,
            )
        except Exception as exc:  # noqa: BLE001 - the output itself is unusable (config mismatch, locked, ...)
            print(f"piper-bag2dataset: cannot write {a.out}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
    for r in summary.results:
        if r.status == "failed":
            print(f"FAILED {r.error}", file=sys.stderr)
        else:
            extra = f", {r.skipped_episodes} already in the output" if r.skipped_episodes else ""
            print(f"{r.status} {r.bag}: {r.episodes} episodes{extra} ({r.bag_s:.1f} s of bag in {r.wall_s:.1f} s)")
    n_failed = len(summary.failed)
    total = len(summary.results)
    print(
        f"{total - n_failed} of {total} bags converted or skipped, {summary.episodes} episodes written to {a.out}"
        + (f"; {n_failed} of {total} bags FAILED" if n_failed else "")
    )
    print(f"writer: {summary.append_s:.1f} s of the run's {summary.wall_s:.1f} s appending (the serial part)")
    return 1 if n_failed else 0


if __name__ == "__main__":
    sys.exit(main())
