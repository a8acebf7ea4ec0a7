"""Shared fixtures. Every DDS process in the suite runs on loopback in its own leased ROS domain."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "test"))
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.pop("ROS_LOCALHOST_ONLY", None)

from piper_recorder.rosenv import lease_domain  # noqa: E402
from piper_recorder.supervision import interrupt_on_stop_signals  # noqa: E402

# a `timeout` or a SIGTERM to pytest tears the fixtures down (graphs stopped) instead of orphaning them;
# a SIGKILL leaves every node to notice its launcher is gone (supervision.watch_parent)
interrupt_on_stop_signals()


@pytest.fixture
def ros_domain():
    """A test-unique ROS domain: ``lease.env()`` for subprocesses, ``lease.apply()`` for in-process rclpy."""
    with lease_domain() as lease:
        yield lease
