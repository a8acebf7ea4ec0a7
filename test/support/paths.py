"""Where the checkout is, stated once for the whole test tree: the repository root, the test folder and this
helper package. A test module takes its paths from here, so it reads the same ones from whichever folder of
the test tree it sits in, and moving it changes nothing.
"""

from __future__ import annotations

from pathlib import Path

SUPPORT_DIR = Path(__file__).resolve().parent
TEST_DIR = SUPPORT_DIR.parent
ROOT = TEST_DIR.parent
