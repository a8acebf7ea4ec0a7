"""piper-policy-server's ROS-free parts in the project's venv (no torch): PiperPilot's /predict
protocol both ways, the request -> input-feature mapping, the HTTP server over a stand-in runner.
The real LeRobot checkpoint is served in test/policy/server/test_policy_server_act.py (trainer venv).
"""

from __future__ import annotations

import base64
import io
import json
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image

from piper_recorder.policy.backend import Observation
from piper_recorder.policy.server.httpd import PolicyHTTPServer, make_server
from piper_recorder.policy.server.inputs import InputFeature, build_inputs
from piper_recorder.policy.server.protocol import (
    PredictRequest,
    ProtocolError,
    RequestRefused,
    encode_request,
    parse_answer,
    parse_request,
)
from piper_recorder.policy.spec import make_backend

from support.policy_http_server import post

STATE = {
    "observation.arm_joint": np.arange(6, dtype=np.float32) / 10,
    "observation.arm_eef": np.array([0.3, 0.0, 0.2, 1.0, 0.0, 0.0, 0.0], np.float32),
    "observation.gripper": np.array([0.04], np.float32),
}


def frame(h: int = 24, w: int = 32, seed: int = 0) -> npt.NDArray[np.uint8]:
    """A smooth image (JPEG keeps it within a few levels)."""
    y, x = np.mgrid[0:h, 0:w]
    rgb = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), np.full_like(x, 40 + seed)], axis=-1)
    return rgb.astype(np.uint8)


def request(horizon: int = 5, **images: npt.NDArray[np.uint8]) -> PredictRequest:
    return parse_request(encode_request("pick", STATE, images or {"cam_front": frame()}, horizon))


def test_request_round_trip_keeps_state_exactly_and_images_closely():
    req = parse_request(encode_request("pick up", STATE, {"cam_front": frame(), "cam_wrist": frame(seed=9)}, 30))
    assert req.task == "pick up" and req.horizon == 30
    for k, v in STATE.items():
        np.testing.assert_array_equal(req.state[k], v)
    assert req.images["cam_front"].shape == (24, 32, 3) and req.images["cam_front"].dtype == np.uint8
    assert np.abs(req.images["cam_wrist"].astype(int) - frame(seed=9)).mean() < 3


@pytest.mark.parametrize(
    "body, match",
    [
        (b"{not json", "not JSON"),
        (b"[]", "JSON object"),
        (json.dumps({"task": 1, "state": {}, "images": {}, "horizon": 3}).encode(), "task"),
        (json.dumps({"task": "t", "state": {}, "images": {}, "horizon": True}).encode(), "horizon"),
        (json.dumps({"task": "t", "state": {}, "images": {}, "horizon": 0}).encode(), "horizon"),
        (
            json.dumps({"task": "t", "state": {"observation.gripper": ["a"]}, "images": {}, "horizon": 3}).encode(),
            "state.observation.gripper",
        ),
        (b'{"task": "t", "state": {"observation.gripper": [NaN]}, "images": {}, "horizon": 3}', "non-finite"),
        (
            json.dumps({"task": "t", "state": {}, "images": {"cam_front": "%%%"}, "horizon": 3}).encode(),
            "images.cam_front",
        ),
        (
            json.dumps(
                {"task": "t", "state": {}, "images": {"cam_front": base64.b64encode(b"junk").decode()}, "horizon": 3}
            ).encode(),
            "images.cam_front",
        ),
    ],
)
def test_bad_requests_name_the_field(body, match):
    with pytest.raises(ProtocolError, match=match):
        parse_request(body)


def test_answer_parsing_refuses_what_the_protocol_does_not_allow():
    ok = json.dumps({"actions": [[0.0] * 8, [1.0] * 8]}).encode()
    assert parse_answer(ok, horizon=2).shape == (2, 8)
    for body, match in (
        (ok, "1..1"),
        (b'{"error": "boom"}', "server error: boom"),
        (json.dumps({"actions": [[0.0] * 7]}).encode(), "8 numbers"),
        (b'{"actions": [[0, 0, 0, 1, 0, 0, 0, Infinity]]}', "non-finite"),
    ):
        with pytest.raises(ProtocolError, match=match):
            parse_answer(body, horizon=1)


