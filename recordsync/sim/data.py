"""Deterministic game rounds and their revisions, from a seed (spec: Record, Record status).

Pure: no clock, no threads, no I/O.  Everything is drawn from ``random.Random`` seeded from the
configuration, so the same seed and the same "now" give the same history, byte for byte.

Money is kept as integers in units of 10**-4 (the finest scale the spec allows) and printed with
exactly the currency's ``decimal_scale`` (see ``render``).  The columns are ``array`` objects and
UUIDs are 16 raw bytes in one ``bytearray`` (hex keeps their order), rather than a dict per
revision, so a million rounds fit in a few hundred megabytes and build in seconds.

The life of a round (one record):

1. created OPEN with bet 0 (revision 1);
2. the bet debit is confirmed (bet_amount = stake);
3. maybe a cancellation: a full refund with no settlement makes it VOID, or a partial refund;
4. zero (a lost round) or more payouts, each raising the cumulative payout_amount;
5. SETTLED with settled_at, seconds after play or hours later for long rounds;
6. rarely a late adjustment days later (an extra payout or a partial refund of a SETTLED round).

Free rounds are child rounds (``parent_round_id`` = the round_id of an earlier round of the same
player) with no bet.  Each step is one revision and one change with its own sequence.
"""

from __future__ import annotations

import math
import random
from array import array
from dataclasses import dataclass
from typing import Final, NamedTuple

UNIT_DIGITS: Final = 4  # amounts are held in units of 10**-4
MAX_AMOUNT_UNITS: Final = 9_999_999_999_999_999  # 999999999999.9999, the per-transaction maximum

# code, decimal_scale, smallest and largest usual stake in minor units of the currency.
CURRENCIES: Final = (
    ("JPY", 0, 10, 100_000),
    ("USD", 2, 10, 100_000),
    ("EUR", 2, 10, 100_000),
    ("USDT", 4, 1_000, 10_000_000),
)
_CURRENCY_WEIGHTS: Final = (25, 40, 20, 15)

OPEN: Final = 0
SETTLED: Final = 1
VOID: Final = 2
STATUS_NAMES: Final = ("OPEN", "SETTLED", "VOID")
NO_TIME: Final = -1  # settled_ms of a round that is not settled

# How rounds behave: probabilities of each fate (tuned for a realistic mix, not measured).
P_FREE_ROUND: Final = 0.05  # a child round with no bet, after a recent round of the player
P_WHALE: Final = 0.0002  # a bet at the per-transaction maximum with two maximal payouts
P_CANCELLED: Final = 0.07  # of which P_VOID are full refunds with no settlement (VOID)
P_VOID: Final = 0.04
P_WIN: Final = 0.45
P_WIN_FREE_ROUND: Final = 0.6
P_ONE_PAYOUT: Final = 0.7
P_TWO_PAYOUTS: Final = 0.9  # cumulative: the rest have three
P_LONG_ROUND: Final = 0.08  # settled 10 minutes to 3 hours after play
P_LATE_ADJUSTMENT: Final = 0.02  # one to three days after settlement
P_REFUND_ADJUSTMENT: Final = 0.5  # of late adjustments, when a part of the bet is left
P_LIVE_NEW_ROUND: Final = 0.35
P_LIVE_RECENT: Final = 0.6  # live revisions on one of the 2000 newest rounds, else any round
P_LIVE_PAYOUT: Final = 0.45
P_LIVE_CANCEL: Final = 0.05  # of OPEN rounds with no payout or refund yet
P_LIVE_PARTIAL_REFUND: Final = 0.07

MINUTE_MS: Final = 60_000
HOUR_MS: Final = 60 * MINUTE_MS
DAY_MS: Final = 24 * HOUR_MS

_UUID_VERSION_BITS: Final = (4 << 76) | (2 << 62)
_UUID_CLEAR_BITS: Final = ~((0xF << 76) | (0x3 << 62)) & ((1 << 128) - 1)


def seeded(seed: int, purpose: str) -> random.Random:
    """A reproducible RNG per purpose, so adding draws to one stream leaves the others alone."""
    return random.Random(f"recordsync-sim:{seed}:{purpose}")  # noqa: S311 -- data, not secrets


_UNITS: Final[tuple[int, ...]] = tuple(10 ** (UNIT_DIGITS - scale) for _, scale, _, _ in CURRENCIES)


def unit_of(currency: int) -> int:
    """The smallest amount of a currency, in units of 10**-4."""
    return _UNITS[currency]


