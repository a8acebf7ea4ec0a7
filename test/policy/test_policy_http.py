"""The http backend against a /predict server written from PiperPilot's published schema."""

from __future__ import annotations

import json
import socket
import threading
import time

import numpy as np
import pytest

from piper_recorder.policy.backend import BackendError, BackendTimeout, Observation
from piper_recorder.policy.spec import make_backend

from support.policy_http_server import serve

pytestmark = pytest.mark.slow  # HTTP servers in threads with real timeouts


def obs(stamp: int = 123) -> Observation:
    return Observation(
        task="pick up the cube",
        state={
            "observation.arm_joint": np.arange(6, dtype=np.float32) / 10,
            "observation.arm_eef": np.array([0.3, 0.0, 0.2, 1, 0, 0, 0], np.float32),
            "observation.gripper": np.array([0.04], np.float32),
        },
        images={"cam_front": np.zeros((48, 64, 3), np.uint8), "cam_wrist": np.full((48, 64, 3), 200, np.uint8)},
        stamp_ns=stamp,
    )


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
    assert b.describe() == {
        "backend": "http",
        "url": url,
        "protocol": "PiperPilot /predict",
        "content_hash": "test-server-0001",
    }


def test_more_rows_than_horizon_are_cut(server):
    url, st = server
    st.rows = 50
    assert make_backend(url).predict(obs(), horizon=7).rows.shape == (7, 8)


@pytest.mark.parametrize(
    "body,status,match",
    [
        (b'{"actions": []}', 200, "1..5 action rows"),
        (b'{"actions": [[1, 2, 3]]}', 200, "8 numbers"),
        (b'{"nope": 1}', 200, "1..5 action rows"),
        (b"not json", 200, "not JSON"),
        (b'{"actions": [[0, 0, 0, 1, 0, 0, 0, NaN]]}', 200, "non-finite"),  # pause: never a NaN to the arm
        (b'{"error": "model crashed"}', 200, "server error: model crashed"),
        (b"{}", 500, "HTTP 500"),
    ],
)
def test_bad_answers_are_backend_errors(server, body, status, match):
    url, st = server
    st.body, st.status = body, status
    with pytest.raises(BackendError, match=match):
        make_backend(url).predict(obs(), 5)


def test_a_slow_server_times_out(server):
    url, st = server
    st.delay_s = 2.0
    t = time.monotonic()
    with pytest.raises(BackendTimeout, match="timed out"):  # the runtime reports it as a query timeout
        make_backend(url, timeout_s=0.3).predict(obs(), 5)
    assert time.monotonic() - t < 1.5


def test_no_server_is_a_backend_error():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(BackendError, match="predict"):
        make_backend(f"http://127.0.0.1:{port}", timeout_s=0.5).predict(obs(), 5)


