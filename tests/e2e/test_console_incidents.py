"""An incident through the console, with a runbook whose windows are seconds: someone
without the authority is refused and told who may declare; the duty officer declares;
the lead is reminded; the audience not told is escalated and recorded as missed; the
audience told is met, with its latency."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from bot.demo import DEMO_CONFIG
from services.runbooks.library import shipped_runbooks
from tests.e2e.serving import demo_database
from tests.helpers.processes import clean_environ, interactive

DRILL = "gd:drill"


def drill_runbook(folder: Path) -> None:
    """The shipped queue-loss runbook, with operators due in 2 s (the test waits that
    deadline out) and actors in 8 s (told at once, so never waited out)."""
    (source,) = [r for r in shipped_runbooks() if r.scenario_id == "gd:queue-loss"]
    text = (
        Path(__file__).resolve().parents[2] / "services" / "runbooks" / source.source
    ).read_text()
    text = text.replace('"gd:queue-loss"', f'"{DRILL}"').replace(
        '"runbook:queue-loss"', '"runbook:drill"'
    )
    text = text.replace('"withinMs": 900000', '"withinMs": 8000').replace(
        '"withinMs": 300000', '"withinMs": 2000'
    )
    folder.mkdir()
    (folder / "drill.md").write_text(text)


def test_an_incident_from_declaration_to_its_deadlines(tmp_path: Path) -> None:
    drill_runbook(tmp_path / "runbooks")
    config = tmp_path / "queuebot.toml"
    config.write_text(DEMO_CONFIG.format(config=config) + '\n[runbooks]\ndir = "runbooks"\n')
    with demo_database("sqlite", tmp_path) as db_url:
        env = clean_environ()
        env.update(QUEUEBOT_CONFIG=str(config), QUEUEBOT_DATABASE_URL=db_url)
        console = interactive("console", "--as", "alice", cwd=tmp_path, env=env)
        assert console.stdin is not None and console.stdout is not None
        said: list[str] = []  # the console's output so far, read as it comes
        errors: list[str] = []
        readers = [
            threading.Thread(target=lambda: said.extend(console.stdout or ()), daemon=True),
            threading.Thread(target=lambda: errors.extend(console.stderr or ()), daemon=True),
        ]
        for reader in readers:
            reader.start()

        def shown(text: str, timeout: float = 30.0) -> None:
            deadline = time.monotonic() + timeout
            while text not in "".join(said):
                assert console.poll() is None, "".join(said)
                assert time.monotonic() < deadline, f"waited for {text!r}:\n{''.join(said)}"
                time.sleep(0.05)

        def say(line: str) -> None:
            assert console.stdin is not None
            console.stdin.write(line + "\n")
            console.stdin.flush()

        try:
            say(f'/incident declare {DRILL} "jobs stopped finishing" --queue workers')
            say(f'@dora /incident declare {DRILL} "jobs stopped finishing" --queue workers')
            shown("INC-1 declared (gd:drill), led by dora")
            say("@dora /incident notify actors")
            say(
                '@alice /queue redrive --error-like ffmpeg --sample 2 --reason "transcoder '
                'fixed" --incident INC-1'
            )
            say("@bob /queue approve CR-1")
            # past the operators' deadline (2 s): never told, they are escalated
            shown("communication to the operators missed")
            shown("dora told the actors")  # the actors' message went out in time
            say("/incident status INC-1")
            say("/incident timeline INC-1")
            say("@dora /incident step dep:job-worker-pool done")  # refused: the queue first
            say("@dora /incident step dep:job-queue done")
            say("@dora /incident step dep:job-worker-pool done")
            say("@dora /incident resolve")  # refused: not validated
            say("@dora /incident validate")
            for item in ("v2", "v3"):  # v3 measured flat: refused by hand
                say(f'@dora /incident step {item} done --result "checked by hand"')
            say('@dora /incident resolve --override --reason "drains on the dashboard"')
            say("@bob /queue approve CR-2")
            say("/incident export INC-1")
            console.stdin.close()
            console.wait(timeout=60)
            for reader in readers:
                reader.join(timeout=10)
            out, err = "".join(said), "".join(errors)
        finally:
            if console.poll() is None:
                console.kill()
    assert console.returncode == 0, err
    refusal = out.split("> @dora")[0]
    assert f"only the operations duty officer may declare {DRILL}" in refusal
    assert "duty-officer: dora" in refusal
    assert "INC-1 declared (gd:drill), led by dora" in out
    assert "🚨 INC-1 declared: jobs stopped finishing" in out  # the checklist, posted
    assert "INC-1: the message to the actors is queued, not yet delivered" in out
    assert "dora told the actors" in out and "within its window" in out  # once delivered
    assert "⏰ dora: the operators must be told by" in out  # reminded at half the window
    assert "communication to the operators missed" in out  # escalated at the deadline
    assert "operations duty officer (dora)" in out
    status = out.split("> /incident status INC-1")[1]
    assert "operators" in status and "missed" in status
    assert "actors" in status and "met" in status
    assert "Please do not resubmit it" in out  # the runbook's draft went to the actors
    out_of_order = out.split("> @dora /incident step dep:job-worker-pool done")[1]
    assert "dep:job-worker-pool rests on dep:job-queue, which is not done" in out_of_order
    refused = out.split("> @dora /incident resolve")[1]
    assert "INC-1 cannot be resolved: not validated yet" in refused
    by_hand = out.split("> @dora /incident step v3 done")[1]
    assert "queuebot measured v3 failing" in by_hand and "flat" in by_hand
    assert "INC-1 resolved" in out.split("> @bob /queue approve CR-2")[1]
    export = out.split("> /incident export INC-1")[1]
    assert "# INC-1: jobs stopped finishing" in export
    assert "| operators | 2 s |" in export and "| missed | never |" in export
    assert "| actors | 8 s |" in export and "| met |" in export
    assert "- [x] v2 one synthetic job submitted after recovery" in export
    # resolved on bob's approval of dora's override: no recovery time is claimed
    assert "- Resolved: " in export and ", on CR-2: requested by dora, approved by bob" in export
    assert "- From the declaration to recovery: not measured: resolved by override" in export
    assert "| CR-1 | plan | clips | alice | bob | executed | 14 |" in export  # made under it
    timeline = out.split("> /incident timeline INC-1")[1]
    assert (
        "alice requested CR-1 (plan of 14 in clips)" in timeline and "bob approved CR-1" in timeline
    )
