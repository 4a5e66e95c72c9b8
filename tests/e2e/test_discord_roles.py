"""The approver role from a Discord role, end to end: the real `queuebot serve` with
``[roles.approver] discord_roles``, talking to the local fake Discord
(testkit/fake_discord.py), whose interactions carry each member's roles as Discord's do
(``member.roles``) and whose guild lists its members over REST. An approval is judged by
the roles its own interaction carries, with no read of the guild; who may approve a
request is read from the guild's members, and read again when the gateway says a member
changed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from testkit.fake_discord import FakeDiscord
from tests.e2e.serving import Served, demo_database, running_serve
from tests.e2e.test_discord import GUILD, answered, wait_ready
from tests.helpers.config import DETECTORS_OFF
from tests.helpers.database import query
from tests.helpers.people import DISCORD_ALICE, DISCORD_BOB, DISCORD_DORA
from tests.helpers.platforms import discord_env

APPROVER_ROLE = "500000000000000001"
DISCORD_CAROL = "100000000000000004"
CONFIG = (
    f"""
[queues.clips]
profile = "message_job"

[queues.workers]
profile = "worker_queue"

[channels.alerts]
discord = "200000000000000001"

[discord]
guild = "{GUILD}"
read_members = true  # who holds a role is read from the guild (the Server Members intent)

[people.alice]
discord = "{DISCORD_ALICE}"
roles = ["operator"]

[people.bob]
discord = "{DISCORD_BOB}"
roles = ["operator"]

[people.carol]
discord = "{DISCORD_CAROL}"
roles = ["operator"]

[people.dora]
discord = "{DISCORD_DORA}"
roles = ["operator"]

[roles.approver]
discord_roles = ["{APPROVER_ROLE}"]
"""
    + DETECTORS_OFF
)


@dataclass
class Stack:
    fake: FakeDiscord
    served: Served
    db_url: str

    def sql(self, statement: str, **params: Any) -> list[Any]:
        return query(self.db_url, statement, **params)

    def member_reads(self) -> int:
        """The bot's reads of the guild's members (GET /guilds/{guild}/members)."""
        return len(self.fake.rest("GET", f"/guilds/{GUILD}/members"))

    def request(self) -> tuple[int, str]:
        """alice asks to requeue one failed row of workers: the request's number, and
        what its message says."""
        (row,) = self.sql(
            "SELECT min(id) FROM dev_r_worker_queue WHERE status = 'failed' AND id NOT IN "
            "(SELECT CAST(job_id AS INTEGER) FROM qb_change_items)"
        )[0]
        i = self.fake.command(
            "queue",
            "requeue",
            {"ids": str(row), "queue": "workers", "reason": "fixed"},
            user=DISCORD_ALICE,
        )
        text = answered(self.fake, i)
        found = re.search(r"CR-(\d+)", text)
        assert found, text
        return int(found.group(1)), text

    def approve(self, number: int, user: str) -> str:
        return answered(
            self.fake, self.fake.command("queue", "approve", {"request": f"CR-{number}"}, user=user)
        )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("discord-roles")
    with (
        demo_database("sqlite", workdir) as db_url,
        FakeDiscord().start() as fake,
        running_serve(workdir, db_url, discord_env(fake), config_text=CONFIG) as served,
    ):
        fake.wait_until(lambda: fake.identified > 0 and fake.connected() > 0)
        wait_ready(served)
        fake.member_roles.update(
            {DISCORD_ALICE: [], DISCORD_BOB: [APPROVER_ROLE], DISCORD_DORA: []}
        )
        yield Stack(fake, served, db_url)


def test_the_roles_an_interaction_carries_decide_an_approval_without_a_read(
    stack: Stack,
) -> None:
    number, asked = stack.request()
    assert "from any of: bob" in asked  # who may approve: read from the guild's members
    # a member changed: what was read is read again at its next use
    stack.fake.member_update(DISCORD_DORA, [])
    reads = stack.member_reads()

    refusal = stack.approve(number, DISCORD_DORA)  # her interaction carries no approver role
    assert "/queue approve needs the approver role; dora has: viewer, operator." in refusal
    approved = stack.approve(number, DISCORD_BOB)  # his carries it
    assert f"CR-{number}: requeue 1 row(s) in queue workers - approved by bob and executed" in (
        approved
    )
    assert stack.member_reads() == reads  # neither was read from the guild

    _, asked = stack.request()
    assert stack.member_reads() == reads + 1  # the member event made the next use read


def test_a_member_given_the_role_may_approve_at_once_and_is_named(stack: Stack) -> None:
    number, asked = stack.request()
    assert "from any of: bob" in asked and "carol" not in asked
    assert "needs the approver role" in stack.approve(number, DISCORD_CAROL)

    stack.fake.member_update(DISCORD_CAROL, [APPROVER_ROLE])  # carol is given the role
    _, asked = stack.request()
    assert "from any of: bob, carol" in asked  # within the minute: the event said so
    assert "approved by carol and executed" in stack.approve(number, DISCORD_CAROL)


def test_a_large_guild_is_read_page_by_page(stack: Stack) -> None:
    # 1,500 more members; the 1,200th of them holds the approver role
    others = {str(200_000_000_000_000_000 + n): [] for n in range(1500)}
    holder = str(200_000_000_000_000_000 + 1199)
    others[holder] = [APPROVER_ROLE]
    stack.fake.member_roles.update(others)
    stack.fake.member_update(DISCORD_DORA, [])
    reads = stack.member_reads()

    _, asked = stack.request()
    assert f"discord:{holder}" in asked  # no [people] entry names the account
    pages = stack.fake.rest("GET", f"/guilds/{GUILD}/members")[reads:]
    assert [p.body for p in pages] == [
        {"limit": "1000"},
        {"limit": "1000", "after": sorted(stack.fake.member_roles, key=int)[999]},
    ]
