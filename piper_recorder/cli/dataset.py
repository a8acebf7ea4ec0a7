"""piper-dataset merge|split|delete|retask|label|filter|retype: edit LeRobot v2.0/v2.1 roots and RGB-D HDF5 files.

  piper-dataset merge A B [C ...] --out OUT        all episodes of A, then B, ... (must agree on
                                                    version, robot, fps, features, cameras, codecs)
  piper-dataset split SRC --out VAL [--rest TRAIN] (--episodes 0,3,5-7 | --fraction 0.1 [--seed 0])
  piper-dataset delete SRC --episodes 1,4-6 [--out OUT]     (in place without --out)
  piper-dataset retask SRC --rename OLD=NEW [--rename ...] [--out OUT]   (several OLD onto one NEW merge)
  piper-dataset label SRC --episodes 0,3 --outcome success|failure [--note TEXT] [--out OUT]
  piper-dataset filter SRC --out OUT [--outcome success,failure,none] [--verdict ok,warn,bad,none]
  piper-dataset retype SRC --rotation-type quaternion [--out OUT]   (modality.json's quaternion tag; GR00T N1.5
                                                    accepts `quaternion` and rejects the spec's `quat_wxyz`)

Episodes, frame/global/task indices are renumbered and metadata, stats (and v2.1 episodes_stats)
recomputed by the format's own writer; videos and image payloads are linked or copied, never
re-encoded. Every output is built beside it under a hidden name and renamed into place at the end
(in place: swapped atomically), so a killed run leaves the sources untouched and no half output.
--dry-run prints the plan and changes nothing. Exit codes: 0 done, 2 refused (the message says
why: what differs, which episode does not exist, ...), 1 an I/O error (nothing changed).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from piper_recorder.cli.errors import exits_2_on_bad_input
from piper_recorder.dataset_edit import EditError, ops
from piper_recorder.dataset_edit.common import parse_renames
from piper_recorder.lerobot.format.layout import MODALITY, ROTATION_TYPES

PROG = "piper-dataset"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="op", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--dry-run", action="store_true", help="print what would be written; change nothing")
        sp.add_argument("-q", "--quiet", action="store_true", help="no progress")

    m = sub.add_parser("merge", help="concatenate datasets that agree on their format")
    m.add_argument("inputs", nargs="+", type=Path)
    m.add_argument("--out", required=True, type=Path, help="new root / file")
    common(m)
    s = sub.add_parser("split", help="selected episodes to --out, the others to --rest")
    s.add_argument("src", type=Path)
    s.add_argument("--out", required=True, type=Path, help="new root / file for the selected episodes")
    s.add_argument("--rest", type=Path, help="new root / file for the other episodes")
    s.add_argument("--episodes", help="episode indices and ranges, e.g. 0,3,5-7")
    s.add_argument("--fraction", type=float, help="select this fraction of the episodes at random")
    s.add_argument("--seed", type=int, default=0, help="seed of --fraction (default 0)")
    common(s)
    d = sub.add_parser("delete", help="delete episodes, renumbering the ones after them")
    d.add_argument("src", type=Path)
    d.add_argument("--episodes", required=True, help="episode indices and ranges, e.g. 1,4-6")
    d.add_argument("--out", type=Path, help="write a new root / file instead of editing in place")
    common(d)
    r = sub.add_parser("retask", help="rename or merge tasks")
    r.add_argument("src", type=Path)
    r.add_argument("--rename", action="append", default=[], metavar="OLD=NEW", required=True)
    r.add_argument("--out", type=Path, help="write a new root / file instead of editing in place")
    common(r)
    lb = sub.add_parser("label", help="mark episodes success / failure (outcome), with an optional note")
    lb.add_argument("src", type=Path)
    lb.add_argument("--episodes", required=True, help="episode indices and ranges, e.g. 0,3,5-7")
    lb.add_argument("--outcome", required=True, choices=("success", "failure"))
    lb.add_argument("--note", default="", help="a short remark (one line, at most 200 characters)")
    lb.add_argument("--out", type=Path, help="write a new root / file instead of editing in place")
    common(lb)
    fl = sub.add_parser("filter", help="the episodes with the given outcome and integrity verdict, to --out")
    fl.add_argument("src", type=Path)
    fl.add_argument("--out", required=True, type=Path, help="new root / file")
    fl.add_argument("--outcome", help="comma list of success, failure, none (unlabelled)")
    fl.add_argument("--verdict", help="comma list of ok, warn, bad, none (saved without a verdict)")
    common(fl)
    t = sub.add_parser("retype", help=f"re-tag the quaternion slices of {MODALITY} (LeRobot roots)")
    t.add_argument("src", type=Path)
    t.add_argument(
        "--rotation-type",
        required=True,
        choices=ROTATION_TYPES,
        help="quaternion: the w-first name GR00T N1.5 accepts; quat_wxyz: the spec's name",
    )
    t.add_argument("--out", type=Path, help="write a new root instead of editing in place")
    common(t)
    return p


def _progress(enabled: bool) -> ops.Progress | None:
    if not enabled:
        return None

    def show(done: int, total: int) -> None:
        print(f"\r{PROG}: {done}/{total} episodes", end="" if done < total else "\n", file=sys.stderr, flush=True)

    return show


@exits_2_on_bad_input(PROG)
def main(argv: list[str] | None = None) -> int:
    """Run ``piper-dataset`` on ``argv`` (default: the command line); returns the exit status."""
    args = _parser().parse_args(argv)
    prog = _progress(not args.quiet and not args.dry_run and sys.stderr.isatty())
    t0 = time.monotonic()
    try:
        if args.op == "merge":
            res = ops.merge(args.inputs, args.out, args.dry_run, prog)
        elif args.op == "split":
            res = ops.split(args.src, args.out, args.rest, args.episodes, args.fraction, args.seed, args.dry_run, prog)
        elif args.op == "delete":
            res = ops.delete(args.src, args.episodes, args.out, args.dry_run, prog)
        elif args.op == "retask":
            res = ops.retask(args.src, parse_renames(args.rename), args.out, args.dry_run, prog)
        elif args.op == "label":
            res = ops.label(args.src, args.episodes, args.outcome, args.note, args.out, args.dry_run, prog)
        elif args.op == "filter":
            res = ops.filter_(args.src, args.out, args.outcome, args.verdict, args.dry_run, prog)
        else:
            res = ops.retype(args.src, args.rotation_type, args.out, args.dry_run, prog)
    except EditError as e:
        print(f"{PROG} {args.op}: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{PROG} {args.op}: {e}; the sources are unchanged and no output was written", file=sys.stderr)
        return 1
    print(f"{PROG} {args.op}{' (dry run: nothing written)' if res.dry_run else ''}:")
    for line in res.plan:
        print(line)
    if not res.dry_run:
        print(
            f"done in {time.monotonic() - t0:.1f} s: "
            + ", ".join(
                f"{p} ({t['episodes']} episodes, {t['frames']} {'rows' if res.kind == 'lerobot' else 'transitions'})"
                for p, t in zip(res.outputs, res.totals)
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
