"""Rollout rows say who acted (#13 item 6): the ``actor`` input of the feature table.

The std_msgs/String /policy/actor (latched, the policy node's "none" | "policy" | "operator") becomes
the float32 column ``complementary_info.actor`` (0 / 1 / 2), held from the last message at or before
each row's grid time, 0 before the first; opt-in, so a recording without it keeps the Piper columns.
Read back with pyarrow and checked with piper-validate and lerobot-doctor (separate processes). The
live proof (real policy node, takeover mid-episode) is in test_policy_sim.py.
"""

from __future__ import annotations

import heapq
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from piper_recorder.assembly.messages import ACTOR_CODES, ACTOR_TOPIC, make_adapter
from piper_recorder.bag.synth import SynthScenario, T, scenario_messages, write_bag
from piper_recorder.cli.bag2dataset import main as bag2dataset
from piper_recorder.features.table import ACTOR_FEATURE, ACTOR_INPUT, OPT_IN, PIPER_TABLE
from piper_recorder.graph.plan import plan_graph
from piper_recorder.lerobot.format.features import piper_features
from piper_recorder.lerobot.writer.meta_builders import modality_json
from piper_recorder.recording.config import (
    LeRobotRecorderConfig,
    RgbdRecorderConfig,
    lerobot_writer_config,
    rgbd_writer_config,
)
from piper_recorder.recording.inputs import topic_map
from piper_recorder.recording.router import LATCHED, STREAM, InputRouter

from support.paths import ROOT

pytestmark = pytest.mark.timeout(180)
BIN = Path(sys.executable).parent
STRING = "std_msgs/msg/String"
COLUMN = "complementary_info.actor"
FPS = 30
W, H = 64, 48


def actor(value: str):
    return T[STRING](data=value)


# ---- the adapter and the table entry ---------------------------------------------------------------
def test_actor_adapter_reads_the_policy_nodes_values_as_codes():
    a = make_adapter("actor")
    assert a.msg_type == STRING and a.dim == 1 and not a.stamped
    got = {v: a.read(actor(v)) for v in ("none", "policy", "operator", " operator\n", "teleop", "")}
    assert [float(got[v][0]) for v in ("none", "policy", "operator", " operator\n")] == [0.0, 1.0, 2.0, 2.0]
    assert got["none"].dtype == np.float32 and got["none"].shape == (1,)
    assert got["teleop"] is None and got[""] is None  # unknown: no sample, the row keeps the last code
    assert ACTOR_CODES == {"none": 0.0, "policy": 1.0, "operator": 2.0}


def test_actor_entry_is_opt_in_and_appends_one_column():
    assert ACTOR_INPUT not in PIPER_TABLE.inputs and (ACTOR_INPUT, (ACTOR_FEATURE,)) in OPT_IN
    assert not ACTOR_INPUT.required and ACTOR_INPUT.latched and ACTOR_INPUT.formats == ("lerobot",)
    # default: the Piper table as it was (no input, no column, no route)
    plain = topic_map("lerobot", LeRobotRecorderConfig())
    assert plain.table == PIPER_TABLE and "actor" not in plain.inputs
    assert [
        f.key for f in lerobot_writer_config(LeRobotRecorderConfig(), plain.cameras, table=plain.table).features
    ] == [f.key for f in piper_features()]
    # the recorder parameter switches it on: one optional, latched input, one column appended last
    cfg = LeRobotRecorderConfig(actor_topic=ACTOR_TOPIC)
    cfg.validate()
    tm = topic_map("lerobot", cfg)
    assert tm.topic("actor") == ACTOR_TOPIC and tm.optional()[ACTOR_TOPIC] == STRING
    assert ACTOR_TOPIC not in tm.required(depth=False)
    wcfg = lerobot_writer_config(cfg, tm.cameras, table=tm.table)
    assert [f.key for f in wcfg.features] == [f.key for f in piper_features()] + [COLUMN]
    assert wcfg.features[-1].names == ("actor",) and wcfg.features[-1].combined is None
    assert "actor" not in cfg.assembly(None, tm.table).table.required  # never holds rows back
    modality = modality_json(wcfg)  # not a state/action modality a policy slices
    assert all(e["original_key"] != COLUMN for sec in ("state", "action") for e in modality[sec].values())
    assert tm.to_dict()["inputs"] == {"actor": {"topic": ACTOR_TOPIC, "adapter": "actor"}}
    routes = {r.topic: r.kind for r in InputRouter(tm, _Sink(), depth=False).routes}
    assert routes[ACTOR_TOPIC] == LATCHED and routes["/arm/joint_states"] == STREAM
    # RGB-D has no role for it: its state terms stay the Piper ones
    r = topic_map("rgbd", RgbdRecorderConfig())
    assert "actor" not in r.inputs and rgbd_writer_config(RgbdRecorderConfig(), r.cameras, table=r.table).env_args[
        "state_terms"
    ] == ["arm_joint", "arm_eef", "gripper"]
    with pytest.raises(ValueError, match="actor_topic"):
        LeRobotRecorderConfig(actor_topic="policy/actor").validate()


