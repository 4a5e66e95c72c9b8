"""Free text to typed commands (commands/parser.py, commands/model.py).

Every bad line must come back as a UsageError that says what was wrong and carries the
usage line of the command that was meant; every good line becomes the typed model.
"""

from __future__ import annotations

import shlex
from datetime import timedelta

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from commands.catalog import CATALOG, find_spec, spec_for
from commands.model import (
    MAX_LIMIT,
    Approve,
    Cancel,
    Command,
    Dlq,
    Halt,
    Help,
    Housekeep,
    Oncall,
    Pending,
    Redrive,
    Reject,
    Requeue,
    Resume,
    Rollback,
    Show,
    ShowPlan,
    Stuck,
    Triage,
)
from commands.parser import MAX_TEXT, MAX_VALUE, parse, parse_line
from services.errors import UsageError

QUEUE_SPECS = [s for s in CATALOG if s.group == "queue"]  # /incident: test_incident_commands.py
USAGE = {s.name: s.usage for s in QUEUE_SPECS}
NAMES = [s.name for s in QUEUE_SPECS]
UUID = "3f2c9a1e-8d4b-4c1a-9e7f-0a1b2c3d4e5f"


def usage_error(line: str) -> UsageError:
    """Parse ``line``, expecting a UsageError with a usage line; return it."""
    with pytest.raises(UsageError) as info:
        parse_line(line)
    err = info.value
    assert err.message
    assert err.usage is not None
    assert err.usage.startswith("/queue ")
    return err


def render(
    name: str, positionals: list[str], flags: list[tuple[str, str | None]], form: str
) -> str:
    parts = ["/queue", name, *positionals]
    for flag, value in flags:
        if value is None:  # a flag that takes no value
            parts.append(f"--{flag}")
            continue
        parts.extend([f"--{flag}", value] if form == "space" else [f"--{flag}={value}"])
    return " ".join(parts)


# ---------------------------------------------------------------------------------------
# Good lines


GOOD: list[tuple[str, list[str], list[tuple[str, str | None]], Command]] = [
    ("help", [], [], Help()),
    ("help", ["dlq"], [], Help(topic="dlq")),
    ("triage", [], [], Triage()),
    (
        "triage",
        [],
        [("since", "24h"), ("type", "transcode"), ("queue", "workers")],
        Triage(since=timedelta(hours=24), job_type="transcode", queue="workers"),
    ),
    ("show", ["1234"], [], Show(job_id="1234")),
    ("show", [UUID], [("queue", "clips")], Show(job_id=UUID, queue="clips")),
    ("dlq", [], [], Dlq()),
    (
        "dlq",
        [],
        [
            ("error-like", "NoSuchKey"),
            ("tenant", "acme"),
            ("reason", "timeout"),
            ("type", "transcode"),
            ("limit", "10"),
            ("queue", "clips"),
        ],
        Dlq(
            error_like="NoSuchKey",
            tenant="acme",
            reason="timeout",
            job_type="transcode",
            limit=10,
            queue="clips",
        ),
    ),
    ("stuck", [], [], Stuck()),
    ("housekeep", [], [], Housekeep()),
    ("housekeep", [], [("dry-run", None), ("only", "A,D")], Housekeep(dry_run=True, only="A,D")),
    ("stuck", [], [("limit", "5"), ("queue", "workers")], Stuck(limit=5, queue="workers")),
    (
        "requeue",
        ["4102", "4103"],
        [("reason", "'allowlist fixed in PR #2081'"), ("queue", "workers")],
        Requeue(ids=["4102", "4103"], reason="allowlist fixed in PR #2081", queue="workers"),
    ),
    ("cancel", ["7"], [("reason", "dup")], Cancel(ids=["7"], reason="dup")),
    (
        "cancel",
        [],
        [("failure-reason", "mutex_collision"), ("reason", '"pre-#2091 orphans"')],
        Cancel(failure_reason="mutex_collision", reason="pre-#2091 orphans"),
    ),
    (
        "redrive",
        [UUID],
        [
            ("reason", '"transcoder OOM fixed"'),
            ("incident", "INC-4"),
            ("evidence", "https://ci.example.com/deploys/81"),
        ],
        Redrive(
            ids=[UUID],
            reason="transcoder OOM fixed",
            incident="INC-4",
            evidence="https://ci.example.com/deploys/81",
        ),
    ),
    ("pending", [], [], Pending()),
    ("pending", [], [("queue", "clips")], Pending(queue="clips")),
    (
        "redrive",
        [],
        [
            ("error-like", '"ffmpeg exited"'),
            ("sample", "3"),
            ("max", "500"),
            ("reason", '"OOM fix deployed"'),
            ("queue", "clips"),
        ],
        Redrive(
            error_like="ffmpeg exited", sample=3, max=500, reason="OOM fix deployed", queue="clips"
        ),
    ),
    ("redrive", [], [("all", None), ("reason", "fixed")], Redrive(all=True, reason="fixed")),
    ("plan", ["P-3"], [], ShowPlan(plan=3)),
    (
        "halt",
        ["3"],
        [("reason", '"error rate climbing"')],
        Halt(plan=3, reason="error rate climbing"),
    ),
    ("resume", ["p-3"], [("reason", '"second fix"')], Resume(plan=3, reason="second fix")),
    ("rollback", ["P-3"], [("reason", '"did not hold"')], Rollback(plan=3, reason="did not hold")),
    ("oncall", [], [("share", None)], Oncall(share=True)),
    ("approve", ["CR-17"], [], Approve(request=17)),
    ("reject", ["17"], [("reason", '"wrong tenant"')], Reject(request=17, reason="wrong tenant")),
]


