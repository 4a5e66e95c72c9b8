"""The cut lists' numbers are true on a real table: triage's dead letters by signature say
how many signatures and dead letters the top 10 leave out, of every dead letter or of
the newest ones triage groups, and /queue dlq how many it does not list. A team's worker
table, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from commands.model import Dlq
from commands.model import Triage as TriageCommand
from services.estate.signature import SIGNATURE_SAMPLE
from tests.integration.support import START
from tests.integration.team_support import Team

# twelve causes, the first with most rows; each job's error carries its own request id
CAUSES = [f"cause {chr(97 + i)}: upstream said no (request id a{i}f{{n:06x}})" for i in range(12)]


async def dead_rows(team: Team, per_cause: list[int], *, newest_last: int = 0) -> None:
    """Dead rows of each cause, in one insert; ``newest_last`` more of the first cause
    queued after them all (the newest, which a sampled triage groups first)."""
    rows = []
    at = START - timedelta(days=1)
    n = 0
    for cause, count in zip(CAUSES, per_cause, strict=False):
        for _ in range(count):
            n += 1
            rows.append((cause.format(n=n), at + timedelta(seconds=n)))
    for _ in range(newest_last):
        n += 1
        rows.append((CAUSES[0].format(n=n), at + timedelta(hours=12, seconds=n)))
    async with team.engine.begin() as conn:
        q = (await team.profile.tables(conn))["queue"]
        await conn.execute(
            q.table.insert(),
            [
                {
                    q.c("status").name: "dead",
                    q.c("error_message").name: error,
                    q.c("queued_at").name: queued,
                    q.c("claimed_at").name: queued,
                }
                for error, queued in rows
            ],
        )


async def test_triage_says_what_its_top_10_signatures_leave_out(team: Team) -> None:
    per_cause = [50, 40, 30, 20, 10, 9, 8, 7, 6, 5, 4, 3]  # 192 dead letters
    await dead_rows(team, per_cause)
    text = await team.reply(TriageCommand(queue="q"))
    assert "Dead letters by error signature, top 10 of all 192" in text
    assert "cause a: upstream said no (request id <n>)" in text  # one per cause
    assert "top 10 of 12 signatures; 7 of 192 dead letters in the 2 not shown" in text


async def test_a_sampled_triage_says_it_counts_the_sample(team: Team) -> None:
    per_cause = [1000, 400, 300, 200, 100, 60, 50, 40, 30, 20, 15, 10]  # 2,225
    await dead_rows(team, per_cause, newest_last=25)  # 2,250 dead letters in all
    t = await team.triage(job_type=None)
    assert (t.signatures_of, t.signatures_total, t.signature_groups) == (SIGNATURE_SAMPLE, 2250, 12)
    # the sample is the newest 2,000: the 25 newest of cause a, then all but the 250
    # oldest (all of cause a), so cause a counts 25 + 750 of it
    assert t.by_signature[0].count == 775
    rest = SIGNATURE_SAMPLE - sum(c.count for c in t.by_signature)
    assert rest == 15 + 10
    text = await team.reply(TriageCommand(queue="q"))
    assert "top 10 in the newest 2,000 of 2,250" in text
    assert "top 10 of 12 signatures; 25 of 2,000 sampled dead letters in the 2 not shown" in text


async def test_dlq_says_how_many_it_does_not_list(team: Team) -> None:
    await dead_rows(team, [30])
    text = await team.reply(Dlq(queue="q", limit=20))
    assert "20 of 30 dead letters listed; 10 not listed" in text
    assert "not listed" not in await team.reply(Dlq(queue="q", limit=30))
