"""An incident carries its redrive from declaration to postmortem, in ``queuebot demo`` with
its simulated worker: dora declares, alice asks a staged redrive under the incident and
bob approves; the sample dies again and halts the plan; the fix is deployed
(``/demo fix transcoder``), the plan is resumed and completes with two dead again, which
``--from-plan`` redrives; queuebot then measures the validation itself, the incident is
resolved, and the postmortem lists every request, the plan's halt, resume and completion
in order, and a measured recovery time."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.test_console import replies
from tests.e2e.test_console_plans import plan_state


def in_order(text: str, *parts: str) -> None:
    at = 0
    for part in parts:
        found = text.find(part, at)
        assert found >= 0, f"{part!r} not after position {at} in:\n{text}"
        at = found + len(part)


def test_an_incident_carries_its_redrive_to_a_measured_postmortem(tmp_path: Path) -> None:
    db = tmp_path / "queuebot.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUEBOT_", "SLACK_"))}
    demo = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "demo"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
    )

    def say(line: str) -> None:
        assert demo.stdin is not None
        demo.stdin.write(line + "\n")
        demo.stdin.flush()

    def wait_for(number: int, state: str) -> None:
        deadline = time.monotonic() + 90
        while plan_state(db, number) != state:
            assert demo.poll() is None, demo.communicate()
            assert time.monotonic() < deadline, f"P-{number} is {plan_state(db, number)}"
            time.sleep(0.5)

    try:
        say(
            '@dora /incident declare gd:failed-jobs-accumulating "clips die of upstream '
            'timeout" --queue clips'
        )
        say(
            '@alice /queue redrive --error-like "upstream timeout" --sample 2 --reason '
            '"transcoder restarted" --incident INC-1'
        )
        say("@bob /queue approve CR-1")
        wait_for(1, "halted")
        say("/demo fix transcoder")
        say('@alice /queue resume P-1 --reason "transcoder fixed for real"')
        say("@bob /queue approve CR-2")
        wait_for(1, "completed")
        say('@alice /queue redrive --from-plan P-1 --reason "the sample, after the fix"')
        say("@bob /queue approve CR-3")
        wait_for(2, "completed")
        say("@dora /incident validate")
        say("@dora /incident resolve")
        say("@dora /incident export")
        out, err = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.communicate()
    assert demo.returncode == 0, err
    assert "Traceback" not in out + err
    said = replies(out)
    assert (
        "incident: INC-1 (from P-1)"
        in said['@alice /queue resume P-1 --reason "transcoder fixed for real"']
    )
    assert (
        "incident: INC-1 (from P-1)"
        in said['@alice /queue redrive --from-plan P-1 --reason "the sample, after the fix"']
    )
    assert "INC-1 resolved" in said["@dora /incident resolve"]
    export = said["@dora /incident export"]
    changes = export.split("## Changes made under this incident", 1)[1].split("\n## ", 1)[0]
    in_order(
        changes,
        "| CR-1 | plan | clips | alice | bob | executed | 3 |",
        "| CR-2 | resume | clips | alice | bob | executed |",
        "| CR-3 | plan | clips | alice | bob | executed | 2 |",
    )
    timeline = export.split("## Timeline", 1)[1]
    in_order(
        timeline,
        "alice requested CR-1 (plan of 3 in clips)",
        "P-1 sample started: 2 job(s) redriven, of 3 in the plan",
        "P-1 sample finished: 0 succeeded, 2 died again",
        "| plan.halted | - | P-1 halted: ",
        "alice requested CR-2 (resume of P-1)",
        "P-1 resumed on CR-2: asked by alice, approved by bob",
        "P-1 completed: 1 of 3 succeeded, 2 died again",
        "alice requested CR-3 (plan of 2 in clips)",
        "P-2 completed: 2 of 2 succeeded, 0 died again",
        "v1 passed",
        "| resolved | dora |",
    )
    for item in ("v1", "v2", "v3"):
        assert re.search(rf"- \[x\] {item} .*: measured by queuebot", export), export
    recovery = re.search(r"- From the declaration to recovery \(validated\): (.+)", export)
    assert recovery is not None, export
    assert "not measured" not in recovery.group(1)
