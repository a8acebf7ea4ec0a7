"""Shared fixtures and the test tiers. Every DDS process in the suite runs on loopback in its own leased
ROS domain.

Tiers (pyproject.toml declares the markers; `make check` runs the unit tier, `make test` everything):

- ``ros``: starts DDS (rclpy in this process or ROS nodes in child processes). A test that takes the
  ``ros_domain`` fixture is marked automatically; one that starts DDS otherwise says so with the marker.
- ``integration``: starts other processes (console scripts, HTTP servers, a browser, a Ray cluster, mypy).
- ``slow``: in-process (the guard applies) but seconds long: control loops, sockets and deadlines that run
  against wall-clock time, fuzzing, long synthetic bags. `make check` leaves them to `make test`.
- the unit tier is every other test: in-process, no child process, no DDS. The guard below enforces it at
  run time, so a test that starts a process without its marker fails in every run (``make test`` too)
  instead of slowing the one-minute loop down unnoticed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
# test/ for the helper package (``support``), then the checkout itself, as ``python -m pytest`` from the root
# has it: test/rgbd_writer/ (the tests of rgbd_writer) would otherwise be found on test/'s entry as an empty
# namespace package in place of the real one when pytest runs from another directory.
sys.path[:0] = [str(ROOT / "test"), str(ROOT)]
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.pop("ROS_LOCALHOST_ONLY", None)

from piper_recorder.graph.rosenv import lease_domain  # noqa: E402
from piper_recorder.process.supervision import interrupt_on_stop_signals  # noqa: E402

# Fixtures every test module may use, from the helper package (test/support/); a test module defines only
# its own fixtures and imports no other test module (test_module_graph keeps it so).
pytest_plugins = ["support.launch_stub", "support.bimanual_roots"]

# a `timeout` or a SIGTERM to pytest tears the fixtures down (graphs stopped) instead of orphaning them;
# a SIGKILL leaves every node to notice its launcher is gone (supervision.watch_parent)
interrupt_on_stop_signals()


@pytest.fixture
def ros_domain():
    """A test-unique ROS domain: ``lease.env()`` for subprocesses, ``lease.apply()`` for in-process rclpy."""
    with lease_domain() as lease:
        yield lease


# -- tiers ----------------------------------------------------------------------------------------------

TIER_MARKERS = ("ros", "integration")
_violations: pytest.StashKey[list[tuple[str, str]]] = pytest.StashKey()  # (phase, what)
_guarded: list[tuple[pytest.Item, str]] = []  # the unit-tier item and the phase (setup/call/teardown) running

# Audit events that start a child process (subprocess, os.system/posix_spawn/exec*, a multiprocessing fork).
_PROCESS_EVENTS = {"subprocess.Popen", "os.system", "os.posix_spawn", "os.spawn", "os.exec", "os.fork", "os.forkpty"}


# What the standard library runs to describe the machine when a library first asks (platform.processor ->
# `uname -p`, ctypes.util.find_library -> ldconfig/gcc/ld): an import's probe, not a test starting a process.
_SYSTEM_PROBES = {"uname", "ldconfig", "gcc", "cc", "ld", "objdump"}


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory) -> Path:
    """A hermetic Hugging Face cache for the consumers of one test module (``support.consumers``)."""
    return tmp_path_factory.mktemp("hf_home")


def _probe(args: tuple[Any, ...]) -> bool:
    exe = args[0] if args else None
    return isinstance(exe, (str, bytes, os.PathLike)) and os.path.basename(os.fsdecode(exe)) in _SYSTEM_PROBES


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """Record a child process started while a unit-tier test runs (the report fails the test). It only
    records: an exception raised from an audit hook can leave the interpreter inconsistent.
    """
    if not _guarded:
        return
    item, phase = _guarded[0]
    if event in _PROCESS_EVENTS and not (event == "subprocess.Popen" and _probe(args)):
        item.stash[_violations].append((phase, f"started a process ({event} {str(args[:2])[:160]})"))


sys.addaudithook(_audit)


def _refuse(what: str) -> Any:
    def refuse(*_args: Any, **_kwargs: Any) -> None:
        if _guarded:
            item, phase = _guarded[0]
            item.stash[_violations].append((phase, what))
        # pytest's Failed is a BaseException: code under test that catches Exception cannot swallow it
        pytest.fail(f"unit-tier test {what}: mark it `ros` or `integration` (test/conftest.py)", pytrace=False)

    return refuse


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "ros_domain" in getattr(item, "fixturenames", ()) and item.get_closest_marker("ros") is None:
            item.add_marker(pytest.mark.ros)


def _is_unit(item: pytest.Item) -> bool:
    return not any(item.get_closest_marker(m) for m in TIER_MARKERS)


@pytest.fixture
def unit_guard_active() -> bool:
    """Whether this test runs under the unit-tier guard (for test_tiers itself)."""
    return bool(_guarded)


def _guard(item: pytest.Item, phase: str) -> Generator[None, None, None]:
    if not _is_unit(item):
        yield
        return
    item.stash.setdefault(_violations, [])
    mp = pytest.MonkeyPatch()
    # the audit hook has recorded the Popen by now; refusing it here keeps a misplaced test short
    execute_child, refuse = subprocess.Popen._execute_child, _refuse("started a process")  # type: ignore[attr-defined]

    def guarded(self: subprocess.Popen[Any], args: Any, executable: Any, *rest: Any) -> Any:
        if _probe(((executable or (args if isinstance(args, (str, bytes)) else args[0])),)):
            return execute_child(self, args, executable, *rest)
        return refuse()

    mp.setattr(subprocess.Popen, "_execute_child", guarded)
    # A unit test may import rclpy (the nodes' config classes live beside them), never start DDS: rclpy is
    # loaded here once (0.2 s) if it is not yet, so that its init can be refused before the test runs.
    try:
        import rclpy
        import rclpy.context
    except ImportError:
        rclpy = None
    if rclpy is not None:
        mp.setattr(rclpy, "init", _refuse("initialised rclpy (DDS)"))
        mp.setattr(rclpy.context.Context, "init", _refuse("initialised rclpy (DDS)"))
    _guarded.append((item, phase))
    try:
        yield
    finally:
        _guarded.clear()
        mp.undo()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    yield from _guard(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    yield from _guard(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    yield from _guard(item, "teardown")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    found = list(dict.fromkeys(what for phase, what in item.stash.get(_violations, []) if phase == report.when))
    if found and not report.failed:
        report.outcome = "failed"
        report.longrepr = f"unit-tier test {'; '.join(found)}: mark it `ros` or `integration`"
    if found and (path := os.environ.get("PIPER_TIER_REPORT")):
        with open(path, "a") as f:
            f.write(f"{item.nodeid}\t{'; '.join(found)}\n")
