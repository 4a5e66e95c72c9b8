"""Roles, teams and rotas from groups (services/access), with a clock the test moves and
a reader that answers what the test says: what each person is granted, when a change is
seen, and what happens when a source stops answering."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from services.access import Membership, Source, SourceUnavailable, Standings, shift
from services.config import FileConfig, ScheduleConfig
from services.people import Directory

T = TypeVar("T")
T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class Groups:
    """A platform's groups: members by group id; ``down`` makes every read fail."""

    def __init__(self, **groups: list[str]) -> None:
        self.groups = {k: frozenset(v) for k, v in groups.items()}
        self.down = False
        self.reads = 0

    async def members(self, source: Source) -> frozenset[str]:
        self.reads += 1
        if self.down:
            raise ConnectionError("Slack did not answer")
        return self.groups.get(source.id, frozenset())


FILE = {
    "people": {
        "alice": {"slack": "U0ALICE", "roles": ["operator"]},
        "bob": {"slack": "U0BOB", "discord": "100000000000000002"},
        "carol": {"slack": "U0CAROL"},
    },
    "rotas": {
        "rota:prod-ops": {"slack_usergroup": "S0PRODOPS"},
        "rota:weekly": {
            "schedule": {"start": "2026-12-07T09:00:00Z", "every": "7d", "people": ["alice", "bob"]}
        },
    },
    "roles": {
        "operations duty officer": "duty-officer",
        "approver": {"slack_usergroups": ["S0APPROVE"], "discord_roles": ["200000000000000001"]},
        "duty-officer": {"rotas": ["rota:prod-ops"]},
    },
    "teams": {"billing": {"slack_usergroups": ["S0BILLING"], "people": ["carol"]}},
    "queues": {"payments": {"profile": "worker_queue", "owners": ["billing"]}},
}


def standings(groups: Groups, clock: Clock) -> Standings:
    file = FileConfig.model_validate(FILE)
    return Standings(
        file, Directory.from_config(file), Membership({"slack": groups}, clock=clock), clock
    )


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def test_a_group_member_holds_the_role_and_says_on_what_it_rests() -> None:
    clock, groups = Clock(), Groups(S0APPROVE=["U0BOB"], S0PRODOPS=["U0BOB"], S0BILLING=[])
    st = standings(groups, clock)
    bob = run(st.standing(st.directory.by_name("bob"), platform="slack", account="U0BOB"))
    assert bob is not None
    assert bob.has("approver") and bob.has("duty-officer")
    assert "rota:prod-ops" in bob.rotas
    assert {
        "gives": "role approver",
        "source": "Slack user group S0APPROVE",
        "read_at": T0.isoformat(),
    } in bob.basis()
    alice = run(st.standing(st.directory.by_name("alice"), platform="slack", account="U0ALICE"))
    assert alice is not None and not alice.has("approver") and alice.has("operator")
    # the schedule's first shift is alice's
    assert "rota:weekly" in alice.rotas


def test_a_removal_is_seen_within_a_minute_or_at_once_on_an_event() -> None:
    clock, groups = Clock(), Groups(S0APPROVE=["U0BOB"])
    st = standings(groups, clock)
    bob = st.directory.by_name("bob")

    def approver() -> bool:
        found = run(st.standing(bob, platform="slack", account="U0BOB"))
        return found is not None and found.has("approver")

    assert approver()
    groups.groups["S0APPROVE"] = frozenset()
    clock.now += timedelta(seconds=59)
    assert approver(), "within the minute the read is kept"
    clock.now += timedelta(seconds=2)
    assert not approver(), "past a minute the group is read again"
    groups.groups["S0APPROVE"] = frozenset({"U0BOB"})
    assert not approver()
    st.membership.forget(Source("slack_usergroup", "S0APPROVE"))  # subteam_members_changed
    assert approver()


def test_a_source_down_is_used_stale_for_ten_minutes_then_grants_nothing() -> None:
    clock, groups = Clock(), Groups(S0APPROVE=["U0BOB"])
    st = standings(groups, clock)
    bob = st.directory.by_name("bob")
    assert run(st.standing(bob, platform="slack", account="U0BOB")).has("approver")  # type: ignore[union-attr]
    groups.down = True
    clock.now += timedelta(minutes=5)
    stale = run(st.standing(bob, platform="slack", account="U0BOB"))
    assert stale is not None and stale.has("approver")
    assert any("did not answer" in n and "S0APPROVE" in n for n in stale.notes)
    assert any(g.get("stale") for g in stale.basis())
    clock.now += timedelta(minutes=5, seconds=1)
    gone = run(st.standing(bob, platform="slack", account="U0BOB"))
    assert gone is not None and not gone.has("approver")
    assert any(n.startswith("Slack user group S0APPROVE cannot be read") for n in gone.notes)