@pytest.mark.parametrize("form", ["space", "equals"])
@pytest.mark.parametrize(
    ("name", "positionals", "flags", "expected"),
    GOOD,
    ids=[f"{g[0]}-{i}" for i, g in enumerate(GOOD)],
)
def test_every_command_parses_with_flags_in_both_forms(
    name: str,
    positionals: list[str],
    flags: list[tuple[str, str]],
    expected: Command,
    form: str,
) -> None:
    assert parse_line(render(name, positionals, flags, form)) == expected


def test_every_catalogued_command_is_covered_by_the_good_cases() -> None:
    assert {s.name for s in QUEUE_SPECS} <= {g[0] for g in GOOD}


def test_flags_may_come_before_positionals() -> None:
    assert parse_line("/queue show --queue clips 1234") == Show(job_id="1234", queue="clips")
    assert parse_line('/queue requeue --reason "fixed it" 1 2') == Requeue(
        ids=["1", "2"], reason="fixed it"
    )


def test_boolean_flag() -> None:
    assert parse_line("/queue cancel --duplicates --reason dupes") == Cancel(
        duplicates=True, reason="dupes"
    )


@pytest.mark.parametrize("ref", ["CR-17", "cr-17", "CR17", "17"])
def test_change_request_references(ref: str) -> None:
    assert parse_line(f"/queue approve {ref}") == Approve(request=17)


def test_the_leading_slash_is_optional_and_words_ignore_case() -> None:
    assert parse_line("queue dlq --limit 3") == Dlq(limit=3)
    assert parse_line("/QUEUE DLQ --LIMIT 3") == Dlq(limit=3)


def test_surrounding_whitespace_is_ignored() -> None:
    assert parse_line("   /queue stuck   ") == Stuck()


def test_an_empty_line_after_the_group_asks_for_help() -> None:
    assert parse_line("/queue") == Help()
    assert parse("queue", "") == Help()
    assert parse("queue", "   ") == Help()