def test_a_mapping_file_names_the_actor_topic(tmp_path):
    m = tmp_path / "m.yaml"
    m.write_text(yaml.safe_dump({"actor": "/rollout/actor"}))
    tm = topic_map("lerobot", LeRobotRecorderConfig(), m)
    assert tm.topic("actor") == "/rollout/actor" and tm.table.columns()[COLUMN] == "actor"
    m.write_text(yaml.safe_dump({"actor": None}))  # null: off, even if the parameter names a topic
    assert "actor" not in topic_map("lerobot", LeRobotRecorderConfig(actor_topic=ACTOR_TOPIC), m).inputs


class _Sink:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, list[float]]] = []

    def add_input(self, name, stamp_ns, values):
        self.calls.append((name, stamp_ns, np.asarray(values).tolist()))

    def add_frame(self, camera, stamp_ns, rgb, depth=None): ...
    def add_color(self, camera, stamp_ns, rgb): ...
    def add_depth(self, camera, stamp_ns, depth): ...
    def add_raw_quest(self, stamp_ns, line): ...


def test_router_stamps_actor_messages_with_the_receive_time():
    sink = _Sink()
    router = InputRouter(topic_map("lerobot", LeRobotRecorderConfig(actor_topic=ACTOR_TOPIC)), sink, depth=False)
    for t, v in ((10, "policy"), (20, "bogus"), (30, "operator")):
        router.route(ACTOR_TOPIC, actor(v), t)
    assert sink.calls == [("actor", 10, [1.0]), ("actor", 30, [2.0])]


