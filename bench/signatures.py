"""How long a failure signature takes to make (``services/estate/signature.py``), on error
texts of the shapes the profiles and the eight presets keep, each carrying its own ids.

No database: the rules run in Python on every profile, so this times them alone. Three
figures, each the median of ``--repeat`` passes over ``--texts`` distinct texts:

- **cold**: each text's signature made from scratch (``_signature``, nothing kept), as a
  triage of an outage whose every error carries a request id makes them;
- **triage sample**: ``top_signatures`` over ``SIGNATURE_SAMPLE`` texts, the kept
  signatures forgotten first (what one triage reply costs);
- **kept**: ``error_signature`` on texts asked before (a freeze of many rows sharing a
  few texts).

Times are the process's CPU time (``time.process_time``), which the other work on a
shared host inflates less than the time on the clock.

``--against REV`` times the module as it was at a git revision too, in the same run,
alternating pass by pass, and prints the ratio (this module / that one): the figure the
signature rules are held to (within about 1.5x of before).

    .venv/bin/python -m bench.signatures [--texts 20000] [--repeat 7] [--against main]
"""

from __future__ import annotations

import gc
import importlib.util
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from bench.kit.cli import BenchParser, exit_with

ROOT = Path(__file__).resolve().parent.parent

# One template per shape, {} filled per text: what each system's error column holds as
# the preset reads it (pg-boss output's message, River's and Oban's last error, ...).
TEMPLATES: tuple[str, ...] = (
    # pg-boss: output.message of a failed job
    "Request failed with status code 503: payments API unavailable (request id {hex8})",
    "POST https://api.pay.example/v1/charges/ch_{tok10}/refund failed: 503 Service "
    "Unavailable; x-request-id: req_{hex16}",
    # River: errors[-1].error
    "charge {n}: stripe: Request req_{tok14}: The card was declined. trace_id={hex32}",
    "dial tcp 10.0.{n3}.{n3}:5432: connect: connection refused",
    # Oban: errors[-1].error, Elixir's exception formatting
    "** (RuntimeError) upstream 503 from https://api.pay.example/v1/invoices/in_{tok12} "
    "trace_id={hex32} span_id={hex16}",
    "** (DBConnection.ConnectionError) tcp recv: closed (the connection was closed by the "
    "pool, possibly due to a timeout or because the pool has been terminated)",
    # graphile-worker: last_error with a stack
    "Error: connect ETIMEDOUT 10.0.{n3}.{n3}:443\n    at TCPConnectWrap.afterConnect [as "
    "oncomplete] (node:net:1555:16)\n    at /app/src/tasks/sync_invoice.js:{n3}:17",
    "FetchError: request to https://hooks.acct{n}.example.com/jobs/{n} failed, reason: "
    "socket hang up",
    # GoodJob: error as "Class: message"
    "Faraday::ServerError: the server responded with status 503 (request_id={ulid})",
    "StandardError: invoice 'INV-{n6}' could not be settled: gateway timeout",
    # Solid Queue: failed execution's error as "class: message"
    "Net::ReadTimeout: Net::ReadTimeout with #<TCPSocket:(closed)> for job {uuid}",
    "ActiveRecord::RecordNotFound: Couldn't find Invoice with 'id'={n}",
    # Que: last_error_message
    "PG::UniqueViolation: ERROR:  duplicate key value violates unique constraint "
    '"index_payments_on_idempotency_key"\nDETAIL:  Key (idempotency_key)=({b64}) already '
    "exists.",
    "Stripe::RateLimitError: Request {tok24} too many requests, retry after {n2}s",
    # the team tables' shapes
    "NoSuchKey: s3://uploads-prod/{uuid}.mp4",
    "smtp: 421 4.7.0 Try again later, closing connection ({hex32})",
    "worker OOM-killed on bms-{n2} after {n6} ms",
    "another worker holds the issue lock (holder pid {n})",
)

ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _fill(template: str, rnd: random.Random) -> str:
    def hexs(n: int) -> str:
        return "".join(rnd.choice("0123456789abcdef") for _ in range(n))

    def tok(n: int) -> str:
        return "".join(rnd.choice(ALNUM) for _ in range(n))

    values = {
        "hex8": hexs(8),
        "hex16": hexs(16),
        "hex32": hexs(32),
        "tok10": tok(10),
        "tok12": tok(12),
        "tok14": tok(14),
        "tok24": tok(24),
        "ulid": "01" + "".join(rnd.choice(CROCKFORD) for _ in range(24)),
        "b64": tok(20) + "==",
        "uuid": f"{hexs(8)}-{hexs(4)}-4{hexs(3)}-a{hexs(3)}-{hexs(12)}",
        "n": str(rnd.randrange(1, 100_000)),
        "n2": str(rnd.randrange(1, 100)),
        "n3": str(rnd.randrange(1, 255)),
        "n6": str(rnd.randrange(100_000, 1_000_000)),
    }
    return template.format(**values)


