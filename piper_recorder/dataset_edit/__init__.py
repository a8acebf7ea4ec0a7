"""Dataset editing (``piper-dataset merge|split|delete|retask``) for LeRobot v2.0/v2.1 roots and RGB-D HDF5 files.

``ops`` holds the operations, ``common`` how outputs are committed.
"""

from .common import EditError, Pick
from .ops import Result, delete, merge, retask, retype, split

__all__ = ["EditError", "Pick", "Result", "delete", "merge", "retask", "retype", "split"]
