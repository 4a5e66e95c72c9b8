"""What a plan's message says about where the plan is (services/plans/messages.py)."""

from __future__ import annotations

from bot.render_text import render_message
from services.plans.messages import plan_message
from services.plans.model import PlanState, PlanView, Wave, WaveOutcome
from tests.helpers.plans import AT, plan_view


def plan(
    state: PlanState, waves: list[Wave], schedule: list[int], rolled_back: int = 0
) -> PlanView:
    return plan_view(state, waves, schedule, rolled_back=rolled_back)


def status_line(view: PlanView) -> str:
    return next(line for line in render_message(plan_message(view)).splitlines() if "now:" in line)


def test_the_status_line_names_the_wave_and_its_size_not_the_schedule_length() -> None:
    sample = Wave(number=0, size=2, changed=2, started_at=AT)
    line = status_line(plan(PlanState.RUNNING, [sample], [2, 10, 2]))
    assert "now: sample (2 jobs) running, wave 1 of 2 (10 jobs) next" in line
    assert "of 3" not in line

    finished = sample.model_copy(update={"outcome": WaveOutcome.OK, "succeeded": 2})
    wave1 = Wave(number=1, size=10, changed=10, started_at=AT)
    line = status_line(plan(PlanState.RUNNING, [finished, wave1], [2, 10, 2]))
    assert "now: wave 1 of 2 (10 jobs) running, wave 2 of 2 (2 jobs) next" in line

    last = Wave(number=2, size=2, changed=2, started_at=AT)
    line = status_line(plan(PlanState.RUNNING, [finished, wave1, last], [2, 10, 2]))
    assert "now: wave 2 of 2 (2 jobs) running, the last wave" in line

    one = Wave(number=0, size=1, changed=1, started_at=AT, outcome=WaveOutcome.OK, succeeded=1)
    assert "now: done: the sample and 2 wave(s) finished" in status_line(
        plan(PlanState.COMPLETED, [one, wave1, last], [1, 10, 2])
    )
    assert "now: sample (1 job) finished, wave 1 of 1 (4 jobs) next" in status_line(
        plan(PlanState.RUNNING, [one], [1, 4])
    )


def test_a_halted_plan_says_where_it_stopped_and_what_has_not_started() -> None:
    sample = Wave(number=0, size=2, changed=2, started_at=AT, outcome=WaveOutcome.OK)
    wave1 = Wave(
        number=1, size=10, changed=10, started_at=AT, finished_at=AT, outcome=WaveOutcome.HALTED
    )
    line = status_line(plan(PlanState.HALTED, [sample, wave1], [2, 10, 2]))
    assert "now: halted in wave 1 of 2 (10 jobs); wave 2 of 2 (2 jobs) has not started" in line
    out = wave1.model_copy(update={"finished_at": None})
    line = status_line(plan(PlanState.HALTED, [sample, out], [2, 10, 2]))
    assert (
        "now: halted in wave 1 of 2 (10 jobs); its rows still out are counted as they finish; "
        "wave 2 of 2 (2 jobs) has not started"
    ) in line


def test_a_completed_plan_with_jobs_dead_again_says_how_many_and_how_to_redrive_them() -> None:
    sample = Wave(number=0, size=5, changed=5, started_at=AT, finished_at=AT, succeeded=3, redead=2)
    wave1 = Wave(number=1, size=10, changed=10, started_at=AT, finished_at=AT, succeeded=10)
    done = plan(PlanState.COMPLETED, [sample, wave1], [5, 10])
    line = status_line(done)
    assert (
        "now: done: the sample and 1 wave(s) finished; 13 succeeded, 2 died again: redrive "
        'them with /queue redrive --from-plan P-1 --reason "..."'
    ) in line

    clean = sample.model_copy(update={"succeeded": 5, "redead": 0})
    line = status_line(plan(PlanState.COMPLETED, [clean, wave1], [5, 10]))
    assert line.endswith("now: done: the sample and 1 wave(s) finished")
    assert "--from-plan" not in line
