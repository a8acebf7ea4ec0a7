"""``piper-sim-quest``: a simulated headset speaking the headset protocol over TCP.

The headset app is the server, so this is too: on each connection it sends a hello, then frames at
``rate`` Hz from a deterministic script (``scripts.ScriptedHeadset``, a pure function of time since
that connection was accepted) or replays a recorded ``extras/*.quest.jsonl`` with its original
relative timing (mono/t re-stamped to now), plus a heartbeat every ``heartbeat_s``. It reads host
commands (haptic) and counts them.

For clock-mapping tests it can add a known network delay (``delay_ms`` + exponential jitter with
mean ``jitter_ms``, order preserved as over TCP) and a headset clock offset (``mono_offset_s``:
mono = host CLOCK_MONOTONIC + offset), and it can stall (send nothing, socket open) for a while,
optionally sending the frames held back in one burst at the end (``stall_burst``: a backlog, as a
reader that fell behind finds it), or fall behind gradually (``lag_after_s``/``lag_rate``: from
then on each frame leaves ``lag_rate`` s later per second, up to ``lag_max_s``; old frames arrive
one by one, as from a starved bridge).

With ``video_port`` (>= 0; 0 = any free port) it also listens on the app's video channel
(``sim_video.SimVideoServer``: panels and HUD decoded, rates, the HUD's state). Every host command
is kept with its arrival time (``haptics``, ``colors``), and ``--report FILE`` writes all of it as
JSON twice a second (atomically), for tests and benches that run the headset as its own process.

Like an operator it re-grips after a clutch release it did not make (``regrip``, on by default;
``--no-regrip`` keeps squeezing): it learns of the release from the HUD on the video channel, whose
``releases`` count (teleop's forced releases, carried in the HUD frame's state) grows, as the operator
reads "RELEASED: ... - re-grip" there (and feels ``haptics.release``, whose amplitude and length the
app cannot tell apart from other pulses reliably, so the HUD is the signal). Each scripted
connection then lets go of the squeeze and squeezes again (``scripts.ScriptedHeadset.regrip``); the
first HUD seen only sets the count. Two arms (the HUD's ``arms``): each arm's own count, and only the hand
that drives the released arm (``names.BIMANUAL_ARMS``) re-grips. ``regrips`` (report) lists when.

The hello carries ``mono`` (the script's t = 0), so a client can compute the script time of a frame
as ``frame.mono - hello["mono"]`` and predict it with ``ScriptedHeadset.sample``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from piper_recorder.names import BIMANUAL_ARMS
from piper_recorder.process.supervision import on_stop_signals, watch_parent
from piper_recorder.storage.outpaths import file_problem

from .client import DEFAULT_HOST, DEFAULT_PORT
from .hud import RELEASED
from .protocol import encode
from .scripts import HANDS, REGRIP_S, SCRIPTS, ScriptedHeadset
from .sim_video import SimVideoServer

APP_NAME = "piper-sim-quest"
REGRIP_RETRY_S = 1.0  # the HUD still shows the clutch idle this long after a re-grip: re-grip again
PROTOCOL_VERSION = 1


@dataclass
class SimConfig:
    """The simulated headset's settings (``piper-sim-quest``'s arguments)."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT  # 0 = any free port (see ``SimQuestServer.port``)
    rate: float = 90.0
    script: str = "demo"
    replay: str = ""  # path of a recorded *.quest.jsonl; overrides ``script``
    buttons: bool = True
    seed: int = 0
    heartbeat_s: float = 1.0
    delay_ms: float = 0.0  # fixed one-way delay added before each send
    jitter_ms: float = 0.0  # mean of an exponential extra delay per frame
    mono_offset_s: float = 0.0  # headset mono = time.monotonic() + this
    stall_after_s: float = 0.0  # > 0: stop sending (socket stays open) this long after connect ...
    stall_s: float = 0.0  # ... for this long
    stall_burst: bool = False  # send the frames captured during the stall at once when it ends
    lag_after_s: float = 0.0  # > 0: from this long after connect, frames leave later and later ...
    lag_rate: float = 0.0  # ... by this many seconds per second ...
    lag_max_s: float = 5.0  # ... up to this delay
    video_port: int = -1  # >= 0: accept the video channel on this port (0 = any free port); -1: off
    regrip: bool = True  # re-grip when the HUD shows a clutch release teleop made (needs the video channel)
    two_hands: bool = False  # the left controller moves too (two arms: scripts.ScriptedHeadset, hands)

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        if not 0 <= self.port < 65536:
            raise ValueError(f"port {self.port} out of range")
        if not -1 <= self.video_port < 65536:
            raise ValueError(f"video_port {self.video_port} out of range")
        if not (math.isfinite(self.rate) and 1.0 <= self.rate <= 1000.0):
            raise ValueError("rate must be in [1, 1000] Hz")
        if self.script not in SCRIPTS:
            raise ValueError(f"script must be one of {SCRIPTS}")
        if self.replay and not Path(self.replay).is_file():
            raise ValueError(f"replay file not found: {self.replay}")
        for name in (
            "heartbeat_s",
            "delay_ms",
            "jitter_ms",
            "stall_after_s",
            "stall_s",
            "lag_after_s",
            "lag_rate",
            "lag_max_s",
        ):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be finite and >= 0")


