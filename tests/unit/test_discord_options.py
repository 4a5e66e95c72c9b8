"""Discord's typed options become the same commands as Slack's text, refuse what the text
parser refuses with a UsageError, and the Discord rendering stays within Discord's limits."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import discord
import pytest
from discord import app_commands
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.discord.buttons import view_for
from bot.discord.commands import Choices, groups
from bot.discord.render import MAX_CONTENT, render
from commands.catalog import CATALOG, find_spec, spec_for
from commands.model import Cancel, Dlq, Help, Redrive, Show, Triage
from commands.options import from_options, options_of
from commands.parser import parse
from services.config import load_config
from services.errors import ConfigError, UsageError
from services.message import Actions, Button, Heading, Message, Table, Text


def test_options_make_the_same_commands_as_text() -> None:
    assert from_options(
        "queue", "requeue", {"ids": "4102, 4103 4104", "reason": "allowlist fixed", "queue": "w"}
    ) == parse("queue", 'requeue 4102 4103 4104 --reason "allowlist fixed" --queue w')
    assert from_options("queue", "dlq", {"limit": 5, "failure-reason": "timeout"}) == Dlq(
        limit=5, reason="timeout"
    )
    assert from_options("queue", "triage", {"since": "24h", "share": True}) == Triage(
        since=timedelta(hours=24), share=True
    )
    assert from_options("queue", "cancel", {"duplicates": True, "reason": "dupes"}) == Cancel(
        duplicates=True, reason="dupes"
    )
    assert from_options("incident", "help", {}) == Help(group="incident")


def test_args_like_is_a_typed_option_of_show_dlq_and_redrive() -> None:
    for name in ("show", "dlq", "redrive"):
        options = {o.name: o for o in options_of(spec_for_name(name))}
        assert "args-like" in options and not options["args-like"].required
    assert not {o.name: o for o in options_of(spec_for_name("show"))}["job-id"].required
    assert from_options("queue", "show", {"args-like": "INV-104857"}) == Show(
        args_like="INV-104857"
    )
    assert from_options(
        "queue", "redrive", {"args-like": "INV-1048", "reason": "acquirer back"}
    ) == parse("queue", 'redrive --args-like INV-1048 --reason "acquirer back"')
    with pytest.raises(UsageError, match="--args-like: needs at least 2 characters"):
        from_options("queue", "dlq", {"args-like": "x"})


def spec_for_name(name: str) -> Any:
    spec = find_spec("queue", name)
    assert spec is not None
    return spec


@pytest.mark.parametrize(
    ("name", "values", "said"),
    [
        ("requeue", {"ids": "1 2"}, "needs reason"),
        ("requeue", {"ids": "1; DROP", "reason": "because"}, "is not a job id"),
        ("requeue", {"ids": " , ", "reason": "because"}, "needs ID"),
        ("dlq", {"limit": 0}, "must be between 1 and 200"),
        ("triage", {"since": "forever"}, "must be a duration"),
        ("cancel", {"reason": "because"}, "exactly one way"),
        ("approve", {"request": "CR-x"}, "is not a change request"),
        ("dlq", {"colour": "red"}, "unknown option"),
    ],
)
def test_bad_options_are_refused_with_the_usage_line(
    name: str, values: dict[str, Any], said: str
) -> None:
    with pytest.raises(UsageError) as refused:
        from_options("queue", name, values)
    assert said in refused.value.message
    assert refused.value.usage.startswith(f"/queue {name}")


@settings(max_examples=200, deadline=None)
@given(
    spec=st.sampled_from(CATALOG),
    raw=st.dictionaries(
        st.sampled_from(["ids", "reason", "limit", "queue", "since", "request", "scenario"]),
        st.one_of(st.text(max_size=60), st.integers(-5, 10**9), st.booleans(), st.none()),
        max_size=4,
    ),
)
def test_any_option_values_give_a_command_or_a_usage_error(spec: Any, raw: dict[str, Any]) -> None:
    names = {o.name for o in options_of(spec)}
    values = {k: v for k, v in raw.items() if k in names}
    try:
        command = from_options(spec.group, spec.name, values)
    except UsageError as refused:
        assert refused.message and refused.usage
    else:
        assert spec_for(command) is spec


def test_every_command_fits_discord_schema() -> None:
    tree = app_commands.CommandTree(discord.Client(intents=discord.Intents.none()))
    for group in groups(Choices(audiences=["operators"], failure_reasons=["timeout"])):
        schema = group.to_dict(tree)
        assert len(schema["options"]) <= 25
        for sub in schema["options"]:
            assert len(sub["description"]) <= 100
            assert len(sub.get("options", [])) <= 25
            for option in sub.get("options", []):
                assert 1 <= len(option["name"]) <= 32 and option["name"] == option["name"].lower()
                assert len(option["description"]) <= 100
            required = [o.get("required", False) for o in sub.get("options", [])]
            assert required == sorted(required, reverse=True)  # required ones first


def test_a_long_answer_is_attached_and_buttons_stay_within_limits() -> None:
    rows = tuple((str(n), "x" * 60) for n in range(200))
    buttons = tuple(Button(f"cr:approve:{n}", "Approve " * 20) for n in range(1, 40))
    message = Message(
        "long",
        (
            Heading("Triage"),
            Text("a" * 50),
            Table(("id", "error"), rows),
            Actions((*buttons, Button("q:" + "x" * 120, "too long an id"))),
        ),
    )
    rendered = render(message)
    assert len(rendered.content) <= MAX_CONTENT
    assert rendered.content.count("```") % 2 == 0
    assert rendered.attachment is not None and b"199" in rendered.attachment
    assert len(rendered.buttons) == 25
    view = view_for(rendered)
    assert view is not None
    custom_ids = [c.custom_id for c in view.children]  # type: ignore[attr-defined]
    assert len(custom_ids) == 25 and all(len(c) <= 100 for c in custom_ids)
    assert all(len(c.item.label or "") <= 80 for c in view.children)  # type: ignore[attr-defined]


def test_the_discord_section_is_validated(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('[discord]\nguild = "400000000000000001"\n')
    assert load_config(good, environ={}).file.discord.guild == "400000000000000001"
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    assert load_config(empty, environ={}).file.discord.guild is None
    for bad, said in (
        ('[discord]\nguild = "my-server"\n', "expected a Discord id (15-21 digits)"),
        ('[discord]\nguilds = "400000000000000001"\n', "discord.guilds"),
    ):
        path = tmp_path / "bad.toml"
        path.write_text(bad)
        with pytest.raises(ConfigError) as refused:
            load_config(path, environ={})
        assert said in str(refused.value)


def test_discord_offers_from_plan_and_override_growth_as_the_text_has_them() -> None:
    redrive = {o.name: o for o in options_of(spec_for(Redrive(from_plan=1, reason="fixed")))}
    assert {"from-plan", "override-growth"} <= set(redrive)
    assert redrive["override-growth"].flag is not None
    assert redrive["override-growth"].flag.kind == "bool"
    assert "from-plan" in {o.name for o in options_of(spec_for(Dlq()))}
    assert from_options(
        "queue",
        "redrive",
        {"from-plan": "P-1", "override-growth": True, "reason": "outage over"},
    ) == parse("queue", 'redrive --from-plan P-1 --override-growth --reason "outage over"')
    assert from_options("queue", "dlq", {"from-plan": "2"}) == Dlq(from_plan=2)
    with pytest.raises(UsageError, match="--from-plan takes a plan"):
        from_options("queue", "dlq", {"from-plan": "two"})
    commands = {c.name: c for g in groups(Choices()) for c in g.commands}
    names = {p.display_name for p in commands["redrive"].parameters}  # type: ignore[union-attr]
    assert {"from-plan", "override-growth"} <= names
