"""A PiperPilot-style ``/predict`` server written from the published schema (reference-facts §7),
independent of piper_recorder: it validates every request and answers a slow circle around the
observed pose. Two arms (``serve(arms=("left", "right"))``): each arm's state columns are required
(``observation.left_arm_eef`` ...) and each row is every arm's 8 values in the order given, each arm
circling around its own pose. Run in-process (``serve``) or as a process: ``python policy_http_server.py PORT
[--delay S] [--radius M]``. ``GET /stats`` reports the requests seen and any schema problem.
``post`` is the tests' raw client for any ``/predict`` server (status and JSON, errors included).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import math
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from PIL import Image


def post(url: str, body: bytes, timeout_s: float = 10.0) -> tuple[int, dict]:
    """POST ``body`` to ``url``/predict: (HTTP status, the JSON answer), an error status included."""
    req = urllib.request.Request(url + "/predict", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


STATE_DIMS = {"observation.arm_joint": 6, "observation.arm_eef": 7, "observation.gripper": 1}


def state_dims(arms: tuple[str, ...] = ()) -> dict[str, int]:
    """The state columns a request must carry: one arm's, or each arm's with its name in front."""
    if not arms:
        return STATE_DIMS
    return {f"observation.{arm}_{k.split('.', 1)[1]}": n for arm in arms for k, n in STATE_DIMS.items()}


def schema_problems(req: object, arms: tuple[str, ...] = ()) -> list[str]:
    out: list[str] = []
    if not isinstance(req, dict):
        return ["request is not an object"]
    if not isinstance(req.get("task"), str):
        out.append("task is not a string")
    h = req.get("horizon")
    if not isinstance(h, int) or isinstance(h, bool) or h < 1:
        out.append("horizon is not a positive int")
    state = req.get("state")
    if not isinstance(state, dict):
        out.append("state is not an object")
    else:
        for k, n in state_dims(arms).items():
            v = state.get(k)
            if not (isinstance(v, list) and len(v) == n and all(isinstance(x, (int, float)) for x in v)):
                out.append(f"state[{k}] is not {n} numbers")
    images = req.get("images")
    if not isinstance(images, dict):
        out.append("images is not an object")
    else:
        for cam, b64 in images.items():
            try:
                im = Image.open(io.BytesIO(base64.b64decode(b64, validate=True)))
                if im.format != "JPEG" or im.mode != "RGB":
                    out.append(f"images[{cam}] is {im.format} {im.mode}, not an RGB JPEG")
            except Exception as e:  # noqa: BLE001 - reported to the test
                out.append(f"images[{cam}] is not base64 JPEG: {e}")
    return out


class State:
    def __init__(self, delay_s: float = 0.0, radius: float = 0.02, rows: int | None = None, arms: tuple[str, ...] = ()):
        self.delay_s, self.radius, self.rows, self.arms = delay_s, radius, rows, tuple(arms)
        self.requests: list[dict] = []
        self.problems: list[str] = []
        self.image_sizes: dict[str, list[int]] = {}
        self.status = 200
        self.body: bytes | None = None  # a fixed (e.g. malformed) answer
        self.lock = threading.Lock()


def answer(req: dict, st: State) -> dict:
    n = req["horizon"] if st.rows is None else st.rows
    w = 2 * math.pi * 0.25  # one turn in 4 s, continued from the observed pose
    a0 = w * time.time()
    acts: list[list[float]] = [[] for _ in range(n)]
    for arm in st.arms or ("",):
        prefix = f"{arm}_" if arm else ""
        eef = req["state"][f"observation.{prefix}arm_eef"]
        g = req["state"][f"observation.{prefix}gripper"][0]
        for k in range(n):
            a = a0 + w * k / 30.0
            acts[k] += [
                eef[0] + st.radius * (math.sin(a) - math.sin(a0)),
                eef[1] + st.radius * (math.cos(a) - math.cos(a0)),
                eef[2],
                *eef[3:7],
                min(max(g, 0.0), 0.07),
            ]
    return {"actions": acts}


def make_handler(st: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            with st.lock:
                if self.path == "/stats":
                    self._send(
                        200,
                        json.dumps(
                            {"requests": len(st.requests), "problems": st.problems, "image_sizes": st.image_sizes}
                        ).encode(),
                    )
                elif self.path == "/info":
                    self._send(200, json.dumps({"content_hash": "test-server-0001"}).encode())
                else:
                    self._send(404, b"{}")

        def do_POST(self) -> None:
            if self.path != "/predict":
                self._send(404, b"{}")
                return
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                req = json.loads(raw)
            except ValueError:
                req = None
            probs = schema_problems(req, st.arms)
            with st.lock:
                st.problems += probs
                if isinstance(req, dict):
                    st.requests.append({k: v for k, v in req.items() if k != "images"})
                    for cam, b64 in (req.get("images") or {}).items():
                        try:
                            st.image_sizes[cam] = list(Image.open(io.BytesIO(base64.b64decode(b64))).size)
                        except Exception:  # noqa: BLE001
                            pass
                delay, status, body = st.delay_s, st.status, st.body
            if delay:
                time.sleep(delay)
            if probs:
                self._send(400, json.dumps({"error": probs}).encode())
            elif body is not None or status != 200:
                self._send(status, body or b"{}")
            else:
                self._send(200, json.dumps(answer(req, st)).encode())

    return Handler


def serve(port: int = 0, **kw: object) -> tuple[ThreadingHTTPServer, State]:
    st = State(**kw)  # type: ignore[arg-type]
    srv = ThreadingHTTPServer(("127.0.0.1", port), make_handler(st))
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, st


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--radius", type=float, default=0.02)
    a = ap.parse_args()
    srv, _ = serve(a.port, delay_s=a.delay, radius=a.radius)
    print(f"listening on {srv.server_address[1]}", flush=True)
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
