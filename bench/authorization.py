"""Authorization with roles from groups: what resolving each command's person through
Slack user groups, rotas and a team adds to a command with the membership cache warm, and
how often the groups are read under a steady 50 commands/s.

Builds the demo estate in a scratch SQLite file and, in this one process, the app twice
as serve builds it (``build_app``), on one clock the bench moves: once with roles from
[people] alone, once with the same people's roles from groups (3 Slack user groups, 2
rotas, one of them a built-in schedule, and a team owning a queue), its Slack reader
pointed at the local fake Slack (``testkit/fake_slack.py``) over HTTP. It then runs the
same commands through both routers as Slack's adapter hands them over, alternating
which goes first, from five accounts (four people and one no [people] entry names) in a
fixed mix of ``/queue help``, ``/queue pending`` and a ``/queue requeue`` that is refused
(by role, or past it by its check: the row is done).

The clock moves ``1 / --rate`` s (default 50 commands/s) before each pair, over
``--seconds`` of simulated time (default 120 s), so the membership cache expires as it
would in a minute of real use. It measures each command's time on the clock (the
commands during which a group was read from the fake are counted apart: the cache was
not warm for them), and the standing alone (``Standings.standing``) for each config.

Targets: the groups' p99 per command, cache warm, at most 5 ms over [people]'s; over at
least 60 s of simulated time, at most one ``usergroups.users.list`` call per group per
minute (calls per group <= whole minutes + 1, and no two within 60 s).

    .venv/bin/python -m bench.authorization
    .venv/bin/python -m bench.authorization --seconds 300 --rate 50

Exit status: 0 when every target is met (or with ``--smoke``, which judges nothing), 1
when one is missed, 2 on error, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.kit.cli import BenchParser, exit_with
from bench.kit.figures import judge, loadavg, percentile
from bench.kit.serve import build_demo
from bot.bootstrap import App, build_app
from bot.boundary import answer
from bot.readers import attach_slack_reader
from bot.slack.app import PooledWebClient
from commands.context import Invocation
from services.config import load_config
from testkit.fake_slack import FakeSlack

TARGET_ADDED_MS = 5.0
MINUTE = 60.0
USERS = ("U0ALICE", "U0BOB", "U0CAROL", "U0DORA", "U0NOBODY")  # the last: in no [people]
COMMANDS = (
    "/queue help",
    "/queue pending",
    # refused: to dora and the stranger by role; to the operators by its check (row 1 is done)
    '/queue requeue 1 --queue workers --reason "bench"',
)
GROUPS = {  # Slack user group -> its members
    "S0OPS": ["U0ALICE", "U0BOB", "U0CAROL"],
    "S0APPROVE": ["U0BOB", "U0CAROL"],
    "S0PRODOPS": ["U0DORA"],
}
QUEUES = """
[queues.clips]
profile = "message_job"

[queues.workers]
profile = "worker_queue"
{owners}
[alerts.detectors.queue_loss]
enabled = false
[alerts.detectors.dead_letter_growth]
enabled = false
[alerts.detectors.failed_actionable]
enabled = false
"""
PEOPLE = """
[people.alice]
slack = "U0ALICE"
roles = {alice}

[people.bob]
slack = "U0BOB"
roles = {bob}

[people.carol]
slack = "U0CAROL"
roles = {carol}

[people.dora]
slack = "U0DORA"
roles = {dora}
"""
# roles from [people] alone
PEOPLE_ONLY = QUEUES.format(owners="") + PEOPLE.format(
    alice='["operator"]',
    bob='["operator", "approver"]',
    carol='["operator", "approver"]',
    dora='["duty-officer"]',
)
# the same roles from 3 Slack user groups and 2 rotas; a team owns workers
FROM_GROUPS = (
    QUEUES.format(owners='owners = ["platform"]\n')
    + PEOPLE.format(alice="[]", bob="[]", carol="[]", dora="[]")
    + """
[roles.operator]
slack_usergroups = ["S0OPS"]

[roles.approver]
slack_usergroups = ["S0APPROVE"]