def test_parse_takes_the_text_slack_sends_after_the_command() -> None:
    assert parse("queue", "dlq --tenant acme --limit=7") == Dlq(tenant="acme", limit=7)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("/queue dlq --error-like \u201cNo such key\u201d", "No such key"),
        ("/queue dlq --error-like=\u201cNo such key\u201d", "No such key"),
        ("/queue dlq --error-like \u2018No such key\u2019", "No such key"),
        ("/queue dlq --error-like \u201ccan't read\u201d", "can't read"),
        ('/queue dlq --error-like "straight quotes"', "straight quotes"),
    ],
)
def test_smart_quotes_from_chat_clients_group_words_like_straight_ones(
    line: str, expected: str
) -> None:
    assert parse_line(line) == Dlq(error_like=expected)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("45s", timedelta(seconds=45)),
        ("30m", timedelta(minutes=30)),
        ("24h", timedelta(hours=24)),
        ("24H", timedelta(hours=24)),
        ("7d", timedelta(days=7)),
        ("2w", timedelta(weeks=2)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("366d", timedelta(days=366)),
    ],
)
def test_durations(value: str, expected: timedelta) -> None:
    assert parse_line(f"/queue triage --since {value}") == Triage(since=expected)


@pytest.mark.parametrize("limit", [1, MAX_LIMIT])
def test_limit_bounds_are_inclusive(limit: int) -> None:
    assert parse_line(f"/queue dlq --limit {limit}") == Dlq(limit=limit)


def test_a_line_of_exactly_the_maximum_length_is_read() -> None:
    line = "/queue dlq".ljust(MAX_TEXT)
    assert len(line) == MAX_TEXT
    assert parse_line(line) == Dlq()


def test_error_text_of_the_maximum_value_length_is_read() -> None:
    text = "x" * MAX_VALUE
    assert parse_line(f"/queue dlq --error-like {text}") == Dlq(error_like=text)


# ---------------------------------------------------------------------------------------
# --help


@pytest.mark.parametrize(
    ("line", "topic"),
    [
        ("/queue dlq --help", "dlq"),
        ("/queue show -h", "show"),
        ("/queue triage --since 24h --help", "triage"),
        ("/queue help --help", "help"),
        # help wins even over input that would otherwise be refused
        ("/queue dlq --limit 999 --bogus --help", "dlq"),
        ("/queue show --help", "show"),
    ],
)
def test_help_flag_returns_help_for_that_command(line: str, topic: str) -> None:
    assert parse_line(line) == Help(topic=topic)


# ---------------------------------------------------------------------------------------
# Bad lines: each a UsageError that says what was wrong, with the usage line


def test_unknown_subcommand_suggests_the_closest() -> None:
    err = usage_error("/queue dlk")
    assert "unknown command /queue dlk" in err.message
    assert "Did you mean /queue dlq?" in err.message
    assert f"Commands: {', '.join(NAMES)}." in err.message
    assert err.usage == "/queue help"


def test_unknown_subcommand_with_nothing_close_lists_the_commands() -> None:
    err = usage_error("/queue frobnicate")
    assert "Did you mean" not in err.message
    assert "Commands:" in err.message


@pytest.mark.parametrize(
    ("line", "parts"),
    [
        pytest.param("/qeueu dlq", ["'/qeueu'", "/queue"], id="an-unknown-group-and-the-groups"),
        pytest.param(
            '/queue dlq --tenant "acme corp"',
            ["--tenant must be a single word", "'acme corp'"],
            id="a-word-flag-given-text-with-spaces",
        ),
    ],
)
def test_a_refusal_names_what_was_written(line: str, parts: list[str]) -> None:
    err = usage_error(line)
    for part in parts:
        assert part in err.message


def test_missing_id() -> None:
    err = usage_error("/queue show")
    assert err.message == (
        "/queue show needs ID, or --args-like TEXT to find the job by its arguments"
    )
    assert err.usage == USAGE["show"] == "/queue show [ID] [--args-like TEXT] [--queue Q] [--share]"


