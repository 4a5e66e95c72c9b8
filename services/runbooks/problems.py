"""What is wrong with a runbook: each problem says where (a JSON path into the statement,
or a line of the file) and what, in words a person can act on."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from services.errors import ConfigError

Path = tuple[str | int, ...]


def json_path(path: Path) -> str:
    """``("communications", 1, "withinMs")`` -> ``communications[1].withinMs``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def shown(value: object, limit: int = 60) -> str:
    """A value as the statement spells it (JSON), cut short."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Problem:
    """One thing wrong: at ``path`` inside the statement, or at ``line`` (and ``column``)
    of the file when the statement could not be read as JSON at all."""

    message: str
    path: Path = ()
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        if self.path:
            return f"{json_path(self.path)}: {self.message}"
        if self.line is not None:
            where = f"line {self.line}" + (f", column {self.column}" if self.column else "")
            return f"{where}: {self.message}"
        return self.message


class RunbookInvalid(ConfigError):
    """A runbook file that is not a valid runbook: every problem, one line each, each
    line starting with the file's name."""

    def __init__(self, source: str, problems: Sequence[Problem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        super().__init__("\n".join(f"{source}: {p}" for p in self.problems))
