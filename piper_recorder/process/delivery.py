"""Per-subscriber image delivery: what each consumer received of what each camera published (no ROS).

A publisher's rate says nothing about its subscribers, so every image consumer (both recorders, quest_video,
the policy node) counts per camera the frames it received and reports them in its ``~/status``; each camera
reports what it published (a realsense2_camera has no status: the dashboard measures its camera_info rate);
``link_health`` compares the two per (consumer, camera).

The hot path, ``ImageCounts.on_image``, is one list-item increment and one reference store: no allocation,
no lock (one executor thread writes, the status timer reads and tolerates a count one frame old).

Status fields (``images_received``, per camera):
  ``count``      frames received since start;
  ``fps``        frames received per second over the last ``window_s`` (arrival clock);
  ``stamp_fps``  frames per second of *capture* time over the window: frames / (newest header stamp now -
                 newest stamp at the window start); exact against a steady camera (no +-1 frame sampling
                 error); None until two snapshots saw frames.
and the consumer's need (``images_required``): ``{"min_delivery": 0.99}`` (recorders: a lost frame is
a repeated row), ``{"min_fps": f}`` (the policy: its input rate); quest_video adds ``panels`` per
camera: ``fps`` sent, ``target_fps`` (min(its fps, the camera's rate)) and ``min_fps``.
A camera's ``~/status`` carries ``published`` and ``fps`` (the same stamp-based rate of what it sent).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

WINDOW_S = 5.0
RECORDER_MIN_DELIVERY = 0.99  # a recorder below this share of the camera's frames is degraded
PANEL_MARGIN = 0.2  # quest_video panels below (1 - this) x their target rate are degraded
POLICY_MARGIN = 0.05  # a policy input below (1 - this) x its input rate is degraded
SILENT_S = 2.0  # a consumer whose count did not move for this long receives nothing


def header_ns(header: Any) -> int:
    """A std_msgs/Header's stamp in int ns (duck-typed: no ROS import here)."""
    return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)


class ImageCounts:
    """Frames received per camera, with rates over a sliding window of snapshots.

    ``on_image(i, header)`` on every message (the hot path); ``snapshot(now, stamp_ns)`` at status
    rate returns the ``images_received`` dict; ``stamp_ns(header)`` turns a kept header into ns.
    """

    __slots__ = ("_snaps", "cameras", "count", "last", "window_s")

    def __init__(self, cameras: Sequence[str], window_s: float = WINDOW_S) -> None:
        self.cameras = list(cameras)
        self.count = [0] * len(self.cameras)
        self.last: list[Any] = [None] * len(self.cameras)  # the newest message header per camera
        self.window_s = window_s
        self._snaps: deque[tuple[float, list[int], list[int]]] = deque()

    def on_image(self, i: int, header: Any) -> None:
        """Count one frame of camera ``i`` (keep a reference to its header: no copy)."""
        self.count[i] += 1
        self.last[i] = header

    def snapshot(self, now: float, stamp_ns: Callable[[Any], int] = header_ns) -> dict[str, dict[str, Any]]:
        """Per camera ``{"count", "fps", "stamp_fps"}`` over the last ``window_s`` (``now``: monotonic s)."""
        counts = list(self.count)
        stamps = [0 if h is None else stamp_ns(h) for h in self.last]
        self._snaps.append((now, counts, stamps))
        while len(self._snaps) > 2 and self._snaps[1][0] <= now - self.window_s:
            self._snaps.popleft()
        t0, c0, s0 = self._snaps[0]
        out: dict[str, dict[str, Any]] = {}
        for i, cam in enumerate(self.cameras):
            span = now - t0
            frames = counts[i] - c0[i]
            fps = round(frames / span, 2) if span > 0 else None
            dstamp = (stamps[i] - s0[i]) / 1e9
            stamp_fps = round(frames / dstamp, 2) if s0[i] > 0 and dstamp > 0 else None
            out[cam] = {"count": counts[i], "fps": fps, "stamp_fps": stamp_fps}
        return out


