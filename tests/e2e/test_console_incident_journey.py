"""An incident carries its redrive from declaration to postmortem, in ``queuebot demo`` with
its simulated worker: dora declares, alice asks a staged redrive under the incident and
bob approves; the sample dies again and halts the plan; the fix is deployed
(``/demo fix transcoder``), the plan is resumed and completes with two dead again, which
``--from-plan`` redrives; queuebot then measures the validation itself, the incident is
resolved, and the postmortem lists every request, the plan's halt, resume and completion
in order, and a measured recovery time."""

from __future__ import annotations

import re
from pathlib import Path

from tests.e2e.demo_session import demo_session
from tests.e2e.test_console import replies
from tests.helpers.text import in_order


def test_an_incident_carries_its_redrive_to_a_measured_postmortem(tmp_path: Path) -> None:
    with demo_session(tmp_path) as demo:
        demo.say(
            '@dora /incident declare gd:failed-jobs-accumulating "clips die of upstream '
            'timeout" --queue clips'
        )
        demo.say(
            '@alice /queue redrive --error-like "upstream timeout" --sample 2 --reason '
            '"transcoder restarted" --incident INC-1'
        )
        demo.say("@bob /queue approve CR-1")
        demo.wait_for(1, "halted")
        demo.say("/demo fix transcoder")
        demo.say('@alice /queue resume P-1 --reason "transcoder fixed for real"')
        demo.say("@bob /queue approve CR-2")
        demo.wait_for(1, "completed")
        demo.say('@alice /queue redrive --from-plan P-1 --reason "the sample, after the fix"')
        demo.say("@bob /queue approve CR-3")
        demo.wait_for(2, "completed")
        demo.say("@dora /incident validate")
        demo.say("@dora /incident resolve")
        demo.say("@dora /incident export")
        out, err = demo.finish()
    assert demo.demo.returncode == 0, err
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
