"""What seals an audit event, how a seal is checked, and the values ``verify`` reports.

Each event is sealed over its content and the previous event's seal, so an edited,
deleted, inserted or reordered event breaks the chain. Two schemes:

- ``sha256``: SHA-256 of the canonical JSON. Anyone who can write the table can recompute
  it, so it shows tampering only to people without database access. Events written
  without a key, and every event written before keys existed, carry it.
- ``hmac-sha256``: HMAC-SHA256 with ``QUEUEBOT_AUDIT_KEY`` over the same JSON plus the
  scheme's name. Without the key nobody can recompute it.

The key lives only in the environment; the database never holds it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.errors import ConfigError, UsageError
from services.jsonable import update_canonical

GENESIS = "0" * 64
SHA256 = "sha256"
HMAC_SHA256 = "hmac-sha256"
SCHEMES = (SHA256, HMAC_SHA256)
KEY_VARIABLE = "QUEUEBOT_AUDIT_KEY"

_HASHED = (
    "occurred_at",
    "action",
    "actor_person",
    "actor_platform",
    "actor_account",
    "subject",
    "queue",
    "incident",
    "reason",
    "evidence",
    "details",
    "prev_hash",
)
_ANCHOR = re.compile(r"^([1-9][0-9]{0,18}):([0-9a-f]{64})\Z")


@dataclass(frozen=True)
class Actor:
    """Who did it: the person (when known) and the platform account used."""

    person: str | None
    platform: str
    account: str

    @classmethod
    def system(cls, what: str) -> Actor:
        return cls(person=None, platform="queuebot", account=what)


def event_hash(row: Mapping[Any, Any]) -> str:
    """The unkeyed seal: SHA-256 over the event's canonical JSON, which includes the
    previous event's seal."""
    h = hashlib.sha256()
    update_canonical(h, {k: row[k] for k in _HASHED})
    return h.hexdigest()


def event_mac(row: Mapping[Any, Any], key: bytes) -> str:
    """The keyed seal: HMAC-SHA256 over the same JSON and the scheme's name."""
    body = {k: row[k] for k in _HASHED}
    body["scheme"] = HMAC_SHA256
    h = hmac.new(key, digestmod=hashlib.sha256)
    update_canonical(h, body)
    return h.hexdigest()


def seal(row: Mapping[Any, Any], key: bytes | None) -> tuple[str, str]:
    """(scheme, seal) for a new event: keyed when there is a key."""
    if key is None:
        return SHA256, event_hash(row)
    return HMAC_SHA256, event_mac(row, key)


def sealed(row: Mapping[Any, Any], key: bytes | None) -> bool:
    """Whether the row's stored seal is the one its scheme gives (the key is needed for
    keyed rows; the caller checks that it has one)."""
    if row["scheme"] == SHA256:
        expected = event_hash(row)
    elif row["scheme"] == HMAC_SHA256 and key is not None:
        expected = event_mac(row, key)
    else:
        return False
    return hmac.compare_digest(expected, str(row["hash"]))


@dataclass(frozen=True)
class Anchor:
    """An event number and its seal, kept outside the database (``N:MAC``): the trail
    must still hold event N with this seal, so a rewrite (even with the key), a truncate
    or a deleted tail no longer verifies."""

    event: int
    mac: str

    def __str__(self) -> str:
        return f"{self.event}:{self.mac}"

    @classmethod
    def parse(cls, text: str) -> Anchor:
        found = _ANCHOR.match(text.strip())
        if found is None:
            raise UsageError(
                f"anchor {text!r} is not N:MAC (an event number and 64 lower-case hex "
                "digits, as `queuebot audit head` prints it)"
            )
        return cls(int(found[1]), found[2])

    @property
    def short(self) -> str:
        return f"{self.event}:{self.mac[:12]}..."


class AuditKeyMissing(ConfigError):
    """The trail has keyed events but no key was given: it can be neither extended nor
    verified."""

    def __init__(self, *, event: int, doing: str) -> None:
        super().__init__(
            f"the audit trail is keyed (event {event} is sealed with HMAC-SHA256) but "
            f"{KEY_VARIABLE} is not set: {doing} needs the key it was written with"
        )
        self.event = event


class AuditKeyMismatch(ConfigError):
    """The key given is not the one the trail's newest keyed event was sealed with:
    appending with it would leave every later event unverifiable."""

    def __init__(self, *, event: int) -> None:
        super().__init__(
            f"{KEY_VARIABLE} does not match the newest audit event ({event}), the trail's "
            "head: it is another key than the trail was written with (or that event was "
            f"altered), so nothing was written with it; set {KEY_VARIABLE} to the key the "
            "trail was written with (the one `queuebot serve` uses) and run again, and run "
            "`queuebot audit verify` with it to check the trail"
        )
        self.event = event


@dataclass(frozen=True)
class Verification:
    """What ``verify`` found: ``problem`` names the first thing that does not hold, and
    ``first_bad`` the event it was found at (None for a problem of the whole trail)."""

    checked: int
    first_bad: int | None = None
    problem: str | None = None
    keyed: int = 0  # events sealed with the key (the rest are unkeyed sha256)
    anchors: int = 0  # anchors held
    records: int = 0  # requests, approvals and plans whose events were found
    incidents: int = 0  # incidents whose rows and timers match their events

    @property
    def ok(self) -> bool:
        return self.problem is None
