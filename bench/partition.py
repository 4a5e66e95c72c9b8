"""A real network partition between queuebot and PostgreSQL: how long a wait takes to end.

The tests' silent proxy (testkit/tcp_proxy.py) keeps TCP alive end to end, so only
queuebot's own bound ends a wait there; TCP keepalives and ``tcp_user_timeout`` need
packets that vanish. This makes them: a network namespace joined to the host by a veth
pair, PostgreSQL reached over it (through a forwarder on the host's end), and the host's
end taken down, so that what the namespace sends goes nowhere and nothing comes back.

For an engine made as queuebot makes it (``[database]``'s defaults) and for a plain
SQLAlchemy engine (pre-ping on, no timeouts), it prints how long until a transaction
fails when the partition begins while its connection sits in the pool (``idle``), and
when it begins while a statement is running (``in flight``: ``pg_sleep(8)``). A wait
still going after ``--give-up`` seconds is printed as such.

    sudo .venv/bin/python -m bench.partition [--url postgresql://postgres@127.0.0.1:5432/postgres]

Needs root (``ip netns``, ``ip link``); nothing is left behind (the namespace, the link).
``--smoke`` gives up after 2 s: each wait ends as "no answer", on the same path.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from bench.kit.cli import BenchParser, exit_with, names
from services.db import create_engine
from testkit.tcp_proxy import TcpProxy

ROOT = Path(__file__).resolve().parent.parent
HOST_ADDRESS, NS_ADDRESS = "10.77.0.1", "10.77.0.2"
ENGINES = ("queuebot", "plain")  # made as queuebot makes it; SQLAlchemy's, pre-ping on


def run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True)


async def client(url: str, kind: str, case: str) -> None:
    """In the namespace: one warm connection, then (told to go) one transaction."""
    if kind == "queuebot":
        engine = create_engine(url)
    else:
        plain = make_url(url).set(drivername="postgresql+psycopg")
        engine = create_async_engine(plain, pool_pre_ping=True)
    async with engine.connect() as conn:
        await conn.execute(sa.text("SELECT 1"))
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    started = time.monotonic()
    try:
        async with engine.connect() as conn:
            statement = "SELECT pg_sleep(8)" if case == "in flight" else "SELECT 1"
            await conn.execute(sa.text(statement))
        said = "answered (the partition came too late)"
    except Exception as exc:  # what ended the wait, in the driver's words
        said = str(getattr(exc, "orig", exc)).strip().splitlines()[0][:90]
    print(f"{time.monotonic() - started:.1f}\t{said}", flush=True)


def measure(ns: str, link: str, url: str, kind: str, case: str, give_up: float) -> str:
    inside = ["ip", "netns", "exec", ns, sys.executable, "-m", "bench.partition"]
    child = subprocess.Popen(
        [*inside, "--client", kind, case, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        line = child.stdout.readline().strip()
        if line != "ready":
            return f"the client did not start: {line!r}"
        if case == "in flight":  # the statement goes out, then the path goes
            child.stdin.write("go\n")
            child.stdin.flush()
            time.sleep(1)
            run("ip", "link", "set", link, "down")
        else:  # the path goes, then the transaction starts on its pooled connection
            run("ip", "link", "set", link, "down")
            child.stdin.write("go\n")
            child.stdin.flush()
        ready, _, _ = select.select([child.stdout], [], [], give_up)
        return child.stdout.readline().strip() if ready else f"no answer after {give_up:g} s"
    finally:
        child.kill()
        child.wait()
        run("ip", "link", "set", link, "up")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = BenchParser(__doc__, url="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.size("--give-up", full=60.0, smoke=2.0, type=float, help="seconds a wait may take")
    parser.size(
        "--engines",
        full=list(ENGINES),
        smoke=["queuebot"],
        type=names,
        help="comma-separated engines: " + ",".join(ENGINES),
    )
    parser.add_argument("--client", nargs=3, help=argparse.SUPPRESS)
    return parser.read(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.client:
        kind, case, url = args.client
        asyncio.run(client(url, kind, case))
        return 0
    if os.geteuid() != 0:
        print("needs root: it makes a network namespace and a veth pair", file=sys.stderr)
        return 2
    target = make_url(args.url)
    ns, host_end, ns_end = f"qbpart{os.getpid()}", f"qbh{os.getpid() % 100000}", "qbn0"
    run("ip", "netns", "add", ns)
    try:
        run("ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end, "netns", ns)
        run("ip", "addr", "add", f"{HOST_ADDRESS}/24", "dev", host_end)
        run("ip", "link", "set", host_end, "up")
        run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{NS_ADDRESS}/24", "dev", ns_end)
        run("ip", "netns", "exec", ns, "ip", "link", "set", ns_end, "up")
        with TcpProxy((target.host or "127.0.0.1", target.port or 5432), host=HOST_ADDRESS) as fwd:
            url = target.set(host=HOST_ADDRESS, port=fwd.port).render_as_string(hide_password=False)
            print("engine\tpartition begins\tseconds\twhat ended the wait")
            for kind in args.engines:
                for case in ("idle", "in flight"):
                    result = measure(ns, host_end, url, kind, case, args.give_up)
                    print(f"{kind}\t{case}\t{result}", flush=True)
    finally:
        subprocess.run(["ip", "link", "del", host_end], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
    return 0


if __name__ == "__main__":
    exit_with(main)
