"""An alert storm beside incidents, as the storm test and ``python -m bench.storm`` make it, and
what the fake Slack received, read back as a person in each channel would see it.

The storm: ``groups`` Alertmanager alert groups, routed to ``channels`` channels by their
``team`` label (``C0STORM0``, ``C0STORM1`` ...). Each group fires at a moment of the first
``fire_within`` seconds, then every ``change_every`` seconds one more of its alerts fires
(Alertmanager sends the whole group each time, and repeats it unchanged in between),
and at ``seconds`` every alert of every group resolves.

What was seen: each post's lag after the moment it was due (an incident's reminders at
their fractions of a window, its escalations at the deadline; a group's root after its
first notification was answered; its final state, the root showing it resolved and the
resolution in its thread, after the storm ended), and each channel's pace (posts taken
per second, the most in any one second, the 429s it answered).

It imports nothing from queuebot, so the tests and the benchmarks share it.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from testkit.fake_slack import Call, FakeSlack

POST = "/api/chat.postMessage"
UPDATE = "/api/chat.update"
REFUSED = POST + "#429"


def channel_id(k: int) -> str:
    return f"C0STORM{k}"


def storm_toml(channels: int) -> str:
    """The channels and the routes that send each team's groups to its channel."""
    lines: list[str] = []
    for k in range(channels):
        lines += [f"[channels.storm{k}]", f'slack = "{channel_id(k)}"', ""]
    for k in range(channels):
        lines += [
            "[[alerts.routes]]",
            f'name = "storm{k}"',
            f'labels = {{team = "t{k}"}}',
            f'channels = ["storm{k}"]',
            "",
        ]
    return "\n".join(lines)


@dataclass(frozen=True)
class Storm:
    groups: int
    channels: int
    seconds: float  # when every group resolves
    fire_within: float = 5.0
    change_every: float = 5.0
    repeat_every: float = 2.0  # Alertmanager's unchanged repeats in between
    seed: int = 25

    def labels(self, group: int) -> dict[str, str]:
        return {"alertname": f"Storm{group}", "team": f"t{group % self.channels}"}

    def channel(self, group: int) -> str:
        return channel_id(group % self.channels)

    def body(self, group: int, firing: int, *, resolved: bool = False) -> dict[str, Any]:
        """Alertmanager's notification of ``group`` with ``firing`` alerts (all resolved,
        when ``resolved``)."""
        labels = self.labels(group)
        alerts = [
            {
                "status": "resolved" if resolved else "firing",
                "labels": {**labels, "instance": f"i{k}"},
                "annotations": {"summary": f"instance i{k} of group {group} is unhappy"},
                "startsAt": "2026-12-02T12:00:00.123456789Z",
                "endsAt": "2026-12-02T12:30:00Z" if resolved else "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus.example:9090/graph?g0.expr=storm",
                "fingerprint": f"{group:06x}{k:04x}",
            }
            for k in range(firing)
        ]
        inner = ", ".join(f'{key}="{value}"' for key, value in labels.items())
        return {
            "receiver": "queuebot",
            "status": "resolved" if resolved else "firing",
            "alerts": alerts,
            "groupLabels": labels,
            "commonLabels": labels,
            "commonAnnotations": {},
            "externalURL": "http://alertmanager.example:9093",
            "version": "4",
            "groupKey": f"{{}}:{{{inner}}}",
            "truncatedAlerts": 0,
        }

    def sends(self) -> list[Send]:
        """Every notification of the storm, in the order of its moment (seconds after the
        start): per group its firing, its changes and repeats, and its resolution."""
        rng = random.Random(self.seed)  # noqa: S311 - a storm's shape, not a secret
        out: list[Send] = []
        tick = min(self.change_every, self.repeat_every)
        for group in range(self.groups):
            at = rng.uniform(0, self.fire_within)
            firing = 1
            out.append(Send(at, group, "fire", self.body(group, firing)))
            next_change, next_repeat = at + self.change_every, at + self.repeat_every
            t = at + tick
            while t < self.seconds:
                if t >= next_change:
                    firing += 1
                    next_change += self.change_every
                    next_repeat = t + self.repeat_every
                    out.append(Send(t, group, "change", self.body(group, firing)))
                elif t >= next_repeat:
                    next_repeat += self.repeat_every
                    out.append(Send(t, group, "repeat", self.body(group, firing)))
                t += tick
            ended = self.body(group, firing, resolved=True)
            out.append(Send(self.seconds, group, "resolve", ended))
        return sorted(out, key=lambda s: (s.at, s.group))


@dataclass(frozen=True)
class Send:
    at: float  # seconds after the storm's start
    group: int
    what: str  # fire | change | repeat | resolve
    body: dict[str, Any]


@dataclass
class Answered:
    """When (monotonic) each group's firing and its resolution were answered 200."""

    fired: dict[int, float] = field(default_factory=dict)
    resolved: dict[int, float] = field(default_factory=dict)
    refused: int = 0

    def record(self, send: Send, status: int, at: float) -> None:
        if status != 200:
            self.refused += 1
        elif send.what == "fire":
            self.fired.setdefault(send.group, at)
        elif send.what == "resolve":
            self.resolved[send.group] = at


# -- reading it back ----------------------------------------------------------------------


def text(call: Call) -> str:
    return str(call.body.get("text", ""))


def _roots(calls: Sequence[Call], storm: Storm) -> dict[int, Call]:
    roots: dict[int, Call] = {}
    for call in calls:
        if call.path != POST or call.body.get("thread_ts"):
            continue
        said = text(call)
        if said.startswith("Storm") and ":" in said:
            name = said.split(":", 1)[0].split(" ", 1)[0]
            if name[5:].isdigit():
                roots.setdefault(int(name[5:]), call)
    return roots


