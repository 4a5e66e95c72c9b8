"""A list cut to its first groups says what it leaves out, in the same words everywhere:
triage's dead letters by signature (of the sample where triage groups only the newest)
and by tenant, a change request's frozen rows by signature as the approver sees them,
and /queue dlq's and /queue stuck's rows."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from bot.render_text import render_message
from commands.messages.changes import change_message
from services import format as fmt
from services.changes.model import ChangeView, Ineligible, RequestState
from services.estate.model import CanonicalState, Count, JobList, JobSummary, TypeCounts
from services.reads.view import triage_message
from tests.kinds import ChangeKind
from tests.unit.test_handlers import NOW, clips_triage, make_router, slack_user, text_of


def test_the_words_of_a_cut() -> None:
    assert (
        fmt.left_out(10, 37, "signatures", rest=1204, whole=4500, unit="dead letters")
        == "top 10 of 37 signatures; 1,204 of 4,500 dead letters in the 27 not shown"
    )
    assert fmt.left_out(10, 10, "signatures", rest=0, whole=4500, unit="dead letters") is None
    assert fmt.not_listed(20, 4500, "dead letters") == (
        "20 of 4,500 dead letters listed; 4,480 not listed"
    )
    assert fmt.not_listed(20, 20, "dead letters") is None


def signatures(n: int) -> list[Count]:
    return [Count(f"error {i}", 100 - i) for i in range(n)]


def test_triage_says_how_many_signatures_of_its_sample_it_leaves_out() -> None:
    shown = signatures(10)
    t = replace(
        clips_triage(),
        by_signature=shown,
        signature_groups=37,
        signatures_of=2000,
        signatures_total=5150,
    )
    text = render_message(triage_message(t))
    rest = 2000 - sum(c.count for c in shown)
    assert (
        f"top 10 of 37 signatures; {rest:,} of 2,000 sampled dead letters in the 27 not shown"
    ) in text


def test_triage_of_every_dead_letter_says_of_how_many() -> None:
    t = replace(
        clips_triage(),
        by_signature=signatures(10),
        signature_groups=12,
        signatures_of=1000,
        signatures_total=1000,
    )
    text = render_message(triage_message(t))
    rest = 1000 - sum(c.count for c in signatures(10))
    assert f"top 10 of 12 signatures; {rest:,} of 1,000 dead letters in the 2 not shown" in text


def test_a_triage_that_shows_every_signature_says_nothing_is_left_out() -> None:
    text = render_message(triage_message(clips_triage()))  # two signatures, both shown
    assert "not shown" not in text


def test_triage_says_how_many_tenants_of_its_sample_it_leaves_out() -> None:
    tenants = [TypeCounts(f"tenant-{i}", 50 - i, {}) for i in range(10)]
    t = replace(
        clips_triage(),
        type_title="tenant",
        by_type_dead_only=True,
        by_type=tenants,
        type_groups=40,
        signatures_of=2000,
        signatures_total=5150,
    )
    text = render_message(triage_message(t))
    rest = 2000 - sum(tc.total for tc in tenants)
    assert f"top 10 of 40 tenants; {rest:,} of 2,000 sampled dead letters in the 30 not shown" in (
        text
    )


def request(by_signature: list[tuple[str, int]], ineligible: int = 0) -> ChangeView:
    return ChangeView(
        number=7,
        kind=ChangeKind.PLAN,
        queue="payments",
        state=RequestState.PENDING,
        requester="alice",
        requested_at=NOW,
        expires_at=NOW + timedelta(minutes=30),
        reason="payments API answers again",
        incident=None,
        evidence=None,
        selector="--all",
        eligible=sum(n for _, n in by_signature),
        by_signature=by_signature,
        ineligible=[Ineligible(str(i), "redriven 3 times already") for i in range(ineligible)],
        approvals_required=1,
        schedule=[5, 10, 100],
    )


def test_the_approver_sees_how_many_frozen_rows_the_preview_leaves_out() -> None:
    by_signature = [(f"error {i}", 300 - i) for i in range(37)]
    text = render_message(change_message(request(by_signature)))
    total = sum(n for _, n in by_signature)
    rest = sum(n for _, n in by_signature[20:])
    assert f"top 20 of 37 signatures; {rest:,} of {total:,} frozen rows in the 17 not shown" in text


def test_a_preview_of_every_signature_leaves_nothing_out() -> None:
    text = render_message(change_message(request([("error a", 30), ("error b", 2)])))
    assert "not shown" not in text


def test_the_approver_sees_how_many_ineligible_rows_are_not_listed() -> None:
    text = render_message(change_message(request([("error a", 30)], ineligible=57)))
    assert "20 of 57 ineligible rows listed; 37 not listed" in text


def dead(n: int) -> list[JobSummary]:
    return [
        JobSummary(
            id=str(i),
            status="dead_letter",
            canonical=CanonicalState.DEAD,
            reason=None,
            error="timeout",
            group="transcode",
            attempts=3,
            at=NOW,
        )
        for i in range(n)
    ]


async def test_dlq_says_how_many_dead_letters_it_does_not_list() -> None:
    router, fake = make_router()
    fake.dead = JobList(total=4500, rows=dead(20))
    text = text_of(await router.handle_line("/queue dlq", slack_user("U0ALICE")))
    assert "20 of 4,500 dead letters listed; 4,480 not listed" in text
    assert "--limit" in text  # how to see more


async def test_dlq_that_lists_every_dead_letter_says_nothing_more() -> None:
    router, fake = make_router()
    fake.dead = JobList(total=3, rows=dead(3))
    text = text_of(await router.handle_line("/queue dlq", slack_user("U0ALICE")))
    assert "not listed" not in text
