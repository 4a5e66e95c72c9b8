"""The Procrastinate app the preset tests run: one task that fails on demand.

``send`` raises when its argument ``fail`` is true and the environment has
``QB_SYSTEMS_FAULT=1``. Its retry strategy grants one retry with no wait, so a failing job
runs twice and is then dead (status ``failed``, ``attempts`` 2): Procrastinate's
``max_attempts`` counts retries, not runs.

The database comes from ``QB_SYSTEMS_URL`` (a libpq URL), read when this module is
imported: the tools run it in a subprocess per database. ``main(["defer", SPEC])`` defers
jobs and prints their ids as JSON, SPEC being ``{"queue": [ok, failing], ...}``.

The mail outage (testkit/systems/outage.py) is a second task, ``mail``: one mail each, to a
relay that refuses the failing ones while the fault is on and otherwise accepts the mail
and records it (a row of ``mail_fake.sent`` per mail accepted: a mail sent twice shows as
two rows). ``main(["mails", SPEC])``, SPEC being ``{"ok": N, "failing": M, "first": F}``,
makes that table and defers the mails to the queue ``mails``, each with the message id
``MSG-<F + n>``.
"""

from __future__ import annotations

import json
import os
import sys

import procrastinate
import psycopg

FAULT_ENV = "QB_SYSTEMS_FAULT"
URL_ENV = "QB_SYSTEMS_URL"
TASK = "queuebot_tests.send"
MAIL_TASK = "queuebot_tests.mail"
MAILS = "mails"

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ.get(URL_ENV, "")),
)


@app.task(name=TASK, retry=procrastinate.RetryStrategy(max_attempts=1, wait=0))
def send(fail: bool = False, n: int = 0) -> None:
    if fail and os.environ.get(FAULT_ENV) == "1":
        raise TimeoutError(f"smtp relay did not answer in 30 s (job {n})")


@app.task(
    name=MAIL_TASK, retry=procrastinate.RetryStrategy(max_attempts=1, wait=0), pass_context=True
)
def mail(context: procrastinate.JobContext, message_id: str, to: str, fail: bool = False) -> None:
    if fail and os.environ.get(FAULT_ENV) == "1":
        raise TimeoutError(f"smtp relay did not answer in 30 s ({message_id})")
    job = context.job.id
    with psycopg.connect(os.environ[URL_ENV], autocommit=True) as conn:
        conn.execute(
            "INSERT INTO mail_fake.sent (message_id, job_id, recipient) VALUES (%s, %s, %s)",
            (message_id, job, to),
        )


def defer_mails(ok: int, failing: int, first: int = 100000) -> dict[str, object]:
    """The mail fake's table, then ``ok`` mails and ``failing`` ones to the queue ``mails``:
    their ids and each job's message id."""
    with psycopg.connect(os.environ[URL_ENV], autocommit=True) as conn:
        conn.execute(
            "CREATE SCHEMA IF NOT EXISTS mail_fake;"
            " CREATE TABLE IF NOT EXISTS mail_fake.sent (id bigserial PRIMARY KEY,"
            " message_id text NOT NULL, job_id bigint NOT NULL, recipient text NOT NULL,"
            " accepted_at timestamptz NOT NULL DEFAULT now())"
        )
    ids: dict[str, list[str]] = {"ok": [], "failing": []}
    keys: dict[str, str] = {}
    mails: list[procrastinate.types.JSONDict] = [
        {"message_id": f"MSG-{n}", "to": f"customer{n}@example.com", "fail": n >= first + ok}
        for n in range(first, first + ok + failing)
    ]
    with app.open():  # in one statement: deferred one by one, a thousand took seconds
        jobs = mail.configure(queue=MAILS).batch_defer(*mails)
    for n, (job, sent) in enumerate(zip(jobs, mails, strict=True)):
        ids["ok" if n < ok else "failing"].append(str(job))
        keys[str(job)] = str(sent["message_id"])
    return {MAILS: ids, "keys": keys}


def defer(spec: dict[str, list[int]]) -> dict[str, dict[str, list[str]]]:
    """Defer ``ok`` then ``failing`` jobs per queue; their ids per queue."""
    out: dict[str, dict[str, list[str]]] = {}
    with app.open():
        for queue, (ok, failing) in spec.items():
            each: list[procrastinate.types.JSONDict] = [
                {"fail": n >= ok, "n": n} for n in range(ok + failing)
            ]
            jobs = send.configure(queue=queue).batch_defer(*each)
            out[queue] = {"ok": [str(j) for j in jobs[:ok]], "failing": [str(j) for j in jobs[ok:]]}
    return out


def main(argv: list[str]) -> None:
    """``defer SPEC`` or ``mails SPEC``: defer the jobs SPEC names and print their ids as
    JSON."""
    if argv[:1] not in (["defer"], ["mails"]) or len(argv) != 2:
        sys.exit("usage: defer SPEC | mails SPEC")
    spec = json.loads(argv[1])
    print(json.dumps(defer(spec) if argv[0] == "defer" else defer_mails(**spec)))
