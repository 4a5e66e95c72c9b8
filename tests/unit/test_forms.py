"""Forms, not flags (commands/forms/): which typed commands open a form and for whom, what
a submission makes, and every form as Slack and Discord draw it, within their limits
(slack_sdk's models; discord.py's components and the fake Discord's check)."""

from __future__ import annotations

import json

import pytest

from bot.discord.forms import FormModal, values_of
from bot.slack.forms import read_submission, view_of
from bot.slack.payloads import Malformed
from commands.forms import Choice, Form, FormField, form_for_text, not_opened, submitted
from commands.parser import read
from services.errors import PermissionDenied
from testkit.fake_discord import modal_problem
from testkit.slack_views import check_view
from tests.helpers.people import SLACK_ALICE, SLACK_BOB
from tests.unit.test_handlers import change_calls, make_router, slack_user


@pytest.mark.parametrize(
    ("text", "kind", "target"),
    [
        ("redrive --error-like ffmpeg --sample 2", "redrive", None),
        ("redrive 4102 4103 --queue workers --incident INC-2", "redrive", None),
        ("reject CR-17", "reject", 17),
        ("resume P-3", "resume", 3),
        ("rollback 3", "rollback", 3),
    ],
)
async def test_a_change_typed_without_its_reason_opens_its_form(
    text: str, kind: str, target: int | None
) -> None:
    router, _ = make_router()
    form = await form_for_text(router, "queue", text, slack_user(SLACK_ALICE))
    assert form is not None
    assert (form.kind, form.target) == (kind, target)
    assert form.fields[-1 if kind != "redrive" else 1].name == "reason"
    assert change_calls(router) == []  # a form asks nothing yet


async def test_the_redrive_form_holds_what_was_typed() -> None:
    router, _ = make_router()
    typed = "redrive --error-like 'ffmpeg exited' --tenant acme --all-x"
    assert await form_for_text(router, "queue", typed, slack_user(SLACK_ALICE)) is None
    typed = "redrive 4102 4103 --queue workers --evidence https://ci/1 --incident INC-2"
    form = await form_for_text(router, "queue", typed, slack_user(SLACK_ALICE))
    assert form is not None
    shown = {f.name: f.initial for f in form.fields}
    assert shown["selection"] == "4102 4103 --queue workers"
    assert shown["evidence"] == "https://ci/1"
    assert shown["incident"] == "INC-2"  # offered though no incident is open here


@pytest.mark.parametrize(
    "text",
    [
        'redrive --all --reason "fix deployed"',  # complete: it runs
        "redrive",  # wrong otherwise: its own answer says what is missing
        "redrive 1 --all",
        "resume",
        "resolve INC-3",  # no override: no reason to ask
        'reject CR-2 --reason "wrong tenant"',
        "triage",
        "help redrive",
        "redrive --help",
        'redrive "unclosed',
    ],
)
async def test_a_command_that_needs_no_form_opens_none(text: str) -> None:
    router, _ = make_router()
    group = "incident" if text.startswith("resolve") else "queue"
    assert await form_for_text(router, group, text, slack_user(SLACK_ALICE)) is None


async def test_whoever_may_not_run_the_command_is_refused_rather_than_given_a_form() -> None:
    router, _ = make_router()
    with pytest.raises(PermissionDenied, match="operator"):
        await form_for_text(router, "queue", "redrive --all", slack_user(SLACK_BOB))
    with pytest.raises(PermissionDenied, match="not listed under"):
        await form_for_text(router, "queue", "reject CR-1", slack_user("U0NOBODY"))


