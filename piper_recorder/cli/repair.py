"""piper-repair ROOT [--dry-run]: rewrite whole-millisecond video PTS of a LeRobot root to 1/90000 s.

Roots recorded before issue 11 carry video PTS in whole ms, which LeRobot's default tolerance
(1e-4 s) rejects for two rows in three. This remuxes each such mp4 (packets copied bit for bit, no
re-encoding) with PTS on the 1/90000 s grid, file by file and atomically; files already in 1/90000
are skipped, so an interrupted run is simply run again. --dry-run lists what would change. Rules
(nominal vs capture episodes) in piper_recorder/lerobot/retime.py. Exit 0 when every video is fine
afterwards, 1 if any could not be repaired or the root is unusable (e.g. a recorder has it open).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from piper_recorder.lerobot.errors import DatasetError
from piper_recorder.lerobot.retime import OK, REFUSE, REWRITE, FilePlan, repair_root


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="piper-repair", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("root", help="LeRobot v2.0 dataset root")
    p.add_argument("--dry-run", action="store_true", help="list what would change, change nothing")
    args = p.parse_args(argv)
    root = Path(args.root)
    verb, done = ("would rewrite", "to rewrite") if args.dry_run else ("rewrote", "rewritten")

    def progress(plan: FilePlan) -> None:
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
    print(f"piper-repair: {n} videos: {todo} {done}, {ok} already 1/90000, {refused} not repairable"
          f"{'' if args.dry_run else f' ({report.seconds_of_video:.0f} s of video in {time.monotonic() - t0:.1f} s)'}"
          f"{'; nothing changed (dry run)' if args.dry_run else ''}")
    if refused:
        print(f"piper-repair: {refused} video(s) left unchanged, see 'skipped' lines above", file=sys.stderr)
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
