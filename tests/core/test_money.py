"""Exact money (spec: Conventions, Money): decimal strings in, Decimal out, never a float."""

import re
from decimal import Decimal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from recordsync.core import money
from recordsync.core.errors import InvalidRecordError
from recordsync.core.money import MAX_TRANSACTION_AMOUNT, amount_or_none, is_money, parse_money

ACCEPTED = [
    ("0", "zero"),
    ("-0", "negative-zero"),
    ("-0.00", "negative-zero-with-fraction"),
    ("10", "integer"),
    ("10.5", "one-fraction-digit"),
    ("10.50", "trailing-zero-kept"),
    ("0.0001", "four-fraction-digits"),
    ("-12.3456", "negative"),
    ("999999999999.9999", "per-transaction-maximum"),
    ("1000000000000", "above-per-transaction-maximum"),
    ("123456789012345678901234567890.1234", "far-beyond-float-precision"),
]

REJECTED = [
    ("", "empty"),
    (" 1", "leading-space"),
    ("1 ", "trailing-space"),
    ("+1", "plus-sign"),
    ("1e3", "exponent"),
    ("1E-2", "exponent-upper"),
    ("01", "leading-zero"),
    ("-01.5", "negative-leading-zero"),
    (".5", "no-integer-part"),
    ("5.", "empty-fraction"),
    ("1.23456", "five-fraction-digits"),
    ("1,5", "comma"),
    ("NaN", "nan"),
    ("Infinity", "infinity"),
    ("-", "sign-only"),
    ("--1", "double-sign"),
    ("0x10", "hex"),
    ("\u0661\u0662", "non-ascii-digits"),
    ("1_000", "underscore"),
]


@pytest.mark.parametrize(("text", "case"), ACCEPTED, ids=[case for _, case in ACCEPTED])
def test_accepted_forms_parse_exactly_and_round_trip(text, case):
    amount = parse_money(text, field="bet_amount")
    assert isinstance(amount, Decimal)
    assert amount == Decimal(text)
    assert str(amount) == text
    assert is_money(text)


@pytest.mark.parametrize(("text", "case"), REJECTED, ids=[case for _, case in REJECTED])
def test_rejected_forms_raise_naming_the_field(text, case):
    with pytest.raises(InvalidRecordError) as caught:
        parse_money(text, field="payout_amount")
    assert caught.value.reason.startswith("payout_amount:")
    assert not is_money(text)


@pytest.mark.parametrize(
    "value",
    [1.5, 10, None, True, Decimal("1.5"), b"1.5"],
    ids=["float", "int", "null", "bool", "decimal-object", "bytes"],
)
def test_non_strings_are_rejected_even_when_numeric(value):
    with pytest.raises(InvalidRecordError, match="expected a decimal string"):
        parse_money(value, field="net_amount")


def test_record_amounts_above_the_per_transaction_maximum_are_accepted():
    # Record amounts are cumulative (several payouts), so they are not capped.
    assert parse_money("2000000000000.0001", field="payout_amount") > MAX_TRANSACTION_AMOUNT


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("999999999999.9999", True),
        ("-999999999999.9999", True),
        ("1000000000000", False),
        ("-1000000000000.0000", False),
    ],
    ids=["max", "negative-max", "above-max", "below-negative-max"],
)
def test_per_transaction_validation_caps_the_amount(text, ok):
    if ok:
        assert str(parse_money(text, field="amount", per_transaction=True)) == text
    else:
        with pytest.raises(InvalidRecordError, match="per-transaction maximum"):
            parse_money(text, field="amount", per_transaction=True)


def test_arithmetic_stays_exact():
    payout = parse_money("0.1", field="payout_amount")
    refund = parse_money("0.2", field="refund_amount")
    assert payout + refund == Decimal("0.3")


def test_amounts_seen_before_are_the_same_exact_value_and_form():
    first = parse_money("12.50", field="bet_amount")
    again = parse_money("12.50", field="payout_amount")
    assert again == first == Decimal("12.50")
    assert str(again) == "12.50"


def test_a_remembered_amount_is_still_checked_against_the_per_transaction_maximum():
    parse_money("1000000000000", field="net_amount")
    with pytest.raises(InvalidRecordError, match="per-transaction maximum"):
        parse_money("1000000000000", field="bet_amount", per_transaction=True)


def test_invalid_amounts_are_never_remembered_as_valid():
    for _ in range(2):
        with pytest.raises(InvalidRecordError, match="not a decimal string"):
            parse_money("1e3", field="bet_amount")
    assert amount_or_none("1e3") is None
    assert amount_or_none(["1"]) is None


def test_the_memory_of_amounts_stays_bounded():
    for number in range(3 * money._KNOWN_LIMIT):
        assert amount_or_none(f"{number}.25") == Decimal(f"{number}.25")
    assert len(money._KNOWN) <= money._KNOWN_LIMIT


def test_a_str_subclass_is_parsed_by_the_full_path():
    class Text(str):
        __slots__ = ()

    assert parse_money(Text("10.00"), field="bet_amount") == Decimal("10.00")


# The money form as the spec states it, written plainly (no possessive quantifiers): the
# reference the fast patterns of ``money`` must agree with on every string.
PLAIN_MONEY = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]{1,4})?")
NEAR_MONEY = st.one_of(
    st.builds(
        "".join,
        st.tuples(
            st.sampled_from(["", "-", "+", " ", "--"]),
            st.text("0123456789", max_size=4),
            st.sampled_from(["", ".", ".."]),
            st.text("0123456789", max_size=6),
            st.sampled_from(["", " ", "e1", ".", "-"]),
        ),
    ),
    st.text(alphabet="-+0123456789. e", max_size=12),
)


@given(NEAR_MONEY)
@settings(max_examples=500)
@example("1.12345")
@example("01")
@example("1.")
@example("-")
def test_the_fast_pattern_takes_exactly_the_plain_money_form(text):
    assert is_money(text) == (PLAIN_MONEY.fullmatch(text) is not None)


@given(st.sets(NEAR_MONEY.filter(lambda text: "," not in text), max_size=6))
@settings(max_examples=500)
@example({"1.12345", "1"})
@example({"0", "-0.0001", "10.50"})
def test_a_page_of_amounts_is_money_exactly_when_each_one_is(amounts):
    expected = all(PLAIN_MONEY.fullmatch(text) is not None for text in amounts)
    assert money.all_money(amounts) == expected
