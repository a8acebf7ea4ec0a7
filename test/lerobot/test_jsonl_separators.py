r"""Line-break code points (U+2028, U+2029, U+0085, \x1c-\x1e, \v, \f, \r) in a task or in the headset
hello: every JSON-lines file stays one record per line for any splitter, the root reopens, validates,
renders and takes appended bag conversions; a root written before the escaping is still read.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from piper_recorder.bag.synth import SynthScenario, scenario_messages, write_bag
from piper_recorder.cli.bag2dataset import main as bag2dataset
from piper_recorder.lerobot.format.errors import DatasetError
from piper_recorder.lerobot.validate import validate_root
from piper_recorder.lerobot.writer import CameraSpec, LeRobotWriter, WriterConfig

from support.lerobot_data import H, W, index_frame, row_values

BIN = Path(sys.executable).parent
SEPS = ["\u2028", "\u2029", "\x85", "\x1c", "\x1d", "\x1e", "\x0b", "\x0c", "\r"]
TASKS = [f"pick{s}the cube" for s in SEPS]
HELLO = {"device": "Quest 3" + "".join(SEPS), "app": "teleop\u2028v1"}
META_JSONL = ("episodes.jsonl", "tasks.jsonl", "collection_sessions.jsonl")


def cfg() -> WriterConfig:
    return WriterConfig(fps=30, cameras={"cam_front": CameraSpec(H, W)})


def record_episode(w: LeRobotWriter, task: str, seed: int, n: int = 6) -> None:
    w.start_episode(task)
    for k in range(n):
        w.add_row(k / 30, row_values(k / 30, seed))
        w.add_frame("cam_front", index_frame(k), k / 30)
    w.save_episode()


def lines_by_newline(path: Path) -> list[dict]:
    r"""Independent reader: bytes split on b"\n" only."""
    return [json.loads(x) for x in path.read_bytes().split(b"\n") if x.strip()]


def tool(name: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / name), *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.mark.integration
def test_separators_in_tasks_and_hello_keep_the_root_usable(tmp_path):
    root = tmp_path / "ds"
    with LeRobotWriter(root, cfg()) as w:
        w.begin_session({"recording": {"fps": 30}, "headset": HELLO})
        for i, task in enumerate(TASKS):
            record_episode(w, task, i)
    for name in META_JSONL:
        text = (root / "meta" / name).read_text(encoding="utf-8")
        assert len(text.splitlines()) == text.count("\n"), f"{name}: a splitlines() reader would cut a record"
    assert [t["task"] for t in lines_by_newline(root / "meta/tasks.jsonl")] == TASKS
    assert lines_by_newline(root / "meta/collection_sessions.jsonl")[0]["headset"] == HELLO
    # the recorder restarting on the root: reopens, reuses the task indices, appends
    with LeRobotWriter(root, cfg()) as w:
        assert w.total_episodes == len(TASKS)
        w.begin_session({"recording": {"fps": 30}, "headset": HELLO})
        record_episode(w, TASKS[0], 99)
    eps = lines_by_newline(root / "meta/episodes.jsonl")
    assert [e["tasks"][0] for e in eps] == TASKS + [TASKS[0]] and eps[-1]["task_index"] == 0
    assert validate_root(root, full=True) == []
    res = tool("piper-validate", root)
    assert res.returncode == 0, res.stdout + res.stderr
    res = tool("piper-view", root, "--out", tmp_path / "r.html")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.integration
def test_root_written_with_raw_separators_is_still_read(tmp_path):
    r"""What the old writer left: the code points raw inside JSON strings (valid JSON on one \n line)."""
    root = tmp_path / "ds"
    with LeRobotWriter(root, cfg()) as w:
        w.begin_session({"recording": {"fps": 30}, "headset": HELLO})
        for i, task in enumerate(TASKS[:3]):
            record_episode(w, task, i)
    for name in META_JSONL:
        path = root / "meta" / name
        rows = lines_by_newline(path)
        path.write_bytes(b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in rows))
        assert "\u2028" in path.read_text(encoding="utf-8")
    with LeRobotWriter(root, cfg()) as w:
        assert w.total_episodes == 3
        record_episode(w, TASKS[1], 7)
    eps = lines_by_newline(root / "meta/episodes.jsonl")
    assert [e["task_index"] for e in eps] == [0, 1, 2, 1]
    assert validate_root(root, full=True) == []
    assert tool("piper-view", root, "--out", tmp_path / "r.html").returncode == 0


def test_a_broken_line_is_named_with_its_file_and_line(tmp_path):
    root = tmp_path / "ds"
    with LeRobotWriter(root, cfg()) as w:
        record_episode(w, "a", 0)
        record_episode(w, "b", 1)
    path = root / "meta/episodes.jsonl"
    first, _second = path.read_text().split("\n")[:2]
    path.write_text(first + "\n" + '{"episode_index": 1, "tasks": ["b' + "\n")
    with pytest.raises(DatasetError) as err:
        LeRobotWriter(root, cfg())
    assert str(path) in str(err.value) and "line 2" in str(err.value)


@pytest.mark.slow
def test_bag_conversion_appends_to_a_root_with_separator_tasks(tmp_path):
    conf = tmp_path / "recorders.yaml"
    conf.write_text(
        yaml.safe_dump(
            {
                "lerobot_recorder": {
                    "ros__parameters": {"cameras": ["cam_front"], "camera_width": 64, "camera_height": 48}
                }
            }
        )
    )
    out = tmp_path / "ds"
    for k, task in enumerate(("wipe\u2028the table", "stack\x85blocks\u2029now")):
        bag = write_bag(
            tmp_path / f"bag{k}",
            scenario_messages(
                SynthScenario(
                    duration_s=1.5,
                    episodes=[(0.3, 1.2)],
                    task=task,
                    seed=k,
                    t0_ns=1_700_000_000_000_000_000 + k * 10**10,
                )
            ),
        )
        assert (
            bag2dataset([str(bag), "--format", "lerobot", "--out", str(out), "--config", str(conf), "--no-progress"])
            == 0
        )
    eps = lines_by_newline(out / "meta/episodes.jsonl")
    assert [e["tasks"] for e in eps] == [["wipe\u2028the table"], ["stack\x85blocks\u2029now"]]
    assert validate_root(out, full=True) == []
