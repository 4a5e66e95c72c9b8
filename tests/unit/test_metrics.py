"""queuebot's own counters and the limits on what /metrics shows, without a database:
every command is counted by its name and outcome, and no label grows without bound."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from commands.catalog import CATALOG
from commands.context import Invocation
from services.errors import NotFound, PermissionDenied
from services.metrics import Metrics
from services.metrics.families import MAX_VALUES, OTHER, bounded
from tests.unit.test_handlers import make_router, slack_user

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: bytes) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
        if not s.name.endswith("_created")
    }


def bare(**kwargs: object) -> Metrics:
    return Metrics(estate=None, state_engine=None, **kwargs)  # type: ignore[arg-type]


def test_estate_values_past_the_cap_are_summed_under_other() -> None:
    statuses = {f"status_{i:02d}": 100 - i for i in range(60)}
    shown = bounded(statuses)
    assert len(shown) == MAX_VALUES
    assert sum(shown.values()) == sum(statuses.values())  # nothing lost, only folded
    assert shown["status_00"] == 100  # the largest are shown by name
    assert "status_59" not in shown
    assert shown[OTHER] == sum(100 - i for i in range(MAX_VALUES - 1, 60))
    assert bounded({"queued": 3}) == {"queued": 3}


async def test_every_command_starts_at_zero_and_counts_its_outcomes() -> None:
    names = [spec.name for spec in CATALOG]
    metrics = bare(commands=names)
    before = samples(await metrics.exposition())
    assert {
        dict(labels)["command"] for (name, labels) in before if name == "queuebot_commands_total"
    } == set(names)
    assert all(v == 0 for (n, _), v in before.items() if n == "queuebot_commands_total")

    metrics.command("triage", "ok")
    metrics.command("triage", "ok")
    metrics.command("approve", "refused")
    metrics.alert_received("alertmanager")
    metrics.alert_posted("firing")
    metrics.detector_fired("queue_loss")
    after = samples(await metrics.exposition())
    assert after["queuebot_commands_total", (("command", "triage"), ("outcome", "ok"))] == 2
    assert after["queuebot_commands_total", (("command", "approve"), ("outcome", "refused"))] == 1
    assert after["queuebot_alerts_received_total", (("source", "alertmanager"),)] == 1
    assert after["queuebot_alert_posts_total", (("kind", "firing"),)] == 1
    assert after["queuebot_detector_firings_total", (("detector", "queue_loss"),)] == 1
    # no estate and no state database: no queue series at all, and no failure either
    assert not [n for n, _ in after if n.startswith("queuebot_queue_")]


async def test_deliveries_given_up_start_at_zero_per_platform_and_count() -> None:
    metrics = bare()
    series = "queuebot_deliveries_given_up_total"
    before = samples(await metrics.exposition())
    assert {labels: v for (n, labels), v in before.items() if n == series} == {
        (("platform", "slack"),): 0,
        (("platform", "discord"),): 0,
    }
    metrics.delivery_given_up("discord")
    after = samples(await metrics.exposition())
    assert after[series, (("platform", "discord"),)] == 1
    assert after[series, (("platform", "slack"),)] == 0


async def test_a_counter_label_takes_at_most_the_cap_of_distinct_values() -> None:
    metrics = bare()
    for i in range(80):
        metrics.alert_received(f"source-{i}")
    shown = {
        dict(labels)["source"]: v
        for (name, labels), v in samples(await metrics.exposition()).items()
        if name == "queuebot_alerts_received_total"
    }
    assert len(shown) == MAX_VALUES
    assert shown[OTHER] == 80 - (MAX_VALUES - 1)
    assert sum(shown.values()) == 80


async def test_the_router_counts_each_command_by_name_and_outcome() -> None:
    metrics = bare(commands=[spec.name for spec in CATALOG])
    router, _ = make_router()
    router = type(router)(replace(router.deps, metrics=metrics))
    stranger = Invocation(person=None, platform="slack", account="U0NOBODY")

    await router.handle_line("/queue triage", slack_user("U0ALICE"))
    with pytest.raises(PermissionDenied):  # unknown users only read
        await router.handle_line("/queue requeue 12 --reason retry them", stranger)
    with pytest.raises(NotFound):
        await router.handle_line("/queue show 12", slack_user("U0ALICE"))

    counted = {
        (dict(labels)["command"], dict(labels)["outcome"]): v
        for (name, labels), v in samples(await metrics.exposition()).items()
        if name == "queuebot_commands_total" and v
    }
    assert counted == {("triage", "ok"): 1, ("requeue", "refused"): 1, ("show", "error"): 1}
