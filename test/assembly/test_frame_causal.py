"""Frames are causal: a row's frame was captured at or before the row (1 ms of clock
noise allowed), never the next capture, on the bag path (real rosbags, the converter, PyAV / h5py /
imagecodecs reading the output) as on the live path (the same assembler, synthetic stamps).

The phase-locked pairing used to take the capture nearest the row, up to half a period after it: a
camera firing a few ms after each row gave every row the next frame, and the RGB-D depth of it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import av
import h5py
import imagecodecs
import numpy as np
import pytest
import yaml

from piper_recorder.bag.synth import agilex_scenario, scenario_messages, write_bag
from piper_recorder.cli.bag2dataset import main as bag2dataset
from piper_recorder.lerobot.validate import validate_root

from support.frame_pairing import MS, PERIOD, assemble, camera, check

pytestmark = pytest.mark.timeout(180)
W, H = 64, 48
FIRST_S, LAST_S = 0.2, 10.2  # the episode: 301 rows at 30 fps, on the camera's own grid


def agilex_bag(tmp: Path, delay_ms: float) -> tuple[Path, Path]:
    """An AgileX-layout bag (joint7 gripper, one /camera RealSense) whose camera fires ``delay_ms``
    after each row time, and the mapping file the converter needs for it.
    """
    s = agilex_scenario(duration_s=LAST_S + 0.5, width=W, height=H)
    # --episode ranges count from the bag's first message, received latency_ns after t0
    s.camera_delay_ns = round(delay_ms * MS) + s.latency_ns
    bag = write_bag(tmp / "bag", scenario_messages(s), "mcap")
    mapping = tmp / "agilex.yaml"
    mapping.write_text(
        yaml.safe_dump(
            {
                "joint_states": {
                    "topic": "/joint_states_single",
                    "names": [f"joint{i}" for i in range(1, 8)],
                    "gripper_scale": 0.001,
                },
                "eef_pose": "/end_pose_stamped",
                "commanded_pose": "/end_pose_stamped",
                "commanded_gripper": {"topic": "/joint_states_single", "name": "joint7", "scale": 0.001},
                "cameras": {
                    "cam_front": {
                        "color": "/camera/color/image_raw",
                        "depth": "/camera/aligned_depth_to_color/image_raw",
                        "width": W,
                        "height": H,
                    }
                },
                "raw_quest": None,
                "provenance": None,
            }
        )
    )
    return bag, mapping


def convert(bag: Path, mapping: Path, fmt: str, out: Path) -> None:
    assert (
        bag2dataset(
            [
                str(bag),
                "--format",
                fmt,
                "--out",
                str(out),
                "--mapping",
                str(mapping),
                "--episode",
                f"{FIRST_S}:{LAST_S}",
                "--task",
                "causal",
                "--no-progress",
            ]
        )
        == 0
    )


def capture_index(row: int) -> int:
    """The synthetic capture k (at k / 30 s + delay) that is the newest at or before row ``row``."""
    return round(FIRST_S * 30) + row - 1


@pytest.mark.parametrize("delay_ms", [3.0, 6.0])
@pytest.mark.slow
def test_bag_camera_firing_after_each_row_gives_each_row_the_frame_before_it(tmp_path, delay_ms):
    bag, mapping = agilex_bag(tmp_path, delay_ms)
    h5 = tmp_path / "causal.hdf5"
    convert(bag, mapping, "rgbd", h5)
    with h5py.File(h5, "r") as f:  # depth is lossless: its first pixel names the capture (800 + 10 (k % 100))
        depth = [imagecodecs.jpeg2k_decode(bytes(b))[0, 0] for b in f["observations/depth_jp2"]]
    assert len(depth) == 301
    want = [800 + 10 * (capture_index(i) % 100) for i in range(301)]
    assert [int(d) for d in depth] == want  # 301 of 301: the capture before the row, one-to-one

    root = tmp_path / "lerobot"
    convert(bag, mapping, "lerobot", root)
    (ep,) = [json.loads(x) for x in (root / "meta" / "episodes.jsonl").read_text().splitlines()]
    assert (
        ep["length"] == 301 and ep["frames_repeated"] == {"cam_front": 0} and ep["frames_dropped"] == {"cam_front": 0}
    )
    assert ep["frames_ahead"] == {"cam_front": 0} and ep["frame_ahead_max_ms"] == {"cam_front": 0.0}
    assert ep["frame_behind_max_ms"]["cam_front"] == pytest.approx(PERIOD / 1e6 - delay_ms, abs=0.01)
    assert validate_root(root) == []
    # the video (PyAV): each row's frame is capture_index(row), told apart from its neighbours by what the
    # synthetic camera paints (red and green ramps moving with k, blue noise pattern k % 8: synth._camera)
    yy, xx = np.mgrid[0:H, 0:W]
    noise = np.random.default_rng(0).integers(0, 256, (8, H, W), dtype=np.uint8)

    def painted(k: int) -> np.ndarray:
        return np.stack([(xx + k) % 256, (yy * 2 + 3 * k) % 256, noise[k % 8]], axis=-1).astype(float)

    got = []
    with av.open(str(root / "videos/chunk-000/observation.images.cam_front/episode_000000.mp4")) as c:
        for i, fr in enumerate(c.decode(video=0)):
            rgb = fr.to_ndarray(format="rgb24").astype(float)
            k0 = capture_index(i)
            err = {k: np.mean((rgb - painted(k)) ** 2) for k in (k0 - 1, k0, k0 + 1)}
            got.append(min(err, key=err.__getitem__) - k0)
    assert got == [0] * 301


@pytest.mark.parametrize("delay_ms", [1.5, 3.0, 8.0, 16.0])
@pytest.mark.parametrize("jitter_ms", [0.0, 2.0])
def test_live_camera_after_each_row_pairs_the_capture_at_or_before_it(delay_ms, jitter_ms):
    stamps = camera(10.0, delay_ms, jitter_ms, seed=round(delay_ms * 10))
    pairs, c = assemble(stamps, 10.0)
    repeats, drops, _ = check(pairs, stamps, c)
    assert len(pairs) == 301 and repeats == 0 and drops == 0
    assert all(s <= t for t, s in pairs)  # never a later capture
    assert all(t - s <= PERIOD + 2 * jitter_ms * MS + 5 * MS for t, s in pairs)
    if jitter_ms == 0:  # without jitter: exactly the newest capture at or before the row
        assert all(s == max(x for x in stamps if x <= t) for t, s in pairs)
    assert c.frames_ahead["cam"] == 0 and c.frame_ahead_max_ms["cam"] == 0.0


@pytest.mark.parametrize("seed", range(6))
def test_live_jittery_camera_at_any_phase_is_causal_one_to_one_and_bounded(seed):
    """±10 ms jitter at a random phase: no repeat, no drop, no capture more than 1 ms after its row,
    none older than one period plus the jitter band (20 ms) plus the first slot's margin (<= 4.2 ms).
    """
    phase_ms = random.Random(seed).uniform(-16.6, 16.6)
    stamps = camera(10.0, phase_ms, 10.0, seed=seed + 40)
    pairs, c = assemble(stamps, 10.0)
    repeats, drops, _ = check(pairs, stamps, c)
    assert repeats == 0 and drops == 0, phase_ms
    assert all(s - t <= MS for t, s in pairs), phase_ms
    assert all(t - s <= PERIOD + 20 * MS + 4.2 * MS for t, s in pairs), phase_ms
    ahead = max(0, max(s - t for t, s in pairs))
    behind = max(t - s for t, s in pairs)
    assert c.frame_ahead_max_ms["cam"] == pytest.approx(ahead / 1e6, abs=1e-3)
    assert c.frame_behind_max_ms["cam"] == pytest.approx(behind / 1e6, abs=1e-3)
    assert c.frames_ahead["cam"] == sum(1 for t, s in pairs if s > t)
