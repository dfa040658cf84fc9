"""The fleet's lock keys (``locks``): the same for a merchant on every replica and version,
and within what each database accepts.  Pure: no database."""

from __future__ import annotations

import pytest

from recordsync.warehouse.lease.keys import MYSQL_LOCK_NAME_MAX, lease_key, mysql_lock_name


def test_advisory_lock_key_is_a_stable_signed_64_bit_hash():
    key = lease_key("merchant-1")
    assert key == lease_key("merchant-1")
    assert key != lease_key("merchant-2")
    assert -(2**63) <= key < 2**63
    assert lease_key("m") == -1922362245805105698  # known answer: must never change


@pytest.mark.parametrize(
    ("database", "merchant_id", "expected"),
    [
        ("rs_1", "merchant-1", "recordsync:rs_1:merchant-1"),
        ("warehouse", "m" * 80, None),
    ],
    ids=["readable", "long-is-hashed"],
)
def test_mysql_lock_names_fit_in_64_characters(database, merchant_id, expected):
    name = mysql_lock_name(database, merchant_id)
    assert len(name) <= MYSQL_LOCK_NAME_MAX
    assert name.startswith("recordsync:")
    if expected is not None:
        assert name == expected
    assert name != mysql_lock_name(database, merchant_id + "x")
    assert name != mysql_lock_name(database + "x", merchant_id)
