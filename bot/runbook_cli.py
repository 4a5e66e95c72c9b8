"""``queuebot runbook check [FILE...]``: check runbook files before they are deployed.

Each runbook that holds gets one ``ok`` line on stdout (its id, scenario, version and who
is told what within how long); each problem of one that does not gets a line on stderr,
``FILE: PATH: what is wrong``. A FILE may be a folder: its ``*.md`` files. With no FILE,
the library the configuration loads is checked: the shipped runbooks and those of
``[runbooks] dir`` (with which shipped ones they replace, and that every alert route's
``scenario`` has a runbook). ``check`` says whether everything held; a file that cannot
be read at all raises ``ConfigError`` (a usage error: exit 2).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from services.config import Config
from services.errors import ConfigError
from services.runbooks import (
    Runbook,
    RunbookInvalid,
    RunbookLibrary,
    read_runbook,
    runbook_folder,
    shipped_runbooks,
)
from services.runbooks.library import clashes, markdown_files


def ok_line(runbook: Runbook) -> str:
    told = ", ".join(f"{c.audience} within {c.window}" for c in runbook.communications)
    return (
        f"ok {runbook.source}: {runbook.id} (scenario {runbook.scenario_id}, "
        f"version {runbook.version}): {told}"
    )


def check(files: Sequence[Path], config: Callable[[], Config]) -> bool:
    """Check ``files`` (or, with none, the configured library); True when all hold."""
    if files:
        return _report(_expand(files))
    loaded = config()
    folder = runbook_folder(loaded)
    paths: list[Path] = []
    if folder is not None:
        if not folder.is_dir():
            raise ConfigError(f"[runbooks] dir: {folder} is not a folder")
        paths = markdown_files(folder)
    return _report(paths, shipped=shipped_runbooks(), config=loaded)


def _expand(files: Sequence[Path]) -> list[Path]:
    paths: list[Path] = []
    for path in files:
        if path.is_dir():
            found = markdown_files(path)
            if not found:
                raise ConfigError(f"{path}: no runbook files (*.md) in this folder")
            paths.extend(found)
        elif not path.exists():
            raise ConfigError(f"{path}: no such file")
        else:
            paths.append(path)
    return paths


def _report(
    paths: Sequence[Path], *, shipped: Sequence[Runbook] = (), config: Config | None = None
) -> bool:
    problems: list[str] = []
    own: list[Runbook] = []
    for runbook in shipped:
        print(ok_line(runbook))
    for path in paths:
        try:
            runbook = read_runbook(path)
        except RunbookInvalid as exc:
            problems.extend(exc.message.splitlines())
            continue
        own.append(runbook)
        print(ok_line(runbook))
    problems += clashes(own)
    theirs = {r.scenario_id: r for r in own}
    for runbook in shipped:
        if runbook.scenario_id in theirs:
            print(
                f"{theirs[runbook.scenario_id].source} replaces the shipped runbook of "
                f"{runbook.scenario_id} ({runbook.source})"
            )
    if config is not None and not problems:
        kept = [r for r in shipped if r.scenario_id not in theirs]
        try:
            RunbookLibrary([*kept, *own]).check_routes(config.file.alerts)
        except ConfigError as exc:
            problems.extend(exc.message.splitlines())
    for line in problems:
        print(line, file=sys.stderr)
    total = len(shipped) + len(paths)
    broken = len(paths) - len(own)
    if problems:
        said = f"{broken} of {total} runbook(s) broken" if broken else f"{len(problems)} problem(s)"
        print(f"runbook check: {said}", file=sys.stderr)
        return False
    print(f"runbook check: {total} runbook(s) ok")
    return True
