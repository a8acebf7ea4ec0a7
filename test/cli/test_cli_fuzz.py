"""Every command on corrupted input (#16.9): a clear message and exit code 2, never a traceback.

Corrupted LeRobot roots (each meta file, a parquet and an mp4 truncated, garbled, removed or given a
wrong JSON type), RGB-D HDF5 files (truncated, bytes flipped, datasets and attributes deleted) and
bags (truncated, garbled) go through piper-validate (exit 0, or 1 listing problems, or 2),
piper-view, piper-finalize, piper-bag2dataset and the recorders' writer open (which the nodes turn
into exit 2). The commands run in-process through their ``main`` (what the console scripts call),
so a genuine bug surfaces as exit code 1 with its traceback (or the exception itself where no
command wraps the call); a few run as real processes to check stderr.
Seeded and bounded: a few dozen cases.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from piper_recorder.bag.synth import SynthScenario, scenario_messages, write_bag
from piper_recorder.cli import bag2dataset, dataset, finalize, validate, view

from support.lerobot_fixtures import small_root

pytestmark = pytest.mark.timeout(180)
BIN = Path(sys.executable).parent
W, H = 64, 48
SEED = 16


# ---- corruptions --------------------------------------------------------------------------------
def truncate(p: Path, rng: random.Random) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: rng.randrange(0, max(1, len(data) // 2))])


def garble(p: Path, rng: random.Random) -> None:
    data = bytearray(p.read_bytes())
    for _ in range(max(4, len(data) // 200)):
        i = rng.randrange(len(data))
        data[i] = rng.randrange(256)
    p.write_bytes(bytes(data))


def remove(p: Path, rng: random.Random) -> None:
    p.unlink()


def retype(p: Path, rng: random.Random) -> None:
    """Valid JSON of the wrong shape: the whole document, or one value in it, becomes another type."""
    if p.suffix == ".jsonl":
        lines = [json.loads(x) for x in p.read_text().splitlines()]
        victim = rng.choice(lines)
        key = rng.choice(sorted(victim))
        victim[key] = rng.choice([[victim[key]], "x", None, {"a": 1}])
        p.write_text("".join(json.dumps(x) + "\n" for x in lines))
        return
    doc = json.loads(p.read_text())
    if rng.random() < 0.3 or not isinstance(doc, dict):
        doc = [doc]
    else:
        key = rng.choice(sorted(doc))
        doc[key] = rng.choice([list(doc[key].values()) if isinstance(doc[key], dict) else [doc[key]], "x", None, 7])
    p.write_text(json.dumps(doc))


FILE_OPS = {"truncate": truncate, "garble": garble, "remove": remove}
JSON_OPS = {**FILE_OPS, "retype": retype}


def root_cases() -> list[tuple[str, str]]:
    """(file under the root, operation): every meta file with every operation, then payload files."""
    meta = ["meta/info.json", "meta/episodes.jsonl", "meta/tasks.jsonl", "meta/stats.json", "meta/modality.json"]
    cases = [(f, op) for f in meta for op in JSON_OPS]
    cases += [("meta/info.json", "features_list"), ("meta/info.json", "retype")]  # the reported one, and another
    cases += [("data/chunk-000/episode_000001.parquet", op) for op in FILE_OPS]
    cases += [("videos/chunk-000/observation.images.cam_front/episode_000000.mp4", op) for op in FILE_OPS]
    return cases


def corrupt_root(root: Path, rel: str, op: str, rng: random.Random) -> None:
    p = root / rel
    if op == "features_list":
        info = json.loads(p.read_text())
        info["features"] = list(info["features"])
        p.write_text(json.dumps(info))
    else:
        JSON_OPS[op](p, rng)


def h5_cases(path: Path) -> list[tuple[str, str]]:
    with h5py.File(path, "r") as f:
        datasets: list[str] = []
        f.visititems(lambda name, obj: datasets.append(name) if isinstance(obj, h5py.Dataset) else None)
        attrs = [("", a) for a in f.attrs] + [(d, a) for d in datasets for a in f[d].attrs]
    rng = random.Random(SEED)
    cases = [("truncate", ""), ("truncate", ""), ("flip", ""), ("flip", ""), ("flip", "")]
    cases += [("del_dataset", d) for d in rng.sample(datasets, 6)]
    cases += [("del_attr", f"{o}@{a}") for o, a in rng.sample(attrs, 6)]
    return cases


def corrupt_h5(path: Path, op: str, what: str, rng: random.Random) -> None:
    if op == "truncate":
        truncate(path, rng)
    elif op == "flip":
        data = bytearray(path.read_bytes())
        for _ in range(64):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
    elif op == "del_dataset":
        with h5py.File(path, "r+") as f:
            del f[what]
    else:
        obj, attr = what.split("@")
        with h5py.File(path, "r+") as f:
            del (f[obj] if obj else f).attrs[attr]


# ---- fixtures -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("fuzz")
    cfg = d / "recorders.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "lerobot_recorder": {
                    "ros__parameters": {
                        "task": "fuzz",
                        "cameras": ["cam_front", "cam_wrist"],
                        "camera_width": W,
                        "camera_height": H,
                    }
                },
                "rgbd_recorder": {
                    "ros__parameters": {"task": "fuzz", "camera": "cam_front", "camera_width": W, "camera_height": H}
                },
            }
        )
    )
    bag = write_bag(
        d / "bag",
        scenario_messages(SynthScenario(duration_s=0.8, episodes=[(0.1, 0.6)], cameras=("cam_front", "cam_wrist"))),
    )
    from piper_recorder.recording.config import RgbdRecorderConfig, load_config, rgbd_writer_config
    from rgbd_writer import RgbdWriter

    h5 = d / "good.hdf5"
    w = RgbdWriter(h5, rgbd_writer_config(load_config(RgbdRecorderConfig, cfg)))
    rng = np.random.default_rng(0)
    for steps in (4, 3):
        w.start_episode(seed=0)
        for t in range(steps + 1):
            w.add_observation(
                rng.integers(0, 256, (H, W, 3), dtype=np.uint8),
                rng.uniform(0.2, 3.0, (H, W)).astype(np.float32),
                {
                    "arm_joint": rng.normal(size=6).astype(np.float32),
                    "arm_eef": rng.normal(size=7).astype(np.float32),
                    "gripper": rng.normal(size=1).astype(np.float32),
                },
            )
            if t < steps:
                w.add_transition(rng.normal(size=8).astype(np.float32), 0.0, terminal=t == steps - 1)
        w.end_episode(success=True)
    w.close()
    return {"root": small_root(d / "root"), "h5": h5, "cfg": cfg, "bag": bag}


def run_main(capsys, fn, argv: list[str], allowed: tuple[int, ...] = (0, 2)) -> tuple[int, str]:
    rc = fn([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert rc in allowed, (argv, rc, err)
    if rc == 2:
        assert err.strip(), f"exit 2 without a message: {argv}"
    if fn is bag2dataset.main:  # it reports any failure of a bag or of the output, so check it is not a bug's
        assert not any(f"{t}:" in err and f"({t}:" not in err for t in BUG_TYPES), err
    return rc, err


def open_writer(kind: str, path: Path, cfg: Path) -> None:
    """The recorder node's writer open: it may succeed or raise what the node maps to exit 2."""
    from piper_recorder.errors import is_input_error
    from piper_recorder.recording.config import (
        LeRobotRecorderConfig,
        RgbdRecorderConfig,
        lerobot_writer_config,
        load_config,
        rgbd_writer_config,
    )

    try:
        if kind == "lerobot":
            from piper_recorder.lerobot.writer import LeRobotWriter

            w = LeRobotWriter(path, lerobot_writer_config(load_config(LeRobotRecorderConfig, cfg)))
        else:
            from rgbd_writer import RgbdWriter

            w = RgbdWriter(path, rgbd_writer_config(load_config(RgbdRecorderConfig, cfg)))
    except Exception as exc:
        if not is_input_error(exc):
            raise
        assert str(exc)
        return
    w.close()