def test_args_like_finds_a_job_filters_dead_letters_and_selects_a_plan() -> None:
    assert parse_line("/queue show --args-like INV-104857") == Show(args_like="INV-104857")
    assert parse_line('/queue dlq --args-like "INV-104857" --job-type charge') == Dlq(
        args_like="INV-104857", job_type="charge"
    )
    redrive = parse_line(
        '/queue redrive --args-like INV-1048 --error-like declined --reason "acquirer back"'
    )
    assert redrive == Redrive(args_like="INV-1048", error_like="declined", reason="acquirer back")
    assert isinstance(redrive, Redrive) and redrive.staged


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("/queue show --args-like ''", "--args-like needs a non-empty value"),
        (
            "/queue dlq --args-like x",
            "--args-like: needs at least 2 characters (one character matches nearly every "
            "job's arguments); give a distinctive part, e.g. --args-like INV-104857",
        ),
        (
            "/queue show --args-like " + "x" * 201,
            "--args-like: takes at most 200 characters, not 201; give a distinctive part of "
            "the arguments, e.g. an invoice or order number",
        ),
        (
            "/queue show 12 --args-like INV-104857",
            "name the job by its ID, or find it by its arguments with --args-like TEXT; not both",
        ),
        (
            '/queue redrive --args-like INV --all --reason "acquirer back"',
            "--all takes every dead letter",
        ),
        (
            '/queue redrive 12 --args-like INV --reason "acquirer back"',
            "--args-like, --from-plan or --all; not both",
        ),
    ],
)
def test_args_like_refusals_say_what_was_wrong(line: str, said: str) -> None:
    err = usage_error(line)
    assert said in err.message
    assert err.usage == USAGE[line.split()[1]]


@pytest.mark.parametrize("bad", ["ab$c", "-5", "_x", "a b", "x" * 129, "ü1"])
def test_malformed_id(bad: str) -> None:
    err = usage_error(f"/queue show {shlex.quote(bad)}")
    assert "is not a job id" in err.message
    assert repr(bad[:40] + ("..." if len(bad) > 40 else "")) in err.message
    assert err.usage == USAGE["show"]


def test_id_with_a_trailing_newline_is_refused() -> None:
    err = usage_error('/queue show "1234\n"')
    assert err.message.startswith("'1234\\n' is not a job id")


@pytest.mark.parametrize("sep", ["\t", "\n"])
def test_any_whitespace_separates_the_group_from_the_command(sep: str) -> None:
    assert parse_line(f"/queue{sep}dlq --limit 5") == Dlq(limit=5)


def test_unknown_flag_suggests_the_closest_and_lists_the_options() -> None:
    err = usage_error("/queue dlq --limt 5")
    assert "unknown option --limt for /queue dlq" in err.message
    assert "Did you mean --limit?" in err.message
    assert (
        "Options: --error-like, --tenant, --failure-reason, --job-type, --args-like, --limit, "
        "--queue" in err.message
    )
    assert err.usage == USAGE["dlq"]


def test_unknown_flag_on_a_command_without_options() -> None:
    err = usage_error("/queue help --verbose")
    assert "unknown option --verbose for /queue help" in err.message
    assert "takes no options" in err.message
    assert err.usage == USAGE["help"]


@pytest.mark.parametrize(
    ("line", "said"),
    [
        pytest.param(
            "/queue dlq --limit", "--limit needs a value, e.g. --limit N", id="at-the-end"
        ),
        pytest.param(
            "/queue dlq --tenant --limit 5",
            "--tenant needs a value, e.g. --tenant T",
            id="followed-by-another-flag",
        ),
    ],
)
def test_flag_without_its_value(line: str, said: str) -> None:
    err = usage_error(line)
    assert err.message == said
    assert err.usage == USAGE["dlq"]


@pytest.mark.parametrize(
    ("line", "said"),
    [
        pytest.param("/queue dlq --tenant=", "--tenant needs a non-empty value", id="a-flag-empty"),
        pytest.param("/queue approve CR-0", "greater than or equal to 1", id="change-request-zero"),
    ],
)
def test_a_value_below_the_least_says_so(line: str, said: str) -> None:
    assert said in usage_error(line).message


@pytest.mark.parametrize(
    "line",
    [
        "/queue dlq --limit 5 --limit 6",
        "/queue dlq --limit 5 --limit=6",
        "/queue dlq --LIMIT 5 --limit 6",
    ],
)
def test_repeated_flag(line: str) -> None:
    err = usage_error(line)
    assert err.message == "--limit was given twice"
    assert err.usage == USAGE["dlq"]


@pytest.mark.parametrize("value", ["0", "201", "100000"])
def test_int_out_of_range(value: str) -> None:
    err = usage_error(f"/queue stuck --limit {value}")
    assert err.message == f"--limit must be between 1 and {MAX_LIMIT}, not {int(value)}"
    assert err.usage == USAGE["stuck"]


