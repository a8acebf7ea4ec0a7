"""LeRobot's own inference on one ``/predict`` request, independently of piper-policy-server's code:
the reference the served answer is compared with. Runs inside a consumer virtualenv.

The batch is built here from the request JSON (Pillow JPEG decode, CHW float in [0, 1],
observation.state = arm_joint + arm_eef + gripper as the recorder writes it), then LeRobot's
standard loop: pre-processor (0.4.x) -> ``select_action`` n_action_steps times (the policy's own
action queue) -> post-processor. Prints one JSON object with the rows.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("request", help="a /predict request body (JSON file)")
    args = ap.parse_args()

    import numpy as np
    import torch
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class
    from PIL import Image

    req = json.loads(open(args.request).read())
    cfg = PreTrainedConfig.from_pretrained(args.checkpoint)
    cfg.device = "cpu"
    policy = get_policy_class(cfg.type).from_pretrained(args.checkpoint, config=cfg)
    policy.eval()
    batch: dict = {}
    for key in cfg.input_features:
        if key.startswith("observation.images."):
            raw = base64.b64decode(req["images"][key.split(".", 2)[2]])
            rgb = np.asarray(Image.open(io.BytesIO(raw)).convert("RGB"))
            batch[key] = torch.from_numpy(rgb.copy()).permute(2, 0, 1).float() / 255.0
        elif key == "observation.state":
            s = req["state"]
            vec = s["observation.arm_joint"] + s["observation.arm_eef"] + s["observation.gripper"]
            batch[key] = torch.tensor(vec, dtype=torch.float32)
    try:
        from lerobot.policies.factory import make_pre_post_processors
    except ImportError:
        make_pre_post_processors = None
    if make_pre_post_processors is not None:
        pre, post = make_pre_post_processors(cfg, pretrained_path=args.checkpoint)
        batch["task"] = req["task"]
        batch = pre(batch)
    else:
        post = None
        batch = {k: v.unsqueeze(0) for k, v in batch.items()}
        batch["task"] = [req["task"]]
    policy.reset()
    rows = []
    with torch.no_grad():
        for _ in range(int(cfg.n_action_steps)):
            a = policy.select_action(batch)
            rows.append(post(a) if post is not None else a)
    out = torch.cat(rows).numpy()
    print(json.dumps({"rows": out.tolist(), "n_action_steps": int(cfg.n_action_steps)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
