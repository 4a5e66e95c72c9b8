"""A team of two (a requester and one other approver) under the default approval rules
(more than 100 rows need 2 approvals): a staged redrive of thousands of dead letters is
judged by its sample, the rows it changes before anyone can halt it, so one approval
starts it; a redrive by ids, a requeue or a rollback of more than 100 rows still needs
two, and the refusal names `[approval] large_change_approvals` and the staged plan as the
ways out. Through the command router as a person in chat sees it, on SQLite and
PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence

from bot.bootstrap import wire_services
from bot.boundary import answer
from bot.render_text import render_message
from commands.context import Invocation
from commands.deps import Deps
from commands.reply import Reply
from commands.router import Router
from services.audit import AuditTrail
from services.config import AccessConfig, ApprovalConfig
from services.people import Directory, Person
from services.reads.gate import ReadGate
from services.reads.service import QueueReads
from tests.helpers.people import ALICE_APPROVER, BOB_APPROVER, DORA_APPROVER
from tests.integration.support import FAST, RecordingNotifier
from tests.integration.team_support import Team, dead_letters
from tests.integration.test_halted_plan_counts import finish_queued, tick


def with_people(team: Team, people: Sequence[Person], approval: ApprovalConfig) -> Router:
    """The team's services wired as serve wires them, with these people configured."""
    directory = Directory(list(people))
    team.services = wire_services(
        state_engine=team.engine,
        estate=team.estate,
        clock=team.clock,
        approval=approval,
        redrive=FAST,
        notifier=RecordingNotifier(),
        audit=AuditTrail(),
        directory=directory,
    )
    return Router(
        Deps(
            reads=QueueReads(team.estate, gate=ReadGate(fresh_for=0.0)),
            changes=team.services.changes,
            plans=team.services.plans,
            directory=directory,
            access=AccessConfig(),
        )
    )


async def said(router: Router, line: str, person: Person) -> tuple[bool, str]:
    """A line typed in chat: (refused, the reply as the console renders it)."""
    inv = Invocation(person=person, platform="console", account=person.name, channel="ops")
    reply = await answer(router.handle_line(line, inv), correlation_id="t", where="t")
    assert isinstance(reply, Reply)
    return reply.error, render_message(reply.message)


async def ok(router: Router, line: str, person: Person = ALICE_APPROVER) -> str:
    refused, text = await said(router, line, person)
    assert not refused, text
    return text


async def refused(router: Router, line: str, person: Person = ALICE_APPROVER) -> str:
    refused, text = await said(router, line, person)
    assert refused, text
    return " ".join(text.split())


async def test_two_people_start_a_staged_redrive_of_many_and_not_a_large_redrive_by_ids(
    team: Team,
) -> None:
    router = with_people(
        team, [ALICE_APPROVER, BOB_APPROVER], ApprovalConfig()
    )  # over 100 rows need 2
    ids = await dead_letters(team, 150)

    by_ids = await refused(router, f'/queue redrive {" ".join(ids[:101])} --reason "relay fixed"')
    assert (
        "redrive of 101 rows needs 2 approvals ([approval] large_change_approvals, for more "
        "than 100 rows), from people other than alice with the approver role: only 1 is "
        "configured (bob), so it could never be approved." in by_ids
    ), by_ids
    assert "lower [approval] large_change_approvals to 1" in by_ids, by_ids
    assert ", select at most 100 rows, or redrive them" in by_ids, by_ids
    assert (
        "or redrive them as a staged plan (select them with a filter or --all instead of "
        "naming ids): a staged redrive is judged by its sample, and needs one approval"
    ) in by_ids, by_ids

    asked = await ok(router, '/queue redrive --all --reason "relay fixed"')
    assert "CR-1: staged redrive of 150 dead letter(s) in queue q" in asked, asked
    assert "waiting for approval (0 of 1)" in asked, asked
    assert "Needs 1 approval, from any of: bob" in asked, asked
    assert (
        "One approval: a staged redrive is judged by the rows it changes before anyone can "
        "halt it, its sample of 5; each later wave starts only once the one before it "
        "succeeded, and anyone may halt it (/queue halt, no approval needed)."
    ) in " ".join(asked.split()), asked
    started = await ok(router, "/queue approve CR-1", BOB_APPROVER)
    assert "approved by bob and executed" in started, started
    assert "plan P-1 started with its sample of 5" in started, started


