"""PiperPilot's ``POST /predict`` JSON protocol (reference-facts §7), both directions.

Request ``{"task": str, "state": {feature key: [floats]}, "images": {camera: base64 JPEG},
"horizon": int}``; answer ``{"actions": [[x, y, z, qw, qx, qy, qz, gripper], ...]}`` (at most
``horizon`` rows, absolute targets in the arm base frame). Errors are answered as ``{"error": str}``.

Only stdlib and numpy at import time: this module runs in the trainer's virtualenv (the server)
and in the project's (clients, tests, benches). Pillow is imported when a JPEG is encoded/decoded.
"""
from __future__ import annotations

import base64
import binascii
import io
import json
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]

ACTION_WIDTH = 8  # x, y, z, qw, qx, qy, qz, gripper: the dataset's `action` column
MAX_HORIZON = 10_000


class ProtocolError(ValueError):
    """A request or answer that does not follow the protocol (HTTP 400 on the server side)."""


class RequestRefused(ValueError):
    """A well-formed request this policy cannot answer (missing camera, another image size or state
    width): HTTP 400 with the reason, unlike a failure inside the model (500)."""


@dataclass(frozen=True)
class PredictRequest:
    """A decoded ``/predict`` request: images as HxWx3 uint8 RGB, state vectors as float32."""

    task: str
    state: dict[str, F32]
    images: dict[str, U8]
    horizon: int


def encode_jpeg(rgb: U8, quality: int = 90) -> str:
    """HxWx3 uint8 RGB -> base64 JPEG text, as PiperPilot's client sends it."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8), "RGB").save(buf, format="JPEG", quality=quality)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def decode_jpeg(text: str, camera: str) -> U8:
    """base64 JPEG (or any image Pillow reads) -> HxWx3 uint8 RGB; ProtocolError names the camera."""
    from PIL import Image, UnidentifiedImageError

    try:
        raw = base64.b64decode(text, validate=True)
        with Image.open(io.BytesIO(raw)) as im:
            return np.asarray(im.convert("RGB"), dtype=np.uint8)
    except (binascii.Error, ValueError, OSError, UnidentifiedImageError) as e:
        raise ProtocolError(f"images.{camera}: not a base64 image ({e})") from e


def encode_request(task: str, state: dict[str, F32], images: dict[str, U8], horizon: int,
                   quality: int = 90) -> bytes:
    """The JSON body a PiperPilot client posts."""
    body = {"task": task,
            "state": {k: [float(x) for x in np.asarray(v, dtype=np.float64).reshape(-1)] for k, v in state.items()},
            "images": {cam: encode_jpeg(img, quality) for cam, img in images.items()},
            "horizon": int(horizon)}
    return json.dumps(body).encode("utf-8")


def parse_request(body: bytes) -> PredictRequest:
    """Decode and check a request body; every defect is one ProtocolError naming the field."""
    doc = _json(body, "body")
    if not isinstance(doc, dict):
        raise ProtocolError("body must be a JSON object")
    task = doc.get("task", "")
    if not isinstance(task, str):
        raise ProtocolError("task must be a string")
    horizon = doc.get("horizon")
    if isinstance(horizon, bool) or not isinstance(horizon, int) or not 1 <= horizon <= MAX_HORIZON:
        raise ProtocolError(f"horizon must be an integer in [1, {MAX_HORIZON}], got {horizon!r}")
    state_doc = doc.get("state")
    if not isinstance(state_doc, dict):
        raise ProtocolError("state must be an object {feature key: [numbers]}")
    state: dict[str, F32] = {}
    for key, values in state_doc.items():
        if not isinstance(values, list) or not values or \
                not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            raise ProtocolError(f"state.{key} must be a non-empty list of numbers")
        state[str(key)] = _finite_f32(values, f"state.{key}", "value")
    images_doc = doc.get("images", {})
    if not isinstance(images_doc, dict) or not all(isinstance(v, str) for v in images_doc.values()):
        raise ProtocolError("images must be an object {camera: base64 JPEG string}")
    images = {str(cam): decode_jpeg(text, str(cam)) for cam, text in images_doc.items()}
    return PredictRequest(task=task, state=state, images=images, horizon=horizon)


def encode_answer(actions: npt.NDArray[np.floating]) -> bytes:
    """``{"actions": [[8 floats], ...]}``; refuses anything but finite (n, 8) rows."""
    a = np.asarray(actions, dtype=np.float64)
    if a.ndim != 2 or a.shape[1] != ACTION_WIDTH or a.shape[0] < 1:
        raise ValueError(f"actions must be (n >= 1, {ACTION_WIDTH}), got {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError("the policy returned a non-finite action")
    return json.dumps({"actions": a.tolist()}).encode("utf-8")


def parse_answer(body: bytes, horizon: int, cut: bool = False) -> F32:
    """Client side: the answer's rows as (n, 8) float32, n in [1, horizon]; ProtocolError otherwise
    (including an ``{"error": ...}`` answer). ``cut``: keep the first ``horizon`` rows of a longer
    answer instead (servers written for PiperPilot may answer their whole chunk)."""
    doc = _json(body, "answer")
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        raise ProtocolError(f"server error: {doc['error']}")
    rows = doc.get("actions") if isinstance(doc, dict) else None
    if cut and isinstance(rows, list):
        rows = rows[:horizon]
    if not isinstance(rows, list) or not rows or len(rows) > horizon:
        raise ProtocolError(f"answer must hold 1..{horizon} action rows")
    if not all(isinstance(r, list) and len(r) == ACTION_WIDTH and
               all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in r) for r in rows):
        raise ProtocolError(f"every action row must be {ACTION_WIDTH} numbers")
    return _finite_f32(rows, "answer", "action")


def _json(body: bytes, what: str) -> object:
    """``json.loads`` whose every failure is a ProtocolError in the sender's terms: not JSON, or nested
    deeper than the parser's recursion limit (``[[[[...`` a few thousand deep raises RecursionError)."""
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"{what} is not JSON ({e})") from e
    except RecursionError:
        raise ProtocolError(f"{what} nested too deeply (not a {what} of this protocol)") from None


def _finite_f32(values: object, what: str, kind: str) -> F32:
    """Numbers -> float32, refusing what float32 cannot hold as such: non-finite values, and values out
    of float32's range (an integer beyond float64 raises OverflowError; 1e39 would become inf)."""
    try:
        wide = np.asarray(values, dtype=np.float64)
    except OverflowError:
        raise ProtocolError(f"{what}: {kind} value out of range (larger than any float)") from None
    if not np.isfinite(wide).all():
        raise ProtocolError(f"{what} holds a non-finite {kind}")
    if (np.abs(wide) > np.finfo(np.float32).max).any():
        raise ProtocolError(f"{what}: {kind} value out of range (beyond float32, {np.finfo(np.float32).max:.3g})")
    return wide.astype(np.float32)
