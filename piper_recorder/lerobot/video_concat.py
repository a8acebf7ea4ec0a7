"""Concatenate episode mp4s into one LeRobot v3.0 video file by remuxing (no decoding, no re-encoding).

Every packet's payload is copied byte for byte; only its timestamps are written anew, on a 1/90000
time base (``TIME_BASE``), from the row times of the parquet, so that LeRobot v3.0's lookup finds
each row's frame. LeRobot 0.4 asks for the frame at ``from_timestamp + timestamp`` (float64) but
compares it with the frame times in float32 (``torch.tensor`` of Python floats) within 1e-4 s, and
its torchcodec path picks the frame by index ``round(query * average_fps)``. Hence:

* episode ``e`` starts at tick ``F_e`` close (a few ticks) to ``frames_before_e / fps`` (uniform
  grid: the index rule holds), chosen so that ``floor(float32(F_e / 90000) * 90000) == F_e``;
* row k's frame gets ``pts = floor(float32(from_timestamp + timestamp_k) * 90000)``, the timing
  rule of the recorder applied to the file's time: ``pts <= float32(query)`` and
  ``float32(query) - pts < 1/90000`` for every row (an offset of the source PTS alone breaks both
  once ``from_timestamp`` is not 0, because float32 rounds ``from_timestamp + timestamp``);
* each packet lasts until the next one; the last packet of an episode until the next episode's
  start, so ``to_timestamp`` of an episode is exactly ``from_timestamp`` of the next.

Within 1e-4 s in float64 as well while a file stays below 2048 s (float32 spacing 1.2e-4 s there);
files are capped at ``MAX_FILE_S`` for that reason. Frames must pair one to one with rows (frame
count = row count, frame k within half a frame period of row k, no B-frames); otherwise the
episode cannot be expressed in v3.0 and ``ConcatError`` says why.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

TICKS = 90000
TIME_BASE = Fraction(1, TICKS)
MAX_FILE_S = 1024.0  # float32 spacing of the file time stays <= 6.1e-5 s


class ConcatError(Exception):
    """An episode's video cannot be placed in a v3.0 file as it is."""


def f32_floor_tick(seconds: float) -> int:
    """``floor(float32(seconds) * 90000)``: the tick at or before the float32 value of ``seconds``."""
    return math.floor(float(np.float32(seconds)) * TICKS)


def start_tick(frames_before: int, fps: int) -> int:
    """The tick of an episode start near ``frames_before / fps`` that float32 maps onto itself."""
    g = round(Fraction(frames_before * TICKS, fps))
    for d in range(64):
        for cand in ((g + d, g - d) if d else (g,)):
            if cand >= 0 and f32_floor_tick(cand / TICKS) == cand:
                return cand
    raise ConcatError(f"no start tick near {frames_before}/{fps} s")  # not reachable below 2**20 s


def row_ticks(from_tick: int, timestamps: np.ndarray) -> np.ndarray:
    """Frame PTS (ticks) for rows at ``timestamps`` (float32) in an episode starting at ``from_tick``."""
    start = from_tick / TICKS
    q = start + np.asarray(timestamps, np.float32).astype(np.float64)
    return np.floor(q.astype(np.float32).astype(np.float64) * TICKS).astype(np.int64)


@dataclass(frozen=True)
class StreamSignature:
    """What must be equal for two mp4s to share one track."""

    codec: str
    width: int
    height: int
    pix_fmt: str | None
    extradata: bytes

    @staticmethod
    def of(path: Path) -> "StreamSignature":
        with av.open(str(path)) as c:
            if not c.streams.video:
                raise ConcatError(f"{path}: no video stream")
            s = c.streams.video[0]
            cc = s.codec_context
            return StreamSignature(cc.name, cc.width, cc.height, cc.pix_fmt, bytes(cc.extradata or b""))


class VideoFileWriter:
    """One v3.0 mp4 being assembled from episode mp4s (see the module docstring)."""

    def __init__(self, path: Path, template: Path, fps: int):
        self.path, self.fps = path, fps
        path.parent.mkdir(parents=True, exist_ok=True)
        self.signature = StreamSignature.of(template)
        self._out = av.open(str(path), "w", format="mp4",
                            options={"movflags": "faststart", "video_track_timescale": str(TICKS)})
        try:
            with av.open(str(template)) as c:
                self._stream = self._out.add_stream_from_template(c.streams.video[0], opaque=True)
            self._stream.time_base = TIME_BASE
        except BaseException:
            self._out.close()
            raise
        self.frames = 0
        self.end_tick = 0
        self.bytes = 0

    def add_episode(self, src: Path, timestamps: np.ndarray, from_tick: int, end_tick: int) -> None:
        """Append ``src`` whose frames pair with rows at ``timestamps``; it ends at ``end_tick``."""
        ts = np.asarray(timestamps, np.float32)
        n = len(ts)
        pts = row_ticks(from_tick, ts)
        ends = np.append(pts[1:], end_tick)
        if n == 0 or np.any(ends <= pts) or pts[0] < self.end_tick:
            raise ConcatError(f"{src}: rows do not fit between ticks {from_tick} and {end_tick}")
        half = 0.5 / self.fps
        k = 0
        with av.open(str(src)) as c:
            stream = c.streams.video[0]
            tb = stream.time_base
            for pkt in c.demux(stream):
                if pkt.dts is None and pkt.pts is None:
                    continue  # demuxer flush packet
                if k >= n:
                    raise ConcatError(f"{src}: more video frames than the episode's {n} rows")
                if pkt.pts is None or pkt.dts != pkt.pts:
                    raise ConcatError(f"{src}: frame {k} has pts {pkt.pts} != dts {pkt.dts} "
                                      "(B-frames); v3.0 export needs frames in presentation order")
                if abs(float(pkt.pts * tb) - float(ts[k])) > half:
                    raise ConcatError(
                        f"{src}: frame {k} at {float(pkt.pts * tb):.4f} s is not row {k}'s frame "
                        f"(row at {float(ts[k]):.4f} s); frames must pair one to one with rows "
                        "(timestamp_mode nominal)")
                self.bytes += pkt.size
                pkt.stream = self._stream
                pkt.time_base = TIME_BASE
                pkt.pts = pkt.dts = int(pts[k])
                pkt.duration = int(ends[k] - pts[k])
                self._out.mux(pkt)
                k += 1
        if k != n:
            raise ConcatError(f"{src}: {k} video frames for {n} rows")
        self.frames += n
        self.end_tick = end_tick

    def close(self) -> None:
        self._out.close()

    def abort(self) -> None:
        try:
            self._out.close()
        except Exception:  # a broken file is deleted with the staging tree
            pass
