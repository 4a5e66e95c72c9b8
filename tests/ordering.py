"""Run order for a parallel run: the longest tests first, and the tests sharing a
module-scoped fixture together.

pytest-xdist hands tests to its workers in collection order and refills a worker when it
runs low, so a minute-long reliability test collected last would keep one worker busy
after the rest are done. This plugin (loaded by ``-p tests.ordering`` in pyproject's
addopts) moves the slow kinds to the front: the deployment tests (tests/deploy/; the image
test builds and runs the image, the longest module), then the reliability suite, then the
tests that run the real Prometheus and Alertmanager, then the other end-to-end tests and
the real queue systems (processes and subprocesses), then the integration tests; the unit
tests fill the gaps at the end. The order within each kind is kept, and no test depends on
running after another.

Under ``-n`` it also schedules: each test is a unit of work of its own, handed out in that
order, except that the tests sharing a module-scoped fixture of the suite (a ``serve`` with
its fakes, a demo database) are one unit, run one after another on one worker. A module's
fixture lives only while its worker runs that module's tests back to back: handed out one
by one, they met other modules' tests on every worker, and each time the fixture was torn
down and set up again (measured: the Slack stack started 8 times in a run and the Discord
stack 6, for two parameters each). xdist's own ``load`` (with ``--maxschedchunk 1``:
without it each worker starts on a run of about 80 consecutive tests, which gave all of
the long ones to the first worker) knows no units, and its ``loadgroup`` names a unit by
rewriting the test's id, which pytest 9 ignores; so this plugin gives xdist a scheduler
(``pytest_xdist_make_scheduler``): its ``loadscope`` one, with the units read from what
the workers collected (each writes its tests' units to a file the run's controller named).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

UNITS = "queuebot_units"  # the workerinput key: the folder the workers write their units to


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


def _shared(item: pytest.Item) -> str | None:
    """The unit of a test that uses a module-scoped fixture of the suite: its module and
    the values of the fixtures' parameters (one unit per set of values, as pytest makes
    one fixture per set); None for the others."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    shared = sorted(
        name
        for name, defs in info.name2fixturedefs.items()
        if any(d.scope in ("package", "module", "class") and d.baseid for d in defs)
    )
    if not shared:
        return None
    params: dict[str, Any] = getattr(getattr(item, "callspec", None), "params", {})
    return " ".join([item.nodeid.split("::")[0], *(str(params[n]) for n in shared if n in params)])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: each kind keeps its own order
    folder = getattr(config, "workerinput", {}).get(UNITS)
    if folder is not None:  # an xdist worker: tell the controller the units
        units = {item.nodeid: unit for item in items if (unit := _shared(item)) is not None}
        path = Path(folder) / f"{config.workerinput['workerid']}.json"  # type: ignore[attr-defined]
        path.with_suffix(".tmp").write_text(json.dumps(units))
        path.with_suffix(".tmp").replace(path)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput[UNITS] = _folder(node.config)


def _folder(config: pytest.Config) -> str:
    folder: str | None = getattr(config, "_queuebot_units", None)
    if folder is None:
        folder = tempfile.mkdtemp(prefix="queuebot-units-")
        config._queuebot_units = folder  # type: ignore[attr-defined]
    return folder


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = getattr(config, "_queuebot_units", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "load":
        return None  # another --dist asked for by name: xdist's own
    from xdist.scheduler import LoadScopeScheduling

    folder = Path(_folder(config))

    class Units(LoadScopeScheduling):  # type: ignore[misc]
        """xdist's loadscope, its units the ones the workers wrote, in collection order
        (``--no-loadscope-reorder``: not the largest first)."""

        _units: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._units is None:  # every worker collected (and wrote) before scheduling
                found = sorted(folder.glob("*.json"))
                self._units = json.loads(found[0].read_text()) if found else {}
            return self._units.get(nodeid, nodeid)

    config.option.loadscopereorder = False
    return Units(config, log)
