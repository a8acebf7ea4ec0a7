"""Every row of a v2.x root finds its own frame under each frame-lookup rule trainers use.

Runs inside the .venv-lerobot03 consumer virtualenv (torch, torchvision, torchcodec, PyAV, OpenCV).
Row k of an episode (``timestamp`` read from the parquet as float32, as every loader does) must get
frame k of each camera's mp4 (nominal mode writes exactly one frame per row), by:
- ``at_or_before``: the last frame whose PTS (seconds as a double) is <= the float32 timestamp, after
  a keyframe seek to the timestamp (torchvision's VideoReader on PyAV; GR00T N1.5's torchvision_av);
- ``played_at``: torchcodec ``get_frames_played_at`` (exact seek mode; GR00T's torchcodec backend);
- ``index_approx``: torchcodec ``get_frames_at(round(t * average_fps))`` in approximate seek mode, then
  the frame must lie within 1e-4 s (LeRobot 0.3/0.4's default decoder and tolerance);
- ``opencv``: frame index nearest to t on ``CAP_PROP_FPS``, then ``CAP_PROP_POS_FRAMES`` seek and read
  (GR00T's opencv backend), compared bit for bit with OpenCV's own sequential decode.
Prints one JSON object: rows checked and, per rule, rows that got another frame (with examples).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    args = ap.parse_args()
    import av
    import cv2
    import numpy as np
    import pyarrow.parquet as pq
    import torchvision
    from torchcodec.decoders import VideoDecoder

    torchvision.set_video_backend("pyav")
    root = Path(args.root)
    info = json.loads((root / "meta" / "info.json").read_text())
    episodes = [json.loads(ln) for ln in (root / "meta" / "episodes.jsonl").read_text().splitlines() if ln.strip()]
    cams = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    rules = ("at_or_before", "played_at", "index_approx", "opencv")
    misses: dict[str, list] = {r: [] for r in rules}
    rows = 0
    for ep in episodes:
        e = ep["episode_index"]
        chunk = e // info["chunks_size"]
        ts = (
            pq.read_table(root / info["data_path"].format(episode_chunk=chunk, episode_index=e), columns=["timestamp"])
            .column("timestamp")
            .to_numpy()
        )
        assert ts.dtype == np.float32
        for cam in cams:
            path = str(root / info["video_path"].format(episode_chunk=chunk, video_key=cam, episode_index=e))
            with av.open(path) as c:
                frames = [(float(f.pts * f.time_base), f.to_ndarray(format="rgb24")) for f in c.decode(video=0)]
            pts = np.array([p for p, _ in frames])
            exact = VideoDecoder(path, seek_mode="exact")
            approx = VideoDecoder(path, seek_mode="approximate")
            cap = cv2.VideoCapture(path)
            cv_fps, cv_n = cap.get(cv2.CAP_PROP_FPS), int(cap.get(cv2.CAP_PROP_FRAME_COUNT))

            def at_or_before(t):
                # decode from the keyframe at or before t until a frame at or past t; the last <= t
                reader = torchvision.io.VideoReader(path, "video")
                reader.seek(float(t), keyframes_only=True)
                seen = []
                for fr in reader:
                    seen.append(fr["pts"])
                    if fr["pts"] >= float(t):
                        break
                reader.container.close()
                before = [p for p in seen if p <= float(t)]  # in float64, as GR00T compares arrays
                return int(np.searchsorted(pts, max(before))) if before else None

            def played_at(t):
                p = float(exact.get_frames_played_at(seconds=[float(t)]).pts_seconds[0])
                return int(np.argmin(np.abs(pts - p)))

            def index_approx(t):
                p = float(approx.get_frames_at(indices=[round(float(t) * approx.metadata.average_fps)]).pts_seconds[0])
                return int(np.argmin(np.abs(pts - p))) if abs(p - float(t)) < 1e-4 else None

            seq = cv2.VideoCapture(path)  # OpenCV's own sequential decode: the reference for its seeks
            cv_frames = []
            while True:
                ok, bgr = seq.read()
                if not ok:
                    break
                cv_frames.append(bgr)
            seq.release()

            def opencv(t):
                idx = int(np.argmin(np.abs(np.arange(cv_n) / cv_fps - float(t))))
                cap.set(cv2.CAP_PROP_POS_FRAMES, idx)
                ok, bgr = cap.read()
                if not ok:
                    return None
                return idx, bgr

            LOOKUPS = {
                "at_or_before": at_or_before,
                "played_at": played_at,
                "index_approx": index_approx,
                "opencv": opencv,
            }
            for k, t in enumerate(ts):
                rows += 1
                got: dict[str, int | None] = {}
                for r in rules:
                    try:
                        got[r] = LOOKUPS[r](t)
                    except Exception:  # noqa: BLE001 - a reader that raises gets no frame
                        got[r] = None
                if got["opencv"] is not None:  # the sim repeats frames: equal pixels are the paired frame
                    idx, bgr = got["opencv"]
                    got["opencv"] = (
                        k
                        if np.array_equal(cv_frames[k], bgr)
                        else next(
                            (
                                j
                                for j in range(max(0, idx - 8), min(len(cv_frames), idx + 9))
                                if np.array_equal(cv_frames[j], bgr)
                            ),
                            None,
                        )
                    )
                for r in rules:
                    if got[r] != k:
                        misses[r].append(
                            {
                                "episode": e,
                                "camera": cam.split(".")[-1],
                                "row": k,
                                "t": float(t),
                                "got": got[r],
                                "pts_k": float(pts[k]),
                            }
                        )
            cap.release()
    out = {
        "rows": rows,
        "cameras": len(cams),
        "misses": {r: len(v) for r, v in misses.items()},
        "examples": {r: v[:5] for r, v in misses.items() if v},
        "cv2_fps": cv_fps,
    }
    print(json.dumps(out))
    return 0 if not any(misses.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
