"""``http`` backend: PiperPilot's ``POST <url>/predict`` JSON protocol, so its servers work unchanged.

Request ``{"task", "state": {feature key: [floats]}, "images": {camera: base64 JPEG}, "horizon"}``;
answer ``{"actions": [[x, y, z, qw, qx, qy, qz, gripper], ...]}`` (at most ``horizon`` rows,
absolute targets in the arm base frame). Standard library only (urllib), one connection per query,
a hard timeout; any failure is a ``BackendError``.
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import urllib.error
import urllib.request

import numpy as np
from PIL import Image

from .backend import ACTION_DIM, ActionChunk, BackendError, BackendTimeout, Observation

JPEG_QUALITY = 90


def encode_jpeg(rgb: np.ndarray, quality: int = JPEG_QUALITY) -> str:
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8), "RGB").save(buf, "JPEG", quality=quality)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def request_body(obs: Observation, horizon: int) -> dict[str, object]:
    return {"task": obs.task,
            "state": {k: [float(x) for x in v] for k, v in obs.state.items()},
            "images": {cam: encode_jpeg(img) for cam, img in obs.images.items()},
            "horizon": int(horizon)}


def parse_actions(answer: object, horizon: int) -> np.ndarray:
    if not isinstance(answer, dict) or not isinstance(answer.get("actions"), list):
        raise BackendError("answer has no 'actions' list")
    rows = answer["actions"]
    if not rows:
        raise BackendError("answer has an empty 'actions' list")
    if len(rows) > horizon:
        rows = rows[:horizon]   # the protocol says at most horizon rows; extra ones are ignored
    try:
        arr = np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise BackendError(f"'actions' is not a list of number rows: {e}") from e
    if arr.ndim != 2 or arr.shape[1] != ACTION_DIM:
        raise BackendError(f"'actions' must be rows of {ACTION_DIM} numbers (x y z qw qx qy qz gripper), "
                           f"got shape {arr.shape}")
    return arr.astype(np.float32)


class HttpBackend:
    def __init__(self, url: str, timeout_s: float = 1.0):
        if not math.isfinite(timeout_s) or timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def describe(self) -> dict[str, object]:
        return {"backend": "http", "url": self.url, "protocol": "PiperPilot /predict",
                "content_hash": self._server_hash()}

    def _server_hash(self) -> str | None:
        """The server's own checkpoint hash if it publishes one (GET /info ``content_hash``)."""
        try:
            with urllib.request.urlopen(self.url + "/info", timeout=self.timeout_s) as r:
                info = json.loads(r.read())
            h = info.get("content_hash") if isinstance(info, dict) else None
            return str(h) if h else None
        except (OSError, ValueError):
            return None

    def predict(self, obs: Observation, horizon: int) -> ActionChunk:
        body = json.dumps(request_body(obs, horizon)).encode()
        req = urllib.request.Request(self.url + "/predict", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raise BackendError(f"{self.url}/predict: HTTP {e.code} {e.reason}") from e
        except (OSError, urllib.error.URLError) as e:   # refused, reset, timeout
            if isinstance(e, TimeoutError) or isinstance(getattr(e, "reason", None), TimeoutError):
                raise BackendTimeout(f"{self.url}/predict: timed out (no answer within {self.timeout_s} s)") from e
            raise BackendError(f"{self.url}/predict: {type(e).__name__}: {e}") from e
        try:
            answer = json.loads(raw)
        except ValueError as e:
            raise BackendError(f"{self.url}/predict: answer is not JSON: {e}") from e
        rows = parse_actions(answer, horizon)
        return ActionChunk(rows, obs.stamp_ns, obs.stamp_ns,
                           {"bytes_sent": len(body), "sha1": hashlib.sha1(raw).hexdigest()[:12]})

    def close(self) -> None:
        pass
