"""Failure signatures (services/estate/signature.py): the variable parts of an error text
taken out, so failures with one cause group together in triage and redrive previews."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from services.estate.signature import (
    NO_ERROR,
    RULES,
    SIGNATURE_LENGTH,
    display_signature,
    error_signature,
    taken_out,
    top_counts,
    top_signatures,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            "job 3f2c9a1e-8d4b-4c1a-9e7f-0a1b2c3d4e5f failed",
            "job <uuid> failed",
        ),
        ("lock 3F2C9A1E-8D4B-4C1A-9E7F-0A1B2C3D4E5F held", "lock <uuid> held"),
        ("123e4567-e89b-12d3-a456-426614174000", "<uuid>"),
        ("segfault at 0x7ffd3a2b in worker", "segfault at <hex> in worker"),
        ("timeout after 30 s on attempt 3", "timeout after <n> s on attempt <n>"),
        ("status=503, retry-after=-12.5", "status=503, retry-after=-<n>.<n>"),
        ("took 503 ms, retry-after=-12.5", "took <n> ms, retry-after=-<n>.<n>"),
        (
            "GET https://cdn.example.com/a/b.mp4?sig=abc123 returned 403",
            "GET https://cdn.example.com/a/b.mp4?sig=<v> returned <n>",
        ),
        ("fetch s3://bucket/clips/9.mp4 failed", "fetch s3://bucket/<path> failed"),
        ("NoSuchKey:\n  key\tclips/1234.mp4\r\n", "NoSuchKey: key clips/<n>.mp4"),
        ("   padded   ", "padded"),
        ("S3 upload failed", "S3 upload failed"),
        ("preset p24 rejected", "preset p24 rejected"),
        ("unsupported container mp4", "unsupported container mp4"),
        ("H264 and x265 and utf8", "H264 and x265 and utf8"),
        ("worker42 died", "worker42 died"),
        ("", ""),
    ],
)
def test_signature(raw: str, expected: str) -> None:
    assert error_signature(raw) == expected


def test_no_error_stays_none_and_is_shown_as_such() -> None:
    assert error_signature(None) is None
    assert display_signature(None) == NO_ERROR == "(no error recorded)"
    assert display_signature("") == NO_ERROR
    assert display_signature("job <n> failed") == "job <n> failed"


def test_failures_differing_only_in_ids_share_a_signature() -> None:
    a = "job 17 for user 4f1c2d3e-0000-4000-8000-000000000001 failed at 0x1f after 3 tries"
    b = "job 9012 for user 9a8b7c6d-1111-4111-9111-111111111111 failed at 0xff  after 12 tries"
    assert error_signature(a) == error_signature(b)


def test_different_causes_keep_different_signatures() -> None:
    assert error_signature("NoSuchKey: clips/1.mp4") != error_signature("AccessDenied: clips/1")


def test_long_text_is_cut_at_120_characters() -> None:
    raw = "Traceback: " + "frame " * 100
    result = error_signature(raw)
    assert result is not None
    assert len(result) == SIGNATURE_LENGTH == 120
    assert result.startswith("Traceback: frame frame")


def test_cut_applies_after_replacement() -> None:
    # 200 numbers become 200 "<n>" markers, then the cut
    result = error_signature(" ".join(["7"] * 200))
    assert result is not None
    assert len(result) <= SIGNATURE_LENGTH
    assert result.startswith("<n> <n> <n>")


error_like = st.one_of(
    st.text(),
    st.text(alphabet=st.sampled_from(list("0123456789abcdefxX-:/ \t\n.<>sS3pm")), max_size=300),
    st.lists(
        st.sampled_from(
            [
                "NoSuchKey",
                "https://s3.amazonaws.com/b/k.mp4",
                "3f2c9a1e-8d4b-4c1a-9e7f-0a1b2c3d4e5f",
                "0x7ffd",
                "1234",
                "S3",
                "p24",
                "mp4",
                " ",
                "\n",
                "\t",
                "<n>",
                "://",
                "x" * 50,
                "a970eb87",
                "01HZX3K8Q9V7M2N4P5R6S8T0W1",
                "req_8f14e45fceea167a",
                "'INV-104857'",
                '"accounts_pkey"',
                "https://api.pay.example/v1/charges/ch_3NfK2a9xQ/refund?a=1#b",
                "status 503",
                "'",
                "?",
            ]
        ),
        max_size=30,
    ).map("".join),
)


@settings(max_examples=400, deadline=None)
@given(error_like)
def test_signature_is_never_longer_than_120(text: str) -> None:
    result = error_signature(text)
    assert result is not None
    assert len(result) <= SIGNATURE_LENGTH


@settings(max_examples=400, deadline=None)
@given(error_like)
@example("a" * 119 + " b")
@example("00000A://?A:///=")  # a word once took the letter a URL's scheme starts with
@example("A00000_0://")
@example("00000A://?A:///=")  # a word once took the letter a URL's scheme starts with
@example('0A://@ \'x\' "0":A" status 503 HTTP/1.1 404 dGhpcyBpcyBhIHRva2Vu')
def test_signature_is_idempotent(text: str) -> None:
    """What the rules leave is left as it is (a signature's markers, its kept names, its
    URL's shape); the cut at 120 characters may split a word, so it is held to this only
    where it did not."""
    once = taken_out(text)
    assert taken_out(once) == once
    signature = error_signature(text)
    assert signature == once[:SIGNATURE_LENGTH].rstrip(" ")
    if len(once) <= SIGNATURE_LENGTH:
        assert error_signature(signature) == signature


def _every_rule(text: str) -> str:
    """The text with every rule applied one after another over the whole of it, as the
    rules are written: none skipped by a cheap pre-test, no URL found from its "://" nor
    word from its digit; again until they change nothing."""
    while True:
        before = text
        for pattern, replacement in RULES:
            text = re.sub(pattern, replacement, text)
        text = text.strip(" ")
        if text == before:
            return text


@settings(max_examples=600, deadline=None)
@given(error_like | st.text(alphabet=" \t\r\n-:/0x9aAfF'\"_<>=?&", max_size=40))
@example("a  b\tc\r\nd")
@example("see http://x/y-0x1f 3")
@example("a970eb87a970eb87https://?https://ch_3NfK2a9xQ status=503 req_8f14e45fceea167a")
def test_the_quick_way_makes_what_the_rules_say(text: str) -> None:
    assert taken_out(text) == _every_rule(text)


def test_kept_signatures_agree_with_computed_ones_at_every_length() -> None:
    """Texts up to the kept length are answered from what was kept; longer ones are
    computed each time: both give the rules' answer, asked once or many times."""
    from services.estate import signature

    for length in (10, signature._CACHED_LENGTH, signature._CACHED_LENGTH + 1, 5000):
        text = ("job 1234 failed at 0xdeadbeef " * 300)[:length]
        first = error_signature(text)
        assert first == error_signature(text) == signature._signature(text)


def test_top_signatures_count_a_sample_most_frequent_first() -> None:
    """Triage's breakdown: ids do not split a cause, ties go by signature, and rows with no
    error are counted together (shown last among equals), ten at most."""
    sample = [
        "worker OOM-killed on bms-3",
        "worker OOM-killed on bms-12",
        None,
        "claim_task returned NULL",
        None,
        "another worker holds the issue lock (holder pid 4411)",
    ]
    assert top_signatures(sample) == [
        ("worker OOM-killed on bms-<n>", 2),
        (None, 2),
        ("another worker holds the issue lock (holder pid <n>)", 1),
        ("claim_task returned NULL", 1),
    ]
    many = (f"error {chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(50))
    assert len(top_signatures(many)) == 10


def test_top_counts_breaks_ties_by_value_with_none_last() -> None:
    assert top_counts(["b", "a", "b", None, "c", "a"], limit=2) == [("a", 2), ("b", 2)]
    assert top_counts([]) == []
    assert top_counts([None, "z", None, "z"]) == [("z", 2), (None, 2)]
