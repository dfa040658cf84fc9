"""Wire records, pages and tricky field values shared by the parsing tests (tests/platform)."""

from hypothesis import strategies as st


def record(**overrides):
    raw = {
        "record_id": "rec-1",
        "revision": 3,
        "player_id": "player-1",
        "game_id": "game-1",
        "currency": "USD",
        "round_id": "round-1",
        "parent_round_id": None,
        "bet_amount": "10.00",
        "refund_amount": "0",
        "payout_amount": "25.5",
        "net_amount": "15.50",
        "status": "SETTLED",
        "created_at": "2026-01-01T00:00:00.123Z",
        "settled_at": "2026-01-01T00:00:05.000Z",
        "updated_at": "2026-01-01T00:00:05.000Z",
    }
    raw.update(overrides)
    return raw


def records_page(items, **overrides):
    data = {
        "items": items,
        "next_cursor": "c-2",
        "has_more": True,
        "snapshot_watermark": "42",
        "projection_as_of": "2026-01-02T00:00:00.000001Z",
    }
    data.update(overrides)
    return data


class _Text(str):
    """A str subclass: the hot path leaves it to the full checks."""

    __slots__ = ()


TRICKY_VALUES = [
    None,
    "",
    "x",
    _Text("x"),
    0,
    -1,
    7,
    True,
    False,
    3.0,
    [],
    {},
    "0",
    "-0",
    "-0.00",
    "10.5",
    "1e2",
    "0.12345",
    "+1",
    "01",
    "\uff11\uff12",  # fullwidth digits
    _Text("10.00"),
    "2026-01-01T00:00:00.000Z",
    "2026-02-30T00:00:00.000Z",
    "2026-01-01T00:00:00Z",
    "2026-01-01T05:30:00.000+05:30",
    "2026-01-01t00:00:00.000z",
    "\uff12\uff10\uff12\uff16-01-01T00:00:00.000Z",
    "2026-01-01T24:00:00.000Z",
    "2026-01-01",
]


def tricky_overrides(extra=(), *, max_size=4):
    """Records' fields replaced by tricky values: what the parsing paths must agree on."""
    return st.dictionaries(
        st.sampled_from(list(record())),
        st.sampled_from([*TRICKY_VALUES, *extra]),
        max_size=max_size,
    )
