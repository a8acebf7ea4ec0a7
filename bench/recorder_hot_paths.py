"""Per-call CPU (``time.thread_time``) of the recorders' hot paths, the old way beside the new one.

What each row times (best of ``--rounds``, per call, this thread's CPU only):

- ``video add+encode``: one 640x480 sim-camera frame into a ``VideoEncoder``-configured x264 stream
  (crf 23, veryfast, gop 15, bf 0, 1 thread): old = ``VideoFrame.from_ndarray`` (an RGB copy) then
  ``encode`` converting to yuv420p inside; new = ``VideoEncoder._convert`` (swscale reading the array in
  place, one kept context) then ``encode`` of the yuv420p frame. Split into the caller's part (add) and
  the encoder thread's (encode); the packets of both are compared (identical).
- ``quantize_depth``: one 640x480 uint16 depth image (old: ``np.where`` of two compares; new: one
  wrapping subtract + compare), and the RGB-D writer's per-observation depth work (old: copy on the
  caller, quantise on the encoder; new: quantise on the caller).
- ``router``: one message of each kind the recorders take through the node's callback into a recording
  ``EpisodeController`` (old: ``route(topic, msg, now)`` with the ROS clock read for every message and the
  pre-roll/assembler each converting the vector; new: ``InputRouter.receiver``, the clock read only for
  unstamped topics). rclpy messages as the executor hands them over.
- ``phase tracker``: one capture added and the estimate updated (window 60: 2 s at 30 fps) (old: every
  update recomputes the window's phasors and calls ``wrap``; new: phasors kept per capture).
- ``spin loop``: the executor thread's own loop around each ``spin_once`` (a no-op executor here), rclpy
  initialised (old: ``rclpy.ok()`` before every callback; new: ``nodes.plumbing.executors.spin_until``).

    .venv/bin/python bench/recorder_hot_paths.py [--rounds 5]

The machine is shared: compare the two columns of one run, not runs.
"""

from __future__ import annotations

import argparse
import cmath
import io
import math
import os
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from piper_recorder.assembly.frame_assign import PhaseTracker, wrap  # noqa: E402
from piper_recorder.lerobot.writer.video_encoder import VideoConfig, VideoEncoder  # noqa: E402
from piper_recorder.recording import controller as ctl  # noqa: E402
from rgbd_writer import codecs  # noqa: E402

T = time.thread_time


def best(fn: Callable[[], Any], n: int, rounds: int) -> float:
    """Best per-call thread CPU (s) of ``fn`` over ``rounds`` runs of ``n`` calls."""
    out = math.inf
    for _ in range(rounds):
        t0 = T()
        for _ in range(n):
            fn()
        out = min(out, (T() - t0) / n)
    return out


def row(name: str, old: float | None, new: float, unit: str = "us") -> None:
    scale = 1e6 if unit == "us" else 1e3
    o = "" if old is None else f"{old * scale:10.1f}"
    ratio = "" if old is None or new <= 0 else f"{old / new:6.2f}x"
    print(f"  {name:54s} {o:>10s} {new * scale:10.1f} {unit}  {ratio}", flush=True)


# ---- video -------------------------------------------------------------------------------------
def sim_frames(n: int) -> list[np.ndarray]:
    from piper_recorder.sim.camera import Intrinsics, PinholeCamera
    from piper_recorder.sim.scene import SceneRenderer

    cam = PinholeCamera.looking_at(Intrinsics.default(640, 480), [0.9, 0.0, 0.55], [0.2, 0.0, 0.38])
    r = SceneRenderer(cam)
    return [r.render(np.array([0.2 + 0.1 * np.sin(i / 20), 0.1 * np.cos(i / 15), 0.3]))[0].copy() for i in range(n)]