@dataclass
class ReplayFrames:
    """Frames of a recorded stream: (seconds since the first frame, t - mono, frame dict)."""

    frames: list[tuple[float, float, dict[str, Any]]] = field(default_factory=list)
    skipped: int = 0

    @classmethod
    def load(cls, path: str | Path) -> ReplayFrames:
        """The frames of a recorded ``*.quest.jsonl``, with their relative times."""
        out = cls()
        mono0: float | None = None
        with open(path, encoding="utf-8", errors="replace", newline="\n") as fh:  # \n only, never \r
            for line in fh:
                try:
                    obj = json.loads(line)
                    if "hello" in obj or "heartbeat" in obj:
                        raise KeyError("not a frame")
                    mono = float(obj["mono"])
                    dt = float(obj.get("t", mono)) - mono
                except (ValueError, TypeError, KeyError):
                    out.skipped += 1  # hello / heartbeat / damaged line: the sim sends its own
                    continue
                if not (isinstance(obj, dict) and math.isfinite(mono) and math.isfinite(dt)):
                    out.skipped += 1
                    continue
                if mono0 is None:
                    mono0 = mono
                rel = mono - mono0
                if out.frames and rel < out.frames[-1][0]:
                    out.skipped += 1  # the headset clock went backwards (a reconnect in the file)
                    continue
                out.frames.append((rel, dt, obj))
        return out