def max_amount_of(currency: int) -> int:
    """The per-transaction maximum, cut to what the currency's scale can express."""
    return MAX_AMOUNT_UNITS - MAX_AMOUNT_UNITS % unit_of(currency)


def uuid_from_bits(bits: int) -> str:
    """A version-4 UUID string from 128 random bits (deterministic for a seeded RNG)."""
    text = f"{(bits & _UUID_CLEAR_BITS) | _UUID_VERSION_BITS:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


# Version 4 and variant 10 bits, applied to every 16-byte id at once with bytes.translate.
_VERSION_4 = bytes((b & 0x0F) | 0x40 for b in range(256))
_VARIANT_10 = bytes((b & 0x3F) | 0x80 for b in range(256))


def random_uuids(rng: random.Random, count: int) -> bytearray:
    """``count`` version-4 UUIDs as consecutive 16-byte chunks."""
    ids = bytearray(rng.randbytes(16 * count))
    ids[6::16] = ids[6::16].translate(_VERSION_4)
    ids[8::16] = ids[8::16].translate(_VARIANT_10)
    return ids


def uuid_text(ids: bytes | bytearray, index: int) -> str:
    """The canonical lowercase text of the ``index``-th 16-byte UUID in ``ids``."""
    text = ids[16 * index : 16 * index + 16].hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


@dataclass(frozen=True, slots=True)
class Catalog:
    """The merchant's players (each playing in one currency) and games."""

    player_ids: tuple[str, ...]
    player_currency: tuple[int, ...]
    game_ids: tuple[str, ...]


