"""What the domains' background work is given: one ``JobDeps``, built once by
``wire_services`` (bot/bootstrap.py), and every domain's ``register(scheduler, outbox,
deps)`` (``services/*/jobs.py``) called alike with it. Each domain reads from ``deps``
what its own ``Deps`` protocol names (a domain low in the layers cannot import the
services above it, so none takes this class itself)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from services.alerts import jobs as alert_jobs
from services.alerts.publish import AlertPublisher
from services.alerts.service import AlertDesk
from services.audit import AuditTrail
from services.audit import jobs as audit_jobs
from services.audit.anchors import Anchors
from services.board import jobs as board_jobs
from services.board.publish import BoardPublisher
from services.changes import jobs as change_jobs
from services.changes.kinds import Kinds
from services.config import RedriveConfig
from services.config.alerts import DetectorsConfig
from services.estate.estate import Estate
from services.housekeeping import jobs as housekeeping_jobs
from services.housekeeping.run import Housekeeper
from services.incidents import jobs as incident_jobs
from services.incidents.service import Incidents
from services.ledger import jobs as ledger_jobs
from services.notify import Notifier
from services.outbox import Outbox
from services.outbox import jobs as outbox_jobs
from services.plans import jobs as plan_jobs
from services.plans.control import PlanControl
from services.plans.engine import PlanEngine
from services.plans.publish import PlanPublisher
from services.reads import jobs as read_jobs
from services.reads.jobs import AfterSample
from services.row_changes import jobs as row_change_jobs
from services.scheduler import Scheduler


@dataclass(frozen=True)
class JobDeps:
    """What the domains' jobs need, each built once."""

    one_database: bool  # the queues' tables and queuebot's: the periodic jobs run only then
    estate: Estate
    audit: AuditTrail
    notifier: Notifier | None  # None: no chat platform
    anchors: Anchors | None  # None: no audit channel, or no chat platform to post to
    plans: PlanEngine
    plan_control: PlanControl
    plan_posts: PlanPublisher
    incidents: Incidents
    alerts: AlertDesk
    alert_posts: AlertPublisher
    detectors: DetectorsConfig
    sample_every: timedelta  # [alerts] sample_seconds
    housekeeper: Housekeeper | None  # None: the queue is in another database
    # what judges each queue's sample after the reads write it (the alerts' detectors)
    after_sample: AfterSample
    kinds: Kinds  # the kinds of change request the domains register, which the hub asks
    redrive: RedriveConfig  # [redrive]: a redrive at once is checked with its settings
    # where the board is kept current (None: shown nowhere, so no refresh is asked for)
    boards: BoardPublisher | None = None


Register = Callable[[Scheduler, Outbox, JobDeps], None]
# In this order, which is the order of what each makes sure of at start (the periodic
# items due at once are created, and so run, in it).
DOMAINS: tuple[Register, ...] = (
    alert_jobs.register,
    incident_jobs.register,
    plan_jobs.register,
    row_change_jobs.register,
    change_jobs.register,
    read_jobs.register,
    ledger_jobs.register,
    outbox_jobs.register,
    audit_jobs.register,
    housekeeping_jobs.register,
    board_jobs.register,
)


def register_all(scheduler: Scheduler, outbox: Outbox, deps: JobDeps) -> None:
    """Each domain registers the outbox kinds it delivers, the scheduler kinds it handles,
    what the scheduler makes sure of at start and its kinds of change request; nothing
    else registers a kind."""
    for register in DOMAINS:
        register(scheduler, outbox, deps)