@pytest.mark.parametrize("value", ["ten", "-5", "5.0", "1e3", "\u0663"])
def test_int_that_is_not_a_whole_number(value: str) -> None:
    err = usage_error(f"/queue dlq --limit={value}")
    assert err.message == f"--limit must be a whole number, not {value!r}"


@pytest.mark.parametrize("value", ["yesterday", "24", "h", "1.5h", "1y", "-1h"])
def test_bad_duration(value: str) -> None:
    err = usage_error(f"/queue triage --since={value}")
    assert "--since must be a duration such as 30m, 24h, 7d or 1h30m" in err.message
    assert repr(value) in err.message
    assert err.usage == USAGE["triage"]


@pytest.mark.parametrize("value", ["0h", "0s", "367d", "53w"])
def test_duration_out_of_range(value: str) -> None:
    err = usage_error(f"/queue triage --since {value}")
    assert err.message == "--since must be between 1s and 366d"


def test_text_over_the_limit() -> None:
    line = "/queue dlq --error-like " + "x" * MAX_TEXT
    err = usage_error(line)
    assert f"{len(line):,} characters long" in err.message
    assert "limited to 4,000" in err.message


def test_text_over_the_limit_through_parse() -> None:
    with pytest.raises(UsageError, match="limited to 4,000"):
        parse("queue", "x" * (MAX_TEXT + 1))


def test_flag_value_over_the_limit() -> None:
    err = usage_error("/queue dlq --error-like " + "x" * (MAX_VALUE + 1))
    assert err.message == f"--error-like is longer than {MAX_VALUE} characters"
    assert err.usage == USAGE["dlq"]


@pytest.mark.parametrize(
    "line",
    ['/queue dlq --error-like "NoSuchKey', "/queue dlq --error-like \u201cNoSuchKey"],
)
def test_unclosed_quote(line: str) -> None:
    err = usage_error(line)
    assert "could not read the command: no closing quotation" in err.message
    assert "straight double quotes" in err.message


@pytest.mark.parametrize(
    ("line", "extra", "name"),
    [
        ("/queue show 1234 5678", "5678", "show"),
        ("/queue dlq oops", "oops", "dlq"),
        ("/queue help dlq show", "show", "help"),
    ],
)
def test_extra_positional(line: str, extra: str, name: str) -> None:
    err = usage_error(line)
    assert err.message == f"unexpected {extra!r} after /queue {name}"
    assert err.usage == USAGE[name]


def test_required_flag_missing() -> None:
    err = usage_error("/queue requeue 4102")
    assert err.message.startswith("--reason is required: e.g. --reason ")
    assert err.usage == USAGE["requeue"]
    assert '--reason "WHY"' in err.usage


@pytest.mark.parametrize(
    ("line", "said"),
    [
        pytest.param(
            "/queue requeue 4102 --reason ok",
            "--reason: String should have at least 3 characters",
            id="reason-too-short",
        ),
        pytest.param(
            "/queue cancel --duplicates=yes --reason abc",
            "--duplicates takes no value",
            id="boolean-flag-given-a-value",
        ),
    ],
)
def test_a_value_the_flag_does_not_take(line: str, said: str) -> None:
    assert usage_error(line).message == said


def test_cancel_needs_exactly_one_selector() -> None:
    for line in ("/queue cancel --reason abc", "/queue cancel 1 --duplicates --reason abc"):
        err = usage_error(line)
        assert "name the rows to cancel in exactly one way" in err.message
        assert err.usage == USAGE["cancel"]


@pytest.mark.parametrize(
    ("flag", "value", "shape"),
    [("incident", "INC-x", "INC-N"), ("evidence", "ftp://x", "URL")],
)
def test_flag_with_a_pattern(flag: str, value: str, shape: str) -> None:
    err = usage_error(f"/queue redrive 1 --reason abc --{flag} {value}")
    assert err.message == f"--{flag}: must look like {shape}, not {value!r}"
    assert err.usage == USAGE["redrive"]


