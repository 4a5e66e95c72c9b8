"""The direct row changes' kinds of change request (nothing in the background): a
requeue, a cancel and a redrive at once (``approvable.py``)."""

from __future__ import annotations

from typing import Protocol

from services.changes.kinds import Kinds
from services.config import RedriveConfig
from services.estate.estate import Estate
from services.estate.ops import Action
from services.outbox import Outbox
from services.row_changes.approvable import Redrive, RowChange
from services.scheduler import Scheduler, SharedDeps


class Deps(SharedDeps, Protocol):
    @property
    def estate(self) -> Estate: ...

    @property
    def redrive(self) -> RedriveConfig: ...

    @property
    def kinds(self) -> Kinds: ...


def register(sched: Scheduler, outbox: Outbox, deps: Deps) -> None:
    estate = deps.estate
    deps.kinds.register(RowChange(Action.REQUEUE, estate=estate))
    deps.kinds.register(RowChange(Action.CANCEL, estate=estate))
    deps.kinds.register(Redrive(estate=estate, redrive=deps.redrive))
