"""The inference runtime on a training root of two arms (a bag converted by piper-bag2dataset), ROS-free, on a fake
clock: the observation carries both arms' columns in the root's order, chunk rows are the root's 16-wide action,
each arm's part goes through its own envelope against its own measured pose, a grip on either hand takes the arms
from the policy, the binding check runs per arm, and a root of one arm on a graph of two (or the reverse) is
refused in one line. Expected values are read from the root with json and pyarrow, not from the runtime's code.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from piper_recorder.policy.backend import ActionChunk, Observation
from piper_recorder.policy.config import PolicyConfig
from piper_recorder.policy.executor import ChunkExecutor
from piper_recorder.policy.observation import ObservationBuilder, TrainingMeta
from piper_recorder.policy.operator import engaged_by_arm
from piper_recorder.policy.runtime import PAUSED, RUNNING, TAKEOVER, PolicyRuntime
from piper_recorder.policy.safety import ArmsEnvelope
from piper_recorder.policy.spec import make_backend
from piper_recorder.teleop.limits import Limits, LimitsConfig
from piper_recorder.teleop.session import STATUS_MIN_PERIOD_S

from support.bimanual_roots import ARMS, copy_root
from support.lerobot_fixtures import small_root
from support.teleop_bimanual import SessionRig

P = 33_333_333  # one 30 Hz period in ns
Q_XYZW = [0.0, 0.0, 0.6, 0.8]  # ROS order, as the arm publishes it
Q_WXYZ = [0.8, 0.0, 0.0, 0.6]
START = {"left": [0.30, 0.10, 0.20], "right": [0.32, -0.20, 0.22]}  # each in its own arm's base frame
GRIP = {"left": 0.02, "right": 0.05}


def _info(root: Path) -> dict:
    return json.loads((root / "meta/info.json").read_text())


def live_provenance(root: Path) -> dict[str, dict]:
    """Each arm's /arm/provenance as the root's latest session recorded it (the binding keys agree)."""
    session = json.loads((root / "meta/collection_meta.json").read_text())
    return {arm: session["arms"][arm]["arm"]["provenance"] for arm in ARMS}


def feed(b: ObservationBuilder, t_ns: int, pos: dict[str, list[float]], arms=ARMS, cams=("cam_front",)) -> None:
    for i, arm in enumerate(arms):
        b.add_joint_state(t_ns, [0.1 * (i + 1)] * 6 + [GRIP[arm]], arm=arm)
        b.add_eef_pose(t_ns, pos[arm], Q_XYZW, arm=arm)
    for cam in cams:
        b.add_frame(cam, t_ns, np.full((48, 64, 3), (t_ns // P) % 251, dtype=np.uint8))


def row_from_names(names: list[str], values: dict[str, dict[str, float]]) -> list[float]:
    """An action row laid out by the root's own ``action`` names (``left_arm_eef.x`` ...)."""
    out = []
    for name in names:
        column, element = name.split(".")
        arm, part = column.split("_", 1)
        out.append(values[arm][element if part == "arm_eef" else "width"])
    return out


# ---- the observation ---------------------------------------------------------------------------------------
def test_the_observation_carries_each_arms_columns_and_the_state_in_the_roots_order(bimanual_training_root: Path):
    root = bimanual_training_root
    meta = TrainingMeta.load(root)
    assert meta.arms == ARMS and meta.layout.dim == 16 and meta.cameras == {"cam_front": (48, 64)}
    info = _info(root)
    assert set(meta.state_keys) == {k for k in info["features"] if k.startswith("observation.") and "images" not in k}
    b = ObservationBuilder(meta, "hand over")
    for k in range(12):
        feed(b, k * P, START)
    assert b.problems() == []
    b.start(11 * P)
    obs = None
    for k in range(12, 30):
        feed(b, k * P, START)
        obs = b.advance(k * P) or obs
    assert obs is not None
    for arm in ARMS:
        eef = obs.state[f"observation.{arm}_arm_eef"]
        assert eef == pytest.approx([*START[arm], *Q_WXYZ])  # each arm's own pose, quaternion wxyz
        assert obs.state[f"observation.{arm}_gripper"] == pytest.approx([GRIP[arm]])
    state = obs.state["observation.state"]
    names = info["features"]["observation.state"]["names"]
    assert state.shape == (28,) and len(names) == 28
    assert state[names.index("right_arm_eef.y")] == pytest.approx(START["right"][1])
    assert state[names.index("left_arm_eef.y")] == pytest.approx(START["left"][1])
    assert state[names.index("left_gripper.width")] == pytest.approx(GRIP["left"])
    assert state[names.index("right_arm_joint.joint1")] == pytest.approx(0.2)


