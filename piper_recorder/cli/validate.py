"""piper-validate PATH [--full]: check a LeRobot v2.0 root (directory) or an RGB-D HDF5 file (.hdf5/.h5).

Prints one line per problem and exits 1 if there is any; prints a one-line OK summary and exits 0
otherwise; a path that does not exist or is neither a directory nor a .hdf5/.h5 file: one line, exit 2. For a LeRobot root it also prints the video timing line: how many rows find their frame
by both lookup rules (last frame at or before the row, less than 1e-4 s before it) and the worst row
(episode, camera, row, timestamp, pts, gap), and the frame pairing line: the worst capture offset of a
row's frame after its row (more than 1 ms is a problem: a frame from the future) and before it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from piper_recorder.cli.errors import exits_2_on_bad_input

HDF5_SUFFIXES = (".hdf5", ".h5")


def _validate_hdf5(path: Path, full: bool) -> list[str] | None:
    """Problems from rgbd_writer.validate (imported lazily); None when that package is unavailable."""
    try:
        from rgbd_writer.validate import validate_file
    except ImportError as e:
        print(
            f"piper-validate: cannot check {path}: RGB-D HDF5 validation needs rgbd_writer.validate ({e})",
            file=sys.stderr,
        )
        return None
    try:
        problems = validate_file(str(path), full=full)
    except Exception as e:  # noqa: BLE001 - a file the validator cannot even open is a problem to report
        return [f"{path}: cannot validate: {type(e).__name__}: {e}"]
    return [p if p.startswith(str(path)) else f"{path}: {p}" for p in problems]


@exits_2_on_bad_input("piper-validate")
def main(argv: list[str] | None = None) -> int:
    """Run ``piper-validate`` on ``argv`` (default: the command line); returns the exit status."""
    p = argparse.ArgumentParser(
        prog="piper-validate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("path", help="LeRobot v2.0 dataset root, or an RGB-D .hdf5/.h5 file")
    p.add_argument("--full", action="store_true", help="decode every video frame / read every dataset fully")
    args = p.parse_args(argv)
    path = Path(args.path)
    notes: list[str] = []
    if path.is_dir():
        from piper_recorder.lerobot.validate import PairingSummary, TimingSummary, summary, validate_root

        timing, pairing = TimingSummary(), PairingSummary()
        problems = validate_root(path, full=args.full, timing=timing, pairing=pairing)
        ok_line = summary(path) if not problems else ""
        notes += [timing.describe(), pairing.describe()]
    elif path.is_file() and path.suffix.lower() in HDF5_SUFFIXES:
        found = _validate_hdf5(path, args.full)
        if found is None:
            return 1
        problems = found
        ok_line = f"OK: {path}: RGB-D HDF5"
    elif path.exists():
        print(f"piper-validate: {path}: expected a LeRobot root directory or a .hdf5/.h5 file", file=sys.stderr)
        return 2
    else:
        print(f"piper-validate: {path}: does not exist", file=sys.stderr)
        return 2
    for line in problems:
        print(line)
    for line in notes:
        print(line)
    if problems:
        print(f"piper-validate: {len(problems)} problem(s) in {path}", file=sys.stderr)
        return 1
    print(ok_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
