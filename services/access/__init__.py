"""Who may act: roles, rotas and owner teams read from the groups teams keep in Slack
and Discord, or from a built-in schedule; cached briefly, failing closed (docs/access.md).
"""

from services.access.membership import FRESH_FOR, STALE_FOR, Membership, Read, SourceUnavailable
from services.access.schedule import Shift, shift
from services.access.sources import Reader, Source
from services.access.standing import Holders, Standings

__all__ = [
    "FRESH_FOR",
    "STALE_FOR",
    "Holders",
    "Membership",
    "Read",
    "Reader",
    "Shift",
    "Source",
    "SourceUnavailable",
    "Standings",
    "shift",
]
