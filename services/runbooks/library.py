"""The runbooks a queuebot process knows: the ones it ships, then the Markdown files of
the folder named by ``[runbooks] dir``. A folder runbook whose scenario is a shipped
one's replaces it; two runbooks of one scenario (or one id) in the folder are refused.
A bad file is refused with every problem of every file, one line each."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path

from services.config import Config
from services.config.alerts import AlertsConfig
from services.errors import ConfigError, NotFound
from services.runbooks.problems import RunbookInvalid
from services.runbooks.runbook import Runbook, RunbookUnreadable, parse_runbook, read_runbook

SHIPPED = "shipped"


class RunbookNotFound(NotFound):
    def __init__(self, scenario_id: str, known: Sequence[str]) -> None:
        super().__init__(
            f"no runbook for scenario {scenario_id!r}; known scenarios: "
            f"{', '.join(known) or 'none'}"
        )
        self.scenario_id = scenario_id
        self.known = tuple(known)


def shipped_runbooks() -> list[Runbook]:
    """The runbooks installed with queuebot (package data), by file name."""
    folder = resources.files("services.runbooks").joinpath(SHIPPED)
    entries = sorted((e for e in folder.iterdir() if e.name.endswith(".md")), key=lambda e: e.name)
    return [
        parse_runbook(e.read_text("utf-8"), source=f"{SHIPPED}/{e.name}", shipped=True)
        for e in entries
    ]


def markdown_files(folder: Path) -> list[Path]:
    """The runbook files of a folder: its ``*.md`` files (not those of sub-folders)."""
    return sorted(p for p in folder.iterdir() if p.suffix == ".md" and not p.is_dir())


def read_all(paths: Iterable[Path]) -> tuple[list[Runbook], list[str]]:
    """Every runbook that reads cleanly, and one line per problem of the others."""
    runbooks: list[Runbook] = []
    problems: list[str] = []
    for path in paths:
        try:
            runbooks.append(read_runbook(path))
        except (RunbookInvalid, RunbookUnreadable) as exc:
            problems.extend(exc.message.splitlines())
    return runbooks, problems


def clashes(runbooks: Sequence[Runbook]) -> list[str]:
    """One line per runbook whose scenario or id an earlier one already has."""
    lines: list[str] = []
    for label, key in (("scenarioId", "scenario_id"), ("id", "id")):
        first: dict[str, Runbook] = {}
        for runbook in runbooks:
            value = getattr(runbook, key)
            if value in first:
                lines.append(
                    f"{runbook.source}: {label}: {value!r} is already the {label} of "
                    f"{first[value].source}; one runbook per {label}"
                )
            else:
                first[value] = runbook
    return lines


class RunbookLibrary:
    """Runbooks by scenario. ``replaced`` names the shipped runbooks a folder's took the
    place of, as (folder runbook, shipped runbook)."""

    def __init__(
        self, runbooks: Sequence[Runbook], *, replaced: Sequence[tuple[Runbook, Runbook]] = ()
    ) -> None:
        problems = clashes(runbooks)
        if problems:
            raise ConfigError("\n".join(problems))
        self._by_scenario = {r.scenario_id: r for r in runbooks}
        self.replaced = tuple(replaced)

    @classmethod
    def load(cls, folder: Path | None = None) -> RunbookLibrary:
        """The shipped runbooks, and those of ``folder`` in their place where a scenario
        is in both; ``ConfigError`` with every problem when a file is not a runbook."""
        shipped = shipped_runbooks()
        if folder is None:
            return cls(shipped)
        if not folder.is_dir():
            raise ConfigError(f"[runbooks] dir: {folder} is not a folder")
        own, problems = read_all(markdown_files(folder))
        problems += clashes(own)
        if problems:
            raise ConfigError("\n".join(problems))
        theirs = {r.scenario_id for r in own}
        replaced = [
            (next(r for r in own if r.scenario_id == s.scenario_id), s)
            for s in shipped
            if s.scenario_id in theirs
        ]
        kept = [s for s in shipped if s.scenario_id not in theirs]
        return cls([*kept, *own], replaced=replaced)

    def all(self) -> list[Runbook]:
        return [self._by_scenario[s] for s in self.scenario_ids()]

    def scenario_ids(self) -> list[str]:
        return sorted(self._by_scenario)

    def get(self, scenario_id: str) -> Runbook:
        try:
            return self._by_scenario[scenario_id]
        except KeyError:
            raise RunbookNotFound(scenario_id, self.scenario_ids()) from None

    def check_routes(self, alerts: AlertsConfig) -> None:
        """Every alert route's ``scenario`` names a runbook here."""
        bad = [
            f"alerts.routes.{n} ({route.name}): scenario {route.scenario!r} has no runbook "
            f"(known: {', '.join(self.scenario_ids())})"
            for n, route in enumerate(alerts.routes)
            if route.scenario is not None and route.scenario not in self._by_scenario
        ]
        if bad:
            raise ConfigError("\n".join(bad))


def runbook_folder(config: Config) -> Path | None:
    """``[runbooks] dir``; a relative one is taken from the configuration file's folder."""
    raw = config.file.runbooks.dir
    if raw is None:
        return None
    path = Path(raw).expanduser()
    if not path.is_absolute() and config.source is not None:
        path = config.source.parent / path
    return path


def library_for(config: Config) -> RunbookLibrary:
    """The library a process with this configuration uses."""
    library = RunbookLibrary.load(runbook_folder(config))
    library.check_routes(config.file.alerts)
    return library
