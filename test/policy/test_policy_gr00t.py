"""The gr00t backend against a GR00T N1.5 inference service built from the published schema
(test/support/gr00t_test_server.py): round trip with the training root's modality keys, error answers,
timeouts (and recovery after one), api_token, the server's own modality config.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from piper_recorder.policy.backend import BackendError, Observation, PolicyBackend
from piper_recorder.policy.gr00t import Gr00tBackend
from piper_recorder.policy.spec import make_backend

from support.gr00t_test_server import Gr00tTestServer

H, W = 24, 32
MODALITY = {  # what lerobot_recorder writes (meta.modality_json), two cameras
    "state": {
        "arm_joint": {"start": 0, "end": 6, "original_key": "observation.arm_joint"},
        "eef_pos": {"start": 0, "end": 3, "original_key": "observation.arm_eef"},
        "eef_rot": {"start": 3, "end": 7, "original_key": "observation.arm_eef", "rotation_type": "quat_wxyz"},
        "gripper": {"start": 0, "end": 1, "original_key": "observation.gripper"},
    },
    "action": {
        "eef_pos": {"start": 0, "end": 3, "original_key": "action.arm_eef"},
        "eef_rot": {"start": 3, "end": 7, "original_key": "action.arm_eef", "rotation_type": "quat_wxyz"},
        "gripper": {"start": 0, "end": 1, "original_key": "action.gripper"},
    },
    "video": {
        "front": {"original_key": "observation.images.cam_front"},
        "wrist": {"original_key": "observation.images.cam_wrist"},
    },
    "annotation": {"human.task_description": {"original_key": "task_index"}},
}
SERVER_HORIZON = 16


def observation(seed: int = 0) -> Observation:
    rng = np.random.default_rng(seed)
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    return Observation(
        task="pick up the cube",
        state={
            "observation.arm_joint": rng.uniform(-1, 1, 6).astype(np.float32),
            "observation.arm_eef": np.concatenate([rng.uniform(0.1, 0.4, 3), q]).astype(np.float32),
            "observation.gripper": np.array([0.03], np.float32),
        },
        images={
            "cam_front": rng.integers(0, 255, (H, W, 3), dtype=np.uint8),
            "cam_wrist": rng.integers(0, 255, (H, W, 3), dtype=np.uint8),
        },
        stamp_ns=123_456_789,
    )


def drift_policy(data: dict[str, Any]) -> dict[str, np.ndarray]:
    """A policy the test can predict: the EEF drifts 1 mm per step in x, rotation and gripper held.
    Checks the observation the way GR00T's policy would (shapes and dtypes per key).
    """
    for cam in ("video.front", "video.wrist"):
        v = data[cam]
        if v.dtype != np.uint8 or v.shape != (1, H, W, 3):
            raise ValueError(f"{cam}: {v.dtype} {v.shape}")
    if data["annotation.human.task_description"] != ["pick up the cube"]:
        raise ValueError(f"language: {data['annotation.human.task_description']!r}")
    steps = np.arange(SERVER_HORIZON, dtype=np.float64)[:, None]
    pos = data["state.eef_pos"].astype(np.float64) + steps * np.array([[0.001, 0.0, 0.0]])
    return {
        "action.eef_pos": pos,
        "action.eef_rot": np.repeat(data["state.eef_rot"].astype(np.float64), SERVER_HORIZON, axis=0),
        "action.gripper": np.repeat(data["state.gripper"].astype(np.float64), SERVER_HORIZON, axis=0),
    }


@pytest.fixture
def server() -> Iterator[Gr00tTestServer]:
    srv = Gr00tTestServer(drift_policy)
    yield srv
    srv.close()


def test_round_trip_keys_from_modality_json(server, tmp_path):
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "modality.json").write_text(json.dumps(MODALITY))
    backend = Gr00tBackend("127.0.0.1", server.port, timeout_s=5.0, modality=tmp_path)
    try:
        obs = observation()
        chunk = backend.predict(obs, horizon=10)
        sent = server.requests[-1]
        assert sent["endpoint"] == "get_action" and "api_token" not in sent
        data = sent["data"]
        assert sorted(data) == [
            "annotation.human.task_description",
            "state.arm_joint",
            "state.eef_pos",
            "state.eef_rot",
            "state.gripper",
            "video.front",
            "video.wrist",
        ]
        np.testing.assert_array_equal(data["video.wrist"][0], obs.images["cam_wrist"])
        assert data["state.arm_joint"].shape == (1, 6) and data["state.eef_rot"].shape == (1, 4)
        np.testing.assert_array_equal(data["state.eef_rot"][0], obs.state["observation.arm_eef"][3:])
        assert chunk.rows.shape == (10, 8) and chunk.rows.dtype == np.float32
        assert chunk.obs_stamp_ns == chunk.t0_ns == obs.stamp_ns
        eef = obs.state["observation.arm_eef"]
        want = np.concatenate([np.repeat(eef[None], 10, axis=0), np.full((10, 1), 0.03)], axis=1)
        want[:, 0] += np.arange(10) * 0.001
        np.testing.assert_allclose(chunk.rows, want, atol=1e-6)
        assert backend.describe()["backend"] == "gr00t"
    finally:
        backend.close()


def test_make_backend_gives_a_policy_backend_with_the_default_layout(server):
    backend = make_backend(f"gr00t://127.0.0.1:{server.port}", timeout_s=5.0)
    try:
        assert isinstance(backend, PolicyBackend) and isinstance(backend, Gr00tBackend)
        # default modality: the recorder's Piper layout; cameras follow the observation
        with pytest.raises(BackendError, match="video.front"):  # our cameras are cam_front/cam_wrist
            backend.predict(observation(), horizon=4)
        assert "video.cam_front" in server.requests[-1]["data"]
    finally:
        backend.close()


def test_error_answer_is_a_backend_error_and_the_next_call_works(server):
    backend = Gr00tBackend("127.0.0.1", server.port, timeout_s=5.0, modality=MODALITY)
    try:
        bad = observation()
        bad.images["cam_front"] = bad.images["cam_front"][:10]  # server-side shape check fails
        with pytest.raises(BackendError, match=r"server error: video.front: uint8 \(1, 10, 32, 3\)"):
            backend.predict(bad, horizon=4)
        assert backend.predict(observation(), horizon=4).rows.shape == (4, 8)
        assert backend.ping()
    finally:
        backend.close()


def test_malformed_answers_are_refused():
    def short(data: dict[str, Any]) -> dict[str, np.ndarray]:
        out = drift_policy(data)
        del out["action.gripper"]
        return out

    def nan(data: dict[str, Any]) -> dict[str, np.ndarray]:
        out = drift_policy(data)
        out["action.eef_pos"][3, 1] = np.nan
        return out

    for policy, match in ((short, "lacks action.gripper"), (nan, "non-finite")):
        srv = Gr00tTestServer(policy)
        backend = Gr00tBackend("127.0.0.1", srv.port, timeout_s=5.0, modality=MODALITY)
        try:
            with pytest.raises(BackendError, match=match):
                backend.predict(observation(), horizon=8)
        finally:
            backend.close()
            srv.close()


def test_timeout_then_recovery():
    srv = Gr00tTestServer(drift_policy, delay_s=1.0)
    backend = Gr00tBackend("127.0.0.1", srv.port, timeout_s=0.2, modality=MODALITY)
    try:
        t0 = time.monotonic()
        with pytest.raises(BackendError, match="no answer within 200 ms"):
            backend.predict(observation(), horizon=4)
        assert time.monotonic() - t0 < 0.9  # gave up at its timeout, not at the server's answer
        srv.delay_s = 0.0
        time.sleep(1.0)  # the server finishes the abandoned request (its reply goes nowhere)
        assert backend.predict(observation(1), horizon=4).rows.shape == (4, 8)  # a fresh socket
    finally:
        backend.close()
        srv.close()


def test_no_server_times_out():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = Gr00tBackend("127.0.0.1", port, timeout_s=0.2, modality=MODALITY)
    try:
        with pytest.raises(BackendError, match="no answer"):
            backend.predict(observation(), horizon=4)
        assert not backend.ping()
    finally:
        backend.close()


def test_api_token(monkeypatch):
    srv = Gr00tTestServer(drift_policy, api_token="s3cret")
    try:
        anon = Gr00tBackend("127.0.0.1", srv.port, timeout_s=5.0, modality=MODALITY)
        wrong = Gr00tBackend("127.0.0.1", srv.port, timeout_s=5.0, modality=MODALITY, api_token="nope")
        monkeypatch.setenv("PIPER_GR00T_API_TOKEN", "s3cret")
        from_env = Gr00tBackend("127.0.0.1", srv.port, timeout_s=5.0, modality=MODALITY)
        try:
            for b in (anon, wrong):
                with pytest.raises(BackendError, match="Unauthorized"):
                    b.predict(observation(), horizon=4)
            assert from_env.predict(observation(), horizon=4).rows.shape == (4, 8)
            assert srv.requests[-1]["api_token"] == "s3cret"
        finally:
            for b in (anon, wrong, from_env):
                b.close()
    finally:
        srv.close()


def test_server_modality_config_selects_and_checks_keys():
    cfg = {
        "video": (["video.front"], [0]),
        "state": (["state.eef_pos", "state.gripper"], [0]),
        "action": (["action.eef_pos", "action.eef_rot", "action.gripper"], list(range(16))),
        "language": (["annotation.human.action.task_description"], [0]),
    }
    calls: list[dict[str, Any]] = []

    def policy(data: dict[str, Any]) -> dict[str, np.ndarray]:
        calls.append(data)
        n = SERVER_HORIZON
        return {
            "action.eef_pos": np.zeros((n, 3)),
            "action.eef_rot": np.tile([1.0, 0, 0, 0], (n, 1)),
            "action.gripper": np.zeros((n, 1)),
        }

    srv = Gr00tTestServer(policy, modality_config=cfg)
    backend = Gr00tBackend("127.0.0.1", srv.port, timeout_s=5.0, modality=MODALITY)
    try:
        backend.predict(observation(), horizon=30)
        assert sorted(calls[-1]) == [
            "annotation.human.action.task_description",
            "state.eef_pos",
            "state.gripper",
            "video.front",
        ]
        assert calls[-1]["annotation.human.action.task_description"] == ["pick up the cube"]
        assert backend.describe()["server_modality"]["video"] == ["video.front"]
        srv.modality_config = {**cfg, "video": (["video.front", "video.top"], [0])}
        backend2 = Gr00tBackend("127.0.0.1", srv.port, timeout_s=5.0, modality=MODALITY)
        with pytest.raises(BackendError, match=r"wants \['video.top'\]"):
            backend2.predict(observation(), horizon=30)
        backend2.close()
        srv.modality_config = {**cfg, "state": (["state.eef_pos"], [-1, 0])}
        backend3 = Gr00tBackend("127.0.0.1", srv.port, timeout_s=5.0, modality=MODALITY)
        with pytest.raises(BackendError, match="2 state steps"):
            backend3.predict(observation(), horizon=30)
        backend3.close()
    finally:
        backend.close()
        srv.close()


class RawReplyServer:
    """A ZeroMQ REP socket answering every request with fixed raw bytes (a broken service)."""

    def __init__(self, reply: bytes):
        import threading

        import zmq

        self.reply = reply
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.REP)
        self._sock.setsockopt(zmq.LINGER, 0)
        self.port = self._sock.bind_to_random_port("tcp://127.0.0.1")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import zmq

        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        while not self._stop.is_set():
            if poller.poll(50):
                self._sock.recv()
                self._sock.send(self.reply)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close(0)
        self._ctx.term()


@pytest.mark.parametrize(
    "reply, match",
    [
        (b"\xc1", r"answer is not msgpack \(a byte"),  # FormatError: read "undecodable answer ()"
        (b"\x91" * 100_000, "answer nested too deeply"),  # StackError: read "undecodable answer ()"
        (b"\x92\x01", r"answer is truncated \(2 bytes"),
        (b"\x80\x01", "answer has bytes after its msgpack message"),
    ],
)
def test_undecodable_answers_say_why(reply, match):
    srv = RawReplyServer(reply)
    backend = Gr00tBackend("127.0.0.1", srv.port, timeout_s=5.0, modality=MODALITY)
    try:
        with pytest.raises(BackendError, match=match):
            backend.call("get_action", {})
    finally:
        backend.close()
        srv.close()


def test_answer_fields_that_are_not_real_arrays_are_named():
    import msgpack

    def ext(data: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = drift_policy(data)
        out["action.eef_pos"] = msgpack.ExtType(5, b"\x00" * 8)
        return out

    def complex_valued(data: dict[str, Any]) -> dict[str, Any]:
        out = drift_policy(data)
        out["action.eef_pos"] = out["action.eef_pos"] + 0.5j  # astype(float32) dropped 0.5j silently
        return out

    def huge(data: dict[str, Any]) -> dict[str, Any]:
        out = drift_policy(data)
        out["action.gripper"][2, 0] = 1e300  # became inf in float32
        return out

    for policy, match in (
        (ext, r"answer field action.eef_pos has an unsupported msgpack extension type \(code 5\)"),
        (complex_valued, "answer field action.eef_pos is complex-valued; actions must be real numbers"),
        (huge, "answer field action.gripper: action value out of range"),
    ):
        srv = Gr00tTestServer(policy)
        backend = Gr00tBackend("127.0.0.1", srv.port, timeout_s=5.0, modality=MODALITY)
        try:
            with pytest.raises(BackendError, match=match):
                backend.predict(observation(), horizon=8)
        finally:
            backend.close()
            srv.close()


# ---- two arms ----------------------------------------------------------------------------------------------
def test_two_arms_use_the_roots_modality_keys_and_place_each_arms_action(bimanual_training_root):
    """The modality.json of a two-arm root (the bag converter's) names left_eef_pos ... ; the answer's arrays go
    back to where the root's action names put each arm's values.
    """
    root = bimanual_training_root
    steps = np.arange(SERVER_HORIZON, dtype=np.float64)[:, None]

    def two_arm_drift(data: dict[str, Any]) -> dict[str, np.ndarray]:
        out = {}
        for arm, dx in (("left", 0.001), ("right", -0.002)):
            out[f"action.{arm}_eef_pos"] = data[f"state.{arm}_eef_pos"] + steps * np.array([[dx, 0.0, 0.0]])
            out[f"action.{arm}_eef_rot"] = np.repeat(data[f"state.{arm}_eef_rot"], SERVER_HORIZON, axis=0)
            out[f"action.{arm}_gripper"] = np.repeat(data[f"state.{arm}_gripper"], SERVER_HORIZON, axis=0)
        return out

    srv = Gr00tTestServer(two_arm_drift)
    backend = make_backend(f"gr00t://127.0.0.1:{srv.port}", timeout_s=5.0, root=str(root))
    try:
        eef = {"left": [0.3, 0.1, 0.2, 1.0, 0.0, 0.0, 0.0], "right": [0.28, -0.2, 0.25, 0.0, 0.0, 0.0, 1.0]}
        grip = {"left": 0.02, "right": 0.05}
        state = {}
        for arm in ("left", "right"):
            state[f"observation.{arm}_arm_joint"] = np.zeros(6, np.float32)
            state[f"observation.{arm}_arm_eef"] = np.array(eef[arm], np.float32)
            state[f"observation.{arm}_gripper"] = np.array([grip[arm]], np.float32)
        obs = Observation("hand over", state, {"cam_front": np.zeros((48, 64, 3), np.uint8)}, stamp_ns=9)
        chunk = backend.predict(obs, horizon=10)
        data = srv.requests[-1]["data"]
        modality = json.loads((root / "meta/modality.json").read_text())
        assert {k for k in data if k.startswith("state.")} == {f"state.{n}" for n in modality["state"]}
        np.testing.assert_array_equal(data["state.right_eef_rot"][0], eef["right"][3:])
        assert chunk.rows.shape == (10, 16)
        names = json.loads((root / "meta/info.json").read_text())["features"]["action"]["names"]
        for arm, dx in (("left", 0.001), ("right", -0.002)):
            x = names.index(f"{arm}_arm_eef.x")
            np.testing.assert_allclose(chunk.rows[:, x], eef[arm][0] + np.arange(10) * dx, atol=1e-6)
            np.testing.assert_allclose(chunk.rows[:, x + 3 : x + 7], np.tile(eef[arm][3:], (10, 1)), atol=1e-6)
            np.testing.assert_allclose(chunk.rows[:, names.index(f"{arm}_gripper.width")], grip[arm], atol=1e-6)
    finally:
        backend.close()
        srv.close()