def test_the_builder_names_the_arm_it_has_not_heard_and_an_arm_the_root_lacks(bimanual_training_root: Path):
    b = ObservationBuilder(TrainingMeta.load(bimanual_training_root), "t")
    for k in range(12):
        feed(b, k * P, START, arms=("left",))
    assert b.problems() == ["arm right: no /right/arm/eef_pose and /right/arm/joint_states received"]
    b.add_eef_pose(12 * P, START["left"], Q_XYZW)  # an unnamed arm's pose: the one-arm graph's topic
    assert "arm feedback of the unnamed arm: the training root has two arms (left, right)" in b.problems()


# ---- the runtime on a fake clock ---------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.ns = 0


class FakeServer:
    """Answers after ``latency_ns`` with rows laid out by the root's action names: each arm drifts its own way
    from its observed pose (left +x, right -x), grippers to fixed widths. ``width`` 8 answers one arm's rows.
    """

    def __init__(self, clock: Clock, names: list[str], latency_ns: int = 50_000_000, dx: float = 0.002):
        self.clock, self.names, self.latency_ns, self.dx = clock, names, latency_ns, dx
        self.pending: tuple[int, Observation, int] | None = None
        self.nan_arm: str | None = None
        self.width = len(names)

    def submit(self, obs: Observation, horizon: int) -> None:
        self.pending = (self.clock.ns + self.latency_ns, obs, horizon)

    def poll(self):
        if self.pending is None or self.clock.ns < self.pending[0]:
            return None
        _, obs, h = self.pending
        self.pending = None
        rows = []
        for k in range(h):
            values = {}
            for arm, sign in zip(ARMS, (1.0, -1.0)):
                eef = obs.state[f"observation.{arm}_arm_eef"]
                x = float(eef[0]) + sign * k * self.dx
                values[arm] = dict(zip(("x", "y", "z", "qw", "qx", "qy", "qz"), [x, *map(float, eef[1:])]))
                values[arm]["width"] = 0.03 if arm == "left" else 0.06
                if arm == self.nan_arm and k % 3 == 0:
                    values[arm]["z"] = math.nan
            rows.append(row_from_names(self.names, values)[: self.width])
        return ActionChunk(np.asarray(rows, dtype=np.float32), obs.stamp_ns, obs.stamp_ns)

    def abandon(self) -> None:
        self.pending = None


class Rig:
    """Both arms follow their targets exactly; every published target passes teleop's hard check per arm."""

    def __init__(self, root: Path, **cfg):
        self.clock = Clock()
        cfg = {"horizon": 30, "replan_every": 10, "query_ahead": 12, "lateness_s": 0.0, "arms": list(ARMS), **cfg}
        self.cfg = PolicyConfig(policy="hold", root=str(root), **cfg)
        self.builder = ObservationBuilder(TrainingMeta.load(root), "hand over", lateness_s=0.0)
        self.server = FakeServer(self.clock, _info(root)["features"]["action"]["names"])
        self.rt = PolicyRuntime(self.cfg, self.builder, make_backend("hold", root=str(root)), runner=self.server)
        self.pos = {arm: list(START[arm]) for arm in ARMS}
        self.ticks: list = []
        self.lim = Limits(self.cfg.limits)
        for _ in range(12):
            self.step(publish=False)

    def step(self, publish: bool = True) -> None:
        self.clock.ns += P
        feed(self.builder, self.clock.ns, self.pos)
        if not publish:
            return
        tick = self.rt.tick(self.clock.ns)
        prev = next((t for t in reversed(self.ticks) if t.targets), None)
        for arm, t in tick.targets.items():
            assert t.finite()
            if prev is not None:
                self.lim.check(t.p, t.q, prev.targets[arm].p, prev.targets[arm].q, self.cfg.period_s)
            self.pos[arm] = [float(v) for v in t.p]
        self.ticks.append(tick)

    def run(self, seconds: float) -> None:
        for _ in range(round(seconds * 30)):
            self.step()


