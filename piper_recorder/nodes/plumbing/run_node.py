"""A node's process from start to clean shutdown: command line, rclpy, executor, stop signals, parent watch."""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
from collections.abc import Callable, Sequence

import rclpy
from rclpy.impl.implementation_singleton import rclpy_implementation
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from piper_recorder.process.nodehelp import argument_problem, node_usage, rcl_message, wants_help
from piper_recorder.process.supervision import TeardownWatchdog, on_stop_signals, watch_parent

from .executors import executor_for, make_executor, spin_until
from .host import HostNode
from .parameters import ParameterError


def run_node(factory: Callable[[], Node], args: Sequence[str] | None = None, executor: str = "events") -> int:
    """Create the node, spin it until a stop signal or its parent is gone, then shut down cleanly.

    The executor is ``make_executor(executor_for(node, executor, *hosted))``; the stops are SIGINT, SIGTERM,
    SIGHUP and the end of the process that started it (``supervision.watch_parent``: a SIGKILLed launcher).

    The node's ``on_shutdown()`` (if any) runs while rclpy is still up, so a recorder can save or
    discard the episode in flight and publish its last event before the process exits. A ``HostNode``'s
    ``hosted`` nodes spin with it and are destroyed before it (its ``on_shutdown`` stops them). A stop signal
    that comes while the process is stopping prints every thread's stack on stderr (a supervisor's SIGTERM
    after its grace leaves the node's log saying where the stop hung).
    """
    argv = list(sys.argv if args is None else args)
    if wants_help(argv):  # rcl would ignore --help and start the node: print usage, start nothing
        module = sys.modules.get(getattr(factory, "__module__", ""))
        print(node_usage(argv[0] if argv else "", getattr(module, "__doc__", None)), end="")
        return 0
    prog = os.path.basename(argv[0]) if argv else "node"
    problem = argument_problem(argv)  # rclpy.init refuses with a traceback, or ignores what is not its own
    if problem:
        print(f"{prog}: error: {problem}", file=sys.stderr)
        return 2
    try:
        rclpy.init(args=argv, signal_handler_options=SignalHandlerOptions.NO)
    except rclpy_implementation.RCLError as exc:  # e.g. an invalid ROS_DOMAIN_ID in the environment
        print(f"{prog}: error: cannot start ROS: {rcl_message(exc)}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def _on_stop(_signum: int) -> None:
        if stop.is_set():  # a second stop while stopping (a supervisor's SIGTERM): show where it is stuck
            print(f"{prog}: still stopping; where each thread is:", file=sys.stderr, flush=True)
            faulthandler.dump_traceback(sys.stderr, all_threads=True)
        stop.set()

    on_stop_signals(_on_stop)
    watch_parent(stop.set)
    node: Node | None = None
    hosted: list[Node] = []  # a HostNode's nodes, spun and destroyed with it
    code = 0
    teardown = TeardownWatchdog(argv[0] if argv else "node")
    try:
        try:
            node = factory()
        except ParameterError as exc:
            print(f"{prog}: error: {exc}", file=sys.stderr)
            return 2
        hosted = node.hosted if isinstance(node, HostNode) else []
        teardown.what = node.get_name()

        spin = make_executor(executor_for(node, executor, *hosted))
        for each in (node, *hosted):
            spin.add_node(each)
        stop_spin = threading.Event()
        spinner = threading.Thread(target=spin_until, args=(spin, stop_spin), name="executor", daemon=True)
        spinner.start()
        while not stop.wait(0.1):
            if not rclpy.ok() or not spinner.is_alive():
                break
        hook = getattr(node, "on_shutdown", None)
        if callable(hook):
            hook()  # the executor still spins: the hook may publish and call services
        teardown.start()  # the node's work is done; what is left is the middleware's
        stop_spin.set()
        spinner.join(timeout=2.0)
        spin.shutdown(timeout_sec=2.0)
    finally:
        teardown.start()
        if node is not None:
            for each in (*hosted, node):
                each.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
        teardown.finish()
    return code