[roles.duty-officer]
rotas = ["rota:prod-ops"]

[rotas."rota:prod-ops"]
slack_usergroup = "S0PRODOPS"

[rotas."rota:db-weekly"]
schedule = { start = "2026-11-02T09:00:00Z", every = "7d", people = ["alice", "dora"] }

[teams.platform]
people = ["carol"]
rotas = ["rota:db-weekly"]
"""
)


@dataclass
class Clock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Side:
    """One of the two apps and what was measured of it."""

    name: str
    app: App
    warm: list[float] = field(default_factory=list)  # per command, no group read in it
    cold: list[float] = field(default_factory=list)  # per command that read a group
    standing: list[float] = field(default_factory=list)  # Standings.standing alone
    refused: int = 0

    async def run(self, line: str, user: str) -> tuple[float, bool]:
        """One command as Slack's adapter hands it over: its time, refused or not."""
        inv = Invocation(
            person=self.app.directory.by_account("slack", user),
            platform="slack",
            account=user,
            channel="C0OPS",
        )
        started = time.perf_counter()
        reply = await answer(self.app.router.handle_line(line, inv), correlation_id="b", where="b")
        took = time.perf_counter() - started
        return took, bool(getattr(reply, "error", False))


async def side(
    name: str, config: str, workdir: Path, db_url: str, fake: FakeSlack, clock: Clock
) -> Side:
    path = workdir / f"{name}.toml"
    path.write_text(config)
    environ = {
        "QUEUEBOT_DATABASE_URL": db_url,
        "SLACK_BOT_TOKEN": "xoxb-fake-token",
        "SLACK_API_BASE_URL": fake.api_url,
    }
    app = await build_app(load_config(path, environ=environ), clock=clock, announce=False)
    attach_slack_reader(app.config, app)
    return Side(name, app)


async def close(s: Side) -> None:
    reader = s.app.standings.membership.readers.get("slack") if s.app.standings else None
    client = getattr(reader, "client", None)
    if isinstance(client, PooledWebClient):
        await client.aclose()
    await s.app.close()


def calls(fake: FakeSlack) -> int:
    return sum(fake.group_calls[g] for g in GROUPS)


def gaps_ok(times: list[float]) -> bool:
    """No two reads of a group within a minute of each other (simulated seconds)."""
    return all(b - a >= MINUTE - 1e-9 for a, b in itertools.pairwise(times))


