"""Durable file I/O shared by every writer and tool.

Fsync'd and atomic writes (``durable``), where an output may go (``outpaths``) and the lock file beside an
output that keeps two tools off it (``sidelock``).
"""
