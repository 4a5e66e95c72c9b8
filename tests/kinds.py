"""Every kind of change request queuebot ships, by the name its domain registers, so a
test names one as ``ChangeKind.REDRIVE`` whichever domain owns it (the row changes, the
plans, the incidents; services/*/jobs.py registers them)."""

from __future__ import annotations

from enum import StrEnum

from services.incidents.approvable import RESOLVE as _RESOLVE
from services.plans.approvable import PLAN as _PLAN
from services.plans.approvable import RESUME as _RESUME
from services.plans.approvable import ROLLBACK as _ROLLBACK
from services.row_changes.approvable import CANCEL as _CANCEL
from services.row_changes.approvable import REDRIVE as _REDRIVE
from services.row_changes.approvable import REQUEUE as _REQUEUE


class ChangeKind(StrEnum):
    REQUEUE = _REQUEUE
    CANCEL = _CANCEL
    REDRIVE = _REDRIVE
    PLAN = _PLAN
    RESUME = _RESUME
    ROLLBACK = _ROLLBACK
    RESOLVE = _RESOLVE
