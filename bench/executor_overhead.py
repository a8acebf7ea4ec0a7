"""CPU cost of rclpy executors for a recorder-like subscriber, measured in the same run.

A publisher process sends what a recorder receives from the graph (joint states and EEF poses at
200 Hz each, commanded pose and gripper at 200 Hz each, two 640x480 rgb8 cameras at 30 fps); a
subscriber process with a trivial callback (like the recorders': wrap the buffer, insert) runs each
executor in turn, and the recorders' way: no executor, the messages taken every 33 ms (``polled``).
Prints messages received vs sent and the subscriber's CPU seconds per wall second.

    .venv/bin/python bench/executor_overhead.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from piper_recorder.graph.rosenv import lease_domain

ARM_HZ, CAM_FPS = 200.0, 30.0


def publisher(seconds: float) -> None:
    import numpy as np
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from sensor_msgs.msg import Image, JointState

    rclpy.init()
    node = rclpy.create_node("bench_pub")
    js = node.create_publisher(JointState, "/arm/joint_states", 50)
    topics = [node.create_publisher(PoseStamped, t, 50) for t in ("/arm/eef_pose", "/arm/commanded_pose")]
    cg = node.create_publisher(JointState, "/arm/commanded_gripper", 50)
    cams = [node.create_publisher(Image, f"/{c}/color/image_raw", 10) for c in ("cam_front", "cam_wrist")]
    img = Image(
        height=480,
        width=640,
        encoding="rgb8",
        step=1920,
        data=np.random.default_rng(0).integers(0, 255, 480 * 640 * 3, dtype=np.uint8).tobytes(),
    )
    time.sleep(2.0)  # discovery
    t0 = time.monotonic()
    k = 0
    while time.monotonic() - t0 < seconds:
        js.publish(JointState(name=[f"joint{i}" for i in range(1, 7)] + ["gripper"], position=[0.0] * 7))
        for p in topics:
            p.publish(PoseStamped())
        cg.publish(JointState(name=["gripper"], position=[0.0]))
        if k % round(ARM_HZ / CAM_FPS) == 0:
            for c in cams:
                c.publish(img)
        k += 1
        delay = t0 + k / ARM_HZ - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    print(f"sent {k * 4} arm {sum(1 for i in range(k) if i % round(ARM_HZ / CAM_FPS) == 0) * 2} images", flush=True)


def subscriber(kind: str, seconds: float) -> None:
    import numpy as np
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from rclpy.callback_groups import ReentrantCallbackGroup
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image, JointState

    rclpy.init()
    node = rclpy.create_node("bench_sub")
    counts = {"arm": 0, "img": 0}
    group = ReentrantCallbackGroup()

    def on_arm(_m):
        counts["arm"] += 1

    def on_img(m):
        np.frombuffer(m.data, dtype=np.uint8)
        counts["img"] += 1

    qos = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
    polled = None
    if kind == "decoded":  # serialized messages decoded by cdr.decode, through the EventsExecutor
        from piper_recorder.nodes.plumbing.decoded_subscription import create_decoded_subscription as sub
    elif kind == "polled":  # what the recorders do: PolledInputs taken every 33 ms (a row), decoded
        from piper_recorder.nodes.plumbing.polled_inputs import PolledInputs

        polled = PolledInputs(node)

        def sub(node, cls, topic, cb, q, **kw):
            return polled.subscribe(cls, topic, lambda m, _t: cb(m), q)
    else:

        def sub(node, cls, topic, cb, q, **kw):
            return node.create_subscription(cls, topic, cb, q, **kw)

    sub(node, JointState, "/arm/joint_states", on_arm, qos, callback_group=group)
    sub(node, PoseStamped, "/arm/eef_pose", on_arm, qos, callback_group=group)
    sub(node, PoseStamped, "/arm/commanded_pose", on_arm, qos, callback_group=group)
    sub(node, JointState, "/arm/commanded_gripper", on_arm, qos, callback_group=group)
    for c in ("cam_front", "cam_wrist"):
        sub(node, Image, f"/{c}/color/image_raw", on_img, QoSProfile(depth=10), callback_group=group)
    if kind == "multi":
        from rclpy.executors import MultiThreadedExecutor

        ex = MultiThreadedExecutor(num_threads=4)
    elif kind == "single":
        from rclpy.executors import SingleThreadedExecutor

        ex = SingleThreadedExecutor()
    else:
        from rclpy.experimental import EventsExecutor

        ex = EventsExecutor()
    ex.add_node(node)
    c0, t0 = time.process_time(), time.monotonic()
    end = t0 + seconds
    if polled is not None:
        while time.monotonic() < end:
            polled.poll()
            time.sleep(1 / 30)
    while time.monotonic() < end:
        ex.spin_once(timeout_sec=0.1)
    cpu = time.process_time() - c0
    print(
        f"{kind:7s} received arm {counts['arm']:6d} images {counts['img']:4d}  CPU {cpu / seconds:.2f} s/s", flush=True
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--role", choices=["pub", "multi", "single", "events", "decoded", "polled"])
    ap.add_argument(
        "--kinds",
        default="multi,single,events,decoded,polled",
        help="subscribers to run in turn (decoded: EventsExecutor, serialized take + our decoder; "
        "polled: nodes.plumbing.polled_inputs.PolledInputs taken every 33 ms, as the recorders do)",
    )
    args = ap.parse_args()
    if args.role == "pub":
        return publisher(args.seconds)
    if args.role:
        return subscriber(args.role, args.seconds)
    for kind in args.kinds.split(","):
        with lease_domain() as lease:
            env = lease.env()
            sub = subprocess.Popen(
                [sys.executable, __file__, "--role", kind, "--seconds", str(args.seconds + 3)], env=env
            )
            pub = subprocess.run(
                [sys.executable, __file__, "--role", "pub", "--seconds", str(args.seconds)],
                env=env,
                capture_output=True,
                text=True,
            )
            sub.wait()
            print("        " + pub.stdout.strip(), flush=True)
    return None


if __name__ == "__main__":
    main()
