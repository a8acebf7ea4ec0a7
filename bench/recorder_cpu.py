"""CPU per thread of one real recorder process fed the sim graph's traffic by a publisher, no graph.

A publisher process sends what the sim graph sends a recorder: /arm/joint_states, /arm/eef_pose,
/arm/commanded_pose and /arm/commanded_gripper at 100 Hz each, /quest/raw lines at 90 Hz, and two
cameras' 640x480 rgb8 colour (cam_front also 16UC1 depth) at 30 fps, rendered beforehand by the sim
camera's renderer with a moving marker (so x264 and JPEG see the sim's content), stamped when sent.
The recorder (the real node, ``piper-lerobot-recorder`` or ``piper-rgbd-recorder``, the sim
config's parameters) records one episode through its services; its threads' CPU
(``/proc/<pid>/task``) is measured over the middle of the episode, and named from the recorder's own
``threading.enumerate()`` (DDS's C++ threads are grouped as ``dds``).

    .venv/bin/python bench/recorder_cpu.py [--recorder lerobot|rgbd|both] [--seconds 20] [--rounds 2]
                                           [--tree DIR ...]

``--tree DIR`` (repeatable) runs the recorder from another source tree (e.g. ``git archive <commit> |
tar -x -C DIR``), alternating with this one round by round: an A/B of two versions under the same load
(the recorder runs with ``PYTHONPATH=DIR`` from a scratch directory, and the bench checks which tree it
imported). Also printed: the process's minor page faults per second.
The figures depend on what else the machine runs (the load is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from piper_recorder.graph.rosenv import lease_domain  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
ARM_HZ, CAM_FPS, QUEST_HZ = 100.0, 30.0, 90.0
NODES = {
    "lerobot": ("lerobot_recorder", "piper_recorder.nodes.lerobot_recorder"),
    "rgbd": ("rgbd_recorder", "piper_recorder.nodes.rgbd_recorder"),
}

# the recorder's child: names its threads (native id -> Python name) in a file once a second
CHILD = """
import json, os, sys, threading, time
out = sys.argv.pop(1)
def names():
    m = {}   # every thread seen (threads that ended keep their name)
    while True:
        m.update({t.native_id: t.name for t in threading.enumerate() if t.native_id is not None})
        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(m, f)
        os.replace(tmp, out)
        time.sleep(1.0)
threading.Thread(target=names, name="bench-names", daemon=True).start()
import importlib
mod = importlib.import_module(sys.argv.pop(1))
with open(out + ".tree", "w") as f:
    f.write(mod.__file__)
