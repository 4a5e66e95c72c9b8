"""The flags several commands share, spelled once: which queue, whether the answer is
shared, which incident, how many rows, and a change's required reason."""

from __future__ import annotations

from commands.model import MAX_LIMIT
from commands.spec import Flag

QUEUE_FLAG = Flag(
    "queue", "queue", kind="word", metavar="Q", help="which configured queue (default: the first)"
)
SHARE_FLAG = Flag(
    "share",
    "share",
    kind="bool",
    help="post the answer in the channel for everyone (by default only you see it)",
)
INCIDENT_FLAG = Flag(
    "incident",
    "incident",
    kind="word",
    metavar="INC-N",
    help="which incident (default: the open one)",
)
LIMIT_FLAG = Flag(
    "limit",
    "limit",
    kind="int",
    metavar="N",
    help=f"how many rows to list (1-{MAX_LIMIT})",
    minimum=1,
    maximum=MAX_LIMIT,
)

REASON = Flag(
    "reason",
    "reason",
    metavar='"WHY"',
    required=True,
    help="why: the root cause and the fix (kept in the audit trail)",
    example='--reason "allowlist fixed in PR #2081"',
)