def final_states(fake: FakeSlack, storm: Storm) -> dict[int, float | None]:
    """For each group, when its final state had been posted (monotonic): its root, as last
    posted or updated, says resolved, and its thread has the resolution; None if not."""
    calls = fake.recorded("/api/chat.")
    roots = _roots(calls, storm)
    shown: dict[str, Call] = {}  # root ts -> the call that last set its content
    resolutions: dict[str, Call] = {}  # root ts -> the resolution in its thread
    for call in calls:
        if call.path == UPDATE:
            shown[str(call.body.get("ts"))] = call
        elif call.path == POST:
            thread = call.body.get("thread_ts")
            if thread and text(call) == "All alerts resolved":
                resolutions.setdefault(str(thread), call)
    done: dict[int, float | None] = {}
    for group in range(storm.groups):
        root = roots.get(group)
        if root is None or root.ts is None:
            done[group] = None
            continue
        latest = shown.get(root.ts, root)
        if latest.at < root.at:
            latest = root
        said = resolutions.get(root.ts)
        ok = text(latest).endswith(": resolved") and said is not None
        done[group] = max(latest.at, said.at) if ok and said is not None else None
    return done


def root_lags(fake: FakeSlack, storm: Storm, answered: Answered) -> list[float]:
    """Seconds from each group's first notification answered to its root posted."""
    roots = _roots(fake.recorded("/api/chat."), storm)
    return [roots[g].at - at for g, at in answered.fired.items() if g in roots]


@dataclass(frozen=True)
class Due:
    """A post an incident owes: its kind, where it is recognised, and when (monotonic)."""

    kind: str  # reminder | escalation (thread) | escalation (channel)
    incident: int
    audience: str
    at: float


def incident_dues(
    obligations: Iterable[tuple[int, str, float, float]], remind_at: Sequence[float]
) -> list[Due]:
    """What each obligation (incident, audience, declared at, due at; monotonic) owes when
    nobody tells its audience: a reminder at each fraction of its window, and at its
    deadline the escalation in the incident's thread and in the operators' channel."""
    owed: list[Due] = []
    for incident, audience, declared, due in obligations:
        for fraction in remind_at:
            owed.append(Due("reminder", incident, audience, declared + fraction * (due - declared)))
        owed.append(Due("escalation (thread)", incident, audience, due))
        owed.append(Due("escalation (channel)", incident, audience, due))
    return owed


def incident_posts(fake: FakeSlack) -> dict[tuple[str, int, str], list[Call]]:
    """The incident posts taken, by (kind, incident, audience), in the order they came."""
    found: dict[tuple[str, int, str], list[Call]] = defaultdict(list)
    for call in fake.recorded(POST):
        if call.path != POST:
            continue
        said = text(call)
        # a reminder or an escalation first calls the lead (and a rota): "<@U0DORA> INC-1: ..."
        said = said[said.find("INC-") :] if "INC-" in said else said
        if not said.startswith("INC-") or ": " not in said:
            continue
        name, rest = said.split(": ", 1)
        if not name[4:].isdigit():
            continue  # "INC-1 declared: ...", "INC-1 resolved"
        number = int(name[4:])
        if rest.startswith("tell the "):
            found[("reminder", number, rest.removeprefix("tell the "))].append(call)
        elif rest.startswith("the ") and rest.endswith(" were not told in time"):
            audience = rest.removeprefix("the ").removesuffix(" were not told in time")
            kind = "escalation (thread)" if call.body.get("thread_ts") else "escalation (channel)"
            found[(kind, number, audience)].append(call)
    return found


def incident_lags(fake: FakeSlack, owed: Sequence[Due]) -> dict[Due, float | None]:
    """Each owed post's lag (seconds after it was due), matched in time order per kind,
    incident and audience; None for one never posted."""
    posts = incident_posts(fake)
    by_key: dict[tuple[str, int, str], list[Due]] = defaultdict(list)
    for due in owed:
        by_key[(due.kind, due.incident, due.audience)].append(due)
    lags: dict[Due, float | None] = {}
    for key, dues in by_key.items():
        made = sorted(posts.get(key, []), key=lambda c: c.at)
        for n, due in enumerate(sorted(dues, key=lambda d: d.at)):
            lags[due] = made[n].at - due.at if n < len(made) else None
    return lags


@dataclass(frozen=True)
class Pace:
    posts: int
    span: float  # seconds from its first post to its last
    most_in_a_second: int
    refused: int  # 429s answered

    @property
    def per_second(self) -> float:
        """Posts per second from its first post to its last (the gaps between them)."""
        return (self.posts - 1) / self.span if self.span > 0 else 0.0


def paces(fake: FakeSlack) -> dict[str, Pace]:
    """Each channel's chat.postMessage calls taken and refused."""
    taken: dict[str, list[float]] = defaultdict(list)
    refused: dict[str, int] = defaultdict(int)
    for call in fake.recorded(POST):
        channel = str(call.body.get("channel", ""))
        if call.path == POST:
            taken[channel].append(call.at)
        elif call.path == REFUSED:
            refused[channel] += 1
    out: dict[str, Pace] = {}
    for channel in sorted(set(taken) | set(refused)):
        times = sorted(taken.get(channel, []))
        most, start = 0, 0
        for end, at in enumerate(times):
            while at - times[start] >= 1.0:
                start += 1
            most = max(most, end - start + 1)
        span = times[-1] - times[0] if len(times) > 1 else 0.0
        out[channel] = Pace(len(times), span, most, refused.get(channel, 0))
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
