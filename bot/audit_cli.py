"""``queuebot audit verify`` and ``queuebot audit head``: the audit trail checked in one
snapshot of queuebot's database, against the anchors given."""

from __future__ import annotations

import argparse
import sys

from bot.audit_key import UNKEYED, audit_trail
from bot.exits import EXIT_PROBLEM
from services.audit import Anchor, Verification
from services.config import Config
from services.db import create_engine, reading
from services.db.migrate import require_newest
from services.errors import QueuebotError


def _anchors(args: argparse.Namespace) -> list[Anchor]:
    texts: list[str] = list(args.anchor)
    if args.anchor_file is not None:
        try:
            lines = args.anchor_file.read_text("utf-8").splitlines()
        except OSError as exc:
            raise QueuebotError(f"cannot read {args.anchor_file}: {exc.strerror}") from exc
        texts += [t for t in (line.strip() for line in lines) if t and not t.startswith("#")]
    return [Anchor.parse(t) for t in texts]


async def _checked_trail(
    config: Config, anchors: list[Anchor]
) -> tuple[Verification, Anchor | None]:
    """Verify the trail (and read its head) in one snapshot of queuebot's database."""
    engine = create_engine(config.env.state_url, settings=config.file.database)
    try:
        await require_newest(engine)
        trail = audit_trail(config)
        async with reading(engine) as conn:
            if conn.dialect.name == "postgresql":
                await conn.execution_options(isolation_level="REPEATABLE READ")
            result = await trail.verify(conn, anchors=anchors)
            return result, await trail.head(conn)
    finally:
        await engine.dispose()


def _broken(result: Verification) -> int:
    where = f" at event {result.first_bad}" if result.first_bad is not None else ""
    print(
        f"audit trail BROKEN{where}: {result.problem} "
        f"({result.checked} event(s) {'before it ' if where else ''}verified)",
        file=sys.stderr,
    )
    return EXIT_PROBLEM


async def verify(config: Config, args: argparse.Namespace) -> int:
    anchors = _anchors(args)
    result, _ = await _checked_trail(config, anchors)
    if not result.ok:
        return _broken(result)
    unkeyed = result.checked - result.keyed
    print(
        f"audit trail intact: {result.checked} event(s) verified ({result.keyed} keyed, "
        f"{unkeyed} unkeyed), {result.anchors} of {len(anchors)} anchor(s) held, "
        f"{result.records} request(s), approval(s) and plan(s) have their events, "
        f"{result.incidents} incident(s) match theirs"
    )
    if config.env.audit_key is None:
        print(f"note: {UNKEYED}", file=sys.stderr)
    return 0


async def head(config: Config) -> int:
    result, head = await _checked_trail(config, [])
    if not result.ok:
        return _broken(result)
    if head is None:
        print("the audit trail is empty: nothing to anchor yet", file=sys.stderr)
        return 0
    print(head)
    return 0
