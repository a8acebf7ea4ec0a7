"""piper-repair ROOT [--dry-run]: put an older LeRobot root's video PTS and row timestamps on the grid.

Roots recorded before the 1/90000 s PTS carry video PTS in whole ms, which LeRobot's default tolerance
(1e-4 s) rejects for two rows in three, and row timestamps k/fps rounded to the NEAREST float32 (below
the grid for about half the rows), for which LeRobot's lookup (frame round(t * fps)) gets the next
frame. This remuxes each such mp4 (packets copied bit for bit, no re-encoding) with PTS on the 1/90000 s
grid, and for nominal episodes rewrites the parquet's ``timestamp`` column to k/fps rounded up to
float32 (every other column unchanged), file by file and atomically, videos before their parquet;
files already right are skipped, so an interrupted run is simply run again. --dry-run lists what would
change. Rules (nominal vs capture episodes) in piper_recorder/lerobot/maintenance/retime.py. Exit 0 when every
file is fine afterwards, 1 if any could not be repaired or the root is unusable (e.g. a recorder has
it open), 2 when ROOT is not a directory.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from piper_recorder.cli.errors import exits_2_on_bad_input
from piper_recorder.lerobot.format.errors import DatasetError
from piper_recorder.lerobot.maintenance.retime import OK, REFUSE, REWRITE, DataPlan, FilePlan, repair_root


@exits_2_on_bad_input("piper-repair")
def main(argv: list[str] | None = None) -> int:
    """Run ``piper-repair`` on ``argv`` (default: the command line); returns the exit status."""
    p = argparse.ArgumentParser(
        prog="piper-repair", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("root", help="LeRobot v2.0 dataset root")
    p.add_argument("--dry-run", action="store_true", help="list what would change, change nothing")
    args = p.parse_args(argv)
    root = Path(args.root)
    if not root.is_dir():
        print(f"piper-repair: {root}: {'not a directory' if root.exists() else 'does not exist'}", file=sys.stderr)
        return 2
    verb, done = ("would rewrite", "to rewrite") if args.dry_run else ("rewrote", "rewritten")

    def progress(plan: FilePlan | DataPlan) -> None:
        if plan.action != OK:
            print(f"{verb if plan.action == REWRITE else 'skipped'} {plan.describe(root)}", flush=True)

    t0 = time.monotonic()
    try:
        report = repair_root(root, dry_run=args.dry_run, progress=progress)
    except DatasetError as e:
        print(f"piper-repair: {e}", file=sys.stderr)
        return 1
    for tmp in report.removed_tmp:
        print(f"removed interrupted write {tmp.relative_to(root)}")
    n, ok, refused = len(report.plans), report.count(OK), report.count(REFUSE)
    todo = report.count(REWRITE)
    d_todo, d_refused = report.data_count(REWRITE), report.data_count(REFUSE)
    refused += d_refused
    print(
        f"piper-repair: {n} videos: {todo} {done}, {ok} already 1/90000, {refused - d_refused} not repairable; "
        f"{len(report.data)} nominal episode parquets: {d_todo} {done}, {report.data_count(OK)} on the grid"
        f"{f', {d_refused} not repairable' if d_refused else ''}"
        f"{'' if args.dry_run else f' ({report.seconds_of_video:.0f} s of video in {time.monotonic() - t0:.1f} s)'}"
        f"{'; nothing changed (dry run)' if args.dry_run else ''}"
    )
    if refused:
        print(f"piper-repair: {refused} file(s) left unchanged, see 'skipped' lines above", file=sys.stderr)
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
