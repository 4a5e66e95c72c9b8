"""No reply, help, usage or refusal in the code spells an option the old way: every string
literal of services/, commands/ and bot/ (an f-string's literal parts joined, so a name
split by a placeholder is still read) is checked; the outputs of commands across the
profiles and presets are checked too (tests/integration/test_retired_flags.py)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.retired_flags import retired

ROOT = Path(__file__).resolve().parents[2]


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of docstring nodes: what the code says to its reader, not to a person."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def literals(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = _docstrings(tree)
    inner = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                inner.add(id(value))
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    parts.append(value.value)
                else:
                    parts.append("{}")
            yield node.lineno, "".join(parts)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skip
            and id(node) not in inner
        ):
            yield node.lineno, node.value


def test_the_scan_finds_each_retired_name() -> None:
    assert retired("select by --error or --type instead")
    assert retired("--error selects nothing on queue 'q'")
    assert retired("/queue dlq --reason")
    assert retired("--reason and --failure-reason are usage errors")
    assert retired("[--reason R]")
    assert not retired('/queue redrive --error-like "x" --job-type t --reason "why"')
    assert not retired("triage cannot select by --type")
    assert not retired("--type is now spelled --job-type (the old spelling still works)")


def test_no_string_in_the_code_spells_a_retired_option() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {hit}"
        for folder in ("services", "commands", "bot")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, text in literals(path)
        for hit in retired(text)
    ]
    assert not found, "\n".join(found)
