"""The benchmarks use queuebot's public names only, and nothing from the tests: what they
share with the tests lives in testkit/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCH = sorted((Path(__file__).resolve().parents[2] / "bench").glob("*.py"))
OURS = ("bot", "commands", "services", "testkit", "tests")


@pytest.mark.parametrize("script", BENCH, ids=lambda p: p.name)
def test_bench_imports_public_names_only(script: Path) -> None:
    wrong = []
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            root = node.module.split(".")[0]
            if root not in OURS:
                continue
            if root == "tests" or any(part.startswith("_") for part in node.module.split(".")):
                wrong.append(node.module)
            wrong += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            wrong += [a.name for a in node.names if a.name.split(".")[0] == "tests"]
    assert wrong == []
