"""Is offline conversion frame-for-frame deterministic? Convert one synthetic bag N times, compare.

Reproducer for the test_bag_ray.py::test_killed_worker_is_retried_or_fails_alone_and_a_rerun_completes
flake (one video's decoded frames differ, same count and PTS). ``--jitter`` sleeps at random in
``BagSource.decode`` (the reader thread), which changes only thread timing, not what is converted.
For each conversion it records, per video, the hash of every RGB frame given to ``VideoEncoder.add``,
of every frame the encoder thread encodes, and of every packet x264 returns, so a difference is
located: frames chosen (add), frames queued (encode input) or the encoder itself (packets).

    python bench/video_determinism.py --runs 6 --jitter

Found so far (2-core shared machine, PyAV 18.1 / FFmpeg 8 / x264 core 165, threads=1): with
``--jitter`` about one conversion in 6 has a video whose packets differ from the others while every
frame given to ``add`` and every (rgb and yuv420p) encoder input is identical.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from piper_recorder.bag import source as bag_source
from piper_recorder.bag.config import topic_map
from piper_recorder.bag.convert import ConvertOptions, convert_bag
from piper_recorder.bag.synth import SynthScenario, scenario_messages, write_bag
from piper_recorder.lerobot.writer import video_encoder
from piper_recorder.recording.config import RECORDER_CONFIGS, load_config

CAMS = ("cam_front", "cam_wrist")
LOG: dict[str, list[tuple[str, int | float, str]]] = defaultdict(list)  # video -> (what, t/pts, hash)


def _h(b: bytes) -> str:
    return hashlib.sha1(b).hexdigest()[:12]


def instrument(jitter: bool, seed: int) -> None:
    rnd = random.Random(seed)
    add = video_encoder.VideoEncoder.add

    def logged_add(self: video_encoder.VideoEncoder, rgb, t: float) -> bool:
        LOG[str(self.path)].append(("add", round(t, 6), _h(rgb.tobytes())))
        return add(self, rgb, t)

    encode, mux = video_encoder.VideoEncoder._encode, video_encoder.VideoEncoder._mux

    def logged_encode(self: video_encoder.VideoEncoder, frame) -> None:  # the encoder thread's input
        if frame is not None:
            LOG[str(self.path)].append(("in", frame.pts, _h(frame.to_ndarray(format="rgb24").tobytes())))
        encode(self, frame)

    def logged_mux(self: video_encoder.VideoEncoder, packets) -> None:  # x264's packets, in order
        packets = list(packets)
        LOG[str(self.path)].extend(("pkt", p.pts, _h(bytes(p))) for p in packets)
        mux(self, packets)

    video_encoder.VideoEncoder.add = logged_add  # type: ignore[method-assign]
    video_encoder.VideoEncoder._encode = logged_encode  # type: ignore[method-assign]
    video_encoder.VideoEncoder._mux = logged_mux  # type: ignore[method-assign]
    if jitter:
        decode = bag_source.BagSource.decode

        def slow_decode(self, raw):
            if rnd.random() < 0.05:
                time.sleep(rnd.random() * 0.003)
            return decode(self, raw)

        bag_source.BagSource.decode = slow_decode  # type: ignore[method-assign]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--jitter", action="store_true", help="random sleeps in the reader thread")
    ap.add_argument("--seed", type=int, default=24)
    a = ap.parse_args()
    instrument(a.jitter, a.seed)
    work = Path(tempfile.mkdtemp(prefix="video-determinism-"))
    try:
        cfg = work / "recorders.yaml"
        cfg.write_text(
            yaml.safe_dump(
                {
                    "lerobot_recorder": {
                        "ros__parameters": {"task": "t", "cameras": list(CAMS), "camera_width": 64, "camera_height": 48}
                    }
                }
            )
        )
        bag = write_bag(
            work / "bag",
            scenario_messages(
                SynthScenario(
                    duration_s=4.5,
                    seed=1,
                    t0_ns=1_700_000_010_000_000_000,
                    cameras=CAMS,
                    episodes=[(0.3, 1.1), (1.4, 4.2)],
                    task="task 1",
                )
            ),
            "sqlite3",
        )  # test_bag_ray's bags[1]
        settings = load_config(RECORDER_CONFIGS["lerobot"], str(cfg))
        opts = ConvertOptions(fmt="lerobot", settings=settings, topics=topic_map("lerobot", settings, None))
        runs = []
        for k in range(a.runs):
            LOG.clear()
            st = work / f"run{k}"
            res = convert_bag(1, bag, opts, st)
            assert res.status == "converted", res.error
            runs.append({Path(p).relative_to(st).parent.name + "/" + Path(p).name: list(v) for p, v in LOG.items()})
            shutil.rmtree(st)
        ref = runs[0]
        bad = 0
        for k, r in enumerate(runs[1:], 1):
            for name, ev in ref.items():
                got = r[name]  # events of the two threads interleave differently: compare each kind alone
                where = {
                    w: [
                        i
                        for i, (x, y) in enumerate(zip([e for e in ev if e[0] == w], [e for e in got if e[0] == w]))
                        if x != y
                    ][:6]
                    for w in ("add", "in", "pkt")
                }
                if not any(where.values()) and len(ev) == len(got):
                    continue
                bad += 1
                print(
                    f"run {k} vs run 0: {name}: differing add {where['add']} encoder input {where['in']} "
                    f"packets {where['pkt']}"
                )
        print(f"{a.runs} conversions, {bad} video(s) differ from run 0" + (" (reader jitter)" if a.jitter else ""))
        return 1 if bad else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
