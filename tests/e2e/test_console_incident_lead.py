"""An incident's lead handed over at the console, with a runbook whose windows are
seconds: a third person and a lead without the declaration authority are refused, each
told why and who could; dora hands the lead to bob, and the reminder and the escalation
that follow call bob; the postmortem says who led when."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from bot.demo import DEMO_CONFIG
from tests.e2e.serving import demo_database
from tests.helpers.processes import clean_environ, interactive
from tests.helpers.text import in_order
from tests.integration.test_incident_timers import drill_runbook

DRILL = "gd:drill"
# the demo's people, bob a duty officer too
CONFIG = DEMO_CONFIG.replace(
    'discord = "100000000000000002"\nroles = ["operator", "approver"]',
    'discord = "100000000000000002"\nroles = ["operator", "approver", "duty-officer"]',
)


def test_a_handoff_at_the_console_moves_the_reminders_to_the_new_lead(tmp_path: Path) -> None:
    assert CONFIG != DEMO_CONFIG
    # the operators due in 6 s: reminded at 3 s and 4.8 s, escalated at 6 s
    drill_runbook(tmp_path / "runbooks", DRILL, operators_ms=6000, actors_ms=600_000)
    config = tmp_path / "queuebot.toml"
    config.write_text(CONFIG.format(config=config) + '\n[runbooks]\ndir = "runbooks"\n')
    with demo_database("sqlite", tmp_path) as db_url:
        env = clean_environ()
        env.update(QUEUEBOT_CONFIG=str(config), QUEUEBOT_DATABASE_URL=db_url)
        console = interactive("console", "--as", "alice", cwd=tmp_path, env=env)
        assert console.stdin is not None and console.stdout is not None
        said: list[str] = []
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
            say(f'@dora /incident declare {DRILL} "jobs stopped finishing" --queue workers')
            shown("INC-1 declared (gd:drill), led by dora")
            say("incident lead bob")  # alice: neither the lead nor bob
            say("@dora incident lead alice")  # alice holds no declaration authority
            say("@dora incident lead bob")
            shown("INC-1 is led by bob now (before: dora)")
            shown("communication to the operators missed")
            say("/incident export INC-1")
            shown("## Timeline")
            console.stdin.close()
            console.wait(timeout=60)
            for reader in readers:
                reader.join(timeout=10)
            out, err = "".join(said), "".join(errors)
        finally:
            if console.poll() is None:
                console.kill()
    assert console.returncode == 0, err
    assert (
        "only dora, who leads INC-1, may hand its lead over, or bob may take it: ask dora, "
        "or bob types /incident lead bob --incident INC-1"
    ) in out
    assert (
        "alice cannot lead INC-1: only the operations duty officer may lead INC-1 (queuebot "
        "role duty-officer: bob, dora); hand it to one of them"
    ) in out
    in_order(
        out,
        "@bob\n🧭 dora handed the lead to bob.",
        "@bob\n⏰ bob: the operators must be told by",  # the reminder calls the new lead
        "@bob\n== 🔺 INC-1: communication to the operators missed ==",
        "Lead: bob.",
    )
    assert "⏰ dora:" not in out
    export = out.split("## Lead", 1)[1].split("\n## ", 1)[0]
    in_order(export, "dora (declared it); until ", "dora handed the lead to bob; still leading")
