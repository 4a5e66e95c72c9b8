"""The audit trail: append-only, chained (keyed with ``QUEUEBOT_AUDIT_KEY`` when it is
set), written in the same transaction as the change it records, checkable against
anchors kept outside the database. See docs/audit.md."""

from services.audit.chain import (
    GENESIS,
    HMAC_SHA256,
    KEY_VARIABLE,
    SHA256,
    Actor,
    Anchor,
    AuditKeyMismatch,
    AuditKeyMissing,
    Verification,
    event_hash,
    event_mac,
)
from services.audit.trail import AUDIT_LOCK, AuditTrail, NewEvent, lock_chain

__all__ = [
    "AUDIT_LOCK",
    "GENESIS",
    "HMAC_SHA256",
    "KEY_VARIABLE",
    "SHA256",
    "Actor",
    "Anchor",
    "AuditKeyMismatch",
    "AuditKeyMissing",
    "AuditTrail",
    "NewEvent",
    "Verification",
    "event_hash",
    "event_mac",
    "lock_chain",
]
