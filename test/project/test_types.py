"""The type checker is part of the suite: mypy with the project's configuration (pyproject.toml,
[tool.mypy]: check_untyped_defs and disallow_untyped_defs everywhere, bag.run excepted until its rewrite
is merged) passes on piper_recorder and rgbd_writer, so loosely typed seams (``Any`` hand-offs, Optional
misuse) are caught when they are written.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.paths import ROOT

pytestmark = pytest.mark.integration


def test_mypy_passes():
    p = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True, text=True, timeout=280
    )
    assert p.returncode == 0, f"mypy found problems:\n{p.stdout}{p.stderr}"
