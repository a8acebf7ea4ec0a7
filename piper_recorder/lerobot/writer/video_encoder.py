"""Streaming mp4 encoding: one encoder thread per camera fed through a bounded queue.

Frames are encoded while the episode runs (no intermediate image files), so a save only flushes the encoder's few
look-ahead frames; PyAV releases the GIL inside libx264 and swscale, so encoders run beside the recorder's
callbacks. ``add`` converts the caller's RGB array to the stream's ``pix_fmt`` itself, reading it in place
(``VideoFrame.from_numpy_buffer``) with one swscale context per encoder: the conversion PyAV's ``encode`` applies,
so the packets are byte-identical (test_lerobot_writer), without a copy of every frame. The queued frame owns
its pixels: the caller may reuse its array once ``add`` returns.

Timing: the time base is 1/90000 (``video_track_timescale=90000``) and a frame's PTS is
``floor(float32(t) * 90000)``, computed exactly (``pts_ticks``), so a frame stamped at a row's time meets both
lookup rules: ``pts * tb <= float32(timestamp)`` (torchcodec and torchvision take the last frame at or before t)
and a gap under 1/90000 s, well inside LeRobot's ``tolerance_s`` of 1e-4 s. Every packet lasts one nominal frame
period, so torchcodec accepts a query at the last row; ``bf=0`` (no B-frames) by default for the same reason.

Keyframe interval: random access costs about half a GOP of decoding and the file shrinks little beyond ~1 s, so
``gop=15`` (0.5 s at 30 fps) keeps random-frame fetches near the cost training loaders pay per sample; raise it
for archival size, lower it (LeRobot's own encoder uses 2) when decode time dominates training (figures:
docs/performance.md, ``bench/video_gop.py``).

Back-pressure: ``add`` blocks at most ``VideoConfig.max_block_s`` for queue space, then drops the frame and
counts it (``queue_full``); ``max_block_s=None`` blocks until space frees (benchmarks). ``queue_size`` bounds
both how far an encoder may fall behind before frames drop and what a save drains (the worst-case stop-to-saved
latency).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from piper_recorder.names import IMAGES_PREFIX
from piper_recorder.timebase import TICKS, TIME_BASE, frame_period_ticks, pts_ticks

from ..format.errors import DatasetError, SchemaError
from ..format.fsutil import fsync_file

log = logging.getLogger(__name__)


@dataclass
class VideoConfig:
    """Encoder settings (PyAV / FFmpeg names)."""

    codec: str = "libx264"
    pix_fmt: str = "yuv420p"
    crf: int = 23
    preset: str = "veryfast"
    gop: int = 15
    bf: int = 0
    # x264 threads per camera: each camera already encodes on its own thread, and one x264 thread per
    # camera costs less CPU per frame than x264's auto threading, which is what bounds offline conversion
    # (docs/performance.md). 0 = codec default (one large camera).
    threads: int = 1
    queue_size: int = 16  # frames per camera (~0.5 s); bounds memory and the backlog a save drains
    # how long ``add`` waits for queue space before dropping the frame (None: no limit); the live
    # recorders' default (``encoder_max_block_s``) rides out a machine that stalls for a moment
    max_block_s: float | None = 2.0
    # libx264's macroblock-tree rate control off (x264 ``mbtree=0``): the same frames then always give the
    # same packets. With mbtree on, identical input frames can give different packets when thread timing
    # varies, so a retried or differently scheduled conversion decodes to other pixels (docs/performance.md).
    # The offline converter sets it (``lerobot_writer_config``).
    deterministic: bool = False

    def validate(self) -> None:
        """Raise ``ValueError`` for an encoder FFmpeg lacks or settings out of range."""
        try:
            av.codec.Codec(self.codec, "w")
        except Exception as e:
            raise ValueError(f"VideoConfig.codec {self.codec!r} is not an available encoder") from e
        if self.gop < 1 or self.bf < 0 or self.queue_size < 1 or not 0 <= self.crf <= 51:
            raise ValueError(f"invalid VideoConfig: {self}")
        if self.max_block_s is not None and self.max_block_s < 0:
            raise ValueError("VideoConfig.max_block_s must be >= 0 or None")


class VideoEncoder:
    """Encodes one camera's frames of one episode into ``path`` on a background thread."""

    def __init__(self, path: Path, name: str, height: int, width: int, fps: int, cfg: VideoConfig):
        self.path, self.name, self.height, self.width = path, name, height, width
        self.cfg = cfg
        self.frames = 0  # encoded (written) frames
        self.dropped_pts = 0
        self.dropped_queue = 0
        self.last_pts = -1
        self._period = frame_period_ticks(fps)
        # called by ``add`` with the RGB array of each frame it queues, in order (before ``add`` returns:
        # the array is the caller's then); the frames queued are the frames encoded
        self.on_frame: Callable[[np.ndarray], None] | None = None
        self._reformatter = VideoReformatter()  # one swscale context for every frame of the episode
        self._error: BaseException | None = None
        self._closing = False
        # add's last check and its put, against request_finish's flag and sentinel: a frame accepted after the
        # sentinel would be counted by the caller and never encoded
        self._admit = threading.Lock()
        self._aborted = False
        self._q: queue.Queue = queue.Queue(maxsize=cfg.queue_size)
        self._out = av.open(str(path), "w", format="mp4", options={"video_track_timescale": str(TICKS)})
        try:
            s = self._out.add_stream(cfg.codec, rate=fps)
            assert isinstance(s, av.VideoStream)
            s.width, s.height, s.pix_fmt = width, height, cfg.pix_fmt
            s.time_base = TIME_BASE
            cc = s.codec_context
            cc.time_base = TIME_BASE
            cc.gop_size = cfg.gop
            cc.max_b_frames = cfg.bf
            if cfg.threads:
                cc.thread_count = cfg.threads
            opts: dict[str, object] = {"bf": str(cfg.bf), "g": str(cfg.gop)}
            if cfg.codec in ("libx264", "libx265"):
                opts.update(crf=str(cfg.crf), preset=cfg.preset)
            if cfg.deterministic and cfg.codec == "libx264":
                opts["x264-params"] = "mbtree=0"
            s.options = opts
            self._stream = s
            # the conversion PyAV's encode makes of a frame in another format: to the stream's size and
            # pixel format with the codec's thread count (read here, on the caller's thread, once)
            self._target = (width, height, cfg.pix_fmt, cc.thread_count)
        except BaseException:
            self._out.close()
            raise
        self._thread = threading.Thread(target=self._run, name=f"encode-{name}", daemon=True)
        self._thread.start()

    def add(self, rgb: np.ndarray, t: float) -> bool:
        """Queue one RGB frame at ``t`` s; False if dropped (non-increasing PTS or queue full)."""
        if self._error is not None:
            raise DatasetError(f"video encoder for {self.name} failed: {self._error!r}") from self._error
        if not isinstance(rgb, np.ndarray) or rgb.dtype != np.uint8 or rgb.shape != (self.height, self.width, 3):
            got = (getattr(rgb, "shape", None), getattr(rgb, "dtype", type(rgb)))
            raise SchemaError(
                f"{IMAGES_PREFIX}{self.name}: expected uint8 ({self.height}, {self.width}, 3), got shape/dtype {got}"
            )
        pts = pts_ticks(t)
        if self._closing:
            return False
        if pts <= self.last_pts:
            self.dropped_pts += 1
            return False
        frame = self._convert(rgb)  # a new frame: the caller may reuse rgb
        frame.pts = pts
        frame.time_base = TIME_BASE
        with self._admit:
            if self._closing:  # finishing began while the frame was converted
                return False
            try:
                self._q.put(frame, timeout=self.cfg.max_block_s)
            except queue.Full:
                self.dropped_queue += 1
                return False
        self.last_pts = pts
        if self.on_frame is not None:
            self.on_frame(rgb)
        return True

    def _convert(self, rgb: np.ndarray) -> av.VideoFrame:
        """``rgb`` in the stream's pixel format, as ``encode`` would convert it (module doc)."""
        try:
            src = av.VideoFrame.from_numpy_buffer(rgb, format="rgb24")  # a view of rgb's pixels
        except ValueError:  # rows not contiguous (a channel-reordered view): copy them
            src = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        w, h, fmt, threads = self._target
        out = self._reformatter.reformat(src, w, h, fmt, threads=threads)
        if out is src:  # nothing to convert (an rgb24 stream): the frame must not share the caller's pixels
            out = av.VideoFrame.from_ndarray(rgb, format="rgb24")
        return out

    def _run(self) -> None:
        try:
            while True:
                frame = self._q.get()
                if frame is None:
                    break
                self._encode(frame)
            self._encode(None)
            self._out.close()
            # durable before the save commits it (each camera in parallel); an aborted episode's file is
            # being deleted, and with no frame muxed PyAV never created one: nothing to persist then
            if self.frames and not self._aborted:
                fsync_file(self.path)
        except BaseException as e:  # surfaced to the caller by add()/finish()  # noqa: BLE001
            self._error = e
            log.error("encoder %s failed: %r", self.name, e)
            self._drain()

    def _encode(self, frame: av.VideoFrame | None) -> None:
        """Encode one frame (None: flush the encoder) and mux its packets."""
        self._mux(self._stream.encode(frame))

    def _mux(self, packets: Iterable[av.Packet]) -> None:
        for p in packets:
            if not p.duration:
                p.duration = self._period
            self._out.mux(p)
            self.frames += 1

    def _drain(self) -> None:
        try:
            while True:
                self._q.get_nowait()
        except queue.Empty:
            pass

    def request_finish(self) -> None:
        """Stop accepting frames and let the thread flush; lets several cameras flush in parallel."""
        with self._admit:
            if self._closing:
                return
            self._closing = True
        self._put_sentinel()

    def finish(self) -> int:
        """Flush and close the file; returns the encoded frame count. Raises if encoding failed."""
        self.request_finish()
        self._thread.join()
        if self._error is not None:
            raise DatasetError(f"video encoder for {self.name} failed: {self._error!r}") from self._error
        return self.frames

    def abort(self) -> None:
        """Stop without caring about the output (the caller deletes the file)."""
        self._aborted = True
        self._drain()
        self.request_finish()
        self._thread.join()
        try:
            self._out.close()
        except Exception:  # already closed or broken: nothing to keep  # noqa: BLE001
            pass

    def _put_sentinel(self) -> None:
        while True:
            try:
                self._q.put(None, timeout=0.5)
                return
            except queue.Full:
                if not self._thread.is_alive():
                    return
