"""The shipped Fast DDS profile keeps a reliable writer's event thread quiet: a writer publishing at
100 Hz to a reliable reader in another process wakes its event thread a few times a second, not once
per sample (config/fastdds_loopback.xml, ``nack_supression_duration``). The same writer with the
profile's writer section removed shows the per-sample wake-ups it prevents, so this test also sees
a Fast DDS whose timers work otherwise."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from proc import ProcGroup

pytest.importorskip("rclpy")
PROBE = Path(__file__).with_name("dds_writer_probe.py")
SENT, HZ = 300, 100.0


def wakes(env: dict[str, str], tmp_path: Path, topic: str) -> dict[str, int]:
    with ProcGroup(env, tmp_path) as procs:
        procs.start(sys.executable, str(PROBE), "sub", topic, name="probe_sub")
        out = subprocess.run([sys.executable, str(PROBE), "pub", topic, str(SENT), str(HZ)], env=env,
                             capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr[-2000:]
    result: dict[str, int] = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["matched"] == 1 and result["sent"] == SENT, result
    return result


def test_reliable_writer_does_not_wake_its_event_thread_per_sample(ros_domain, tmp_path):
    env = ros_domain.env()
    shipped = Path(env["FASTDDS_DEFAULT_PROFILES_FILE"])
    text = shipped.read_text()
    assert "<data_writer" in text, "the shipped profile has no writer section"
    bare = tmp_path / "no_writer_section.xml"
    bare.write_text(re.sub(r"<data_writer .*?</data_writer>", "", text, flags=re.S))

    with_profile = wakes(env, tmp_path, "/probe/timers_shipped")
    without = wakes({**env, "FASTDDS_DEFAULT_PROFILES_FILE": str(bare),
                     "FASTRTPS_DEFAULT_PROFILES_FILE": str(bare)}, tmp_path, "/probe/timers_bare")

    # Fast DDS's default: more than one event-thread wake-up per sample and reliable reader (~780 for
    # 300 samples here); the shipped profile: ~10 a second from this writer plus the participant's own
    # periodic events (~60 in these 3 s).
    assert without["event_thread_wakes"] >= 1.0 * SENT, (with_profile, without)
    assert with_profile["event_thread_wakes"] <= 0.4 * SENT, (with_profile, without)