@pytest.mark.parametrize(
    ("kind", "target", "values", "typed"),
    [
        (
            "redrive",
            None,
            {"selection": "--error-like ffmpeg", "reason": "OOM fix “v2” deployed"},
            '/queue redrive --error-like ffmpeg --reason "OOM fix \\"v2\\" deployed"',
        ),
        (
            "redrive",
            None,
            {
                "selection": "4102",
                "reason": "it's fixed",
                "evidence": "https://ci/9",
                "incident": "INC-4",
            },
            '/queue redrive 4102 --reason "it\'s fixed" --evidence https://ci/9 --incident INC-4',
        ),
        ("reject", 17, {"reason": ""}, "/queue reject CR-17"),
        ("reject", 17, {"reason": "wrong tenant"}, '/queue reject CR-17 --reason "wrong tenant"'),
        ("resume", 3, {"reason": "second fix"}, '/queue resume P-3 --reason "second fix"'),
        ("rollback", 3, {"reason": "did not hold"}, '/queue rollback P-3 --reason "did not hold"'),
        (
            "resolve",
            None,
            {"reason": "counts match"},
            '/incident resolve --override --reason "counts match"',
        ),
        (
            "declare",
            5,
            {"scenario": "gd:queue-loss", "summary": "jobs stopped", "queue": ""},
            '/incident declare gd:queue-loss "jobs stopped" --from-alert 5',
        ),
    ],
)
def test_a_right_submission_is_the_command_typed_whole(
    kind: str, target: int | None, values: dict[str, str], typed: str
) -> None:
    made = submitted(kind, target, values)
    assert made.errors == {}
    assert made.text is not None
    group, _, rest = typed.removeprefix("/").partition(" ")
    assert read(group, made.text).command == read(group, rest).command


@pytest.mark.parametrize(
    ("kind", "values", "errors"),
    [
        ("redrive", {"selection": "", "reason": "fix"}, {"selection": "name the jobs"}),
        ("redrive", {"selection": "--all", "reason": "ok"}, {"reason": "at least 3"}),
        ("redrive", {"selection": "--all --sample 9", "reason": "fix"}, {"selection": "1 and 5"}),
        (
            "redrive",
            {"selection": "--all", "reason": "fix", "evidence": "the dashboard"},
            {"evidence": "https://"},
        ),
        ("redrive", {"selection": "--all", "reason": "x" * 501}, {"reason": "500"}),
        ("resume", {"reason": ""}, {"reason": "say why"}),
        ("declare", {"scenario": "", "summary": "x"}, {"scenario": "choose", "summary": "3 to"}),
        (
            "declare",
            {"scenario": "gd:a", "summary": "fine", "queue": "two words"},
            {"queue": "single word"},
        ),
    ],
)
def test_a_wrong_value_is_said_on_its_field(
    kind: str, values: dict[str, str], errors: dict[str, str]
) -> None:
    made = submitted(kind, 3, values)
    assert made.text is None
    assert set(made.errors) == set(errors)
    for name, words in errors.items():
        assert words in made.errors[name]


def extreme_forms() -> list[Form]:
    """Every field kind at the sizes the platforms cap: long titles and labels, long
    initial values, more options than either platform shows."""
    many = tuple(Choice(f"INC-{n}", "x" * 200) for n in range(1, 120))
    fields = (
        FormField("selection", "What to redrive " * 10, initial="4102 " * 900, max_length=3000),
        FormField("reason", "Reason", "paragraph", initial="r" * 600, hint="h" * 300),
        FormField("evidence", "Evidence", "url", initial="https://x/" + "y" * 90, required=False),
        FormField("incident", "Incident", "choice", initial="INC-7", options=many, required=False),
        FormField("queue", "Queue", "choice", options=(), required=False),
    )
    return [
        Form(
            "redrive", "Redrive dead letters of a very long title", "Ask for approval " * 3, fields
        ),
        Form("reject", "Reject CR-999999999999", "Reject", fields[1:2], 999_999_999_999),
    ]


@pytest.mark.parametrize("form", extreme_forms(), ids=lambda f: f.kind)
def test_every_form_is_within_slacks_and_discords_limits(form: Form) -> None:
    view = view_of(form, {"answer": "https://hooks.slack.com/x", "channel": "C0", "thread": None})
    check_view(view)  # slack_sdk's models: what Slack refuses, refused here
    modal = FormModal(form).to_dict()
    assert modal_problem(modal) is None, modal
    shown = {c["component"]["custom_id"] for c in modal["components"]}
    assert "queue" not in shown  # a choice of nothing is left out


