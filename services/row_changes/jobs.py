"""The direct row changes' kinds of change request (nothing in the background): a
requeue, a cancel and a redrive at once."""

from __future__ import annotations

from services.changes.kinds import Kinds
from services.config import RedriveConfig
from services.estate.estate import Estate
from services.estate.ops import Action
from services.row_changes.approvable import Redrive, RowChange


def register(kinds: Kinds, *, estate: Estate, redrive: RedriveConfig) -> None:
    kinds.register(RowChange(Action.REQUEUE, estate=estate))
    kinds.register(RowChange(Action.CANCEL, estate=estate))
    kinds.register(Redrive(estate=estate, redrive=redrive))
