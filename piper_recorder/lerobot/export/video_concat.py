"""Concatenate episode mp4s into one LeRobot v3.0 video file by remuxing (no decoding, no re-encoding).

Every packet's payload is copied byte for byte; only its timestamps are written anew, on a 1/90000 time base
(``TIME_BASE``): the file's i-th frame gets ``pts = i * 90000 / fps``, the frame grid LeRobot's own encoder
writes. Why the grid and not an offset of the source PTS (``floor(float32(t) * 90000)``): LeRobot 0.4.4 finds a
row's frame with torchcodec ``get_frames_at(index=round((from_timestamp + timestamp) * average_fps))`` in
*approximate* seek mode, which returns the first frame whose PTS is at or after ``index / fps``, so a frame one
tick before its grid time is skipped. On the grid, that lookup, LeRobot's pyav path (nearest frame) and its
float32 tolerance check (1e-4 s) all return each row's own frame:

* episode ``e`` starts at tick ``frames_before_e * 90000 / fps``; ``from_timestamp`` is that time and
  ``to_timestamp`` the next episode's start (the file's end for the last one), as LeRobot's converter writes
  them (sums of episode durations);
* rows must sit on the grid (``timestamp_k`` is ``k / fps`` rounded up to float32, what the recorder writes
  (``assembly.grid_timestamp``), or rounded to nearest, as older roots have it) and pair one to one with frames
  (frame count = row count, frame k within half a frame period of row k, no B-frames); anything else cannot be
  expressed in v3.0 and ``ConcatError`` says why;
* LeRobot compares ``float32(from_timestamp + timestamp)`` with ``float32(pts)``: the two differ by at most half
  a float32 step of the row time plus one float32 step of the file time, < 1e-4 s while a file stays below
  ``MAX_FILE_S`` (1,024 s; float32 steps 6.1e-5 s there), so files are cut there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from piper_recorder.errors import DatasetError
from piper_recorder.timebase import TICKS, TIME_BASE, grid_timestamp

MAX_FILE_S = 1024.0  # float32 spacing of the file time stays <= 6.1e-5 s


class ConcatError(DatasetError):
    """An episode's video cannot be placed in a v3.0 file as it is."""


def frame_step(fps: int) -> int:
    """Ticks per frame; the grid must be exact on the 1/90000 time base."""
    if TICKS % fps:
        raise ConcatError(f"fps {fps} has no exact frame grid on a 1/{TICKS} time base")
    return TICKS // fps


@dataclass(frozen=True)
class StreamSignature:
    """What must be equal for two mp4s to share one track."""

    codec: str
    width: int
    height: int
    pix_fmt: str | None
    extradata: bytes

    @staticmethod
    def of(path: Path) -> StreamSignature:
        """The signature of the first video stream of the mp4 at ``path``."""
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
        self._out = av.open(
            str(path), "w", format="mp4", options={"movflags": "faststart", "video_track_timescale": str(TICKS)}
        )
        try:
            with av.open(str(template)) as c:
                self._stream = self._out.add_stream_from_template(c.streams.video[0], opaque=True)
            self._stream.time_base = TIME_BASE
        except BaseException:
            self._out.close()
            raise
        self.frames = 0
        self.bytes = 0

    def add_episode(self, src: Path, timestamps: np.ndarray) -> tuple[int, int]:
        """Append ``src``, whose frames pair with rows at ``timestamps``; returns its (from, to) ticks."""
        ts = np.asarray(timestamps, np.float32)
        n = len(ts)
        nearest = (np.arange(n, dtype=np.float64) / self.fps).astype(np.float32)
        rounded_up = np.array([grid_timestamp(k, self.fps) for k in range(n)], np.float32)
        off = np.nonzero((ts != nearest) & (ts != rounded_up))[0]
        if n == 0 or len(off):
            k = int(off[0]) if len(off) else 0
            raise ConcatError(
                f"row {k} has timestamp {float(ts[k]) if n else None}, not {k}/{self.fps} in float32; "
                "v3.0 needs rows on the frame grid"
            )
        step = frame_step(self.fps)
        first = self.frames * step
        half = 0.5 / self.fps
        k = 0
        with av.open(str(src)) as c:
            stream = c.streams.video[0]
            tb = stream.time_base
            if tb is None:
                raise ConcatError(f"{src}: video stream without a time base")
            for pkt in c.demux(stream):
                if pkt.dts is None and pkt.pts is None:
                    continue  # demuxer flush packet
                if k >= n:
                    raise ConcatError(f"{src}: more video frames than the episode's {n} rows")
                if pkt.pts is None or pkt.dts != pkt.pts:
                    raise ConcatError(
                        f"{src}: frame {k} has pts {pkt.pts} != dts {pkt.dts} "
                        "(B-frames); v3.0 export needs frames in presentation order"
                    )
                if abs(float(pkt.pts * tb) - float(ts[k])) > half:
                    raise ConcatError(
                        f"{src}: frame {k} at {float(pkt.pts * tb):.4f} s is not row {k}'s frame "
                        f"(row at {float(ts[k]):.4f} s); frames must pair one to one with rows "
                        "(timestamp_mode nominal)"
                    )
                self.bytes += pkt.size
                pkt.stream = self._stream
                pkt.time_base = TIME_BASE
                pkt.pts = pkt.dts = first + k * step
                pkt.duration = step
                self._out.mux(pkt)
                k += 1
        if k != n:
            raise ConcatError(f"{src}: {k} video frames for {n} rows")
        self.frames += n
        return first, first + n * step

    def close(self) -> None:
        """Finish the file (writes the mp4's trailer)."""
        self._out.close()

    def abort(self) -> None:
        """Close the file after a failure, ignoring errors: the staging tree is deleted with it."""
        try:
            self._out.close()
        except Exception:  # a broken file is deleted with the staging tree  # noqa: BLE001
            pass
