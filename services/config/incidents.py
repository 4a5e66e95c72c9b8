"""The ``[incidents]`` part of the TOML file: which channels carry each audience's
communications, and when the incident lead is reminded of a pending one."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from services.config.alerts import Name

OPERATORS = "operators"  # the audience (and channel) escalations also go to


def _insert(sql: str) -> str:
    if not re.match(r"^\s*INSERT\s", sql, re.IGNORECASE) or not re.search(
        r"\sRETURNING\s", sql, re.IGNORECASE
    ):
        raise ValueError(
            "expected one INSERT ... RETURNING <the job's id> statement, e.g. INSERT INTO "
            "dev_r_worker_queue (job_type, status) VALUES ('synthetic', 'queued') RETURNING id"
        )
    if ";" in sql.strip().rstrip(";"):
        raise ValueError("expected one statement (no ';' inside)")
    return sql.strip().rstrip(";")


class SyntheticJob(BaseModel):
    """How `/incident validate` submits one synthetic job to ``queue`` (the statement
    returns the job's id; ``:incident`` is bound to the incident's name), then watches it
    reach a terminal state."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    queue: Name
    insert: Annotated[str, Field(min_length=10, max_length=2000), AfterValidator(_insert)]


class IncidentsConfig(BaseModel):
    """``audiences``: audience -> channel names (default: the channel named like the
    audience, e.g. [channels.actors]); ``remind_at``: fractions of a communication's
    window at which the lead is reminded while it is pending (default at half and at
    80%); ``synthetic_job``: how `/incident validate` submits a synthetic job."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    audiences: dict[Name, Annotated[list[Name], Field(min_length=1, max_length=10)]] = Field(
        default_factory=dict
    )
    remind_at: Annotated[list[Annotated[float, Field(gt=0, lt=1)]], Field(max_length=5)] = Field(
        default_factory=lambda: [0.5, 0.8]
    )
    synthetic_job: SyntheticJob | None = None

    def channels_of(self, audience: str) -> list[str]:
        return list(self.audiences.get(audience, [audience]))