# ---- tests --------------------------------------------------------------------------------------
@pytest.mark.parametrize("rel, op", root_cases())
@pytest.mark.slow
def test_corrupted_lerobot_root(tmp_path, capsys, inputs, rel, op):
    rng = random.Random(f"{SEED}{rel}{op}")
    root = tmp_path / "root"
    shutil.copytree(inputs["root"], root)
    corrupt_root(root, rel, op, rng)
    run_main(capsys, validate.main, [root], (1, 2))
    run_main(capsys, view.main, [root, "--out", tmp_path / "r.html", "--link-videos"])
    run_main(capsys, finalize.main, ["--root", root, "--horizon", "4"])
    open_writer("lerobot", root, inputs["cfg"])
    run_main(capsys, dataset.main, ["delete", root, "--episodes", "0", "--out", tmp_path / "edited"], (0, 1, 2))
    run_main(
        capsys,
        bag2dataset.main,
        [inputs["bag"], "--format", "lerobot", "--out", root, "--config", inputs["cfg"], "--no-progress"],
        (0, 1, 2),
    )


@pytest.mark.slow
def test_corrupted_rgbd_files(tmp_path, capsys, inputs):
    for i, (op, what) in enumerate(h5_cases(inputs["h5"])):
        rng = random.Random(f"{SEED}{i}")
        h5 = tmp_path / f"case{i}.hdf5"
        shutil.copyfile(inputs["h5"], h5)
        corrupt_h5(h5, op, what, rng)
        rc, _ = run_main(capsys, validate.main, [h5], (0, 1, 2))
        assert rc or op != "truncate", (op, what)  # a flipped bit may land in unused bytes, some data are optional
        run_main(capsys, view.main, [h5, "--out", tmp_path / "r.html"])
        run_main(capsys, finalize.main, ["--root", h5], (2,))  # not a LeRobot root: said so
        open_writer("rgbd", h5, inputs["cfg"])
        run_main(capsys, dataset.main, ["retask", h5, "--rename", "a=b", "--out", tmp_path / f"e{i}.hdf5"], (0, 1, 2))
        run_main(
            capsys,
            bag2dataset.main,
            [inputs["bag"], "--format", "rgbd", "--out", h5, "--config", inputs["cfg"], "--no-progress"],
            (0, 1, 2),
        )


