"""The router and the read-only handlers, with a fake queue reader (commands/router.py,
commands/handlers/queue_read.py, commands/auth.py, commands/messages.py)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest

from bot.render_text import render_message
from commands import messages
from commands.auth import authorize
from commands.catalog import CATALOG, group_specs
from commands.context import Invocation
from commands.deps import Deps
from commands.model import Help
from commands.reply import Reply
from commands.router import Router
from commands.spec import CommandSpec
from services.changes.model import ChangeView, Decision
from services.config import AccessConfig
from services.errors import NotFound, PermissionDenied, UsageError
from services.estate.model import (
    CanonicalState,
    Count,
    DeadFilter,
    JobDetail,
    JobEvent,
    JobList,
    JobSummary,
    Section,
    StatusCount,
    Triage,
    TypeCounts,
)
from services.people import Directory
from services.plans.model import PlanView
from tests.helpers.people import ALICE_APPROVER_ON_SLACK, BOB_VIEWER

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def clips_triage(since: datetime | None = None) -> Triage:
    return Triage(
        queue="clips",
        profile="message_job",
        unit="messages",
        dead_title="Dead letters",
        duplicate_label="jobs with >1 unfinished message",
        taken_at=NOW,
        since=since,
        total=1234,
        by_status=[
            StatusCount("queued", CanonicalState.PENDING, 990),
            StatusCount("processing", CanonicalState.IN_FLIGHT, 24),
            StatusCount("dead_letter", CanonicalState.DEAD, 150),
            StatusCount("failed", CanonicalState.FAILED, 70),
        ],
        status_title="message status",
        by_reason=[Count("timeout", 40), Count("asset_missing", 30)],
        by_signature=[Count("NoSuchKey: clips/<n>.mp4", 120), Count("timeout after <n>s", 30)],
        signatures_of=150,
        signatures_total=150,
        type_title="job type",
        by_type=[
            TypeCounts(
                "transcode",
                1200,
                {CanonicalState.PENDING: 980, CanonicalState.DEAD: 150, CanonicalState.FAILED: 70},
            ),
            TypeCounts("thumbnail", 34, {CanonicalState.PENDING: 10}),
        ],
        oldest_pending_at=NOW - timedelta(hours=2),
        stuck=3,
        duplicate_groups=2,
        duplicate_rows=5,
    )


def dead_rows() -> JobList:
    return JobList(
        total=57,
        rows=[
            JobSummary(
                id="1234",
                status="dead_letter",
                canonical=CanonicalState.DEAD,
                reason="asset_missing",
                error="NoSuchKey: clips/1234.mp4",
                group="acme",
                attempts=5,
                at=NOW - timedelta(minutes=5),
                message_id="m-1",
            ),
            JobSummary(
                id="1235",
                status="failed",
                canonical=CanonicalState.FAILED,
                reason=None,
                error=None,
                group=None,
                attempts=None,
                at=None,
            ),
        ],
    )


@dataclass
class FakeReads:
    """Implements commands.deps.QueueReader with canned values; records every call."""

    triage_result: Triage = field(default_factory=clips_triage)
    detail: JobDetail | None = None
    dead: JobList = field(default_factory=dead_rows)
    stuck: JobList = field(default_factory=lambda: JobList(total=0, rows=[]))
    calls: list[tuple[str, dict[str, object]]] = field(default_factory=list)

    @property
    def queue_names(self) -> list[str]:
        return ["clips", "workers"]

    def forget_recent(self) -> None:
        self.calls.append(("forget", {}))

    async def triage(
        self,
        *,
        queue: str | None,
        since: timedelta | None,
        job_type: str | None,
        exact: bool = False,
    ) -> Triage:
        asked = {"queue": queue, "since": since, "job_type": job_type}
        self.calls.append(("triage", asked | ({"exact": True} if exact else {})))
        return self.triage_result

    async def show_job(self, *, queue: str | None, job_id: str) -> JobDetail:
        self.calls.append(("show", {"queue": queue, "job_id": job_id}))
        if self.detail is None or self.detail.job_id != job_id:
            raise NotFound(f"no job {job_id} in queue {queue or 'clips'}")
        return self.detail

    async def list_dead(self, *, queue: str | None, filters: DeadFilter) -> JobList:
        self.calls.append(("dead", {"queue": queue, "filters": filters}))
        return self.dead

    async def list_stuck(self, *, queue: str | None, limit: int) -> JobList:
        self.calls.append(("stuck", {"queue": queue, "limit": limit}))
        return self.stuck


@dataclass
class NoChanges:
    """Implements commands.deps.ChangeService; read commands must never call it."""

    calls: list[str] = field(default_factory=list)

    async def request(self, **kwargs: object) -> ChangeView:
        self.calls.append("request")
        raise AssertionError("a change was requested")

    async def approve(self, **kwargs: object) -> Decision:
        self.calls.append("approve")
        raise AssertionError("a change was approved")

    async def reject(self, **kwargs: object) -> ChangeView:
        self.calls.append("reject")
        raise AssertionError("a change was rejected")

    async def pending(self, **kwargs: object) -> list[ChangeView]:
        self.calls.append("pending")
        return []


@dataclass
class NoPlans:
    """Implements commands.deps.PlanService; read commands must never call it."""

    async def view(self, **kwargs: object) -> PlanView:
        raise AssertionError("a plan was read")

    async def halt(self, **kwargs: object) -> PlanView:
        raise AssertionError("a plan was halted")


DIRECTORY = Directory([ALICE_APPROVER_ON_SLACK, BOB_VIEWER])


def make_router(
    reads: FakeReads | None = None,
    access: AccessConfig | None = None,
    config_file: str | None = None,
) -> tuple[Router, FakeReads]:
    fake = reads or FakeReads()
    deps = Deps(
        reads=fake,
        changes=NoChanges(),
        plans=NoPlans(),
        directory=DIRECTORY,
        access=access or AccessConfig(),
        config_file=config_file,
    )
    return Router(deps), fake


def change_calls(router: Router) -> list[str]:
    changes = router.deps.changes
    assert isinstance(changes, NoChanges)
    return changes.calls


def slack_user(account: str) -> Invocation:
    return Invocation(
        person=DIRECTORY.by_account("slack", account), platform="slack", account=account
    )


def text_of(reply: Reply) -> str:
    return render_message(reply.message)


# ---------------------------------------------------------------------------------------
# triage


async def test_triage_reply_contains_the_counts() -> None:
    router, fake = make_router()
    reply = await router.handle_line("/queue triage", slack_user("U0ALICE"))

    # one count of dead letters (what /queue dlq lists), broken out by status
    assert reply.message.summary == (
        "Queue clips: 1,234 messages; 220 dead letters (150 dead_letter, 70 failed), "
        "3 stuck, oldest pending 2h00m"
    )
    text = text_of(reply)
    assert "messages: 1,234" in text
    assert "dead letters: 220 (150 dead_letter, 70 failed)" in text
    assert "stuck: 3" in text
    assert "duplicates: 2 jobs with >1 unfinished message" in text
    assert "oldest pending: 2h00m" in text
    # breakdowns: by status with shares, by failure_reason, by signature, by job type
    assert "dead_letter     dead        150  12.2%" in text  # 150 of 1,234
    assert "transcode  1,200      980      70   150" in text
    assert "timeout" in text
    assert "timeout           40" in text  # the failure_reason row, not the signature
    assert "asset_missing" in text
    assert "NoSuchKey: clips/<n>.mp4" in text
    assert "transcode" in text
    assert "thumbnail" in text
    # and where to look next
    assert "/queue dlq --queue clips" in text
    assert "/queue stuck --queue clips" in text
    assert fake.calls == [("triage", {"queue": None, "since": None, "job_type": None})]
    assert change_calls(router) == []


async def test_triage_exact_asks_for_every_count() -> None:
    router, fake = make_router()
    await router.handle_line("/queue triage --exact --queue workers", slack_user("U0ALICE"))
    assert fake.calls == [
        ("triage", {"queue": "workers", "since": None, "job_type": None, "exact": True})
    ]


async def test_triage_marks_an_estimated_count_and_its_shares() -> None:
    """A count PostgreSQL estimated shows as "≈" with three significant figures, as do
    the total and the shares of it; the reply says what was estimated and how to count."""
    t = clips_triage()
    done = StatusCount("completed", CanonicalState.SUCCEEDED, 914_223, estimated=True)
    by_status = [done, *t.by_status]
    total = sum(s.count for s in by_status)
    router, _ = make_router(
        reads=FakeReads(triage_result=replace(t, by_status=by_status, total=total))
    )
    reply = await router.handle_line("/queue triage", slack_user("U0ALICE"))
    text = text_of(reply)
    assert reply.message.summary.startswith("Queue clips: ≈915,000 messages;")
    assert "completed       succeeded  ≈914,000  ≈99.9%" in text
    assert "≈0.1%" in text  # an exact count's share of an estimated total
    assert "990" in text and "≈990" not in text  # the exact counts stay exact
    assert "the completed rows are not counted but estimated" in text
    assert "/queue triage --exact" in text


async def test_triage_says_when_its_signatures_come_from_the_newest_rows_only() -> None:
    sampled = replace(clips_triage(), signatures_of=2000, signatures_total=5150)
    router, _ = make_router(reads=FakeReads(triage_result=sampled))
    text = text_of(await router.handle_line("/queue triage", slack_user("U0ALICE")))
    assert "by error signature, top 10 in the newest 2,000 of 5,150" in text
    whole = replace(clips_triage(), signatures_of=150, signatures_total=150)
    router, _ = make_router(reads=FakeReads(triage_result=whole))
    text = text_of(await router.handle_line("/queue triage", slack_user("U0ALICE")))
    assert "by error signature, top 10 of all 150" in text


async def test_triage_passes_its_filters_through() -> None:
    router, fake = make_router()
    await router.handle_line(
        "/queue triage --since 24h --type transcode --queue workers", slack_user("U0ALICE")
    )
    assert fake.calls == [
        (
            "triage",
            {"queue": "workers", "since": timedelta(hours=24), "job_type": "transcode"},
        )
    ]


async def test_triage_with_a_window_says_so() -> None:
    router, _ = make_router(FakeReads(triage_result=clips_triage(since=NOW - timedelta(hours=24))))
    reply = await router.handle_line("/queue triage --since 24h", slack_user("U0ALICE"))
    assert "1,234 messages queued in the last 24h00m" in reply.message.summary


async def test_triage_of_a_worker_queue_counts_jobs_and_duplicate_issues() -> None:
    result = Triage(
        queue="workers",
        profile="worker_queue",
        taken_at=NOW,
        since=None,
        total=10,
        by_status=[StatusCount("done", CanonicalState.SUCCEEDED, 10)],
        status_title="status",
        duplicate_groups=4,
        duplicates_of_active=1,
    )
    router, _ = make_router(FakeReads(triage_result=result))
    reply = await router.handle_line("/queue triage --queue workers", slack_user("U0ALICE"))
    assert reply.message.summary == (
        "Queue workers: 10 jobs; 0 dead letters, 0 stuck, oldest pending none"
    )
    text = text_of(reply)
    assert "4 issues queued twice, 1 queued beside an active row" in text
    assert "Next:" not in text  # nothing broken, nothing stuck


# ---------------------------------------------------------------------------------------
# dlq, stuck, show


async def test_dlq_passes_filters_through() -> None:
    router, fake = make_router()
    await router.handle_line(
        '/queue dlq --error-like "NoSuchKey" --tenant acme --failure-reason asset_missing '
        "--job-type transcode --limit 5 --queue workers",
        slack_user("U0ALICE"),
    )
    assert fake.calls == [
        (
            "dead",
            {
                "queue": "workers",
                "filters": DeadFilter(
                    error_like="NoSuchKey",
                    tenant="acme",
                    reason="asset_missing",
                    job_type="transcode",
                    limit=5,
                ),
            },
        )
    ]


async def test_dlq_defaults() -> None:
    router, fake = make_router()
    await router.handle_line("/queue dlq", slack_user("U0ALICE"))
    assert fake.calls == [("dead", {"queue": None, "filters": DeadFilter(limit=20)})]


async def test_dlq_lists_the_rows_and_says_how_many_are_shown() -> None:
    router, _ = make_router()
    reply = await router.handle_line("/queue dlq --limit 2", slack_user("U0ALICE"))
    assert reply.message.summary == "Dead letters in queue clips: 57 (showing 2)"
    lines = text_of(reply).splitlines()
    assert lines[0] == "== Dead letters in queue clips: 57 (showing 2) =="
    assert lines[1].split() == [
        "job",
        "message",
        "status",
        "group",
        "tries",
        "at",
        "reason",
        "/",
        "error",
    ]
    assert lines[2].split()[:5] == ["1234", "m-1", "dead_letter", "acme", "5"]
    assert "asset_missing NoSuchKey: clips/1234.mp4" in lines[2]
    assert lines[3].split() == ["1235", "-", "failed", "-", "-", "-", "-"]


async def test_dlq_with_nothing_to_show() -> None:
    router, _ = make_router(FakeReads(dead=JobList(total=0, rows=[])))
    reply = await router.handle_line("/queue dlq --queue workers", slack_user("U0ALICE"))
    assert text_of(reply) == (
        "== Dead letters in queue workers ==\nNo dead-lettered or failed jobs match."
    )


async def test_stuck_passes_the_limit_and_says_when_nothing_is_stuck() -> None:
    router, fake = make_router()
    reply = await router.handle_line("/queue stuck --limit 7", slack_user("U0ALICE"))
    assert fake.calls == [("stuck", {"queue": None, "limit": 7})]
    assert "Nothing is stuck" in text_of(reply)


async def test_show_renders_the_row_its_related_rows_and_events() -> None:
    detail = JobDetail(
        queue="clips",
        job_id="1234",
        status="dead_letter",
        canonical=CanonicalState.DEAD,
        row={"id": 1234, "attempts": 5, "updated_at": NOW, "last_error": None},
        sections=[Section("Asset", [{"key": "clips/1234.mp4", "size": 0}])],
        events=[
            JobEvent("claimed", None, NOW - timedelta(minutes=3)),
            JobEvent("failed", "NoSuchKey:\n clips/1234.mp4", NOW - timedelta(minutes=2)),
        ],
    )
    router, fake = make_router(FakeReads(detail=detail))
    reply = await router.handle_line("/queue show 1234", slack_user("U0ALICE"))
    assert fake.calls == [("show", {"queue": None, "job_id": "1234"})]
    assert reply.message.summary == "Job 1234 in queue clips: dead_letter"
    text = text_of(reply)
    assert "== Job 1234 in queue clips: dead_letter (dead) ==" in text
    assert "updated_at  2024-05-01 12:00:00 UTC" in text
    assert "last_error  -" in text
    assert "-- Asset" in text
    assert "clips/1234.mp4" in text
    assert "-- Events (2)" in text
    assert "2024-05-01 11:58 UTC  failed   NoSuchKey: clips/1234.mp4" in text


async def test_show_without_events_says_so() -> None:
    detail = JobDetail(
        queue="clips",
        job_id="7",
        status="queued",
        canonical=CanonicalState.PENDING,
        row={"id": 7},
        sections=[],
        events=[],
    )
    router, _ = make_router(FakeReads(detail=detail))
    reply = await router.handle_line("/queue show 7", slack_user("U0ALICE"))
    assert text_of(reply).endswith("No job events recorded.")


async def test_show_of_a_missing_job_is_not_found() -> None:
    router, _ = make_router()
    with pytest.raises(NotFound, match="no job 99"):
        await router.handle_line("/queue show 99", slack_user("U0ALICE"))


async def test_handle_text_takes_what_slack_sends() -> None:
    router, fake = make_router()
    await router.handle_text("queue", "dlq --tenant acme", slack_user("U0ALICE"))
    assert fake.calls == [("dead", {"queue": None, "filters": DeadFilter(tenant="acme")})]


async def test_bad_input_raises_usage_error_before_any_read() -> None:
    router, fake = make_router()
    with pytest.raises(UsageError) as info:
        await router.handle_line("/queue dlq --limit 0", slack_user("U0ALICE"))
    assert info.value.usage is not None
    assert info.value.usage.startswith("/queue dlq")
    assert fake.calls == []


# ---------------------------------------------------------------------------------------
# Authorization


async def test_unknown_user_may_run_read_only_commands() -> None:
    router, fake = make_router()
    stranger = slack_user("U0STRANGER")
    assert stranger.person is None
    reply = await router.handle_line("/queue triage", stranger)
    assert "1,234 messages" in reply.message.summary
    assert fake.calls


@pytest.mark.parametrize("line", ["/queue triage", "/queue dlq", "/queue help"])
async def test_unknown_user_is_denied_when_access_is_deny(line: str) -> None:
    router, fake = make_router(access=AccessConfig(unknown_users="deny"))
    with pytest.raises(PermissionDenied) as info:
        await router.handle_line(line, slack_user("U0STRANGER"))
    message = str(info.value)
    assert "U0STRANGER" in message
    assert "slack account" in message
    assert "[people]" in message
    assert fake.calls == []


async def test_unknown_user_may_not_share_an_answer_with_the_channel() -> None:
    router, fake = make_router()
    with pytest.raises(PermissionDenied) as info:
        await router.handle_line("/queue triage --share", slack_user("U0STRANGER"))
    assert "--share posts the answer for the whole channel" in str(info.value)
    assert "slack account U0STRANGER" in str(info.value)
    assert fake.calls == []
    shared = await router.handle_line("/queue triage --share", slack_user("U0BOB"))
    assert shared.ephemeral is False


async def test_known_person_is_allowed_when_access_is_deny() -> None:
    router, _ = make_router(access=AccessConfig(unknown_users="deny"))
    reply = await router.handle_line("/queue triage", slack_user("U0BOB"))
    assert "1,234" in reply.message.summary


def test_person_found_by_either_platform_account() -> None:
    assert DIRECTORY.by_account("slack", "U0BOB") is BOB_VIEWER
    assert DIRECTORY.by_account("discord", "100000000000000002") is BOB_VIEWER
    assert DIRECTORY.by_account("discord", "U0BOB") is None


REQUEUE = '/queue requeue 4102 --reason "allowlist fixed"'


async def test_unknown_user_may_not_request_a_change() -> None:
    router, _ = make_router()
    with pytest.raises(PermissionDenied) as info:
        await router.handle_line(REQUEUE, slack_user("U0STRANGER"))
    message = str(info.value)
    assert "/queue requeue changes things" in message
    assert "slack account U0STRANGER" in message
    assert "read-only commands" in message
    assert "(/queue help, triage, show, dlq, stuck, oncall, plan, pending)" in message
    assert change_calls(router) == []


@pytest.mark.parametrize(
    "line", ['/incident notify operators "we are on it"', '/incident declare gd:queue-loss "x y"']
)
async def test_unknown_user_is_told_only_the_incident_commands_they_may_run(line: str) -> None:
    """Declaring is no read: an unknown user may not declare (the runbook's authority
    decides, and they are nobody), so the refusal does not offer it."""
    router, _ = make_router()
    with pytest.raises(PermissionDenied) as info:
        await router.handle_line(line, slack_user("U0STRANGER"))
    message = str(info.value)
    assert f"{' '.join(line.split()[:2])} changes things" in message
    assert "(/incident help, runbooks, whois, status, timeline, export)" in message


@pytest.mark.parametrize(
    ("line", "role"),
    [
        (REQUEUE, "operator"),
        ("/queue approve CR-1", "approver"),
        # overriding the growth check takes no more and no less than a redrive's role
        ('/queue redrive --from-plan P-1 --override-growth --reason "outage over"', "operator"),
    ],
)
async def test_person_without_the_role_is_told_which_role_is_needed(line: str, role: str) -> None:
    router, _ = make_router()
    with pytest.raises(PermissionDenied) as info:
        await router.handle_line(line, slack_user("U0BOB"))
    path = " ".join(line.split()[:2])
    assert str(info.value) == f"{path} needs the {role} role; bob has: viewer."
    assert change_calls(router) == []


async def test_pending_is_read_only_and_open_to_unknown_users() -> None:
    router, _ = make_router()
    reply = await router.handle_line("/queue pending", slack_user("U0STRANGER"))
    assert "No change requests are waiting for approval." in text_of(reply)


CHANGE = CommandSpec("queue", "purge", Help, "purge the queue", role="operator")


def test_authorize_names_the_discord_account_of_an_unknown_user() -> None:
    inv = Invocation(person=None, platform="discord", account="100000000000000009")
    with pytest.raises(PermissionDenied) as info:
        authorize(CHANGE, inv, AccessConfig())
    message = str(info.value)
    assert "/queue purge changes things" in message
    assert "discord account 100000000000000009" in message


def test_person_with_the_role_may_run_it() -> None:
    inv = Invocation(person=ALICE_APPROVER_ON_SLACK, platform="slack", account="U0ALICE")
    authorize(CHANGE, inv, AccessConfig())  # no error


# ---------------------------------------------------------------------------------------
# Help


async def test_help_lists_every_command() -> None:
    router, _ = make_router()
    reply = await router.handle_line("/queue help", slack_user("U0STRANGER"))
    text = text_of(reply)
    queue = group_specs("queue")
    for spec in queue:
        assert spec.short_usage in text
        assert spec.summary[:60] in text
    assert len(text.splitlines()) == len(queue) + 4  # heading, intro, titles, other groups
    assert text.splitlines()[-1] == "Also: /incident help."


async def test_help_shows_every_summary_in_full_in_the_console() -> None:
    router, _ = make_router()
    text = text_of(await router.handle_line("/queue help", slack_user("U0STRANGER")))
    for spec in group_specs("queue"):
        assert spec.summary in text


@pytest.mark.parametrize("line", ["/queue help dlq", "/queue dlq --help", "/queue help DLQ"])
async def test_help_for_one_command_shows_usage_options_and_example(line: str) -> None:
    router, _ = make_router()
    text = text_of(await router.handle_line(line, slack_user("U0ALICE")))
    assert "== /queue dlq ==" in text
    assert "Usage: /queue dlq [--error-like TEXT]" in text
    assert "--error-like TEXT   error text contains TEXT (case-insensitive)" in text
    assert "--limit N" in text
    assert 'Example: /queue dlq --error-like "NoSuchKey" --limit 10' in text


async def test_help_for_an_unknown_command() -> None:
    router, _ = make_router()
    with pytest.raises(UsageError) as info:
        await router.handle_line("/queue help frobnicate", slack_user("U0ALICE"))
    assert "no command /queue frobnicate" in info.value.message
    assert ", ".join(s.name for s in group_specs("queue")) in info.value.message
    assert info.value.usage == "/queue help"


@pytest.mark.parametrize(
    ("line", "role"),
    [("/queue help requeue", "operator"), ("/queue approve --help", "approver")],
)
async def test_help_of_a_command_needing_a_role_says_so(line: str, role: str) -> None:
    router, _ = make_router()
    text = text_of(await router.handle_line(line, slack_user("U0STRANGER")))
    assert f"Needs the {role} role." in text


async def test_help_of_a_read_command_mentions_no_role() -> None:
    router, _ = make_router()
    text = text_of(await router.handle_line("/queue help triage", slack_user("U0ALICE")))
    assert "role" not in text


# ---------------------------------------------------------------------------------------
# Error replies


def test_error_reply_for_usage_error_includes_the_usage_line() -> None:
    err = UsageError("--limit must be between 1 and 200, not 0", usage="/queue dlq [--limit N]")
    reply = messages.error_reply(err)
    assert reply.error
    assert reply.ephemeral
    assert render_message(reply.message) == (
        "== That command could not be read ==\n"
        "--limit must be between 1 and 200, not 0\n"
        "Usage: /queue dlq [--limit N]"
    )
    assert reply.message.summary == (
        "That command could not be read: --limit must be between 1 and 200, not 0"
    )


async def test_error_reply_for_a_parse_error_shows_that_commands_usage() -> None:
    router, _ = make_router()
    with pytest.raises(UsageError) as info:
        await router.handle_line("/queue show", slack_user("U0ALICE"))
    text = render_message(messages.error_reply(info.value).message)
    assert "/queue show needs ID" in text
    assert "Usage: /queue show [ID] [--args-like TEXT] [--queue Q]" in text


@pytest.mark.parametrize(
    ("err", "title"),
    [
        (NotFound("no job 99"), "Not found"),
        (PermissionDenied("not you"), "Not allowed"),
        (UsageError("bad", usage=None), "That command could not be read"),
    ],
)
def test_other_errors_have_a_title_and_no_usage_line(err: Exception, title: str) -> None:
    assert isinstance(err, NotFound | PermissionDenied | UsageError)
    text = render_message(messages.error_reply(err).message)
    assert text.startswith(f"== {title} ==")
    assert str(err) in text
    assert "Usage:" not in text


def test_unexpected_reply_quotes_the_reference() -> None:
    reply = messages.unexpected_reply("abc123")
    assert reply.error
    assert "abc123" in render_message(reply.message)


async def test_one_flag_name_per_concept_and_old_spellings_still_work_with_a_hint() -> None:
    router, fake = make_router()
    new = await router.handle_line(
        "/queue dlq --failure-reason asset_missing --job-type transcode", slack_user("U0ALICE")
    )
    old = await router.handle_line(
        "/queue dlq --reason asset_missing --type transcode", slack_user("U0ALICE")
    )
    wanted = DeadFilter(reason="asset_missing", job_type="transcode", limit=20)
    assert [c[1]["filters"] for c in fake.calls] == [wanted, wanted]
    assert "is now" not in text_of(new)
    said = text_of(old)
    assert "--reason is now spelled --failure-reason" in said
    assert "--type is now spelled --job-type" in said
    for name in ("dlq", "redrive", "cancel"):
        spec = next(s for s in CATALOG if s.name == name)
        flags = {f.name for f in spec.flags}
        assert "failure-reason" in flags and "type" not in flags
        assert ("job-type" in flags) == (name != "cancel")


CONSOLE_STRANGER = Invocation(person=None, platform="console", account="console:ubuntu")


@pytest.mark.parametrize("access", [AccessConfig(), AccessConfig(unknown_users="deny")])
async def test_an_unknown_console_user_learns_how_to_act_as_someone_and_which_file(
    access: AccessConfig,
) -> None:
    router, _ = make_router(access=access, config_file="/etc/queuebot/queuebot.toml")
    with pytest.raises(PermissionDenied) as info:
        await router.handle_line(REQUEST_LINE, CONSOLE_STRANGER)
    message = str(info.value)
    assert "console account console:ubuntu" in message
    assert "listed under [people] in /etc/queuebot/queuebot.toml" in message
    assert "start the line with @alice" in message and "--as alice" in message
    assert "people: alice, bob" in message


async def test_an_unknown_slack_user_is_told_to_ask_an_admin() -> None:
    router, _ = make_router(config_file="/etc/queuebot/queuebot.toml")
    with pytest.raises(PermissionDenied) as info:
        await router.handle_line(REQUEST_LINE, slack_user("U0STRANGER"))
    message = str(info.value)
    assert "Ask an admin to add you under [people]" in message
    assert '[people.NAME] slack = "U0STRANGER"' in message
    assert "/etc/queuebot" not in message and "--as" not in message


REQUEST_LINE = '/queue requeue 4102 --reason "allowlist fixed"'
