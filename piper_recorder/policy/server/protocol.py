"""PiperPilot's ``POST /predict`` JSON protocol (reference-facts §7), both directions.

Request ``{"task": str, "state": {feature key: [floats]}, "images": {camera: base64 JPEG},
"horizon": int}``; answer ``{"actions": [[x, y, z, qw, qx, qy, qz, gripper], ...]}`` (at most
``horizon`` rows, absolute targets in the arm base frame). Errors are answered as ``{"error": str}``.
Two arms: ``state`` carries each arm's columns and ``observation.state`` as the training root has them,
and an action row is the root's whole ``action`` column, each arm's 8 values in the root's order (16;
``lerobot.format.action_layout``). The client checks the width against its training root; the server
answers the width its policy was trained with (a multiple of ``ACTION_WIDTH``).

Only stdlib and numpy at import time: this module runs in the trainer's virtualenv (the server)
and in the project's (clients, tests, benches). Pillow is imported when a JPEG is encoded/decoded.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from piper_recorder.errors import PiperInputError
from piper_recorder.names import image_camera

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]

ACTION_WIDTH = 8  # one arm's x, y, z, qw, qx, qy, qz, gripper: the dataset's `action` column (two arms: 16)
MAX_HORIZON = 10_000
MAX_IMAGES = 8  # images per request when the policy does not say which cameras it takes
MAX_PIXELS = 4096 * 4096  # per image (a 4K frame is 8.3 Mpx); also Pillow's MAX_IMAGE_PIXELS in the server


class ProtocolError(PiperInputError, ValueError):
    """A request or answer that does not follow the protocol (HTTP 400 on the server side)."""


class RequestRefused(PiperInputError, ValueError):
    """A well-formed request this policy cannot answer (missing camera, another image size or state width).

    HTTP 400 with the reason, unlike a failure inside the model (500).
    """


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


@dataclass(frozen=True)
class ImageRule:
    """What a request's images may be, checked before any is decoded.

    A decoded frame costs W*H*3 bytes whatever its file size. ``cameras``: camera name -> (width, height) the policy
    was trained on; images of other cameras are not decoded (the policy does not use them) and a used one of another
    size is refused from its header. ``single``: the policy takes one image of any camera (LeRobot's
    ``observation.image``), of that size. Neither known (a runner that does not list its inputs): at most
    ``max_images`` images of at most ``max_pixels`` each. JPEG only, always (PiperPilot's protocol).
    """

    cameras: dict[str, tuple[int, int]] | None = None
    single: tuple[int, int] | None = None
    max_images: int = MAX_IMAGES
    max_pixels: int = MAX_PIXELS

    @staticmethod
    def from_inputs(inputs: object) -> ImageRule:
        """From a runner's ``info()["inputs"]`` ({feature key: {"type", "shape": [c, h, w]}})."""
        if not isinstance(inputs, dict):
            return ImageRule()
        cams: dict[str, tuple[int, int]] = {}
        single = None
        for key, f in inputs.items():
            if not isinstance(f, dict) or f.get("type") != "VISUAL":
                continue
            shape = f.get("shape")
            if not (isinstance(shape, (list, tuple)) and len(shape) == 3 and all(isinstance(v, int) for v in shape)):
                return ImageRule()
            size = (int(shape[2]), int(shape[1]))
            if (cam := image_camera(str(key))) is not None:
                cams[cam] = size
            elif key == "observation.image":
                single = size
        return ImageRule(cameras=cams, single=single)


JPEG_MAGIC = b"\xff\xd8\xff"
_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


def jpeg_size(raw: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's frame header (SOFn), walking the marker segments; None before the scan.

    Read here rather than by Pillow so that a frame too large for Pillow's bomb cap is refused with its size, like
    any other wrong size.
    """
    i = 2
    while i + 4 <= len(raw):
        if raw[i] != 0xFF:
            return None
        marker = raw[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # segments without a length
            i += 2
            continue
        n = int.from_bytes(raw[i + 2 : i + 4], "big")
        if marker in _SOF:
            if i + 9 > len(raw):
                return None
            return int.from_bytes(raw[i + 7 : i + 9], "big"), int.from_bytes(raw[i + 5 : i + 7], "big")
        if marker == 0xDA or n < 2:  # start of scan before any frame header
            return None
        i += 2 + n
    return None


def _open_jpeg(text: str, camera: str, rule: ImageRule) -> object:
    """base64 JPEG -> a lazily opened Pillow image (header read, nothing decoded), its format and size checked.

    ProtocolError names the camera.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ProtocolError(f"images.{camera}: not base64 ({e})") from e
    if not raw.startswith(JPEG_MAGIC):
        raise ProtocolError(f"images.{camera}: not a JPEG (the protocol sends base64 JPEG; this starts {raw[:8]!r})")
    size = jpeg_size(raw)
    if size is None:
        raise ProtocolError(f"images.{camera}: not a readable JPEG (no frame header)")
    w, h = size
    want = rule.single if rule.cameras is not None and camera not in rule.cameras else (rule.cameras or {}).get(camera)
    if want is not None and (w, h) != want:
        raise ProtocolError(
            f"images.{camera}: {w}x{h}, the policy was trained on {want[0]}x{want[1]} frames (the server never resizes)"
        )
    if w * h > rule.max_pixels:
        raise ProtocolError(f"images.{camera}: {w}x{h} is more than {rule.max_pixels} pixels")
    try:
        im = Image.open(io.BytesIO(raw), formats=["JPEG"])  # reads the header only
    except (ValueError, OSError, UnidentifiedImageError, Image.DecompressionBombError) as e:
        raise ProtocolError(f"images.{camera}: not a readable JPEG ({e})") from e
    if im.size != (w, h):  # Pillow read another frame header than ours: trust neither
        im.close()
        raise ProtocolError(f"images.{camera}: not a readable JPEG (inconsistent frame headers)")
    return im


def _decode_opened(im: object, camera: str) -> U8:
    from PIL import Image

    assert isinstance(im, Image.Image)
    try:
        with im:
            return np.asarray(im.convert("RGB"), dtype=np.uint8)
    except (ValueError, OSError, Image.DecompressionBombError) as e:  # truncated or corrupt scan data
        raise ProtocolError(f"images.{camera}: a damaged JPEG ({e})") from e


def decode_jpeg(text: str, camera: str, rule: ImageRule | None = None) -> U8:
    """base64 JPEG -> HxWx3 uint8 RGB, checked from its header first; ProtocolError names the camera."""
    return _decode_opened(_open_jpeg(text, camera, rule or ImageRule()), camera)


def encode_request(task: str, state: dict[str, F32], images: dict[str, U8], horizon: int, quality: int = 90) -> bytes:
    """The JSON body a PiperPilot client posts."""
    body = {
        "task": task,
        "state": {k: [float(x) for x in np.asarray(v, dtype=np.float64).reshape(-1)] for k, v in state.items()},
        "images": {cam: encode_jpeg(img, quality) for cam, img in images.items()},
        "horizon": int(horizon),
    }
    return json.dumps(body).encode("utf-8")


def parse_request(
    body: bytes, rule: ImageRule | None = None, decode_gate: AbstractContextManager[object] | None = None
) -> PredictRequest:
    """Check and decode a request body; every defect is one ProtocolError naming the field.

    Everything is checked before any image is decoded: the fields, which images the policy uses
    (``rule``; the others are dropped undecoded), their count, and each one's format and size from its
    JPEG header. Only then are the used images decoded, inside ``decode_gate`` (the server's bounded
    decoder slots) when given.
    """
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
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        ):
            raise ProtocolError(f"state.{key} must be a non-empty list of numbers")
        state[str(key)] = _finite_f32(values, f"state.{key}", "value")
    images_doc = doc.get("images", {})
    if not isinstance(images_doc, dict) or not all(isinstance(v, str) for v in images_doc.values()):
        raise ProtocolError("images must be an object {camera: base64 JPEG string}")
    rule = rule or ImageRule()
    if rule.cameras is not None:
        used = {str(c): t for c, t in images_doc.items() if str(c) in rule.cameras}
        if rule.single is not None and not used and len(images_doc) == 1:
            used = {str(c): t for c, t in images_doc.items()}
    else:
        used = {str(c): t for c, t in images_doc.items()}
    if len(used) > rule.max_images:
        raise ProtocolError(f"images: {len(used)} images, at most {rule.max_images} per request")
    opened: dict[str, object] = {}
    try:
        for cam, text in used.items():
            opened[cam] = _open_jpeg(text, cam, rule)
        with decode_gate if decode_gate is not None else nullcontext():
            images = {cam: _decode_opened(opened.pop(cam), cam) for cam in list(opened)}
    finally:
        for im in opened.values():
            getattr(im, "close")()
    return PredictRequest(task=task, state=state, images=images, horizon=horizon)


def encode_answer(actions: npt.NDArray[np.floating], width: int = ACTION_WIDTH) -> bytes:
    """``{"actions": [[width floats], ...]}``; refuses anything but finite (n, width) rows."""
    a = np.asarray(actions, dtype=np.float64)
    if a.ndim != 2 or a.shape[1] != width or a.shape[0] < 1:
        raise ValueError(f"actions must be (n >= 1, {width}), got {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError("the policy returned a non-finite action")
    return json.dumps({"actions": a.tolist()}).encode("utf-8")


def parse_answer(body: bytes, horizon: int, cut: bool = False, width: int = ACTION_WIDTH) -> F32:
    """Client side: the answer's rows as (n, width) float32, n in [1, horizon]; ProtocolError otherwise.

    An ``{"error": ...}`` answer is a ProtocolError too. ``cut``: keep the first ``horizon`` rows of a longer answer
    instead (servers written for PiperPilot may answer their whole chunk).
    """
    doc = _json(body, "answer")
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        raise ProtocolError(f"server error: {doc['error']}")
    rows = doc.get("actions") if isinstance(doc, dict) else None
    if cut and isinstance(rows, list):
        rows = rows[:horizon]
    if not isinstance(rows, list) or not rows or len(rows) > horizon:
        raise ProtocolError(f"answer must hold 1..{horizon} action rows")
    if not all(
        isinstance(r, list)
        and len(r) == width
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in r)
        for r in rows
    ):
        got = sorted({len(r) for r in rows if isinstance(r, list)})
        seen = f" (got rows of {', '.join(map(str, got))})" if got and got != [width] else ""
        raise ProtocolError(f"every action row must be {width} numbers{seen}")
    return _finite_f32(rows, "answer", "action")


def _json(body: bytes, what: str) -> object:
    """``json.loads`` whose every failure is a ProtocolError in the sender's terms.

    Not JSON, or nested deeper than the parser's recursion limit (``[[[[...`` a few thousand deep raises
    RecursionError).
    """
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"{what} is not JSON ({e})") from e
    except RecursionError:
        raise ProtocolError(f"{what} nested too deeply (not a {what} of this protocol)") from None


def _finite_f32(values: object, what: str, kind: str) -> F32:
    """Numbers -> float32, refusing what float32 cannot hold as such.

    Refused: non-finite values, and values out of float32's range (an integer beyond float64 raises OverflowError;
    1e39 would become inf).
    """
    out_of_range = f"{what}: {'action value' if kind == 'action' else 'value'} out of range"
    try:
        wide = np.asarray(values, dtype=np.float64)
    except OverflowError:
        raise ProtocolError(f"{out_of_range} (larger than any float)") from None
    if not np.isfinite(wide).all():
        raise ProtocolError(f"{what} holds a non-finite {kind}")
    if (np.abs(wide) > np.finfo(np.float32).max).any():
        raise ProtocolError(f"{out_of_range} (beyond float32, {np.finfo(np.float32).max:.3g})")
    return wide.astype(np.float32)
