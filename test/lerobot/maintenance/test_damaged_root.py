"""A root damaged by something other than a crash is refused by the writer and by piper-bag2dataset (exit 2)
with the reason and the way out, nothing moved; piper-recover (dry run first) rebuilds it and the result
validates and takes appends. Checked with the independent validator, pyarrow and hashes of every file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from piper_recorder.bag.synth import SynthScenario, scenario_messages, write_bag
from piper_recorder.cli.bag2dataset import main as bag2dataset
from piper_recorder.lerobot.format.errors import DatasetError
from piper_recorder.lerobot.validate import validate_root
from piper_recorder.lerobot.writer import LeRobotWriter
from piper_recorder.recording.config import LeRobotRecorderConfig, lerobot_writer_config, load_config

from support.lerobot_data import tree_hashes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
BIN = Path(sys.executable).parent
CAMS = ["cam_front", "cam_wrist"]


def config_file(path: Path, cameras: list[str]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "lerobot_recorder": {
                    "ros__parameters": {"task": "fold", "cameras": cameras, "camera_width": 64, "camera_height": 48}
                }
            }
        )
    )
    return path


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A 3-episode root converted from a bag, a second bag to append, and the configs."""
    d = tmp_path_factory.mktemp("damaged")
    both, front = config_file(d / "both.yaml", CAMS), config_file(d / "front.yaml", CAMS[:1])
    bags = [
        write_bag(
            d / f"bag{k}",
            scenario_messages(
                SynthScenario(
                    duration_s=3.5,
                    cameras=tuple(CAMS),
                    depth=False,
                    episodes=[(0.3, 1.0), (1.3, 2.0), (2.3, 3.0)][: 3 - 2 * k],
                    seed=k,
                    t0_ns=1_700_000_000_000_000_000 + k * 10**10,
                )
            ),
        )
        for k in (0, 1)
    ]
    root = d / "root"
    assert convert(bags[0], root, both) == 0
    return root, bags, both, front


def convert(bag: Path, root: Path, cfg: Path) -> int:
    return bag2dataset([str(bag), "--format", "lerobot", "--out", str(root), "--config", str(cfg), "--no-progress"])


def wcfg(cfg: Path):
    return lerobot_writer_config(load_config(LeRobotRecorderConfig, cfg), offline=True)


def recover(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "piper-recover"), *map(str, args)], capture_output=True, text=True, timeout=120)


def copy_of(made, tmp_path: Path) -> Path:
    import shutil

    root = tmp_path / "root"
    shutil.copytree(made[0], root)
    return root


def parquet_rows(root: Path) -> list[int]:
    return [pq.read_table(p).num_rows for p in sorted(root.glob("data/chunk-*/*.parquet"))]


def assert_refused_untouched(root: Path, both: Path, front: Path, bag: Path, what: str, capsys) -> None:
    before = tree_hashes(root)
    with pytest.raises(DatasetError) as err:
        LeRobotWriter(root, wcfg(both))
    assert what in str(err.value) and "piper-recover" in str(err.value)
    for cfg in (both, front):  # the converter run had one camera fewer than the root
        capsys.readouterr()
        assert convert(bag, root, cfg) == 2
        err = capsys.readouterr().err  # the damage, or (info.json present) the camera set that differs
        assert "piper-recover" in err or "different configuration" in err, err
    assert tree_hashes(root) == before, "a refused open must not move or write anything"
    assert not (root / ".recovered").exists()


