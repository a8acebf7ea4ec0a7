"""piper-finalize --root DIR [--horizon 30]: write meta/relative_stats.json and meta/delta_stats.json.

Statistics of future action windows (H rows, padded with the episode's last action) relative to the
state at the window start (relative) or chained step to step (delta). Gripper-like columns are
subtracted; EEF poses use T_state^-1 @ T_action with quaternions written wxyz and w >= 0.
Statistics are per element over all windows and steps, shaped like stats.json; parquet is only read.
"""

from __future__ import annotations

import argparse
import sys

from piper_recorder.cli.errors import exits_2_on_bad_input
from piper_recorder.lerobot.format.layout import DELTA_STATS, MODALITY, RELATIVE_STATS
from piper_recorder.lerobot.maintenance.action_stats import FinalizeConfig, finalize_root


def _pair(text: str) -> tuple[str, str]:
    act, sep, obs = text.partition("=")
    if not sep or not act or not obs:
        raise argparse.ArgumentTypeError(f"expected ACTION_COLUMN=OBSERVATION_COLUMN, got {text!r}")
    return act, obs


@exits_2_on_bad_input("piper-finalize")
def main(argv: list[str] | None = None) -> int:
    """Run ``piper-finalize`` on ``argv`` (default: the command line); returns the exit status."""
    p = argparse.ArgumentParser(
        prog="piper-finalize", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--root", required=True, help="LeRobot v2.0 dataset root")
    p.add_argument("--horizon", type=int, default=30, help="future window length in rows (default 30)")
    p.add_argument(
        "--pair",
        type=_pair,
        action="append",
        metavar="ACTION=OBSERVATION",
        help="pair an action column with its state column (repeatable; default: action.X=observation.X)",
    )
    p.add_argument(
        "--pose-column",
        action="append",
        metavar="COLUMN",
        help=f"treat COLUMN as an [x,y,z,qw,qx,qy,qz] pose (repeatable; default: from {MODALITY})",
    )
    args = p.parse_args(argv)
    if args.horizon < 1:
        p.error("--horizon must be >= 1")
    cfg = FinalizeConfig(
        horizon=args.horizon,
        pairs=dict(args.pair) if args.pair else None,
        pose_columns=tuple(args.pose_column) if args.pose_column else None,
        log=lambda m: print(m, file=sys.stderr),
    )
    res = finalize_root(args.root, cfg)  # a root it cannot use: exit 2 (cli.errors)
    print(
        f"piper-finalize: {res.episodes} episodes, {res.rows} rows, horizon {args.horizon} "
        f"({res.samples} window samples per column) -> {RELATIVE_STATS}, {DELTA_STATS}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