def corpus(size: int, seed: int = 7) -> list[str]:
    rnd = random.Random(seed)
    return [_fill(TEMPLATES[i % len(TEMPLATES)], rnd) for i in range(size)]


def load(rev: str | None) -> ModuleType:
    """The signature module of the work tree, or as it was at ``rev`` (its file and the
    ``signature*`` modules beside it, read from git and loaded under names of their own,
    so that both are timed in one process)."""
    if rev is None:
        return importlib.import_module("services.estate.signature")
    listed = _git("ls-tree", "--name-only", rev, "services/estate/").split()
    names = sorted(
        (Path(p).stem for p in listed if Path(p).name.startswith("signature")),
        key=lambda stem: stem == "signature",  # the module itself last, its parts first
    )
    module = None
    for stem in names:
        source = _git("show", f"{rev}:services/estate/{stem}.py")
        source = re.sub(r"\bservices\.estate\.(signature\w*)", r"then_\1", source)
        path = Path(f"/tmp/qb_bench_then_{stem}.py")
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(f"then_{stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[f"then_{stem}"] = module  # a dataclass in it looks its module up
        spec.loader.exec_module(module)
    assert module is not None, f"no services/estate/signature.py at {rev}"
    return module


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    )
    return done.stdout


def passes(module: ModuleType, texts: list[str]) -> dict[str, Callable[[], None]]:
    sample = texts[: module.SIGNATURE_SAMPLE]

    def cold() -> None:
        make = module._signature
        for text in texts:
            make(text)

    def triage() -> None:
        module._cached_signature.cache_clear()
        module.top_signatures(sample)

    def kept() -> None:
        made = module.error_signature
        for text in sample:
            made(text)

    return {"cold": cold, "triage sample": triage, "kept": kept}


def timed(run: Callable[[], None]) -> float:
    """The CPU time of one pass (the process's own, so that other work on a shared
    host inflates it less than it would the time on the clock), the garbage of the pass
    before collected first (so that neither side pays for the other's)."""
    gc.collect()
    start = time.process_time()
    run()
    return time.process_time() - start


def main(argv: list[str] | None = None) -> int:
    parser = BenchParser(__doc__, url=None)
    parser.size("--texts", full=20_000, smoke=500, help="distinct error texts")
    parser.size("--repeat", full=7, smoke=1, help="timed passes over them")
    parser.add_argument("--against", metavar="REV", help="time this revision's rules too")
    args = parser.read(argv)
    texts = corpus(args.texts)
    modules = {"now": load(None)}
    if args.against:
        modules[args.against] = load(args.against)
    runs = {name: passes(m, texts) for name, m in modules.items()}
    times: dict[tuple[str, str], list[float]] = {}
    for lanes in runs.values():  # warm-up
        for run in lanes.values():
            run()
    for _ in range(args.repeat):
        for name, lanes in runs.items():  # alternating, pass by pass
            for what, run in lanes.items():
                times.setdefault((name, what), []).append(timed(run))
    per = {"cold": len(texts), "triage sample": 1, "kept": min(len(texts), 2000)}
    for name, module in modules.items():
        distinct = len({module._signature(t) for t in texts})
        print(f"{name}: {distinct:,} distinct signatures of {len(texts):,} texts")
    for what, n in per.items():
        line = [f"{what:>14}:"]
        medians = {}
        for name in modules:
            median = statistics.median(times[(name, what)])
            medians[name] = median
            unit = "us/text" if n > 1 else "ms"
            figure = median / n * 1e6 if n > 1 else median * 1e3
            line.append(f"{name} {figure:,.2f} {unit}")
        if args.against:
            line.append(f"ratio {medians['now'] / medians[args.against]:.2f}x")
        print("  ".join(line))
    return 0


if __name__ == "__main__":
    exit_with(main)
