"""Run order for a parallel run: the longest tests first.

pytest-xdist hands tests to its workers in collection order and refills a worker when it
runs dry, so a minute-long reliability test collected last would keep one worker busy
after the rest are done. pyproject's addopts add ``--maxschedchunk 1``: without it xdist
starts each worker on a run of about 80 consecutive tests, which would give all of the
long ones below to the first worker (measured: one worker busy for 570 s, two idle after
280 s). This plugin (loaded by ``-p tests.ordering`` in pyproject's addopts) moves the
slow kinds to the front: the deployment tests (tests/deploy/; the image test builds and
runs the image, the longest module), then the reliability suite, then the tests that run
the real Prometheus and Alertmanager, then the other end-to-end tests and the real queue
systems (processes and subprocesses), then the integration tests; the unit tests fill the
gaps at the end. The order within each kind is kept, and no test depends on running after
another.
"""

from __future__ import annotations

import pytest


def _rank(item: pytest.Item) -> int:
    path = item.nodeid
    if path.startswith("tests/deploy/"):
        return -1
    if path.startswith("tests/reliability/") or item.get_closest_marker("slow"):
        return 0
    if item.get_closest_marker("alerting"):
        return 1
    if path.startswith(("tests/e2e/", "tests/systems/")):
        return 2
    if path.startswith("tests/integration/"):
        return 3
    return 4


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: each kind keeps its own order
