"""Who is acting, from where: every handler receives one ``Invocation``."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from services.ledger import Claim
from services.people import Person


def new_correlation_id() -> str:
    return secrets.token_hex(6)


@dataclass(frozen=True)
class Invocation:
    person: Person | None  # None: a chat account no [people] entry names
    platform: str  # "slack", "discord", "console"
    account: str  # the platform's user id (console: the person's name or the OS user)
    channel: str | None = None
    thread: str | None = None
    correlation_id: str = field(default_factory=new_correlation_id)
    # The platform delivery this came in, claimed in the delivery ledger: a change marks it
    # done in its own transaction, so a redelivery after a crash acts exactly once.
    delivery: Claim | None = None
    # the Discord roles the interaction carried (member.roles): fresh from Discord itself,
    # they decide Discord-role grants without a read (None: not a Discord interaction)
    chat_roles: frozenset[str] | None = None
