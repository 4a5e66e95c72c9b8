"""The /incident group: its spellings, its help and /incident runbooks through the router
(commands/catalog/incident.py, commands/parser.py, commands/handlers/runbooks.py)."""

from __future__ import annotations

import pytest

from bot.render_text import render_message
from commands.catalog import CATALOG, find_spec, group_specs, spec_for
from commands.context import Invocation
from commands.deps import Deps
from commands.model import HandLead, Help, Runbooks, Whois
from commands.parser import GROUPS, parse, parse_line
from commands.router import Router
from services.config import AccessConfig, Role
from services.errors import ConfigError, NotFound, PermissionDenied, UsageError
from services.people import Directory
from services.runbooks import RunbookLibrary
from tests.helpers.people import ALICE_APPROVER_ON_SLACK, DORA_DUTY_ON_SLACK
from tests.unit.test_handlers import FakeReads, NoChanges, NoPlans

DIRECTORY = Directory([ALICE_APPROVER_ON_SLACK, DORA_DUTY_ON_SLACK])
ROLES: dict[str, Role] = {"operations duty officer": "duty-officer", "service on-call": "operator"}


def router(
    *,
    roles: dict[str, Role] | None = None,
    library: RunbookLibrary | None = None,
    loaded: bool = True,
    access: AccessConfig | None = None,
) -> Router:
    return Router(
        Deps(
            reads=FakeReads(),
            changes=NoChanges(),
            plans=NoPlans(),
            directory=DIRECTORY,
            access=access or AccessConfig(),
            runbooks=(library or RunbookLibrary.load()) if loaded else None,
            roles=ROLES if roles is None else roles,
        )
    )


def who(account: str) -> Invocation:
    return Invocation(
        person=DIRECTORY.by_account("slack", account), platform="slack", account=account
    )


async def answer(line: str, account: str = "U0ALICE", **kwargs: object) -> str:
    reply = await router(**kwargs).handle_line(line, who(account))  # type: ignore[arg-type]
    return render_message(reply.message)


# ---------------------------------------------------------------------------------------
# Spellings


def test_incident_is_a_command_group() -> None:
    assert GROUPS == ("queue", "incident")
    assert [s.name for s in group_specs("incident")] == [
        "help",
        "runbooks",
        "whois",
        "declare",
        "lead",
        "notify",
        "status",
        "timeline",
        "step",
        "validate",
        "resolve",
        "export",
    ]
    roles = {s.name: s.role for s in group_specs("incident")}
    # declaring and taking the lead are checked against the runbook's authority, by
    # person, in their handlers
    assert roles == {
        "help": "viewer", "runbooks": "viewer", "whois": "viewer", "declare": "viewer",
        "lead": "viewer",
        "notify": "operator", "status": "viewer", "timeline": "viewer", "step": "operator",
        "validate": "operator", "resolve": "operator", "export": "viewer",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("/incident runbooks", Runbooks()),
        ("/incident runbooks gd:queue-loss", Runbooks(scenario="gd:queue-loss")),
        ("/incident runbooks --share", Runbooks(share=True)),
        ("/incident whois", Whois()),
        ("/incident whois rota:prod-ops --share", Whois(rota="rota:prod-ops", share=True)),
        ('/incident whois "operations duty officer"', Whois(rota="operations duty officer")),
        ("/incident", Help(group="incident")),
        ("/incident help", Help(group="incident")),
        ("/incident help runbooks", Help(topic="runbooks", group="incident")),
        ("/incident runbooks --help", Help(topic="runbooks", group="incident")),
        ("/queue help", Help(group="queue")),
        ("incident lead bob", HandLead(person="bob")),
        ("/incident lead @bob --incident INC-3", HandLead(person="@bob", incident="INC-3")),
        ("/incident lead <@U0BOB|bob>", HandLead(person="<@U0BOB|bob>")),
        ("/incident lead <@!100000000000000002>", HandLead(person="<@!100000000000000002>")),
        ("/incident lead slack:U0STRANGER1", HandLead(person="slack:U0STRANGER1")),
    ],
)
def test_incident_lines_parse(line: str, expected: object) -> None:
    assert parse_line(line) == expected


