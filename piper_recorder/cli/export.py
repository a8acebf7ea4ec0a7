"""piper-export ROOT --to v2.1|v3.0 --out DIR: export one of our LeRobot v2.0/v2.1 roots.

v2.1: the same files (hard links) plus meta/episodes_stats.jsonl. v3.0: LeRobot 0.4's layout, many
episodes per parquet and per mp4, videos concatenated by remux (never re-encoded). Re-running into
the same DIR appends the episodes recorded since; a killed export leaves the previous one intact.
Exit codes: 0 done, 2 the root cannot be exported as asked (the message says why), 1 an I/O
error (e.g. a full disk; the previous export is left as it was).
"""

from __future__ import annotations

import argparse
import sys
import time

from piper_recorder.cli.errors import exits_2_on_bad_input
from piper_recorder.lerobot.export.operation import TARGETS, export
from piper_recorder.lerobot.export.source import ExportError


@exits_2_on_bad_input("piper-export")
def main(argv: list[str] | None = None) -> int:
    """Run ``piper-export`` on ``argv`` (default: the command line); returns the exit status."""
    p = argparse.ArgumentParser(
        prog="piper-export", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("root", help="LeRobot v2.0 or v2.1 root written by piper_recorder")
    p.add_argument("--to", required=True, choices=TARGETS, help="target LeRobot version")
    p.add_argument("--out", required=True, help="output directory (created; re-run to append)")
    p.add_argument(
        "--data-files-size-in-mb",
        type=float,
        default=None,
        help="v3.0: data file size limit (LeRobot's default 100; fixed at the first export)",
    )
    p.add_argument(
        "--video-files-size-in-mb",
        type=float,
        default=None,
        help="v3.0: video file size limit (LeRobot's default 200; fixed at the first export)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    options = {}
    if args.to == "v3.0":
        for name in ("data_files_size_in_mb", "video_files_size_in_mb"):
            value = getattr(args, name)
            if value is not None:
                if value <= 0:
                    p.error(f"--{name.replace('_', '-')} must be positive")
                options[name] = value
    elif args.data_files_size_in_mb is not None or args.video_files_size_in_mb is not None:
        p.error("file size limits apply to --to v3.0 only")
    t0 = time.monotonic()
    try:
        res = export(args.root, args.to, args.out, progress=not args.quiet and sys.stderr.isatty(), **options)
    except ExportError as e:
        print(f"piper-export: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # e.g. a full disk: the staging tree is gone, the previous export intact
        print(f"piper-export: {e}; nothing was changed in {args.out}", file=sys.stderr)
        return 1
    wall = time.monotonic() - t0
    if res.added == 0:
        print(f"piper-export: {res.out} is up to date ({res.episodes} episodes, LeRobot {res.to})")
    else:
        print(
            f"piper-export: {res.added} new episodes ({res.seconds_of_data:.1f} s of data) -> {res.out} "
            f"(LeRobot {res.to}, {res.episodes} episodes, {res.frames} frames) in {wall:.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
