"""Figures and the lines that print them: percentiles, the load average, the machine's
busy time, a process's time on a CPU and its resident memory, and PASS or FAIL.

At ``--smoke`` size the figures are printed as at full size, but a target set for the
full size says nothing of them: ``mark`` writes ``smoke`` where PASS or FAIL would be,
and ``exit_status`` is 0 whatever they were.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from testkit.storm import percentile

__all__ = [
    "P50_P95_P99_MAX",
    "P50_P99_MAX",
    "Sched",
    "exit_status",
    "gauges",
    "judge",
    "loadavg",
    "machine_busy",
    "mark",
    "ms",
    "p50_p99_max",
    "peak_rss_mb",
    "percentile",
    "settle",
    "spread",
    "status_mb",
    "verdict",
]

P50_P95_P99_MAX = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0))
P50_P99_MAX = (("p50", 0.5), ("p99", 0.99), ("max", 1.0))


def ms(seconds: float) -> str:
    """Seconds as milliseconds, right-aligned in 11 characters: ``   12.3 ms``."""
    return f"{seconds * 1000:8.1f} ms"


def spread(values: Sequence[float], qs: Sequence[tuple[str, float]] = P50_P95_P99_MAX) -> str:
    """``p50 12.3 ms  p95 ...`` (linear interpolation between closest ranks)."""
    if not values:
        return "no samples"
    return "  ".join(f"{label} {percentile(values, q) * 1000:.1f} ms" for label, q in qs)


def p50_p99_max(values: Sequence[float]) -> str:
    """``p50  12.3 ms  p99  45.6 ms  max  47.0 ms  (n=200)``, aligned for a column."""
    if not values:
        return "none"
    p50, p99 = percentile(values, 0.5) * 1000, percentile(values, 0.99) * 1000
    return (
        f"p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  max {max(values) * 1000:7.1f} ms  "
        f"(n={len(values):,})"
    )


def mark(ok: bool, smoke: bool) -> str:
    """PASS or FAIL, or ``smoke`` where the size is too small for the target to say."""
    return "smoke" if smoke else "PASS" if ok else "FAIL"


def exit_status(ok: bool, smoke: bool) -> int:
    """0 when every target was met, or nothing was judged (``--smoke``); else 1."""
    if smoke:
        print("--smoke: a size too small for the targets; nothing judged")
    return 0 if ok or smoke else 1


def judge(checks: Sequence[tuple[str, bool]], smoke: bool, what: str = "") -> int:
    """A line for each target (PASS, FAIL or smoke, and what was measured against it),
    then the run's verdict; its exit status."""
    print()
    for label, ok in checks:
        print(f"  {mark(ok, smoke)}  {label}")
    return verdict(all(ok for _, ok in checks), smoke, what)


def verdict(ok: bool, smoke: bool, what: str = "") -> int:
    """The run's last line, PASS or FAIL (``smoke``) and ``what`` it judged; its exit
    status."""
    print(f"{mark(ok, smoke)}: {what}" if what else mark(ok, smoke))
    return exit_status(ok, smoke)


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages: ``1.02 0.87 0.55``."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat; NaN
    where it cannot be read."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return float("nan"), float("nan")
    ticks = [int(v) for v in first[:8]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - idle) / hz, sum(ticks) / hz


def settle(quiet: float = 0.25, within: float = 20.0) -> None:
    """Wait until under ``quiet`` of the machine's CPU time is busy over 0.5 s, or
    ``within`` seconds have passed (a start-up and a warm-up are not measured). ``within``
    0: not at all."""
    if within <= 0:
        return
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        busy0, total0 = machine_busy()
        time.sleep(0.5)
        busy1, total1 = machine_busy()
        if not busy1 - busy0 >= quiet * (total1 - total0):  # NaN (no /proc) counts as quiet
            return
    print(f"note: the machine was still busy after {within:.0f}s; measuring anyway")


@dataclass(frozen=True)
class Sched:
    """Seconds on a CPU and seconds runnable but waiting for one (/proc/PID/task/*/schedstat)
    of a process's main thread, where its event loop runs, and of all its threads; NaN
    where /proc does not say."""

    cpu: float
    waiting: float
    all_cpu: float
    all_waiting: float

    @staticmethod
    def of(pid: int) -> Sched:
        main = (0.0, 0.0)
        every = (0.0, 0.0)
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                run_ns, wait_ns, _slices = (task / "schedstat").read_text().split()
                pair = (int(run_ns) / 1e9, int(wait_ns) / 1e9)
                every = (every[0] + pair[0], every[1] + pair[1])
                if task.name == str(pid):
                    main = pair
        except (OSError, ValueError):
            nan = float("nan")
            return Sched(nan, nan, nan, nan)
        return Sched(main[0], main[1], every[0], every[1])

    def __sub__(self, other: Sched) -> Sched:
        return Sched(
            self.cpu - other.cpu,
            self.waiting - other.waiting,
            self.all_cpu - other.all_cpu,
            self.all_waiting - other.all_waiting,
        )


def status_mb(field: str = "VmRSS") -> float:
    """A memory figure of this process from /proc/self/status (``VmRSS``, ``VmHWM``), in
    MB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_rss_mb() -> float:
    """The process's peak resident memory so far, in MB (Linux reports KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def gauges(body: bytes, name: str) -> dict[str, float]:
    """The values of the series ``name`` in a ``GET /metrics`` body, by their labels but
    ``queue`` (by the queue where it has no other)."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            if s.name == name:
                key = ",".join(v for k, v in sorted(s.labels.items()) if k != "queue")
                found[key or s.labels.get("queue", "")] = s.value
    return found
