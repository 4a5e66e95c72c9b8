"""Slack end to end: the real `queuebot serve` process, signed requests built the way Slack
builds them, and the Web API and response_url pointed at a local fake that records all."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from urllib.parse import parse_qs, urlencode

import httpx
import pytest

from testkit import web
from testkit.fake_slack import Call
from testkit.slack_requests import send_interaction, signed, slash_fields, view_submission
from tests.e2e.slack_stack import Stack, answer_to, opened, serving_stack, texts
from tests.helpers.people import SLACK_ALICE, SLACK_BOB, SLACK_DORA, SLACK_STRANGER
from tests.helpers.platforms import button_click


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    with serving_stack(request.param, tmp_path_factory.mktemp("slack")) as made:
        yield made


_counter = iter(range(1, 1_000_000))


def slash(
    stack: Stack,
    text: str,
    *,
    user: str = SLACK_ALICE,
    name: str | None = None,
    headers: dict[str, str] | None = None,
    body: str | None = None,
) -> tuple[httpx.Response, str, str]:
    n = next(_counter)
    name = name or f"cmd{n}-{time.monotonic_ns()}"
    body = body or urlencode(
        slash_fields(stack.fake, text, name=name, user=user, trigger=f"{n}.{name}")
    )
    response = web.post(
        f"{stack.url}/slack/events",
        content=body,
        headers={**signed(body), **(headers or {})},
        timeout=10,
    )
    return response, name, body


def click(
    stack: Stack,
    action_id: str,
    *,
    user: str,
    action_ts: str | None = None,
    name: str | None = None,
) -> tuple[httpx.Response, str]:
    name = name or f"click-{time.monotonic_ns()}"
    payload = button_click(stack.fake, action_id, user=user, name=name, action_ts=action_ts)
    body = urlencode({"payload": json.dumps(payload)})
    return web.post(
        f"{stack.url}/slack/events", content=body, headers=signed(body), timeout=10
    ), name


def requests_count(stack: Stack) -> int:
    return int(stack.sql("SELECT count(*) FROM qb_change_requests")[0][0])


def test_serve_checks_its_token_before_the_first_command(stack: Stack) -> None:
    # Bolt would otherwise call auth.test inside the first request, before its ack
    assert len(stack.fake.recorded("/api/auth.test")) == 1
    _, name, _ = slash(stack, "help")
    answer_to(stack.fake, name)
    assert len(stack.fake.recorded("/api/auth.test")) == 1


def test_serve_starts_without_a_warning(stack: Stack) -> None:
    # Bolt warns at every start about a token it ignores unless built the way queuebot does;
    # queuebot warns about an unkeyed audit trail, and this one is keyed
    start = stack.served.log.read_text().partition("queuebot serving on")[0]
    assert [line for line in start.splitlines() if " WARNING " in line] == []


def test_triage_is_acknowledged_and_answered(stack: Stack) -> None:
    started = time.monotonic()
    response, name, _ = slash(stack, "triage --queue workers")
    assert response.status_code == 200 and time.monotonic() - started < 3
    answer = answer_to(stack.fake, name)
    assert answer.body["response_type"] == "ephemeral"
    header = answer.body["blocks"][0]
    assert header["type"] == "header" and header["text"]["type"] == "plain_text"
    assert header["text"]["text"].startswith("Triage: queue workers (worker_queue), ")
    assert header["text"]["emoji"] is False
    assert "Triage: queue workers (worker_queue)" in texts(answer)
    assert "failed_permanently  dead" in texts(answer)


def test_a_read_is_shared_with_the_channel_only_when_asked(stack: Stack) -> None:
    _, name, _ = slash(stack, "dlq --limit 3 --share")
    shared = answer_to(stack.fake, name)
    assert shared.body["response_type"] == "in_channel"
    assert "Dead letters in queue" in texts(shared)
    _, name, _ = slash(stack, "dlq --limit 3")
    assert answer_to(stack.fake, name).body["response_type"] == "ephemeral"


def test_an_answer_slack_refused_with_503_is_sent_again(stack: Stack) -> None:
    stack.fake.fail_answers(1)
    _, name, _ = slash(stack, "stuck --queue workers")
    answer = answer_to(stack.fake, name)
    assert "Stuck jobs in queue workers" in texts(answer)
    assert len(stack.fake.recorded(f"/response/{name}#503")) == 1


def test_requeue_then_second_person_approves_once(stack: Stack) -> None:
    failed = [
        str(i)
        for (i,) in stack.sql(
            "SELECT id FROM dev_r_worker_queue WHERE status = 'failed' AND failure_reason = "
            "'spawn_ram' ORDER BY id"
        )
    ]
    response, name, _ = slash(
        stack, f'requeue {" ".join(failed)} --queue workers --reason "RAM freed on bms-1"'
    )
    assert response.status_code == 200
    request = answer_to(stack.fake, name)
    assert request.body["response_type"] == "in_channel"
    actions = next(b for b in request.body["blocks"] if b["type"] == "actions")
    approve, reject = actions["elements"]
    assert approve["action_id"].startswith("cr:approve:") and approve["style"] == "primary"
    assert reject["action_id"].startswith("cr:reject:") and reject["style"] == "danger"
    number = approve["action_id"].rsplit(":", 1)[1]

    own, own_name = click(stack, approve["action_id"], user=SLACK_ALICE)
    assert own.status_code == 200
    refusal = answer_to(stack.fake, own_name)
    assert refusal.body["replace_original"] is False
    assert refusal.body["response_type"] == "ephemeral"
    assert f"you requested CR-{number}" in texts(refusal)

    action_ts = f"{time.time():.6f}"
    ok, ok_name = click(stack, approve["action_id"], user=SLACK_BOB, action_ts=action_ts)
    assert ok.status_code == 200
    done = answer_to(stack.fake, ok_name)
    assert done.body["replace_original"] is True
    assert (
        f"CR-{number}: requeue 2 row(s) in queue workers - approved by bob and executed"
        in texts(done)
    )
    assert not [b for b in done.body["blocks"] if b["type"] == "actions"]
    statuses = stack.sql(f"SELECT status FROM dev_r_worker_queue WHERE id IN ({', '.join(failed)})")
    assert {s for (s,) in statuses} == {"queued"}

    again, again_name = click(stack, approve["action_id"], user=SLACK_BOB, action_ts=action_ts)
    assert again.status_code == 200
    key = f"slack:action:{action_ts}:{SLACK_BOB}:{approve['action_id']}"
    stack.served.wait_for_log(f"repeated delivery {key}: acted on or in hand already, ignored")
    assert not stack.fake.recorded(f"/response/{again_name}")
    executed = stack.sql(
        "SELECT count(*) FROM qb_audit_events WHERE action = 'change.executed' AND subject = :s",
        s=f"CR-{number}",
    )
    assert executed[0][0] == 1


def test_retried_slash_command_creates_no_second_request(stack: Stack) -> None:
    (failed,) = stack.sql("SELECT min(id) FROM dev_r_worker_queue WHERE status = 'failed'")[0]
    before = requests_count(stack)
    first, name, body = slash(stack, f'requeue {failed} --queue workers --reason "retry test"')
    assert first.status_code == 200
    answer_to(stack.fake, name)
    retry = web.post(
        f"{stack.url}/slack/events",
        content=body,
        headers={**signed(body), "X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"},
        timeout=10,
    )
    assert retry.status_code == 200
    trigger = parse_qs(body)["trigger_id"][0]
    stack.served.wait_for_log(f"repeated delivery slack:command:{trigger}: acted on or in hand")
    assert requests_count(stack) == before + 1
    assert len(stack.fake.recorded(f"/response/{name}")) == 1


@pytest.mark.parametrize("problem", ["bad signature", "no signature", "six minutes old"])
def test_unsigned_or_stale_requests_get_401_and_change_nothing(stack: Stack, problem: str) -> None:
    (failed,) = stack.sql("SELECT max(id) FROM dev_r_worker_queue WHERE status = 'failed'")[0]
    before = requests_count(stack)
    body = urlencode(
        {
            "command": "/queue",
            "user_id": SLACK_ALICE,
            "channel_id": "C0OPS",
            "text": f'requeue {failed} --queue workers --reason "forged"',
            "response_url": stack.fake.response_url("forged"),
            "trigger_id": "x.1",
        }
    )
    headers = {
        "bad signature": signed(body, secret="not-the-secret"),
        "no signature": {"Content-Type": "application/x-www-form-urlencoded"},
        "six minutes old": signed(body, ts=int(time.time()) - 360),
    }[problem]
    response = web.post(f"{stack.url}/slack/events", content=body, headers=headers, timeout=10)
    assert response.status_code == 401
    time.sleep(0.3)
    assert requests_count(stack) == before
    assert not stack.fake.recorded("/response/forged")


def test_unknown_user_gets_read_only(stack: Stack) -> None:
    response, name, _ = slash(
        stack, 'requeue 1 --queue workers --reason "let me in"', user=SLACK_STRANGER
    )
    assert response.status_code == 200
    refusal = answer_to(stack.fake, name)
    assert refusal.body["response_type"] == "ephemeral"
    assert "your slack account U0NOBODY is not listed under [people]" in texts(refusal)
    _allowed, allowed_name, _ = slash(stack, "stuck", user=SLACK_STRANGER)
    assert "Stuck jobs in queue clips: 3" in texts(answer_to(stack.fake, allowed_name))


def test_bad_input_gets_usage_not_a_traceback(stack: Stack) -> None:
    response, name, _ = slash(stack, "dlq --limit")
    assert response.status_code == 200
    reply = answer_to(stack.fake, name)
    assert "--limit needs a value" in texts(reply) and "Usage: /queue dlq" in texts(reply)


def test_a_plan_approved_by_button_reports_progress_in_a_thread(stack: Stack) -> None:
    response, name, _ = slash(
        stack, 'redrive --error-like ffmpeg --sample 2 --reason "OOM fix deployed"'
    )
    assert response.status_code == 200
    preview = answer_to(stack.fake, name)
    assert "staged redrive of 14 dead letter(s) in queue clips" in texts(preview)
    assert "dead letters not growing (10 min)" in texts(preview)
    approve = next(b for b in preview.body["blocks"] if b["type"] == "actions")["elements"][0]

    ok, ok_name = click(stack, approve["action_id"], user=SLACK_BOB)
    assert ok.status_code == 200
    done = answer_to(stack.fake, ok_name)
    assert "plan P-1 started with its sample of 2" in texts(done)
    plan_post = stack.fake.wait_for(
        lambda c: (
            c.path == "/api/chat.postMessage"
            and "P-1: redrive 14 dead letters" in c.body.get("text", "")
        )
    )[0]
    assert plan_post.body["channel"] == "C0OPS"
    thread = stack.fake.wait_for(
        lambda c: c.path == "/api/chat.postMessage" and c.body.get("thread_ts") == plan_post.ts
    )[0]
    assert "P-1 sample started: 2 job(s) returned to the queue" in thread.body["text"]


def ledger_size(stack: Stack) -> int:
    return int(stack.sql("SELECT count(*) FROM qb_deliveries")[0][0])


@pytest.mark.parametrize(
    "trigger", ["1.\x00.nul", "", "has space", "x" * 300, "ctl\x1b[2J"], ids=repr
)
def test_a_trigger_id_slack_never_sends_is_refused_with_400(stack: Stack, trigger: str) -> None:
    name = f"trigger-{time.monotonic_ns()}"
    recorded = ledger_size(stack)
    fields = slash_fields(stack.fake, "help", name=name, user=SLACK_ALICE, trigger=trigger)
    response, _, _ = slash(stack, "help", name=name, body=urlencode(fields))
    assert response.status_code == 400
    assert "trigger_id" in response.text
    time.sleep(0.3)
    assert not stack.fake.recorded(f"/response/{name}")
    assert ledger_size(stack) == recorded


@pytest.mark.parametrize(
    "url",
    ["not a url", "ftp://hooks.slack.com/x", "http://hooks.slack.com/commands/x", "https://", ""],
)
def test_a_response_url_queuebot_must_not_call_is_refused_with_400(stack: Stack, url: str) -> None:
    n = next(_counter)
    fields = slash_fields(stack.fake, "help", name="unused", user=SLACK_ALICE, trigger=f"{n}.url")
    fields["response_url"] = url
    response, _, _ = slash(stack, "help", body=urlencode(fields))
    assert response.status_code == 400
    assert "response_url" in response.text


def test_an_unreachable_response_url_costs_one_log_line(stack: Stack) -> None:
    n = next(_counter)
    fields = slash_fields(stack.fake, "help", name="unused", user=SLACK_ALICE, trigger=f"{n}.gone")
    fields["response_url"] = f"https://127.0.0.1:9/commands/gone-{n}"  # nothing listens
    response, _, _ = slash(stack, "help", body=urlencode(fields))
    assert response.status_code == 200  # a well-formed URL: acknowledged, answered in vain
    stack.served.wait_for_log("could not deliver an answer to 127.0.0.1:9")
    time.sleep(0.5)
    log = stack.served.log.read_text()
    assert "Task exception was never retrieved" not in log
    # the SDK's retries add INFO lines of their own; queuebot's word on it is one line
    warned = [
        line
        for line in log.splitlines()
        if "127.0.0.1:9" in line and (" WARNING " in line or " ERROR " in line)
    ]
    assert len(warned) == 1, warned


@pytest.mark.parametrize("action_id", ["cr:approve:0", "cr:reject:000", "cr:approve:x1"])
def test_a_button_naming_no_request_gets_a_clear_reply(stack: Stack, action_id: str) -> None:
    response, name = click(stack, action_id, user=SLACK_BOB)
    assert response.status_code == 200
    reply = answer_to(stack.fake, name)
    assert reply.body["response_type"] == "ephemeral"
    assert reply.body["replace_original"] is False
    assert f"this button ({action_id}) names no change request" in texts(reply)


def test_an_alert_threads_triage_button_answers_whoever_clicked(stack: Stack) -> None:
    response, name = click(stack, "q:triage:workers", user=SLACK_BOB)
    assert response.status_code == 200
    answer = answer_to(stack.fake, name)
    assert answer.body["response_type"] == "ephemeral"
    assert not answer.body.get("replace_original")  # the thread's breakdown stays
    assert "Triage: queue workers (worker_queue)" in texts(answer)
    response, name = click(stack, "q:failed:workers", user=SLACK_STRANGER)
    assert "queue workers" in texts(answer_to(stack.fake, name))


def test_the_incident_command_is_answered_like_queue(stack: Stack) -> None:
    n = next(_counter)
    name = f"incident{n}-{time.monotonic_ns()}"
    fields = slash_fields(stack.fake, "runbooks", name=name, user=SLACK_DORA, trigger=f"{n}.{name}")
    response, _, _ = slash(stack, "", body=urlencode({**fields, "command": "/incident"}))
    assert response.status_code == 200
    answer = answer_to(stack.fake, name)
    assert answer.body["response_type"] == "ephemeral"
    shown = texts(answer)
    assert "Runbooks (3)" in shown
    assert "queuebot role duty-officer: dora" in shown


def incident(stack: Stack, text: str, *, user: str) -> Call:
    n = next(_counter)
    name = f"incident{n}-{time.monotonic_ns()}"
    fields = slash_fields(stack.fake, text, name=name, user=user, trigger=f"{n}.{name}")
    response, _, _ = slash(stack, "", body=urlencode({**fields, "command": "/incident"}))
    assert response.status_code == 200
    return answer_to(stack.fake, name)


def test_an_incident_declared_by_slash_command_opens_its_thread_with_the_checklist(
    stack: Stack,
) -> None:
    refused = incident(
        stack, 'declare gd:queue-loss "jobs stopped" --queue clips', user=SLACK_ALICE
    )
    assert "only the operations duty officer may declare gd:queue-loss" in texts(refused)
    assert "dora" in texts(refused)
    declared = incident(
        stack, 'declare gd:queue-loss "jobs stopped" --queue clips', user=SLACK_DORA
    )
    assert "declared (gd:queue-loss), led by dora" in texts(declared)
    assert declared.body["response_type"] == "in_channel"
    checklist = stack.fake.wait_for(
        lambda c: c.path == "/api/chat.postMessage" and "declared: jobs stopped" in c.body["text"]
    )[0]
    assert checklist.body["channel"] == "C0OPS"  # where it was declared
    notified = incident(stack, "notify operators", user=SLACK_DORA)
    assert "the message to the operators is queued, not yet delivered" in texts(notified)
    told = stack.fake.wait_for(
        lambda c: (
            c.path == "/api/chat.postMessage"
            and c.body.get("channel") == "C0OPS"
            and "queue-loss runbook is running, led by dora" in json.dumps(c.body)
        )
    )[0]
    assert not told.body.get("thread_ts")
    in_thread = stack.fake.wait_for(
        lambda c: c.path == "/api/chat.postMessage" and c.body.get("thread_ts") == checklist.ts
    )[0]
    assert "dora told the operators" in texts(in_thread)


def test_the_declare_button_of_an_alert_thread_opens_the_form_that_declares_in_that_thread(
    stack: Stack,
) -> None:
    # the demo's workers queue has more than 3 failed jobs with an actionable reason:
    # the built-in detector raises FailedJobsAccumulating, with its Declare button
    root = stack.fake.wait_for(
        lambda c: (
            c.path == "/api/chat.postMessage"
            and not c.body.get("thread_ts")
            and "FailedJobsAccumulating" in c.body["text"]
        ),
        timeout=30,
    )[0]
    button = next(
        e["action_id"]
        for b in root.body["blocks"]
        if b["type"] == "actions"
        for e in b["elements"]
        if e["action_id"].startswith("inc:declare:")
    )
    before = set(stack.fake.views)
    response, name = click(stack, button, user=SLACK_DORA)
    assert response.status_code == 200
    view = opened(stack, before)
    fields = {b["block_id"]: b["element"] for b in view["blocks"]}
    # filled with the alert's scenario, summary and queue
    assert fields["scenario"]["initial_option"]["value"] == "gd:failed-jobs-accumulating"
    assert fields["summary"]["initial_value"] == "FailedJobsAccumulating on workers"
    assert fields["queue"]["initial_option"]["value"] == "workers"
    assert not stack.fake.recorded(f"/response/{name}")  # the form is the answer
    submitted = send_interaction(stack.url, view_submission(view, {}, user=SLACK_DORA))
    assert submitted.status_code == 200
    assert "declared (gd:failed-jobs-accumulating), led by dora" in texts(
        answer_to(stack.fake, name)
    )
    checklist = stack.fake.wait_for(
        lambda c: (
            c.path == "/api/chat.postMessage"
            and c.body.get("thread_ts") == root.ts
            and "declared: FailedJobsAccumulating on workers" in c.body["text"]
        )
    )[0]
    assert "UTC (from the alert)" in texts(checklist)  # the fault time, apart
