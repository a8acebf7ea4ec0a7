"""Open a v3.0 root with the installed LeRobot (0.4+) at its defaults and print what it keeps of our
curation columns in ``dataset.meta.episodes`` (``load_episodes`` drops only ``stats/*``).

Runs inside the .venv-lerobot04 consumer virtualenv. Prints one JSON object: per episode its
``outcome``, ``outcome_note``, ``verdict`` and ``verdict_reasons`` as LeRobot returns them, and the
column names it kept.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import version

KEYS = ("outcome", "outcome_note", "verdict", "verdict_reasons")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--repo-id", default="local/piper")
    args = ap.parse_args()
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    out: dict = {"lerobot": version("lerobot")}
    try:
        ds = LeRobotDataset(args.repo_id, root=args.root)
        eps = ds.meta.episodes
        out["columns"] = list(eps.column_names)
        out["episodes"] = [
            {k: eps[i][k] if k in eps.column_names else "<missing>" for k in KEYS} for i in range(len(eps))
        ]
        out["rows"] = len(ds)
        item = ds[0]  # a row still loads (frames decode) with the extra columns present
        out["first_row_keys"] = sorted(k for k in item if k.startswith("observation.images."))
    except Exception as e:  # noqa: BLE001 - report what the user would see
        out["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(out))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