def test_a_discord_submission_is_read_wherever_discord_nests_its_values() -> None:
    data = {
        "custom_id": "qbform:redrive:0",
        "components": [
            {"type": 18, "component": {"type": 4, "custom_id": "reason", "value": "fix"}},
            {"type": 18, "component": {"type": 3, "custom_id": "incident", "values": []}},
            {"type": 1, "components": [{"type": 4, "custom_id": "selection", "value": "--all"}]},
        ],
    }
    assert values_of(data) == {"reason": "fix", "incident": "", "selection": "--all"}


def slack_submission(**meta: object) -> dict[str, object]:
    carried = {"kind": "reject", "target": 17, "answer": "https://hooks.slack.com/x"} | meta
    return {
        "type": "view_submission",
        "user": {"id": "U0BOB"},
        "view": {
            "id": "V0000001",
            "callback_id": "qbform:reject",
            "private_metadata": json.dumps(carried),
            "state": {"values": {"reason": {"value": {"type": "plain_text_input", "value": "x"}}}},
        },
    }


def test_a_slack_submission_is_read_with_where_to_answer_checked_again() -> None:
    read_back = read_submission(slack_submission(), slack_api="https://slack.com/api/")
    assert (read_back.kind, read_back.target, read_back.values) == ("reject", 17, {"reason": "x"})
    assert read_back.answer == "https://hooks.slack.com/x"
    for meta in (
        {"answer": "http://elsewhere.example/x"},  # plain http, not at Slack's API origin
        {"target": "17; DROP"},
        {"channel": "C0 OPS"},
    ):
        with pytest.raises(Malformed):
            read_submission(slack_submission(**meta), slack_api="https://slack.com/api/")
    unknown = slack_submission()
    unknown["view"]["callback_id"] = "qbform:explode"  # type: ignore[index]
    with pytest.raises(Malformed, match="not one of queuebot's forms"):
        read_submission(unknown, slack_api="https://slack.com/api/")


@pytest.mark.parametrize(
    ("form", "typed"),
    [
        (
            Form("redrive", "t", "s", (FormField("selection", "x", initial="--all"),)),
            '/queue redrive --all --reason "WHY"',
        ),
        (Form("reject", "t", "s", (), 17), '/queue reject CR-17 --reason "WHY"'),
        (Form("rollback", "t", "s", (), 3), '/queue rollback P-3 --reason "WHY"'),
        (Form("resolve", "t", "s", ()), '/incident resolve --override --reason "WHY"'),
        (
            Form(
                "declare",
                "t",
                "s",
                (
                    FormField("scenario", "x", "choice", initial="gd:queue-loss"),
                    FormField("queue", "x", "choice", initial="clips"),
                ),
                4,
            ),
            '/incident declare gd:queue-loss "SUMMARY" --queue clips --from-alert 4',
        ),
    ],
    ids=lambda v: v.kind if isinstance(v, Form) else "",
)
def test_a_form_that_cannot_open_names_the_command_to_type_whole(form: Form, typed: str) -> None:
    said = not_opened(form, "expired_trigger_id").message.summary
    assert "could not open in time" in said and "nothing was done" in said
    assert said.endswith(typed)
    group, _, rest = typed.removeprefix("/").partition(" ")
    if "SUMMARY" not in rest and "ID..." not in rest:
        read(group, rest.replace("WHY", "the fix is in"))  # what it names is a command


def test_a_complaint_about_the_selection_is_shown_on_the_selection() -> None:
    made = submitted("redrive", None, {"selection": "--all --bogus", "reason": "fixed it"})
    assert list(made.errors) == ["selection"]
    assert "unknown option --bogus" in made.errors["selection"]
