"""The pieces queuebot's metrics are made of: label values capped per family, a counter
rendered without the client library's ``_created`` series, and what is known of one
source read in the background."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from prometheus_client.core import CounterMetricFamily, Metric

MAX_VALUES = 50  # distinct values of one label shown per queue (or per counter)
OTHER = "(other)"  # where the values past MAX_VALUES are counted


def bounded(counts: Mapping[str, int], limit: int = MAX_VALUES) -> dict[str, int]:
    """``counts`` with at most ``limit`` keys: the largest counts, the rest summed under
    ``OTHER``."""
    if len(counts) <= limit:
        return dict(counts)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    kept = dict(ranked[: limit - 1])
    kept[OTHER] = kept.get(OTHER, 0) + sum(n for _, n in ranked[limit - 1 :])
    return kept


class Counter:
    """A counter family with its own labels, rendered without the ``_created`` series the
    client library adds (a second series per counter that no rule here needs). The first
    value of the first label is capped: after ``MAX_VALUES`` - 1 distinct ones, any new
    one is counted as ``OTHER``; the other labels take fixed words."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = labels
        self.values: dict[tuple[str, ...], float] = {}
        self._firsts: set[str] = set()

    def inc(self, *values: str, by: float = 1.0) -> None:
        first, *rest = values
        if first not in self._firsts:
            if len(self._firsts) >= MAX_VALUES - 1:
                first = OTHER
            else:
                self._firsts.add(first)
        key = (first, *rest)
        self.values[key] = self.values.get(key, 0.0) + by

    def describe(self) -> Iterable[Metric]:
        return [CounterMetricFamily(self.name, self.documentation, labels=self.labels)]

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labels)
        for key, value in self.values.items():
            family.add_metric(list(key), value)
        return [family]


T = TypeVar("T")


@dataclass
class Reading(Generic[T]):
    """What is known of one source (a queue's snapshot, queuebot's own database's state):
    its last good value, when it was read (monotonic seconds), whether the latest read
    succeeded and how long it took."""

    value: T | None = None
    read_at: float | None = None
    up: bool = False
    seconds: float = 0.0
