"""Forms on Slack: a modal drawn from a ``Form`` (commands/forms.py), opened with the
trigger_id of the slash command, click or message shortcut that asked for it, and its
``view_submission`` read back.

A submission with a wrong value is answered in the acknowledgement itself, with an error
on its field (``response_action: errors``); the form stays open and nothing is written
down (so is one the ledger could not record: the database away, nothing done, the form
open to be sent again). A right one is written down in the delivery ledger, keyed by the view's id
(``slack:view:<id>``), *before* it is acknowledged (which closes the form): Slack's retry
of it is a repeat and is ignored, and the command runs once, answered where the command's
answer would have gone (the response_url the form carries, checked again on its way back;
the channel once that is past its life)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_bolt.response import BoltResponse

from bot.boundary import answer
from bot.delivery import WrittenDown
from bot.slack.listeners import ACCEPTED, SlackWiring, _listener, payload
from bot.slack.payloads import (
    Delivery,
    Malformed,
    _dig,
    _id,
    _optional_id,
    answer_url,
    request_of,
    trigger_of,
)
from commands.forms import (
    FORMS,
    Form,
    FormField,
    declare_form,
    form_for_text,
    not_opened,
    submitted,
)
from commands.model import Declare
from commands.reply import Reply

FORM = re.compile(r"^qbform:(?P<kind>[a-z]{1,20})$")  # a form's callback_id
DECLARE_FROM_MESSAGE = "queuebot_declare_from_message"  # the message shortcut's callback_id
VALUE = "value"  # every field's element's action_id (its block_id is the field's name)


def view_of(form: Form, carried: dict[str, Any]) -> dict[str, Any]:
    """The modal: one input block per field (block_id: the field's name); ``carried``
    (where to answer) goes in its private_metadata with the form's kind and target."""
    meta = json.dumps({"kind": form.kind, "target": form.target, **carried})
    return {
        "type": "modal",
        "callback_id": f"qbform:{form.kind}",
        "title": _plain(form.title, 24),
        "submit": _plain(form.submit, 24),
        "close": _plain("Cancel", 24),
        "private_metadata": meta,
        "blocks": [b for b in (_block(f) for f in form.fields) if b is not None],
    }


def _plain(text: str, most: int) -> dict[str, Any]:
    return {"type": "plain_text", "text": text if len(text) <= most else text[: most - 1] + "…"}


def _block(field: FormField) -> dict[str, Any] | None:
    element: dict[str, Any] = {"action_id": VALUE}
    if field.kind == "choice":
        if not field.options:
            return None
        options = [{"text": _plain(c.label, 75), "value": c.value[:150]} for c in field.options]
        element.update(type="static_select", options=options[:100])
        chosen = [o for o in options if o["value"] == field.initial]
        if chosen:
            element["initial_option"] = chosen[0]
    elif field.kind == "url":
        element["type"] = "url_text_input"
        if field.initial:
            element["initial_value"] = field.initial
    else:
        element.update(
            type="plain_text_input",
            multiline=field.kind == "paragraph",
            max_length=min(field.max_length, 3000),
        )
        if field.initial:
            element["initial_value"] = field.initial[: element["max_length"]]
    if field.hint:
        element["placeholder"] = _plain(field.hint, 150)
    return {
        "type": "input",
        "block_id": field.name,
        "optional": not field.required,
        "label": _plain(field.label, 2000),
        "element": element,
    }


async def open_form_if_asked(w: SlackWiring, d: Delivery, written: WrittenDown) -> bool:
    """Open the form a slash command (or an alert's Declare incident) asks for, in the
    place of running it: True when the person was answered so (the form opened, or they
    read why not: a refusal, a form that could not open in time), and the delivery is
    finished; False where the command runs as it is."""
    claim = written.claim
    if w.open_view is None or not d.trigger or claim is None:
        return False
    decision = d.decision
    if d.action_id and not (isinstance(decision, Declare) and decision.alert_group is not None):
        return False
    inv = w.invocation(d.user, d.channel, d.thread)

    async def asked() -> Form | None:
        if isinstance(decision, Declare):
            return await declare_form(w.router, inv, alert_group=decision.alert_group)
        return await form_for_text(w.router, d.group, d.text, inv)

    found = await answer(asked(), correlation_id=inv.correlation_id, where=d.where)
    if found is None:
        return False
    try:
        if isinstance(found, Reply):  # the normal refusal, or what else stood in the way
            await w.answer(d.response_url, payload(found))
        else:
            carried = {"answer": d.response_url, "channel": d.channel, "thread": d.thread}
            await _open(w, d.trigger, d.response_url, found, carried)
    finally:
        await answer(w.ledger.finish(claim), correlation_id=inv.correlation_id, where=d.where)
    return True


async def _open(
    w: SlackWiring, trigger: str, response_url: str, form: Form, carried: dict[str, Any]
) -> None:
    assert w.open_view is not None
    view = view_of(form, {**carried, "since": time.time()})
    problem = await w.open_view(trigger, view)
    if problem is not None:
        w.log.info("a %s form did not open: %s", form.kind, problem)
        await w.answer(response_url, payload(not_opened(form, problem)))


# -- submitted ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Submission:
    view_id: str
    kind: str
    target: int | None
    values: dict[str, str]
    user: str
    answer: str  # the response_url of the command that opened the form
    channel: str | None
    thread: str | None
    since: datetime | None


def read_submission(body: dict[str, Any], *, slack_api: str) -> Submission:
    """A view_submission of one of queuebot's forms; Malformed names the part Slack would
    never send (or queuebot never wrote: private_metadata is queuebot's own)."""
    view = body.get("view")
    found = FORM.fullmatch(str(_dig(view, "callback_id") or ""))
    if found is None or found["kind"] not in FORMS:
        raise Malformed("the view is not one of queuebot's forms")
    try:
        meta = json.loads(str(_dig(view, "private_metadata") or ""))
    except ValueError:
        raise Malformed("the form's private_metadata is not queuebot's") from None
    target = meta.get("target") if isinstance(meta, dict) else None
    if not isinstance(meta, dict) or not (target is None or type(target) is int):
        raise Malformed("the form's private_metadata is not queuebot's")
    since = meta.get("since")
    values: dict[str, str] = {}
    state = _dig(view, "state", "values")
    for block, elements in (state or {}).items() if isinstance(state, dict) else ():
        element = elements.get(VALUE) if isinstance(elements, dict) else None
        if not isinstance(element, dict):
            continue
        chosen = _dig(element, "selected_option", "value")
        value = chosen if chosen is not None else element.get("value")
        values[str(block)] = value if isinstance(value, str) else ""
    return Submission(
        view_id=_id(_dig(view, "id"), "view.id"),
        kind=found["kind"],
        target=target,
        values=values,
        user=_id(_dig(body, "user", "id"), "user.id"),
        answer=answer_url(meta.get("answer"), slack_api),
        channel=_optional_id(meta.get("channel"), "the form's channel"),
        thread=_optional_id(meta.get("thread"), "the form's thread"),
        since=datetime.fromtimestamp(since, UTC) if isinstance(since, int | float) else None,
    )


def submitting(
    w: SlackWiring,
) -> Callable[..., Awaitable[BoltResponse | None]]:
    """A listener middleware for a form's submission: a wrong value is answered on its
    field and goes no further; a right one is written down, then acknowledged (the form
    closes), and waits in Bolt's context for the listener that runs it."""

    async def submit(
        body: dict[str, Any],
        ack: AsyncAck,
        context: AsyncBoltContext,
        next: Callable[[], Awaitable[None]],
    ) -> BoltResponse | None:
        try:
            s = read_submission(body, slack_api=w.slack_api_base_url)
        except Malformed as exc:
            w.refused("refused a signed Slack form submission with 400: %s", exc)
            return BoltResponse(status=400, body=f"malformed Slack request: {exc}\n")
        result = submitted(s.kind, s.target, s.values)
        if result.text is None:
            shown = next_field(s.values)
            errors = {
                (name if name in s.values else shown): words[:500]
                for name, words in result.errors.items()
            }
            # answered in the acknowledgement itself: the form stays open, showing them
            return await ack(response_action="errors", errors=errors)
        d = Delivery(
            key=f"slack:view:{s.view_id}",
            where=f"Slack form /{FORMS[s.kind]} {s.kind}",
            user=s.user,
            channel=s.channel,
            response_url=s.answer,
            group=FORMS[s.kind],
            text=result.text,
            thread=s.thread,
            since=s.since,
        )
        written = await w.write_down(d.key, request_of(d))
        if not written.recorded:  # nothing done: the form stays open to be sent again
            said = f"not sent: queuebot could not record it ({written.why}); send it again"
            return await ack(response_action="errors", errors={next_field(s.values): said[:500]})
        context[ACCEPTED] = (d, written)
        await ack()
        await next()
        return None

    return submit


def next_field(values: dict[str, str]) -> str:
    """The field an error goes on when it names none the form shows: the first."""
    return next(iter(values), "reason")


# -- the message shortcut ----------------------------------------------------------------


def declaring_from_message(w: SlackWiring) -> Any:
    """ "Declare incident from this message": the declaration form, its summary the
    message's text, answering in that message's thread."""

    async def on_shortcut(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        try:
            response_url = answer_url(body.get("response_url"), w.slack_api_base_url)
            user = _id(_dig(body, "user", "id"), "user.id")
            channel = _optional_id(_dig(body, "channel", "id"), "channel.id")
            given = body.get("message")
            message: dict[str, Any] = given if isinstance(given, dict) else {}
            thread = _optional_id(message.get("thread_ts") or message.get("ts"), "message.ts")
        except Malformed as exc:
            w.refused("a message shortcut queuebot cannot answer: %s", exc)
            return
        trigger = trigger_of(body)
        text = message.get("text")
        inv = w.invocation(user, channel, thread)
        summary = text.strip() if isinstance(text, str) and text.strip() else None
        w.spawn(_declare_from(w, inv, trigger, response_url, summary, thread))

    return on_shortcut


async def _declare_from(  # noqa: PLR0917 - one call site, every value named there
    w: SlackWiring,
    inv: Any,
    trigger: str,
    response_url: str,
    summary: str | None,
    thread: str | None,
) -> None:
    where = "Slack shortcut declare"
    found = await answer(
        declare_form(w.router, inv, summary=summary), correlation_id=inv.correlation_id, where=where
    )
    if isinstance(found, Reply):
        await w.answer(response_url, payload(found))
        return
    carried = {"answer": response_url, "channel": inv.channel, "thread": thread}
    await _open(w, trigger, response_url, found, carried)


def register_forms(app: AsyncApp, w: SlackWiring) -> None:
    app.view(FORM, middleware=[submitting(w)])(_listener(w))
    app.shortcut(DECLARE_FROM_MESSAGE)(declaring_from_message(w))