# ---- #21 item 1: redirects are refused --------------------------------------------------------------
class _Origin:
    """A real http.server: ``redirect`` answers every request with ``code`` to ``to`` + the same path;
    without it, it is the other origin: GET /predict answers rows, GET /info its own hash.
    """

    def __init__(self, code: int = 302, to: str | None = None):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        origin = self
        self.seen: list[str] = []

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def _answer(self) -> None:
                origin.seen.append(f"{self.command} {self.path}")
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                if to is not None:
                    self.send_response(code)
                    self.send_header("Location", to + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = (
                    json.dumps({"content_hash": "evil-0666"})
                    if self.path == "/info"
                    else json.dumps({"actions": [[0.9, 0.9, 0.9, 1, 0, 0, 0, 0.07]] * 5})
                ).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_origin_is_refused_for_predict_and_info(code):
    """Urllib's default opener followed a 302 (as a GET) to any origin: the arm ran that origin's rows
    and /info's content_hash (the rollout's provenance) named that origin's checkpoint.
    """
    other = _Origin()
    front = _Origin(code, to=other.url)
    try:
        b = make_backend(front.url, timeout_s=2.0)
        with pytest.raises(
            BackendError, match=rf"HTTP {code} redirecting to {other.url}/predict; redirects are refused"
        ):
            b.predict(obs(), 5)
        d = b.describe()
        assert d["content_hash"] is None and "redirects are refused" in d["content_hash_error"], d
        assert front.seen == ["POST /predict", "GET /info"] and other.seen == []  # never reached
    finally:
        front.close()
        other.close()


# ---- #21 item 11: every failure reads as what the server did -----------------------------------------
class _RawServer:
    """A TCP server that reads one request head and writes ``reply`` raw, then closes."""

    def __init__(self, reply: bytes):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.reply = reply
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with c:
                c.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, rest = data.partition(b"\r\n\r\n")
                n = next(
                    (
                        int(v)
                        for k, _, v in (ln.partition(b":") for ln in head.split(b"\r\n"))
                        if k.strip().lower() == b"content-length"
                    ),
                    0,
                )
                while len(rest) < n:
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    rest += chunk
                c.sendall(self.reply)

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize(
    "reply,match",
    [
        (
            b'HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{"actions": [[0, 0',
            r"closed the connection mid-answer \(got 18 of 500 announced bytes\)",
        ),
        (b"ICY 200 sure\r\n\r\n", r"malformed HTTP status line \('ICY 200 sure'\)"),
        (b"", "closed the connection without answering"),
    ],
)
def test_transport_failures_say_what_the_server_did(reply, match):
    srv = _RawServer(reply)
    try:
        with pytest.raises(BackendError, match=match) as e:
            make_backend(srv.url, timeout_s=2.0).predict(obs(), 5)
        assert type(e.value) is BackendError  # a server error, not an exception escaping the backend
    finally:
        srv.close()


@pytest.mark.parametrize(
    "body,match",
    [
        (b"[" * 100_000 + b"]" * 100_000, "answer nested too deeply"),
        (b'{"actions": [[0, 0, 0, 1, 0, 0, 0, 1' + b"0" * 400 + b"]]}", "action value out of range"),
        (b'{"actions": [[0, 0, 0, 1, 0, 0, 0, 1e39]]}', r"action value out of range \(beyond float32"),
    ],
)
def test_malformed_answers_name_the_problem(server, body, match):
    """These escaped as RecursionError / OverflowError (the pause read "backend RecursionError: ...") or
    became inf in float32.
    """
    url, st = server
    st.body = body
    with pytest.raises(BackendError, match=match) as e:
        make_backend(url).predict(obs(), 5)
    assert type(e.value) is BackendError


def test_an_error_status_carries_the_servers_own_message(server):
    url, st = server
    st.body, st.status = b'{"error": "images.cam_front: camera missing"}', 400
    with pytest.raises(BackendError, match="answered HTTP 400 Bad Request: images.cam_front: camera missing"):
        make_backend(url).predict(obs(), 5)


# ---- two arms ----------------------------------------------------------------------------------------------
ARMS = ("left", "right")
EEF = {"left": [0.30, 0.10, 0.20, 1.0, 0.0, 0.0, 0.0], "right": [0.28, -0.20, 0.25, 0.0, 0.0, 0.0, 1.0]}
GRIP = {"left": 0.02, "right": 0.05}


def two_arm_obs() -> Observation:
    state = {}
    for i, arm in enumerate(ARMS):
        state[f"observation.{arm}_arm_joint"] = np.full(6, 0.1 * (i + 1), np.float32)
        state[f"observation.{arm}_arm_eef"] = np.array(EEF[arm], np.float32)
        state[f"observation.{arm}_gripper"] = np.array([GRIP[arm]], np.float32)
    return Observation("hand over", state, {"cam_front": np.zeros((48, 64, 3), np.uint8)}, stamp_ns=5)


def test_two_arms_send_each_arms_columns_and_take_the_roots_16_wide_rows(bimanual_training_root):
    srv, st = serve(arms=ARMS)
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        chunk = make_backend(url, timeout_s=2.0, root=str(bimanual_training_root)).predict(two_arm_obs(), 6)
        assert st.problems == [] and st.requests[0]["state"]["observation.right_gripper"] == pytest.approx([0.05])
        assert chunk.rows.shape == (6, 16)
        names = json.loads((bimanual_training_root / "meta/info.json").read_text())["features"]["action"]["names"]
        for arm in ARMS:  # each arm's values where the root's action names put them
            at = names.index(f"{arm}_arm_eef.x")
            assert np.abs(chunk.rows[:, at : at + 3] - np.array(EEF[arm][:3])).max() <= 2 * st.radius + 1e-6
            assert chunk.rows[:, at + 3 : at + 7] == pytest.approx(np.tile(EEF[arm][3:], (6, 1)))
            assert chunk.rows[:, names.index(f"{arm}_gripper.width")] == pytest.approx(GRIP[arm])
        st.body = json.dumps({"actions": [[0, 0, 0, 1, 0, 0, 0, 0.03]]}).encode()  # a one-arm server's answer
        with pytest.raises(BackendError, match=r"every action row must be 16 numbers \(got rows of 8\)"):
            make_backend(url, timeout_s=2.0, root=str(bimanual_training_root)).predict(two_arm_obs(), 6)
    finally:
        srv.shutdown()
