"""Ending the processes a test started: asked to stop, then killed if they do not in time."""

from __future__ import annotations

import subprocess


def stop(*procs: subprocess.Popen[bytes], timeout: float = 10) -> None:
    """SIGTERM to each still running, and SIGKILL where it has not ended within
    ``timeout`` seconds."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