def garble_payload(p: Path, rng: random.Random) -> None:
    """Bytes flipped past the database header and schema: the bag opens, messages fail to decode."""
    data = bytearray(p.read_bytes())
    for _ in range(64):
        i = rng.randrange(len(data) // 2, len(data))
        data[i] ^= 0xFF
    p.write_bytes(bytes(data))


BUG_TYPES = ("TypeError", "AttributeError", "KeyError", "IndexError", "NameError", "UnboundLocalError")


@pytest.mark.parametrize("op", ["truncate", "garble", "garble_payload"])
def test_corrupted_bags(tmp_path, capsys, inputs, op):
    """A bad bag fails alone (exit 1, FAILED with the reason); the reason is never a bug's exception."""
    bag = tmp_path / "bag"
    shutil.copytree(inputs["bag"], bag)
    (db,) = bag.glob("*.db3")
    {**FILE_OPS, "garble_payload": garble_payload}[op](db, random.Random(SEED))
    for fmt, out in (("lerobot", tmp_path / "ds"), ("rgbd", tmp_path / "x.hdf5")):
        rc, err = run_main(
            capsys,
            bag2dataset.main,
            [bag, "--format", fmt, "--out", out, "--config", inputs["cfg"], "--no-progress"],
            (0, 1),
        )
        assert rc == 0 or f"FAILED {bag}" in err, err
        assert not any(t in err for t in BUG_TYPES), err


@pytest.mark.parametrize(
    "cmd",
    [
        ["piper-view", "{root}", "--out", "{tmp}/r.html"],
        ["piper-finalize", "--root", "{root}"],
        ["piper-bag2dataset", "{bag}", "--format", "lerobot", "--out", "{root}", "--config", "{cfg}", "--no-progress"],
    ],
)
@pytest.mark.integration
def test_console_scripts_on_info_json_with_features_as_a_list(tmp_path, inputs, cmd):
    root = tmp_path / "root"
    shutil.copytree(inputs["root"], root)
    corrupt_root(root, "meta/info.json", "features_list", random.Random(0))
    args = [a.format(root=root, tmp=tmp_path, bag=inputs["bag"], cfg=inputs["cfg"]) for a in cmd]
    p = subprocess.run([str(BIN / args[0]), *args[1:]], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "features" in p.stderr, p.stderr


def test_recorders_exit_2_on_bad_camera_names_and_damaged_roots(ros_domain, tmp_path, inputs):
    """A camera name is a plain identifier, checked before anything touches the disk; a damaged root
    is refused with a message. Exit code 2 and no traceback in every case.
    """
    broken = tmp_path / "broken"
    shutil.copytree(inputs["root"], broken)
    corrupt_root(broken, "meta/info.json", "truncate", random.Random(1))
    retyped = tmp_path / "retyped"
    shutil.copytree(inputs["root"], retyped)
    corrupt_root(retyped, "meta/info.json", "features_list", random.Random(1))
    h5 = tmp_path / "x" / "rgbd.hdf5"
    cases = [
        (["piper-lerobot-recorder", "-p", f"root:={tmp_path / 'new'}", "-p", "cameras:=[../../x]"], "camera name"),
        (["piper-rgbd-recorder", "-p", f"path:={h5}", "-p", "camera:=../../x"], "camera name"),
        (["piper-lerobot-recorder", "-p", f"root:={broken}"], "info.json"),
        (["piper-lerobot-recorder", "-p", f"root:={retyped}"], "'features' must be an object"),
    ]
    for (exe, *params), needle in cases:
        p = subprocess.run(
            [
                str(BIN / exe),
                "--ros-args",
                "-p",
                "task:=t",
                "-p",
                f"camera_width:={W}",
                "-p",
                f"camera_height:={H}",
                *params,
            ],
            env=ros_domain.env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        out = p.stdout + p.stderr
        assert p.returncode == 2 and "Traceback" not in out and needle in out, (params, p.returncode, out)
    assert not (tmp_path / "new").exists() and not h5.parent.exists()  # nothing created on disk
