"""The ROS-free inference runtime: executor, envelope, binding check, observation builder, runtime states.

Everything runs on a fake clock (explicit ns), so seconds of control run in milliseconds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from piper_recorder.lerobot.format.action_layout import ActionLayout
from piper_recorder.policy.backend import ActionChunk, BackendError, BackendTimeout, Observation
from piper_recorder.policy.binding import live_record, mismatches
from piper_recorder.policy.config import PolicyConfig
from piper_recorder.policy.executor import ChunkExecutor, LeadTime
from piper_recorder.policy.observation import MetaError, ObservationBuilder, TrainingMeta
from piper_recorder.policy.runtime import PAUSED, RUNNING, STOPPED, TAKEOVER, PolicyRuntime
from piper_recorder.policy.safety import Envelope
from piper_recorder.policy.spec import make_backend
from piper_recorder.teleop.limits import Limits, LimitsConfig

from support.lerobot_fixtures import small_root

P = 33_333_333  # one 30 Hz period in ns
Q_ID_WXYZ = [1.0, 0.0, 0.0, 0.0]


def rows(n: int, x0: float = 0.3, dx: float = 0.0, g: float = 0.03) -> np.ndarray:
    return np.array([[x0 + k * dx, 0.0, 0.2, *Q_ID_WXYZ, g] for k in range(n)], dtype=np.float32)


# ---- executor ------------------------------------------------------------------------------------
def test_receding_takes_the_due_row_and_drops_rows_whose_time_passed():
    ex = ChunkExecutor(P, "receding", replan_every=5, query_ahead=3)
    t0 = 1_000 * P
    ex.add(ActionChunk(rows(10, dx=0.01), t0, t0), now_ns=t0 + 4 * P + 5)  # answered 4 periods late
    assert ex.counters.rows_dropped_late == 4
    assert ex.action(t0 + 4 * P + 5)[0] == pytest.approx(0.34)
    assert ex.action(t0 + 7 * P)[0] == pytest.approx(0.37)
    assert not ex.want_query(t0 + 6 * P)  # 2 executed, 4 left
    assert ex.want_query(t0 + 7 * P)  # 3 rows left = query_ahead
    assert ex.action(t0 + 10 * P) is None  # ran out: nothing due


def test_receding_newest_chunk_wins_and_an_older_answer_is_ignored():
    ex = ChunkExecutor(P, "receding")
    ex.add(ActionChunk(rows(20, x0=0.3), 0, 0), now_ns=0)
    ex.add(ActionChunk(rows(20, x0=0.4), 5 * P, 5 * P), now_ns=6 * P)
    ex.add(ActionChunk(rows(20, x0=0.5), 2 * P, 2 * P), now_ns=6 * P)  # late answer to an older obs
    assert ex.action(7 * P)[0] == pytest.approx(0.4)


def test_ensemble_uses_act_exponential_weights_and_sign_aligned_quaternions():
    m = 0.5
    ex = ChunkExecutor(P, "ensemble", ensemble_m=m)
    a = rows(10, x0=0.30)
    b = rows(10, x0=0.40)
    b[:, 3:7] *= -1.0  # the same orientation with the other sign
    ex.add(ActionChunk(a, 0, 0), now_ns=0)
    ex.add(ActionChunk(b, 2 * P, 2 * P), now_ns=2 * P)
    out = ex.action(3 * P)
    w = np.array([1.0, math.exp(-m)])
    w /= w.sum()
    assert out[0] == pytest.approx(w[0] * 0.30 + w[1] * 0.40)
    assert np.allclose(np.abs(out[3:7]), Q_ID_WXYZ, atol=1e-6)  # not averaged to zero


# ---- envelope ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_envelope_counts_each_limit_and_every_output_passes_teleops_hard_check():
    cfg = LimitsConfig(max_linear_speed=0.3, max_angular_speed=1.0, tether_m=0.1)
    env = Envelope(cfg, gripper_max=0.07, period_s=1 / 30)
    env.reset(np.array([0.5, 0.0, 0.2]), np.array([0, 0, 0, 1.0]), 0.03)
    lim = Limits(cfg)
    rng = np.random.default_rng(1)
    measured = np.array([0.5, 0.0, 0.2])  # near the box's x edge: the tether alone does not keep targets in
    for i in range(2000):
        q = rng.normal(size=4)
        q *= (1.0 if i % 11 else 1.5) / np.linalg.norm(q)
        row = np.concatenate([measured + rng.uniform(-0.3, 0.3, 3), q, rng.uniform(-0.1, 0.2, 1)])
        if i % 7 == 0:
            row[rng.integers(0, 8)] = [np.nan, np.inf, -np.inf][i % 3]
        prev = env.prev
        out = env.apply(row, measured)
        if out is None:
            assert env.prev is prev  # unusable row: the caller holds the previous target
            continue
        lim.check(out.p, out.q, prev.p, prev.q, 1 / 30)
        assert 0.0 <= out.gripper <= 0.07 and out.finite()
        measured = measured + 0.5 * (out.p - measured)
    for reason in ("non_finite", "bad_quaternion", "tether", "workspace", "linear_speed", "angular_speed", "gripper"):
        assert env.hits.get(reason, 0) > 0, reason


def test_envelope_passes_a_slow_in_box_target_unchanged():
    env = Envelope(LimitsConfig(), 0.07, 1 / 30)
    env.reset(np.array([0.3, 0.0, 0.2]), np.array([0, 0, 0, 1.0]), 0.03)
    out = env.apply(np.array([0.301, 0.0, 0.2, *Q_ID_WXYZ, 0.04]), np.array([0.3, 0.0, 0.2]))
    assert out.p == pytest.approx([0.301, 0.0, 0.2]) and out.gripper == pytest.approx(0.04)
    assert env.hits == {}


# ---- binding ---------------------------------------------------------------------------------------
ARM_PROV = {
    "backend": "impedance",
    "kp": [10.0] * 6,
    "kd": [0.8] * 6,
    "t_ff": 0.0,
    "gravity_ff": True,
    "firmware": "S-V1.6-3",
}


def session(fps: float = 30.0, **arm) -> dict:
    p = {**ARM_PROV, **arm}
    return {
        "control": {"backend": p["backend"], "impedance": {k: p[k] for k in ("kp", "kd", "t_ff", "gravity_ff")}},
        "arm": {"firmware": p["firmware"]},
        "recording": {"fps": fps, "recorder": "lerobot_recorder"},
    }


def test_binding_lists_each_differing_key_with_old_and_new_values():
    assert mismatches(session(), live_record(ARM_PROV, 30)) == []
    found = mismatches(session(), live_record({**ARM_PROV, "kp": [20.0] * 6, "firmware": "S-V1.7"}, 15.0))
    assert found == [
        ("control.impedance.kp", [10.0] * 6, [20.0] * 6),
        ("arm.firmware", "S-V1.6-3", "S-V1.7"),
        ("recording.fps", 30.0, 15.0),
    ]
    assert {k for k, _, _ in mismatches(None, live_record(ARM_PROV, 30))} >= {"control.backend", "recording.fps"}


# ---- observation builder -------------------------------------------------------------------------
@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = small_root(tmp_path / "train")
    (r / "meta" / "collection_meta.json").write_text(json.dumps(session()))
    return r


def test_meta_refuses_a_root_without_the_action_columns(tmp_path: Path, root: Path):
    info = json.loads((root / "meta" / "info.json").read_text())
    del info["features"]["action.gripper"]
    (root / "meta" / "info.json").write_text(json.dumps(info))
    with pytest.raises(MetaError, match="action.gripper"):
        TrainingMeta.load(root)


def feed(
    b: ObservationBuilder,
    t_ns: int,
    x: float = 0.3,
    cams: tuple[str, ...] = ("cam_front", "cam_wrist"),
    shape: tuple[int, int] = (48, 64),
) -> None:
    b.add_joint_state(t_ns, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.035])
    b.add_eef_pose(t_ns, [x, 0.0, 0.2], [0.0, 0.0, 0.6, 0.8])  # ROS order x y z w
    for i, cam in enumerate(cams):
        img = np.full((*shape, 3), (t_ns // P + i) % 251, dtype=np.uint8)
        b.add_frame(cam, t_ns, img)


def test_builder_names_what_differs_from_the_training_root(root: Path):
    meta = TrainingMeta.load(root)
    assert meta.cameras == {"cam_front": (48, 64), "cam_wrist": (48, 64)} and meta.fps == 30
    b = ObservationBuilder(meta, "t")
    for k in range(12):
        feed(b, k * P, cams=("cam_front",))
        b.add_frame("cam_wrist", k * P, np.zeros((480, 640, 3), np.uint8))
    probs = b.problems()
    assert any("cam_wrist" in p and "640x480" in p and "64x48" in p for p in probs), probs
    b2 = ObservationBuilder(meta, "t")
    for k in range(12):
        feed(b2, k * 2 * P)  # 15 fps cameras
    assert any("15.0 fps" in p and "cam_front" in p for p in b2.problems())
    b3 = ObservationBuilder(meta, "t", fps=10.0)
    feed(b3, 0, cams=())
    probs = b3.problems()
    assert any("cam_front: no frames" in p for p in probs) and any("fps: node 10" in p for p in probs)


def test_builder_observation_is_the_recorders_row(root: Path):
    b = ObservationBuilder(TrainingMeta.load(root), "pick")
    for k in range(12):
        feed(b, k * P)
    assert b.problems() == []
    b.start(11 * P)
    obs = None
    for k in range(12, 40):
        feed(b, k * P, x=0.3 + 0.001 * k)
        obs = b.advance(k * P) or obs
    assert obs is not None and obs.task == "pick"
    k = obs.stamp_ns // P
    assert obs.stamp_ns <= 39 * P
    eef = obs.state["observation.arm_eef"]
    assert eef.dtype == np.float32 and eef[:4] == pytest.approx([0.3 + 0.001 * k, 0.0, 0.2, 0.8])  # qw first
    assert eef[4:] == pytest.approx([0.0, 0.0, 0.6])
    assert obs.state["observation.gripper"] == pytest.approx([0.035])
    assert obs.state["observation.state"].shape == (14,)  # the root has the combined column
    assert set(obs.images) == {"cam_front", "cam_wrist"} and obs.images["cam_front"].shape == (48, 64, 3)
    assert abs(int(obs.images["cam_front"][0, 0, 0]) - k % 251) <= 1  # the frame of that tick


# ---- runtime on a fake clock ---------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.ns = 0


class FakeServer:
    """Answers after ``latency_ns`` of fake time with a slow drift in x; can fail or go silent."""

    def __init__(self, clock: Clock, latency_ns: int, dx: float = 0.002):
        self.clock, self.latency_ns, self.dx = clock, latency_ns, dx
        self.pending: tuple[int, Observation, int] | None = None
        self.fail: Exception | None = None
        self.silent = False
        self.queries: list[int] = []
        self.nan_rows = False

    def submit(self, obs: Observation, horizon: int) -> None:
        self.pending = (self.clock.ns + self.latency_ns, obs, horizon)
        self.queries.append(self.clock.ns)

    def poll(self):
        if self.pending is None or self.clock.ns < self.pending[0] or self.silent:
            return None
        _, obs, h = self.pending
        self.pending = None
        if self.fail is not None:
            return self.fail
        x = float(obs.state["observation.arm_eef"][0])
        r = rows(h, x0=x, dx=self.dx)
        if self.nan_rows:
            r[::3, 0] = np.nan
        return ActionChunk(r, obs.stamp_ns, obs.stamp_ns)

    def abandon(self) -> None:
        self.pending = None


class Rig:
    def __init__(self, root: Path, latency_ms: float = 50, runtime: type[PolicyRuntime] = PolicyRuntime, **cfg):
        self.clock = Clock()
        cfg = {"horizon": 30, "replan_every": 10, "query_ahead": 12, "control_rate_hz": 30.0, "lateness_s": 0.0, **cfg}
        self.cfg = PolicyConfig(policy="hold", root=str(root), **cfg)
        self.builder = ObservationBuilder(TrainingMeta.load(root), "pick", lateness_s=self.cfg.lateness_s)
        self.server = FakeServer(self.clock, int(latency_ms * 1e6))
        self.rt = runtime(self.cfg, self.builder, make_backend("hold"), runner=self.server)
        self.x = 0.3
        self.targets: list = []
        self.lim = Limits(self.cfg.limits)
        self.cams = ("cam_front", "cam_wrist")
        self.reanchored = False  # after a resume the envelope starts again from the measured pose
        for _ in range(12):
            self.step(publish=False)

    def step(self, publish: bool = True) -> None:
        self.clock.ns += P
        feed(self.builder, self.clock.ns, x=self.x, cams=self.cams)
        if not publish:
            return
        tick = self.rt.tick(self.clock.ns)
        if tick.target is not None:
            t = tick.target
            assert t.finite()
            if self.targets and not self.reanchored:
                prev = self.targets[-1]
                self.lim.check(t.p, t.q, prev.p, prev.q, self.cfg.period_s)
            else:
                assert self.lim.inside(t.p)
            self.targets.append(t)
            self.reanchored = False
            self.x = float(t.p[0])  # the emulated arm follows its target exactly
        self.last = tick

    def resume(self) -> tuple[bool, str]:
        ok, msg = self.rt.resume(self.clock.ns)
        self.reanchored = self.reanchored or ok
        return ok, msg

    def run(self, seconds: float) -> None:
        for _ in range(round(seconds * 30)):
            self.step()


def test_runtime_keeps_a_query_in_flight_and_never_starves_at_300ms(root: Path):
    rig = Rig(root, latency_ms=300)
    ok, msg = rig.rt.start(rig.clock.ns, ARM_PROV)
    assert ok, msg
    rig.run(6.0)
    st = rig.rt.status()
    assert st["state"] == RUNNING and st["starved_ticks"] == 0, st
    assert st["chunks"] >= 8 and st["rows_dropped_late"] > 0
    assert rig.targets[-1].p[0] > 0.3 + 0.1  # it moved along the policy's drift
    assert st["query_latency_ms"]["p50"] == pytest.approx(300, abs=40)


class FixedMarginRuntime(PolicyRuntime):
    """The runtime before the measured lead time: the next query left at ``query_ahead`` rows left."""

    def lead_ns(self) -> int:
        return 0


# node defaults (query_ahead 10, replan_every 10, lateness_s 0.02): a server answering in 300 ms behind
# ~45 ms of JPEG encoding and HTTP (the bench's round trip at 300 ms is ~350 ms)
NODE_DEFAULTS = {
    "replan_every": PolicyConfig.replan_every,
    "query_ahead": PolicyConfig.query_ahead,
    "lateness_s": PolicyConfig.lateness_s,
}


@pytest.mark.slow
def test_the_next_query_leaves_a_measured_round_trip_ahead_so_a_300ms_server_never_starves(root: Path):
    rig = Rig(root, latency_ms=345, **NODE_DEFAULTS)
    assert rig.rt.start(rig.clock.ns, ARM_PROV)[0]
    rig.run(10.0)
    st = rig.rt.status()
    assert st["state"] == RUNNING and st["starved_ticks"] == 0, st
    assert st["chunks"] >= 15 and st["waiting_ticks"] > 0  # the first chunk is awaited, not starved
    # latency as the ticks see it: 345 ms -> taken on the 11th tick; lead = that + one tick + 50 ms margin
    assert rig.rt.lead.p99_ns() == 11 * P
    assert st["query_lead_ms"] == pytest.approx((12 * P + 50e6) / 1e6, abs=0.1)
    # steady replans: a chunk arrives 12 rows in (observation ~2 ticks old + 11 in flight), the next query
    # leaves once 14 rows (450 ms) are left, at row 16: one query every 11 + 4 ticks
    assert set(np.diff(rig.server.queries[2:]) // P) == {15}

    old = Rig(root, latency_ms=345, runtime=FixedMarginRuntime, **NODE_DEFAULTS)
    assert old.rt.start(old.clock.ns, ARM_PROV)[0]
    old.run(10.0)
    assert old.rt.status()["starved_ticks"] > 0  # query_ahead 10 rows (333 ms) < the round trip


def test_lead_time_is_the_p99_plus_a_tick_and_margin_bounded_by_the_chunk():
    lead = LeadTime(P, 50_000_000, 30 * P)
    assert lead.lead_ns() == 0  # no answer yet: the query_ahead floor applies
    for ms in [100] * 98 + [300, 300]:
        lead.observe(ms * 1_000_000)
    assert lead.lead_ns() == pytest.approx(300e6 + P + 50e6, rel=0.01)
    for _ in range(32):
        lead.observe(2_000_000_000)  # slower than a chunk: ask as soon as an answer comes
    assert lead.lead_ns() == 30 * P
    ex = ChunkExecutor(P, "receding", replan_every=100, query_ahead=3)
    ex.add(ActionChunk(rows(30), 0, 0), now_ns=0)
    assert not ex.want_query(14 * P, lead_ns=15 * P)  # 16 rows left
    assert ex.want_query(15 * P, lead_ns=15 * P)
    assert ex.want_query(15 * P, lead_ns=14 * P + 1)  # rounded up to whole rows
    assert not ex.want_query(26 * P) and ex.want_query(27 * P)  # no lead: the query_ahead floor


def test_runtime_starves_and_counts_when_the_server_is_slower_than_a_chunk(root: Path):
    rig = Rig(root, latency_ms=1200, timeout_s=5.0)
    assert rig.rt.start(rig.clock.ns, ARM_PROV)[0]
    rig.run(6.0)
    st = rig.rt.status()
    assert st["starved_ticks"] > 0 and st["state"] == RUNNING
    assert len(rig.targets) == 6 * 30  # a target every tick, starved or not


def test_a_server_answering_in_2s_pauses_and_holds(root: Path):
    rig = Rig(root, latency_ms=50, timeout_s=1.0)
    assert rig.rt.start(rig.clock.ns, ARM_PROV)[0]
    rig.run(1.0)
    rig.server.latency_ns = int(2e9)
    rig.run(3.0)
    st = rig.rt.status()
    assert st["state"] == PAUSED and st["reason"].startswith("query timeout"), st
    held = rig.targets[-1]
    rig.run(0.5)
    assert all(np.array_equal(t.p, held.p) for t in rig.targets[-15:])  # holding, still at control rate
    assert st["query_timeouts"] == 1


def test_a_server_error_pauses_holds_and_resume_restarts_cleanly(root: Path):
    rig = Rig(root, latency_ms=50)
    assert rig.rt.start(rig.clock.ns, ARM_PROV)[0]
    rig.run(1.0)
    rig.server.fail = BackendError("connection refused")
    rig.run(1.0)
    assert rig.rt.state == PAUSED and "connection refused" in rig.rt.reason
    assert rig.rt.status()["pause_reasons"] == {"server error": 1}
    n = len(rig.targets)
    rig.run(0.5)
    assert len(rig.targets) == n + 15 and np.array_equal(rig.targets[-1].p, rig.targets[n - 1].p)
    rig.server.fail = None
    assert rig.resume()[0]
    rig.run(1.0)
    assert rig.rt.state == RUNNING and rig.targets[-1].p[0] > rig.targets[n - 1].p[0]


def test_a_backend_timeout_reads_as_a_query_timeout(root: Path):
    """The backend's own socket timeout and the runtime's deadline give the same reason."""
    rig = Rig(root, latency_ms=50)
    assert rig.rt.start(rig.clock.ns, ARM_PROV)[0]
    rig.run(1.0)
    rig.server.fail = BackendTimeout("http://x/predict: timed out (no answer within 1.0 s)")
    rig.run(1.0)
    assert rig.rt.state == PAUSED and rig.rt.reason.startswith("query timeout"), rig.rt.reason
    st = rig.rt.status()
    assert st["pause_reasons"] == {"query timeout": 1} and st["query_timeouts"] == 1


def test_takeover_mid_chunk_stops_publishing_at_once_and_needs_resume(root: Path):
    rig = Rig(root, latency_ms=50)
    assert rig.rt.start(rig.clock.ns, ARM_PROV)[0]
    rig.run(1.0)
    assert rig.rt.executor.remaining(rig.clock.ns) > 0  # mid-chunk
    assert rig.rt.takeover()
    n = len(rig.targets)
    rig.run(1.0)
    assert len(rig.targets) == n and rig.last.actor == "operator" and rig.rt.state == TAKEOVER
    rig.x = 0.35  # the operator moved the arm
    rig.run(0.2)
    assert rig.rt.state == TAKEOVER  # releasing the clutch does not resume
    assert rig.resume()[0]
    rig.step()
    assert rig.targets[-1].p[0] == pytest.approx(0.35, abs=0.03)  # re-anchored on the measured pose, no jump
    assert rig.rt.status()["takeovers"] == 1


def test_a_camera_that_stops_pauses_and_resume_is_refused_while_it_is_stale(root: Path):
    rig = Rig(root, latency_ms=50)
    assert rig.rt.start(rig.clock.ns, ARM_PROV)[0]
    rig.run(1.0)
    rig.cams = ("cam_front",)
    rig.run(1.0)
    assert rig.rt.state == PAUSED and "cam_wrist" in rig.rt.reason, rig.rt.reason
    ok, msg = rig.rt.resume(rig.clock.ns)
    assert not ok and "cam_wrist" in msg


def test_non_finite_rows_never_reach_a_target(root: Path):
    rig = Rig(root, latency_ms=50)
    rig.server.nan_rows = True
    assert rig.rt.start(rig.clock.ns, ARM_PROV)[0]
    rig.run(2.0)
    assert rig.rt.status()["limit_hits"]["non_finite"] > 0 and len(rig.targets) == 60  # held on those ticks


def test_max_duration_stops(root: Path):
    rig = Rig(root, latency_ms=50, max_duration_s=1.0)
    assert rig.rt.start(rig.clock.ns, ARM_PROV)[0]
    rig.run(2.0)
    assert rig.rt.state == STOPPED and "max_duration_s" in rig.rt.reason
    assert 29 <= len(rig.targets) <= 31


def test_binding_mismatch_refuses_or_warns(root: Path):
    rig = Rig(root, on_binding_mismatch="refuse")
    ok, msg = rig.rt.start(rig.clock.ns, {**ARM_PROV, "backend": "position"})
    assert not ok and "control.backend" in msg and '"impedance"' in msg and '"position"' in msg
    rig2 = Rig(root, on_binding_mismatch="warn")
    ok, msg = rig2.rt.start(rig2.clock.ns, {**ARM_PROV, "backend": "position"})
    assert ok and "WARNING" in msg and rig2.rt.provenance()["binding_mismatches"]


def test_start_refuses_when_a_camera_is_missing(root: Path):
    rig = Rig(root)
    rig.builder.cams["cam_wrist"].shape = ()
    ok, msg = rig.rt.start(rig.clock.ns, ARM_PROV)
    assert not ok and "cam_wrist: no frames" in msg


def test_make_backend_specs(root: Path):
    assert make_backend("hold").describe()["backend"] == "hold"
    rb = make_backend(f"replay:{root}:1")
    assert rb.describe()["backend"] == "replay" and len(str(rb.describe()["content_hash"])) == 64
    with pytest.raises(ValueError, match="expected"):
        make_backend("ftp://x")
    with pytest.raises(ValueError, match="replay"):
        make_backend("replay:nowhere")


def test_replay_backend_answers_the_recorded_actions_by_time(root: Path):
    import pyarrow.parquet as pq

    t = pq.read_table(root / "data/chunk-000/episode_000001.parquet").to_pydict()
    eef = np.array(t["action.arm_eef"], dtype=np.float64)
    eef[:, 3:] /= np.linalg.norm(eef[:, 3:], axis=1, keepdims=True)
    expected = np.concatenate([eef, np.array(t["action.gripper"], dtype=np.float64).reshape(-1, 1)], axis=1)
    b = make_backend(f"replay:{root}:1")
    o = Observation("t", {}, {}, stamp_ns=5 * 10**9)
    first = b.predict(o, 4)
    assert first.rows == pytest.approx(expected[:4].astype(np.float32), abs=1e-6) and first.t0_ns == o.stamp_ns
    later = b.predict(Observation("t", {}, {}, stamp_ns=5 * 10**9 + 3 * P), 20)
    n = len(expected)
    assert later.rows[: n - 3] == pytest.approx(expected[3:].astype(np.float32), abs=1e-6)
    assert np.all(later.rows[n - 3 :] == later.rows[n - 4])  # past the end: the last action held


def test_hold_backend_answers_the_measured_pose():
    o = Observation(
        "t",
        {
            "observation.arm_eef": np.array([0.3, 0, 0.2, 1, 0, 0, 0], np.float32),
            "observation.gripper": np.array([0.02], np.float32),
        },
        {},
        7,
    )
    rows = make_backend("hold").predict(o, 3).rows
    assert rows.shape == (3, 8) and np.all(rows == np.array([0.3, 0, 0.2, 1, 0, 0, 0, 0.02], np.float32))


def test_make_backend_gr00t_passes_the_training_roots_modality(root: Path, monkeypatch):
    import sys
    import types

    seen: dict = {}

    class Fake:
        def __init__(self, host, port, **kw):
            seen.update(host=host, port=port, **kw)

    monkeypatch.setitem(sys.modules, "piper_recorder.policy.gr00t", types.SimpleNamespace(Gr00tBackend=Fake))
    make_backend("gr00t://10.0.0.5:5555", timeout_s=0.7, root=str(root))
    assert seen == {
        "host": "10.0.0.5",
        "port": 5555,
        "timeout_s": 0.7,
        "modality": root / "meta" / "modality.json",
        "layout": ActionLayout.single(),  # the root's action layout: one arm's 8 columns
    }
    with pytest.raises(ValueError, match="gr00t://host:port"):
        make_backend("gr00t://nohost")


# ---- #21 item 2: the operator always wins ------------------------------------------------------------
def test_resume_and_start_are_refused_while_the_headset_says_the_grip_is_held(root: Path):
    """~/resume while the operator held the grip was accepted: the policy published until the next joy
    message took over again (14 of 30 tries, 1-6 targets). The grip on the joy stream (not teleop's
    1 Hz status) now refuses it, with teleop's hysteresis: held above takeover_above until below
    takeover_release_below.
    """
    rig = Rig(root, latency_ms=50)
    assert rig.rt.start(rig.clock.ns, ARM_PROV)[0]
    rig.run(0.5)
    assert rig.rt.on_joy(rig.clock.ns, 0.95)  # the grip: takeover at once
    n = len(rig.targets)
    for squeeze in (0.95, 0.6, 0.4, 0.31):  # relaxed, but teleop still drives
        rig.rt.on_joy(rig.clock.ns, squeeze)
        ok, msg = rig.resume()
        assert not ok and "operator's grip is held on /quest/right/joy" in msg, msg
        rig.run(0.1)
    assert len(rig.targets) == n and rig.rt.state == TAKEOVER
    rig.rt.on_joy(rig.clock.ns, float("nan"))  # unreadable: changes nothing
    assert not rig.resume()[0]
    rig.rt.on_joy(rig.clock.ns, 0.1)  # opened
    ok, msg = rig.resume()
    assert ok, msg
    rig.run(0.2)
    assert len(rig.targets) > n
    assert rig.rt.stop()[0]
    rig.rt.on_joy(rig.clock.ns, 0.9)
    ok, msg = rig.rt.start(rig.clock.ns, ARM_PROV)
    assert not ok and msg.startswith("start refused: the operator's grip is held"), msg
    assert rig.rt.status()["operator_refusals"] == 6


def test_a_grip_last_seen_held_stays_held_when_the_headset_goes_silent(root: Path):
    rig = Rig(root, latency_ms=50)
    assert rig.rt.start(rig.clock.ns, ARM_PROV)[0]
    rig.rt.on_joy(rig.clock.ns, 1.0)
    rig.run(5.0)  # no joy message for 5 s
    ok, msg = rig.resume()
    assert not ok and "no joy message for 5.0 s" in msg, msg


def test_teleop_engaged_refuses_until_it_says_otherwise_or_its_status_stops(root: Path):
    from piper_recorder.policy.operator import TELEOP_STATUS_STALE_S

    rig = Rig(root, latency_ms=50)
    assert rig.rt.start(rig.clock.ns, ARM_PROV)[0]
    assert rig.rt.on_teleop_status(rig.clock.ns, True)
    ok, msg = rig.resume()
    assert not ok and "teleop reports its clutch engaged" in msg
    rig.rt.on_teleop_status(rig.clock.ns, False)
    assert rig.resume()[0]
    rig.rt.on_teleop_status(rig.clock.ns, True)
    rig.run(TELEOP_STATUS_STALE_S + 0.5)  # teleop gone: a dead teleop cannot drive
    assert rig.resume()[0]


def test_no_policy_target_while_the_grip_is_held_whatever_the_order(root: Path):
    """The gate is checked by the tick itself: a grip recorded while paused (or by any path that did
    not take over) publishes nothing from the next tick on, mid-chunk.
    """
    rig = Rig(root, latency_ms=50)
    assert rig.rt.start(rig.clock.ns, ARM_PROV)[0]
    rig.run(1.0)
    assert rig.rt.executor.remaining(rig.clock.ns) > 0
    rig.rt.operator.on_joy(rig.clock.ns, 0.9)  # the gate alone, as if the takeover call were lost
    n = len(rig.targets)
    rig.run(0.5)
    assert len(rig.targets) == n and rig.rt.state == TAKEOVER and rig.last.actor == "operator"


def test_builder_start_uses_the_captures_before_it_as_the_recorders_do(root: Path):
    """Frames seen while stopped feed the start's phase estimate (CaptureHistory, as in the recorders):
    the first observation is the first tick's, not one after a camera warm-up; a builder that saw
    only two frames before the start waits for that warm-up.
    """
    from piper_recorder.assembly.assembler import WARMUP_S

    def first_obs_tick(before: int) -> int:
        b = ObservationBuilder(TrainingMeta.load(root), "pick")
        start_k = 100
        for k in range(start_k - before, start_k):
            feed(b, k * P)
        b.start(start_k * P)
        for k in range(start_k, start_k + 60):
            feed(b, k * P)
            obs = b.advance(k * P + P // 2)
            if obs is not None:
                return k - start_k
        raise AssertionError("no observation in 2 s")

    warm = round(WARMUP_S * 30)
    assert first_obs_tick(60) <= 2
    assert first_obs_tick(2) >= warm - 2 > 2
