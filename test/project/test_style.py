"""The linter and the formatter are part of the suite: ``ruff check`` (the families and the shrinking
per-file docstring ignores of pyproject.toml) and ``ruff format --check`` pass on the whole tree.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import ROOT

pytestmark = pytest.mark.integration

RUFF = Path(sys.executable).with_name("ruff")


@pytest.mark.parametrize(
    "args", [["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]], ids=["check", "format"]
)
def test_ruff_passes(args):
    p = subprocess.run([str(RUFF), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"ruff {args[0]} found problems:\n{p.stdout[-6000:]}{p.stderr[-2000:]}"
