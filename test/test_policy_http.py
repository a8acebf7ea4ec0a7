"""The http backend against a /predict server written from PiperPilot's published schema."""
from __future__ import annotations

import socket
import time

import numpy as np
import pytest

from policy_http_server import serve
from piper_recorder.policy.backend import BackendError, BackendTimeout, Observation, make_backend


def obs(stamp: int = 123) -> Observation:
    return Observation(
        task="pick up the cube",
        state={"observation.arm_joint": np.arange(6, dtype=np.float32) / 10,
               "observation.arm_eef": np.array([0.3, 0.0, 0.2, 1, 0, 0, 0], np.float32),
               "observation.gripper": np.array([0.04], np.float32)},
        images={"cam_front": np.zeros((48, 64, 3), np.uint8), "cam_wrist": np.full((48, 64, 3), 200, np.uint8)},
        stamp_ns=stamp)


@pytest.fixture
def server():
    srv, st = serve()
    yield f"http://127.0.0.1:{srv.server_address[1]}", st
    srv.shutdown()


def test_request_follows_the_schema_and_the_answer_becomes_a_chunk(server):
    url, st = server
    b = make_backend(url, timeout_s=2.0)
    chunk = b.predict(obs(), horizon=12)
    assert st.problems == [] and len(st.requests) == 1
    req = st.requests[0]
    assert req["horizon"] == 12 and req["task"] == "pick up the cube"
    assert req["state"]["observation.arm_eef"] == pytest.approx([0.3, 0.0, 0.2, 1, 0, 0, 0])
    assert st.image_sizes == {"cam_front": [64, 48], "cam_wrist": [64, 48]}
    assert chunk.rows.shape == (12, 8) and chunk.rows.dtype == np.float32
    assert chunk.obs_stamp_ns == 123 and chunk.t0_ns == 123
    assert b.describe() == {"backend": "http", "url": url, "protocol": "PiperPilot /predict",
                            "content_hash": "test-server-0001"}


def test_more_rows_than_horizon_are_cut(server):
    url, st = server
    st.rows = 50
    assert make_backend(url).predict(obs(), horizon=7).rows.shape == (7, 8)


@pytest.mark.parametrize("body,status,match", [
    (b'{"actions": []}', 200, "1..5 action rows"),
    (b'{"actions": [[1, 2, 3]]}', 200, "8 numbers"),
    (b'{"nope": 1}', 200, "1..5 action rows"),
    (b"not json", 200, "not JSON"),
    (b'{"actions": [[0, 0, 0, 1, 0, 0, 0, NaN]]}', 200, "non-finite"),   # pause: never a NaN to the arm
    (b'{"error": "model crashed"}', 200, "server error: model crashed"),
    (b"{}", 500, "HTTP 500"),
])
def test_bad_answers_are_backend_errors(server, body, status, match):
    url, st = server
    st.body, st.status = body, status
    with pytest.raises(BackendError, match=match):
        make_backend(url).predict(obs(), 5)


def test_a_slow_server_times_out(server):
    url, st = server
    st.delay_s = 2.0
    t = time.monotonic()
    with pytest.raises(BackendTimeout, match="timed out"):   # the runtime reports it as a query timeout
        make_backend(url, timeout_s=0.3).predict(obs(), 5)
    assert time.monotonic() - t < 1.5


def test_no_server_is_a_backend_error():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(BackendError, match="predict"):
        make_backend(f"http://127.0.0.1:{port}", timeout_s=0.5).predict(obs(), 5)
