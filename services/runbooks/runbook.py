"""A runbook as queuebot uses it: the validated statement, the file's title and where
it came from, with what declaring an incident needs from it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from services.errors import ConfigError
from services.runbooks.markdown import read_markdown
from services.runbooks.problems import Problem, RunbookInvalid
from services.runbooks.statement import Communication, Statement, ValidationItem
from services.runbooks.validate import validate_statement


class RunbookUnreadable(ConfigError):
    """The file could not be read at all (missing, a folder, no permission)."""


@dataclass(frozen=True)
class Runbook:
    statement: Statement
    title: str  # the file's first heading (less a closing "(scenario)"), else the id
    source: str  # the file it was read from (a shipped one: "shipped/NAME.md")
    shipped: bool = False

    @property
    def id(self) -> str:
        return self.statement.id

    @property
    def scenario_id(self) -> str:
        return self.statement.scenario_id

    @property
    def version(self) -> str:
        return self.statement.version

    @property
    def declaration_role(self) -> str:
        """The role that may declare this scenario, as the runbook names it; [roles] maps
        it to a queuebot role."""
        return self.statement.declaration_authority.role

    @property
    def declaration_name(self) -> str:
        """Who holds the declaration authority, as the runbook names them ("operations
        duty officer on shift"); a rota of that name under [rotas] is who holds it."""
        return self.statement.declaration_authority.name

    @property
    def detection_role(self) -> str:
        return self.statement.detection_authority.role

    @property
    def communications(self) -> tuple[Communication, ...]:
        """Who is told what, over which channel, and within how long (``within``)."""
        return tuple(self.statement.communications)

    @property
    def restore_order(self) -> tuple[str, ...]:
        return tuple(self.statement.restore_order)

    @property
    def blocks_redrives_until(self) -> str | None:
        """The restore step an open incident of this runbook holds redrives on its queue
        until (marked done, they may run again); None: it holds none."""
        return self.statement.blocks_redrives_until

    @property
    def validation(self) -> tuple[ValidationItem, ...]:
        return tuple(self.statement.validation)


def parse_runbook(text: str, *, source: str, shipped: bool = False) -> Runbook:
    """The runbook in ``text``; raise ``RunbookInvalid`` with every problem found."""
    found = read_markdown(text)
    problems = list(found.problems)
    statement: Statement | None = None
    if found.data is not None or not problems:
        statement, more = validate_statement(found.data)
        problems += more
    if problems or statement is None:
        raise RunbookInvalid(source, problems)
    title = (found.title or "").removesuffix(f"({statement.scenario_id})").strip()
    return Runbook(statement, title or statement.id, source, shipped)


def read_runbook(path: Path, *, source: str | None = None, shipped: bool = False) -> Runbook:
    """The runbook in the file at ``path``; ``RunbookUnreadable`` when it cannot be read,
    ``RunbookInvalid`` when it is not a valid runbook."""
    name = source or str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RunbookUnreadable(f"{name}: cannot read it: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RunbookInvalid(name, [Problem("is not UTF-8 text")]) from exc
    return parse_runbook(text, source=name, shipped=shipped)