# ---- through the converter: codes per row ----------------------------------------------------------
@pytest.mark.integration
def test_rollout_bag_converts_to_rows_that_say_who_acted(tmp_path):
    """A rollout bag: the latched "policy" before the episode, a takeover at 1.6 s, back to the policy
    at 2.2 s; every row holds the code of the last message at or before its grid time.
    """
    scen = SynthScenario(duration_s=3.0, episodes=[(0.5, 2.5)], cameras=("cam_front",), width=W, height=H)
    changes = [(0.2, "policy"), (1.6, "operator"), (2.2, "policy")]
    recv = [scen.t0_ns + round(s * 1e9) for s, _ in changes]
    extra = [(ACTOR_TOPIC, STRING, t, actor(v)) for t, (_, v) in zip(recv, changes)]
    bag = write_bag(tmp_path / "bag", heapq.merge(scenario_messages(scen), extra, key=lambda m: m[2]))
    cfg = tmp_path / "recorders.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "lerobot_recorder": {
                    "ros__parameters": {
                        "cameras": ["cam_front"],
                        "camera_width": W,
                        "camera_height": H,
                        "actor_topic": ACTOR_TOPIC,
                    }
                }
            }
        )
    )
    root = tmp_path / "lerobot"
    assert (
        bag2dataset([str(bag), "--format", "lerobot", "--out", str(root), "--config", str(cfg), "--no-progress"]) == 0
    )
    (ep,) = [json.loads(x) for x in (root / "meta/episodes.jsonl").read_text().splitlines()]
    t = pq.read_table(root / "data/chunk-000/episode_000000.parquet")
    assert t.column_names[:6] == [f.key for f in piper_features()] + [COLUMN]
    assert str(t.schema.field(COLUMN).type) == str(t.schema.field("observation.gripper").type) == "float"
    got = t.column(COLUMN).to_numpy().reshape(t.num_rows, 1)  # width 1: a plain float32, as the gripper
    assert got.dtype == np.float32
    start = ep["source"]["start_ns"]
    want = [
        ACTOR_CODES[changes[int(np.searchsorted(recv, start + k * 1_000_000_000 // FPS, side="right")) - 1][1]]
        for k in range(t.num_rows)
    ]
    assert got[:, 0].tolist() == want
    assert want.count(2.0) > 10 and want[0] == 1.0 and want[-1] == 1.0  # the takeover is inside the episode
    info = json.loads((root / "meta/info.json").read_text())
    assert info["features"][COLUMN] == {"dtype": "float32", "shape": [1], "names": ["actor"]}
    assert info["features"]["observation.state"]["shape"] == [14]  # joins no combined column
    stats = json.loads((root / "meta/stats.json").read_text())[COLUMN]
    assert stats["min"] == [1.0] and stats["max"] == [2.0]
    modality = json.loads((root / "meta/modality.json").read_text())
    assert COLUMN not in json.dumps(modality)
    p = subprocess.run([str(BIN / "piper-validate"), str(root)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    doctor = BIN / "lerobot-doctor"
    if not doctor.exists():
        pytest.skip("lerobot-doctor is not installed in this venv")
    p = subprocess.run([str(doctor), "check", str(root), "--ci"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.fixture(scope="module")
def rollout_root(tmp_path_factory) -> tuple[Path, list[float]]:
    """A converted bag whose first /policy/actor message comes mid-episode (0.9 s; the episode runs
    0.5-2.0 s), then a takeover at 1.4 s; and its column as written.
    """
    tmp = tmp_path_factory.mktemp("rollout")
    scen = SynthScenario(duration_s=2.5, episodes=[(0.5, 2.0)], cameras=("cam_front",), width=W, height=H)
    extra = [
        (ACTOR_TOPIC, STRING, scen.t0_ns + round(s * 1e9), actor(v)) for s, v in ((0.9, "policy"), (1.4, "operator"))
    ]
    bag = write_bag(tmp / "bag", heapq.merge(scenario_messages(scen), extra, key=lambda m: m[2]))
    cfg = tmp / "recorders.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "lerobot_recorder": {
                    "ros__parameters": {
                        "cameras": ["cam_front"],
                        "camera_width": W,
                        "camera_height": H,
                        "actor_topic": ACTOR_TOPIC,
                    }
                }
            }
        )
    )
    assert (
        bag2dataset(
            [str(bag), "--format", "lerobot", "--out", str(tmp / "lerobot"), "--config", str(cfg), "--no-progress"]
        )
        == 0
    )
    t = pq.read_table(tmp / "lerobot" / "data/chunk-000/episode_000000.parquet")
    return tmp / "lerobot", t.column(COLUMN).to_pylist()


def test_rows_before_the_first_actor_message_carry_none_and_are_not_held_back(rollout_root):
    root, written = rollout_root
    (ep,) = [json.loads(x) for x in (root / "meta/episodes.jsonl").read_text().splitlines()]
    assert ep["skipped_start_ticks"] == 0 and len(written) == ep["length"] > 40
    first = [written.index(c) for c in (0.0, 1.0, 2.0)]
    assert first[0] == 0 and 8 <= first[1] < first[2] <= len(written) - 10  # none, policy, operator ...
    assert written == sorted(written)  # ... in that order, held


@pytest.mark.integration
def test_lerobot_reads_the_actor_column_and_offers_it_to_no_policy(rollout_root, tmp_path):
    """LeRobot 0.3.3 (the consumer venv) gives every row's code; the column is not a policy feature."""
    from support.consumers import SCRIPTS, consumer_env, consumer_python, run_json

    root, written = rollout_root
    assert set(written) == {0.0, 1.0, 2.0}
    p, rep = run_json(
        [str(consumer_python("lerobot03")), str(SCRIPTS / "read_column.py"), str(root), COLUMN],
        consumer_env(tmp_path / "hf"),
        600,
    )
    assert p.returncode == 0 and rep, p.stdout[-2000:] + p.stderr[-2000:]
    assert rep["values"] == written
    assert "observation.state" in rep["policy_features"] and COLUMN not in rep["policy_features"]


def test_the_same_bag_without_the_actor_topic_keeps_the_piper_columns(tmp_path):
    scen = SynthScenario(duration_s=2.0, episodes=[(0.5, 1.5)], cameras=("cam_front",), width=W, height=H)
    extra = [(ACTOR_TOPIC, STRING, scen.t0_ns + 100_000_000, actor("policy"))]
    bag = write_bag(tmp_path / "bag", heapq.merge(scenario_messages(scen), extra, key=lambda m: m[2]))
    cfg = tmp_path / "recorders.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {"lerobot_recorder": {"ros__parameters": {"cameras": ["cam_front"], "camera_width": W, "camera_height": H}}}
        )
    )
    root = tmp_path / "lerobot"
    assert (
        bag2dataset([str(bag), "--format", "lerobot", "--out", str(root), "--config", str(cfg), "--no-progress"]) == 0
    )
    info = json.loads((root / "meta/info.json").read_text())
    assert COLUMN not in info["features"]
    assert COLUMN not in pq.read_table(root / "data/chunk-000/episode_000000.parquet").column_names


# ---- the launcher switches it on with the policy node ----------------------------------------------
def test_launcher_records_the_actor_whenever_the_policy_node_runs(tmp_path):
    sim = ROOT / "config" / "sim.yaml"
    plan = plan_graph("sim", sim, [], tmp_path / "a", policy="hold")
    assert plan.config["lerobot_recorder"]["actor_topic"] == ACTOR_TOPIC
    assert "actor_topic" not in plan.config.get("rgbd_recorder", {})
    plain = plan_graph("sim", sim, [], tmp_path / "b")
    assert "actor_topic" not in plain.config["lerobot_recorder"]
