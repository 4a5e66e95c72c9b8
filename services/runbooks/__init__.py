"""Runbooks as data: Markdown for people, with a statement (JSON) queuebot checks and
uses. docs/runbooks.md describes the format, queuebot's additions and the rules."""

from services.runbooks.authority import queuebot_role
from services.runbooks.library import (
    RunbookLibrary,
    RunbookNotFound,
    library_for,
    runbook_folder,
    shipped_runbooks,
)
from services.runbooks.problems import Problem, RunbookInvalid
from services.runbooks.rules import QUEUEBOT_DEPENDENCIES, known_dependencies
from services.runbooks.runbook import Runbook, RunbookUnreadable, parse_runbook, read_runbook
from services.runbooks.statement import (
    CHECKS,
    PLACEHOLDERS,
    Authority,
    Communication,
    Secret,
    Statement,
    ValidationItem,
    fill_draft,
)

__all__ = [
    "CHECKS",
    "PLACEHOLDERS",
    "QUEUEBOT_DEPENDENCIES",
    "Authority",
    "Communication",
    "Problem",
    "Runbook",
    "RunbookInvalid",
    "RunbookLibrary",
    "RunbookNotFound",
    "RunbookUnreadable",
    "Secret",
    "Statement",
    "ValidationItem",
    "fill_draft",
    "known_dependencies",
    "library_for",
    "parse_runbook",
    "queuebot_role",
    "read_runbook",
    "runbook_folder",
    "shipped_runbooks",
]
