"""One outage reads as one failure signature, and two causes stay two.

The texts are the error texts of the eight systems as their presets read them (pg-boss's
``output`` message, River's and Oban's last ``errors`` entry, graphile-worker's
``last_error`` with its stack, GoodJob's ``error``, Solid Queue's failed execution as
"class: message", Que's ``last_error_message``; Procrastinate keeps none), each job's
carrying its own request id, trace id, ULID, invoice number or URL with ids, as a real
outage's do.
"""

from __future__ import annotations

import random

import pytest

from services.estate.signature import (
    NO_ERROR,
    display_signature,
    error_signature,
    top_signatures_of,
)

# system -> (one outage's texts, the signature a reader sees, texts of other causes)
OUTAGES: dict[str, tuple[list[str], str, list[str]]] = {
    "pg-boss": (
        [
            "Request failed with status code 503: POST https://api.pay.example/v1/charges/"
            f"{charge}/refund (request id {request})"
            for charge, request in (
                ("ch_3NfK2a9xQ", "a970eb87"),
                ("ch_8LpQ4v1ZtY", "73e1c0aa"),
                ("ch_1AbC2dE3f", "0b5d1f29"),
            )
        ],
        "Request failed with status code 503: POST https://api.pay.example/v1/charges/<id>/"
        "refund (request id <n>)",
        [
            # another status from the same API is another cause
            "Request failed with status code 422: POST https://api.pay.example/v1/charges/"
            "ch_3NfK2a9xQ/refund (request id a970eb87)",
            # the same status from another API too
            "Request failed with status code 503: POST https://api.mail.example/v3/send "
            "(request id a970eb87)",
        ],
    ),
    "River": (
        [
            f"charge {n}: payments: 503 Service Unavailable (request {request}, trace_id={trace})"
            for n, request, trace in (
                (48213, "req_8f14e45fceea167a", "4bf92f3577b34da6a3ce929d0e0e4736"),
                (7, "req_c9f0f895fb98ab91", "0af7651916cd43dd8448eb211c80319c"),
                (990121, "req_45c48cce2e2d7fbd", "e4da3b7fbbce2345d7772b0674a318d5"),
            )
        ],
        "charge <n>: payments: <n> Service Unavailable (request req_<n>, trace_id=<n>)",
        [
            "charge 48213: payments: 402 Payment Required (request req_8f14e45fceea167a, "
            "trace_id=4bf92f3577b34da6a3ce929d0e0e4736)",
            "charge 48213: ledger: deadlock detected (SQLSTATE 40P01)",
        ],
    ),
    "Oban": (
        [
            f'** (RuntimeError) payments API unavailable for invoice "{invoice}" '
            f"(request_id: {ulid})"
            for invoice, ulid in (
                ("INV-104857", "01HZX3K8Q9V7M2N4P5R6S8T0W1"),
                ("INV-2", "01J0B7T4XQ2M8D5R3W9K6P1N0C"),
                ("INV-999999", "01HZY0A1B2C3D4E5F6G7H8J9KM"),
            )
        ],
        '** (RuntimeError) payments API unavailable for invoice "<v>" (request_id: <id>)',
        [
            "** (Ecto.NoResultsError) expected at least one result but got none in query:\n\n"
            'from i0 in Billing.Invoice,\n  where: i0.number == ^"INV-104857"',
            '** (RuntimeError) ledger API unavailable for invoice "INV-104857" '
            "(request_id: 01HZX3K8Q9V7M2N4P5R6S8T0W1)",
        ],
    ),
    "graphile-worker": (
        [
            f"Error: Payments API 503 Service Unavailable (x-request-id: {uuid})\n"
            f"    at chargeInvoice (/app/src/tasks/charge_invoice.js:{line}:11)\n"
            "    at async Worker.run (/app/node_modules/graphile-worker/dist/worker.js:190:13)"
            for uuid, line in (
                ("7c9e6679-7425-40de-944b-e07fc1f90ae7", 42),
                ("16fd2706-8baf-433b-82eb-8c7fada847da", 42),
                ("886313e1-3b8a-5372-9b90-0c9aee199e5d", 43),
            )
        ],
        # cut at 120 characters
        "Error: Payments API <n> Service Unavailable (x-request-id: <uuid>) at chargeInvoice "
        "(/app/src/tasks/charge_invoice.js:<n",
        [
            "TypeError: Cannot read properties of undefined (reading 'amount')\n"
            "    at chargeInvoice (/app/src/tasks/charge_invoice.js:57:30)",
            "Error: Payments API 504 Gateway Timeout (x-request-id: "
            "7c9e6679-7425-40de-944b-e07fc1f90ae7)",
        ],
    ),
    "GoodJob": (
        [
            f"Faraday::ServerError: the server responded with status 503 (request_id={token})"
            for token in ("dGhpcyBpcyBhIHRva2Vu", "Zm9vYmFyYmF6cXV4MTIz", "cXdlcnR5dWlvcGFzZGZn")
        ],
        "Faraday::ServerError: the server responded with status 503 (request_id=<id>)",
        [
            "ActiveRecord::RecordNotUnique: PG::UniqueViolation: ERROR:  duplicate key value "
            'violates unique constraint "index_payments_on_idempotency_key"',
            "ActiveRecord::RecordNotUnique: PG::UniqueViolation: ERROR:  duplicate key value "
            'violates unique constraint "index_invoices_on_number"',
            "Faraday::ConnectionFailed: Failed to open TCP connection to api.pay.example:443",
        ],
    ),
    "Solid Queue": (
        [
            "Net::ReadTimeout: Net::ReadTimeout with #<TCPSocket:(closed)> for invoice "
            f"'{invoice}' at 2026-12-07T{hour}:{minute}:09.417Z"
            for invoice, hour, minute in (("INV-104857", "08", "01"), ("INV-7", "09", "59"))
        ],
        "Net::ReadTimeout: Net::ReadTimeout with #<TCPSocket:(closed)> for invoice '<v>' at "
        "<n>-<n>-<n>T<n>:<n>:<n>.<n>Z",
        [
            "Stripe::CardError: Your card was declined. for invoice 'INV-104857'",
            "NoMethodError: undefined method `amount' for nil:NilClass",
        ],
    ),
    "Que": (
        [
            "Stripe::APIConnectionError: Could not connect to Stripe "
            f"(https://api.stripe.com/v1/payment_intents/{intent}/confirm). Request id: "
            f"{request}"
            for intent, request in (
                ("pi_3NfK2a9xQabcDEF12345", "req_Fq1b2C3d4E5f6G"),
                ("pi_3OaZ7kLmN0pQrS8tUv9W", "req_9Hj2Kl4Mn6Pq8Rs0"),
            )
        ],
        "Stripe::APIConnectionError: Could not connect to Stripe (https://api.stripe.com/v1/"
        "payment_intents/<id>/confirm). Reques",  # cut at 120 characters
        [
            "Stripe::InvalidRequestError: No such payment_intent: 'pi_3NfK2a9xQabcDEF12345'",
            "Stripe::APIConnectionError: Could not connect to Stripe "
            "(https://api.stripe.com/v1/refunds/re_3NfK2a9xQabcDEF12345). Request id: "
            "req_Fq1b2C3d4E5f6G",
        ],
    ),
}


