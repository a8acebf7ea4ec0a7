"""What the operator reads in the headset: the HUD state, fed from the graph's status, and its image (no ROS).

``HudModel`` folds the messages the graph already publishes (plain dicts here; the ``quest_video``
node parses them) into one ``HudState``: the primary recorder's ``~/status`` and ``/episode_events``
(recording, episode, timer, saved this session, refusals), ``/teleop/status`` (clutch, the safety
limits holding the target now, refused presses, the releases teleop made: ``releases`` counts them
and a new one shows as the error line with its reason, since the operator must re-grip), the bridge's ``/diagnostics`` (headset input rate)
and ``/arm/status`` (arm state). ``render_hud`` draws it as the 640x140 strip the app shows under
the camera panels and returns a JPEG that also carries the state as JSON in a JPEG comment (COM)
segment: decoders (the app's stb_image, Pillow) skip it, and a test or tool can read exactly what
the image shows (``hud_state_from_jpeg``).

Two arms (``arms``, or teleop's status naming them under ``arms``): the second line shows each arm's clutch
(``L ENGAGED  R idle``) and arm state, a release teleop made shows with the arm it released
(``RELEASED: L <reason> - re-grip``), and the state carries each arm's part under ``arms``. ``engaged`` (any
arm), ``releases`` (every arm's, the count the simulated headset re-grips on) and ``last_release`` (the
newest) keep their one-arm meaning; one arm shows and reports exactly what it did.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from piper_recorder.names import parse_arms
from rgbd_writer.codecs import encode_rgb_jpeg

from .video import HUD_SIZE

RELEASED = "RELEASED: "  # how the error line of a release teleop made begins (the sim headset reads it)
ERROR_HOLD_S = 8.0  # an error stays on the HUD this long (a limit or the normal line shows after it)
STATUS_GRACE_S = 1.0  # a ~/status this soon after an event may predate it: its state is not trusted
MIN_LINE_PX = 16  # a two-arm line too wide for the strip is drawn smaller, down to this size


def arm_labels(arms: Sequence[str]) -> dict[str, str]:
    """How the HUD names each arm: its initial in capitals (``L``, ``R``) when the initials tell the arms apart."""
    initials = [a[:1].upper() for a in arms]
    if len(set(initials)) == len(initials):
        return dict(zip(arms, initials))
    return {a: a.upper() for a in arms}


@dataclass
class ArmHud:
    """One arm's part of a two-arm HUD: its clutch, limits and releases (teleop's ``arms.<arm>``), its state."""

    label: str  # how the lines name it (``arm_labels``)
    engaged: bool | None = None  # None: no teleop status of this arm yet
    limits: list[str] = field(default_factory=list)
    releases: int = 0  # this arm's forced releases
    last_release: str = ""  # ... the newest one's reason
    status: str = ""  # its /<arm>/arm/status ("OK", "ERROR: ...")


def _clutch(engaged: bool | None) -> str:
    return "--" if engaged is None else ("ENGAGED" if engaged else "idle")


@dataclass
class HudState:
    """What the HUD shows at one instant."""

    recording: bool = False
    episode_index: int | None = None
    elapsed_s: float = 0.0
    saved_count: int = 0
    engaged: bool | None = None  # None: no teleop status yet
    input_hz: float | None = None  # None: no bridge diagnostics yet
    headset: str = ""  # the bridge's connection state
    limits: list[str] = field(default_factory=list)  # teleop safety limits shaping the target now
    error: str = ""  # the newest error still within ERROR_HOLD_S
    arm: str = ""  # arm state from /arm/status ("OK", "ERROR: ...")
    releases: int = 0  # clutch releases teleop made (teleop's forced_releases)
    degraded: list[str] = field(default_factory=list)  # deliveries below their mark (piper_recorder.process.delivery)
    last_release: str = ""  # ... the newest one's reason
    # the last saved episode's curation: "ep3 success ok" (outcome label, integrity verdict; docs/curation.md)
    last_episode: str = ""
    arms: dict[str, ArmHud] = field(default_factory=dict)  # two arms: each one's part (empty: one arm)

    def headline(self) -> str:
        """The first line: recording and its timer, or ready and the episodes saved."""
        if self.recording:
            ep = "?" if self.episode_index is None else str(self.episode_index)
            minutes, seconds = divmod(max(0.0, self.elapsed_s), 60.0)
            return f"REC ep{ep}  {int(minutes):02d}:{seconds:04.1f}"
        last = f"  {self.last_episode}" if self.last_episode else ""
        return f"READY  {self.saved_count} saved{last}"

    def info_line(self) -> str:
        """The second line: episodes saved, clutch (each arm's: ``L ENGAGED  R idle``), input rate, arm state."""
        if self.arms:
            clutch = "  ".join(f"{a.label} {_clutch(a.engaged)}" for a in self.arms.values())
        else:
            clutch = _clutch(self.engaged)
        rate = "--" if self.input_hz is None else f"{self.input_hz:.0f} Hz"
        return f"{self.saved_count} saved | {clutch} | input {rate} | arm {self.arm or '--'}"

    def alert_line(self) -> tuple[str, str]:
        """(text, kind) of the alert line: the held error, else the active limits, else a degraded delivery.

        A degraded delivery (``delivery.link_health``): panels below their rate, a recorder losing frames.
        """
        if self.error:
            return self.error, "error"
        per_arm = [f"{a.label} {', '.join(a.limits)}" for a in self.arms.values() if a.limits]
        if per_arm:  # two arms: which arm each limit holds
            return "LIMIT " + "  ".join(per_arm), "limit"
        if self.limits:  # before a degraded delivery: it shapes the arm's motion now
            return "LIMIT " + ", ".join(self.limits), "limit"
        if self.degraded:
            more = f" (+{len(self.degraded) - 1})" if len(self.degraded) > 1 else ""
            return f"DEGRADED {self.degraded[0]}{more}", "limit"
        return "", ""

    def to_dict(self) -> dict[str, Any]:
        """The state as JSON-ready values (what the HUD image carries in its comment)."""
        d = asdict(self)
        d["elapsed_s"] = round(self.elapsed_s, 2)
        d["input_hz"] = None if self.input_hz is None else round(self.input_hz, 1)
        d["lines"] = [self.headline(), self.info_line(), self.alert_line()[0]]
        if not self.arms:
            del d["arms"]  # one arm: the fields it always had
        return d


class HudModel:
    """Folds the graph's status messages into a ``HudState``.

    Every method takes explicit times (``now`` in seconds on the wall clock, the one the recorders stamp
    ``start_ns`` with).
    """

    def __init__(
        self, recorder: str = "lerobot_recorder", error_hold_s: float = ERROR_HOLD_S, arms: Sequence[str] = ()
    ) -> None:
        """``arms``: the graph's arms (``names.parse_arms``), () for one arm or to take them from teleop's status."""
        self.recorder = recorder
        self.error_hold_s = error_hold_s
        self.recording = False
        self.episode_index: int | None = None
        self._start_ns: int | None = None
        self._elapsed_s = 0.0
        self._elapsed_at = 0.0
        self._saved: set[int] = set()
        self.engaged: bool | None = None
        self.limits: list[str] = []
        self.input_hz: float | None = None
        self.headset = ""
        self.arm = ""
        self._error = ""
        self._error_t = -math.inf
        self._last_alarm: Any = None
        self._answers: Any = None
        self._event_t = -math.inf
        self.releases = 0
        self.last_release = ""
        self.degraded: list[str] = []
        self._teleop_seen = False  # a late or restarted quest_video shows only a recent release
        self._last_ep: dict[str, Any] = {}  # the last saved episode's index, outcome and verdict
        self.arms: dict[str, ArmHud] = {}
        self._arms_seen: set[str] = set()  # the arms teleop's status has reported (each one's first is as above)
        self._set_arms(parse_arms(list(arms)))

    def _set_arms(self, arms: Sequence[str]) -> None:
        labels = arm_labels(arms)
        self.arms = {a: ArmHud(labels[a]) for a in arms}

    # ---- inputs ---------------------------------------------------------------------------------
    def error(self, now: float, text: str) -> None:
        """Show ``text`` as the error line for a while."""
        self._error, self._error_t = text[:120], now

    def on_recorder_status(self, now: float, st: dict[str, Any]) -> None:
        """Take the primary recorder's ``~/status``."""
        if st.get("recorder", self.recorder) != self.recorder:
            return
        state = st.get("state")
        if isinstance(state, str) and now - self._event_t > STATUS_GRACE_S:
            self.recording = state in ("recording", "save_failed")
        idx = st.get("episode_index")
        if isinstance(idx, int) and not isinstance(idx, bool):
            self.episode_index = idx
        elapsed = st.get("elapsed_s")
        if self.recording and isinstance(elapsed, (int, float)) and math.isfinite(elapsed):
            self._elapsed_s, self._elapsed_at = float(elapsed), now
        saved = st.get("saved_this_session")
        if isinstance(saved, list):
            self._saved = {i for i in saved if isinstance(i, int)}
        answers = st.get("answers")
        if st.get("ok") is False and answers != self._answers and isinstance(st.get("message"), str):
            self.error(now, f"{self.recorder}: {st['message']}")  # a refusal (by anyone's call)
        self._answers = answers

    def on_episode_event(self, now: float, ev: dict[str, Any]) -> None:
        """Take one ``/episode_events`` event of the primary recorder."""
        kind, idx = ev.get("event"), ev.get("episode_index")
        if ev.get("recorder") != self.recorder:
            if kind == "save_failed":
                self.error(now, f"{ev.get('recorder')}: save failed ({ev.get('reason')})")
            return
        idx = idx if isinstance(idx, int) and not isinstance(idx, bool) else None
        self._event_t = now
        if kind == "started":
            self.recording, self.episode_index = True, idx
            start = ev.get("start_ns")
            self._start_ns = start if isinstance(start, int) else None
            self._elapsed_s, self._elapsed_at = 0.0, now
        elif kind in ("saved", "discarded"):
            self.recording, self._start_ns = False, None
            if kind == "saved" and idx is not None:
                self._saved.add(idx)
                self._last_ep = {
                    "episode": idx,
                    "outcome": _word(ev.get("outcome")),
                    "verdict": _word(ev.get("verdict")),
                }
        elif kind == "labeled" and idx is not None:
            if self._last_ep.get("episode") != idx:
                self._last_ep = {"episode": idx, "verdict": ""}
            self._last_ep["outcome"] = _word(ev.get("outcome"))
        elif kind == "deleted" and idx is not None:
            self._saved.discard(idx)
        elif kind == "save_failed":
            self.error(now, f"{self.recorder}: save failed ({ev.get('reason')})")

    def on_teleop_status(self, now: float, st: dict[str, Any]) -> None:
        """Take ``/teleop/status``: clutch, active limits, refusals, forced releases."""
        first, self._teleop_seen = not self._teleop_seen, True
        if isinstance(st.get("engaged"), bool):
            self.engaged = st["engaged"]
        limits = st.get("limits_active")
        if isinstance(limits, list):
            self.limits = [str(x) for x in limits]
        per_arm = st.get("arms")
        if not self.arms and isinstance(per_arm, dict):  # two arms no parameter named: teleop's
            try:
                self._set_arms(parse_arms([str(a) for a in per_arm]))
            except ValueError:
                pass
        two = bool(self.arms) and isinstance(per_arm, dict)  # each arm's release judged on its own (_on_arms)
        releases, reason = st.get("forced_releases"), st.get("last_release")
        if isinstance(releases, int) and not isinstance(releases, bool):
            age = _age(st.get("last_release_age_s"))
            # the first status (a quest_video started late, or restarted) shows a release only while it is
            # recent: one the operator has not answered yet, not the count of an earlier session
            fresh = (age is not None and age < self.error_hold_s) if first else releases > self.releases
            if not two and fresh and isinstance(reason, str) and reason != "menu" and self.engaged is False:
                # not the operator's doing: say what to do
                self.error(now - (age or 0.0), f"{RELEASED}{reason} - re-grip")
            self.releases = releases
            self.last_release = reason if isinstance(reason, str) else ""
        if self.arms and isinstance(per_arm, dict):
            self._on_arms(now, per_arm)
        alarm = st.get("last_alarm")
        if alarm and alarm != self._last_alarm and isinstance(alarm, dict):
            self.error(
                now,
                f"{alarm.get('recorder')}/{alarm.get('action')}: {alarm.get('outcome')} "
                f"{alarm.get('message') or ''}".strip(),
            )
        self._last_alarm = alarm

    def _on_arms(self, now: float, per_arm: Mapping[str, Any]) -> None:
        """Each arm's part of a two-arm ``/teleop/status``: its clutch, limits, and the releases teleop made.

        A release shows as with one arm, judged on the arm released (the other may stay engaged), naming it; the
        arms released together show on one line.
        """
        released: list[tuple[str, str, float]] = []  # (label, reason, age)
        for name, arm in self.arms.items():
            entry = per_arm.get(name)
            if not isinstance(entry, dict):
                continue
            first = name not in self._arms_seen
            self._arms_seen.add(name)
            if isinstance(entry.get("engaged"), bool):
                arm.engaged = entry["engaged"]
            limits = entry.get("limits_active")
            if isinstance(limits, list):
                arm.limits = [str(x) for x in limits]
            releases, reason = entry.get("forced_releases"), entry.get("last_release")
            if not isinstance(releases, int) or isinstance(releases, bool):
                continue
            age = _age(entry.get("last_release_age_s"))
            fresh = (age is not None and age < self.error_hold_s) if first else releases > arm.releases
            if fresh and isinstance(reason, str) and reason != "menu" and arm.engaged is False:
                released.append((arm.label, reason, age or 0.0))
            arm.releases = releases
            arm.last_release = reason if isinstance(reason, str) else ""
        if released:
            by_reason: dict[str, list[str]] = {}
            for label, reason, _age_s in released:
                by_reason.setdefault(reason, []).append(label)
            told = "; ".join(f"{'+'.join(labels)} {reason}" for reason, labels in by_reason.items())
            self.error(now - min(a for _l, _r, a in released), f"{RELEASED}{told} - re-grip")

    def on_delivery(self, degraded: list[str]) -> None:
        """The deliveries below their mark now (``delivery.link_health``: panels, the recorder's frames)."""
        self.degraded = [str(d) for d in degraded]

    def on_headset(self, state: str, rate_hz: float | None) -> None:
        """Take the bridge's connection state and input rate."""
        self.headset = state
        self.input_hz = rate_hz if state == "connected" else 0.0

    def on_arm(self, now: float, level: str, message: str, arm: str | None = None) -> None:
        """Take the arm's diagnostic level and message (two arms: arm ``arm``'s; an arm not shown is ignored)."""
        text = level if level == "OK" else f"{level}: {message}"[:40]
        if arm is None:
            self.arm = text
        elif arm in self.arms:
            self.arms[arm].status = text

    def _arm_text(self) -> str:
        """The arm state the second line shows: the one arm's; two arms: OK when every arm is, else each other one's."""
        if not self.arms:
            return self.arm
        states = [a.status for a in self.arms.values()]
        if all(x == "OK" for x in states):
            return "OK"
        if not any(states):
            return ""
        return " ".join(f"{a.label} {a.status or '--'}" for a in self.arms.values() if a.status != "OK")[:40]

    # ---- output ---------------------------------------------------------------------------------
    def state(self, now: float) -> HudState:
        """The HUD state at ``now``."""
        if not self.recording:
            elapsed = 0.0
        elif self._start_ns is not None:
            elapsed = now - self._start_ns / 1e9
        else:
            elapsed = self._elapsed_s + (now - self._elapsed_at)
        error = self._error if now - self._error_t <= self.error_hold_s else ""
        return HudState(
            recording=self.recording,
            episode_index=self.episode_index,
            elapsed_s=max(0.0, elapsed),
            saved_count=len(self._saved),
            engaged=self.engaged,
            input_hz=self.input_hz,
            headset=self.headset,
            limits=list(self.limits),
            error=error,
            arm=self._arm_text(),
            releases=self.releases,
            last_release=self.last_release,
            degraded=list(self.degraded),
            last_episode=self._last_episode(),
            arms={n: dataclasses.replace(a, limits=list(a.limits)) for n, a in self.arms.items()},
        )

    def _last_episode(self) -> str:
        e = self._last_ep
        if "episode" not in e:
            return ""
        words = [w for w in (e.get("outcome") or "unlabelled", e.get("verdict") or "") if w]
        return f"ep{e['episode']} " + " ".join(words)


def _age(v: Any) -> float | None:
    """A release's age from teleop's status (s, finite, >= 0), or None."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
    return float(v) if ok else None


def _word(v: Any) -> str:
    """A status word from the graph (an outcome, a verdict) or "": never markup or a long text."""
    return v if isinstance(v, str) and v.isalpha() and len(v) <= 12 else ""


# ---- rendering --------------------------------------------------------------------------------------
BACKGROUND = (18, 18, 24)
REC_RED = (255, 70, 70)
READY_GREEN = (90, 230, 90)
INFO_GREY = (200, 200, 210)
LIMIT_AMBER = (255, 190, 40)
_FONTS: dict[int, ImageFont.ImageFont | ImageFont.FreeTypeFont] = {}
_DARKEN = [v * 35 // 100 for v in range(256)] * 3  # the label banner: 35 % of each channel


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    if size not in _FONTS:
        try:
            _FONTS[size] = ImageFont.load_default(size=size)
        except (TypeError, OSError):  # Pillow without FreeType: the fixed bitmap font
            _FONTS[size] = ImageFont.load_default()
    return _FONTS[size]


def _text_mask(text: str, size: int) -> Image.Image:
    """``text`` in the default font at ``size`` px as an "L" coverage mask.

    Its origin is where ``ImageDraw.text`` would put it. Rasterising the glyphs (FreeType) is most of what a
    HUD or a labelled panel costs to draw; the lines change rarely (the headline each tenth of a second while
    recording), so the masks are kept (``_MASKS``, bounded) and only pasted in the line's colour.
    """
    key = (text, size)
    with _CACHE_LOCK:
        mask = _MASKS.get(key)
    if mask is None:
        font = _font(size)
        _l, _t, right, bottom = font.getbbox(text)
        mask = Image.new("L", (max(1, int(right)), max(1, int(bottom))), 0)
        ImageDraw.Draw(mask).text((0, 0), text, font=font, fill=255)
        with _CACHE_LOCK:
            if len(_MASKS) >= MASK_CACHE:
                _MASKS.pop(next(iter(_MASKS)))  # the oldest: a recording's headlines come and go
            _MASKS[key] = mask
    return mask


def _draw_text(
    img: Image.Image, xy: tuple[int, int], text: str, size: int, fill: tuple[int, int, int], keep: bool = True
) -> None:
    """Draw ``text`` at ``xy``.

    ``keep``: from its kept mask (a line drawn again and again), else drawn
    directly (a line that changes each frame, the recording timer: a mask would be made once and used once).
    """
    if not text:
        return
    if keep:
        img.paste(fill, xy, _text_mask(text, size))
    else:
        ImageDraw.Draw(img).text(xy, text, font=_font(size), fill=fill)


MASK_CACHE = 256
_CACHE_LOCK = threading.Lock()  # the caches below are shared by whatever threads draw
_MASKS: dict[tuple[str, int], Image.Image] = {}


def render_hud_image(state: HudState) -> Image.Image:
    """The HUD strip drawn from ``state``."""
    img = Image.new("RGB", HUD_SIZE, BACKGROUND)
    draw = ImageDraw.Draw(img)
    if state.recording:
        draw.rectangle((0, 0, 8, HUD_SIZE[1]), fill=REC_RED)  # a red bar while recording
        draw.ellipse((588, 20, 620, 52), fill=REC_RED)
    _draw_text(
        img, (18, 10), state.headline(), 44, REC_RED if state.recording else READY_GREEN, keep=not state.recording
    )
    (info, info_px), (alert, alert_px), kind = _lower_lines(state)
    _draw_text(img, (18, 66), info, info_px, INFO_GREY)
    if alert:
        _draw_text(img, (18, 102), alert, alert_px, REC_RED if kind == "error" else LIMIT_AMBER)
    return img


def _lower_lines(state: HudState) -> tuple[tuple[str, int], tuple[str, int], str]:
    """The second and third lines as drawn, (text, font size) each, and the alert's kind.

    One arm: at 24 px, the alert cut at 56 characters, as they always were. Two arms' lines are longer (each arm's
    clutch, the arm a release names): drawn smaller where they would not fit (``_fit``), the alert cut at 80.
    """
    info = state.info_line()
    alert, kind = state.alert_line()
    if not state.arms:
        return (info, 24), (alert[:56], 24), kind
    alert = alert[:80]
    return (info, _fit(info, 24)), (alert, _fit(alert, 24)), kind


def _fit(text: str, size: int) -> int:
    """The largest font size up to ``size`` (at least ``MIN_LINE_PX``) at which ``text`` fits the strip from x 18."""
    room = HUD_SIZE[0] - 18 - 4
    while size > MIN_LINE_PX and _font(size).getbbox(text)[2] > room:
        size -= 1
    return size


def _visual_key(state: HudState) -> tuple[Any, ...]:
    """Everything ``render_hud_image`` draws: two states with one key give the same pixels."""
    return state.recording, state.headline(), *_lower_lines(state)


_HUD_JPEG: dict[tuple[Any, ...], bytes] = {}  # the last HUD image, by (visual key, quality)


def render_hud(state: HudState, quality: int = 80) -> bytes:
    """The HUD as JPEG, with the state it shows as JSON in a comment segment.

    The image is encoded again only when what it shows changes (``_visual_key``); the state, which
    changes more often (``elapsed_s``, ``input_hz``), goes into each frame's own comment segment.
    """
    comment = json.dumps(state.to_dict(), separators=(",", ":")).encode()
    key = (_visual_key(state), quality)
    with _CACHE_LOCK:
        jpeg = _HUD_JPEG.get(key)
    if jpeg is None:
        buf = io.BytesIO()
        render_hud_image(state).save(buf, format="JPEG", quality=quality)
        jpeg = buf.getvalue()
        with _CACHE_LOCK:
            _HUD_JPEG.clear()
            _HUD_JPEG[key] = jpeg
    return with_comment(jpeg, comment)


def with_comment(jpeg: bytes, comment: bytes) -> bytes:
    """``jpeg`` with a COM segment holding ``comment``; decoders skip COM segments.

    The segment goes after the SOI and APP0 (JFIF) header, where Pillow writes its own.
    """
    if len(comment) > 0xFFFD:
        raise ValueError(f"a JPEG comment holds at most 65,533 bytes, not {len(comment)}")
    if jpeg[:2] != b"\xff\xd8":
        raise ValueError("not a JPEG (no SOI marker)")
    at = 2
    if jpeg[2:4] == b"\xff\xe0":  # APP0 first, as JFIF wants it
        at = 4 + int.from_bytes(jpeg[4:6], "big")
    return jpeg[:at] + b"\xff\xfe" + (len(comment) + 2).to_bytes(2, "big") + comment + jpeg[at:]


def hud_state_from_jpeg(jpeg: bytes) -> dict[str, Any] | None:
    """The state a HUD frame was rendered from (its comment segment), or None."""
    try:
        with Image.open(io.BytesIO(jpeg)) as im:
            comment = im.info.get("comment")
    except (OSError, ValueError):
        return None
    if not comment:
        return None
    try:
        obj = json.loads(comment)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


# ---- camera panels ------------------------------------------------------------------------------
_DARKEN_LUT = np.array(_DARKEN[:256], np.uint8)


def encode_panel(rgb: np.ndarray, quality: int = 70, max_width: int = 640, label: str = "") -> bytes:
    """One camera frame (HxWx3 uint8 RGB) as a panel JPEG.

    At most ``max_width`` wide (aspect kept), the camera's name in a darkened banner on top (the app draws no
    text of its own). The banner is painted into a copy of the frame and the copy encoded in place
    (``encode_rgb_jpeg``): no image object per frame.
    """
    if rgb.shape[1] > max_width:
        img = Image.fromarray(rgb, "RGB")
        size = (max_width, max(1, round(img.height * max_width / img.width)))
        rgb = np.asarray(img.resize(size, Image.Resampling.BILINEAR))
    if label:
        rgb = rgb.copy()  # the caller's pixels (a received message's) stay as they are
        h = min(max(22, rgb.shape[0] // 16), rgb.shape[0])
        banner = rgb[:h]
        np.take(_DARKEN_LUT, banner, out=banner)
        _blend_text(banner, (8, 2), label, h - 6, 255)
    return encode_rgb_jpeg(rgb, quality)


def _blend_text(rgb: np.ndarray, xy: tuple[int, int], text: str, size: int, value: int) -> None:
    """Paint ``text`` at ``xy`` into ``rgb`` in the grey ``value``, blended by its glyphs' coverage (``_text_mask``)."""
    mask = np.asarray(_text_mask(text, size), np.uint16)
    x, y = xy
    region = rgb[y : y + mask.shape[0], x : x + mask.shape[1]]
    m = mask[: region.shape[0], : region.shape[1], None]
    px = region.astype(np.uint16)
    region[...] = (px * (255 - m) + value * m + 127) // 255
