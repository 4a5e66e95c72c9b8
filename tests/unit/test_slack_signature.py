"""Slack's request signature, checked at queuebot's edge (bot/slack/signature.py): what it
refuses and why, and that it agrees with the Slack SDK's own verifier wherever the SDK
does not raise."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slack_sdk.signature import SignatureVerifier

from bot.slack.signature import refusal
from testkit.slack_requests import SECRET, signed

NOW = 1_764_480_000


class Clock:
    def now(self) -> float:
        return NOW


def headers(body: str | bytes, **changes: str) -> dict[str, str]:
    found = {k.lower(): v for k, v in signed(body, ts=NOW).items()}
    found.update({k.replace("_", "-"): v for k, v in changes.items()})
    return found


def check(body: str | bytes, sent: dict[str, str], now: float = NOW) -> str | None:
    raw = body.encode() if isinstance(body, str) else body
    return refusal(SECRET.encode(), sent, raw, now=now)


def test_a_request_signed_with_the_secret_passes() -> None:
    assert check("command=%2Fqueue&text=help", headers("command=%2Fqueue&text=help")) is None


def test_the_signature_covers_the_exact_bytes_even_when_they_are_not_utf8() -> None:
    body = b"\xff\xfe not text"
    assert check(body, headers(body)) is None
    assert check(body + b"!", headers(body)) == "a bad signature"


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"x_slack_signature": "v0=" + "0" * 64}, "a bad signature"),
        ({"x_slack_signature": "v0=zz"}, "a bad signature"),
        ({"x_slack_signature": ""}, "a bad signature"),
        ({"x_slack_signature": "v0=é"}, "a bad signature"),
        ({"x_slack_request_timestamp": "not-a-number"}, "a timestamp that is not a number"),
        ({"x_slack_request_timestamp": ""}, "a timestamp that is not a number"),
        ({"x_slack_request_timestamp": "-1"}, "a timestamp that is not a number"),
        ({"x_slack_request_timestamp": "1e9"}, "a timestamp that is not a number"),
        ({"x_slack_request_timestamp": "١٧٦٤٤٨٠٠٠٠"}, "a timestamp that is not a number"),
        ({"x_slack_request_timestamp": "9" * 40}, "a timestamp that is not a number"),
        ({"x_slack_request_timestamp": str(NOW - 301)}, "a timestamp more than 5 minutes off"),
        ({"x_slack_request_timestamp": str(NOW + 301)}, "a timestamp more than 5 minutes off"),
    ],
)
def test_what_is_refused_and_why(changes: dict[str, str], why: str) -> None:
    assert check("text=help", headers("text=help", **changes)) == why


def test_a_missing_header_is_no_signature() -> None:
    for name in ("x-slack-signature", "x-slack-request-timestamp"):
        sent = headers("text=help")
        del sent[name]
        assert check("text=help", sent) == "no signature"


def test_another_secret_or_a_stale_timestamp_is_refused() -> None:
    assert check("a", {k.lower(): v for k, v in signed("a", secret="other").items()}) is not None
    stale = {k.lower(): v for k, v in signed("a", ts=NOW - 360).items()}
    assert check("a", stale) == "a timestamp more than 5 minutes off"


@settings(max_examples=300, deadline=None)
@given(
    body=st.text(max_size=200),
    stamp=st.integers(NOW - 400, NOW + 400).map(str) | st.from_regex(r"\A[0-9]{1,12}\Z"),
    forged=st.booleans(),
)
def test_it_agrees_with_the_slack_sdk(body: str, stamp: str, forged: bool) -> None:
    sent = headers(body, x_slack_request_timestamp=stamp)
    sent["x-slack-signature"] = (
        "v0=" + "1" * 64
        if forged
        else SignatureVerifier(SECRET).generate_signature(timestamp=stamp, body=body) or ""
    )
    sdk = SignatureVerifier(SECRET, clock=Clock()).is_valid(body, stamp, sent["x-slack-signature"])
    assert (check(body, sent) is None) == sdk
