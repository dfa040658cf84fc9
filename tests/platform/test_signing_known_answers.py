"""Signing (spec: Authentication, Signature): expected values are computed here, from the spec.

The spec's definition: lowercase hex HMAC-SHA256, key = UTF-8 bytes of the secret string, message
= five LF-terminated lines (X-Timestamp, METHOD, raw target, Idempotency-Key or empty, If-Match
or empty) followed directly by the raw body bytes.
"""

import hashlib
import hmac

import pytest

from recordsync.core.secret import Secret
from recordsync.platform.signing import (
    build_target,
    encode_component,
    format_timestamp,
    sign,
    signatures_match,
    signing_string,
)

SECRET = "k3y-with-43-characters-0123456789abcdefghi"


def spec_signature(secret, lines, body=b""):
    message = "".join(f"{line}\n" for line in lines).encode() + body
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


CASES = [
    pytest.param(
        {
            "method": "GET",
            "target": "/v1/records?created_from=2026-01-01T00%3A00%3A00.000Z&limit=100",
        },
        [
            "1767225600",
            "GET",
            "/v1/records?created_from=2026-01-01T00%3A00%3A00.000Z&limit=100",
            "",
            "",
        ],
        b"",
        id="get-with-query",
    ),
    pytest.param(
        {"method": "get", "target": "/v1/capabilities"},
        ["1767225600", "GET", "/v1/capabilities", "", ""],
        b"",
        id="get-without-query-method-upper-cased",
    ),
    pytest.param(
        {
            "method": "POST",
            "target": "/v1/transfers",
            "idempotency_key": "order-1:a_b.c",
            "body": b'{"amount":"10.50","external_id":"order-1:a_b.c"}',
        },
        ["1767225600", "POST", "/v1/transfers", "order-1:a_b.c", ""],
        b'{"amount":"10.50","external_id":"order-1:a_b.c"}',
        id="post-with-body-and-idempotency-key",
    ),
    pytest.param(
        {
            "method": "PATCH",
            "target": "/v1/operation-configurations/0b7c",
            "idempotency_key": "k-1",
            "if_match": '"7"',
            "body": b'{"parameters":{}}',
        },
        ["1767225600", "PATCH", "/v1/operation-configurations/0b7c", "k-1", '"7"'],
        b'{"parameters":{}}',
        id="patch-with-if-match",
    ),
    pytest.param(
        {"method": "POST", "target": "/v1/x", "body": "é€".encode()},
        ["1767225600", "POST", "/v1/x", "", ""],
        "é€".encode(),
        id="utf8-body-bytes-signed-raw",
    ),
]


@pytest.mark.parametrize(("kwargs", "lines", "body"), CASES)
def test_signature_matches_the_spec_definition(kwargs, lines, body):
    expected = spec_signature(SECRET, lines, body)
    got = sign(SECRET, timestamp="1767225600", **kwargs)
    assert got == expected
    assert len(got) == 64
    assert got == got.lower()
    assert signing_string(timestamp="1767225600", **kwargs).endswith(
        b"\n" + body if body else b"\n"
    )


def test_key_is_the_utf8_secret_string_not_base64_decoded():
    secret = "aGVsbG8="  # valid base64: must still be used as the literal string
    expected = spec_signature(secret, ["1767225600", "GET", "/v1/capabilities", "", ""])
    assert sign(secret, timestamp="1767225600", method="GET", target="/v1/capabilities") == expected


def test_changing_any_line_changes_the_signature():
    base = {"timestamp": "1767225600", "method": "GET", "target": "/v1/records?limit=1"}
    reference = sign(SECRET, **base)
    for change in (
        {"timestamp": "1767225601"},
        {"method": "POST"},
        {"target": "/v1/records?limit=2"},
        {"idempotency_key": "x"},
        {"if_match": '"1"'},
        {"body": b" "},
    ):
        assert sign(SECRET, **{**base, **change}) != reference, change


@pytest.mark.parametrize(
    ("path", "params", "expected"),
    [
        ("/v1/capabilities", [], "/v1/capabilities"),
        ("/v1/records", [("limit", "10")], "/v1/records?limit=10"),
        (
            "/v1/records",
            [("created_to", "2026-01-01T00:00:00+05:30"), ("created_from", "a b/c")],
            "/v1/records?created_to=2026-01-01T00%3A00%3A00%2B05%3A30&created_from=a%20b%2Fc",
        ),
        ("/v1/record-changes", [("cursor", "-._~AZaz09")], "/v1/record-changes?cursor=-._~AZaz09"),
        ("/v1/x", [("k", "é&=?#%")], "/v1/x?k=%C3%A9%26%3D%3F%23%25"),
    ],
    ids=[
        "no-query",
        "simple",
        "reserved-characters-in-order",
        "unreserved-kept",
        "utf8-and-delims",
    ],
)
def test_build_target_encodes_everything_but_unreserved_and_keeps_order(path, params, expected):
    assert build_target(path, params) == expected


def test_encode_component_never_leaves_plus_or_space():
    assert encode_component("a+b c") == "a%2Bb%20c"


def test_timestamp_is_ten_digit_unix_seconds():
    assert format_timestamp(1767225600.999) == "1767225600"
    assert format_timestamp(1) == "0000000001"


def test_signatures_match_compares_exactly():
    good = sign(SECRET, timestamp="1", method="GET", target="/")
    assert signatures_match(good, good)
    assert not signatures_match(good, good.upper())
    assert not signatures_match(good, "é" * 64)


def test_secret_repr_and_str_hide_the_value():
    secret = Secret(SECRET)
    assert SECRET not in repr(secret)
    assert SECRET not in str(secret)
    assert SECRET not in f"{secret}"
    assert SECRET not in repr([secret])
    assert secret.reveal() == SECRET
    assert secret == Secret(SECRET)
    assert secret != Secret("other")
    assert hash(secret) == hash(Secret("other"))
