"""The one wiring place: settings -> engines -> services -> router -> adapters.

Nothing is built at import time; ``build_app`` does it all, in this order.
``wire_services`` is the part that composes the services (tests and benchmarks that
bring their own engines and clock use it too, so there is one way they fit together).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from bot.audit_key import audit_trail, check_audit_key
from bot.boards import board_services, boards_shown, chat_configured
from bot.jobs import JobDeps, register_all
from commands.catalog import CATALOG
from commands.deps import Deps
from commands.home import home_words
from commands.router import Router
from services.access import Membership, Standings
from services.after_commit import AfterCommit
from services.alerts.publish import AlertPublisher
from services.alerts.service import AlertDesk
from services.audit import AuditTrail
from services.audit.anchors import CHANNEL as ANCHOR_CHANNEL
from services.audit.anchors import Anchors
from services.board import BoardReader
from services.board.publish import BoardPublisher, Surface
from services.changes.eligible import approvers_of
from services.changes.execute import Executor
from services.changes.kinds import Kinds
from services.changes.model import RequestState
from services.changes.requests import ChangeRequests
from services.config import ApprovalConfig, Config, MetricsConfig, RedriveConfig, Role
from services.config.alerts import AlertsConfig
from services.config.housekeeping import HousekeepingConfig
from services.config.incidents import IncidentsConfig
from services.db import create_engine, redacted, same_database
from services.db.migrate import require_newest, upgrade
from services.estate.estate import Estate, utcnow
from services.estate.registry import shipped_profiles
from services.housekeeping.run import Housekeeper
from services.housekeeping.webhook import Webhook
from services.incidents.audiences import reachable_channels
from services.incidents.authority import Authority
from services.incidents.service import Incidents
from services.ledger import STALE, DeliveryLedger
from services.ledger.acks import ThreadedAcks
from services.metrics import Metrics
from services.notify import Notifier
from services.outbox import EVERYWHERE, LANE_WIDTH, Outbox, Reach
from services.people import Directory
from services.plans.control import PlanControl
from services.plans.engine import PlanEngine
from services.plans.publish import PlanPublisher
from services.plans.service import Plans
from services.reads.gate import ReadGate
from services.reads.jobs import AfterSample
from services.reads.service import QueueReads
from services.runbooks import RunbookLibrary, library_for
from services.scheduler import Scheduler

log = logging.getLogger("queuebot")


@dataclass(frozen=True)
class Services:
    """The composed services: each built once, given its collaborators."""

    changes: ChangeRequests
    plan_engine: PlanEngine  # requesting, starting and advancing plans
    plan_control: PlanControl  # halting, resuming, rolling back
    plans: Plans  # plans as commands use them (the same class as commands' Deps.plans)
    publisher: PlanPublisher
    outbox: Outbox
    ledger: DeliveryLedger
    scheduler: Scheduler
    audit: AuditTrail
    alerts: AlertDesk
    metrics: Metrics
    incidents: Incidents
    housekeeper: Housekeeper | None = None  # None: the queue is in another database
    # the posts a person's change made that still go out behind their answer
    after_commit: AfterCommit = field(default_factory=AfterCommit)
    board: BoardReader | None = None
    boards: BoardPublisher | None = None  # None: the board is shown nowhere


def wire_services(
    *,
    state_engine: AsyncEngine,
    estate: Estate,
    clock: Callable[[], datetime],
    approval: ApprovalConfig,
    redrive: RedriveConfig,
    notifier: Notifier | None,
    audit: AuditTrail,
    one_database: bool = True,
    audit_channel: bool = False,
    claim_stale: timedelta = STALE,
    alerts: AlertsConfig | None = None,
    reads: QueueReads | None = None,
    metrics: MetricsConfig | None = None,
    runbooks: RunbookLibrary | None = None,
    directory: Directory | None = None,
    roles: Mapping[str, Role] | None = None,
    standings: Standings | None = None,
    incidents: IncidentsConfig | None = None,
    housekeeping: HousekeepingConfig | None = None,
    housekeeping_webhook: Webhook | None = None,
    chat: bool | None = None,
    acks: ThreadedAcks | None = None,
    lane_width: int = LANE_WIDTH,
    channels: Collection[str] = (),
    reach: Reach = EVERYWHERE,
    boards: bool = False,
    surfaces: Sequence[Surface] = (),
) -> Services:
    """Compose the services over queuebot's own database and the queue estate.
    ``one_database``: the queues' tables and queuebot's share one database, so the
    scheduler's periodic jobs and plan ticks are registered (plans and samples need it);
    ``audit_channel`` posts the trail's head there after each change and on a schedule;
    ``claim_stale`` is when a delivery's unrefreshed claim is taken over; ``alerts``
    routes alert groups and sets the detectors; ``reads`` answers the triage that comes
    with an alert; ``metrics`` how often the queue gauges of ``GET /metrics``
    are read. ``housekeeping``: the retry worker's thresholds (its runs tell people through
    alerts when ``chat``, by default when there is a ``notifier``, and through
    ``housekeeping_webhook``). ``lane_width``: the outbox's posts of one channel in hand at
    once (one where the channel is paced, so the next is chosen when it may go).
    ``channels``: the ``[channels]`` names with an id on some platform (an incident
    audience no channel carries is told nowhere: its runbook is not declared).
    ``reach``: the destinations this process's outbox delivers to (``build_app`` names
    them; one process doing everything, as a test does, reaches every one). ``boards``,
    ``surfaces``: see ``bot.boards.board_services``."""
    alerts = alerts or AlertsConfig()
    counters = Metrics(
        estate=estate,
        state_engine=state_engine,
        refresh_seconds=(metrics or MetricsConfig()).refresh_seconds,
        commands=[spec.name for spec in CATALOG],
        request_states=[state.value for state in RequestState],
        clock=clock,
    )
    ledger = DeliveryLedger(engine=state_engine, clock=clock, stale_after=claim_stale, acks=acks)
    publisher = PlanPublisher(engine=state_engine, notifier=notifier, ledger=ledger)
    outbox = Outbox(engine=state_engine, clock=clock, lane_width=lane_width, reach=reach)
    anchors = (
        Anchors(trail=audit, relay=outbox, notifier=notifier)
        if audit_channel and notifier is not None
        else None
    )
    plans = PlanEngine(estate=estate, config=redrive, clock=clock, outbox=outbox, audit=audit)
    control = PlanControl(estate=estate, clock=clock, outbox=outbox, audit=audit)
    library = runbooks or RunbookLibrary.load()
    people = directory or Directory([])
    role_names = dict(roles or {})

    desk_of_incidents = Incidents(
        engine=state_engine,
        clock=clock,
        outbox=outbox,
        audit=audit,
        config=incidents or IncidentsConfig(),
        runbook=library.get,
        # who holds each runbook's authority now, whom reminders and escalations call
        authority=Authority(directory=people, roles=role_names, standings=standings),
        estate=estate,
        anchors=anchors,
        channels=channels,
        # the FailedJobsAccumulating alert's, as its built-in detector is configured
        alert_threshold=alerts.detectors.failed_actionable.threshold,
    )
    after_commit = AfterCommit()
    kinds = Kinds()  # the kinds of change request, each registered by its domain (jobs.py)
    changes = ChangeRequests(
        estate=estate,
        engine=state_engine,
        approval=approval,
        clock=clock,
        kinds=kinds,
        executor=Executor(kinds=kinds, audit=audit, anchors=anchors),
        audit=audit,
        approvers=approvers_of(standings, directory),
        after_commit=after_commit,
    )
    desk = AlertDesk(
        engine=state_engine,
        clock=clock,
        config=alerts,
        queues=list(estate.profiles),
        outbox=outbox,
        counters=counters,
    )
    housekeeper = (
        Housekeeper(
            engine=state_engine,
            estate=estate,
            audit=audit,
            config=housekeeping or HousekeepingConfig(),
            clock=clock,
            chat=notifier is not None if chat is None else chat,
            webhook=housekeeping_webhook,
            wake_alerts=desk.wake,
        )
        if one_database
        else None
    )
    sched = Scheduler(engine=state_engine, clock=clock)
    reader, shown = board_services(state_engine, estate, reads, kinds, clock, boards, surfaces)
    jobs = JobDeps(
        one_database=one_database,
        estate=estate,
        audit=audit,
        notifier=notifier,
        anchors=anchors,
        plans=plans,
        plan_control=control,
        plan_posts=publisher,
        incidents=desk_of_incidents,
        alerts=desk,
        alert_posts=AlertPublisher(
            engine=state_engine, notifier=notifier, reads=reads, clock=clock, counters=counters
        ),
        detectors=alerts.detectors,
        sample_every=timedelta(seconds=alerts.sample_seconds),
        housekeeper=housekeeper,
        after_sample=AfterSample(),
        kinds=kinds,
        redrive=redrive,
        boards=shown,
    )
    register_all(sched, outbox, jobs)  # every domain's services/*/jobs.py, alike
    counters.count_scheduled(lambda: tuple(sched.handlers))
    return Services(
        changes=changes,
        plan_engine=plans,
        plan_control=control,
        plans=Plans(engine=state_engine, control=control, clock=clock, after_commit=after_commit),
        publisher=publisher,
        outbox=outbox,
        ledger=ledger,
        scheduler=sched,
        audit=audit,
        alerts=desk,
        metrics=counters,
        incidents=desk_of_incidents,
        housekeeper=housekeeper,
        after_commit=after_commit,
        board=reader,
        boards=shown,
    )


UNPACED = 8  # the outbox's posts of one channel in hand at once when Slack is not paced


@dataclass
class App:
    config: Config
    state_engine: AsyncEngine
    estate: Estate
    directory: Directory
    router: Router
    ledger: DeliveryLedger
    scheduler: Scheduler
    plan_engine: PlanEngine
    changes: ChangeRequests
    outbox: Outbox
    alerts: AlertDesk
    metrics: Metrics
    housekeeper: Housekeeper | None = None
    after_commit: AfterCommit = field(default_factory=AfterCommit)
    # roles, teams and rotas from groups: the chat adapters add their readers to it
    standings: Standings | None = None
    boards: BoardPublisher | None = None  # None: the board is shown nowhere
    _engines: list[AsyncEngine] = field(default_factory=list)

    async def close(self) -> None:
        await self.after_commit.close()  # their posts stay in the outbox for the next relay
        await self.metrics.close()
        await asyncio.to_thread(self.ledger.close)
        for engine in self._engines:
            await engine.dispose()


async def build_app(
    config: Config,
    *,
    clock: Callable[[], datetime] = utcnow,
    migrate: bool = True,
    notifier: Notifier | None = None,
    announce: bool = True,
    writes: bool = True,
    reach: Reach | None = None,
    surfaces: Sequence[Surface] = (),
) -> App:
    """Build everything. With ``migrate`` (serve, console) queuebot's tables are brought up
    to date first. With ``writes`` (every process that may write audit events: serve and
    its worker, console, the demo, housekeep) the tables must be at the newest revision
    and the audit key is checked against the trail before anything else, so a wrong key
    changes nothing; ``announce`` then warns when the trail is unkeyed (the demo, on a
    throwaway SQLite file, does not). ``config check`` only reads, and reports a key
    problem itself. ``reach``: where the posts this process delivers may go besides those
    without a destination (serve's chat platforms, a console's own session; see
    ``services.outbox.Reach``); by default nowhere else. ``surfaces``: where this process
    shows the board."""
    # Shipped, then [runbooks] dir: a bad runbook stops the start, before any database work.
    runbooks = library_for(config)
    state_url, estate_url = config.env.state_url, config.env.estate_url
    one_database = same_database(state_url, estate_url)
    database = config.file.database  # every PostgreSQL connection's timeouts and keepalives
    state_engine = create_engine(state_url, settings=database)
    engines = [state_engine]
    if one_database and state_engine.dialect.name == "sqlite":
        estate_engine = state_engine  # one file, one writer: one pool
    else:
        # Reads get a pool of their own, so a burst of triage never makes the delivery
        # ledger or an approval wait for a connection (same database or not).
        estate_engine = create_engine(estate_url, settings=database)
        engines.append(estate_engine)
    # Deliveries are written down before their ack by a thread with a connection of its
    # own (PostgreSQL): Slack and Discord wait for the ack, and nothing may stand in its way.
    claim_stale = (
        STALE
        if config.env.claim_stale_seconds is None
        else timedelta(seconds=config.env.claim_stale_seconds)
    )
    acks = (
        None
        if state_engine.dialect.name == "sqlite"
        # a claim arriving later than half its staleness is not written: long before the
        # orphan sweep could take it, so one its caller gave up on is never acted on
        else ThreadedAcks(
            state_engine.url, settings=database, late_after=claim_stale.total_seconds() / 2
        )
    )
    try:
        if migrate:
            revision = await upgrade(state_engine)
            log.info("queuebot state at %s is at revision %s", redacted(state_url), revision)
        elif writes:
            await require_newest(state_engine)
        audit = audit_trail(config)
        if writes:
            await check_audit_key(state_engine, audit, announce=announce)
        estate = Estate(
            engine=estate_engine, queues=config.queues, clock=clock, registry=shipped_profiles()
        )
        directory = Directory.from_config(config.file)
        standings = Standings(config.file, directory, Membership({}, clock=clock), clock)
        if not one_database:
            log.warning(
                "queuebot's tables and the queue are in different databases: reads work, "
                "every change is refused (see `queuebot config check`)"
            )
        reads = QueueReads(
            estate,
            gate=ReadGate(
                concurrency=config.file.reads.concurrency,
                fresh_for=config.file.reads.fresh_seconds,
            ),
        )
        services = wire_services(
            state_engine=state_engine,
            estate=estate,
            clock=clock,
            approval=config.file.approval,
            redrive=config.file.redrive,
            notifier=notifier,
            audit=audit,
            one_database=one_database,
            audit_channel=ANCHOR_CHANNEL in config.file.channels,
            claim_stale=claim_stale,
            alerts=config.file.alerts,
            reads=reads,
            metrics=config.file.metrics,
            runbooks=runbooks,
            directory=directory,
            roles=config.file.authority_roles(),
            standings=standings,
            incidents=config.file.incidents,
            housekeeping=config.file.housekeeping,
            housekeeping_webhook=(
                Webhook(config.env.housekeep_webhook_url)
                if config.env.housekeep_webhook_url is not None
                else None
            ),
            chat=notifier is not None or chat_configured(config),
            acks=acks,
            # unpaced (0: the benches and tests), one channel's posts may go side by side
            lane_width=LANE_WIDTH if config.file.slack.post_interval_seconds > 0 else UNPACED,
            channels=reachable_channels(config.file.channels),
            reach=reach or Reach(),
            boards=boards_shown(config),
            surfaces=surfaces,
        )
        deps = Deps(
            reads=reads,
            changes=services.changes,
            plans=services.plans,
            directory=directory,
            access=config.file.access,
            config_file=str(config.source) if config.source else None,
            metrics=services.metrics,
            runbooks=runbooks,
            roles=config.file.authority_roles(),
            incidents=services.incidents,
            housekeeping=services.housekeeper,
            standings=standings,
            board=services.board,
        )
        if services.boards is not None:  # each App Home in its person's words
            services.boards.words = functools.partial(home_words, deps)
        return App(
            config=config,
            state_engine=state_engine,
            estate=estate,
            directory=directory,
            router=Router(deps),
            ledger=services.ledger,
            scheduler=services.scheduler,
            plan_engine=services.plan_engine,
            changes=services.changes,
            outbox=services.outbox,
            alerts=services.alerts,
            metrics=services.metrics,
            housekeeper=services.housekeeper,
            after_commit=services.after_commit,
            standings=standings,
            boards=services.boards,
            _engines=engines,
        )
    except BaseException:
        for engine in engines:
            await engine.dispose()
        raise
