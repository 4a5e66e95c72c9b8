"""Discord interactions deferred, then the process killed, and nothing sent again: Discord
never resends an interaction it saw answered, so the restarted `queuebot serve` must do the
work once and answer the person on the interaction's token, within 30 s of the restart.

Slash commands (each makes a plan request) and Approve clicks (each executes a request of
50 dead-lettered jobs) alternate; each is killed a random 0-100 ms after the fake Discord
received its first response (the defer: what the person sees as "thinking…"). What Slack
does for the same promise is in test_sigkill.py.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from testkit import web
from testkit.fake_discord import DEFAULT_TOKEN, FakeDiscord, Interaction, StoredMessage
from tests.helpers.people import DISCORD_ALICE, DISCORD_BOB
from tests.reliability.harness import (
    EVENTS,
    Cluster,
    Figures,
    Serve,
    add_dead_letters,
    audit_verify,
    cluster,
    executions,
    request_redrives,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

KILLS = 6
JOBS = 50
SEED = 20261202
GUILD = "400000000000000001"
CHANNEL = "200000000000000001"


def ready(c: Cluster, served: Serve, discord: FakeDiscord) -> None:
    """Until the serve's gateway session is the fake's newest and /readyz says so."""
    deadline = time.monotonic() + 60
    while True:
        body = web.get(f"{served.url}/readyz", timeout=5).json()
        if body.get("discord") == "ok" and discord.connected() > 0:
            return
        assert time.monotonic() < deadline, body
        time.sleep(0.05)


def answered(i: Interaction, clicked: StoredMessage | None) -> bool:
    """The person has an answer: a follow-up, the deferred response filled, or (a click)
    the clicked message rewritten."""
    return (
        bool(i.followups)
        or (i.original is not None and i.original.edits > 0)
        or (clicked is not None and clicked.edits > 0)
    )


def test_deferred_interactions_killed_are_finished_without_redelivery(
    tmp_path: Path, figures: Figures
) -> None:
    rng = random.Random(SEED)
    started = time.monotonic()
    with FakeDiscord().start() as discord:
        env = {"DISCORD_BOT_TOKEN": DEFAULT_TOKEN, "DISCORD_API_BASE_URL": discord.api_url}
        with cluster(tmp_path, toml=f'\n[discord]\nguild = "{GUILD}"\n', env=env) as c:
            groups = [
                (f"rel-d-{i}", add_dead_letters(c, count=JOBS, error=f"disk {i}"))
                for i in range(KILLS // 2)
            ]
            numbers = request_redrives(c, groups)
            served = c.start()
            ready(c, served, discord)
            sent: list[tuple[str, Interaction, int | None, StoredMessage | None]] = []
            waits: list[float] = []
            for k in range(KILLS):
                if k % 2 == 0:
                    reason = f"rel-d-cmd-{k}"
                    i = discord.command(
                        "queue",
                        "redrive",
                        {"error-like": "ffmpeg", "queue": "clips", "reason": reason},
                        user=DISCORD_ALICE,
                        channel=CHANNEL,
                    )
                    sent.append((reason, i, None, None))
                    clicked = None
                else:
                    number = numbers[k // 2]
                    message = discord.posted_earlier(
                        CHANNEL, f"CR-{number}", [f"cr:approve:{number}", f"cr:reject:{number}"]
                    )
                    i = discord.click(
                        f"cr:approve:{number}", message_id=message.id, user=DISCORD_BOB
                    )
                    sent.append((f"CR-{number}", i, number, message))
                    clicked = message
                discord.wait_until(lambda i=i: bool(i.callbacks), 10)  # the defer: acked
                time.sleep(rng.uniform(0, 0.1))
                served.kill()
                served = c.start()
                restarted = time.monotonic()
                ready(c, served, discord)
                discord.wait_until(lambda i=i, m=clicked: answered(i, m), 30)
                waits.append(round(time.monotonic() - restarted, 2))

            answers_per_interaction = []
            for what, i, number, clicked in sent:
                replies = [m for m in i.replies() if m.edits or m in i.followups]
                if clicked is not None and clicked.edits:
                    replies.append(clicked)
                answers_per_interaction.append(len(replies))
                text = "\n".join(m.text() for m in replies)
                if number is None:
                    rows = c.sql("SELECT id FROM qb_change_requests WHERE reason = %s", (what,))
                    assert len(rows) == 1, (what, rows)  # one request per command
                    assert f"CR-{rows[0][0]}" in text, text
                else:
                    assert executions(c, number) == 1, what
                    assert "executed" in text, text
            jobs = [j for _, group in groups for j in group]
            facts = {
                "kills": KILLS,
                "seed": SEED,
                "restart to answer (s): fewest, median, most": [
                    min(waits),
                    sorted(waits)[len(waits) // 2],
                    max(waits),
                ],
                "answers per interaction": answers_per_interaction,
                "REDRIVE_REQUESTED events": c.scalar(EVENTS, (jobs,)),
                "serve processes": len(c.serves),
                "audit verify": audit_verify(c),
            }
    facts["seconds"] = round(time.monotonic() - started, 1)
    stored = figures.record("sigkill: Discord interactions without redelivery", facts)
    assert stored["REDRIVE_REQUESTED events"] == JOBS * (KILLS // 2)  # each job once
    assert all(n >= 1 for n in stored["answers per interaction"])
    assert max(stored["restart to answer (s): fewest, median, most"]) < 30
