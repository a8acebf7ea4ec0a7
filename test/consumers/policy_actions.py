"""Load a checkpoint saved by ``lerobot-train`` and ask it for actions on samples of the dataset it was
trained on. Runs inside a consumer virtualenv (LeRobot 0.3.x normalizes inside the policy; 0.4.x
saves pre/post-processor pipelines next to the weights and the caller applies them).
Prints one JSON object: the action shape and whether every value is finite.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import version


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint", help="…/checkpoints/last/pretrained_model")
    ap.add_argument("root")
    ap.add_argument("--repo-id", default="local/piper")
    ap.add_argument("--samples", type=int, default=3)
    args = ap.parse_args()

    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.policies.act.modeling_act import ACTPolicy

    policy = ACTPolicy.from_pretrained(args.checkpoint)
    policy.eval()
    try:  # LeRobot >= 0.4: normalization lives in saved processor pipelines
        from lerobot.policies.factory import make_pre_post_processors
    except ImportError:
        make_pre_post_processors = None
    pre = post = None
    if make_pre_post_processors is not None:
        pre, post = make_pre_post_processors(policy.config, pretrained_path=args.checkpoint)

    ds = LeRobotDataset(args.repo_id, root=args.root)
    inputs = set(policy.config.input_features)
    actions = []
    step = max(1, len(ds) // args.samples)
    for i in range(0, step * args.samples, step):
        item = ds[i]
        batch = {k: v.unsqueeze(0) for k, v in item.items() if k in inputs}
        batch["task"] = [item.get("task", "")]
        policy.reset()
        with torch.no_grad():
            if pre is not None:
                batch = pre(batch)
            a = policy.select_action(batch)
            if post is not None:
                a = post(a)
        actions.append(a)
    a = torch.cat(actions)
    out = {
        "lerobot": version("lerobot"),
        "inputs": sorted(inputs),
        "action_shape": list(a.shape),
        "action_dim": int(ds.meta.features["action"]["shape"][0]),
        "finite": bool(torch.isfinite(a).all()),
        "first_action": [round(float(v), 5) for v in a[0]],
    }
    print(json.dumps(out))
    return 0 if out["finite"] and out["action_shape"][-1] == out["action_dim"] else 1


if __name__ == "__main__":
    sys.exit(main())