@pytest.fixture
def rig(bimanual_training_root: Path) -> Rig:
    return Rig(bimanual_training_root)


def test_each_arm_follows_its_own_part_of_the_row(rig: Rig, bimanual_training_root: Path):
    ok, msg = rig.rt.start(rig.clock.ns, live_provenance(bimanual_training_root))
    assert ok, msg
    rig.run(2.0)
    st = rig.rt.status()
    assert st["state"] == RUNNING and st["arms"] == list(ARMS) and st["chunks"] >= 3, st
    assert all(set(t.targets) == set(ARMS) for t in rig.ticks) and rig.ticks[-1].target is None
    assert rig.pos["left"][0] > START["left"][0] + 0.03 and rig.pos["right"][0] < START["right"][0] - 0.03
    assert rig.pos["left"][1] == pytest.approx(START["left"][1]) and rig.pos["right"][1] == pytest.approx(-0.20)
    last = rig.ticks[-1].targets
    assert last["left"].gripper == pytest.approx(0.03) and last["right"].gripper == pytest.approx(0.06)
    assert st["limit_hits"] == {"left": {}, "right": {}}


def test_a_non_finite_value_on_one_arm_holds_both_for_that_tick(rig: Rig, bimanual_training_root: Path):
    rig.server.nan_arm = "right"
    assert rig.rt.start(rig.clock.ns, live_provenance(bimanual_training_root))[0]
    rig.run(2.0)
    hits = rig.rt.status()["limit_hits"]
    assert hits["right"]["non_finite"] > 0 and "non_finite" not in hits["left"]
    assert hits["left"]["other_arm"] == hits["right"]["non_finite"]  # the left arm held with it, every time
    assert rig.rt.state == RUNNING
    pairs = [(a.targets, b.targets) for a, b in zip(rig.ticks, rig.ticks[1:]) if a.targets and b.targets]
    moved = [tuple(bool(np.linalg.norm(b[arm].p - a[arm].p) > 1e-5) for arm in ARMS) for a, b in pairs]
    assert all(left == right for left, right in moved)  # never one arm alone: both move or both hold
    assert sum(not left for left, _ in moved) >= hits["right"]["non_finite"]
    assert rig.pos["left"][0] > START["left"][0] + 0.02  # the good rows still move both arms


def test_each_arm_is_tethered_to_its_own_measured_pose(bimanual_training_root: Path):
    meta = TrainingMeta.load(bimanual_training_root)
    env = ArmsEnvelope(meta.layout, LimitsConfig(tether_m=0.05, max_linear_speed=3.0), 0.07, 1 / 30)
    measured = {a: np.array(START[a]) for a in ARMS}
    env.reset({a: (measured[a], np.array(Q_XYZW), GRIP[a]) for a in ARMS})
    names = _info(bimanual_training_root)["features"]["action"]["names"]
    want = {a: [*START[a], *Q_WXYZ] for a in ARMS}
    want["left"][1] += 0.2  # far beyond the left arm's tether; near the right arm's pose in numbers
    want["right"][0] += 0.005
    values = {a: {**dict(zip(("x", "y", "z", "qw", "qx", "qy", "qz"), want[a])), "width": GRIP[a]} for a in ARMS}
    out = env.apply(np.array(row_from_names(names, values)), measured)
    assert out is not None
    assert np.linalg.norm(out["left"].p - measured["left"]) <= 0.05 + 1e-9
    assert out["right"].p == pytest.approx(want["right"][:3])  # untouched by the left arm's limit
    assert env.hits == {"left": {"tether": 1}, "right": {}}


def test_ensembling_aligns_each_arms_quaternion_sign(bimanual_training_root: Path):
    layout = TrainingMeta.load(bimanual_training_root).layout
    ex = ChunkExecutor(P, "ensemble", ensemble_m=0.5, layout=layout)
    row = np.zeros(16)
    for arm in layout.arms:
        row[arm.pose_at : arm.pose_at + 7] = [0.3, 0.0, 0.2, *Q_WXYZ]
    flipped = row.copy()
    flipped[layout.slots("right").quat] *= -1.0  # the right arm's same orientation, other sign
    ex.add(ActionChunk(np.tile(row, (10, 1)).astype(np.float32), 0, 0), now_ns=0)
    ex.add(ActionChunk(np.tile(flipped, (10, 1)).astype(np.float32), P, P), now_ns=P)
    out = ex.action(2 * P)
    for arm in layout.arms:
        assert np.abs(out[arm.quat]) == pytest.approx(Q_WXYZ, abs=1e-6)  # not averaged towards zero


