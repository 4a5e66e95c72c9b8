"""The rule a staged redrive settles a job whose row left the table by, on every shipped
profile: succeeded where the system deletes only the jobs that succeeded (graphile-worker,
Que: a fact, which no setting changes), or where the queue's ``deleted_jobs`` says so;
unknown anywhere else. And what a plan and ``config check`` say of it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.render_text import render_message
from services.config import QueueConfig, parse_file_config
from services.errors import ConfigError
from services.estate.profile import QueueProfile
from services.estate.registry import shipped_profiles
from services.estate.tally import WaveTally
from services.plans.messages import plan_message, wave_finished
from services.plans.model import PlanState, PlanView, Wave, WaveOutcome
from services.plans.settle import completed_words, finished
from tests.helpers.plans import plan_view

AT = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
REGISTRY = shipped_profiles()
PROFILES = [*REGISTRY.names, *REGISTRY.presets]
FIXED = {"graphile-worker": "graphile-worker", "que": "Que"}  # delete only successes


def profile(name: str, **options: str) -> QueueProfile:
    """The queue ``mail`` read through ``name``, as queuebot.toml would configure it."""
    kind = "preset" if name in REGISTRY.presets else "profile"
    file = parse_file_config({"queues": {"mail": {kind: name, **options}}}, where="queuebot.toml")
    config = file.queues["mail"]
    return REGISTRY.get(name, preset=kind == "preset")("mail", config)


def settled(p: QueueProfile) -> tuple[list[str], list[str], list[str]]:
    """A wave of three jobs: one dead again, one whose row is gone, one still waiting to
    run; (dead again, succeeded, unknown) as the tally reports them."""
    dead = p.statuses_in(*p.dead_letter_states)[0]
    tally = WaveTally(p)
    tally.add("1", dead, "boom")
    waiting = next(s for s, state in p.states.items() if state.value == "pending")
    tally.add("3", waiting, None)
    status = tally.status(jobs=["1", "2", "3"])
    assert status.open_jobs == ["3"]
    return [j for j, _ in status.redead], status.succeeded, status.unknown


@pytest.mark.parametrize("name", PROFILES)
def test_a_job_gone_from_the_table_succeeded_only_where_the_system_deletes_only_successes(
    name: str,
) -> None:
    redead, succeeded, unknown = settled(profile(name))
    assert redead == ["1"]  # a row still there is judged by its state, wherever
    if name in FIXED:
        assert (succeeded, unknown) == (["2"], [])
    else:
        assert (succeeded, unknown) == ([], ["2"])


@pytest.mark.parametrize("name", [n for n in PROFILES if n not in FIXED])
def test_the_queue_says_whether_its_gone_jobs_succeeded_where_its_workers_decide(
    name: str,
) -> None:
    assert settled(profile(name, deleted_jobs="succeeded"))[1:] == (["2"], [])
    assert settled(profile(name, deleted_jobs="unknown"))[1:] == ([], ["2"])


@pytest.mark.parametrize("name", sorted(FIXED))
def test_a_fact_of_the_system_cannot_be_configured(name: str) -> None:
    for value in ("succeeded", "unknown"):
        with pytest.raises(ConfigError) as raised:
            profile(name, deleted_jobs=value)
        assert str(raised.value) == (
            f"queuebot.toml: queues.mail.deleted_jobs: queue 'mail' ({FIXED[name]}) needs no "
            f"deleted_jobs: {FIXED[name]} deletes a job only when it succeeds, so a job that "
            "left its table succeeded; remove the key"
        )


def test_a_value_that_is_neither_is_refused_saying_what_each_means() -> None:
    with pytest.raises(ConfigError) as raised:
        profile("procrastinate", deleted_jobs="always")
    assert str(raised.value) == (
        "queuebot.toml: queues.mail.deleted_jobs = 'always': expected \"succeeded\" (this "
        'queue\'s workers delete a job only when it succeeded) or "unknown" (they may delete '
        "failed jobs too: a plan halts on a job that left the table)"
    )
    assert QueueConfig(preset="procrastinate").deleted_jobs is None  # unset: the default


def test_config_check_names_the_assumption_and_how_to_change_it() -> None:
    assert profile("graphile-worker").deleted_jobs.line() == (
        "a job that leaves the table: succeeded (graphile-worker deletes a job only when it "
        "succeeds)"
    )
    assert profile("procrastinate").deleted_jobs.line() == (
        "a job that leaves the table: outcome unknown, and a staged redrive halts on it "
        "(Procrastinate's worker deletes finished jobs when it is run with --delete-jobs: "
        "successful deletes only jobs that succeeded, always failed ones too); set "
        'queuebot.toml: queues.mail.deleted_jobs = "succeeded" if this queue\'s workers '
        "delete only jobs that succeeded"
    )
    assert profile("procrastinate", deleted_jobs="succeeded").deleted_jobs.line() == (
        "a job that leaves the table: succeeded (queuebot.toml: queues.mail.deleted_jobs = "
        '"succeeded": this queue\'s workers delete a job only when it succeeded)'
    )
    assert "Oban's pruner deletes finished jobs, discarded ones too" in (
        profile("oban").deleted_jobs.line()
    )


def view(state: PlanState, waves: list[Wave], schedule: list[int], note: str | None) -> PlanView:
    return plan_view(
        state,
        waves,
        schedule,
        number=3,
        queue="mail",
        request=4,
        reason="the smtp relay answers again",
        note=note,
        updated_at=AT,
    )


def test_a_wave_with_jobs_of_unknown_outcome_is_not_called_ok_and_the_plan_says_so() -> None:
    sample = Wave(number=0, size=3, changed=3, started_at=AT, succeeded=1, unknown=2)
    ended = finished(sample, AT)
    assert ended.outcome is WaveOutcome.HALTED
    wave1 = Wave(number=1, size=4, changed=4, started_at=AT, finished_at=AT, succeeded=4)
    assert completed_words([ended, wave1]) == (
        "every wave done; 2 left the table with their outcome unknown"
    )
    done = view(PlanState.COMPLETED, [ended, wave1], [3, 4], completed_words([ended, wave1]))
    shown = render_message(plan_message(done))
    assert "5/7 succeeded; 7 redriven; 0 dead again; 2 left the table, outcome unknown" in shown
    assert "2 left the table with their outcome unknown" in shown.split("now: ", 1)[1]
    table = shown.split("-- Waves", 1)[1].splitlines()
    assert table[1].split() == [
        "wave",
        "size",
        "started",
        "finished",
        "ok",
        "dead",
        "again",
        "unknown",
        "skipped",
        "rolled",
        "back",
        "outcome",
    ]
    assert table[2].split()[4:7] == ["1", "0", "2"]
    assert wave_finished(done, ended).summary == (
        "P-3 sample finished: 1 succeeded, 0 dead again, 2 left the table (outcome unknown) "
        "- halted"
    )
    clean = view(
        PlanState.COMPLETED, [finished(Wave(number=0, size=1, started_at=AT), AT)], [1], None
    )
    assert "unknown" not in render_message(plan_message(clean))  # said only where there is any
