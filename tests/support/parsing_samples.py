"""Wire records, pages and tricky field values shared by the parsing tests (tests/platform)."""

import orjson
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


# -- hostile values -----------------------------------------------------------------
#
# JSON texts, not Python values: ``1e400`` or a 5000-digit integer are legal JSON that no
# Python float holds, so a strategy gives the text and ``splice`` puts it in the document.

HOLE = "\x00hostile\x00"

EXTREME_TIMES = [
    "9999-12-31T23:30:00-01:00",
    "0001-01-01T00:10:00+01:00",
    "9999-12-31T23:59:59.999Z",
    "0001-01-01T00:00:00.000Z",
    "0000-01-01T00:00:00Z",
    "9999-12-31T23:59:59.999999999+23:59",
    "0001-01-01T00:00:00.000000001-23:59",
]
HOSTILE_TEXTS = [
    "1e400",
    "-1e400",
    "1E-400",
    "1.5e3",
    "-0.0",
    "9" * 310,
    "9" * 5000,
    "-" + "9" * 5000,
    "18446744073709551616",
    "[" * 300 + "]" * 300,
    "[" * 1100 + "]" * 1100,
    '{"a":' * 900 + "1" + "}" * 900,
    '"' + "x" * 300_000 + '"',
    '"' + "\\u0000" + '"',
    '"\\ud800"',
    '"\\udc00x"',
    '"\\ud83d\\ude00"',
    "NaN",
    "-Infinity",
    "true",
    "null",
    "{}",
    "[]",
]


def json_values():
    """Whole random JSON values (as Python values orjson can write)."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**63), max_value=2**64 - 1)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=20)
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=12,
    )


def hostile_texts():
    """A hostile JSON text: extreme times, numbers beyond a float, deep nesting, huge and
    odd strings, non-JSON tokens, or any other value (wrong types)."""
    return (
        st.sampled_from(HOSTILE_TEXTS)
        | st.sampled_from([*EXTREME_TIMES, *TRICKY_VALUES]).map(_as_text)
        | json_values().map(_as_text)
    )


def _as_text(value):
    return orjson.dumps(value).decode()


def splice(document, text):
    """``document`` written as JSON with its one ``HOLE`` string replaced by ``text``."""
    hole = orjson.dumps(HOLE)
    raw = orjson.dumps(document)
    assert raw.count(hole) == 1
    return raw.replace(hole, text.encode())