async def test_a_large_requeue_or_rollback_still_needs_two(team: Team) -> None:
    router = with_people(team, [ALICE_APPROVER, BOB_APPROVER], ApprovalConfig(large_change_rows=1))
    ids = await dead_letters(team, 8)
    requeue = await refused(router, f'/queue requeue {" ".join(ids)} --reason "relay fixed"')
    assert "requeue of 8 rows needs 2 approvals" in requeue, requeue
    assert "lower [approval] large_change_approvals to 1" in requeue, requeue
    assert "staged" not in requeue, requeue  # a requeue has no staged form

    # a plan with a sample of one: one approval; once wave 1 is out, its rollback of
    # seven unclaimed rows is large
    asked = await ok(router, '/queue redrive --all --sample 1 --reason "relay fixed"')
    assert "waiting for approval (0 of 1)" in asked, asked
    await ok(router, "/queue approve CR-1", BOB_APPROVER)
    assert await finish_queued(team) == 1
    await tick(team)
    rollback = await refused(router, '/queue rollback P-1 --reason "relay still flaky"')
    assert "rollback of 7 rows needs 2 approvals" in rollback, rollback
    assert "lower [approval] large_change_approvals to 1" in rollback, rollback


async def test_a_sample_over_the_threshold_counts_as_large(team: Team) -> None:
    """The rule is general: a plan whose sample itself exceeds large_change_rows is large."""
    router = with_people(team, [ALICE_APPROVER, BOB_APPROVER], ApprovalConfig(large_change_rows=3))
    await dead_letters(team, 8)
    big = await refused(router, '/queue redrive --all --sample 5 --reason "relay fixed"')
    assert (
        "staged redrive of 8 rows, whose sample of 5 rows is more than 3, needs 2 approvals "
        "([approval] large_change_approvals, for more than 3 rows)"
    ) in big, big
    assert "or give --sample 3 or less (a staged redrive is judged by its sample)" in big, big
    small = await ok(router, '/queue redrive --all --sample 3 --reason "relay fixed"')
    assert "waiting for approval (0 of 1)" in small, small


async def test_a_change_waiting_for_a_second_approval_names_the_setting(team: Team) -> None:
    router = with_people(
        team, [ALICE_APPROVER, BOB_APPROVER, DORA_APPROVER], ApprovalConfig(large_change_rows=3)
    )
    ids = await dead_letters(team, 8)
    asked = await ok(router, f'/queue redrive {" ".join(ids)} --reason "relay fixed"')
    flat = " ".join(asked.split())
    assert "waiting for approval (0 of 2)" in flat, asked
    assert "Needs 2 approvals, from any of: bob, dora" in flat, asked
    assert (
        "It needs 2 approvals: it changes more than 3 rows ([approval] large_change_rows), "
        "and [approval] large_change_approvals is 2; at 1, one approver decides such a change. "
        "A staged redrive instead (a filter or --all rather than ids) is judged by its "
        "sample, and needs one approval with --sample 3 or less."
    ) in flat, asked
    once = " ".join((await ok(router, "/queue approve CR-1", BOB_APPROVER)).split())
    assert "waiting for approval (1 of 2)" in once, once
    assert "Needs 1 approval, from any of: dora" in once, once
    assert "[approval] large_change_approvals" in once, once
    twice = await refused(router, "/queue approve CR-1", BOB_APPROVER)
    assert (
        "you already approved CR-1; it needs 1 more approval(s) from someone else (a change "
        "of more than [approval] large_change_rows rows needs [approval] "
        "large_change_approvals approvers)."
    ) in twice, twice
    done = await ok(router, "/queue approve CR-1", DORA_APPROVER)
    assert "approved by bob, dora and executed" in done, done


async def test_two_people_resume_a_halted_plan_of_many(team: Team) -> None:
    """A resume is judged by its next wave, as the plan by its sample: the team that
    started the plan can go on with it after a halt."""
    router = with_people(
        team, [ALICE_APPROVER, BOB_APPROVER], ApprovalConfig()
    )  # over 100 rows need 2
    await dead_letters(team, 150)
    await ok(router, '/queue redrive --all --reason "relay fixed"')
    await ok(router, "/queue approve CR-1", BOB_APPROVER)
    await ok(router, "/queue halt P-1 --reason looks-wrong")
    asked = await ok(router, '/queue resume P-1 --reason "false alarm"')
    flat = " ".join(asked.split())
    assert "waiting for approval (0 of 1)" in flat, asked
    assert "Needs 1 approval, from any of: bob" in flat, asked
    assert (
        "a resume is judged by the rows it changes before anyone can halt the plan again, "
        "its next wave of 10" in flat
    ), asked
    resumed = await ok(router, "/queue approve CR-2", BOB_APPROVER)
    assert "approved by bob and executed" in resumed, resumed


async def test_a_resume_whose_next_wave_is_large_needs_two(team: Team) -> None:
    router = with_people(team, [ALICE_APPROVER, BOB_APPROVER], ApprovalConfig(large_change_rows=3))
    await dead_letters(team, 30)
    await ok(router, '/queue redrive --all --sample 2 --reason "relay fixed"')
    await ok(router, "/queue approve CR-1", BOB_APPROVER)
    await ok(router, "/queue halt P-1 --reason looks-wrong")
    big = await refused(router, '/queue resume P-1 --reason "false alarm"')
    assert "resume, whose next wave of 10 rows is more than 3, needs 2 approvals" in big, big