sys.exit(mod.main())
"""


def render_frames(n: int) -> tuple[list[bytes], list[bytes]]:
    import numpy as np

    from piper_recorder.sim.camera import Intrinsics, PinholeCamera
    from piper_recorder.sim.scene import SceneRenderer

    cam = PinholeCamera.looking_at(Intrinsics.default(640, 480), [0.9, 0.0, 0.55], [0.2, 0.0, 0.38])
    r = SceneRenderer(cam)
    rgb, depth = [], []
    for i in range(n):
        c, d = r.render(np.array([0.2 + 0.1 * np.sin(i / 20), 0.1 * np.cos(i / 15), 0.3]))
        rgb.append(c.tobytes())
        depth.append(d.astype(np.uint16).tobytes())
    return rgb, depth


def publisher(node_name: str, seconds: float, ready: Path) -> None:
    """Publish the traffic, start an episode, keep going ``seconds``, stop it; print the answers."""
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import String
    from std_srvs.srv import Trigger

    rgb, depth = render_frames(60)
    rclpy.init()
    node = rclpy.create_node("bench_traffic")
    rel = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
    img_qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    js = node.create_publisher(JointState, "/arm/joint_states", rel)
    eef = node.create_publisher(PoseStamped, "/arm/eef_pose", rel)
    cmd = node.create_publisher(PoseStamped, "/arm/commanded_pose", rel)
    grip = node.create_publisher(JointState, "/arm/commanded_gripper", rel)
    quest = node.create_publisher(String, "/quest/raw", 1000)
    cams = {c: node.create_publisher(Image, f"/{c}/color/image_raw", img_qos) for c in ("cam_front", "cam_wrist")}
    dep = node.create_publisher(Image, "/cam_front/aligned_depth_to_color/image_raw", img_qos)
    start = node.create_client(Trigger, f"/{node_name}/start_episode")
    stop = node.create_client(Trigger, f"/{node_name}/stop_episode")
    names = [f"joint{i}" for i in range(1, 7)] + ["gripper"]

    def call(client, what: str) -> str:
        if not client.wait_for_service(timeout_sec=30.0):
            raise SystemExit(f"no {what} service")
        fut = client.call_async(Trigger.Request())
        while not fut.done():
            rclpy.spin_once(node, timeout_sec=0.01)
            pump()
        res = fut.result()
        return f"{what}: {res.success} {res.message}"

    t0 = time.monotonic()
    k = [0]
    period = 1.0 / ARM_HZ

    def pump() -> None:
        """Publish whatever is due (arm at 100 Hz, images at 30 fps, headset lines at 90 Hz)."""
        now = time.monotonic()
        while t0 + k[0] * period <= now:
            i = k[0]
            stamp = node.get_clock().now().to_msg()
            j = JointState(name=names, position=[0.1 * x + 0.001 * i for x in range(7)])
            j.header.stamp = stamp
            js.publish(j)
            for pub in (eef, cmd):
                p = PoseStamped()
                p.header.stamp = stamp
                p.pose.position.x, p.pose.orientation.w = 0.3 + 0.0001 * i, 1.0
                pub.publish(p)
            g = JointState(name=["gripper"], position=[0.03])
            g.header.stamp = stamp
            grip.publish(g)
            if i % 10 in (0, 3, 7):  # 30 of 100 ticks
                f = (i // 3) % len(rgb)
                for pub in cams.values():
                    m = Image(height=480, width=640, encoding="rgb8", step=1920, data=rgb[f])
                    m.header.stamp = stamp
                    pub.publish(m)
                d = Image(height=480, width=640, encoding="16UC1", step=1280, data=depth[f])
                d.header.stamp = stamp
                dep.publish(d)
            if i % 10 != 9:  # 90 of 100 ticks
                quest.publish(String(data=json.dumps({"t": i * period, "head": [0.0] * 7, "buttons": 0})))
            k[0] += 1

    while time.monotonic() - t0 < 3.0:  # discovery, the recorder's pre-roll
        pump()
        time.sleep(0.002)
    print(call(start, "start"), flush=True)
    ready.write_text(str(time.monotonic()))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pump()
        time.sleep(max(0.0, t0 + k[0] * period - time.monotonic()))
    ready.write_text("stop")
    print(call(stop, "stop"), flush=True)
    node.destroy_node()
    rclpy.shutdown()


def params(tmp: Path, rec: str) -> Path:
    import yaml

    node_name = NODES[rec][0]
    p = {"task": "bench", "lateness_s": 0.25, "max_episode_s": 0.0, "provenance_wait_s": 0.0}
    if rec == "lerobot":
        p.update(root=str(tmp / "lerobot"), cameras=["cam_front", "cam_wrist"])
    else:
        p.update(path=str(tmp / "rgbd.hdf5"), depth_codec="htj2k", camera="cam_front")
    path = tmp / f"{rec}.yaml"
    path.write_text(yaml.safe_dump({node_name: {"ros__parameters": p}}))
    return path


def thread_cpu(pid: int) -> dict[int, tuple[float, int]]:
    """Per thread: (CPU s, minor page faults) so far."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            f = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(tid)] = ((int(f[11]) + int(f[12])) / CLK_TCK, int(f[7]))
    return out


def group(name: str) -> str:
    """Thread names -> rows (encoders and workers keep their index; Thread-N pools are merged)."""
    for prefix in ("service-work", "Thread-"):
        if name.startswith(prefix):
            return prefix.rstrip("-")
    return name