def test_rows_of_one_arm_from_a_server_pause_with_both_widths(rig: Rig, bimanual_training_root: Path):
    rig.server.width = 8
    assert rig.rt.start(rig.clock.ns, live_provenance(bimanual_training_root))[0]
    rig.run(0.5)
    assert rig.rt.state == PAUSED
    assert "rows have 8 values, the training root's action 16 (two arms (left, right)" in rig.rt.reason


def test_a_stale_arm_pauses_naming_it(rig: Rig, bimanual_training_root: Path):
    assert rig.rt.start(rig.clock.ns, live_provenance(bimanual_training_root))[0]
    rig.run(0.5)
    for _ in range(30):  # the right arm's feedback stops
        rig.clock.ns += P
        feed(rig.builder, rig.clock.ns, rig.pos, arms=("left",))
        rig.rt.tick(rig.clock.ns)
    assert rig.rt.state == PAUSED and rig.rt.reason.startswith("stale arm: right newest feedback"), rig.rt.reason
    assert set(rig.rt.ages(rig.clock.ns)) == {"left_arm", "right_arm", "cam_front"}


# ---- the operator ------------------------------------------------------------------------------------------
def test_a_grip_on_either_hand_takes_the_arms_from_the_policy_until_resumed(rig: Rig, bimanual_training_root: Path):
    assert rig.rt.start(rig.clock.ns, live_provenance(bimanual_training_root))[0]
    rig.run(0.5)
    assert rig.rt.on_joy(rig.clock.ns, 0.95, hand="left")
    assert rig.rt.state == TAKEOVER and rig.rt.reason == "operator grip on /quest/left/joy (left arm)"
    n = len([t for t in rig.ticks if t.targets])
    rig.run(0.5)
    assert len([t for t in rig.ticks if t.targets]) == n and rig.ticks[-1].actor == "operator"  # neither arm
    rig.rt.on_joy(rig.clock.ns, 0.0, hand="right")  # the other hand open changes nothing
    ok, msg = rig.rt.resume(rig.clock.ns)
    assert not ok and "left arm: the operator's grip is held on /quest/left/joy" in msg, msg
    rig.rt.on_joy(rig.clock.ns, 0.1, hand="left")
    assert rig.rt.resume(rig.clock.ns)[0]
    rig.run(0.3)
    assert len([t for t in rig.ticks if t.targets]) > n
    rig.rt.operator.on_joy(rig.clock.ns, 0.9, hand="right")  # the gate alone: the next tick takes over
    rig.step()
    assert rig.rt.state == TAKEOVER and "right arm" in rig.rt.reason and not rig.ticks[-1].targets


def test_teleops_two_arm_status_says_which_clutch_is_engaged(rig: Rig, bimanual_training_root: Path):
    teleop = SessionRig()
    teleop.joy["right"].squeeze = 1.0
    teleop.step()
    teleop.wait(STATUS_MIN_PERIOD_S)
    status = json.loads(json.dumps(teleop.session.status()))  # as /teleop/status carries it
    assert engaged_by_arm(status, ARMS) == {"left": False, "right": True}
    assert engaged_by_arm({"engaged": True}) == {None: True} and engaged_by_arm({"engaged": "yes"}) == {}
    assert rig.rt.start(rig.clock.ns, live_provenance(bimanual_training_root))[0]
    for arm, engaged in engaged_by_arm(status, ARMS).items():
        rig.rt.on_teleop_status(rig.clock.ns, engaged, arm=arm)
    assert rig.rt.state == TAKEOVER and rig.rt.reason == "teleop clutch engaged (right arm)"