def test_inputs_as_the_dataset_columns_were_trained():
    feats = (
        InputFeature("observation.state", "STATE", (14,)),
        InputFeature("observation.arm_eef", "STATE", (7,)),
        InputFeature("observation.images.cam_front", "VISUAL", (3, 24, 32)),
    )
    got = build_inputs(feats, request())
    # the writer's combined column: arm_joint + arm_eef + gripper, in that order
    np.testing.assert_array_equal(
        got["observation.state"],
        np.concatenate([STATE["observation.arm_joint"], STATE["observation.arm_eef"], STATE["observation.gripper"]]),
    )
    np.testing.assert_array_equal(got["observation.arm_eef"], STATE["observation.arm_eef"])
    img = got["observation.images.cam_front"]
    assert img.shape == (3, 24, 32) and img.dtype == np.float32 and img.min() >= 0.0 and img.max() <= 1.0
    assert abs(float(img[0, 0, -1]) - 1.0) < 0.05 and float(img[0, 0, 0]) < 0.05  # red ramps left -> right


def test_observation_state_sent_whole_is_used_as_is():
    whole = np.linspace(-1, 1, 14).astype(np.float32)
    req = parse_request(encode_request("t", {"observation.state": whole}, {}, 1))
    got = build_inputs((InputFeature("observation.state", "STATE", (14,)),), req)
    np.testing.assert_array_equal(got["observation.state"], whole)


@pytest.mark.parametrize(
    "feature, match",
    [
        (InputFeature("observation.images.cam_top", "VISUAL", (3, 24, 32)), "camera 'cam_top' missing"),
        (InputFeature("observation.images.cam_front", "VISUAL", (3, 48, 64)), "trained on 64x48x3 frames"),
        (InputFeature("observation.state", "STATE", (15,)), r"shape \[15\]"),
        (InputFeature("observation.environment_state", "ENV", (4,)), "input type ENV"),
    ],
)
def test_inputs_the_request_cannot_give_are_refused(feature, match):
    with pytest.raises(RequestRefused, match=match):
        build_inputs((feature,), request())


class Chunker:
    """A stand-in runner: a chunk of `length` rows walking from the observed EEF pose."""

    def __init__(self, length: int = 30):
        self.length = length
        self.fail: Exception | None = None
        self.nan = False

    def info(self) -> dict[str, object]:
        return {"backend": "test", "chunk_size": self.length}

    def predict(self, req: PredictRequest) -> npt.NDArray[np.float32]:
        if self.fail is not None:
            raise self.fail
        build_inputs((InputFeature("observation.images.cam_front", "VISUAL", (3, 24, 32)),), req)
        rows = np.tile(
            np.concatenate([req.state["observation.arm_eef"], req.state["observation.gripper"]]), (self.length, 1)
        )
        rows[:, 0] += np.arange(self.length) * 0.001
        if self.nan:
            rows[3, 2] = np.nan
        return rows.astype(np.float32)


@pytest.fixture
def served() -> Iterator[tuple[PolicyHTTPServer, Chunker, str]]:
    runner = Chunker()
    server = make_server(runner, "127.0.0.1", 0)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield server, runner, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    t.join(5)


def test_predict_answers_at_most_horizon_rows(served):
    _server, runner, url = served
    status, doc = post(url, encode_request("pick", STATE, {"cam_front": frame()}, 10))
    assert status == 200 and list(doc) == ["actions"]
    rows = np.asarray(doc["actions"])
    assert rows.shape == (10, 8)
    np.testing.assert_allclose(rows[:, 0], 0.3 + np.arange(10) * 0.001, atol=1e-6)
    status, doc = post(url, encode_request("pick", STATE, {"cam_front": frame()}, 100))
    assert status == 200 and len(doc["actions"]) == runner.length  # the whole chunk, fewer than asked
    with urllib.request.urlopen(url + "/info", timeout=10) as r:
        info = json.loads(r.read())
    assert info["backend"] == "test" and info["served"] == 2


