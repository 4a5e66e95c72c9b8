"""A statement's JSON to a ``Statement``, or every problem with it, each at its JSON path
and in words (pydantic's own messages are translated, so they read the same as the
rules' messages)."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from services.runbooks.problems import Path, Problem, shown
from services.runbooks.rules import rule_problems
from services.runbooks.statement import NULLABLE_HINTS, PARTS, Statement

_GOT = {
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "list_type": "must be a list",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "dict_type": "must be an object",
}


def validate_statement(data: Any) -> tuple[Statement | None, list[Problem]]:
    """The statement, or None and every problem found: the fields' own, then the rules
    between fields (checked as far as the fields they need are well formed)."""
    if not isinstance(data, dict):
        return None, [Problem(f"the statement must be a JSON object, got {shown(data)}")]
    statement: Statement | None = None
    problems: list[Problem] = []
    try:
        statement = Statement.model_validate(data)
    except ValidationError as exc:
        problems = [_problem(err) for err in exc.errors(include_url=False)]
    problems += rule_problems(data)
    return (statement if not problems else None), problems


def _problem(err: ErrorDetails) -> Problem:
    path: Path = tuple(err["loc"])
    kind, value = err["type"], err.get("input")
    if kind == "missing":
        hint = NULLABLE_HINTS.get(str(path[-1])) if path else None
        return Problem("is required" + (f": {hint}" if hint else ""), path)
    if kind == "extra_forbidden":
        return Problem(_unknown_field(path), path)
    if kind in _GOT:
        return Problem(f"{_GOT[kind]}, got {shown(value)}", path)
    if kind == "too_short":
        return Problem("must hold at least one item", path)
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        return Problem(f"must be {expected} (or left out), got {shown(value)}", path)
    if kind == "string_too_long":
        limit = err.get("ctx", {}).get("max_length")
        return Problem(f"must be at most {limit} characters", path)
    message = str(err["msg"]).removeprefix("Value error, ")
    return Problem(message, path)


def _unknown_field(path: Path) -> str:
    name = str(path[-1])
    parent = path[:-1]
    model = PARTS.get(str(parent[0])) if parent else Statement
    if model is None:
        return "unknown field"
    names = [str(f.alias) for f in model.model_fields.values()]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    if close:
        return f"unknown field; did you mean {close[0]}?"
    return f"unknown field (fields here: {', '.join(names)})"
