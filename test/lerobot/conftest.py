"""Fixtures of the consumer tests of this folder."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory) -> Path:
    """A hermetic Hugging Face cache for the consumers of one test module."""
    return tmp_path_factory.mktemp("hf_home")
