"""The test tiers hold: a unit-tier test (no ``ros``/``integration`` marker) that starts a child process or
DDS fails, naming the marker it needs, even when the code under test swallows the refusal; the same
tests marked pass; a test taking ``ros_domain`` is marked ``ros`` by itself; an import-time system probe
(``uname -p``) is no process of the test's. Runs the suite's own conftest on a small test file in a child
pytest, so the guard is checked exactly as `make check` and `make test` apply it. The Makefile's four
tiers put every test in exactly one of them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from support.paths import ROOT, TEST_DIR

pytestmark = pytest.mark.integration

CASES = """
import subprocess, sys
import pytest

def test_unit_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_unit_swallows_the_refusal():
    try:
        subprocess.run(["true"])
    except Exception:
        pass

def test_unit_starts_dds():
    import rclpy
    rclpy.init()

def test_unit_in_process():
    import platform
    platform.uname()        # probes `uname -p`: the standard library's, not the test's
    assert sum(range(4)) == 6

@pytest.mark.integration
def test_marked_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_auto_marked_ros(ros_domain, request):
    assert request.node.get_closest_marker("ros") is not None
"""


def test_the_guard_fails_unmarked_process_and_dds_tests(tmp_path):
    shutil.copy(TEST_DIR / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "support").symlink_to(TEST_DIR / "support")  # the helper package its pytest_plugins load
    (tmp_path / "test_cases.py").write_text(CASES)
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "test_cases.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = p.stdout + p.stderr
    results = {
        line.split("::")[1].split()[0]: line.split()[0]
        for line in out.splitlines()
        if line.startswith(("PASSED", "FAILED", "ERROR")) and "::" in line
    }
    assert results == {
        "test_unit_starts_a_process": "FAILED",
        "test_unit_swallows_the_refusal": "FAILED",
        "test_unit_starts_dds": "FAILED",
        "test_unit_in_process": "PASSED",
        "test_marked_process": "PASSED",
        "test_auto_marked_ros": "PASSED",
    }, out
    assert out.count("mark it `ros` or `integration`") >= 3, out
    assert "started a process" in out and "initialised rclpy (DDS)" in out, out
    # and the unit tier of that file is what `make check` selects
    q = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "--collect-only",
            "-p",
            "no:cacheprovider",
            "-m",
            "not ros and not integration",
            "test_cases.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "4/6 tests collected (2 deselected)" in q.stdout, q.stdout


MARKED = """
import pytest

def test_plain(): pass

@pytest.mark.slow
def test_slow(): pass

@pytest.mark.integration
def test_integration(): pass

@pytest.mark.ros
def test_ros(): pass

@pytest.mark.ros
@pytest.mark.integration
@pytest.mark.slow
def test_ros_integration_slow(): pass

@pytest.mark.integration
@pytest.mark.slow
def test_integration_slow(): pass
"""


def _make_variable(name: str) -> str:
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line.startswith(f"{name} :="):
            return line.split(":=", 1)[1].strip()
    raise AssertionError(f"no {name} in the Makefile")


def _collected(cwd, expression: str) -> set[str]:
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", "-m", expression, "t.py"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return {line.split("::")[1] for line in p.stdout.splitlines() if line.startswith("t.py::")}


def test_make_tests_tiers_take_every_test_exactly_once(tmp_path):
    shutil.copy(TEST_DIR / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "support").symlink_to(TEST_DIR / "support")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")  # the declared markers
    (tmp_path / "t.py").write_text(MARKED)
    names = ("UNIT_TIER", "TIMED_TIER", "BESIDE_TIER", "ROS_TIER")
    tiers = {name: _collected(tmp_path, _make_variable(name)) for name in names}
    assert tiers == {
        "UNIT_TIER": {"test_plain"},
        "TIMED_TIER": {"test_slow", "test_integration_slow"},  # deadlines: never at idle priority
        "BESIDE_TIER": {"test_integration"},
        "ROS_TIER": {"test_ros", "test_ros_integration_slow"},
    }
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile[makefile.index("\ntest: ") :].split("\n\n", 1)[0]  # make test's rule, to its blank line
    assert all(f'-m "$({name})"' in recipe for name in names), recipe
