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
3 s (Discord's limit), p99 under 1 s, every answer delivered exactly once, none an error.

    .venv/bin/python bench/discord_first_response.py
    .venv/bin/python bench/discord_first_response.py --commands 500 --in-flight 50

Exit status: 0 when every target is met, 1 when one is missed, 2 on error.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import repo_root  # noqa: F401  (testkit, from the repository's root)

from bot.demo import DEMO_CONFIG, record_history
from services.config import default_queues
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.demo import build_demo_estate
from services.estate.estate import Estate
from testkit.fake_discord import FakeDiscord, Interaction

ALICE = "100000000000000001"
GUILD = "400000000000000001"
MIX = (
    ("triage", {"queue": "workers"}),
    ("triage", {"queue": "clips"}),
    ("dlq", {"limit": 10}),
    ("stuck", {"queue": "workers"}),
    ("pending", {}),
)


def build(db_url: str) -> None:
    async def run() -> None:
        engine = create_engine(db_url)
        await upgrade(engine)
        async with engine.begin() as conn:
            await build_demo_estate(conn, now=datetime.now(UTC))
        await record_history(
            engine, Estate(engine=engine, queues=default_queues()), ago=timedelta(minutes=15)
        )
        await engine.dispose()

    asyncio.run(run())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def answered(i: Interaction) -> bool:
    return i.original is not None and i.original.edits > 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=200)
    parser.add_argument("--in-flight", type=int, default=20)
    parser.add_argument("--wait", type=float, default=120.0)
    args = parser.parse_args()

    with (
        tempfile.TemporaryDirectory(prefix="qb_bench_discord_") as tmp,
        FakeDiscord().start() as fake,
    ):
        work = Path(tmp)
        db_url = f"sqlite+aiosqlite:///{work}/queuebot.db"
        build(db_url)
        config = work / "queuebot.toml"
        config.write_text(DEMO_CONFIG.format(config=config) + f'\n[discord]\nguild = "{GUILD}"\n')
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUEBOT_", "SLACK_"))}
        env.update(
            QUEUEBOT_CONFIG=str(config),
            QUEUEBOT_DATABASE_URL=db_url,
            QUEUEBOT_AUDIT_KEY="bench-audit-key-0123456789abcdef0123456789",
            QUEUEBOT_ALERT_TOKEN="bench-alert-token-0123456789",  # serve starts only with one
            DISCORD_BOT_TOKEN=fake.token,
            DISCORD_API_BASE_URL=fake.api_url,
        )
        log = (work / "serve.log").open("w")
        serve = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "serve", "--port", str(port)],
            cwd=work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    body = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).json()
                    if body.get("discord") == "ok":
                        break
                except httpx.TransportError:
                    pass
                if serve.poll() is not None or time.monotonic() > deadline:
                    print((work / "serve.log").read_text(), file=sys.stderr)
                    return 2
                time.sleep(0.1)
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
            serve.terminate()
            serve.wait(timeout=15)
            log.close()

    first = [i.answered_within() for i in sent]
    firsts = [f for f in first if f is not None]
    done = [i for i in sent if answered(i)]
    answers = [(i.original.edits, i.answered_within()) for i in done if i.original is not None]
    errors = [i for i in done if i.original and "unexpected error" in i.original.text()]
    one, five, _ = os.getloadavg()
    print(f"load: {one:.2f} {five:.2f} (1 and 5 min), cpus {os.cpu_count()}")
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
        and percentile(firsts, 99) < 1.0
        and len(done) == len(sent)
        and all(e == 1 for e, _ in answers)
        and not errors
    )
    print("targets met" if met else "a target was missed")
    return 0 if met else 1


def _release_when_answered(i: Interaction, slots: threading.Semaphore, wait: float) -> None:
    deadline = time.monotonic() + wait
    while not answered(i) and time.monotonic() < deadline:
        time.sleep(0.01)
    slots.release()


if __name__ == "__main__":
    sys.exit(main())
