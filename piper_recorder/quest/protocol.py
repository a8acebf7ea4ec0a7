"""Headset stream protocol: typed messages and a strict, never-raising streaming parser.

The headset sends newline-delimited JSON (reference-facts section 1). TCP delivers it in arbitrary
chunks, and a bad line must never take the pipeline down or let a non-finite number through to a
robot target, so :class:`StreamParser` takes bytes in, returns only fully validated messages, and
counts every rejected line by reason (``parser.rejected``, a Counter).

Validation rules (a line failing any of them is rejected whole and counted):

- a line is at most ``max_line_bytes`` bytes (longer: discarded up to the next newline, ``too_long``);
- UTF-8 (``bad_utf8``), JSON (``bad_json``), a JSON object (``not_object``);
- ``NaN``/``Infinity`` literals (Python's json emits them) or numbers overflowing to inf: ``non_finite``;
- anywhere in the line, what a consumer could not hold or re-encode: an integer beyond 64 bits
  (``out_of_range``), a string with an unpaired surrogate escape (``bad_utf8``: no UTF-8 encoding exists;
  the recorders write the hello into their provenance), objects and arrays nested deeper than
  ``MAX_DEPTH`` (``too_deep``); a hello longer than ``MAX_HELLO_BYTES`` (``too_long``: it is published
  latched and stored with every episode);
- kind: ``{"hello": {...}}``, ``{"heartbeat": ...}``, or a frame (has ``"mono"``); else ``unknown_kind``;
  a line is a hello only if it has none of the frame keys (``FRAME_KEYS``) and no ``heartbeat``: a frame
  carrying a stray ``"hello"`` key is a frame and never replaces the headset hello;
- frame: ``t``/``mono`` finite numbers within +-1e9 s, ``frame`` an int in [0, 2**63), ``state`` a
  string, ``space`` an identifier; ``head``/``left``/``right`` objects (``missing_field``/``bad_type``);
- device: ``pos`` 3 numbers within +-1 km, ``quat`` 4 numbers (xyzw) with | |q| - 1 | <= ``quat_tolerance``
  (``quat_norm``; accepted quaternions are re-normalised), ``valid``/``tracked`` booleans; hands also
  ``trigger``/``squeeze`` in [0, 1], ``stick`` 2 numbers in [-1, 1] (``out_of_range``), and the
  booleans ``stick_click``/``primary``/``secondary``/``menu``.
  A device reporting ``valid: false`` may carry a degenerate quaternion (OpenXR leaves the pose
  undefined); it is replaced by identity instead of rejecting the other devices' data.
- blank lines are counted as ``empty``.

Every accepted message keeps its raw line text (``raw``, without the newline) so the bridge can
publish it verbatim on ``/quest/raw`` and the recorder can store it; rejected lines are not
published anywhere (only counted; ``last_rejection`` holds the latest reason and detail for logs).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from math import isfinite
from typing import Any

from piper_recorder.errors import PiperInputError
from piper_recorder.names import QUEST_DEVICES, QUEST_HANDS

MAX_LINE_BYTES = 64 * 1024
QUAT_TOLERANCE = 0.1
HANDS = QUEST_HANDS  # the protocol's device keys are the topics' (/quest/<device>/pose)
DEVICES = QUEST_DEVICES
FRAME_KEYS = ("mono", "t", "frame", "state", "space", *DEVICES)  # any of them: the line is no hello
_SPACE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
_INT_MAX = 2**63
MAX_ABS_TIME_S = 1e9  # t/mono: seconds since some boot; beyond ~31 years is corruption
MAX_ABS_POS_M = 1e3  # a tracked position a kilometre away is corruption
MAX_DEPTH = 16  # objects/arrays inside one another (a frame needs 3, the page's hello 3)
MAX_HELLO_BYTES = 8 * 1024  # app info, published latched and stored in every episode's provenance
_FLOAT_MAX = int(sys.float_info.max)

Vec3 = tuple[float, float, float]
Quat = tuple[float, float, float, float]


@dataclass(frozen=True)
class DeviceSample:
    """Pose of one tracked device in the XR frame; quat is xyzw, unit norm."""

    pos: Vec3
    quat: Quat
    valid: bool
    tracked: bool

    @property
    def usable(self) -> bool:
        """A pose worth acting on / publishing: the runtime reports it valid and tracked."""
        return self.valid and self.tracked


@dataclass(frozen=True)
class HandSample(DeviceSample):
    """A controller: pose plus analog inputs and buttons (A/X = primary, B/Y = secondary)."""

    trigger: float = 0.0
    squeeze: float = 0.0
    stick: tuple[float, float] = (0.0, 0.0)
    stick_click: bool = False
    primary: bool = False
    secondary: bool = False
    menu: bool = False


@dataclass(frozen=True)
class Frame:
    """One rendered headset frame. ``mono`` is the headset monotonic clock (s) at capture."""

    t: float
    mono: float
    frame: int
    state: str
    space: str
    head: DeviceSample
    left: HandSample
    right: HandSample
    raw: str = field(repr=False, compare=False)

    def hand(self, name: str) -> HandSample:
        """The ``left`` or ``right`` hand's sample."""
        return self.left if name == "left" else self.right