async def measure(args: argparse.Namespace, workdir: Path, db_url: str, fake: FakeSlack) -> int:
    clock = Clock(datetime.now(UTC).replace(microsecond=0))
    start = clock.now
    people = await side("people", PEOPLE_ONLY, workdir, db_url, fake, clock)
    groups = await side("groups", FROM_GROUPS, workdir, db_url, fake, clock)
    sides = (people, groups)
    read_at: dict[str, list[float]] = {g: [] for g in GROUPS}
    try:
        for s in sides:  # warm up: imports, pools, the first read of every group
            for user in USERS:
                for line in COMMANDS:
                    await s.run(line, user)
        step = timedelta(seconds=1 / args.rate)
        total = int(args.seconds * args.rate)
        seen = dict(fake.group_calls)
        print(
            f"{total:,} commands on each side at {args.rate:g}/s over {args.seconds:g} s of "
            f"simulated time; load average {loadavg()}",
            flush=True,
        )
        for i in range(total):
            clock.now += step
            line, user = COMMANDS[i % len(COMMANDS)], USERS[(i // len(COMMANDS)) % len(USERS)]
            for s in sides if i % 2 == 0 else sides[::-1]:
                before = calls(fake)
                took, refused = await s.run(line, user)
                (s.warm if calls(fake) == before else s.cold).append(took)
                s.refused += refused
            for g in GROUPS:
                if fake.group_calls[g] != seen.get(g, 0):
                    read_at[g].append((clock.now - start).total_seconds())
                    seen[g] = fake.group_calls[g]
        for s in sides:  # the standing alone, cache warm: the part that differs
            for n in range(args.standings):
                user = USERS[n % len(USERS)]
                person = s.app.directory.by_account("slack", user)
                assert s.app.standings is not None
                started = time.perf_counter()
                await s.app.standings.standing(person, platform="slack", account=user)
                s.standing.append(time.perf_counter() - started)
    finally:
        for s in sides:
            await close(s)
    return report(args, people, groups, read_at, fake)


def ms(values: Sequence[float], q: float) -> float:
    return percentile(values, q) * 1000 if values else float("nan")


def report(
    args: argparse.Namespace,
    people: Side,
    groups: Side,
    read_at: dict[str, list[float]],
    fake: FakeSlack,
) -> int:
    print()
    for s in (people, groups):
        print(
            f"{s.name:<7} per command, cache warm: p50 {ms(s.warm, 0.5):6.2f} ms  "
            f"p99 {ms(s.warm, 0.99):6.2f} ms  max {ms(s.warm, 1.0):7.2f} ms  "
            f"(n={len(s.warm):,}, refused {s.refused:,})"
        )
        print(
            f"{'':<7} the standing alone:      p50 {ms(s.standing, 0.5):6.3f} ms  "
            f"p99 {ms(s.standing, 0.99):6.3f} ms  (n={len(s.standing):,})"
        )
    if groups.cold:
        print(
            f"groups  per command reading a group: p50 {ms(groups.cold, 0.5):.2f} ms  "
            f"max {ms(groups.cold, 1.0):.2f} ms  (n={len(groups.cold)})"
        )
    added = ms(groups.warm, 0.99) - ms(people.warm, 0.99)
    ratio = ms(groups.warm, 0.99) / ms(people.warm, 0.99)
    print(
        f"authorization added (p99, groups - people): {added:.2f} ms ({ratio:.2f}x); "
        f"p50 {ms(groups.warm, 0.5) - ms(people.warm, 0.5):.2f} ms"
    )
    whole = int(args.seconds // MINUTE)
    print(f"usergroups.users.list calls over {args.seconds:g} s (simulated), warm-up's included:")
    checks: list[tuple[str, bool]] = [
        (
            f"p99 added per command {added:.2f} ms <= {TARGET_ADDED_MS:g} ms (cache warm)",
            added <= TARGET_ADDED_MS,
        ),
    ]
    for g in GROUPS:
        at = ", ".join(f"{t:.2f}" for t in read_at[g]) or "none"
        print(f"  {g:<10} {fake.group_calls[g]} (re-read at {at} s)")
        checks.append(
            (
                f"{g}: {len(read_at[g])} reads in {args.seconds:g} s <= {whole + 1}, none "
                "within a minute of another",
                len(read_at[g]) <= whole + 1 and gaps_ok(read_at[g]),
            )
        )
    checks.append((f"simulated {args.seconds:g} s >= 60 s", args.seconds >= MINUTE))
    checks.append(
        (
            f"the same commands refused on both sides ({people.refused:,}, {groups.refused:,})",
            people.refused == groups.refused,
        )
    )
    return judge(
        checks,
        args.smoke,
        f"groups add <= {TARGET_ADDED_MS:g} ms p99 per command, at most one read per group "
        "per minute",
    )


async def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="qb-bench-auth-") as tmp, FakeSlack().start() as fake:
        workdir = Path(tmp)
        fake.usergroups.update({g: list(m) for g, m in GROUPS.items()})
        db_url = f"sqlite+aiosqlite:///{workdir / 'queuebot.db'}"
        await asyncio.to_thread(build_demo, db_url)
        return await measure(args, workdir, db_url, fake)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = BenchParser(__doc__, url=None)
    parser.size(
        "--seconds", full=120.0, smoke=5.0, type=float, help="simulated seconds of commands"
    )
    parser.add_argument(
        "--rate", type=float, default=50.0, help="commands per simulated second (default 50)"
    )
    parser.size("--standings", full=5000, smoke=200, help="standings resolved alone, per config")
    return parser.read(argv)


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(run(parse_args(argv)))


if __name__ == "__main__":
    exit_with(main)