@pytest.mark.parametrize("person", ["<!channel>", "<@U0BOB", "bob,alice", "<#C0OPS>", "'x y'"])
def test_lead_takes_one_person(person: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_line(f"/incident lead {person}")
    assert "is not a person: name one of [people] (bob), or mention them" in info.value.message
    assert info.value.usage == "/incident lead PERSON [--incident INC-N]"


def test_each_group_has_its_own_help_spec() -> None:
    assert spec_for(Help(group="incident")) is find_spec("incident", "help")
    assert spec_for(Help()) is find_spec("queue", "help")
    assert spec_for(Runbooks()) is find_spec("incident", "runbooks")
    assert {s.group for s in CATALOG if s.name == "help"} == set(GROUPS)


def test_an_unknown_incident_command_names_the_group_and_its_commands() -> None:
    with pytest.raises(UsageError) as info:
        parse("incident", "runbok")
    assert info.value.message == (
        "unknown command /incident runbok. Did you mean /incident runbooks? Commands: help, "
        "runbooks, whois, declare, lead, notify, status, timeline, step, validate, resolve, "
        "export."
    )
    assert info.value.usage == "/incident help"


# ---------------------------------------------------------------------------------------
# Help


async def test_incident_help_explains_runbooks() -> None:
    text = await answer("/incident help runbooks")
    assert "== /incident runbooks ==" in text
    assert "Usage: /incident runbooks [SCENARIO] [--share]" in text
    assert "Example: /incident runbooks gd:queue-loss" in text
    assert "role" not in text.split("Example")[1]  # a read: no role needed


async def test_incident_help_for_an_unknown_topic_names_the_incident_commands() -> None:
    with pytest.raises(UsageError) as info:
        await answer("/incident help triage")
    assert info.value.message == (
        "no command /incident triage; commands: help, runbooks, whois, declare, lead, notify, "
        "status, timeline, step, validate, resolve, export"
    )
    assert info.value.usage == "/incident help"


async def test_the_command_list_points_at_the_other_group() -> None:
    text = await answer("/incident help")
    assert "/incident runbooks [SCENARIO] [options]" in text
    assert "/queue triage [options]" not in text and "/queue help" in text


# ---------------------------------------------------------------------------------------
# /incident runbooks


async def test_runbooks_lists_each_with_who_declares_and_who_is_told_when() -> None:
    text = await answer("/incident runbooks")
    assert text.startswith("== Runbooks (3) ==")
    assert "== gd:queue-loss: Queue loss ==\nrunbook:queue-loss, version 1 (shipped" in text
    assert (
        "declared by: operations duty officer (operations duty officer on shift), queuebot "
        "role duty-officer: dora\n"
    ) in text
    assert "detected by: service on-call (queue service on-call), queuebot role operator: " in text
    assert "told: operators within 5 min, actors within 15 min\n" in text
    assert "restore order: dep:job-queue, then dep:job-worker-pool" in text
    assert "== gd:failed-jobs-accumulating: Failed jobs accumulating ==" in text
    assert "== gd:dlq-redrive: Dead-letter redrive ==" in text


async def test_runbooks_say_which_hold_redrives_and_until_what() -> None:
    text = await answer("/incident runbooks")
    queue_loss = text.split("== gd:queue-loss: Queue loss ==")[1].split("\n== ")[0]
    assert "redrives: held on its queue until dep:job-queue is restored" in queue_loss
    # the other two hold none, and say so
    assert text.count("redrives: none held (checked as usual)") == 2


async def test_an_unmapped_authority_says_how_to_map_it() -> None:
    text = await answer("/incident runbooks", roles={})
    assert (
        "declared by: operations duty officer (operations duty officer on shift): not mapped "
        'to a queuebot role; add [roles] "operations duty officer" = "ROLE"'
    ) in text


async def test_a_mapped_role_nobody_holds_is_said() -> None:
    roles: dict[str, Role] = {"operations duty officer": "approver"}
    library = RunbookLibrary.load()
    reply = await router(roles=roles, library=library).handle_line(
        "/incident runbooks", who("U0DORA")
    )
    assert "queuebot role approver: alice\n" in render_message(reply.message)
    roles = {"Operations  Duty Officer": "duty-officer"}  # case and spacing do not matter
    text = await answer("/incident runbooks", roles=roles)
    assert "queuebot role duty-officer: dora" in text


async def test_one_runbook_in_full() -> None:
    text = await answer("/incident runbooks gd:queue-loss")
    assert text.startswith("== gd:queue-loss: Queue loss ==")
    assert (
        "operators, within 5 min, over dep:notification-channel: {incident}: the queue-loss "
        "runbook is running, led by {lead}"
    ) in text
    assert "actors, within 15 min, over dep:notification-channel: " in text
    assert "count-restored (the queue holds the job count written down before the stop)" in text
    assert "assumes healthy: dep:primary-store, dep:blob-store" in text
    assert "fencing: none (nothing is promoted)" in text


async def test_an_unknown_scenario_lists_the_known_ones() -> None:
    with pytest.raises(NotFound) as info:
        await answer("/incident runbooks gd:nope")
    assert "known scenarios: gd:dlq-redrive, gd:failed-jobs-accumulating, gd:queue-loss" in str(
        info.value
    )


async def test_runbooks_is_a_read_for_unknown_users_too() -> None:
    text = await answer("/incident runbooks", account="U0STRANGER")
    assert "Runbooks (3)" in text
    with pytest.raises(PermissionDenied):
        await answer("/incident runbooks --share", account="U0STRANGER")
    with pytest.raises(PermissionDenied):
        await answer(
            "/incident runbooks", account="U0STRANGER", access=AccessConfig(unknown_users="deny")
        )


async def test_shared_runbooks_are_posted_for_the_channel() -> None:
    reply = await router().handle_line("/incident runbooks --share", who("U0ALICE"))
    assert reply.ephemeral is False


async def test_a_process_without_runbooks_says_so() -> None:
    with pytest.raises(ConfigError) as info:
        await answer("/incident runbooks", loaded=False)
    assert str(info.value) == "this queuebot process loaded no runbooks"


async def test_each_group_help_lists_its_own_commands() -> None:
    """/incident help lists the /incident commands, not every /queue one; /queue help
    lists its own and points at /incident help."""
    incident = await answer("/incident help")
    for spec in group_specs("incident"):
        assert spec.short_usage in incident
    assert "/queue redrive" not in incident and "/queue dlq" not in incident
    queue = await answer("/queue help")
    assert "/queue redrive" in queue and "/incident declare" not in queue
    assert "/incident help" in queue