@dataclass(frozen=True)
class Hello:
    """The app info object the headset sends on connect."""

    info: dict[str, Any]
    raw: str = field(repr=False, compare=False)


@dataclass(frozen=True)
class Heartbeat:
    """Keep-alive line; ``mono`` only when the headset includes a finite one."""

    value: Any
    state: str | None
    mono: float | None
    raw: str = field(repr=False, compare=False)


Message = Frame | Hello | Heartbeat


class Rejected(PiperInputError, ValueError):
    """A line failed validation; ``reason`` is the counter key, ``detail`` says where."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


def _no_constants(name: str) -> Any:
    raise Rejected("non_finite", name)


def _float(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Rejected("bad_type", f"{where}: expected a number")
    try:
        out = float(value)
    except OverflowError:  # a huge JSON integer
        raise Rejected("non_finite", where) from None
    if not math.isfinite(out):
        raise Rejected("non_finite", where)
    return out


def _floats(value: Any, n: int, where: str) -> tuple[float, ...]:
    if not isinstance(value, list) or len(value) != n:
        raise Rejected("bad_type", f"{where}: expected {n} numbers")
    # a frame carries ~30 numbers at 90 Hz: the common case (a finite JSON float) is checked inline,
    # and only another value goes through ``_float`` with its place named for the rejection
    out = []
    for i, v in enumerate(value):
        if type(v) is not float or not isfinite(v):
            v = _float(v, f"{where}[{i}]")
        out.append(v)
    return tuple(out)


def _ranged(value: Any, lo: float, hi: float, where: str) -> float:
    out = _float(value, where)
    if not lo <= out <= hi:
        raise Rejected("out_of_range", f"{where}={out} not in [{lo}, {hi}]")
    return out


def _bool(obj: dict, key: str, where: str) -> bool:
    if key not in obj:
        raise Rejected("missing_field", f"{where}.{key}")
    value = obj[key]
    if not isinstance(value, bool):
        raise Rejected("bad_type", f"{where}.{key}: expected a boolean")
    return value


def _get(obj: dict, key: str, where: str) -> Any:
    if key not in obj:
        raise Rejected("missing_field", f"{where}.{key}" if where else key)
    return obj[key]


def _pose(obj: dict, where: str, tolerance: float) -> tuple[Vec3, Quat, bool, bool]:
    valid = _bool(obj, "valid", where)
    tracked = _bool(obj, "tracked", where)
    pos = _floats(_get(obj, "pos", where), 3, f"{where}.pos")
    if not all(abs(p) <= MAX_ABS_POS_M for p in pos):
        raise Rejected("out_of_range", f"{where}.pos beyond {MAX_ABS_POS_M:g} m")
    quat = _floats(_get(obj, "quat", where), 4, f"{where}.quat")
    x, y, z, w = quat
    norm = math.sqrt(x * x + y * y + z * z + w * w)
    if abs(norm - 1.0) > tolerance or not math.isfinite(norm):
        if valid:
            raise Rejected("quat_norm", f"{where}.quat |q|={norm:.4g}")
        quat = (0.0, 0.0, 0.0, 1.0)  # undefined pose of an invalid device
    else:
        quat = (x / norm, y / norm, z / norm, w / norm)
    return pos, quat, valid, tracked  # type: ignore[return-value]


def _device(obj: Any, where: str, tolerance: float) -> DeviceSample:
    if not isinstance(obj, dict):
        raise Rejected("bad_type", f"{where}: expected an object")
    return DeviceSample(*_pose(obj, where, tolerance))


def _hand(obj: Any, where: str, tolerance: float) -> HandSample:
    if not isinstance(obj, dict):
        raise Rejected("bad_type", f"{where}: expected an object")
    pos, quat, valid, tracked = _pose(obj, where, tolerance)
    stick = _floats(_get(obj, "stick", where), 2, f"{where}.stick")
    for i, s in enumerate(stick):
        if not -1.0 <= s <= 1.0:
            raise Rejected("out_of_range", f"{where}.stick[{i}]={s}")
    return HandSample(
        pos=pos,
        quat=quat,
        valid=valid,
        tracked=tracked,
        trigger=_ranged(_get(obj, "trigger", where), 0.0, 1.0, f"{where}.trigger"),
        squeeze=_ranged(_get(obj, "squeeze", where), 0.0, 1.0, f"{where}.squeeze"),
        stick=stick,  # type: ignore[arg-type]
        stick_click=_bool(obj, "stick_click", where),
        primary=_bool(obj, "primary", where),
        secondary=_bool(obj, "secondary", where),
        menu=_bool(obj, "menu", where),
    )


def _frame(obj: dict, raw: str, tolerance: float) -> Frame:
    frame_no = _get(obj, "frame", "")
    if isinstance(frame_no, bool) or not isinstance(frame_no, int):
        raise Rejected("bad_type", "frame: expected an integer")
    if not 0 <= frame_no < _INT_MAX:
        raise Rejected("out_of_range", "frame")
    state = _get(obj, "state", "")
    if not isinstance(state, str) or len(state) > 64:
        raise Rejected("bad_type", "state: expected a short string")
    space = _get(obj, "space", "")
    if not isinstance(space, str) or not _SPACE_RE.match(space):
        raise Rejected("bad_type", "space: expected an identifier")
    return Frame(
        t=_ranged(_get(obj, "t", ""), -MAX_ABS_TIME_S, MAX_ABS_TIME_S, "t"),
        mono=_ranged(_get(obj, "mono", ""), -MAX_ABS_TIME_S, MAX_ABS_TIME_S, "mono"),
        frame=frame_no,
        state=state,
        space=space,
        head=_device(_get(obj, "head", ""), "head", tolerance),
        left=_hand(_get(obj, "left", ""), "left", tolerance),
        right=_hand(_get(obj, "right", ""), "right", tolerance),
        raw=raw,
    )


_DECODER = json.JSONDecoder(parse_constant=_no_constants)


def _unencodable(text: str) -> bool:
    r"""A string JSON allows but UTF-8 cannot encode (an unpaired surrogate escape such as ``"\ud800"``)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _check_tree(obj: dict) -> None:
    """Check that every value of a line is one a consumer can hold and re-encode.

    Numbers finite (1e999 overflows to inf), integers within 64 bits, strings (keys too) encodable as UTF-8, nesting at most ``MAX_DEPTH``.
    Iterative (no recursion limit to hit); the first offender is named by its path, e.g. ``hello.v[2]``.
    """
    stack: list[tuple[Any, str, int]] = [(obj, "", 1)]
    while stack:
        node, path, depth = stack.pop()
        if type(node) is dict:
            items: Any = node.items()
            for k in node:
                if not k.isascii() and _unencodable(k):
                    raise Rejected("bad_utf8", f"{path or 'line'}: a key with an unpaired surrogate")
        else:
            items = enumerate(node)
        for k, v in items:
            t = type(v)
            if t is float:
                if not isfinite(v):
                    raise Rejected("non_finite", _at(path, k))
            elif t is str:
                if not v.isascii() and _unencodable(v):
                    raise Rejected("bad_utf8", f"{_at(path, k)}: an unpaired surrogate")
            elif t is dict or t is list:
                if depth >= MAX_DEPTH:
                    raise Rejected("too_deep", f"{_at(path, k)}: more than {MAX_DEPTH} levels")
                stack.append((v, _at(path, k), depth + 1))
            elif t is int and not -_INT_MAX <= v < _INT_MAX:  # every consumer holds int64
                if abs(v) >= _FLOAT_MAX:  # as a number field reports it: the float it would be is inf
                    raise Rejected("non_finite", _at(path, k))
                raise Rejected("out_of_range", f"{_at(path, k)}: an integer beyond 64 bits")