@pytest.mark.parametrize("system", list(OUTAGES))
def test_one_outage_is_one_signature(system: str) -> None:
    texts, shown, _ = OUTAGES[system]
    assert {error_signature(t) for t in texts} == {shown}


@pytest.mark.parametrize("system", list(OUTAGES))
def test_other_causes_keep_signatures_of_their_own(system: str) -> None:
    texts, _, others = OUTAGES[system]
    signatures = [error_signature(t) for t in [texts[0], *others]]
    assert len(set(signatures)) == len(signatures), signatures


def test_every_system_s_outage_reads_apart_from_the_others() -> None:
    assert len({shown for _, shown, _ in OUTAGES.values()}) == len(OUTAGES)


def test_procrastinate_keeps_no_error_text_and_its_dead_jobs_are_one_group() -> None:
    found = top_signatures_of([None] * 40)
    assert found.rows == [(None, 40)] and found.groups == 1
    assert display_signature(found.rows[0][0]) == NO_ERROR


def test_an_outage_of_4500_jobs_each_with_its_own_ids_tops_the_breakdown() -> None:
    """The case a user met: a payments API answered 503 for 4,500 of 5,000 jobs, every
    error carrying its request id. The breakdown's first signature is the outage's."""
    rnd = random.Random(5)

    def hex_id(n: int) -> str:
        # with a letter and a digit in it, as nearly every hex id has (one of all digits
        # reads as a number, one of all letters as a word: the module's notes)
        rest = "".join(rnd.choice("0123456789abcdef") for _ in range(n - 2))
        return rnd.choice("abcdef") + rnd.choice("0123456789") + rest

    outage = [
        "Request failed with status code 503: POST https://api.pay.example/v1/charges/"
        f"ch_{rnd.randrange(10**8, 10**9)}{rnd.choice('ABCxyz')}/refund (request id "
        f"{hex_id(8)}, trace {hex_id(32)})"
        for _ in range(4500)
    ]
    others = [f"invoice {rnd.randrange(10**6)} has no customer" for _ in range(500)]
    found = top_signatures_of([*outage, *others])
    assert found.rows[0] == (
        "Request failed with status code 503: POST https://api.pay.example/v1/charges/<id>/"
        "refund (request id <n>, trace <n>)",
        4500,
    )
    assert found.rows[1] == ("invoice <n> has no customer", 500)
    assert found.groups == 2


