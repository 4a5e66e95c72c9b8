"""The repo speaks for itself: a maintainer or user has neither the product spec nor the
source runbooks, so code, help and replies say the rule in words instead of citing them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from bot.render_text import render_message
from commands import messages
from commands.catalog import CATALOG
from tests.helpers import launch

ROOT = Path(__file__).resolve().parents[2]
CITATION = re.compile(r"SPEC\s*§|\bseed\s+00\d|§")
SOURCES = ("services", "commands", "bot", "bench", "testkit")


def test_no_code_outside_tests_cites_the_spec_or_a_seed() -> None:
    cited = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for folder in SOURCES
        for path in sorted((ROOT / folder).rglob("*"))
        if path.suffix in (".py", ".sql", ".md", ".toml", ".yml")
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if CITATION.search(line)
    ]
    assert cited == []


def test_no_help_text_cites_the_spec_or_a_seed() -> None:
    shown = [render_message(messages.help_reply(None).message)]
    shown += [
        render_message(messages.help_reply(spec.name, spec.group).message) for spec in CATALOG
    ]
    for args in (["--help"], *([name, "--help"] for name in ("serve", "demo", "console"))):
        run = launch.run(
            [sys.executable, "-m", "bot.cli", *args],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )
        shown.append(run.stdout + run.stderr)
    cited = [text for text in shown if CITATION.search(text)]
    assert cited == []
    assert "usage: queuebot" in shown[-4]
