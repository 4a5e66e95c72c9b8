"""A queue's preset options as the configuration file takes them: a preset or a profile,
never both; queue_name and schema only with a preset; each refusal says how to fix it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.config import QueueConfig


def test_a_preset_takes_its_queue_and_schema() -> None:
    config = QueueConfig.model_validate(
        {"preset": "pg-boss", "queue_name": "emails", "schema": "jobs"}
    )
    assert (config.kind, config.queue_name, config.schema_name) == ("pg-boss", "emails", "jobs")
    assert QueueConfig(profile="worker_queue").kind == "worker_queue"


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({}, "give either profile"),
        ({"profile": "worker_queue", "preset": "river"}, "exactly one of them"),
        ({"profile": "worker_queue", "queue_name": "emails"}, "options of a preset"),
        ({"preset": "river", "schema": "a.b"}, "must be one name"),
        ({"preset": "river", "schema": "a b"}, "SQL identifier"),
        ({"preset": "River!"}, "a preset name such as river"),
        ({"preset": "river", "queue_name": " emails"}, "white space"),
        ({"preset": "river", "queue_name": ""}, "at least 1 character"),
        ({"profile": "river"}, "worker_queue"),
    ],
)
def test_a_bad_preset_option_is_refused_saying_why(given: dict[str, str], said: str) -> None:
    with pytest.raises(ValidationError, match=said):
        QueueConfig.model_validate(given)
