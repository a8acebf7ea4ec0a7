"""Read one column of every row through the installed LeRobot, as a training loop gets it.

Runs inside a consumer virtualenv. ``LeRobotDataset(repo_id, root=ROOT)`` with LeRobot's defaults;
prints one JSON object: the column's value per row (in row order) and the keys LeRobot's
``dataset_to_policy_features`` offers a policy as inputs/outputs.
"""

from __future__ import annotations

import argparse
import json


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("column")
    ap.add_argument("--repo-id", default="local/piper")
    args = ap.parse_args()
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    try:
        from lerobot.datasets.utils import dataset_to_policy_features
    except ImportError:  # 0.6 moved it
        from lerobot.utils.feature_utils import dataset_to_policy_features

    ds = LeRobotDataset(args.repo_id, root=args.root)
    values = [ds.hf_dataset[i][args.column] for i in range(len(ds))]
    print(
        json.dumps(
            {
                "values": [v.tolist() if hasattr(v, "tolist") else v for v in values],
                "policy_features": sorted(dataset_to_policy_features(ds.meta.features)),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
