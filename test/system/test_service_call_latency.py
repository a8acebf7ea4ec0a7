"""Calls from fresh service clients answer at once under the shipped Fast DDS profile.

`ros2 service call` (how users drive episodes), the launcher and the tests each make a new client
per call. With a profile whose writers suppress NACKs after a send (``nack_supression_duration``
100 ms), 9 of 40 such calls took 3.0 s, Fast DDS's heartbeat period; with the default every one
answered within 0.1 s (config/fastdds_loopback.xml says why the profile keeps the default).

A server waits up to the profile's 1 s (not Fast DDS's 100 ms) for a new client's reply reader to match
before it gives the reply up: a node just started on a busy machine matched one later than 100 ms, and the
reply was lost. Measured with a client whose reply reader can never match: the server answers the next
call only once it has given up on that one.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support.paths import SUPPORT_DIR
from support.proc import ProcGroup

pytest.importorskip("rclpy")
PROBE = SUPPORT_DIR / "service_probe.py"
CALLS = 40


NAME = "/probe/trigger"


def _probe_against_a_server(ros_domain, tmp_path, *args: str) -> tuple[object, str]:
    """Serve ``NAME`` from a probe process, run the probe's caller ``args`` against it: its JSON line's
    ``seconds`` and the server's log (read before the server stops).
    """
    env = ros_domain.env()
    with ProcGroup(env, tmp_path) as procs:
        procs.start(sys.executable, str(PROBE), "server", NAME, name="probe_server")
        out = subprocess.run([sys.executable, str(PROBE), *args], env=env, capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])["seconds"], procs.logs()


def test_fresh_client_service_calls_answer_within_a_second(ros_domain, tmp_path):
    seconds, _ = _probe_against_a_server(ros_domain, tmp_path, "calls", NAME, str(CALLS))
    assert isinstance(seconds, list) and len(seconds) == CALLS
    slow = [s for s in seconds if s is None or s > 1.0]
    assert not slow, f"{len(slow)} of {CALLS} calls took over 1 s: {slow}"


def test_a_server_waits_a_second_for_a_new_clients_reply_reader(ros_domain, tmp_path):
    waited, server_log = _probe_against_a_server(ros_domain, tmp_path, "unmatched", NAME)
    # the stranded client's reply given up on (rmw_fastrtps's words), then the plain call answered
    assert isinstance(waited, float) and 0.8 < waited < 3.0, (waited, server_log)
    assert "failed to send response" in server_log, server_log
