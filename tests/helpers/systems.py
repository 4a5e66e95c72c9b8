"""Whether a real queue system's runtime is here (testkit/systems): a test that needs one
is skipped where it is missing, unless ``QUEUEBOT_REQUIRE_SYSTEMS=1`` (CI), where that
fails the test."""

from __future__ import annotations

import os

import pytest

from testkit.systems import System, all_systems, systems_available

REQUIRE = os.environ.get("QUEUEBOT_REQUIRE_SYSTEMS") == "1"


def need_system(name: str) -> None:
    """Skip (or, where systems are required, fail) unless the system ``name`` can run here."""
    why = systems_available()[name]
    if why:
        if REQUIRE:
            pytest.fail(f"{name} is required (QUEUEBOT_REQUIRE_SYSTEMS=1) but cannot run: {why}")
        pytest.skip(f"{name} cannot run here: {why}")


def real_system(name: str) -> System:
    """The system ``name`` of testkit/systems, once ``need_system`` lets it run here."""
    need_system(name)
    return next(s for s in all_systems() if s.name == name)