@pytest.mark.parametrize(
    "text",
    [
        "facade decade accede deadbeef effaced defaced",  # all hex letters: words
        "ExternalServiceUnavailableError",
        "ERR_HTTP2_STREAM_ERROR",
        "Illegal mix of collations (utf8mb4_unicode_ci,IMPLICIT)",
        "ISO8601DateTimeFormat sha256WithRSAEncryption h264_decoder_error",
        "S3 upload of mp4 from worker42 with preset p24 via v1",
        'column "user_id" of relation "accounts" does not exist',
        "KeyError: 'customer'",
    ],
)
def test_words_and_names_are_kept(text: str) -> None:
    assert error_signature(text) == text


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("request id a970eb87", "request id <n>"),
        ("request id 73e1c0aa", "request id <n>"),  # was "<n>e1c0aa"
        ("request id 5190428366213370", "request id <n>"),  # a hex id of digits alone
        ("trace 4bf92f3577b34da6a3ce929d0e0e4736", "trace <n>"),
        ("id 01HZX3K8Q9V7M2N4P5R6S8T0W1", "id <id>"),
        ("token dGhpcyBpcyBhIHRva2Vu", "token <id>"),
        ("key AbC123xYz_-Qw9eRt5Yu", "key <id>"),
        ("invoice 'INV-104857' for \"user@example.com\"", "invoice '<v>' for \"<v>\""),
        (
            "https://api.pay.example/v1/charges/ch_3NfK2a9xQ/refund",
            "https://api.pay.example/v1/charges/<id>/refund",
        ),
        (
            "GET https://cdn.example/a/b.mp4?sig=abc123&x=1#t=9",
            "GET https://cdn.example/a/b.mp4?sig=<v>&x=<v>#<v>",
        ),
        ("dial tcp 10.0.3.17:5432", "dial tcp <n>.<n>.<n>.<n>:<n>"),
        ("HTTP/1.1 429 Too Many Requests", "HTTP/<n>.<n> 429 Too Many Requests"),
        ("retry after 120 s", "retry after <n> s"),
    ],
)
def test_what_is_taken_out(raw: str, expected: str) -> None:
    assert error_signature(raw) == expected


def test_an_id_of_digits_alone_reads_as_its_hex_siblings() -> None:
    """One job in a few hundred draws a request id without a letter: the outage must
    stay one signature."""
    texts = [
        "503 Service Unavailable (request id 9f86d081884c7d65)",
        "503 Service Unavailable (request id 5190428366213370)",
        "503 Service Unavailable (request id req_8f14e45f)",
        "503 Service Unavailable (request id req_81445033)",
    ]
    assert len({error_signature(t) for t in texts[:2]}) == 1
    assert len({error_signature(t) for t in texts[2:]}) == 1
