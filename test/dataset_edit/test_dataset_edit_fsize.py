"""piper-dataset under a file-size limit (``ulimit -f``): the message is for a command-line user
(#21 item 11). It told them to "retry save_episode() or discard_episode()", the recorder API's words.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.lerobot_fixtures import small_root

pytestmark = pytest.mark.integration


def test_a_file_size_limit_reads_as_one_and_names_no_recorder_api(tmp_path: Path):
    a = small_root(tmp_path / "a", lengths=(60, 50))
    b = tmp_path / "b"
    shutil.copytree(a, b)
    limit = 12 * 1024  # below one episode's parquet (~15 kB): the first import hits it

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    exe = Path(sys.executable).parent / "piper-dataset"
    p = subprocess.run(
        [str(exe), "merge", str(a), str(b), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=cap,
    )
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and "save_episode()" not in p.stderr, p.stderr
    assert "file-size limit (ulimit -f)" in p.stderr and "run the command again" in p.stderr, p.stderr