@dataclass(frozen=True)
class Link:
    """One (consumer, camera) delivery, judged."""

    consumer: str
    camera: str
    kind: str  # "images" (received vs published) | "panels" (quest_video's panels sent)
    rate: float | None  # what the consumer got (fps)
    reference: float | None  # what it should get: the camera's rate, or the target rate
    ratio: float | None  # rate / reference
    ok: bool
    why: str  # empty when ok

    def to_dict(self) -> dict[str, Any]:
        """The link as the dashboard's JSON shows it (rates rounded)."""
        return {
            "consumer": self.consumer,
            "camera": self.camera,
            "kind": self.kind,
            "fps": None if self.rate is None else round(self.rate, 2),
            "reference_fps": None if self.reference is None else round(self.reference, 2),
            "delivery": None if self.ratio is None else round(self.ratio, 4),
            "ok": self.ok,
            "why": self.why,
        }


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
        return None
    return float(v)


def received_rate(entry: Mapping[str, Any]) -> float | None:
    """The consumer's rate of one camera: the exact stamp rate while frames arrive, else the arrival rate.

    0 when it stopped receiving (no new stamp, so no stamp rate).
    """
    fps, stamp_fps = _num(entry.get("fps")), _num(entry.get("stamp_fps"))
    if fps is not None and fps <= 0.0:
        return 0.0
    return stamp_fps if stamp_fps is not None else fps


def link_health(consumers: Mapping[str, Mapping[str, Any]], published: Mapping[str, float | None]) -> list[Link]:
    """Judge every (consumer, camera) delivery in the consumers' statuses.

    ``consumers``: node name -> its ``~/status`` dict (those without ``images_received`` are skipped);
    ``published``: camera -> its published rate (fps; None: unknown, then only a consumer's own need
    such as ``min_fps`` or the panels' target can be judged).
    """
    links: list[Link] = []
    for name, st in consumers.items():
        received = st.get("images_received")
        if not isinstance(received, Mapping):
            continue
        raw_need = st.get("images_required")
        need: Mapping[str, Any] = raw_need if isinstance(raw_need, Mapping) else {}
        min_delivery = _num(need.get("min_delivery"))
        min_fps = _num(need.get("min_fps"))
        for cam, entry in received.items():
            if not isinstance(entry, Mapping):
                continue
            rate, ref = received_rate(entry), published.get(cam)
            ratio = rate / ref if rate is not None and ref else None
            why = ""
            if rate is None:
                why = "no rate yet"
            elif min_delivery is not None and ratio is not None and ratio < min_delivery:
                why = f"{ratio:.1%} of {cam}'s frames (< {min_delivery:.0%})"
            elif min_fps is not None and rate < min_fps * (1.0 - POLICY_MARGIN):
                why = f"{rate:.1f} fps of {cam} (input rate {min_fps:g})"
            elif ref and rate == 0.0:
                why = f"receives nothing of {cam}"
            links.append(Link(name, cam, "images", rate, ref, ratio, why in ("", "no rate yet"), why))
        panels = st.get("panels")
        for cam, p in panels.items() if isinstance(panels, Mapping) else ():
            if not isinstance(p, Mapping):
                continue
            rate, target, floor = _num(p.get("fps")), _num(p.get("target_fps")), _num(p.get("min_fps"))
            ok = rate is None or floor is None or rate >= floor
            links.append(
                Link(
                    name,
                    cam,
                    "panels",
                    rate,
                    target,
                    None if rate is None or not target else rate / target,
                    ok,
                    "" if ok else f"panels of {cam} at {rate:.1f} fps (target {target:g})",
                )
            )
    return links


def panel_target(fps: float, camera_fps: float | None) -> tuple[float, float]:
    """quest_video's (target, floor) panel rate: it cannot send frames the camera never delivered."""
    target = fps if camera_fps is None or camera_fps <= 0 else min(fps, camera_fps)
    return target, target * (1.0 - PANEL_MARGIN)