def make_catalog(rng: random.Random, rounds_per_day: int) -> Catalog:
    players = max(20, min(5000, rounds_per_day // 4))
    games = 24
    player_ids = tuple(uuid_from_bits(rng.getrandbits(128)) for _ in range(players))
    currencies = tuple(rng.choices(range(len(CURRENCIES)), weights=_CURRENCY_WEIGHTS, k=players))
    game_ids = tuple(uuid_from_bits(rng.getrandbits(128)) for _ in range(games))
    return Catalog(player_ids, currencies, game_ids)


class Columns:
    """The platform's state as parallel columns: records by index, changes by change id.

    Record indexes follow (created_at, record_id) for the history; live rounds are appended.
    Change ids follow planning order (a record's history revisions are consecutive) and then
    arrival order for live changes.  ``order[p]`` is the change id at sequence position ``p``
    (sequence = base + p) and ``position[c]`` the inverse: positions follow ``changed_ms``, so a
    ``since`` start is a binary search, and the history never has to be permuted column by
    column.  ``prev`` links each change to the previous change of the same record (-1 for
    revision 1), so "the record as of watermark W" is a short walk back from ``last_change``.

    The bet and settled_at are kept per record, not per change: a bet is confirmed once (at
    revision 2; revision 1 always shows 0) and a round is settled once (settled_at shows only
    when the change's status is SETTLED).  That saves two columns of every change.
    """

    __slots__ = (
        "bet",
        "changed_ms",
        "created_ms",
        "currency",
        "game",
        "last_change",
        "order",
        "parent",
        "payout",
        "player",
        "position",
        "prev",
        "rec",
        "record_ids",
        "refund",
        "revision",
        "round_ids",
        "settled_ms",
        "status",
    )

    def __init__(self) -> None:
        # records, by record index
        self.record_ids = bytearray()  # 16 bytes per record
        self.round_ids = bytearray()
        self.player = array("i")
        self.game = array("i")
        self.currency = array("b")
        self.parent = array("i")  # record index of the parent round, -1 for none
        self.created_ms = array("q")
        self.bet = array("q")  # the confirmed bet (shown from revision 2 on)
        self.settled_ms = array("q")  # NO_TIME until settled
        self.last_change = array("i")  # change id of the newest revision
        # changes, by change id
        self.rec = array("i")
        self.revision = array("i")
        self.refund = array("q")
        self.payout = array("q")
        self.status = array("b")
        self.changed_ms = array("q")
        self.prev = array("i")
        self.position = array("i")
        # change ids, by sequence position
        self.order = array("i")

    @property
    def record_count(self) -> int:
        return len(self.created_ms)

    @property
    def change_count(self) -> int:
        return len(self.rec)

    def record_id(self, record: int) -> str:
        return uuid_text(self.record_ids, record)

    def round_id(self, record: int) -> str:
        return uuid_text(self.round_ids, record)

    def order_key(self, record: int) -> tuple[int, bytes]:
        """The API order of records: (created_at, record_id); raw id bytes sort like the text."""
        return self.created_ms[record], bytes(self.record_ids[16 * record : 16 * record + 16])

    def change_at(self, record: int, visible: int) -> int:
        """The record's newest change among the first ``visible`` positions, or -1."""
        change = self.last_change[record]
        position = self.position
        prev = self.prev
        while change >= 0 and position[change] >= visible:
            change = prev[change]
        return change

    def add_record(
        self,
        *,
        record_id: bytes,
        round_id: bytes,
        player: int,
        game: int,
        currency: int,
        parent: int,
        created_ms: int,
    ) -> int:
        self.record_ids += record_id
        self.round_ids += round_id
        self.player.append(player)
        self.game.append(game)
        self.currency.append(currency)
        self.parent.append(parent)
        self.created_ms.append(created_ms)
        self.bet.append(0)
        self.settled_ms.append(NO_TIME)
        self.last_change.append(-1)
        return self.record_count - 1

    def add_change(self, record: int, state: RoundState, changed_ms: int) -> int:
        """Append a change at the next sequence position (the caller keeps time monotonic)."""
        change = self.change_count
        position = len(self.order)
        self.rec.append(record)
        self.revision.append(state.revision)
        self.refund.append(state.refund)
        self.payout.append(state.payout)
        self.status.append(state.status)
        self.changed_ms.append(changed_ms)
        self.prev.append(self.last_change[record])
        self.position.append(position)
        self.order.append(change)
        self.bet[record] = state.bet
        self.settled_ms[record] = state.settled_ms
        self.last_change[record] = change
        return position


@dataclass(frozen=True, slots=True)
class History:
    catalog: Catalog
    columns: Columns


@dataclass(frozen=True, slots=True)
class RoundState:
    """A record's money and status at one revision (amounts in units of 10**-4)."""

    revision: int
    bet: int
    refund: int
    payout: int
    status: int
    settled_ms: int


def stake(rng: random.Random, currency: int) -> int:
    """A log-uniform stake between the currency's usual bounds, in units of 10**-4."""
    _, _, low, high = CURRENCIES[currency]
    return int(low * (high / low) ** rng.random()) * unit_of(currency)


def half_of_rest(bet: int, refund: int, unit: int) -> int:
    """A partial refund: half of what is not yet refunded, in whole units (may be 0)."""
    return ((bet - refund) // unit // 2) * unit


def payout_total(rng: random.Random, base: int, unit: int) -> int:
    """A win of 0.1x to 30x ``base``, at least one unit of the currency."""
    minor = base // unit
    return max(1, int(minor * 0.1 * 300 ** rng.random())) * unit


def split(rng: random.Random, total: int, unit: int, parts: int) -> list[int]:
    """Cut ``total`` into ``parts`` positive pieces (fewer when it is too small)."""
    minor = total // unit
    if parts < 2 or minor < 2:  # noqa: PLR2004
        return [total]
    first = 1 + int(rng.random() * (minor - 1))
    if parts == 2 or minor - first < 2:  # noqa: PLR2004
        return [first * unit, (minor - first) * unit]
    second = 1 + int(rng.random() * (minor - first - 1))
    return [first * unit, second * unit, (minor - first - second) * unit]


def generate_history(
    *, seed: int, history_days: float, rounds_per_day: int, now_ms: int
) -> History:
    """Build ``history_days`` of rounds ending at ``now_ms``; nothing happens after ``now_ms``."""
    rng = seeded(seed, "history")
    catalog = make_catalog(seeded(seed, "catalog"), rounds_per_day)
    count = round(history_days * rounds_per_day)
    span = int(history_days * DAY_MS)
    cols = Columns()
    cols.created_ms = array("q", _creation_times(rng, count, now_ms - span, span))
    cols.record_ids = random_uuids(rng, count)
    cols.round_ids = random_uuids(rng, count)
    _break_creation_ties(cols)
    planned = _plan_rounds(rng, catalog, cols, now_ms)
    _sequence_changes(cols, planned)
    return History(catalog, cols)


def _creation_times(rng: random.Random, count: int, start: int, span: int) -> list[int]:
    """Sorted creation times in [start, start + span): a Poisson process scaled to the span."""
    if count == 0:
        return []
    gaps = [-math.log(1.0 - rng.random()) for _ in range(count + 1)]
    scale = span / sum(gaps)
    times = []
    elapsed = 0.0
    for gap in gaps[:-1]:
        elapsed += gap
        times.append(start + min(span - 1, int(elapsed * scale)))
    return times


def _break_creation_ties(cols: Columns) -> None:
    """Records are served ordered by (created_at, record_id): give tied times sorted ids.

    Record indexes follow creation time; within one millisecond the ids are reassigned in
    ascending order so that index order is exactly the API order.
    """
    created = cols.created_ms
    ids = cols.record_ids
    start = 0
    for index in range(1, len(created) + 1):
        if index == len(created) or created[index] != created[start]:
            if index - start > 1:
                chunks = sorted(ids[16 * i : 16 * i + 16] for i in range(start, index))
                ids[16 * start : 16 * index] = b"".join(chunks)
            start = index


# Columns of a planned revision, interleaved in one array while planning (one append each).
_STRIDE = 6
_REC, _REV, _TIME, _REFUND, _PAYOUT, _STATUS = range(_STRIDE)


def _plan_rounds(  # noqa: C901, PLR0912, PLR0915 -- one round's life reads best as one story
    rng: random.Random, catalog: Catalog, cols: Columns, now_ms: int
) -> tuple[array[int], array[int]]:
    """Every revision of every round, record by record: (interleaved columns, record starts)."""
    planned = array("q")
    starts = array("q")
    emit = planned.extend
    rnd = rng.random
    players = len(catalog.player_ids)
    games = len(catalog.game_ids)
    player_of = cols.player
    game_of = cols.game
    currency_of = catalog.player_currency
    bet_of = cols.bet
    settled_of = cols.settled_ms

    for index, created_ms in enumerate(cols.created_ms):
        starts.append(len(planned) // _STRIDE)
        parent = -1
        if index > 0 and rnd() < P_FREE_ROUND:
            parent = index - 1 - int(rnd() * min(index, 50))
            player = player_of[parent]
            game = game_of[parent]
        else:
            player = int(rnd() * players)
            game = int(rnd() * games)
        currency = currency_of[player]
        unit = unit_of(currency)
        player_of.append(player)
        game_of.append(game)
        cols.currency.append(currency)
        cols.parent.append(parent)
        bet_of.append(0)
        settled_of.append(NO_TIME)

        t = created_ms
        revision = 1
        emit((index, revision, t, 0, 0, OPEN))
        whale = parent < 0 and rnd() < P_WHALE
        bet = 0
        if parent < 0:
            t += 20 + int(rnd() * 1480)
            if t > now_ms:
                continue
            bet = max_amount_of(currency) if whale else stake(rng, currency)
            bet_of[index] = bet
            revision += 1
            emit((index, revision, t, 0, 0, OPEN))
        refund = 0
        payout = 0
        fate = rnd()
        if parent < 0 and not whale and fate < P_CANCELLED:
            t += MINUTE_MS + int(rnd() * 59 * MINUTE_MS)
            if t > now_ms:
                continue
            if fate < P_VOID:
                emit((index, revision + 1, t, bet, 0, VOID))
                continue
            refund = half_of_rest(bet, 0, unit)
            if refund:
                revision += 1
                emit((index, revision, t, refund, 0, OPEN))
        if whale:
            pieces = [bet, bet]
        elif rnd() < (P_WIN_FREE_ROUND if parent >= 0 else P_WIN):
            base = bet if parent < 0 else stake(rng, currency)
            fate = rnd()
            parts = 1 if fate < P_ONE_PAYOUT else 2 if fate < P_TWO_PAYOUTS else 3
            pieces = split(rng, payout_total(rng, base, unit), unit, parts)
        else:
            pieces = []
        stopped = False
        for piece in pieces:
            t += 1000 + int(rnd() * 59_000)
            if t > now_ms:
                stopped = True
                break
            payout += piece
            revision += 1
            emit((index, revision, t, refund, payout, OPEN))
        if stopped:
            continue
        if rnd() < P_LONG_ROUND:
            t += 10 * MINUTE_MS + int(rnd() * 170 * MINUTE_MS)
        else:
            t += 200 + int(rnd() * 4800)
        if t > now_ms:
            continue
        settled_of[index] = t
        revision += 1
        emit((index, revision, t, refund, payout, SETTLED))
        if rnd() < P_LATE_ADJUSTMENT:
            t += DAY_MS + int(rnd() * 2 * DAY_MS)
            if t > now_ms:
                continue
            if half_of_rest(bet, refund, unit) and rnd() < P_REFUND_ADJUSTMENT:
                refund += half_of_rest(bet, refund, unit)
            else:
                payout += payout_total(rng, bet or stake(rng, currency), unit)
            revision += 1
            emit((index, revision, t, refund, payout, SETTLED))
    starts.append(len(planned) // _STRIDE)
    return planned, starts


def _sequence_changes(cols: Columns, planned: tuple[array[int], array[int]]) -> None:
    """Give the planned changes their sequence positions, in time order.

    The sort is stable, so revisions of one record in the same millisecond keep their order.
    In planning order a record's revisions are consecutive, which gives ``prev`` and each
    record's newest change without another pass over the records.
    """
    columns, starts = planned
    cols.rec = columns[_REC::_STRIDE]
    cols.revision = columns[_REV::_STRIDE]
    cols.refund = columns[_REFUND::_STRIDE]
    cols.payout = columns[_PAYOUT::_STRIDE]
    cols.status = array("b", columns[_STATUS::_STRIDE])
    times = cols.changed_ms = columns[_TIME::_STRIDE]
    del columns
    # Keys relative to the first creation are small ints, which Python sorts faster.
    origin = cols.created_ms[0] if cols.created_ms else 0
    keys = [when - origin for when in times]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    del keys
    cols.order = array("i", order)
    position = array("i", bytes(4 * len(order)))
    for at, change in enumerate(order):
        position[change] = at
    cols.position = position
    del order
    cols.prev = array(
        "i", [change - 1 if revision > 1 else -1 for change, revision in enumerate(cols.revision)]
    )
    cols.last_change = array("i", [end - 1 for end in starts[1:]])


class NewRound(NamedTuple):
    record_id: bytes
    round_id: bytes
    player: int
    game: int
    currency: int
    parent: int


def state_at(cols: Columns, change: int) -> RoundState:
    record = cols.rec[change]
    revision = cols.revision[change]
    status = cols.status[change]
    return RoundState(
        revision=revision,
        bet=cols.bet[record] if revision > 1 else 0,
        refund=cols.refund[change],
        payout=cols.payout[change],
        status=status,
        settled_ms=cols.settled_ms[record] if status == SETTLED else NO_TIME,
    )


class LiveEvents:
    """Decides the live traffic: new rounds created now, and new revisions of existing ones.

    Old records are picked as well as recent ones (late payouts and refunds of rounds created
    days ago are exactly what the change stream exists for).
    """

    def __init__(self, seed: int) -> None:
        self.rng = seeded(seed, "live")

    def wants_new_round(self, record_count: int) -> bool:
        return record_count == 0 or self.rng.random() < P_LIVE_NEW_ROUND

    def pick_record(self, record_count: int) -> int:
        rng = self.rng
        if rng.random() < P_LIVE_RECENT:
            return record_count - 1 - int(rng.random() * min(record_count, 2000))
        return int(rng.random() * record_count)

    def new_round(self, catalog: Catalog, cols: Columns) -> NewRound:
        """A round created now; a free round continues a recent round of the same player."""
        rng = self.rng
        count = cols.record_count
        parent = -1
        if count > 0 and rng.random() < P_FREE_ROUND:
            parent = count - 1 - int(rng.random() * min(count, 50))
            player, game = cols.player[parent], cols.game[parent]
        else:
            player = int(rng.random() * len(catalog.player_ids))
            game = int(rng.random() * len(catalog.game_ids))
        ids = bytes(random_uuids(rng, 2))
        return NewRound(
            record_id=ids[:16],
            round_id=ids[16:],
            player=player,
            game=game,
            currency=catalog.player_currency[player],
            parent=parent,
        )

    def advance(
        self, state: RoundState, *, currency: int, child: bool, now_ms: int
    ) -> RoundState | None:
        """The next revision of a round, or None when it cannot change any more (VOID)."""
        rng = self.rng
        unit = unit_of(currency)
        bet, refund, payout = state.bet, state.refund, state.payout
        status, settled_ms = state.status, state.settled_ms
        if status == VOID:
            return None
        partial = half_of_rest(bet, refund, unit)
        fate = rng.random()
        if status == SETTLED:  # a late adjustment
            if partial and fate < P_REFUND_ADJUSTMENT:
                refund += partial
            else:
                payout += payout_total(rng, bet or stake(rng, currency), unit)
        elif bet == 0 and not child:  # the bet debit is confirmed
            bet = stake(rng, currency)
        elif fate < P_LIVE_PAYOUT:
            payout += payout_total(rng, bet or stake(rng, currency), unit)
        elif fate < P_LIVE_PAYOUT + P_LIVE_CANCEL and payout == refund == 0 and not child:
            refund, status = bet, VOID  # cancelled: a full refund and no settlement
        elif fate < P_LIVE_PAYOUT + P_LIVE_CANCEL + P_LIVE_PARTIAL_REFUND and partial:
            refund += partial
        else:
            status, settled_ms = SETTLED, now_ms
        return RoundState(state.revision + 1, bet, refund, payout, status, settled_ms)