def bench_video(frames: list[np.ndarray], rounds: int, tmp: Path) -> None:
    import av

    from piper_recorder.timebase import TICKS, TIME_BASE

    cfg = VideoConfig(max_block_s=None, deterministic=True)  # mbtree off: packets comparable run to run

    def stream() -> tuple[Any, Any]:
        out = av.open(io.BytesIO(), "w", format="mp4", options={"video_track_timescale": str(TICKS)})
        s = out.add_stream(cfg.codec, rate=30)
        s.width, s.height, s.pix_fmt = 640, 480, cfg.pix_fmt
        s.time_base = TIME_BASE
        cc = s.codec_context
        cc.time_base, cc.gop_size, cc.max_b_frames, cc.thread_count = TIME_BASE, cfg.gop, cfg.bf, cfg.threads
        s.options = {"bf": "0", "g": str(cfg.gop), "crf": str(cfg.crf), "preset": cfg.preset, "x264-params": "mbtree=0"}
        return out, s

    conv = VideoEncoder(tmp / "conv.mp4", "bench", 480, 640, 30, cfg)  # for its _convert only
    conv.abort()

    def run(make: Callable[[np.ndarray], Any]) -> tuple[float, float, bytes]:
        add = enc = math.inf
        data = b""
        for _ in range(rounds):
            out, s = stream()
            ta = te = 0.0
            packets = []
            for i, f in enumerate(frames):
                t0 = T()
                frame = make(f)
                frame.pts = i * 3000
                t1 = T()
                packets += [bytes(p) for p in s.encode(frame)]
                te += T() - t1
                ta += t1 - t0
            packets += [bytes(p) for p in s.encode(None)]
            out.close()
            add, enc = min(add, ta / len(frames)), min(enc, te / len(frames))
            data = b"".join(packets)
        return add, enc, data

    oa, oe, old_bytes = run(lambda f: av.VideoFrame.from_ndarray(f, format="rgb24"))
    na, ne, new_bytes = run(conv._convert)
    print(f"video, {len(frames)} sim frames 640x480 (packets identical: {old_bytes == new_bytes})")
    row("add (caller: RGB -> queued frame)", oa, na)
    row("encode (encoder thread: x264 [+ yuv conversion])", oe, ne)
    row("total per frame", oa + oe, na + ne)


# ---- depth -------------------------------------------------------------------------------------
def old_quantize(depth: np.ndarray, min_m: float, max_m: float) -> np.ndarray:
    lo, hi = int(round(min_m * 1000.0)), int(round(max_m * 1000.0))
    return np.where((depth >= lo) & (depth <= hi), depth, 0).astype(np.uint16, copy=False)


def bench_depth(rounds: int) -> None:
    from piper_recorder.sim.camera import Intrinsics, PinholeCamera
    from piper_recorder.sim.scene import SceneRenderer

    cam = PinholeCamera.looking_at(Intrinsics.default(640, 480), [0.9, 0.0, 0.55], [0.2, 0.0, 0.38])
    depth = SceneRenderer(cam).render(np.array([0.2, 0.0, 0.3]))[1].astype(np.uint16)
    assert np.array_equal(old_quantize(depth, 0.1, 6.0), codecs.quantize_depth(depth, 0.1, 6.0))
    print("depth, one 640x480 uint16 image (sim camera)")
    o = best(lambda: old_quantize(depth, 0.1, 6.0), 200, rounds)
    n = best(lambda: codecs.quantize_depth(depth, 0.1, 6.0), 200, rounds)
    row("quantize_depth", o, n)
    row(
        "per observation: copy + quantise (old) / quantise (new)",
        best(lambda: old_quantize(depth.copy(), 0.1, 6.0), 200, rounds),
        n,
    )


# ---- router ------------------------------------------------------------------------------------
class _NullSink:
    def row(self, r: Any) -> None: ...
    def frame(self, *a: Any) -> None: ...
    def raw_quest(self, line: str) -> None: ...


