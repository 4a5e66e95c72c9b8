"""The audit key at a start: the one trail of a process, keyed with QUEUEBOT_AUDIT_KEY
when it is set, and the check every process that writes audit events runs before it
changes anything."""

from __future__ import annotations

import logging

from sqlalchemy.ext.asyncio import AsyncEngine

from services.audit import AuditTrail
from services.config import Config
from services.db import reading

log = logging.getLogger("queuebot")

UNKEYED = (
    "QUEUEBOT_AUDIT_KEY is not set: the audit trail is tamper-evident only against people "
    "without access to queuebot's database (see docs/audit.md)"
)


def audit_trail(config: Config) -> AuditTrail:
    """The one audit trail of a process, keyed with QUEUEBOT_AUDIT_KEY when it is set."""
    return AuditTrail(key=config.env.audit_key)


async def check_audit_key(engine: AsyncEngine, audit: AuditTrail, *, announce: bool) -> None:
    """Refuse to start, before anything is changed, with a key that cannot extend the
    trail: none for a keyed trail (``AuditKeyMissing``, exit 3) or another key than it was
    written with (``AuditKeyMismatch``, exit 2). Every process that writes audit events
    runs this one check (``build_app``); ``announce`` warns when the trail is unkeyed."""
    async with reading(engine) as conn:
        await audit.require_key(conn)
    if announce and not audit.keyed:
        log.warning(UNKEYED)
