"""A free TCP port on 127.0.0.1, for a server a test or a benchmark starts.

The port is only asked of the system, not reserved: another process may bind it before the
server does (serve's tests retry on "in use")."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
