"""``queuebot housekeep [--dry-run] [--only A,B]``: one housekeeping run (the worker-queue
retry worker, Parts A-F), for a systemd timer or cron (deploy/systemd/). Prints what it
changed (or, dry, what it would change); exit 0 also when another run held the lock and
this one skipped (it says so). The alerts it raises are posted by the serving process."""

from __future__ import annotations

import argparse
from typing import Any

from bot.bootstrap import build_app
from services.audit import Actor
from services.config import Config
from services.db import same_database
from services.errors import PreconditionFailed
from services.housekeeping.run import parse_only

DESCRIPTION = (
    "Run the worker-queue retry worker once: cancel duplicate queued rows (A), retry "
    "failed rows with backoff and retire retry-exhausted ones once a human is told (B), "
    "delete old stale duplicates (C), release stuck claims (D), requeue trivial failures "
    "(E), re-route away from nodes running out of memory (F). Message queues are reported "
    "on, never changed. Thresholds come from [housekeeping]."
)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``housekeep`` on the CLI's subcommands."""
    housekeep = sub.add_parser(
        "housekeep",
        help="run the retry worker once (for a timer); --dry-run says what it would do",
        description=DESCRIPTION,
        parents=[common],
    )
    housekeep.add_argument(
        "--dry-run", action="store_true", help="print what a run would change; change nothing"
    )
    housekeep.add_argument(
        "--only", metavar="A,B", default=None, help="only these parts (A-F, comma-separated)"
    )


async def run(config: Config, args: argparse.Namespace) -> int:
    only = parse_only(args.only)
    if not same_database(config.env.state_url, config.env.estate_url):
        raise PreconditionFailed(
            "housekeeping changes rows, and a change and its audit event must commit in one "
            "transaction: point QUEUEBOT_DATABASE_URL at the queue's database and unset "
            "QUEUEBOT_QUEUE_DATABASE_URL (see `queuebot config check`)"
        )
    # the tables at the newest revision and the audit key checked against the trail,
    # before anything is changed or anyone told
    app = await build_app(config, migrate=False, announce=False)
    try:
        assert app.housekeeper is not None  # one database: it is wired
        report = await app.housekeeper.run(
            actor=Actor.system("housekeeping"), dry_run=args.dry_run, only=only
        )
    finally:
        await app.close()
    print("\n".join(report.lines()))
    return 0
