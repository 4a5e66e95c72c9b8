"""The console's rough edges after the demo (issue 26): the way to the demo's people, a
background post arriving while the prompt waits, and a job looked for in the wrong queue."""

from __future__ import annotations

import asyncio
import io
import re
from pathlib import Path

from bot.console import Console, ConsoleNotifier
from services.message import Message, Text
from tests.e2e.test_console import queuebot, replies, reply_only


def test_console_after_the_demo_points_at_the_demo_configuration(tmp_path: Path) -> None:
    assert queuebot("demo", cwd=tmp_path).returncode == 0
    assert (tmp_path / "queuebot.demo.toml").exists() and not (tmp_path / "queuebot.toml").exists()
    started = queuebot("console", "--as", "alice", cwd=tmp_path)
    assert started.returncode == 2
    assert "--as alice: no such person (people: nobody is configured" in started.stderr
    assert "pass --config queuebot.demo.toml" in started.stderr
    assert "queuebot --config queuebot.demo.toml console --as alice" in started.stderr
    line = queuebot("console", stdin="@alice /queue pending\n", cwd=tmp_path)
    assert line.returncode == 0, line.stderr
    reply = replies(line.stdout)["@alice /queue pending"]
    assert "pass --config queuebot.demo.toml" in reply
    follow = queuebot(
        "console",
        "--config",
        "queuebot.demo.toml",
        "--as",
        "alice",
        stdin="/queue pending\n",
        cwd=tmp_path,
    )
    assert follow.returncode == 0, follow.stderr
    assert "pass --config" not in follow.stdout + follow.stderr


class _Keyboard:
    """A terminal's stdin: it says it is a terminal, and a line arrives when typed."""

    def __init__(self) -> None:
        self.lines: asyncio.Queue[str] = asyncio.Queue()
        self.loop = asyncio.get_running_loop()

    def isatty(self) -> bool:
        return True

    def readline(self) -> str:  # called in a thread, as the console does
        return asyncio.run_coroutine_threadsafe(self.lines.get(), self.loop).result(timeout=10)


async def test_a_background_post_does_not_print_over_the_prompt() -> None:
    from bot.console_screen import PROMPT, Screen

    out = io.StringIO()
    screen = Screen(out)
    notifier = ConsoleNotifier(out, screen=screen)
    console = Console(router=None, directory=None, out=out, acting_as=None, screen=screen)  # type: ignore[arg-type]
    keyboard = _Keyboard()
    running = asyncio.create_task(console.run(keyboard))  # type: ignore[arg-type]
    for _ in range(100):  # the prompt is up and waits for a line
        if out.getvalue().endswith(PROMPT):
            break
        await asyncio.sleep(0.01)
    await notifier.post(channel="operators", message=Message("P-1", (Text("wave 2 started"),)))
    await keyboard.lines.put("exit\n")
    await asyncio.wait_for(running, 10)
    printed = out.getvalue()
    assert f"{PROMPT}[#operators]" not in printed
    # the post starts on a line of its own and the prompt is drawn again under it
    post = r"\r\x1b\[K\[#operators\] \(message \S+\)\nwave 2 started\n\n"
    assert re.search(post + PROMPT, printed)


def test_queue_show_looks_in_the_other_queues_when_the_default_has_no_such_job(
    tmp_path: Path,
) -> None:
    lines = [
        "/queue dlq --queue workers --limit 1",
        "/queue show 199",
        "/queue show 999999",
        "/queue show 199 --queue clips",
    ]
    result = queuebot("demo", stdin="".join(f"{line}\n" for line in lines), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = replies(result.stdout)
    assert "\n199  failed" in out["/queue dlq --queue workers --limit 1"]
    found = out["/queue show 199"]
    assert "== Job 199 in queue workers: failed (failed) ==" in found
    assert "No job 199 in queue clips (the default queue); found in queue workers." in found
    missing = out["/queue show 999999"]
    assert "no job 999999 in queue 'clips'" in missing
    assert "not in queue workers either" in missing
    # a queue named with --queue is the only one looked in
    named = reply_only(out["/queue show 199 --queue clips"])
    assert "no job 199 in queue 'clips'" in named and "workers" not in named