class SimQuestServer:
    """Threaded TCP server; ``start()`` binds and returns the port, ``stop()`` closes everything."""

    def __init__(self, config: SimConfig, log: Callable[[str], None] | None = None):
        config.validate()
        self.config = config
        self.commands: Counter[str] = Counter()
        self.haptics: list[dict[str, Any]] = []  # as received
        self.haptic_times: list[float] = []  # time.time() at each one's arrival
        self.colors: list[dict[str, Any]] = []  # with "t_recv" (time.time() at arrival)
        self.video = SimVideoServer(config.host, config.video_port, self._on_hud) if config.video_port >= 0 else None
        self.regrips: list[dict[str, Any]] = []  # {"t": wall time, "releases": the HUD's count[, "arm": its name]}
        # per clutch (None: one arm's, else the arm's name): the HUD's release count last read, and whether it was
        # re-gripped and the HUD has not shown it engaged since
        self._releases_seen: dict[str | None, int] = {}
        self._awaiting_engage: dict[str | None, bool] = {}
        self._headsets: dict[int, tuple[ScriptedHeadset, float]] = {}  # connection -> (script, its start)
        self.connections = 0
        self.frames_sent = 0
        self._log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self._replay = ReplayFrames.load(config.replay) if config.replay else None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self.port = 0

    def start(self) -> int:
        """Listen and serve connections on threads; returns the bound port."""
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((self.config.host, self.config.port))
        ls.listen(4)
        ls.settimeout(0.2)
        self._listener = ls
        self.port = ls.getsockname()[1]
        self._spawn(self._accept_loop, "sim-quest-accept")
        if self.video is not None:
            self.video.start()
        return self.port

    def stop(self) -> None:
        """Stop serving and close every connection."""
        self._stop.set()
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            _close(c)
        for t in list(self._threads):
            t.join(2.0)
        if self.video is not None:
            self.video.stop()

    def report(self) -> dict[str, Any]:
        """Everything observed so far, JSON-ready."""
        with self._lock:
            out: dict[str, Any] = {
                "port": self.port,
                "connections": self.connections,
                "frames_sent": self.frames_sent,
                "commands": dict(self.commands),
                "haptics": [{**h, "t_recv": t} for h, t in zip(self.haptics, self.haptic_times)],
                "colors": list(self.colors),
                "regrips": list(self.regrips),
            }
        out["video"] = self.video.report() if self.video is not None else None
        return out

    def write_report(self, path: str | Path) -> None:
        """Write the report as JSON, atomically."""
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.report(), fh)
        os.replace(tmp, path)

    def drop_connections(self) -> None:
        """Close the current client connections (the listener stays up): a headset-side disconnect."""
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            _close(c)

    def _spawn(self, target: Callable[..., None], name: str, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, addr = self._listener.accept()  # type: ignore[union-attr]
            except TimeoutError:
                continue
            except OSError:
                break
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self.connections += 1
                index = self.connections
                self._conns.append(conn)
            self._log(f"{APP_NAME}: client {addr[0]}:{addr[1]} connected (#{index})")
            self._spawn(self._read_commands, f"sim-quest-read-{index}", conn)
            self._spawn(self._send_loop, f"sim-quest-send-{index}", conn, index)

    def _send_loop(self, conn: socket.socket, index: int) -> None:
        cfg = self.config
        rng = random.Random(cfg.seed * 1000 + index)
        headset = ScriptedHeadset(cfg.script, cfg.buttons, cfg.seed, ("left", "right") if cfg.two_hands else HANDS)
        start = time.monotonic()
        if self._replay is None:
            with self._lock:
                self._headsets[index] = (headset, start)
        hello = {
            "app": APP_NAME,
            "protocol": PROTOCOL_VERSION,
            "device": "simulated",
            "rate_hz": cfg.rate,
            "script": "replay" if self._replay else cfg.script,
            "buttons": cfg.buttons,
            "seed": cfg.seed,
            "hands": 2 if cfg.two_hands else 1,
            "mono": start + cfg.mono_offset_s,
        }
        if self._replay:
            hello["replay"] = {"file": Path(cfg.replay).name, "frames": len(self._replay.frames)}
        last_send = start
        next_heartbeat = start + cfg.heartbeat_s
        beat = 0
        n = 0
        held: list[bytes] = []
        try:
            conn.sendall(encode({"hello": hello}))
            capture: float | None
            while not self._stop.is_set():
                if self._replay is not None:
                    if n >= len(self._replay.frames):
                        capture = None
                    else:
                        rel, dt, obj = self._replay.frames[n]
                        capture = start + rel
                else:
                    capture = start + n / cfg.rate
                if capture is None:  # replay finished: heartbeats only
                    if cfg.heartbeat_s <= 0:
                        self._stop.wait()
                        break
                    send_at = next_heartbeat
                else:
                    delay = cfg.delay_ms / 1000.0
                    if cfg.jitter_ms > 0:
                        delay += rng.expovariate(1000.0 / cfg.jitter_ms)
                    if cfg.lag_after_s > 0:
                        delay += min(cfg.lag_max_s, max(0.0, capture - start - cfg.lag_after_s) * cfg.lag_rate)
                    send_at = max(capture + delay, last_send)
                if cfg.heartbeat_s > 0 and next_heartbeat <= send_at:
                    send_at, capture = next_heartbeat, None  # heartbeat first; frame n next round
                    is_heartbeat = True
                else:
                    is_heartbeat = False
                wait = send_at - time.monotonic()
                if wait > 0 and self._stop.wait(wait):
                    break
                last_send = send_at
                since = send_at - start
                stall0 = cfg.stall_after_s
                stalled = stall0 > 0 and stall0 <= since < stall0 + cfg.stall_s
                if is_heartbeat:
                    beat += 1
                    next_heartbeat += cfg.heartbeat_s
                    if not stalled:
                        conn.sendall(
                            encode(
                                {"heartbeat": beat, "state": "FOCUSED", "mono": time.monotonic() + cfg.mono_offset_s}
                            )
                        )
                    continue
                assert capture is not None  # a frame, not a heartbeat
                mono = capture + cfg.mono_offset_s
                if self._replay is not None:
                    frame = dict(obj)
                    frame["mono"], frame["t"] = mono, mono + dt
                else:
                    frame = headset.sample(capture - start, mono=mono, frame=n, rate_hz=cfg.rate)
                n += 1
                if stalled and not cfg.stall_burst:
                    continue
                try:
                    line = encode(frame)
                except (TypeError, ValueError):
                    continue  # a replayed line that cannot be re-encoded finitely
                if stalled:
                    held.append(line)  # sent with the first frame after the stall
                    continue
                conn.sendall(b"".join(held) + line)
                with self._lock:
                    self.frames_sent += len(held) + 1
                held.clear()
        except OSError:
            pass
        finally:
            _close(conn)
            with self._lock:
                if conn in self._conns:
                    self._conns.remove(conn)
                self._headsets.pop(index, None)
            self._log(f"{APP_NAME}: client #{index} disconnected after {n} frames")

    def _on_hud(self, hud: dict[str, Any]) -> None:
        """Re-grip when a HUD frame (video thread) shows a clutch release teleop made.

        A grown ``releases`` count means teleop released the clutch while this hand squeezed: re-grip, as the
        operator reading it would; and if the HUD still shows the clutch idle ``REGRIP_RETRY_S`` after a re-grip
        (the open grip fell into a stall and never reached teleop), try again, until it shows it engaged. The
        first HUD only sets the count, unless it already says to re-grip (the video channel came up after the
        release). Two arms: each arm's clutch is judged on its own part of the HUD, and its hand re-grips.
        """
        if not self.config.regrip:
            return
        error = str(hud.get("error") or "")
        per_arm = hud.get("arms")
        if isinstance(per_arm, dict) and per_arm:
            for arm, entry in per_arm.items():
                if isinstance(entry, dict):  # told: the error line names this arm's release
                    reason = str(entry.get("last_release") or "")
                    told = error.startswith(RELEASED) and bool(reason) and reason in error
                    hands = (arm,) if arm in BIMANUAL_ARMS else BIMANUAL_ARMS
                    self._on_clutch(str(arm), entry.get("releases"), entry.get("engaged"), told, hands, reason)
            return
        told = error.startswith(RELEASED)
        self._on_clutch(None, hud.get("releases"), hud.get("engaged"), told, BIMANUAL_ARMS, hud.get("last_release"))

    def _on_clutch(
        self, arm: str | None, releases: Any, engaged: Any, told: bool, hands: tuple[str, ...], reason: Any
    ) -> None:
        """One clutch's part of a HUD frame (``_on_hud``): re-grip ``hands`` when it shows a release to re-grip for."""
        if not isinstance(releases, int) or isinstance(releases, bool):
            return
        why = ""
        with self._lock:
            seen = self._releases_seen.get(arm)
            self._releases_seen[arm] = releases
            if engaged is True:
                self._awaiting_engage[arm] = False
            if seen is None and not (told and engaged is False):
                return  # the first HUD only sets the count
            now = time.monotonic()
            which = f"{arm} arm's " if arm else ""
            if seen is None or releases > seen:
                why = f"{which}clutch release #{releases} ({reason})"
                started = [h.regrip(now - start, hands) for h, start in self._headsets.values()]
                self._awaiting_engage[arm] = True
            elif self._awaiting_engage.get(arm) and engaged is False:
                why = f"{which}clutch still idle after a re-grip"
                started = [
                    h.regrip(now - start, hands)
                    for h, start in self._headsets.values()
                    if any(  # a hand that re-gripped, long enough ago
                        (times := h.regrips_of(hand)) and now - start >= times[-1] + REGRIP_S + REGRIP_RETRY_S
                        for hand in hands
                    )
                ]
            if not why or not any(started):
                return
            self.regrips.append({"t": time.time(), "releases": releases, "why": why, **({"arm": arm} if arm else {})})
        self._log(f"{APP_NAME}: HUD shows {why}: re-gripping")

    def _read_commands(self, conn: socket.socket) -> None:
        buf = b""
        while not self._stop.is_set():
            try:
                data = conn.recv(4096)
            except OSError:
                return
            if not data:
                return
            buf += data
            *lines, buf = buf.split(b"\n")
            buf = buf[-65536:]
            for line in lines:
                try:
                    cmd = json.loads(line)
                    name = str(cmd["cmd"])
                except (ValueError, TypeError, KeyError):
                    self.commands["invalid"] += 1
                    continue
                with self._lock:
                    self.commands[name] += 1
                    if name == "haptic":
                        self.haptics.append(cmd)
                        self.haptic_times.append(time.time())
                    elif name == "color":
                        self.colors.append({**cmd, "t_recv": time.time()})
                self._log(f"{APP_NAME}: command {line.decode('utf-8', 'replace')[:200]}")


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _parser() -> argparse.ArgumentParser:
    d = SimConfig()  # the one set of defaults
    p = argparse.ArgumentParser(prog=APP_NAME, description="Simulated Meta Quest headset (TCP server).")
    p.add_argument("--host", default=d.host)
    p.add_argument("--port", type=int, default=d.port, help="0 = any free port (printed)")
    p.add_argument("--rate", type=float, default=d.rate, help="frames per second")
    p.add_argument("--script", choices=SCRIPTS, default=d.script)
    p.add_argument("--replay", default=d.replay, metavar="FILE.quest.jsonl", help="replay a recorded stream")
    p.add_argument("--duration", type=float, default=0.0, help="exit after this many seconds (0 = run until signalled)")
    p.add_argument("--no-buttons", action="store_true", help="no A/B presses (episodes driven by services)")
    p.add_argument("--two-hands", action="store_true", help="move the left controller too (two arms)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--delay-ms", type=float, default=d.delay_ms, help="fixed network delay to simulate")
    p.add_argument("--jitter-ms", type=float, default=d.jitter_ms, help="mean exponential network jitter to simulate")
    p.add_argument(
        "--mono-offset", type=float, default=d.mono_offset_s, help="headset clock = host monotonic + this (s)"
    )
    p.add_argument(
        "--stall-after", type=float, default=d.stall_after_s, help="stop sending this long after connect (s)"
    )
    p.add_argument("--stall-for", type=float, default=d.stall_s, help="... for this long (s)")
    p.add_argument("--stall-burst", action="store_true", help="send the frames of the stall at once after it")
    p.add_argument(
        "--lag-after", type=float, default=d.lag_after_s, help="fall behind from this long after connect (s) ..."
    )
    p.add_argument("--lag-rate", type=float, default=d.lag_rate, help="... by this many seconds per second ...")
    p.add_argument("--lag-max", type=float, default=d.lag_max_s, help="... up to this delay (s)")
    p.add_argument(
        "--video-port",
        type=int,
        default=d.video_port,
        help="accept the video/HUD channel on this port (the app: 8736; 0 = any free; -1 = off)",
    )
    p.add_argument(
        "--no-regrip",
        action="store_true",
        help="keep squeezing after a clutch release shown on the HUD (default: re-grip like an operator)",
    )
    p.add_argument(
        "--report",
        default="",
        metavar="FILE.json",
        help="write what the headset received (commands, haptics, colours, video) here twice a second",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Run ``piper-sim-quest`` until SIGINT/SIGTERM; returns the exit status."""
    args = _parser().parse_args(argv)
    cfg = SimConfig(
        host=args.host,
        port=args.port,
        rate=args.rate,
        script=args.script,
        replay=args.replay,
        buttons=not args.no_buttons,
        two_hands=args.two_hands,
        seed=args.seed,
        delay_ms=args.delay_ms,
        jitter_ms=args.jitter_ms,
        mono_offset_s=args.mono_offset,
        stall_after_s=args.stall_after,
        stall_s=args.stall_for,
        stall_burst=args.stall_burst,
        lag_after_s=args.lag_after,
        lag_rate=args.lag_rate,
        lag_max_s=args.lag_max,
        video_port=args.video_port,
        regrip=not args.no_regrip,
    )
    try:
        problem = file_problem(args.report) if args.report else None
        if problem:
            raise ValueError(f"--report: {problem}")
        server = SimQuestServer(cfg)
        port = server.start()
    except (ValueError, OSError) as exc:
        print(f"{APP_NAME}: error: {exc}", file=sys.stderr)
        return 2
    done = threading.Event()
    on_stop_signals(lambda _sig: done.set())
    watch_parent(done.set)  # a SIGKILLed launcher: no headset left serving (supervision)
    video = f" video={cfg.host}:{server.video.port}" if server.video is not None else ""
    print(
        f"{APP_NAME} listening on {cfg.host}:{port}{video} script={'replay' if cfg.replay else cfg.script} "
        f"rate={cfg.rate:g}",
        flush=True,
    )
    deadline = time.monotonic() + args.duration if args.duration > 0 else math.inf
    while not done.wait(min(0.5, max(0.0, deadline - time.monotonic()))):
        if args.report:
            server.write_report(args.report)
        if time.monotonic() >= deadline:
            break
    server.stop()
    if args.report:
        server.write_report(args.report)
    print(
        f"{APP_NAME}: stopped; connections={server.connections} frames={server.frames_sent} "
        f"commands={dict(server.commands)}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
