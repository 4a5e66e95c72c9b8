"""The wave schedule of a staged redrive (services/plans/model.py ``wave_sizes``)."""

from __future__ import annotations

from services.plans.model import wave_sizes


def test_a_last_wave_of_one_is_folded_into_the_wave_before() -> None:
    assert wave_sizes(74, sample=3, first=10, cap=1000) == [3, 10, 20, 41]


def test_other_schedules_are_unchanged() -> None:
    assert wave_sizes(73, sample=3, first=10, cap=1000) == [3, 10, 20, 40]
    assert wave_sizes(75, sample=3, first=10, cap=1000) == [3, 10, 20, 40, 2]
    assert wave_sizes(200, sample=5, first=10, cap=1000) == [5, 10, 20, 40, 80, 45]
    assert wave_sizes(8, sample=1, first=10, cap=1000) == [1, 7]
    assert wave_sizes(1, sample=5, first=10, cap=1000) == [1]


def test_the_sample_keeps_its_size() -> None:
    """A plan of the sample and one row more: the sample is the size asked for, the row
    after it a wave of its own (the sample is what a person chose to watch first)."""
    assert wave_sizes(6, sample=5, first=10, cap=1000) == [5, 1]


def test_the_fold_may_pass_the_cap_by_one() -> None:
    assert wave_sizes(2 + 10 + 10 + 1, sample=2, first=10, cap=10) == [2, 10, 11]
