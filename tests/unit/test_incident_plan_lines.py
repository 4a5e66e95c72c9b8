"""A plan's waves as an incident's timeline shows them: three or more clean waves in a row
are one line, unless something happened to the plan in between; the sample and a wave
with deaths keep lines of their own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.incidents.plan_events import wave_lines
from services.plans.model import Wave, WaveOutcome

START = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def wave(number: int, *, redead: int = 0) -> Wave:
    started = START + timedelta(minutes=number)
    return Wave(
        number=number,
        size=10,
        started_at=started,
        changed=10,
        finished_at=started + timedelta(seconds=30),
        succeeded=10 - redead,
        redead=redead,
        outcome=WaveOutcome.OK if not redead else WaveOutcome.HALTED,
    )


def texts(waves: list[Wave], events: list[datetime] | None = None) -> list[str]:
    return [entry.text for _, entry in wave_lines("P-1", 50, waves, events or [])]


def test_clean_waves_in_a_row_are_one_line_after_the_samples_own() -> None:
    assert texts([wave(0), wave(1), wave(2), wave(3), wave(4)]) == [
        "P-1 sample started: 10 job(s) redriven, of 50 in the plan",
        "P-1 sample finished: 10 succeeded, 0 died again",
        "P-1 waves 1-4 ran: 40 job(s) redriven, 40 succeeded, none died again (the last "
        "finished at 03:04:30 UTC)",
    ]


def test_a_halt_between_waves_and_a_wave_with_deaths_break_the_run() -> None:
    halted = START + timedelta(minutes=2, seconds=45)  # by hand, after wave 2 finished
    lines = texts([wave(1), wave(2), wave(3), wave(4), wave(5, redead=1)], [halted])
    assert lines == [
        "P-1 wave 1 started: 10 job(s) redriven",
        "P-1 wave 1 finished: 10 succeeded, 0 died again",
        "P-1 wave 2 started: 10 job(s) redriven",
        "P-1 wave 2 finished: 10 succeeded, 0 died again",
        "P-1 wave 3 started: 10 job(s) redriven",
        "P-1 wave 3 finished: 10 succeeded, 0 died again",
        "P-1 wave 4 started: 10 job(s) redriven",
        "P-1 wave 4 finished: 10 succeeded, 0 died again",
        "P-1 wave 5 started: 10 job(s) redriven",
        "P-1 wave 5 finished: 9 succeeded, 1 died again",
    ]


def test_a_wave_whose_jobs_left_the_table_unknown_keeps_its_own_line_saying_so() -> None:
    # an OK outcome with unknowns would not be written, but the count alone breaks the run
    gone = wave(3).model_copy(update={"succeeded": 8, "unknown": 2})
    lines = texts([wave(1), wave(2), gone, wave(4), wave(5), wave(6)])
    assert (
        "P-1 wave 3 finished: 8 succeeded, 0 died again, 2 left the table with their outcome "
        "unknown"
    ) in lines
    assert lines[-1].startswith("P-1 waves 4-6 ran: 30 job(s) redriven, 30 succeeded")
    assert not any(line.startswith("P-1 waves 1-") for line in lines)
