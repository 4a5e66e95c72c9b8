"""A person's Slack App Home: how long it takes to read their board and render it to the
view queuebot publishes, on PostgreSQL, with 50 change requests pending, 10 plans active
and 5 incidents open in a database in use.

The database is bench.board's (``qb_bench_home_<pid>_<random>``, dropped at the end):
the same queues, the same ``--pending`` requests (four in five waiting for bob's
approval), ``--plans`` plans, ``--incidents`` incidents, history and fourteen days of
counts, built the same way. It times, ``--runs`` times after a warm-up, what a refresh
does for one person: the board's snapshot read once (``BoardReader.read``, every queue's
dead letters counted again through a read gate that keeps nothing), bob's board in words
as his App Home shows it (``commands/home.py``: his standing, his right to read it, his
board), the Home tab's view (``bot/slack/home.py``), its JSON and its digest; and,
separately, the words and view alone for a person more (a refresh reads once for every
App Home it publishes). Prints p50, p95, p99 and max, the view's size and blocks.

Target: p95 <= 50 ms (read and rendered).

    .venv/bin/python -m bench.home [--url ADMIN_URL] [--runs 200] [--pending 50] [--plans 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence

from bench.board import build, parse_args, queues
from bench.kit.changes import wire
from bench.kit.cli import exit_with
from bench.kit.figures import judge, loadavg, percentile, spread
from bench.kit.scratch import scratch
from bot.slack.home import home_view
from commands.deps import Deps
from commands.home import home_words
from services.board import BoardReader
from services.board.messages import digest
from services.config import AccessConfig
from services.db import create_engine
from services.estate.estate import Estate
from services.people import Directory, Person
from services.reads.gate import ReadGate
from services.reads.service import QueueReads

DB = "qb_bench_home"
TARGET_P95_MS = 50.0
WARMUP = 5
BOB = Person("bob", frozenset({"operator", "approver"}), slack="U0BOB")


async def measure(url: str, args: argparse.Namespace) -> tuple[list[float], list[float]]:
    """Each run's read-and-render of bob's home, and each run's words and view alone."""
    engine = create_engine(url)
    try:
        configured = queues(max(args.plans, 2))
        estate = Estate(engine=engine, queues=configured)
        services = wire(engine, configured, estate=estate)
        reads = QueueReads(estate, gate=ReadGate(fresh_for=0.0))
        reader = BoardReader(engine, reads, services.changes.kinds, estate.clock)
        deps = Deps(
            reads=reads,
            changes=services.changes,
            plans=services.plans,
            directory=Directory([BOB]),
            access=AccessConfig(),
            board=reader,
        )

        async def home() -> tuple[str, str]:
            snapshot = await reader.read()
            message = await home_words(deps, snapshot, "slack", "U0BOB")
            return json.dumps(home_view(message)), digest(message)

        view, _ = await home()
        blocks = json.loads(view)["blocks"]
        print(
            f"bob's home: {len(blocks)} blocks, {len(view):,} characters of JSON, "
            f"{sum(1 for b in blocks if b['type'] == 'actions')} rows of buttons"
        )
        for _ in range(WARMUP):
            await home()
        homes: list[float] = []
        for _ in range(args.runs):
            started = time.perf_counter()
            await home()
            homes.append(time.perf_counter() - started)
        snapshot = await reader.read()
        words: list[float] = []
        for _ in range(args.runs):
            started = time.perf_counter()
            message = await home_words(deps, snapshot, "slack", "U0BOB")
            json.dumps(home_view(message))
            digest(message)
            words.append(time.perf_counter() - started)
        return homes, words
    finally:
        await engine.dispose()


async def run(args: argparse.Namespace) -> int:
    print(f"load average {loadavg()}")
    with scratch(args.url, DB) as (_, url):
        await build(url, args)
        homes, words = await measure(url, args)
    p95 = percentile(homes, 0.95) * 1000
    print(f"home (read and rendered to the view), {len(homes)} runs: {spread(homes)}")
    print(f"a person more (words, view and digest of one snapshot): {spread(words)}")
    print(f"load average {loadavg()}")
    return judge(
        [(f"p95 {p95:.1f} ms <= {TARGET_P95_MS:.0f} ms", p95 <= TARGET_P95_MS)],
        args.smoke,
        f"the App Home of a person with {args.pending} pending requests, {args.plans} plans "
        f"and {args.incidents} incidents",
    )


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(run(parse_args(argv, __doc__)))


if __name__ == "__main__":
    exit_with(main)
