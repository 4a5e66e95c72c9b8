"""A free TCP port on the loopback interface, for a process started on it.

It imports nothing from queuebot, so the tests and the benchmarks share it.
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now. It is only asked for, not reserved: a process
    started on it may find it taken by another that asked at the same time."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
