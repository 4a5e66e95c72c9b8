"""``queuebot housekeep [--dry-run] [--only A,B]``: one housekeeping run (the worker-queue
retry worker, Parts A-F), for a systemd timer or cron (deploy/systemd/). Prints what it
changed (or, dry, what it would change); exit 0 also when another run held the lock and
this one skipped (it says so). The alerts it raises are posted by the serving process."""

from __future__ import annotations

import argparse

from bot.bootstrap import build_app
from services.audit import Actor
from services.config import Config
from services.db import same_database
from services.errors import PreconditionFailed
from services.housekeeping.run import parse_only


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
