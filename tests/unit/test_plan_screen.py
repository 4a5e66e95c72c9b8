"""A plan's request names a bounded number of excluded jobs and sums up the rest, so a
freeze of a million rows keeps a bounded list, and still says how many were left out."""

from __future__ import annotations

from typing import Any

from services.changes.draft import nothing_to_do
from services.config import RedriveConfig
from services.estate.ops import Ineligible, Selector
from services.plans.preconditions import Screen
from tests.kinds import ChangeKind


def test_excluded_jobs_past_the_list_are_summed_up_by_check() -> None:
    ops: Any = object()
    screen = Screen(ops, RedriveConfig(), listed=3)
    screen.exclude(
        [Ineligible(f"j{n}", "already redriven 3 time(s)") for n in range(5)],
        "at the redrive limit",
    )
    screen.exclude([Ineligible("j9", "error classified permanent (x)")], "with a permanent error")
    summary = screen.summary()
    assert [i.id for i in summary] == ["j0", "j1", "j2", "3 more"]
    assert summary[-1].why == "not listed: 2 at the redrive limit, 1 with a permanent error"
    assert screen.count == 6


def test_nothing_to_do_counts_every_excluded_row_not_the_lines_listed() -> None:
    listed = [Ineligible(f"j{n}", "at the limit") for n in range(1000)]
    listed.append(Ineligible("4,000 more", "not listed: 4,000 at the redrive limit"))
    text = nothing_to_do(ChangeKind.PLAN, Selector(all_dead=True), listed, total=5000)
    assert "j0: at the limit" in text and "j9: at the limit" in text and "j10:" not in text
    assert text.endswith("(and 4,990 more))")
