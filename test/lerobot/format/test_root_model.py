"""The typed read model of a LeRobot v2.x root (``piper_recorder.lerobot.format.root``): what it parses from a
root the fixtures write, the paths it resolves, the modality groups, and the input errors of damaged
meta files. ROS-free.
"""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from piper_recorder.errors import DatasetError, PiperInputError, SchemaError, is_input_error
from piper_recorder.lerobot.format.root import Episode, Info, Modality, Root, Slice, Task, read_info

from support.lerobot_fixtures import small_root


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_root(tmp_path_factory.mktemp("model") / "r", lengths=(12, 9, 7))


def _lines(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().split("\n") if ln.strip()]


def test_info_fields_and_features_match_the_file(root: Path):
    raw = json.loads((root / "meta/info.json").read_text())
    m = Root.open(root)
    info = m.info
    assert info.codebase_version == raw["codebase_version"] and info.fps == raw["fps"] == 30
    assert info.chunks_size == raw["chunks_size"] and info.robot_type == raw.get("robot_type")
    assert (info.total_episodes, info.total_frames) == (3, 12 + 9 + 7)
    assert info.total_tasks == raw["total_tasks"] == 2
    assert list(info.features) == list(raw["features"])  # file order kept
    assert info.video_keys == ("observation.images.cam_front", "observation.images.cam_wrist")
    assert m.cameras == ("cam_front", "cam_wrist")
    cam = info.features["observation.images.cam_front"]
    assert cam.is_video and cam.camera == "cam_front" and cam.shape == tuple(raw["features"][cam.key]["shape"])
    assert cam.names == ("height", "width", "channels")
    assert cam.video is not None and cam.video["video.codec"] == "h264"
    eef = info.features["observation.arm_eef"]
    assert not eef.is_video and eef.camera is None and eef.video is None
    assert eef.shape == (7,) and eef.width == 7 and eef.names == tuple(raw["features"]["observation.arm_eef"]["names"])
    assert info.features["timestamp"].names is None
    assert "observation.images.cam_front" not in info.vector_features and "observation.state" in info.vector_features
    assert info.to_json() == raw and read_info(root) == info


def test_episodes_and_tasks_with_extras_kept_in_file_order(root: Path):
    raw = _lines(root / "meta/episodes.jsonl")
    m = Root.open(root)
    assert [e.index for e in m.episodes] == [0, 1, 2] and [e.length for e in m.episodes] == [12, 9, 7]
    assert [e.tasks for e in m.episodes] == [("pick the cube",), ("place the cube",), ("pick the cube",)]
    for e, line in zip(m.episodes, raw):
        assert e.to_json() == line and list(e.to_json()) == list(line)  # key order too
        assert set(e.extras) == set(line) - {"episode_index", "tasks", "length"}
        assert e.task_index == line["task_index"]
    assert m.tasks == (Task(0, "pick the cube"), Task(1, "place the cube"))
    assert [t.to_json() for t in m.tasks] == sorted(_lines(root / "meta/tasks.jsonl"), key=lambda t: t["task_index"])
    assert m.task_text(1) == "place the cube" and m.task_text(7) is None


def test_episode_parsing_splits_the_standard_keys_from_the_extras():
    e = Episode.from_json({"episode_index": 4, "tasks": ["t"], "length": 3, "verdict": "ok", "task_index": 2})
    assert (e.index, e.length, e.tasks, e.task_index) == (4, 3, ("t",), 2)
    assert dict(e.extras) == {"verdict": "ok", "task_index": 2}
    assert Episode.from_json({"episode_index": 0, "tasks": [], "length": 0}).task_index is None


def test_paths_resolve_from_the_roots_own_templates(root: Path, tmp_path: Path):
    m = Root.open(root)
    assert m.data_file(2) == root / "data/chunk-000/episode_000002.parquet" and m.data_file(2).is_file()
    want = root / "videos/chunk-000/observation.images.cam_wrist/episode_000001.mp4"
    assert m.video_file(1, "cam_wrist") == want == m.video_file(1, "observation.images.cam_wrist")
    assert want.is_file()
    # another root's templates and chunk size are followed, not ours
    doc = json.loads((root / "meta/info.json").read_text())
    doc.update(
        chunks_size=2,
        data_path="d/{episode_chunk}/{episode_index}.parquet",
        video_path="v/{video_key}/{episode_chunk:02d}-{episode_index}.mp4",
    )
    info = Info.from_json(doc)
    assert info.data_relpath(5) == "d/2/5.parquet"
    assert info.video_relpath(5, "observation.images.top") == "v/observation.images.top/02-5.mp4"
    doc.update(video_path=None, features={"x": {"dtype": "float32", "shape": [1], "names": None}})
    with pytest.raises(SchemaError, match="no video_path"):
        Info.from_json(doc).video_relpath(0, "observation.images.top")