def test_what_does_not_name_its_arm_errs_towards_the_operator(rig: Rig, bimanual_training_root: Path):
    """A node that does not say which hand or arm (the one-arm subscriptions): a joy message is the configured
    hand's, teleop's top-level ``engaged`` (any arm) holds every arm.
    """
    assert rig.rt.start(rig.clock.ns, live_provenance(bimanual_training_root))[0]
    assert rig.rt.on_joy(rig.clock.ns, 0.9)  # hand: right, the default
    assert rig.rt.reason == "operator grip on /quest/right/joy (right arm)"
    rig.rt.on_joy(rig.clock.ns, 0.0)
    assert rig.rt.resume(rig.clock.ns)[0]
    assert rig.rt.on_teleop_status(rig.clock.ns, True)
    assert set(rig.rt.operator.holders(rig.clock.ns)) == set(ARMS)
    rig.rt.on_teleop_status(rig.clock.ns, False)
    assert rig.rt.resume(rig.clock.ns)[0]


# ---- binding and the arms ----------------------------------------------------------------------------------
def test_binding_is_checked_per_arm(bimanual_training_root: Path):
    live = live_provenance(bimanual_training_root)
    live["right"] = {**live["right"], "backend": "impedance"}
    rig = Rig(bimanual_training_root, on_binding_mismatch="refuse")
    ok, msg = rig.rt.start(rig.clock.ns, live)
    assert not ok and 'arms.right.control.backend: trained "position" != live "impedance"' in msg, msg
    assert "arms.left" not in msg
    warn = Rig(bimanual_training_root, on_binding_mismatch="warn")
    ok, msg = warn.rt.start(warn.clock.ns, live)
    assert ok and "WARNING" in msg
    assert [m[0] for m in warn.rt.provenance()["binding_mismatches"]] == ["arms.right.control.backend"]


def test_a_root_of_one_arm_on_two_arms_and_the_reverse_refuse_the_start_in_one_line(
    tmp_path: Path, bimanual_training_root: Path
):
    one = small_root(tmp_path / "one")
    cfg = PolicyConfig(policy="hold", root=str(one), arms=list(ARMS), on_binding_mismatch="warn")
    rt = PolicyRuntime(cfg, ObservationBuilder(TrainingMeta.load(one), "t"), make_backend("hold"))
    ok, msg = rt.start(0, live_provenance(bimanual_training_root))
    assert not ok and "\n" not in msg
    assert msg == (
        "refused: the training root was recorded with one arm, this node drives two arms (left, right) "
        "(a policy drives the arms it was trained on: run the node with no arms parameter)"
    )
    two = Rig(bimanual_training_root, arms=[], on_binding_mismatch="warn")
    ok, msg = two.rt.start(two.clock.ns, {"backend": "position"})
    assert not ok and msg.startswith("refused: the training root was recorded with two arms (left, right), ")
    assert msg.endswith("run the node with arms:=left,right)")


def test_hold_and_replay_answer_every_arm_in_the_roots_layout(tmp_path: Path, bimanual_training_root: Path):
    root = copy_root(bimanual_training_root, tmp_path / "root")
    t = pq.read_table(root / "data/chunk-000/episode_000000.parquet")
    action = np.asarray(t["action"].to_pylist(), dtype=np.float64)
    names = _info(root)["features"]["action"]["names"]
    for i in (names.index("left_arm_eef.qw"), names.index("right_arm_eef.qw")):  # unit quaternions, as replayed
        q = action[:, i : i + 4]
        action[:, i : i + 4] = q / np.linalg.norm(q, axis=1, keepdims=True)
    replay = make_backend(f"replay:{root}:0")
    first = replay.predict(Observation("t", {}, {}, stamp_ns=10**9), 5)
    assert first.rows.shape == (5, 16) and first.rows == pytest.approx(action[:5].astype(np.float32), abs=1e-6)

    state = {f"observation.{a}_arm_eef": np.array([*START[a], *Q_WXYZ], np.float32) for a in ARMS}
    state |= {f"observation.{a}_gripper": np.array([GRIP[a]], np.float32) for a in ARMS}
    rows = make_backend("hold", root=str(root)).predict(Observation("t", state, {}, 7), 3).rows
    assert rows.shape == (3, 16)
    assert rows[0, names.index("right_arm_eef.y")] == pytest.approx(-0.20)
    assert rows[0, names.index("left_gripper.width")] == pytest.approx(0.02)
    assert rows[0, names.index("right_gripper.width")] == pytest.approx(0.05)
