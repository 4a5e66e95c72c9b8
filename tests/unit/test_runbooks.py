"""Runbooks as data (services/runbooks/): the statement's fields and rules, finding it in
the Markdown, and the library of shipped and folder runbooks. Every problem is reported
at its JSON path (or line of the file), all of them at once."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from services.config import load_config
from services.config.alerts import AlertsConfig
from services.errors import ConfigError, NotFound
from services.runbooks import (
    PLACEHOLDERS,
    QUEUEBOT_DEPENDENCIES,
    RunbookInvalid,
    RunbookLibrary,
    fill_draft,
    known_dependencies,
    library_for,
    parse_runbook,
    queuebot_role,
    shipped_runbooks,
)

# The queue-loss statement in the form it was first written, for another estate: the
# base format queuebot reads must take it exactly as it is.
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runbooks"
ORIGINAL_QUEUE_LOSS = (FIXTURES / "queue-loss-original.json").read_text("utf-8").strip()

PROSE = "# Queue loss (`gd:queue-loss`)\n\nWhat to do when the queue stops.\n\n## Statement\n\n"


def markdown(statement: str | dict[str, Any]) -> str:
    body = statement if isinstance(statement, str) else json.dumps(statement, indent=2)
    return f"{PROSE}<!-- oshun:runbook -->\n\n```json\n{body}\n```\n"


def original() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(ORIGINAL_QUEUE_LOSS)
    return data


def problems(statement: str | dict[str, Any], *, text: str | None = None) -> list[str]:
    """The problem lines of a statement (or of a whole file's ``text``), without the
    file name each line starts with."""
    with pytest.raises(RunbookInvalid) as info:
        parse_runbook(text if text is not None else markdown(statement), source="rb.md")
    lines = str(info.value).splitlines()
    assert all(line.startswith("rb.md: ") for line in lines)
    assert [str(p) for p in info.value.problems] == [line[7:] for line in lines]
    return [line[7:] for line in lines]


def changed(**fields: Any) -> dict[str, Any]:
    data = original()
    data.update(fields)
    return data


# ---------------------------------------------------------------------------------------
# The base format


def test_the_original_queue_loss_statement_is_read_unchanged() -> None:
    runbook = parse_runbook(markdown(ORIGINAL_QUEUE_LOSS), source="rb.md")
    assert runbook.title == "Queue loss"  # the heading, less its "(scenario)"
    assert runbook.id == "runbook:v1-queue-loss"
    assert runbook.scenario_id == "gd:queue-loss"
    assert runbook.version == "1"
    assert runbook.declaration_role == "operations duty officer"
    assert runbook.detection_role == "service on-call"
    assert [(c.audience, c.within) for c in runbook.communications] == [
        ("actors", timedelta(minutes=15)),
        ("operators", timedelta(minutes=5)),
    ]
    assert [c.window for c in runbook.communications] == ["15 min", "5 min"]
    assert runbook.restore_order == ("dep:job-queue", "dep:job-worker-pool")
    assert [v.text for v in runbook.validation] == original()["validation"]
    assert all(v.check is None for v in runbook.validation)
    assert runbook.statement.fencing is None
    assert runbook.statement.promotes_a_standby is False


def test_a_missing_field_is_named() -> None:
    data = original()
    del data["failback"]
    del data["communications"][0]["audience"]
    assert problems(data) == ["communications[0].audience: is required", "failback: is required"]


def test_a_missing_nullable_field_says_to_write_null() -> None:
    data = original()
    del data["fencing"]
    assert problems(data) == ["fencing: is required: write null when nothing is promoted"]


MS = "must be a positive number of milliseconds"


@pytest.mark.parametrize(
    ("where", "value", "expected"),
    [
        (("communications", 0, "withinMs"), "900000", f'{MS}, got "900000"'),
        (("communications", 0, "withinMs"), 900000.0, f"{MS}, got 900000.0"),
        (("communications", 0, "withinMs"), True, f"{MS}, got true"),
        (("detectionAuthority", "role"), 5, "must be a string, got 5"),
        (("promotesAStandby",), "no", 'must be true or false, got "no"'),
        (("secrets", 0, "recoverableOutOfBand"), 1, "must be true or false, got 1"),
        (("assumes",), "dep:primary-store", 'must be a list, got "dep:primary-store"'),
        (("declarationAuthority",), "rota:prod-ops", 'must be an object, got "rota:prod-ops"'),
        (("version",), 1, "must be a string, got 1"),
        (("failback",), "  ", "must not be empty"),
        (
            ("assumes", 1),
            "primary-store",
            'must be a dependency id such as dep:job-queue, got "primary-store"',
        ),
        (
            ("scenarioId",),
            "queue loss",
            'must be a scenario id such as gd:queue-loss (at most 64 characters), got "queue loss"',
        ),
        (("id",), "v1-queue", 'must be an id such as runbook:queue-loss, got "v1-queue"'),
        (
            ("communications", 1, "audience"),
            "On-Call People",
            "must be a short lower-case name such as operators (letters, digits, - or _), "
            'got "On-Call People"',
        ),
        (("communications",), [], "must hold at least one item"),
        (("validation",), [], "must hold at least one item"),
    ],
)
def test_a_wrong_type_or_value_is_named_at_its_path(
    where: tuple[str | int, ...], value: Any, expected: str
) -> None:
    data = original()
    target: Any = data
    for part in where[:-1]:
        target = target[part]
    target[where[-1]] = value
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in where).lstrip(".")
    assert problems(data) == [f"{path}: {expected}"]


def test_a_negative_window_is_refused() -> None:
    data = original()
    data["communications"][1]["withinMs"] = -5
    assert problems(data) == [
        "communications[1].withinMs: must be a positive number of milliseconds, got -5"
    ]


def test_a_window_over_a_week_is_refused() -> None:
    data = original()
    data["communications"][0]["withinMs"] = 900000 * 1000
    assert problems(data) == [
        "communications[0].withinMs: must be at most 7 days (604800000 ms), got 900000000"
    ]


def test_an_unknown_field_is_refused_with_the_one_meant() -> None:
    data = original()
    data["communications"][1]["withinMS"] = data["communications"][1].pop("withinMs")
    data["restoreorder"] = data.pop("restoreOrder")
    data["owner"] = "rota:delivery-pipeline"
    assert problems(data) == [
        "communications[1].withinMs: is required",
        "communications[1].withinMS: unknown field; did you mean withinMs?",
        "restoreOrder: is required",
        "restoreorder: unknown field; did you mean restoreOrder?",
        "owner: unknown field (fields here: id, scenarioId, version, detectionAuthority, "
        "declarationAuthority, communications, assumes, recoveryInfrastructureDependencyId, "
        "secrets, restoreOrder, fencing, promotesAStandby, validation, failback, dependencies, "
        "blocksRedrivesUntil)",
    ]


def test_the_statement_must_be_an_object() -> None:
    assert problems("[1, 2]") == ["the statement must be a JSON object, got [1, 2]"]


def test_every_problem_is_reported_at_once() -> None:
    data = original()
    data["communications"][1]["withinMs"] = -5
    data["restoreOrder"] = ["dep:nowhere", "dep:job-queue"]
    del data["version"]
    assert problems(data) == [
        "version: is required",
        "communications[1].withinMs: must be a positive number of milliseconds, got -5",
        "restoreOrder[0]: 'dep:nowhere' is not a known dependency (known: dep:blob-store, "
        "dep:job-queue, dep:job-worker-pool, dep:notification-channel, dep:primary-store); "
        "name it in dependencies if this runbook restores it",
    ]


# ---------------------------------------------------------------------------------------
# Rules between fields: known dependencies, repeats, fencing


@pytest.mark.parametrize(
    ("order", "said"),
    [
        pytest.param(
            ["dep:job-queue", "dep:nowhere"],
            "restoreOrder[1]: 'dep:nowhere' is not a known dependency (known: dep:blob-store, "
            "dep:job-queue, dep:job-worker-pool, dep:notification-channel, dep:primary-store); "
            "name it in dependencies if this runbook restores it",
            id="an-unknown-dependency",
        ),
        pytest.param(
            ["dep:job-queue", "dep:job-worker-pool", "dep:job-queue"],
            "restoreOrder[2]: 'dep:job-queue' repeats restoreOrder[0]; each dependency is "
            "restored once",
            id="a-dependency-again",
        ),
        pytest.param(
            ["dep:primary-store", "dep:job-queue"],
            "restoreOrder[0]: 'dep:primary-store' is in assumes (taken to be healthy), so it is "
            "not restored here; take it out of one of the two",
            id="what-is-assumed-healthy",
        ),
    ],
)
def test_the_restore_order_restores_each_known_unhealthy_dependency_once(
    order: list[str], said: str
) -> None:
    assert problems(changed(restoreOrder=order)) == [said]


def test_known_dependencies_are_those_named_anywhere_plus_queuebots_own() -> None:
    data = changed(recoveryInfrastructureDependencyId="dep:standby-host", dependencies=["dep:cdn"])
    data["secrets"][0]["heldInDependencyId"] = "dep:vault"
    data["detectionAuthority"]["reachableOver"] = ["dep:pager"]
    data["communications"][0]["channelDependencyId"] = "dep:status-page"
    assert known_dependencies(data) == {
        "dep:blob-store",
        "dep:primary-store",  # assumes
        "dep:standby-host",  # recoveryInfrastructureDependencyId
        "dep:cdn",  # dependencies
        "dep:vault",  # a secret's heldInDependencyId
        "dep:pager",  # an authority's reachableOver
        "dep:notification-channel",
        "dep:status-page",  # a communication's channelDependencyId
        *QUEUEBOT_DEPENDENCIES,
    }


def test_the_dependencies_field_makes_a_restored_dependency_known() -> None:
    data = changed(restoreOrder=["dep:cdn", "dep:job-queue"], dependencies=["dep:cdn"])
    assert parse_runbook(markdown(data), source="rb.md").restore_order == (
        "dep:cdn",
        "dep:job-queue",
    )


def test_promoting_a_standby_needs_fencing() -> None:
    assert problems(changed(promotesAStandby=True)) == [
        "fencing: must say how the old primary is kept from writing, because "
        "promotesAStandby is true"
    ]
    fenced = changed(promotesAStandby=True, fencing="the old primary's lease token is revoked")
    assert parse_runbook(markdown(fenced), source="rb.md").statement.fencing == (
        "the old primary's lease token is revoked"
    )


@pytest.mark.parametrize("fencing", [{"method": "lease"}, "", 3])
def test_fencing_is_null_or_a_sentence(fencing: Any) -> None:
    assert problems(changed(fencing=fencing)) == [
        "fencing: must be null (nothing is promoted, so nothing needs fencing off) or a "
        f"sentence saying how the old primary is kept from writing, got {json.dumps(fencing)}"
    ]


def test_repeated_secrets_communications_and_dependencies_are_refused() -> None:
    data = changed(dependencies=["dep:cdn", "dep:cdn"])
    data["secrets"].append(dict(data["secrets"][0]))
    data["communications"].append(dict(data["communications"][1]))
    assert problems(data) == [
        "secrets[1]: repeats secrets[0] (id 'provider worker credentials')",
        "communications[2]: repeats communications[1] (audience 'operators')",
        "dependencies[1]: 'dep:cdn' repeats dependencies[0]",
    ]


# ---------------------------------------------------------------------------------------
# queuebot's additions: drafts and validation checks


def with_draft(draft: str) -> dict[str, Any]:
    data = original()
    data["communications"][1]["draft"] = draft
    return data


def test_a_draft_may_use_the_placeholders() -> None:
    text = "{incident}: runbook running, led by {lead} on {queue} ({scenario}). {summary} {{ok}}"
    runbook = parse_runbook(markdown(with_draft(text)), source="rb.md")
    draft = runbook.communications[1].draft
    assert draft == text
    assert set(PLACEHOLDERS) == {"incident", "lead", "queue", "summary", "scenario"}
    assert fill_draft(draft, {"incident": "INC-4", "lead": "dora", "queue": "clips"}) == (
        "INC-4: runbook running, led by dora on clips (-). - {ok}"
    )


@pytest.mark.parametrize(
    ("draft", "said"),
    [
        ("{incident} for {tenant}", "unknown placeholder {tenant}"),
        ("{lead!r} leads", "unknown placeholder {lead!r}"),
        ("{queue:>10}", "unknown placeholder {queue:>10}"),
        ("{0} and {}", "unknown placeholder {0}"),
        ("a lone { brace", "has an unmatched brace; write {{ or }} for a brace itself"),
    ],
)
def test_a_draft_with_an_unknown_placeholder_is_refused(draft: str, said: str) -> None:
    allowed = "{incident}, {lead}, {queue}, {summary}, {scenario}"
    [problem] = problems(with_draft(draft))
    assert problem.startswith(f"communications[1].draft: {said}")
    assert allowed in problem


def test_validation_items_are_sentences_or_objects_with_a_check() -> None:
    data = changed(
        validation=[
            "the count matches",
            {"text": "the backlog falls", "check": "backlog-falling"},
            {"text": "a synthetic job finishes"},
        ]
    )
    items = parse_runbook(markdown(data), source="rb.md").validation
    assert [(i.text, i.check) for i in items] == [
        ("the count matches", None),
        ("the backlog falls", "backlog-falling"),
        ("a synthetic job finishes", None),
    ]


def test_a_validation_item_of_the_wrong_shape_is_named() -> None:
    data = changed(
        validation=[
            {"text": "the count matches", "check": "count-matches"},
            {"check": "synthetic-job"},
            42,
            {"text": "x", "chek": "synthetic-job"},
        ]
    )
    assert problems(data) == [
        "validation[0].check: must be 'count-restored', 'backlog-falling', 'synthetic-job', "
        "'redriven-succeeded', 'dead-letters-low' or 'dead-letters-not-growing' (or left out), "
        'got "count-matches"',
        "validation[1].text: is required",
        'validation[2]: must be a sentence or an object {"text": ..., "check": ...}, got 42',
        "validation[3].chek: unknown field; did you mean check?",
    ]


def test_a_runbook_may_hold_redrives_until_a_restore_step_is_done() -> None:
    assert parse_runbook(markdown(original()), source="rb.md").blocks_redrives_until is None
    held = parse_runbook(markdown(changed(blocksRedrivesUntil="dep:job-queue")), source="rb.md")
    assert held.blocks_redrives_until == "dep:job-queue"
    nulled = parse_runbook(markdown(changed(blocksRedrivesUntil=None)), source="rb.md")
    assert nulled.blocks_redrives_until is None


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (
            "dep:blob-store",
            "'dep:blob-store' is not in restoreOrder (dep:job-queue, dep:job-worker-pool): "
            "name the restore step after which redrives may run again, or leave the field out",
        ),
        ("job-queue", 'must be a dependency id such as dep:job-queue, got "job-queue"'),
        (True, "must be a string, got true"),
    ],
)
def test_redrives_are_held_only_until_a_step_of_the_restore_order(value: Any, said: str) -> None:
    assert problems(changed(blocksRedrivesUntil=value)) == [f"blocksRedrivesUntil: {said}"]


def test_a_misspelt_hold_is_refused_with_the_field_meant() -> None:
    assert problems(changed(blocksRedriveUntil="dep:job-queue")) == [
        "blocksRedriveUntil: unknown field; did you mean blocksRedrivesUntil?"
    ]


def test_a_filled_draft_ends_the_summary_as_a_sentence() -> None:
    draft = "{incident}: {summary} Triage: /queue triage"
    assert fill_draft(draft, {"incident": "INC-4", "summary": "jobs fail on workers"}) == (
        "INC-4: jobs fail on workers. Triage: /queue triage"
    )
    assert fill_draft(draft, {"incident": "INC-4", "summary": "all lost! "}) == (
        "INC-4: all lost! Triage: /queue triage"
    )


# ---------------------------------------------------------------------------------------
# Finding the statement in the Markdown


@pytest.mark.parametrize(
    ("text", "said"),
    [
        pytest.param(
            f"{PROSE}```json\n{ORIGINAL_QUEUE_LOSS}\n```\n",
            "no statement: the file has no <!-- oshun:runbook --> marker; put it on a line of "
            "its own, followed by the statement in a ```json block",
            id="without-the-marker",
        ),
        pytest.param(
            f"# T\n\nsee <!-- oshun:runbook --> here\n```json\n{ORIGINAL_QUEUE_LOSS}\n```\n",
            "line 3: the marker <!-- oshun:runbook --> must stand on a line of its own, before "
            "the ```json block of the statement",
            id="a-marker-inside-other-text",
        ),
    ],
)
def test_a_file_is_refused_unless_the_marker_stands_alone(text: str, said: str) -> None:
    assert problems("", text=text) == [said]


def test_the_marker_must_be_followed_by_a_json_block() -> None:
    text = (
        f"# T\n\n<!-- oshun:runbook -->\n\nThe statement:\n\n```json\n{ORIGINAL_QUEUE_LOSS}\n```\n"
    )
    assert problems("", text=text) == [
        "line 5: the marker on line 3 must be followed by a ```json block (blank lines may "
        "come between), not 'The statement:'"
    ]
    assert problems("", text="# T\n<!-- oshun:runbook -->\n\n") == [
        "the marker on line 2 is not followed by a ```json block: the file ends"
    ]
    assert problems("", text=f"<!-- oshun:runbook -->\n```yaml\n{ORIGINAL_QUEUE_LOSS}\n```\n") == [
        "line 2: the block after the marker on line 1 must be marked as JSON: ```json"
    ]
    assert problems("", text=f"<!-- oshun:runbook -->\n```json\n{ORIGINAL_QUEUE_LOSS}\n") == [
        "line 2: the ```json block opened on line 2 is never closed"
    ]


def test_invalid_json_is_named_by_its_line_and_column_in_the_file() -> None:
    broken = ORIGINAL_QUEUE_LOSS.replace('"version": "1",', '"version": "1"')
    text = markdown(broken)
    line = text.splitlines().index('  "version": "1"') + 2  # the next key is where it fails
    assert problems("", text=text) == [
        f"line {line}, column 3: not valid JSON: Expecting ',' delimiter"
    ]
    assert text.splitlines()[line - 1].startswith('  "detectionAuthority"')


@pytest.mark.parametrize(
    ("written", "instead", "said"),
    [
        pytest.param(
            "900000", "NaN", "not valid JSON: NaN is not a JSON number", id="not-a-number"
        ),
        pytest.param(
            '"version": "1",',
            '"version": "1", "version": "2",',
            "the key 'version' appears twice in one object; say it once",
            id="a-repeated-key",
        ),
    ],
)
def test_what_strict_json_refuses_is_refused(written: str, instead: str, said: str) -> None:
    text = markdown(ORIGINAL_QUEUE_LOSS.replace(written, instead))
    assert problems("", text=text) == [said]


def test_two_statements_in_one_file_are_refused() -> None:
    text = markdown(ORIGINAL_QUEUE_LOSS) + "\n" + markdown(ORIGINAL_QUEUE_LOSS)
    assert problems("", text=text) == [
        "holds 2 statements (markers on lines 7 and 63); a file holds one runbook"
    ]


def test_other_json_blocks_in_the_prose_are_left_alone() -> None:
    text = '# T\n\n```json\n{"example": true}\n```\n\n' + markdown(ORIGINAL_QUEUE_LOSS)
    assert parse_runbook(text, source="rb.md").title == "T"


# ---------------------------------------------------------------------------------------
# The shipped runbooks


def test_the_shipped_runbooks() -> None:
    shipped = {r.scenario_id: r for r in shipped_runbooks()}
    assert set(shipped) == {"gd:queue-loss", "gd:failed-jobs-accumulating", "gd:dlq-redrive"}
    for runbook in shipped.values():
        assert runbook.shipped
        assert runbook.declaration_role == "operations duty officer"
        assert runbook.detection_role == "service on-call"
        assert all(c.draft for c in runbook.communications)


def test_only_the_shipped_queue_loss_runbook_holds_redrives() -> None:
    held = {r.scenario_id: r.blocks_redrives_until for r in shipped_runbooks()}
    assert held == {
        "gd:queue-loss": "dep:job-queue",
        "gd:dlq-redrive": None,
        "gd:failed-jobs-accumulating": None,
    }


def test_the_shipped_queue_loss_runbook_keeps_the_scenarios_facts() -> None:
    runbook = RunbookLibrary.load().get("gd:queue-loss")
    windows = {c.audience: c.within_ms for c in runbook.communications}
    assert windows == {"operators": 300000, "actors": 900000}
    assert runbook.restore_order == ("dep:job-queue", "dep:job-worker-pool")
    assert [v.check for v in runbook.validation] == [
        "count-restored",
        "synthetic-job",
        "backlog-falling",
    ]
    drafts = {c.audience: c.draft or "" for c in runbook.communications}
    assert "accepted" in drafts["actors"]
    assert "not running" in drafts["actors"]
    assert "do not resubmit" in drafts["actors"]
    assert "runbook is running" in drafts["operators"]
    assert "{lead}" in drafts["operators"]


# ---------------------------------------------------------------------------------------
# The library


def write(folder: Path, name: str, statement: dict[str, Any] | str) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(statement if isinstance(statement, str) else markdown(statement))
    return path


def own_queue_loss() -> dict[str, Any]:
    return changed(id="runbook:our-queue-loss", version="7")


def test_a_folder_runbook_replaces_the_shipped_one_of_its_scenario(tmp_path: Path) -> None:
    extra = changed(id="runbook:cache-loss", scenarioId="ops:cache-loss")
    write(tmp_path, "queue-loss.md", own_queue_loss())
    write(tmp_path, "cache-loss.md", extra)
    (tmp_path / "notes.txt").write_text("not a runbook: only *.md files are read")
    library = RunbookLibrary.load(tmp_path)
    assert library.scenario_ids() == [
        "gd:dlq-redrive",
        "gd:failed-jobs-accumulating",
        "gd:queue-loss",
        "ops:cache-loss",
    ]
    ours = library.get("gd:queue-loss")
    assert (ours.id, ours.version, ours.shipped) == ("runbook:our-queue-loss", "7", False)
    assert ours.source == str(tmp_path / "queue-loss.md")
    [(new, old)] = library.replaced
    assert (new.id, old.id, old.source) == (
        "runbook:our-queue-loss",
        "runbook:queue-loss",
        "shipped/queue-loss.md",
    )
    assert [r.scenario_id for r in library.all()] == library.scenario_ids()


def test_a_bad_folder_file_is_refused_with_every_error_and_its_file(tmp_path: Path) -> None:
    bad = original()
    bad["communications"][1]["withinMs"] = -5
    bad["restoreOrder"] = ["dep:nowhere"]
    write(tmp_path, "a.md", bad)
    write(tmp_path, "b.md", "# no statement here\n")
    write(tmp_path, "c.md", own_queue_loss())
    with pytest.raises(ConfigError) as info:
        RunbookLibrary.load(tmp_path)
    lines = str(info.value).splitlines()
    assert lines[0] == (
        f"{tmp_path / 'a.md'}: communications[1].withinMs: must be a positive number of "
        "milliseconds, got -5"
    )
    assert lines[1].startswith(f"{tmp_path / 'a.md'}: restoreOrder[0]: 'dep:nowhere' is not")
    assert lines[2].startswith(f"{tmp_path / 'b.md'}: no statement")
    assert len(lines) == 3


def test_two_folder_runbooks_of_one_scenario_are_refused(tmp_path: Path) -> None:
    write(tmp_path, "a.md", own_queue_loss())
    write(tmp_path, "b.md", changed(id="runbook:other"))
    with pytest.raises(ConfigError) as info:
        RunbookLibrary.load(tmp_path)
    assert str(info.value) == (
        f"{tmp_path / 'b.md'}: scenarioId: 'gd:queue-loss' is already the scenarioId of "
        f"{tmp_path / 'a.md'}; one runbook per scenarioId"
    )


def test_a_missing_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        RunbookLibrary.load(tmp_path / "nowhere")
    assert str(info.value) == f"[runbooks] dir: {tmp_path / 'nowhere'} is not a folder"


def test_an_unknown_scenario_lists_the_known_ones() -> None:
    with pytest.raises(NotFound) as info:
        RunbookLibrary.load().get("gd:queue-los")
    assert str(info.value) == (
        "no runbook for scenario 'gd:queue-los'; known scenarios: gd:dlq-redrive, "
        "gd:failed-jobs-accumulating, gd:queue-loss"
    )


def test_a_relative_folder_is_read_from_the_configuration_files_folder(tmp_path: Path) -> None:
    write(tmp_path / "runbooks", "ours.md", own_queue_loss())
    config = tmp_path / "queuebot.toml"
    config.write_text('[runbooks]\ndir = "runbooks"\n')
    library = library_for(load_config(config, environ={}))
    assert library.get("gd:queue-loss").id == "runbook:our-queue-loss"


def test_an_alert_route_must_name_a_scenario_with_a_runbook() -> None:
    library = RunbookLibrary.load()
    good = AlertsConfig.model_validate(
        {"routes": [{"name": "loss", "channels": ["alerts"], "scenario": "gd:queue-loss"}]}
    )
    library.check_routes(good)
    bad = AlertsConfig.model_validate(
        {"routes": [{"name": "loss", "channels": ["alerts"], "scenario": "gd:queue-lost"}]}
    )
    with pytest.raises(ConfigError) as info:
        library.check_routes(bad)
    assert str(info.value) == (
        "alerts.routes.0 (loss): scenario 'gd:queue-lost' has no runbook (known: "
        "gd:dlq-redrive, gd:failed-jobs-accumulating, gd:queue-loss)"
    )


def test_an_authority_maps_to_a_queuebot_role_whatever_its_case_and_spacing() -> None:
    roles = {"Operations Duty Officer": "duty-officer", "service on-call": "operator"}
    assert queuebot_role(roles, "operations  duty officer") == "duty-officer"  # type: ignore[arg-type]
    assert queuebot_role(roles, "service on-call") == "operator"  # type: ignore[arg-type]
    assert queuebot_role(roles, "incident commander") is None  # type: ignore[arg-type]


def test_the_shipped_runbooks_are_installed_as_package_data() -> None:
    import fnmatch
    import tomllib

    root = Path(__file__).resolve().parents[2]
    project = tomllib.loads((root / "pyproject.toml").read_text("utf-8"))
    patterns = project["tool"]["setuptools"]["package-data"]["services"]
    shipped = sorted((root / "services" / "runbooks" / "shipped").glob("*.md"))
    assert len(shipped) == len(shipped_runbooks()) == 3
    for path in shipped:
        relative = path.relative_to(root / "services").as_posix()
        assert any(fnmatch.fnmatch(relative, p) for p in patterns), relative
