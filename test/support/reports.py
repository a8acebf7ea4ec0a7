"""Reading the JSON report a process of the graph under test rewrites while the test polls it (the sim
headset's, the web relay's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_report(path: Path) -> dict[str, Any]:
    """The report, or {} while it is not written yet or is half written."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
