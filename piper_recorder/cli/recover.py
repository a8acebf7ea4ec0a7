"""piper-recover ROOT --config CONFIG [--dry-run]: bring a damaged LeRobot root back to a state recorders append to.

The recorders and piper-bag2dataset never move a saved episode's files on their own: a root whose files
disagree with meta/ beyond what a crash leaves (meta/info.json missing, an emptied episodes.jsonl with
episodes on disk, videos of cameras the configuration does not record, ...) is refused with the reason.
This command rebuilds what can be rebuilt from the files on disk (episodes.jsonl lines of complete
episodes, info.json from the recorder configuration) and moves every file no episode names into
ROOT/.recovered/<time>/ (nothing saved is deleted). --dry-run prints the plan and changes nothing.
(Not to be confused with piper-repair, which rewrites video timestamps.)

exit status: 0 done (or nothing to do); 1 the root cannot be recovered (reason printed, nothing changed);
2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Run ``piper-recover`` on ``argv`` (default: the command line); returns the exit status."""
    ap = argparse.ArgumentParser(
        prog="piper-recover",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("root", help="LeRobot v2.0 root")
    ap.add_argument(
        "--config",
        required=True,
        help="the configuration the root was recorded with: sim | robot | ROS 2 parameter file "
        "(the lerobot_recorder's ros__parameters)",
    )
    ap.add_argument("--dry-run", action="store_true", help="print what would be done, change nothing")
    a = ap.parse_args(argv)

    from piper_recorder.lerobot.format.errors import DatasetError
    from piper_recorder.lerobot.maintenance import recover
    from piper_recorder.recording.config import LeRobotRecorderConfig, lerobot_writer_config, load_config
    from piper_recorder.recording.inputs import topic_map

    root = Path(a.root)
    try:
        config = a.config
        if config in ("sim", "robot"):
            from piper_recorder.graph.install import config_path

            config = config_path(config)
        cfg = load_config(LeRobotRecorderConfig, config)
        topics = topic_map("lerobot", cfg)  # its mapping's cameras and extra inputs, as the recorder had them
        wcfg = lerobot_writer_config(cfg, topics.cameras, offline=True, table=topics.table)
    except Exception as exc:  # noqa: BLE001 - a bad or missing config file
        print(f"piper-recover: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if not root.is_dir():
        print(f"piper-recover: {root} is not a directory", file=sys.stderr)
        return 2
    p = recover.plan(root, wcfg)
    if p.problems:
        for line in p.problems:
            print(f"piper-recover: {line}", file=sys.stderr)
        print(f"piper-recover: {root} cannot be recovered; nothing was changed", file=sys.stderr)
        return 1
    lines = p.lines()
    if a.dry_run:
        print("\n".join(lines) if lines else f"nothing to recover in {root}")
        print("(dry run: nothing changed; run without --dry-run to do it)")
        return 0
    for note in p.notes:
        print(f"note: {note}")
    try:
        done = recover.apply(p, wcfg)
    except DatasetError as exc:
        print(f"piper-recover: {exc}", file=sys.stderr)
        return 1
    for line in done:
        print(line)
    print(f"recovered {root}" if done else f"nothing to recover in {root}; it opens as it is")
    return 0


if __name__ == "__main__":
    sys.exit(main())