class _Target:
    kind, depth, min_rows, needs_task = "lerobot", False, 1, True

    def begin_session(self, record: Any) -> None: ...
    def start_episode(self, task: str, record: Any, source: Any = None) -> tuple[int, _NullSink]:
        return 0, _NullSink()

    def save_episode(self, counters: Any, timeout: bool) -> dict[str, Any]:
        return {}

    def label_saved(self, index: int, fields: Any) -> None: ...
    def keeps_failed_save(self, exc: BaseException) -> bool:
        return False

    def holds_episode(self) -> bool:
        return False

    def discard_episode(self) -> None: ...
    def delete_last_episode(self) -> None: ...
    def close(self) -> None: ...


def old_add_input(self: ctl.EpisodeController, name: str, stamp_ns: int, values: Any) -> None:
    """``EpisodeController.add_input`` and the assembler's finite check before this change."""
    with self._lock:
        ctl._keep(
            self._preroll_inputs.setdefault(name, deque()),
            (stamp_ns, np.asarray(values, dtype=np.float32)),
            ctl.PREROLL_INPUTS_NS,
        )
        if self._asm is not None and self.state in (ctl.RECORDING, ctl.SAVING):
            asm = self._asm
            v = np.asarray(values, dtype=np.float32).reshape(-1)
            if v.shape != (asm._dims[name],):
                raise ValueError(name)
            if not np.all(np.isfinite(v)):
                return
            s = int(stamp_ns)
            asm._inputs[name].insert(s, v)


