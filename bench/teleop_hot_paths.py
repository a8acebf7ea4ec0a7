"""Per-call CPU (``time.thread_time``) of the headset -> teleop hot paths, this tree against a baseline.

What runs per headset frame (~90 Hz) or control tick (100 Hz): the bridge's line parser and
``BridgeCore.handle``, the simulated headset's frame (``ScriptedHeadset.sample`` + ``encode``), teleop's
input handlers (a hand pose, a joy, an arm pose, joint states, as the node passes them: lists of floats)
and an engaged control tick (``TeleopSession.tick``: filter, limits, check). The same measurements run
on ``--baseline REV`` (default: the commit before the scalar teleop path) extracted with ``git archive``
into a temporary directory; this tree and the baseline each run in child processes, alternately, so old
and new are timed by the same code in one run;
the child also returns the targets of a fixed 2000-tick session, which must equal this tree's bit for
bit (the optimisation must not change a single published number). In-process pairs time the array
functions against their scalar ``*_t`` variants. Each figure is the best of ``--repeat`` runs (the
machine is shared: the minimum is the least disturbed). No ROS.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BASELINE = "7616534"


def per_call_us(fn: Callable[[], Any], n: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.thread_time()
        for _ in range(n):
            fn()
        best = min(best, (time.thread_time() - t0) / n)
    return best * 1e6


def measure(n: int, repeat: int) -> dict[str, Any]:
    """The figures of whatever ``piper_recorder`` is on sys.path (this tree or the baseline's)."""
    from piper_recorder.quest.bridge_core import BridgeCore
    from piper_recorder.quest.protocol import encode, parse_line
    from piper_recorder.quest.scripts import ScriptedHeadset
    from piper_recorder.teleop.haptics import HapticConfig
    from piper_recorder.teleop.mapper import Joy, TeleopConfig
    from piper_recorder.teleop.session import TeleopNodeConfig, TeleopSession

    out: dict[str, Any] = {}
    hs = ScriptedHeadset("continuous")
    frame = hs.sample(3.0, mono=3.0, frame=1)
    line = encode(frame)[:-1]
    out["parse_line (one frame)"] = per_call_us(lambda: parse_line(line), n, repeat)
    msg = parse_line(line)
    core = BridgeCore()
    recv = [time.time_ns()]

    def handle() -> None:
        recv[0] += 11_111_111
        core.handle(msg, recv[0])  # type: ignore[arg-type]

    out["BridgeCore.handle"] = per_call_us(handle, n, repeat)
    out["sim: sample + encode"] = per_call_us(lambda: encode(hs.sample(3.0, mono=3.0, frame=1)), n, repeat)

    clock = [100.0]
    s = TeleopSession(TeleopConfig(), TeleopNodeConfig(), HapticConfig(), clock=lambda: clock[0])
    t = [2.0]
    targets: list[list[float]] = []

    def feed() -> None:
        r = hs.right(t[0])
        s.on_hand_pose(0, list(r.pos), list(r.quat))
        s.on_joy(0, "right", Joy(trigger=r.trigger, squeeze=r.squeeze))
        s.on_arm_pose([0.3, 0.0, 0.2], [0.0, 0.0, 0.0, 1.0])
        s.on_joints([0.0] * 7)

    for _ in range(2000):  # the fixed session whose targets old and new must agree on
        clock[0] += 0.01
        t[0] += 0.01
        feed()
        res = s.tick().result
        if res.target is not None:
            targets.append(res.target.p.tolist() + res.target.q.tolist() + [res.gripper])
    assert s.core.engaged, "the scripted session should hold the clutch engaged"
    out["targets"] = targets

    def ticks() -> float:
        """Us of CPU per engaged tick: each tick timed on its own (the inputs that keep it engaged are
        fed between the timings), less the cost of the two clock reads.
        """
        spent, empty = 0.0, 0.0
        for _ in range(n):
            clock[0] += 0.01
            t[0] += 0.01
            feed()
            t0 = time.thread_time()
            s.tick()
            t1 = time.thread_time()
            t2 = time.thread_time()
            spent += t1 - t0
            empty += t2 - t1
        return (spent - empty) / n * 1e6

    out["TeleopSession.tick (engaged)"] = min(ticks() for _ in range(repeat))
    assert s.core.engaged
    out["on_hand_pose (lists)"] = per_call_us(
        lambda: s.on_hand_pose(0, [0.2, 1.1, -0.35], [0.0, 0.0, 0.0, 1.0]), n, repeat
    )
    out["on_joy"] = per_call_us(lambda: s.on_joy(0, "right", Joy(trigger=0.3, squeeze=1.0)), n, repeat)
    out["on_arm_pose (lists)"] = per_call_us(lambda: s.on_arm_pose([0.3, 0.0, 0.2], [0.0, 0.0, 0.0, 1.0]), n, repeat)
    out["on_joints (7 floats)"] = per_call_us(lambda: s.on_joints([0.0] * 7), n, repeat)
    return out


def pairs(n: int, repeat: int) -> list[tuple[str, float, float]]:
    """(name, array version us, scalar version us) of this tree's functions."""
    import numpy as np

    from piper_recorder.teleop import rotations as r
    from piper_recorder.teleop.filters import FilterConfig, OneEuroOrientation, OneEuroPosition
    from piper_recorder.teleop.limits import Limits, LimitsConfig

    a, b = r.normalize(np.array([0.1, 0.2, 0.3, 0.9])), r.normalize(np.array([0.1, 0.2, 0.3, 0.902]))
    al, bl = a.tolist(), b.tolist()
    m = np.array([[0.0, 0.0, -1.0], [-1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    ml, mt = m.tolist(), m.T.tolist()
    lim = Limits(LimitsConfig())
    p, prev, meas = np.array([0.301, 0.0, 0.2]), np.array([0.3, 0.0, 0.2]), np.array([0.3, 0.01, 0.2])
    pl, prevl, measl = p.tolist(), prev.tolist(), meas.tolist()
    fp, fq = OneEuroPosition(FilterConfig()), OneEuroOrientation(FilterConfig())
    fp.reset(prev)
    fq.reset(a)
    rows = [
        ("slerp", lambda: r.slerp(a, b, 0.3), lambda: r.slerp_t(al, bl, 0.3)),
        ("angle_between", lambda: r.angle_between(a, b), lambda: r.angle_between_t(al, bl)),
        ("normalize", lambda: r.normalize(a), lambda: r.unit_t(al)),
        (
            "quat_mul(q, conj(q0))",
            lambda: r.quat_mul(a, r.quat_conj(b)),
            lambda: r.quat_mul_t(al, (-bl[0], -bl[1], -bl[2], bl[3])),
        ),
        ("conjugate_rotation", lambda: r.conjugate_rotation(m, a), lambda: r.conjugate_rotation_t(ml, mt, al)),
        (
            "Limits.apply",
            lambda: lim.apply(p, a, prev, b, meas, 0.01),
            lambda: lim.apply_t(pl, al, prevl, bl, measl, 0.01),
        ),
        ("Limits.check", lambda: lim.check(prev, b, prev, b, 0.01), lambda: lim.check_t(prevl, bl, prevl, bl, 0.01)),
        ("OneEuroPosition", lambda: fp(p, 0.01), lambda: fp.step(pl, 0.01)),
        ("OneEuroOrientation", lambda: fq(a, 0.01), lambda: fq.step(al, 0.01)),
    ]
    return [(name, per_call_us(old, n, repeat), per_call_us(new, n, repeat)) for name, old, new in rows]


def run_child(tree: str, n: int, repeat: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": tree}
    child = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", "-n", str(n), "--repeat", str(repeat)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        cwd=tree,
    )
    result: dict[str, Any] = json.loads(child.stdout)
    return result


def compare(rev: str, n: int, repeat: int, rounds: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """This tree's figures and the baseline's, from child processes run alternately (``rounds`` each, the
    best per figure): a burst of load from elsewhere then hits both alike.
    """
    with tempfile.TemporaryDirectory(prefix="teleop_hot_paths-") as tmp:
        trees = [str(ROOT)]
        if rev:
            try:
                archive = subprocess.run(
                    ["git", "-C", str(ROOT), "archive", rev, "piper_recorder"], check=True, capture_output=True
                ).stdout
                subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
                trees.append(tmp)
            except (OSError, subprocess.CalledProcessError) as exc:
                print(f"baseline {rev}: not available ({exc})", file=sys.stderr)
        best: list[dict[str, Any]] = [{} for _ in trees]
        for _ in range(rounds):
            for i, tree in enumerate(trees):
                for key, value in run_child(tree, n, repeat).items():
                    best[i][key] = value if key == "targets" else min(value, best[i].get(key, float("inf")))
    return best[0], (best[1] if len(best) > 1 else None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default=DEFAULT_BASELINE, help="git revision to compare with ('' = none)")
    ap.add_argument("-n", type=int, default=5000, help="calls per timing")
    ap.add_argument("--repeat", type=int, default=5, help="timings per figure (the best is shown)")
    ap.add_argument("--rounds", type=int, default=3, help="alternate child runs per tree")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.n, args.repeat)))
        return 0
    print(
        f"machine: {os.cpu_count()} CPUs, load {'/'.join(f'{x:.1f}' for x in os.getloadavg())}; "
        f"per call, us of thread CPU, best of {args.rounds} x {args.repeat} x {args.n}"
    )
    new, old = compare(args.baseline, args.n, args.repeat, args.rounds)
    print(f"{'hot path':34s} {'baseline':>9s} {'now':>9s}")
    for key, value in new.items():
        if key == "targets":
            continue
        before = f"{old[key]:9.2f}" if old is not None and key in old else f"{'-':>9s}"
        print(f"{key:34s} {before} {value:9.2f}")
    if old is not None:
        same = old["targets"] == new["targets"]
        print(
            f"targets of a {len(new['targets'])}-target session: {'identical' if same else 'DIFFER'} to {args.baseline}"
        )
        if not same:
            return 1
    print(f"\n{'array function vs scalar *_t':34s} {'array':>9s} {'scalar':>9s}")
    for name, a, b in pairs(args.n, args.repeat):
        print(f"{name:34s} {a:9.2f} {b:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
