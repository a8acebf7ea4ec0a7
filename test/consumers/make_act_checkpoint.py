"""Save a small, randomly initialised LeRobot ACT checkpoint for a recorded root, as lerobot-train
would: input features from the root's info.json (observation.state + every camera at its recorded
size), output ``action``, normalisation from the root's meta/stats.json. LeRobot 0.3.x keeps the
statistics inside the policy; 0.4.x saves them as pre/post-processor pipelines next to the weights.
Runs inside a consumer virtualenv; prints one JSON object describing what it saved.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import version
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("out")
    ap.add_argument("--chunk", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy

    root = Path(args.root)
    info = json.loads((root / "meta" / "info.json").read_text())
    stats_json = json.loads((root / "meta" / "stats.json").read_text())
    feats = info["features"]
    inputs = {"observation.state": PolicyFeature(FeatureType.STATE, tuple(feats["observation.state"]["shape"]))}
    for key, f in feats.items():
        if f.get("dtype") == "video":
            h, w, c = f["shape"]  # LeRobot's convention: names [height, width, channels]
            inputs[key] = PolicyFeature(FeatureType.VISUAL, (c, h, w))
    outputs = {"action": PolicyFeature(FeatureType.ACTION, tuple(feats["action"]["shape"]))}
    cfg = ACTConfig(
        input_features=inputs,
        output_features=outputs,
        device="cpu",
        push_to_hub=False,
        pretrained_backbone_weights=None,
        dim_model=64,
        n_heads=4,
        dim_feedforward=128,
        n_encoder_layers=1,
        n_decoder_layers=1,
        use_vae=False,
        chunk_size=args.chunk,
        n_action_steps=args.chunk,
    )
    stats = {
        k: {s: torch.tensor(v, dtype=torch.float32) for s, v in st.items() if s in ("mean", "std", "min", "max")}
        for k, st in stats_json.items()
        if k in inputs or k in outputs
    }
    missing = sorted(k for k in (*inputs, *outputs) if k not in stats)
    if missing:
        print(f"{root}: meta/stats.json has no statistics for {missing}", file=sys.stderr)
        return 1
    torch.manual_seed(args.seed)
    out = Path(args.out)
    try:  # LeRobot >= 0.4: normalisation in processor pipelines
        from lerobot.policies.factory import make_pre_post_processors
    except ImportError:
        make_pre_post_processors = None
    if make_pre_post_processors is None:
        policy = ACTPolicy(cfg, dataset_stats=stats)
        policy.save_pretrained(out)
    else:
        policy = ACTPolicy(cfg)
        policy.save_pretrained(out)
        pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
        pre.save_pretrained(out)
        post.save_pretrained(out)
    print(
        json.dumps(
            {
                "lerobot": version("lerobot"),
                "checkpoint": str(out),
                "inputs": sorted(inputs),
                "files": sorted(p.name for p in out.iterdir()),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
