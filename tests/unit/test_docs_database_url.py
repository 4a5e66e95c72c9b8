"""The docs never point a reader at QUEUEBOT_QUEUE_DATABASE_URL as the way to set queuebot
up: with the queue in another database than queuebot's tables every change is refused (a
change and its audit event commit in one transaction). Each paragraph that names it says
so; the setup points QUEUEBOT_DATABASE_URL at the queue's database."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
# what a paragraph naming the variable says of it: the queue is elsewhere, and so what
SAYS_WHAT_IT_MEANS = (
    "read-only",
    "refuse",
    "another database",
    "elsewhere",
    "different databases",
    "other database",
    "separate",
)


def test_every_mention_of_the_queue_database_url_says_what_it_turns_off() -> None:
    unsaid = [
        f"{path.relative_to(ROOT)}: {' '.join(paragraph.split())[:200]}"
        for path in DOCS
        for paragraph in re.split(r"\n\s*\n", path.read_text())
        if "QUEUEBOT_QUEUE_DATABASE_URL" in paragraph
        and not any(m in paragraph for m in SAYS_WHAT_IT_MEANS)
    ]
    assert not unsaid, "\n".join(unsaid)


def test_the_preset_setup_points_queuebot_at_the_systems_database() -> None:
    text = (ROOT / "docs" / "presets.md").read_text()
    setup = text.split("## Three lines", 1)[1].split("\n## ", 1)[0]
    assert "`QUEUEBOT_DATABASE_URL`" in setup, setup
    assert "QUEUEBOT_QUEUE_DATABASE_URL" not in setup, setup
