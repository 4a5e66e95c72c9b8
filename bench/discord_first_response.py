"""Discord's 3 seconds: how soon each interaction gets its first response, under a burst.

Builds the demo estate in a scratch SQLite file, starts the local fake Discord
(``testkit/fake_discord.py``: REST and a gateway speaking v10 JSON) and the real
``queuebot serve`` pointed at it, waits for the gateway to be ready, then delivers
``--commands`` slash commands (default 200) as ``INTERACTION_CREATE`` events, up to
``--in-flight`` (default 20) unanswered at once, in a fixed shuffled mix of reads:
``/queue triage``, ``/queue dlq limit:10``, ``/queue stuck`` and ``/queue pending``.

Per interaction it measures the first response (delivered by the fake's gateway -> the
fake recorded the interaction callback) and the answer (delivered -> the deferred
response edited with the answer), and checks the targets: every first response within
3 s (Discord's limit), p99 under 100 ms (as Slack's acknowledgement), every answer
delivered exactly once, none an error.

    .venv/bin/python -m bench.discord_first_response
    .venv/bin/python -m bench.discord_first_response --commands 500 --in-flight 50

Exit status: 0 when every target is met (or with ``--smoke``, which judges nothing), 1
when one is missed, 2 on error.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from bench.kit.cli import BenchParser, exit_with
from bench.kit.figures import exit_status, loadavg, mark
from bench.kit.serve import build_demo, start_serve, wait_until
from testkit import web
from testkit.fake_discord import FakeDiscord, Interaction

ALICE = "100000000000000001"
GUILD = "400000000000000001"
MIX: tuple[tuple[str, dict[str, object]], ...] = (
    ("triage", {"queue": "workers"}),
    ("triage", {"queue": "clips"}),
    ("dlq", {"limit": 10}),
    ("stuck", {"queue": "workers"}),
    ("pending", {}),
)


def percentile(values: list[float], p: float) -> float:
    """The nearest rank (``p`` in percent)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def answered(i: Interaction) -> bool:
    return i.original is not None and i.original.edits > 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = BenchParser(__doc__, url=None)
    parser.size("--commands", full=200, smoke=10, help="slash commands sent")
    parser.size("--in-flight", full=20, smoke=5, help="unanswered at once, at most")
    parser.size("--wait", full=120.0, smoke=60.0, type=float, help="seconds for the answers")
    return parser.read(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="qb_bench_discord_") as tmp,
        FakeDiscord().start() as fake,
    ):
        work = Path(tmp)
        db_url = f"sqlite+aiosqlite:///{work}/queuebot.db"
        build_demo(db_url)
        env = {
            "QUEUEBOT_AUDIT_KEY": "bench-audit-key-0123456789abcdef0123456789",
            "DISCORD_BOT_TOKEN": fake.token,
            "DISCORD_API_BASE_URL": fake.api_url,
        }
        serve = start_serve(
            work, db_url, env=env, config=f'\n[discord]\nguild = "{GUILD}"\n', log_level="WARNING"
        )

        def ready() -> bool:
            try:
                body = web.get(f"{serve.url}/readyz", timeout=2).json()
            except httpx.TransportError:
                return False
            return bool(body.get("discord") == "ok")

        try:
            try:
                wait_until(serve, ready)
            except RuntimeError as exc:  # its log says why
                print(exc, file=sys.stderr)
                return 2
            mix = [MIX[n % len(MIX)] for n in range(args.commands)]
            random.Random(14).shuffle(mix)
            for sub, options in MIX:  # warm-up: each read once
                warm = fake.command("queue", sub, options, user=ALICE)
                fake.wait_until(lambda w=warm: answered(w), 60)  # type: ignore[misc]
            slots = threading.Semaphore(args.in_flight)
            sent: list[Interaction] = []
            started = time.monotonic()
            for sub, options in mix:
                slots.acquire()
                i = fake.command("queue", sub, options, user=ALICE)
                sent.append(i)
                threading.Thread(
                    target=_release_when_answered, args=(i, slots, args.wait), daemon=True
                ).start()
            deadline = time.monotonic() + args.wait
            while not all(answered(i) for i in sent) and time.monotonic() < deadline:
                time.sleep(0.05)
            took = time.monotonic() - started
        finally:
            serve.stop()

    first = [i.answered_within() for i in sent]
    firsts = [f for f in first if f is not None]
    done = [i for i in sent if answered(i)]
    answers = [(i.original.edits, i.answered_within()) for i in done if i.original is not None]
    errors = [i for i in done if i.original and "unexpected error" in i.original.text()]
    print(f"load: {loadavg()} (1, 5 and 15 min), cpus {os.cpu_count()}")
    print(f"{len(sent)} interactions, {args.in_flight} in flight, all in {took:.1f} s")
    if firsts:
        print(
            "first response ms: "
            f"p50 {statistics.median(firsts) * 1000:.0f}  p95 {percentile(firsts, 95) * 1000:.0f}  "
            f"p99 {percentile(firsts, 99) * 1000:.0f}  max {max(firsts) * 1000:.0f}"
        )
    print(
        f"answered {len(done)} of {len(sent)}, edited more than once: "
        f"{sum(1 for e, _ in answers if e != 1)}, errors: {len(errors)}"
    )
    met = (
        len(firsts) == len(sent)
        and max(firsts) < 3.0
        and percentile(firsts, 99) < 0.1
        and len(done) == len(sent)
        and all(e == 1 for e, _ in answers)
        and not errors
    )
    targets = "every first response < 3 s, p99 < 100 ms, every answer once, no error"
    print(f"{mark(met, args.smoke)}: {targets}")
    return exit_status(met, args.smoke)


def _release_when_answered(i: Interaction, slots: threading.Semaphore, wait: float) -> None:
    deadline = time.monotonic() + wait
    while not answered(i) and time.monotonic() < deadline:
        time.sleep(0.01)
    slots.release()


if __name__ == "__main__":
    exit_with(main)