def test_never_read_and_failing_is_refused_at_once() -> None:
    clock, groups = Clock(), Groups()
    groups.down = True
    membership = Membership({"slack": groups}, clock=clock)
    with pytest.raises(SourceUnavailable, match="Slack user group S0X cannot be read"):
        run(membership.read(Source("slack_usergroup", "S0X")))


def test_no_token_grants_nothing_and_names_the_missing_token() -> None:
    clock = Clock()
    file = FileConfig.model_validate(FILE)
    st = Standings(file, Directory.from_config(file), Membership({}, clock=clock), clock)
    bob = run(st.standing(st.directory.by_name("bob"), platform="slack", account="U0BOB"))
    assert bob is not None and not bob.has("approver")
    assert any("SLACK_BOT_TOKEN is not set" in n for n in bob.notes)


def test_a_burst_reads_each_group_once() -> None:
    clock, groups = Clock(), Groups(S0APPROVE=["U0BOB"])
    st = standings(groups, clock)
    bob = st.directory.by_name("bob")

    async def burst() -> None:
        await asyncio.gather(
            *(st.standing(bob, platform="slack", account="U0BOB") for _ in range(50))
        )

    run(burst())
    assert st.membership.calls[Source("slack_usergroup", "S0APPROVE")] == 1


def test_a_discord_role_on_the_interaction_needs_no_read() -> None:
    clock, groups = Clock(), Groups()
    st = standings(groups, clock)
    found = run(
        st.standing(
            None,
            platform="discord",
            account="300000000000000003",
            chat_roles=frozenset({"200000000000000001"}),
        )
    )
    assert found is not None and found.name == "discord:300000000000000003"
    assert found.has("approver")
    nobody = run(st.standing(None, platform="discord", account="3", chat_roles=frozenset()))
    assert nobody is None  # no group names them: an unknown account, as before


def test_owners_and_holders() -> None:
    clock, groups = Clock(), Groups(S0BILLING=["U0BOB"], S0PRODOPS=["U0CAROL", "U0NOBODY"])
    st = standings(groups, clock)
    assert st.queue_owners("payments") == ("billing",)
    assert run(st.owner_names(["billing"])) == ["carol", "bob"]
    held = run(st.holders("ROTA:Prod-Ops"))
    assert held is not None and held.now == ("carol", "slack:U0NOBODY")
    assert held.mention == "<!subteam^S0PRODOPS>"
    weekly = run(st.holders("rota:weekly"))
    assert weekly is not None and weekly.now == ("alice",) and weekly.next == "bob"
    assert weekly.until == T0 + timedelta(days=7)


def test_the_schedule_hands_over_at_its_boundary() -> None:
    schedule = ScheduleConfig.model_validate(
        {"start": "2026-12-07T09:00:00Z", "every": "7d", "people": ["alice", "bob", "carol"]}
    )
    before = shift(schedule, T0 - timedelta(seconds=1))
    assert before.primary is None and before.secondary == "alice" and before.until == T0
    assert shift(schedule, T0).primary == "alice"
    last = shift(schedule, T0 + timedelta(days=7) - timedelta(microseconds=1))
    assert (last.primary, last.secondary) == ("alice", "bob")
    handed = shift(schedule, T0 + timedelta(days=7))
    assert (handed.primary, handed.secondary) == ("bob", "carol")
    assert shift(schedule, T0 + timedelta(days=21)).primary == "alice"


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"rotas": {"rota:x": {}}}, "exactly one source"),
        (
            {"rotas": {"rota:x": {"slack_usergroup": "S0A", "discord_role": "200000000000000001"}}},
            "this one gives slack_usergroup and discord_role",
        ),
        ({"roles": {"approver": {"rotas": ["rota:none"]}}}, "'rota:none' is not under [rotas]"),
        ({"roles": {"approver": {"people": ["zed"]}}}, "'zed' is not under [people]"),
        (
            {"queues": {"q": {"profile": "worker_queue", "owners": ["ops"]}}},
            "team 'ops' is not under [teams]",
        ),
        (
            {
                "rotas": {
                    "rota:x": {
                        "schedule": {
                            "start": "2026-12-07T09:00:00",
                            "every": "7d",
                            "people": ["alice"],
                        }
                    }
                }
            },
            "with its zone",
        ),
        (
            {
                "rotas": {
                    "rota:x": {
                        "schedule": {
                            "start": "2026-12-07T09:00:00Z",
                            "every": "7 days",
                            "people": ["alice"],
                        }
                    }
                }
            },
            'such as "7d"',
        ),
        ({"roles": {"approver": {}}}, "name at least one of"),
        ({"rotas": {"rota:x": {"slack_usergroup": "U0ALICE"}}}, "a Slack user group id"),
    ],
)
def test_a_mistake_in_the_groups_is_named(change: dict[str, object], said: str) -> None:
    data = {"people": {"alice": {"slack": "U0ALICE"}}, **change}
    with pytest.raises(ValueError, match=None) as raised:
        FileConfig.model_validate(data)
    assert said in str(raised.value)