def test_missing_info_json_is_refused_then_recovered(made, tmp_path, capsys):
    _, bags, both, front = made
    root = copy_of(made, tmp_path)
    rows = parquet_rows(root)
    (root / "meta/info.json").unlink()
    assert_refused_untouched(root, both, front, bags[1], "meta/info.json is missing", capsys)
    before = tree_hashes(root)
    wrong = recover(root, "--config", front)
    assert wrong.returncode == 1 and "videos on disk" in wrong.stderr and tree_hashes(root) == before
    dry = recover(root, "--config", both, "--dry-run")
    assert dry.returncode == 0 and "write meta/info.json" in dry.stdout and tree_hashes(root) == before
    res = recover(root, "--config", both)
    assert res.returncode == 0, res.stderr
    assert validate_root(root, full=True) == []
    assert parquet_rows(root) == rows and json.loads((root / "meta/info.json").read_text())["total_episodes"] == 3
    assert {k: v for k, v in tree_hashes(root).items() if k.startswith(("data/", "videos/"))} == {
        k: v for k, v in before.items() if k.startswith(("data/", "videos/"))
    }
    assert convert(bags[1], root, both) == 0
    assert validate_root(root, full=True) == [] and len(parquet_rows(root)) == 4


def test_emptied_episodes_jsonl_is_refused_then_rebuilt(made, tmp_path, capsys):
    _, bags, both, front = made
    root = copy_of(made, tmp_path)
    lines = [json.loads(x) for x in (root / "meta/episodes.jsonl").read_text().split("\n") if x]
    (root / "meta/episodes.jsonl").write_text("")
    assert_refused_untouched(root, both, front, bags[1], "lists only 0", capsys)
    res = recover(root, "--config", both)
    assert res.returncode == 0, res.stderr
    assert "rebuilt 3 lines" in res.stdout and not (root / ".recovered").exists()
    assert validate_root(root, full=True) == []
    back = [json.loads(x) for x in (root / "meta/episodes.jsonl").read_text().split("\n") if x]
    keys = ("episode_index", "tasks", "task_index", "length", "video_frame_lengths")
    assert [{k: e[k] for k in keys} for e in back] == [{k: e[k] for k in keys} for e in lines]
    assert all(e["recovered_by"] == "piper-recover" for e in back)
    assert convert(bags[1], root, both) == 0 and len(parquet_rows(root)) == 4


def test_recover_moves_what_no_episode_names_and_leaves_a_healthy_root_alone(made, tmp_path):
    _, _, both, _ = made
    root = copy_of(made, tmp_path)
    res = recover(root, "--config", both, "--dry-run")
    assert res.returncode == 0 and "nothing to recover" in res.stdout
    # an episode whose parquet lost its index continuity cannot be rebuilt: its files go aside, never deleted
    (root / "meta/episodes.jsonl").write_text((root / "meta/episodes.jsonl").read_text().split("\n", 1)[0] + "\n")
    stray = root / "data/chunk-000/episode_000001.parquet"
    pq.write_table(pq.read_table(root / "data/chunk-000/episode_000000.parquet"), stray)  # wrong episode_index
    res = recover(root, "--config", both)
    assert res.returncode == 0, res.stderr
    assert "episode 1 is on disk but cannot be rebuilt (parquet episode_index" in res.stdout
    moved = sorted(p.relative_to(root).as_posix() for p in (root / ".recovered").rglob("*") if p.is_file())
    assert len(moved) == 2 * 3 + 2  # episodes 1 and 2: parquet, 2 videos, raw lines
    assert validate_root(root, full=True) == [] and len(parquet_rows(root)) == 1


def test_a_crash_leftover_is_still_cleaned_up_without_asking(made, tmp_path):
    """What a crash can leave (the one unsaved episode n's files, info.json one episode ahead) is not damage."""
    _, _, both, _ = made
    root = copy_of(made, tmp_path)
    saved = {k: v for k, v in tree_hashes(root).items() if k.startswith(("data/", "videos/", "extras/"))}
    leftover = root / "data/chunk-000/episode_000003.parquet"
    leftover.write_bytes(b"partial")
    info = json.loads((root / "meta/info.json").read_text())
    (root / "meta/info.json").write_text(json.dumps({**info, "total_episodes": 4}))
    w = LeRobotWriter(root, wcfg(both))
    w.close()
    assert any("moved unreferenced data/chunk-000/episode_000003.parquet" in r for r in w.repairs)
    assert {k: v for k, v in tree_hashes(root).items() if k.startswith(("data/", "videos/", "extras/"))} == saved
    assert validate_root(root, full=True) == []