def bench_router(rounds: int) -> None:
    from builtin_interfaces.msg import Time
    from geometry_msgs.msg import PoseStamped
    from rclpy.clock import Clock, ClockType
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import String

    from piper_recorder.recording.config import RECORDER_CONFIGS, load_config
    from piper_recorder.recording.inputs import topic_map
    from piper_recorder.recording.router import InputRouter

    clock = Clock(clock_type=ClockType.ROS_TIME)
    now_ns = lambda: clock.now().nanoseconds  # noqa: E731 - what the node's now_ns(self) reads
    cfg = load_config(RECORDER_CONFIGS["lerobot"], ROOT / "config" / "sim.yaml")
    tm = topic_map("lerobot", cfg)
    t0 = time.time_ns() - 10**10
    rgb = sim_frames(1)[0].tobytes()
    names = [f"joint{i}" for i in range(1, 7)] + ["gripper"]

    def message(topic: str, i: int) -> Any:
        ns = t0 + i * 10_000_000
        stamp = Time(sec=ns // 10**9, nanosec=ns % 10**9)
        if topic == tm.raw_quest:
            return String(data='{"t": 1.0, "head": [0, 0, 0, 0, 0, 0, 1]}')
        if "image" in topic:
            m: Any = Image(height=480, width=640, encoding="rgb8", step=1920, data=rgb)
        elif "gripper" in topic:
            m = JointState(name=["gripper"], position=[0.03])
        elif "joint_states" in topic:
            m = JointState(name=names, position=[0.1 * k for k in range(7)])
        else:
            m = PoseStamped()
            m.pose.position.x, m.pose.orientation.w = 0.3, 1.0
        m.header.stamp = stamp
        return m

    results: dict[str, list[float]] = {}
    for variant in ("old", "new"):
        c = ctl.EpisodeController(
            _Target(),
            cfg.assembly(tuple(tm.cameras), tm.table),
            recorder="bench",
            max_episode_s=0,
            publish_event=lambda e: None,
            session_record=dict,
            log=lambda m: None,
            tick_stats=False,
        )
        if variant == "old":
            c.add_input = old_add_input.__get__(c)  # type: ignore[method-assign]
        router = InputRouter(tm, c, depth=False)
        routes = [r.topic for r in router.routes]
        for i in range(5):
            for topic in routes:
                router.route(topic, message(topic, i), t0 + i * 10_000_000)
        c.start("bench", lambda: t0 + 30_000_000)
        for topic in routes:
            n = 60 if "image" in topic else 400
            msgs = [message(topic, 10 + k) for k in range(n)]
            if variant == "old":
                route = router.route
                cb = lambda m, topic=topic, route=route: route(topic, m, now_ns())  # noqa: E731
            else:
                cb = router.receiver(topic, now_ns)
            cost = math.inf
            for _ in range(rounds):
                a = T()
                for m in msgs:
                    cb(m)
                cost = min(cost, (T() - a) / n)
            results.setdefault(topic, []).append(cost)
        c.worker.stop()
    print("router: one message through the node's callback into a recording EpisodeController")
    for topic, (o, n) in results.items():
        row(topic, o, n)
    o = best(now_ns, 5000, rounds)
    row("(the ROS clock read alone: now_ns)", None, o)


# ---- phase tracker -----------------------------------------------------------------------------
class _OldTracker(PhaseTracker):
    """The tracker before this change: the window's phasors recomputed, ``wrap`` called, at every update."""

    def _resultant(self) -> complex:
        p = self.period
        return sum(cmath.exp(2j * math.pi * o / p) for o in self._offsets) / len(self._offsets)

    def _update(self) -> None:  # the old body (the new one inlines wrap)
        self._dirty = False
        p = self.period
        z = self._resultant()
        ref = wrap(cmath.phase(z) / (2 * math.pi) * p, p) if self._phase is None else self._phase
        d = sorted(wrap(o - ref, p) for o in self._offsets)
        n = len(d)
        med = d[n // 2] if n % 2 else (d[n // 2 - 1] + d[n // 2]) / 2
        phase = ref + med
        self._phase = phase
        widen = (n + 1) / (n - 1) if n > 1 else 2.0
        self.jitter_up = (d[-1] - med) * widen
        self.jitter_down = (med - d[0]) * widen
        self.coherent = abs(z) >= 0.2
        if self.coherent:
            self._slot = self._causal_slot(phase)


def bench_tracker(rounds: int) -> None:
    p = 1e9 / 30
    rng = np.random.default_rng(0)
    offs = [float(x) for x in rng.uniform(-8e6, 8e6, 5000)]
    out = []
    for cls in (_OldTracker, PhaseTracker):
        tr = cls(p, 60)
        for o in offs[:60]:
            tr.add(o)
        it = iter(offs * (rounds + 1))

        def step(tr: PhaseTracker = tr) -> None:
            tr.add(next(it))
            tr.slot_ns  # noqa: B018 - brings the estimate up to date

        out.append(best(step, 1000, rounds))
    print("phase tracker (the tick thread, per camera per row)")
    row("add one capture + update (window 60)", *out)


class _NoopExecutor:
    def __init__(self, n: int, stop: Any) -> None:
        self.n, self.calls, self.stop = n, 0, stop

    def spin_once(self, timeout_sec: float) -> None:
        self.calls += 1
        if self.calls >= self.n:
            self.stop.set()


def bench_spin_loop(rounds: int) -> None:
    import threading

    import rclpy

    from piper_recorder.nodes.plumbing.executors import spin_until

    def old_spin_until(executor: Any, stop: threading.Event) -> None:
        while not stop.is_set() and rclpy.ok():
            executor.spin_once(timeout_sec=0.1)

    rclpy.init()
    try:
        out = []
        for loop in (old_spin_until, spin_until):
            cost = math.inf
            for _ in range(rounds):
                stop = threading.Event()
                ex = _NoopExecutor(20000, stop)
                a = T()
                loop(ex, stop)  # type: ignore[arg-type]
                cost = min(cost, (T() - a) / ex.calls)
            out.append(cost)
    finally:
        rclpy.shutdown()
    print("spin loop (the executor thread, per callback, around spin_once)")
    row("loop overhead", *out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    import tempfile

    print(
        f"machine: {os.cpu_count()} CPUs, load {'/'.join(f'{x:.1f}' for x in os.getloadavg())}; {'':30s}old        new"
    )
    with tempfile.TemporaryDirectory() as tmp:
        bench_video(sim_frames(60), max(1, args.rounds // 2), Path(tmp))
    bench_depth(args.rounds)
    bench_router(args.rounds)
    bench_tracker(args.rounds)
    bench_spin_loop(args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
