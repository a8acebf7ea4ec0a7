"""piper-launch sim|robot [--config FILE] [--set node.param=value ...]: run the graph without `ros2 launch`.

Leases a private ROS domain (loopback discovery) unless --domain-id is given, starts every node as
its own process (see piper_recorder.graph.plan), waits until all nodes are in the graph, then runs
until Ctrl-C or until a process dies (exit 1).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

from piper_recorder.graph.errors import LaunchError
from piper_recorder.graph.install import config_path
from piper_recorder.graph.plan import plan_graph
from piper_recorder.graph.rosenv import apply_dds_env, lease_domain, loopback_env
from piper_recorder.graph.supervisor import Graph
from piper_recorder.process.supervision import on_stop_signals
from piper_recorder.storage.outpaths import dir_problem


def main(argv: list[str] | None = None) -> int:
    """Run ``piper-launch`` on ``argv`` (default: the command line); returns the exit status."""
    p = argparse.ArgumentParser(prog="piper-launch", description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["sim", "robot"])
    p.add_argument("--config", help="parameter file (default: config/<mode>.yaml)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NODE.PARAM=VALUE",
        help="override a parameter (value parsed as YAML); repeatable",
    )
    for arg in ("task", "root", "rgbd-path", "backend", "cameras", "arms", "policy", "policy-root", "teleop-input"):
        p.add_argument(f"--{arg}", default="", help=f"as the launch files' {arg.replace('-', '_')} argument")
    p.add_argument(
        "--dashboard",
        default="",
        choices=["", "true", "false"],
        help="start the read-only web dashboard (default: piper_launch.dashboard in the config)",
    )
    p.add_argument(
        "--no-sim-headset",
        action="store_true",
        help="sim: do not start the simulated headset; quest_bridge keeps its host/port (e.g. --set "
        "quest_bridge.port=...) for a real headset (as piper_launch.sim_quest.enabled=false)",
    )
    p.add_argument(
        "--headset",
        default="",
        choices=["", "native", "web", "sim"],
        help="native: the headset app (adb forward); web: the WebXR page (piper-quest-web, "
        "piper_launch.quest_web; adb reverse tcp:8737 tcp:8737, then http://localhost:8737 in the "
        "Quest Browser); sim: the simulated headset (default in sim mode)",
    )
    p.add_argument("--log-dir", help="per-process logs and the effective params.yaml (default: a temp dir)")
    p.add_argument(
        "--domain-id", type=int, help="use this ROS_DOMAIN_ID (e.g. to reach other tools); default: lease a private one"
    )
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for all nodes")
    p.add_argument("--quiet", action="store_true", help="do not echo node output (it stays in the logs)")
    args = p.parse_args(argv)
    problem = dir_problem(args.log_dir) if args.log_dir else None
    if problem:
        p.error(f"--log-dir: {problem}")

    own_log_dir = not args.log_dir  # a temp dir of ours: removed again when nothing starts
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="piper-launch-"))
    lease = None
    if args.domain_id is None:
        lease = lease_domain()
        env = lease.env()
    else:
        env = loopback_env(dict(os.environ, ROS_DOMAIN_ID=str(args.domain_id), PYTHONUNBUFFERED="1"))
    apply_dds_env(env)
    stop = threading.Event()
    on_stop_signals(lambda _sig: stop.set())  # SIGINT, SIGTERM, SIGHUP: stop the graph cleanly
    try:
        plan = plan_graph(
            args.mode,
            args.config or config_path(args.mode),
            args.set,
            log_dir,
            task=args.task,
            root=args.root,
            rgbd_path=args.rgbd_path,
            backend=args.backend,
            cameras=args.cameras,
            arms=args.arms,
            policy=args.policy,
            policy_root=args.policy_root,
            teleop_input=args.teleop_input,
            dashboard=args.dashboard,
            sim_headset="false" if args.no_sim_headset else "",
            headset=args.headset,
        )
    except LaunchError as exc:
        print(f"piper-launch: {exc}", file=sys.stderr)
        if own_log_dir:
            shutil.rmtree(log_dir, ignore_errors=True)
        return 2
    for note in plan.skipped:
        print(f"piper-launch: not started: {note}", file=sys.stderr)
    for note in plan.notes:
        print(f"piper-launch: note: {note}", file=sys.stderr)
    print(
        f"piper-launch: {args.mode} graph, ROS_DOMAIN_ID={env['ROS_DOMAIN_ID']} (loopback), "
        f"params {plan.params_file}, logs {log_dir}",
        flush=True,
    )
    import rclpy

    code = 0
    with Graph(plan, env, log_dir, echo=not args.quiet) as graph:
        ctx = rclpy.Context()
        rclpy.init(context=ctx)
        probe = rclpy.create_node("piper_launch_probe", context=ctx)
        try:
            graph.wait_nodes(probe, args.timeout)
            print(f"piper-launch: ready: {', '.join(plan.node_names)}", flush=True)
            while not stop.wait(0.5):
                dead = graph.dead()
                if dead:
                    print(f"piper-launch: process(es) exited: {dead}; stopping\n{graph.logs()}", file=sys.stderr)
                    code = 1
                    break
        except LaunchError as exc:
            print(f"piper-launch: {exc}", file=sys.stderr)
            code = 1
        finally:
            probe.destroy_node()
            rclpy.shutdown(context=ctx)
            print("piper-launch: stopping", flush=True)
    bad = {n: c for n, c in graph.exit_codes.items() if c not in (0, None)}
    print(f"piper-launch: stopped; exit codes {graph.exit_codes}", flush=True)
    if bad and code == 0:
        code = 1
    if lease is not None:
        lease.release()
    return code


if __name__ == "__main__":
    sys.exit(main())
