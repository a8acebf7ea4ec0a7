"""piper-view PATH [--episode N] --out report.html: a self-contained HTML report of a dataset."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from piper_recorder.cli.errors import exits_2_on_bad_input


@exits_2_on_bad_input("piper-view")
def main(argv: list[str] | None = None) -> int:
    """Run ``piper-view`` on ``argv`` (default: the command line); returns the exit status."""
    ap = argparse.ArgumentParser(prog="piper-view", description=__doc__)
    ap.add_argument("path", type=Path, help="a LeRobot v2.0 root directory or an RGB-D .hdf5 file")
    ap.add_argument("--episode", type=int, action="append", help="only this episode (repeatable)")
    ap.add_argument("--out", type=Path, default=Path("report.html"))
    ap.add_argument(
        "--link-videos",
        action="store_true",
        help="reference the mp4 files instead of embedding them (smaller report, not self-contained)",
    )
    args = ap.parse_args(argv)
    if args.path.is_dir():
        from piper_recorder.viewer.lerobot_report import render

        render(args.path, args.out, args.episode, embed_videos=not args.link_videos)
    elif args.path.suffix in (".hdf5", ".h5"):
        from piper_recorder.viewer.rgbd_report import render as render_rgbd

        render_rgbd(args.path, args.out, args.episode)
    else:
        print(f"piper-view: {args.path} is neither a LeRobot root nor an .hdf5 file", file=sys.stderr)
        return 2
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