def test_errors_are_answered_and_the_server_keeps_serving(served):
    _server, runner, url = served
    status, doc = post(url, b"{nope")
    assert status == 400 and "not JSON" in doc["error"]
    status, doc = post(url, encode_request("pick", STATE, {"cam_wrist": frame()}, 5))
    assert status == 400 and "cam_front" in doc["error"]
    runner.nan = True
    status, doc = post(url, encode_request("pick", STATE, {"cam_front": frame()}, 5))
    assert status == 500 and "non-finite" in doc["error"]
    runner.nan, runner.fail = False, RuntimeError("CUDA out of memory")
    status, doc = post(url, encode_request("pick", STATE, {"cam_front": frame()}, 5))
    assert status == 500 and doc["error"] == "RuntimeError: CUDA out of memory"
    runner.fail = None
    status, doc = post(url, encode_request("pick", STATE, {"cam_front": frame()}, 5))
    assert status == 200 and len(doc["actions"]) == 5
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url + "/nothing", timeout=10)
    assert e.value.code == 404


def test_jpeg_from_pillow_is_what_a_piperpilot_client_sends(served):
    """A client that builds the body by hand (Pillow JPEG, base64, plain json) gets the same answer."""
    _server, _runner, url = served
    buf = io.BytesIO()
    Image.fromarray(frame()).save(buf, format="JPEG")
    body = json.dumps(
        {
            "task": "pick",
            "horizon": 3,
            "state": {k: v.tolist() for k, v in STATE.items()},
            "images": {"cam_front": base64.b64encode(buf.getvalue()).decode()},
        }
    ).encode()
    status, doc = post(url, body)
    assert status == 200 and np.asarray(doc["actions"]).shape == (3, 8)