def _at(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def parse_line(line: bytes | str, quat_tolerance: float = QUAT_TOLERANCE) -> Message:
    """Validate one line (without its newline) into a message; raises :class:`Rejected` only."""
    if isinstance(line, bytes):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            raise Rejected("bad_utf8") from None
    else:
        text = line
    text = text.rstrip("\r")
    if not text.strip():
        raise Rejected("empty")
    try:
        # one decoder for every line (json.loads with an option builds a new one each call); loads
        # itself refuses a leading BOM, which decode() would report differently
        obj = _DECODER.decode(text) if not text.startswith("\ufeff") else json.loads(text, parse_constant=_no_constants)
    except Rejected:
        raise
    except RecursionError:
        raise Rejected("too_deep", f"more than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise Rejected("bad_json", str(exc)[:80]) from None
    if not isinstance(obj, dict):
        raise Rejected("not_object")
    _check_tree(obj)
    if "hello" in obj and "heartbeat" not in obj and not any(k in obj for k in FRAME_KEYS):
        info = obj["hello"]
        if not isinstance(info, dict):
            raise Rejected("bad_type", "hello: expected an object")
        if len(text) > MAX_HELLO_BYTES and len(text.encode("utf-8")) > MAX_HELLO_BYTES:
            raise Rejected("too_long", f"hello > {MAX_HELLO_BYTES} bytes")
        return Hello(info=info, raw=text)
    if "heartbeat" in obj:
        value = obj["heartbeat"]
        if isinstance(value, (dict, list)):
            raise Rejected("bad_type", "heartbeat: expected a scalar")
        if isinstance(value, float) and not math.isfinite(value):
            raise Rejected("non_finite", "heartbeat")
        state = obj.get("state")
        if state is not None and not isinstance(state, str):
            raise Rejected("bad_type", "state: expected a string")
        mono = _ranged(obj["mono"], -MAX_ABS_TIME_S, MAX_ABS_TIME_S, "mono") if "mono" in obj else None
        return Heartbeat(value=value, state=state, mono=mono, raw=text)
    if "mono" in obj:
        return _frame(obj, text, quat_tolerance)
    raise Rejected("unknown_kind")


class StreamParser:
    """Bytes in (any chunking), validated messages out. Never raises on input; counts rejections.

    ``accepted`` counts messages by kind ("frame", "hello", "heartbeat"); ``rejected`` counts
    rejected lines by reason. ``reset()`` drops a partial line (call it on reconnect) but keeps
    the counters, which are cumulative over the parser's life.
    """

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES, quat_tolerance: float = QUAT_TOLERANCE):
        if max_line_bytes < 2:
            raise ValueError("max_line_bytes must be >= 2")
        self.max_line_bytes = max_line_bytes
        self.quat_tolerance = quat_tolerance
        self.accepted: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self.last_rejection: str = ""
        self._buf = bytearray()
        self._discarding = False

    @property
    def rejected_total(self) -> int:
        """Lines rejected so far, all reasons."""
        return sum(self.rejected.values())

    def reset(self) -> None:
        """Drop the partial line held (a new connection)."""
        self._buf.clear()
        self._discarding = False

    def feed(self, data: bytes) -> list[Message]:
        """The messages completed by ``data``, validated; never raises."""
        out: list[Message] = []
        start = 0
        n = len(data)
        while start < n:
            nl = data.find(b"\n", start)
            end = n if nl < 0 else nl
            chunk = data[start:end]
            if self._discarding:
                if nl >= 0:
                    self._discarding = False
            elif len(self._buf) + len(chunk) > self.max_line_bytes:
                self._buf.clear()
                self._reject("too_long", f"> {self.max_line_bytes} bytes")
                self._discarding = nl < 0
            elif nl < 0:
                self._buf += chunk
            else:
                if self._buf:
                    self._buf += chunk
                    line = bytes(self._buf)
                    self._buf.clear()
                else:
                    line = bytes(chunk)
                msg = self._parse(line)
                if msg is not None:
                    out.append(msg)
            start = n if nl < 0 else nl + 1
        return out

    def _parse(self, line: bytes) -> Message | None:
        try:
            msg = parse_line(line, self.quat_tolerance)
        except Rejected as exc:
            self._reject(exc.reason, exc.detail)
            return None
        except Exception as exc:  # noqa: BLE001 - the contract is: never raise on input
            self._reject("internal", repr(exc)[:80])
            return None
        self.accepted[_KIND[type(msg)]] += 1
        return msg

    def _reject(self, reason: str, detail: str) -> None:
        self.rejected[reason] += 1
        self.last_rejection = f"{reason}: {detail}" if detail else reason


_KIND = {Frame: "frame", Hello: "hello", Heartbeat: "heartbeat"}


def encode(obj: dict[str, Any]) -> bytes:
    """One protocol line (compact JSON + newline); refuses non-finite numbers."""
    return (json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")
