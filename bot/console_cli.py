"""``queuebot console``: the console over the configured app, with the scheduler beside
it; and the way to the demo's people when the configuration read lists nobody."""

from __future__ import annotations

import sys
from pathlib import Path

from bot.bootstrap import build_app
from bot.console import Aside, Console, ConsoleNotifier, run_id, session_reach
from bot.console_screen import Screen
from bot.readers import attach_slack_reader
from bot.running import running_scheduler
from services.config import Config
from services.errors import QueuebotError

DEMO_CONFIG_NAME = "queuebot.demo.toml"  # what `queuebot demo` writes beside its database


def demo_config_hint(config: Config, person: str | None, *, folder: Path | None = None) -> str:
    """After ``queuebot demo``, ``queuebot console`` in the same folder reads no
    configuration (or one without people) while the demo's people are in
    queuebot.demo.toml: say how to use it. Empty when that does not apply."""
    if config.file.people:
        return ""
    demo = (folder or Path.cwd()) / DEMO_CONFIG_NAME
    if not demo.is_file():
        return ""
    if config.source is not None and Path(config.source).resolve() == demo.resolve():
        return ""
    who = person or "PERSON"
    return (
        f"{DEMO_CONFIG_NAME} (written by `queuebot demo`) is in this folder: pass --config "
        f"{DEMO_CONFIG_NAME} to use its people, e.g. `queuebot --config {DEMO_CONFIG_NAME} "
        f"console --as {who}`"
    )


async def run_console(
    config: Config, person: str | None, banner: str | None = None, aside: Aside | None = None
) -> int:
    screen = Screen(sys.stdout)
    session = run_id()  # its posts are numbered by it, and only it prints its own plans' news
    notifier = ConsoleNotifier(sys.stdout, session, screen=screen)
    app = await build_app(
        config, notifier=notifier, announce=banner is None, reach=session_reach(session)
    )
    attach_slack_reader(config, app)  # alice's user groups count here as in Slack
    try:
        if person is not None and app.directory.by_name(person) is None:
            known = ", ".join(app.directory.names()) or "nobody is configured"
            hint = demo_config_hint(config, person)
            raise QueuebotError(
                f"--as {person}: no such person (people: {known})" + (f"; {hint}" if hint else "")
            )
        if banner:
            print(banner, flush=True)
        console = Console(
            router=app.router,
            directory=app.directory,
            out=sys.stdout,
            acting_as=person,
            screen=screen,
            hint=lambda name: demo_config_hint(config, name),
            aside=aside,
            session=session,
        )
        async with running_scheduler(app):  # plan waves, expiry and counts, as in serve
            await console.run(sys.stdin)
        return 0
    finally:
        await app.close()
