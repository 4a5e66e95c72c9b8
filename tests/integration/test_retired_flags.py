"""What a person reads never spells an option the old way (``--error``, ``--type``, dlq's
``--reason R``): the replies, refusals and help of a battery of commands, and what config
check says of each queue, on queuebot's own profiles (SQLite and PostgreSQL, a table with
every column and one without failure_reason or tenants) and on every preset."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.boundary import answer
from bot.render_text import render_message
from commands.context import Invocation
from commands.deps import Deps
from commands.reply import Reply
from commands.router import Router
from services.config import AccessConfig
from services.estate.estate import Estate
from services.people import Directory
from services.reads.gate import ReadGate
from services.reads.service import QueueReads
from tests.helpers.people import ALICE_APPROVER, BOB_APPROVER
from tests.integration.support import Shop
from tests.integration.team_support import Team, dead_letters
from tests.integration.test_presets import ADAPTERS, World, open_world
from tests.retired_flags import retired

HELP = [
    "/queue help",
    "/queue help dlq",
    "/queue help redrive",
    "/queue help cancel",
    "/queue help triage",
    "/queue help show",
    "/incident help",
]
BATTERY = [
    "/queue dlq",
    '/queue dlq --error-like "smtp"',
    "/queue dlq --tenant acme",
    "/queue dlq --failure-reason spawn_oom",
    "/queue dlq --job-type email",
    "/queue dlq --reason spawn_oom",  # the old spellings, still read: the reply renames
    "/queue dlq --type email",
    "/queue triage",
    "/queue triage --type email",
    "/queue stuck",
    '/queue redrive --error-like "smtp" --reason "relay fixed"',
    '/queue redrive --tenant acme --reason "relay fixed"',
    '/queue redrive --failure-reason spawn_oom --reason "relay fixed"',
    '/queue redrive --job-type email --reason "relay fixed"',
    '/queue cancel --failure-reason spawn_oom --reason "orphans"',
    '/queue redrive --all --reason "relay fixed"',
]


def router_over(estate: Estate, changes: object, plans: object) -> Router:
    return Router(
        Deps(
            reads=QueueReads(estate, gate=ReadGate(fresh_for=0.0)),
            changes=changes,  # type: ignore[arg-type]
            plans=plans,  # type: ignore[arg-type]
            directory=Directory([ALICE_APPROVER, BOB_APPROVER]),
            access=AccessConfig(),
        )
    )


async def outputs(router: Router, estate: Estate) -> dict[str, str]:
    """Each line typed, and what a person reads back (a reply or a refusal)."""
    out: dict[str, str] = {}
    lines = HELP + [f"{line} --queue {queue}" for queue in estate.profiles for line in BATTERY]
    for line in lines:
        inv = Invocation(person=ALICE_APPROVER, platform="console", account="alice", channel="ops")
        reply = await answer(router.handle_line(line, inv), correlation_id="t", where="t")
        assert isinstance(reply, Reply)
        out[line] = render_message(reply.message)
    for name, profile in estate.profiles.items():
        async with estate.connect() as conn:
            out[f"config check of {name}"] = "\n".join(await profile.describe(conn))
    return out


def assert_none_retired(said: dict[str, str]) -> None:
    found = [
        f"{line!r}: {hit}"
        for line, text in said.items()
        for hit in retired(
            text, about_triage=line.startswith(("/queue triage", "/queue help triage"))
        )
    ]
    assert not found, "\n".join(found)


async def test_queuebots_own_profiles_say_only_current_names(shop: Shop) -> None:
    router = router_over(shop.estate, shop.changes, shop.plans)
    said = await outputs(router, shop.estate)
    assert "--type is now spelled --job-type" in said["/queue dlq --type email --queue workers"]
    assert_none_retired(said)


async def test_a_table_without_failure_reason_or_tenants_says_only_current_names(
    team: Team,
) -> None:
    await dead_letters(team, 3)
    router = router_over(team.estate, team.services.changes, team.services.plans)
    assert_none_retired(await outputs(router, team.estate))


@pytest.fixture(params=ADAPTERS, ids=lambda a: a.profile_class.name)
async def world(request: pytest.FixtureRequest, pg_url: str) -> AsyncIterator[World]:
    async for w in open_world(pg_url, request.param):
        yield w


@pytest.mark.postgres
async def test_every_preset_says_only_current_names(world: World) -> None:
    router = router_over(world.estate, world.services.changes, world.services.plans)
    assert_none_retired(await outputs(router, world.estate))