@pytest.mark.integration
def test_the_console_script_outside_a_trainer_env_says_where_to_run_it(tmp_path):
    """The project's venv has no torch: the server exits 2 with one line, no traceback."""
    import importlib.util
    import subprocess
    import sys
    from pathlib import Path

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is importable here")
    exe = Path(sys.executable).parent / "piper-policy-server"
    (tmp_path / "config.json").write_text('{"type": "act"}')
    p = subprocess.run([str(exe), "--checkpoint", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "trainer's environment" in p.stderr and "Traceback" not in p.stderr, p.stderr
    p = subprocess.run(
        [str(exe), "--checkpoint", str(tmp_path / "nothing")], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 2 and "no config.json" in p.stderr, p.stderr


# ---- #21 item 6: images are checked before they are decoded ----------------------------------------
def jpeg_bytes(rgb: npt.NDArray[np.uint8]) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG")
    return buf.getvalue()


def claimed_size(jpeg: bytes, w: int, h: int) -> bytes:
    """The same small JPEG with its frame header (SOF0) claiming w x h: Pillow's lazy open reports that
    size; decoding it would allocate w*h*3 bytes before finding the scan data too short.
    """
    i = jpeg.index(b"\xff\xc0")
    return jpeg[: i + 5] + h.to_bytes(2, "big") + w.to_bytes(2, "big") + jpeg[i + 9 :]


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


class ListsInputs(Chunker):
    """A runner that lists its inputs as LeRobotRunner's info() does: cam_front at 32x24."""

    def info(self) -> dict[str, object]:
        return {
            **super().info(),
            "inputs": {
                "observation.images.cam_front": {"type": "VISUAL", "shape": [3, 24, 32]},
                "observation.state": {"type": "STATE", "shape": [14]},
            },
        }


@pytest.fixture
def served_inputs() -> Iterator[str]:
    server = make_server(ListsInputs(), "127.0.0.1", 0)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    t.join(5)


def body_with(images: dict[str, str]) -> bytes:
    return json.dumps(
        {"task": "pick", "horizon": 3, "state": {k: v.tolist() for k, v in STATE.items()}, "images": images}
    ).encode()


def test_images_of_cameras_the_policy_does_not_use_are_not_decoded(served_inputs):
    """Every image was decoded, used or not: here the unused ones are a PNG and bytes that are no image
    at all, which the old server refused (400) after decoding them.
    """
    png = io.BytesIO()
    Image.fromarray(frame()).save(png, format="PNG")
    status, doc = post(
        served_inputs,
        body_with({"cam_front": b64(jpeg_bytes(frame())), "cam_top": b64(png.getvalue()), "cam_side": b64(b"junk")}),
    )
    assert status == 200 and len(doc["actions"]) == 3, doc


def test_a_used_image_of_another_size_is_refused_from_its_header(served_inputs):
    """A 12500x12500 frame header over 600 bytes: refused with the size, before any decode (the old
    server decoded it first: 470 MB for this one image).
    """
    bomb = claimed_size(jpeg_bytes(frame()), 12500, 12500)
    from piper_recorder.policy.server.protocol import jpeg_size

    assert jpeg_size(bomb) == (12500, 12500) and jpeg_size(jpeg_bytes(frame())) == (32, 24)
    status, doc = post(served_inputs, body_with({"cam_front": b64(bomb)}))
    assert status == 400 and doc["error"] == (
        "images.cam_front: 12500x12500, the policy was trained on 32x24 frames (the server never resizes)"
    ), doc


@pytest.mark.parametrize("fmt", ["PNG", "WEBP", "BMP"])
def test_only_jpeg_is_accepted(served_inputs, fmt):
    buf = io.BytesIO()
    Image.fromarray(frame()).save(buf, format=fmt)
    status, doc = post(served_inputs, body_with({"cam_front": b64(buf.getvalue())}))
    assert status == 400 and doc["error"].startswith("images.cam_front: not a JPEG"), doc


def test_without_listed_inputs_count_and_pixels_are_bounded(served):
    """A runner that does not list its inputs: at most MAX_IMAGES images of at most MAX_PIXELS each,
    both checked before decoding; and Pillow's own bomb cap is set to the same bound.
    """
    from piper_recorder.policy.server.protocol import MAX_IMAGES, MAX_PIXELS

    _server, _runner, url = served
    small = b64(jpeg_bytes(frame()))
    status, doc = post(url, body_with({f"cam_{i}": small for i in range(MAX_IMAGES + 1)}))
    assert status == 400 and doc["error"] == f"images: {MAX_IMAGES + 1} images, at most {MAX_IMAGES} per request"
    big = b64(claimed_size(jpeg_bytes(frame()), 4200, 4200))
    status, doc = post(url, body_with({"cam_front": big}))
    assert status == 400 and doc["error"] == f"images.cam_front: 4200x4200 is more than {MAX_PIXELS} pixels", doc
    assert Image.MAX_IMAGE_PIXELS == MAX_PIXELS


def test_request_bodies_nested_or_out_of_range_are_400_with_the_reason(served):
    _server, _runner, url = served
    status, doc = post(url, b"[" * 100_000 + b"]" * 100_000)
    assert status == 400 and doc["error"] == "body nested too deeply (not a body of this protocol)"
    huge = json.dumps({"task": "t", "horizon": 3, "images": {}, "state": {"observation.gripper": [10**400]}})
    status, doc = post(url, huge.encode())
    assert status == 400 and doc["error"].startswith("state.observation.gripper: value out of range"), doc


# ---- #21 item 7: bounded connections, socket timeouts, no traceback per client -----------------------
def half_sent(port: int) -> socket.socket:
    """A client that sends the headers and part of the body, then nothing."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(
        b'POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"task": '
    )
    return s


def closed_by_server(s: socket.socket, within_s: float) -> bool:
    s.settimeout(within_s)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_half_sent_requests_are_bounded_and_time_out():
    """300 half-sent requests held 300 threads for over 60 s; now a fixed pool serves, excess
    connections get 503 at once, and a client that stops sending is dropped after the socket timeout.
    """
    runner = Chunker()
    server = make_server(runner, "127.0.0.1", 0, workers=3, queued=2, client_timeout_s=0.5)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    port = server.server_address[1]
    url = f"http://127.0.0.1:{port}"
    threads_before = threading.active_count()
    socks = []
    try:
        socks = [half_sent(port) for _ in range(40)]
        time.sleep(0.3)
        assert threading.active_count() <= threads_before, "a thread per connection"
        busy = []
        for s in socks[5:]:
            s.settimeout(2)
            busy.append(s.recv(4096))
        assert all(b.startswith(b"HTTP/1.1 503") and b"server busy" in b for b in busy), busy[:2]
        assert server.refused_busy == 35
        t0 = time.monotonic()
        assert all(closed_by_server(s, 3.0) for s in socks[:5])  # held ones dropped by the timeout
        assert time.monotonic() - t0 < 2.5
        status, doc = post(url, encode_request("pick", STATE, {"cam_front": frame()}, 5))  # serving again
        assert status == 200 and len(doc["actions"]) == 5
    finally:
        for s in socks:
            s.close()
        server.shutdown()
        server.server_close()
        t.join(5)


def test_a_client_that_goes_away_costs_no_traceback(capfd):
    """A client that resets the connection before its answer: socketserver printed a traceback per
    client to stderr.
    """

    class Slow(Chunker):
        def predict(self, req: PredictRequest) -> npt.NDArray[np.float32]:
            time.sleep(0.3)
            return super().predict(req)

    server = make_server(Slow(), "127.0.0.1", 0)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    port = server.server_address[1]
    try:
        body = encode_request("pick", STATE, {"cam_front": frame()}, 5) * 1
        big = body + b" " * (4 << 20)  # padding: the answer write cannot vanish into buffers unnoticed
        for payload in (body, big):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(
                b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: "
                + str(len(payload)).encode()
                + b"\r\n\r\n"
                + payload
            )
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close
            s.close()
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        time.sleep(1.5)
        status, _doc = post(f"http://127.0.0.1:{port}", body)
        assert status == 200
    finally:
        server.shutdown()
        server.server_close()
        t.join(5)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err, err


# ---- two arms ----------------------------------------------------------------------------------------------
def test_a_two_arm_checkpoint_takes_the_combined_state_and_answers_its_16_columns(bimanual_training_root):
    """A stand-in for a checkpoint trained on a two-arm root: its input is observation.state (28) as the client
    sends it, its action the root's 16 columns; the server answers that width and the client reads it back.
    """
    info = json.loads((bimanual_training_root / "meta/info.json").read_text())["features"]
    state_names, action_names = info["observation.state"]["names"], info["action"]["names"]

    class TwoArms:
        wrong_width = False

        def info(self) -> dict[str, object]:
            return {"backend": "test", "action_width": 16, "inputs": {"observation.state": {"type": "STATE"}}}

        def predict(self, req: PredictRequest) -> npt.NDArray[np.float32]:
            (state,) = build_inputs((InputFeature("observation.state", "STATE", (28,)),), req).values()
            # hold every arm: its action elements are its state elements of the same names
            row = np.array([state[state_names.index(n)] for n in action_names], np.float32)
            return np.tile(row, (4, 1))[:, : 8 if self.wrong_width else 16]

    runner = TwoArms()
    server = make_server(runner, "127.0.0.1", 0)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        state = np.linspace(-0.5, 0.5, 28).astype(np.float32)
        obs = Observation("hand over", {"observation.state": state}, {}, stamp_ns=1)
        chunk = make_backend(url, timeout_s=5.0, root=str(bimanual_training_root)).predict(obs, 4)
        assert chunk.rows.shape == (4, 16)
        right_y = action_names.index("right_arm_eef.y")
        assert chunk.rows[0, right_y] == pytest.approx(state[state_names.index("right_arm_eef.y")])
        runner.wrong_width = True
        status, doc = post(url, encode_request("t", {"observation.state": state}, {}, 4))
        assert status == 500 and "actions must be (n >= 1, 16), got (4, 8)" in doc["error"]
    finally:
        server.shutdown()
        server.server_close()
        t.join(5)
