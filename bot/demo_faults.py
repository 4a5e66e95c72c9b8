"""The demo console's own lines, `/demo`: the simulated world's standing faults, and a
fix a person can "deploy" so the jobs a fault broke succeed when they run again.

They stand in for what, in a real estate, happens outside queuebot (a deploy, a config
change): queuebot itself is told nothing by them, so its checks see the fix only the way
they would see a real one, by the jobs that stop dying. They exist only in `queuebot
demo`; `queuebot console` never answers them.
"""

from __future__ import annotations

import shlex

from bot.console import Aside
from commands.reply import Reply
from services.estate.demo_worker import DemoWorker
from services.message import Message, Table, Text

USAGE = "/demo (the faults) · /demo fix NAME (deploy its fix) · /demo break NAME (undo it)"


def demo_lines(worker: DemoWorker) -> Aside:
    """The `/demo` lines over ``worker``'s faults; other lines are not the demo's."""

    async def aside(line: str) -> Reply | None:
        try:
            words = shlex.split(line)
        except ValueError:
            words = line.split()
        if not words or words[0] != "/demo":
            return None
        return _answer(worker, words[1:])

    return aside


def _answer(worker: DemoWorker, args: list[str]) -> Reply:
    faults = worker.faults()
    if not args or args == ["faults"]:
        return _listing(worker, faults)
    verb, names = args[0], args[1:]
    if verb not in ("fix", "break") or len(names) != 1:
        return _refusal(f"usage: {USAGE}")
    name = names[0]
    if name not in faults:
        known = ", ".join(sorted(faults)) or "none"
        return _refusal(f"the demo has no fault named {name!r} (faults: {known}); {USAGE}")
    if verb == "fix":
        already = name in worker.fixed
        worker.fixed.add(name)
        said = (
            f"{name}: its fix was already deployed."
            if already
            else f"{name}: fix deployed. From now on the simulated worker runs the jobs it "
            f"broke ({faults[name]}) to success when they run again."
        )
    else:
        already = name not in worker.fixed
        worker.fixed.discard(name)
        said = (
            f"{name}: already broken."
            if already
            else f"{name}: broken again. Jobs it breaks die again when they run."
        )
    return Reply(
        Message(
            summary=said,
            blocks=(
                Text(said),
                Text(
                    "Only the demo's simulated worker knows this: queuebot learns of a fix as "
                    "it would of a real deploy, from the jobs that stop dying."
                ),
            ),
        )
    )


def _listing(worker: DemoWorker, faults: dict[str, str]) -> Reply:
    rows = tuple(
        (name, "fixed" if name in worker.fixed else "broken", what)
        for name, what in sorted(faults.items())
    )
    return Reply(
        Message(
            summary=f"the demo's faults: {len(rows)}",
            blocks=(
                Table(("fault", "state", "what it breaks"), rows, title="The demo's faults"),
                Text(USAGE),
            ),
        )
    )


def _refusal(text: str) -> Reply:
    return Reply(Message(summary=text, blocks=(Text(text),)), error=True)
