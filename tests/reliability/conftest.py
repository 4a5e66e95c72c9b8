"""The reliability suite's shared fixture: the figures file every test writes into, shown
again at the end of the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.reliability.harness import Figures

_files: list[Path] = []


@pytest.fixture(scope="session")
def figures(tmp_path_factory: pytest.TempPathFactory) -> Figures:
    path = tmp_path_factory.getbasetemp() / "reliability-figures.json"
    _files.append(path)
    return Figures(path)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """The figures of this run, without -s: they are what the suite measured. In a
    parallel run the tests ran in pytest-xdist's workers, each of which wrote the figures
    file under its own folder of this run's base temporary directory."""
    found = list(_files)
    if hasattr(config, "workerinput"):
        return  # a worker: the run's controller shows every worker's figures
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None and not _files:
        found = sorted(factory.getbasetemp().glob("*/reliability-figures.json"))
    for path in found:
        if path.exists():
            terminalreporter.section("reliability figures")
            terminalreporter.write_line(str(path))
            terminalreporter.write_line(json.dumps(json.loads(path.read_text()), indent=2))
