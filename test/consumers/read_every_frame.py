"""Open a dataset root with the installed LeRobot exactly as a user would and decode every frame.

Runs inside a consumer virtualenv (.venv-lerobot03 / 04 / 06), never in the project's .venv.
``LeRobotDataset(repo_id, root=ROOT)`` with LeRobot's defaults: ``tolerance_s`` (1e-4 s, what
``lerobot-train`` uses) and video backend (torchcodec where it loads). Every row is fetched, in a
shuffled order as a training sampler does (LeRobot 0.4 caches one decoder per file, so sequential
reads can hide what random access shows), which decodes the frame of every camera at that row's
timestamp and applies LeRobot's own checks.
Prints one JSON object: rows, frames decoded per camera, failures and the first error text, and the
warnings LeRobot logged while opening the root.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from importlib.metadata import version


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--repo-id", default="local/piper")
    args = ap.parse_args()
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    out: dict = {"lerobot": version("lerobot"), "root": args.root}
    # what LeRobot logs while it opens the root (an unknown info.json key, an older format it converts
    # or warns about): a user sees these, so they are reported
    warned: list[str] = []

    class Catcher(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warned.append(f"{record.name}: {record.getMessage()}"[:500])

    catcher = Catcher(logging.WARNING)
    logging.getLogger().addHandler(catcher)
    t0 = time.monotonic()
    try:
        ds = LeRobotDataset(args.repo_id, root=args.root)
    except Exception as e:  # noqa: BLE001 - report what the user would see
        out["open_error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(out))
        return 1
    finally:
        logging.getLogger().removeHandler(catcher)
    out["open_warnings"] = warned
    cams = list(ds.meta.camera_keys)
    # public up to 0.4.x; 0.6.1 keeps it private and hands it to its reader (lerobot_dataset.py:219, :263)
    backend = getattr(ds, "video_backend", None) or getattr(ds, "_video_backend", None)
    out.update(
        codebase_version=ds.meta.info["codebase_version"],
        tolerance_s=ds.tolerance_s,
        video_backend=backend,
        rows=len(ds),
        episodes=ds.meta.total_episodes,
        cameras=cams,
        decoded=dict.fromkeys(cams, 0),
        failed_rows=0,
        first_error=None,
        bad_images=0,
    )
    shapes = {c: tuple(ds.meta.features[c]["shape"]) for c in cams}
    import random

    order = list(range(len(ds)))
    random.Random(0).shuffle(order)
    for i in order:
        try:
            item = ds[i]
        except Exception as e:  # noqa: BLE001 - count every failing row, keep LeRobot's message
            out["failed_rows"] += 1
            if out["first_error"] is None:
                out["first_error"] = f"row {i}: {type(e).__name__}: {e}"[:2000]
            continue
        for c in cams:
            img = item[c]
            h, w, ch = shapes[c]
            ok = (
                tuple(img.shape) == (ch, h, w)
                and math.isfinite(float(img.sum()))
                and float(img.min()) >= 0.0
                and float(img.max()) <= 1.0
            )
            out["decoded"][c] += 1
            out["bad_images"] += 0 if ok else 1
    out["seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps(out))
    complete = out["failed_rows"] == 0 and out["bad_images"] == 0 and all(n == len(ds) for n in out["decoded"].values())
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