def run_once(rec: str, tree: Path, seconds: float, tmp: Path) -> dict[str, float]:
    node_name, module = NODES[rec]
    work = Path(tempfile.mkdtemp(prefix=f"{rec}-", dir=tmp))
    names_file, ready = work / "threads.json", work / "ready"
    with lease_domain() as lease:
        env = {**os.environ, **lease.env(), "PYTHONPATH": str(tree)}
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD,
                str(names_file),
                module,
                "--ros-args",
                "-r",
                f"__node:={node_name}",
                "--params-file",
                str(params(work, rec)),
            ],
            env=env,
            cwd=work,  # not this tree's directory: -c puts the cwd first on sys.path
            stdout=subprocess.DEVNULL,
            stderr=(work / "recorder.log").open("w"),
        )
        pub = subprocess.Popen(
            [sys.executable, __file__, "--publish", node_name, str(seconds), str(ready)],
            env={**env, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            while not ready.exists():
                if pub.poll() is not None:
                    raise SystemExit(f"publisher ended: {pub.stdout.read() if pub.stdout else ''}")
                time.sleep(0.05)
            time.sleep(min(2.0, seconds / 4))  # the episode's first rows, encoders started
            window = seconds - min(2.0, seconds / 4) - 1.0
            c0, w0 = thread_cpu(child.pid), time.monotonic()
            time.sleep(window)
            c1, wall = thread_cpu(child.pid), time.monotonic() - w0
            out, _ = pub.communicate(timeout=120)
        finally:
            if pub.poll() is None:
                pub.kill()
            child.send_signal(signal.SIGINT)
            try:
                child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()
        if "start: True" not in out or "stop: True" not in out:
            raise SystemExit(f"{rec} from {tree}: {out}\n{(work / 'recorder.log').read_text()[-3000:]}")
    names = {int(k): v for k, v in json.loads(names_file.read_text()).items()}
    ran = Path(f"{names_file}.tree").read_text()  # the module the child imported
    if not ran.startswith(str(tree)):
        raise SystemExit(f"the recorder ran {ran}, not the tree {tree}")
    rows: dict[str, float] = defaultdict(float)
    for tid, (t, flt) in c1.items():
        t0, f0 = c0.get(tid, (0.0, 0))
        rows[group(names.get(tid, "dds/other"))] += (t - t0) / wall
        rows["page faults/s"] += (flt - f0) / wall
    rows["total"] = sum(v for k, v in rows.items() if k != "page faults/s")
    return dict(rows)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--publish":
        publisher(sys.argv[2], float(sys.argv[3]), Path(sys.argv[4]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recorder", choices=["lerobot", "rgbd", "both"], default="both")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tree", action="append", default=[], help="another source tree to A/B against (repeatable)")
    args = ap.parse_args()
    trees = [ROOT] + [Path(t).resolve() for t in args.tree]
    recs = ["lerobot", "rgbd"] if args.recorder == "both" else [args.recorder]
    print(f"machine: {os.cpu_count()} CPUs, load {'/'.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    results: dict[tuple[str, Path], list[dict[str, float]]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="recorder_cpu-") as tmp:
        for r in range(args.rounds):
            for rec in recs:
                for tree in trees if r % 2 == 0 else trees[::-1]:
                    res = run_once(rec, tree, args.seconds, Path(tmp))
                    results[(rec, tree)].append(res)
                    print(
                        f"round {r + 1} {rec:7s} {tree}: total {res['total']:.3f} cores "
                        f"(load {os.getloadavg()[0]:.1f})",
                        flush=True,
                    )
    for rec in recs:
        print(f"\n== {rec}_recorder, cores per thread (mean of {args.rounds} rounds; {args.seconds:g} s episodes)")
        keys = sorted(
            {k for tree in trees for res in results[(rec, tree)] for k in res},
            key=lambda k: (
                k == "total",
                k == "page faults/s",
                -max(sum(r.get(k, 0.0) for r in results[(rec, t)]) for t in trees),
            ),
        )
        print("  " + f"{'thread':28s}" + "".join(f"{str(t)[-24:]:>26s}" for t in trees))
        for k in keys:
            vals = [sum(r.get(k, 0.0) for r in results[(rec, t)]) / len(results[(rec, t)]) for t in trees]
            if k == "page faults/s":
                print(f"  {k:28s}" + "".join(f"{v:26.0f}" for v in vals))
            elif max(vals) >= 0.002:
                print(f"  {k:28s}" + "".join(f"{v:26.3f}" for v in vals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
