"""``queuebot demo``: build (or reuse) the demo estate, write (or read) its configuration,
and open the console on them with the simulated worker beside it; its banner suggests
what fits the estate as it is."""

from __future__ import annotations

import argparse
import os
from datetime import timedelta
from pathlib import Path

from bot.bootstrap import build_app
from bot.console_cli import DEMO_CONFIG_NAME, run_console
from bot.demo import (
    demo_state,
    demo_url,
    ensure_demo_estate,
    record_history,
    running_demo_worker,
    write_demo_config,
)
from bot.demo_faults import demo_lines
from services.config import Config, load_config
from services.errors import ConfigError
from services.estate.model import DeadFilter
from services.plans.approvable import PLAN

DEMO_QUEUES = {"clips": "message_job", "workers": "worker_queue"}


def demo_config_path(args: argparse.Namespace) -> tuple[Path, bool]:
    """The demo's configuration file, and whether it was named with --config. Named, it
    is read as it is (edits are kept, also with --fresh, which rebuilds the estate only);
    absent, the demo's configuration is written there."""
    given: str | None = getattr(args, "config", None)
    if given is not None:
        return Path(given), True
    db: Path = args.db
    return db.with_name(DEMO_CONFIG_NAME), False


def _has_demo_queues(config: Config, path: Path) -> None:
    queues = {name: q.profile for name, q in config.queues.items()}
    if all(queues.get(name) == profile for name, profile in DEMO_QUEUES.items()):
        return
    want = ", ".join(f"{name} ({profile})" for name, profile in DEMO_QUEUES.items())
    have = ", ".join(f"{name} ({profile})" for name, profile in queues.items()) or "none"
    raise ConfigError(
        f"demo --config {path}: the demo needs the queues {want}, as in the file "
        f"`queuebot demo` writes; {path} has {have}. Name a file that does not exist yet "
        "(the demo writes its configuration there), or leave --config out"
    )


async def run_demo(args: argparse.Namespace) -> int:
    db: Path = args.db
    built = await ensure_demo_estate(db, fresh=args.fresh)
    config_path, named = demo_config_path(args)
    write_demo_config(config_path, overwrite=not named and (args.fresh or built))
    url = demo_url(db)
    # the demo's own database, whatever the environment names (its file forms included)
    databases = ("QUEUEBOT_DATABASE_URL", "QUEUEBOT_QUEUE_DATABASE_URL")
    env = {k: v for k, v in os.environ.items() if k.removesuffix("_FILE") not in databases}
    env.update(dict.fromkeys(databases, url))
    config = load_config(config_path, environ=env)
    _has_demo_queues(config, config_path)
    banner = await _demo_banner(config, db, config_path, built, worker=args.worker)
    if not args.worker:
        return await run_console(config, args.person, banner=banner)
    async with running_demo_worker(config) as worker:  # beside the console, same event loop
        return await run_console(config, args.person, banner=banner, aside=demo_lines(worker))


async def _demo_banner(
    config: Config, db: Path, config_path: Path, built: bool, *, worker: bool = True
) -> str:
    """The demo's welcome, with suggestions that fit the estate as it is now: the request
    and plan numbers they name are the next ones, and a plan or request left by an earlier
    run is followed up instead of suggesting a new one."""
    app = await build_app(config, announce=False)
    try:
        if built:  # the demo's queues have a history: their counts a quarter hour ago
            await record_history(app.state_engine, app.estate, ago=timedelta(minutes=15))
        reads = app.router.deps.reads
        dead = await reads.list_dead(queue="clips", filters=DeadFilter(limit=1))
        example = dead.rows[0].id if dead.rows else "<job id>"
        ffmpeg = (
            await reads.list_dead(queue="clips", filters=DeadFilter(error_like="ffmpeg", limit=1))
        ).total
        timeouts = (
            await reads.list_dead(
                queue="clips", filters=DeadFilter(error_like="upstream timeout", limit=1)
            )
        ).total
        pending = await app.changes.pending()
        state = await demo_state(app.state_engine)
    finally:
        await app.close()
    cr, plan = state.next_request, state.next_plan
    steps: list[str] = []
    for number, queue, plan_state in state.active_plans:
        if plan_state == "halted":
            steps.append(
                f"P-{number} ({queue}) is halted: /queue plan P-{number}; go on with @alice "
                f'/queue resume P-{number} --reason "...", or return its unclaimed jobs with '
                f'@alice /queue rollback P-{number} --reason "...", then @bob /queue approve '
                f"CR-{cr} (with none unclaimed the rollback closes the plan at once, without "
                "an approval)."
            )
        else:
            steps.append(f"P-{number} ({queue}) is running: /queue plan P-{number} follows it.")
    for request in pending:
        other = "alice" if request.requester != "alice" else "bob"
        steps.append(
            f"{request.ref} ({request.kind} by {request.requester}) waits for approval: "
            f"@{other} /queue approve {request.ref}   (/queue pending lists every one)."
        )
    busy = any(queue == "clips" for _, queue, _ in state.active_plans) or any(
        r.kind == PLAN and r.queue == "clips" for r in pending
    )
    if not busy:  # one plan per queue: suggest a new one only when clips has none

        def halt(cr: int, plan: int) -> str:
            return (
                f'@alice /queue redrive --all --reason "transcoder fixed", then @bob /queue '
                f'approve CR-{cr}: its "upstream timeout" jobs die again and halt P-{plan}.'
            )

        if ffmpeg:
            steps.append(
                f'Watch a plan: @alice /queue redrive --error-like ffmpeg --sample 2 --reason "OOM '
                f'fix deployed", then @bob /queue approve CR-{cr}, and /queue plan P-{plan}.'
            )
            if timeouts and worker:
                steps.append("When it is done, watch a halt: " + halt(cr + 1, plan + 1))
        elif timeouts and worker:
            steps.append("Watch a halt: " + halt(cr, plan))
        elif not timeouts:
            steps.append(
                "Every dead letter of clips that can be redriven was: `queuebot demo --fresh` "
                "starts over."
            )
    runs = (
        "A simulated worker finishes redriven and requeued jobs a few seconds later; clips "
        'jobs that died of "upstream timeout" and workers rows of type continue-issue fail '
        "again (--no-worker turns it off)."
        if worker
        else "No worker runs (--no-worker): redriven and requeued jobs stay queued, so a "
        "plan waits after its sample."
    )
    built_or_reused = "built" if built else "reused (use --fresh to rebuild)"
    return "\n".join(
        [
            f"queuebot demo: estate {built_or_reused} in {db}; config in {config_path}.",
            "Queues: clips (message_job: messages + jobs), workers (worker_queue: one table).",
            "People: alice (operator, approver), bob (operator, approver), "
            "dora (duty-officer, operator).",
            f"Try: /queue triage | /queue triage --queue workers | @alice /queue show {example} | "
            "/queue help. End with Ctrl-D.",
            *(f"     {step}" for step in steps),
            runs,
            "",
        ]
    )