def test_modality_groups_of_the_fixture_root(root: Path):
    m = Root.open(root)
    mod = m.modality
    assert mod is not None and mod == Modality.load(root) == Modality.load(root / "meta/modality.json")
    assert m.state_names() == ("arm_joint", "eef_pos", "eef_rot", "gripper")
    assert m.action_names() == ("eef_pos", "eef_rot", "gripper")
    assert mod.state[2] == Slice("eef_rot", "observation.arm_eef", 3, 7, "quat_wxyz")
    assert mod.action[0] == Slice("eef_pos", "action.arm_eef", 0, 3)
    assert mod.video == {"cam_front": "cam_front", "cam_wrist": "cam_wrist"}
    assert mod.language == ("annotation.human.task_description",)
    assert mod.to_json() == json.loads((root / "meta/modality.json").read_text())


def test_modality_defaults_and_gr00t_uses_the_same_classes():
    from piper_recorder.policy import gr00t

    assert gr00t.Modality is Modality and gr00t.Slice is Slice
    mod = Modality.from_json(
        {
            "state": {"s": {"start": 0, "end": 2}},
            "action": {"a": {"start": 1, "end": 3}},
            "video": {"front": {"original_key": "observation.images.cam_front"}, "top": {}},
        }
    )
    assert mod.state == (Slice("s", "observation.state", 0, 2),) and mod.action == (Slice("a", "action", 1, 3),)
    assert mod.video == {"front": "cam_front", "top": "top"}
    assert mod.language == ("annotation.human.task_description",)
    piper = Modality.load(None)  # the recorder's own layout
    assert [s.name for s in piper.state] == ["arm_joint", "eef_pos", "eef_rot", "gripper"]


@pytest.mark.parametrize(
    "doc, match",
    [
        ({"state": [1]}, "state must be an object"),
        ({"action": {"a": {"start": 0}}}, "action.a needs integer 'start' and 'end'"),
        ({"video": ["x"]}, "video and annotation must be objects"),
    ],
)
def test_malformed_modality_is_a_schema_error(doc: dict, match: str):
    with pytest.raises(SchemaError, match=match):
        Modality.from_json(doc)


def test_model_is_read_only(root: Path):
    m = Root.open(root)
    with pytest.raises(FrozenInstanceError):
        m.info.fps = 10  # type: ignore[misc]
    with pytest.raises(TypeError):
        m.info.features["x"] = m.info.features["timestamp"]  # type: ignore[index]
    with pytest.raises(TypeError):
        m.episodes[0].extras["verdict"] = "x"  # type: ignore[index]
    m.info.to_json()["features"].clear()  # a copy: the model is unchanged
    assert "timestamp" in m.info.features and "timestamp" in m.info.raw["features"]


def _copy(root: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(root / "meta", dst / "meta")
    return dst


@pytest.mark.parametrize(
    "damage, match",
    [
        (lambda p: (p / "meta/info.json").write_text("{not json"), r"meta/info.json: not valid JSON"),
        (lambda p: (p / "meta/info.json").write_text("[1, 2]"), r"meta/info.json: must be a JSON object"),
        (lambda p: (p / "meta/info.json").unlink(), r"meta/info.json: missing"),
        (lambda p: _set(p, fps=0), r"'fps' must be a positive number"),
        (lambda p: _set(p, features={"a": {"dtype": "float32"}}), r"feature 'a' must be an object"),
        (lambda p: _set(p, data_path=None), r"'data_path' must be a path template"),
        (lambda p: _set(p, total_frames="many"), r"total_episodes/total_frames/total_tasks must be integers"),
        (lambda p: (p / "meta/episodes.jsonl").write_text('{"episode_index": 0, "length": 3}\n'), r"'tasks' must be"),
        (lambda p: (p / "meta/tasks.jsonl").write_text('{"task": "x"}\n'), r"tasks.jsonl: line 1: needs an integer"),
        (lambda p: (p / "meta/modality.json").write_text('{"state": 3}'), r"modality.json: state must be an object"),
    ],
)
def test_a_damaged_meta_file_is_an_input_error_naming_it(root: Path, tmp_path: Path, damage, match: str):
    r = _copy(root, tmp_path / "r")
    damage(r)
    with pytest.raises(DatasetError, match=match) as exc:
        Root.open(r)
    assert isinstance(exc.value, PiperInputError) and is_input_error(exc.value)


def _set(root: Path, **kv) -> None:
    p = root / "meta/info.json"
    doc = json.loads(p.read_text())
    doc.update(kv)
    p.write_text(json.dumps(doc))


def test_optional_files_absent(root: Path, tmp_path: Path):
    r = _copy(root, tmp_path / "r")
    for name in ("episodes.jsonl", "tasks.jsonl", "modality.json"):
        (r / "meta" / name).unlink()
    m = Root.open(r)
    assert m.episodes == () and m.tasks == () and m.modality is None and m.state_names() == ()
    assert Root.is_root(r) and not Root.is_root(tmp_path)
    with pytest.raises(SchemaError, match="cannot read meta/modality.json"):
        Modality.load(r)