@pytest.mark.parametrize("ref", ["CR-x", "CR-", "#17", "CR-1234567890123"])
def test_malformed_change_request(ref: str) -> None:
    err = usage_error(f"/queue approve {ref}")
    assert "is not a change request: write CR-17 (or 17)" in err.message
    assert err.usage == USAGE["approve"] == "/queue approve CR-N"


def test_long_bad_input_is_shortened_in_the_message() -> None:
    err = usage_error("/queue show " + "$" * 300)
    assert len(err.message) < 200


# ---------------------------------------------------------------------------------------
# The catalogue


def test_usage_lines_start_with_the_command_path() -> None:
    for spec in CATALOG:
        assert spec.usage.startswith(f"/{spec.group} {spec.name}")
        assert find_spec(spec.group, spec.name) is spec


def test_spec_for_finds_the_spec_of_each_parsed_command() -> None:
    for name, positionals, flags, _ in GOOD:
        command = parse_line(render(name, positionals, flags, "space"))
        assert spec_for(command).name == name


# ---------------------------------------------------------------------------------------
# Properties


def check_outcome(run: object) -> Command | None:
    """Call ``run``: it must return a Command or raise a well-formed UsageError."""
    assert callable(run)
    try:
        result = run()
    except UsageError as err:
        assert err.message
        assert err.usage is not None
        assert err.usage.startswith("/queue ")
        return None
    assert isinstance(result, Command)
    return result


any_line = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=200),
    st.builds(lambda t: "/queue " + t, st.text()),
    st.builds(lambda n, t: f"/queue {n} {t}", st.sampled_from(NAMES), st.text()),
    st.builds(
        lambda n, t: f"/queue {n} {t}",
        st.sampled_from(NAMES),
        st.text(alphabet=st.sampled_from(list("-= \"'\u201c\u201d\\\n\t\x00ab1$")), max_size=60),
    ),
    st.builds(lambda c, n: c * n, st.characters(), st.integers(MAX_TEXT - 5, MAX_TEXT + 5)),
)


@settings(max_examples=300, deadline=None)
@given(any_line)
@example("/queue show \x00")
@example("/queue dlq --error-like '\\")
@example('/queue dlq --limit="" --since')
def test_parse_line_returns_a_command_or_raises_usage_error(line: str) -> None:
    check_outcome(lambda: parse_line(line))


FLAGS = [
    *sorted({f"--{f.name}" for s in CATALOG for f in s.flags}),
    "--help",
    "-h",
    "--",
    "--bogus",
    "--LIMIT",
    "--limt",
    "--duplicates=yes",
]
VALUES = [
    "1234",
    UUID,
    "ab$c",
    "0",
    "20",
    "200",
    "201",
    "-5",
    "ten",
    "24h",
    "1h30m",
    "0h",
    "999999w",
    "yesterday",
    "acme",
    "a b",
    '"NoSuchKey on get"',
    "\u201csmart quoted\u201d",
    '"unclosed',
    "'single'",
    "x" * (MAX_VALUE + 1),
    "",
    "\\",
    "é",
    "CR-17",
    "CR-0",
    "cr17",
    "INC-4",
    "INC-x",
    "https://ci.example.com/1",
    "ftp://x",
    '"fixed in v2"',
]

flag_token = st.sampled_from(FLAGS)
value_token = st.sampled_from(VALUES)
joined_token = st.builds(lambda f, v: f"{f}={v}", flag_token, value_token)
grammar_line = st.builds(
    lambda head, rest: " ".join([head, *rest]),
    st.one_of(st.sampled_from(NAMES), st.sampled_from(["DLQ", "dlk", "shwo", "--help", ""])),
    st.lists(st.one_of(flag_token, value_token, joined_token), max_size=8),
)


@settings(max_examples=500, deadline=None)
@given(grammar_line)
def test_parse_of_plausible_tokens_returns_a_command_or_raises_usage_error(text: str) -> None:
    result = check_outcome(lambda: parse("queue", text))
    if result is not None:
        # whatever came out is a valid model of its own command
        assert type(result).model_validate(result.model_dump()) == result
        assert spec_for(result).model is type(result)


word = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:@/-]{0,30}", fullmatch=True)
error_text = st.text(
    alphabet=st.characters(
        codec="utf-8",
        exclude_categories=("Cc", "Cs", "Zl", "Zp"),
        exclude_characters="\u201c\u201d\u201e\u2018\u2019\u00ab\u00bb\x85",
    ),
    min_size=1,
    max_size=80,
).filter(lambda s: s == s.strip())

dlq_models = st.builds(
    Dlq,
    error_like=st.none() | error_text,
    tenant=st.none() | word,
    reason=st.none() | word,
    job_type=st.none() | word,
    limit=st.integers(1, MAX_LIMIT),
    queue=st.none() | word,
    share=st.booleans(),
)

DLQ_FLAGS = {
    "error_like": "error-like",
    "tenant": "tenant",
    "reason": "failure-reason",
    "job_type": "job-type",
    "limit": "limit",
    "queue": "queue",
}


@settings(max_examples=300, deadline=None)
@given(dlq_models, st.data())
def test_dlq_options_round_trip_through_a_command_line(model: Dlq, data: st.DataObject) -> None:
    fields = [(k, v) for k, v in model.model_dump().items() if v is not None]
    fields = data.draw(st.permutations(fields))
    parts = ["/queue", "dlq"]
    for field, value in fields:
        if field == "share":  # a switch: present or absent
            parts.extend(["--share"] if value else [])
            continue
        flag = DLQ_FLAGS[field]
        quoted = shlex.quote(str(value))
        if data.draw(st.booleans()) or str(value).startswith("-"):
            parts.append(f"--{flag}={quoted}")
        else:
            parts.extend([f"--{flag}", quoted])
    assert parse_line(" ".join(parts)) == model


def test_redrive_all_goes_alone_and_filters_combine() -> None:
    for line in (
        '/queue redrive --error-like ffmpeg --all --reason "OOM fix deployed"',
        "/queue redrive --all --tenant acme --reason fixed",
    ):
        err = usage_error(line)
        assert "--all takes every dead letter: leave it out to use filters" in err.message
        assert err.usage == USAGE["redrive"]
    both = parse_line("/queue redrive --error-like ffmpeg --tenant acme --reason fixed")
    assert both == Redrive(error_like="ffmpeg", tenant="acme", reason="fixed")


@pytest.mark.parametrize("name", ["redrive", "dlq"])
def test_the_help_says_filters_combine(name: str) -> None:
    from bot.render_text import render_message
    from commands.messages import help_reply

    shown = render_message(help_reply(name).message)
    assert "Filters combine: a row must match every one given." in shown


def test_from_plan_names_a_plan_and_goes_with_filters_not_with_ids_or_all() -> None:
    assert parse_line('/queue redrive --from-plan P-3 --reason "fix deployed"') == Redrive(
        from_plan=3, reason="fix deployed"
    )
    assert parse_line(
        "/queue redrive --from-plan 3 --job-type clip --override-growth --reason fixed"
    ) == Redrive(from_plan=3, job_type="clip", override_growth=True, reason="fixed")
    assert parse_line("/queue redrive --from-plan p3 --reason fixed").staged
    assert parse_line("/queue dlq --from-plan P-12 --limit 5") == Dlq(from_plan=12, limit=5)
    err = usage_error("/queue redrive --from-plan CR-3 --reason fixed")
    assert err.message == "--from-plan takes a plan: write P-3 (or 3), not 'CR-3'"
    assert err.usage == USAGE["redrive"]
    assert "--from-plan P-N" in err.usage and "[--override-growth]" in err.usage
    err = usage_error("/queue redrive --from-plan P-3 --all --reason fixed")
    assert "--all takes every dead letter and --from-plan a plan's jobs" in err.message
    err = usage_error("/queue redrive 4102 --from-plan P-3 --reason fixed")
    assert "--job-type, --args-like, --from-plan or --all; not both" in err.message
    err = usage_error("/queue dlq --from-plan P-0")
    assert err.message.startswith("--from-plan: ")
    err = usage_error("/queue redrive 4102 --override-growth=yes --reason fixed")
    assert err.message == "--override-growth takes no value"
