"""Camera thumbnails, encoded only when a page asks, and the re-alignment view's reference frames.

A camera's thumbnail is encoded at most ``thumb_hz`` times a second, however many pages ask; a reference
frame is frame 0 of a recorded episode's video, decoded with PyAV.
"""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from piper_recorder.lerobot.format.errors import DatasetError


def downscale(rgb: np.ndarray, width: int) -> np.ndarray:
    """Integer-stride subsampling to at most ``width`` pixels wide (cheap: no filtering, a view)."""
    step = max(1, -(-rgb.shape[1] // width))
    return rgb[::step, ::step]


def encode_jpeg(rgb: np.ndarray, quality: int) -> bytes:
    """An RGB uint8 image as JPEG bytes at ``quality`` (Pillow, imported on first use)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgb)).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


@dataclass
class Thumbnail:
    """One camera's encoded thumbnail."""

    jpeg: bytes
    stamp_ns: int  # capture stamp of the frame it shows
    made_t: float  # monotonic time it was encoded


class FrameStore:
    """The newest colour frame per camera, kept as received; JPEG thumbnails made on request.

    ``put`` costs nothing but a reference; ``thumbnail`` re-encodes only if the cached one is older than
    ``1 / thumb_hz`` and a newer frame arrived, so any number of pages share one encode per period.
    ``watched(now)`` tells the node whether a page asked recently (it subscribes to images only then).
    """

    def __init__(self, width: int, hz: float, quality: int, watch_timeout_s: float):
        self.width, self.period, self.quality, self.watch_timeout_s = width, 1.0 / hz, quality, watch_timeout_s
        self._lock = threading.Lock()
        self._latest: dict[str, tuple[np.ndarray, int]] = {}
        self._thumbs: dict[str, Thumbnail] = {}
        self._asked_t: float | None = None
        self.encoded = 0

    def put(self, camera: str, rgb: np.ndarray, stamp_ns: int) -> None:
        """Keep ``rgb`` (by reference, not copied) as ``camera``'s newest frame."""
        with self._lock:
            self._latest[camera] = (rgb, int(stamp_ns))

    def forget(self) -> None:
        """Drop the frames held (the node unsubscribed: they would only grow old)."""
        with self._lock:
            self._latest.clear()

    def watched(self, now: float) -> bool:
        """Whether a page asked for a thumbnail within ``watch_timeout_s`` of ``now``."""
        with self._lock:
            return self._asked_t is not None and now - self._asked_t < self.watch_timeout_s

    def thumbnail(self, camera: str, now: float) -> Thumbnail | None:
        """``camera``'s thumbnail, re-encoded only when a period passed and a newer frame arrived; None: no frame."""
        with self._lock:
            self._asked_t = now
            cached = self._thumbs.get(camera)
            latest = self._latest.get(camera)
            if latest is None or (
                cached is not None and (now - cached.made_t < self.period or cached.stamp_ns == latest[1])
            ):
                return cached
            rgb, stamp = latest
        thumb = Thumbnail(encode_jpeg(downscale(rgb, self.width), self.quality), stamp, now)
        with self._lock:
            self._thumbs[camera] = thumb
            self.encoded += 1
        return thumb


class ReferenceFrames:
    """Frame 0 of an episode's video in one of the configured LeRobot roots, as a JPEG thumbnail.

    Downscaled like the thumbnails; cached per (root, episode, camera, file size and mtime).
    """

    def __init__(self, roots: list[str], width: int, quality: int):
        self.roots = [Path(r) for r in roots]
        self.width, self.quality = width, quality
        self._cache: dict[tuple[int, int, str, int, int], bytes] = {}
        self._lock = threading.Lock()

    def _root(self, index: int) -> Path:
        if not 0 <= index < len(self.roots):
            raise KeyError(f"no root #{index}")
        return self.roots[index]

    def listing(self) -> list[dict[str, Any]]:
        """Every configured root with its cameras and saved episodes (a root not yet written: none)."""
        from piper_recorder.lerobot.format.root import Root

        out: list[dict[str, Any]] = []
        for i, root in enumerate(self.roots):
            entry: dict[str, Any] = {"index": i, "root": str(root), "cameras": [], "episodes": [], "error": ""}
            try:
                if Root.is_root(root):
                    model = Root.open(root)
                    entry["cameras"] = list(model.cameras)
                    entry["episodes"] = [
                        {"episode_index": e.index, "length": e.length, "tasks": list(e.tasks)} for e in model.episodes
                    ]
            except (DatasetError, OSError, ValueError, KeyError) as exc:
                entry["error"] = str(exc)
            out.append(entry)
        return out

    def first_frame(self, root_index: int, episode: int, camera: str) -> bytes:
        """JPEG of frame 0; KeyError for an unknown root/episode/camera, DatasetError for a bad file."""
        import av

        from piper_recorder.lerobot.format.layout import video_key
        from piper_recorder.lerobot.format.root import read_info

        root = self._root(root_index)
        info = read_info(root)
        key = video_key(camera)
        if key not in info.features:
            raise KeyError(f"{root}: no camera {camera!r}")
        path = root / info.video_relpath(episode, key)
        try:
            st = path.stat()
        except OSError as exc:
            raise KeyError(f"{path}: no video for episode {episode}") from exc
        ck = (root_index, episode, camera, st.st_size, st.st_mtime_ns)
        with self._lock:
            if ck in self._cache:
                return self._cache[ck]
        try:
            with av.open(str(path)) as container:
                frame = next(container.decode(video=0))
                rgb = frame.to_ndarray(format="rgb24")
        except (av.error.FFmpegError, StopIteration, OSError) as exc:
            raise DatasetError(f"{path}: cannot decode the first frame: {exc}") from exc
        jpeg = encode_jpeg(downscale(rgb, self.width), self.quality)
        with self._lock:
            self._cache[ck] = jpeg
        return jpeg
