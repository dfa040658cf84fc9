"""The simulated platform API: the record side as a function from request to response (no sockets).

``SimulatedApi.handle`` does, in order (spec: Authentication, Records endpoints, Limits):
route by path (404), find the merchant by X-Merchant-Id and authenticate (401), refuse an
optional endpoint the merchant is refused (``Refusal``: an error, a stall or both), count the
request in that merchant's shared rate limit (429 and a violation when over it; the game
catalogue, ``GET /v1/games``, counts in the merchant's own query limit instead and is served
without injected faults), maybe inject
a 429 (which gives the place in the window back), add latency, validate the query (400/410),
maybe fail the request (reset, 503, 500), serve the page, and maybe spoil the page
(duplicates, unknown fields, bad records, malformed body).

Everything after the merchant is found works on that merchant's own state (``merchant``):
its store, window, fault dice, statistics and cursors.  A request that names no known merchant
is counted in the API's own statistics, part of the simulator's totals.

The HTTP layer (``server``) only moves bytes; everything the simulator decides is here, so it
can be tested without sockets as well as over them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final, TypeVar

import orjson

from recordsync.sim.auth import unknown_merchant
from recordsync.sim.config import Refusal, SimConfig
from recordsync.sim.cursors import (
    ChangesCursor,
    Cursor,
    CursorCodec,
    CursorInvalidError,
    GamesCursor,
    RecordsCursor,
)
from recordsync.sim.data import CURRENCIES
from recordsync.sim.envelope import (
    JSON,
    ApiError,
    RequestIds,
    error_body,
    success_body,
)
from recordsync.sim.faults import DATA_EXTRA, ENVELOPE_EXTRA, Malformation
from recordsync.sim.merchant import SimulatedMerchant
from recordsync.sim.query import (
    ChangesFromNow,
    ChangesNext,
    RecordsNext,
    parse_changes,
    parse_games,
    parse_records,
    reject_unknown,
    split_target,
)
from recordsync.sim.ratelimit import retry_after_header
from recordsync.sim.render import format_ms
from recordsync.sim.stats import (
    BAD_RECORDS,
    CONNECTION_RESET,
    DUPLICATES,
    EXTRA_FIELDS,
    LATENCY,
    MALFORMED,
    NO_RESPONSE,
    PROJECTION_LAG,
    RATE_LIMITED,
    REFUSED,
    SERVER_ERROR,
    StatsRecorder,
)
from recordsync.sim.store import RecordFilter

CAPABILITIES: Final = "capabilities"
RECORDS: Final = "records"
RECORD_CHANGES: Final = "record-changes"
GAMES: Final = "games"
OTHER: Final = "other"
ENDPOINTS: Final = {
    "/v1/capabilities": CAPABILITIES,
    "/v1/records": RECORDS,
    "/v1/record-changes": RECORD_CHANGES,
    "/v1/games": GAMES,
}

_C = TypeVar("_C", RecordsCursor, ChangesCursor, GamesCursor)

# The error of a refused optional endpoint, by status (spec: Errors; 403's code is not shown).
_REFUSALS: Final = {
    403: ("FORBIDDEN", "this merchant lacks the scope this endpoint needs (injected)"),
    404: ("RESOURCE_NOT_FOUND", "not served to this merchant (injected)"),
}


class Action(Enum):
    SEND = "send"
    RESET = "reset"  # close the connection with RST, no response
    SHORT_BODY = "short_body"  # send half of the body announced, then close


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str  # the raw request target, exactly as on the request line
    headers: Mapping[str, str]  # names in lower case
    body: bytes = b""
    # When the request arrived (the API's monotonic clock): when the kernel received its
    # request line (``SimulatedApi.arrival``); None: when ``handle`` is called.  The rate
    # limit counts arrivals, and reading a request takes the GIL, which a busy process can
    # withhold for tens of milliseconds.
    arrival: float | None = None


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = JSON
    headers: tuple[tuple[str, str], ...] = ()
    action: Action = Action.SEND


def _expired(message: str) -> ApiError:
    return ApiError(410, "CURSOR_EXPIRED", message)


def _cursor_invalid(message: str) -> ApiError:
    return ApiError(400, "CURSOR_INVALID", message)


class SimulatedApi:
    def __init__(
        self,
        config: SimConfig,
        merchants: Iterable[SimulatedMerchant],
        *,
        codec: CursorCodec,
        monotonic: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        self.config = config
        self.merchants = {merchant.merchant_id: merchant for merchant in merchants}
        self.codec = codec
        # Requests no merchant can be credited with: unknown paths and merchant ids.
        self.stats = StatsRecorder()
        self._monotonic = monotonic
        self._sleep = sleep
        self._ids = RequestIds()

    # --- the request pipeline ----------------------------------------------------------

    def arrival(self, waited: float) -> float:
        """When a request read now arrived, on the clock the rate limit's window runs on:
        ``waited`` real seconds ago, at the door (the kernel's receive time, server.py).  A
        test's injected clock stands still while a request waits, so on it the request
        arrived now."""
        now = self._monotonic()
        return now - waited if self._monotonic is time.monotonic else now

    def handle(self, request: Request) -> Response:
        arrival = self._monotonic() if request.arrival is None else request.arrival
        request_id = self._ids.next()
        path = request.target.partition("?")[0]
        endpoint = ENDPOINTS.get(path, OTHER)
        # Credited to the merchant the request names, when there is one: its statistics then
        # show its own failures (authentication included) and nobody else's.
        merchant = self.merchants.get(request.headers.get("x-merchant-id", ""))
        try:
            response = self._dispatch(request, endpoint, merchant, arrival, request_id)
        except ApiError as error:
            response = Response(error.status, error_body(error, request_id), headers=error.headers)
        status = NO_RESPONSE if response.action is Action.RESET else response.status
        (self.stats if merchant is None else merchant.stats).request(endpoint, status)
        return response

    def _dispatch(
        self,
        request: Request,
        endpoint: str,
        merchant: SimulatedMerchant | None,
        arrival: float,
        request_id: str,
    ) -> Response:
        if endpoint == OTHER:
            raise ApiError(404, "RESOURCE_NOT_FOUND", "no such resource")
        if request.method != "GET":
            raise ApiError(
                405, "METHOD_NOT_ALLOWED", "only GET is served here", headers=(("Allow", "GET"),)
            )
        if merchant is None:
            self.stats.auth_failure()
            raise unknown_merchant()
        now = merchant.now()
        try:
            merchant.authenticator.check(
                headers=request.headers,
                method=request.method,
                target=request.target,
                body=request.body,
                now=now,
            )
        except ApiError:
            merchant.stats.auth_failure()
            raise
        refusal = merchant.refusals.get(endpoint)
        if refusal is not None:
            self._refuse(merchant, endpoint, refusal)
        if endpoint == CAPABILITIES:
            _, params = split_target(request.target)
            reject_unknown(params, frozenset())
            self._delay(merchant, endpoint)  # the network's latency is every request's
            return Response(200, success_body(self._capabilities(merchant), request_id))
        if endpoint == GAMES:
            self._count_query(merchant, arrival)
            _, params = split_target(request.target)
            self._delay(merchant, endpoint)
            return self._games(params, merchant, int(now * 1000), request_id)
        self._count(merchant, arrival, now)
        self._delay(merchant, endpoint)
        _, params = split_target(request.target)
        if endpoint == RECORDS:
            return self._records(params, merchant, int(now * 1000), request_id)
        return self._changes(params, merchant, int(now * 1000), request_id)

    def _delay(self, merchant: SimulatedMerchant, endpoint: str) -> None:
        """The injected latency (the network's: on every endpoint), and on ``records`` its own
        latency on top (the platform's work on a page)."""
        delay = merchant.injector.latency_seconds() or 0.0
        if endpoint == RECORDS:
            delay += merchant.injector.rates.records_latency_ms / 1000.0
        if delay > 0:
            merchant.stats.fault(LATENCY)
            self._sleep(delay)

    def _refuse(self, merchant: SimulatedMerchant, endpoint: str, refusal: Refusal) -> None:
        """Stall, then answer the refusal's error; after a stall alone, serve as usual."""
        merchant.stats.fault(REFUSED)
        if refusal.stall_seconds > 0:
            self._sleep(refusal.stall_seconds)
        status = refusal.status
        if status is None:
            return
        code, message = _REFUSALS.get(status, ("REQUEST_REJECTED", "refused (injected)"))
        if status >= 500:  # noqa: PLR2004 - HTTP status classes
            code, message = "INTERNAL_ERROR", "internal error (injected)"
        raise ApiError(status, code, f"{endpoint}: {message}", retryable=status >= 500)  # noqa: PLR2004

    def _count(self, merchant: SimulatedMerchant, arrival: float, now: float) -> None:
        """The merchant's record rate limit, then an injected 429 (which is not a violation)."""
        merchant_id, window = merchant.merchant_id, merchant.window
        wait = window.admit(merchant_id, arrival)
        if wait is not None:
            merchant.stats.violation()
            raise ApiError(
                429,
                "RATE_LIMITED",
                f"more than {merchant.profile.record_requests} record requests in "
                f"{merchant.profile.record_seconds} s",
                retryable=True,
                headers=(("Retry-After", retry_after_header(wait)),),
            )
        if merchant.injector.hit(RATE_LIMITED):
            window.release(merchant_id, arrival)
            merchant.stats.fault(RATE_LIMITED)
            raise ApiError(
                429,
                "RATE_LIMITED",
                "too many requests (injected)",
                retryable=True,
                headers=(("Retry-After", merchant.injector.retry_after(now)),),
            )

    def _count_query(self, merchant: SimulatedMerchant, arrival: float) -> None:
        """The merchant's query limit (the catalogue's own, apart from the record limit)."""
        window = merchant.query_window
        wait = window.admit(merchant.merchant_id, arrival)
        if wait is not None:
            merchant.stats.query_violation()
            raise ApiError(
                429,
                "RATE_LIMITED",
                f"more than {window.requests} query requests in {window.seconds} s",
                retryable=True,
                headers=(("Retry-After", retry_after_header(wait)),),
            )

    @staticmethod
    def _transient_failure(merchant: SimulatedMerchant) -> Response | None:
        """A reset, a 503 (the projection lags) or a 500, when the merchant's dice say so."""
        injector, stats = merchant.injector, merchant.stats
        if injector.hit(CONNECTION_RESET):
            stats.fault(CONNECTION_RESET)
            return Response(NO_RESPONSE, b"", action=Action.RESET)
        if injector.hit(PROJECTION_LAG):
            stats.fault(PROJECTION_LAG)
            raise ApiError(
                503,
                "PROJECTION_LAGGING",
                "the record projection lags; try again",
                retryable=True,
                headers=(("Retry-After", "1"),),
            )
        if injector.hit(SERVER_ERROR):
            stats.fault(SERVER_ERROR)
            raise ApiError(500, "INTERNAL_ERROR", "internal error (injected)", retryable=True)
        return None

    # --- endpoints ---------------------------------------------------------------------

    def _capabilities(self, merchant: SimulatedMerchant) -> bytes:
        """The platform's settings, with the asking merchant's own record rate limit."""
        config, profile = self.config, merchant.profile
        return orjson.dumps(
            {
                "wallet_mode": config.wallet_mode,
                "currencies": [
                    {"code": code, "decimal_scale": scale} for code, scale, _, _ in CURRENCIES
                ],
                "operations": [],
                "limits": {
                    "query_requests": config.query_requests,
                    "query_seconds": config.query_seconds,
                    "record_requests": profile.record_requests,
                    "record_seconds": profile.record_seconds,
                    "max_page_size": config.max_page_size,
                    "max_body_bytes": config.max_body_bytes,
                },
            }
        )

    def _decode(self, token: str, merchant: SimulatedMerchant, kind: type[_C]) -> _C:
        try:
            cursor: Cursor = self.codec.decode(token)
        except CursorInvalidError as exc:
            raise _cursor_invalid(f"invalid cursor: {exc}") from None
        if not isinstance(cursor, kind) or cursor.merchant_id != merchant.merchant_id:
            raise _cursor_invalid("the cursor belongs to another endpoint or merchant")
        if cursor.epoch < merchant.cursor_epoch:
            raise _expired("the cursor has expired")
        return cursor

    def _records(
        self, params: dict[str, str], merchant: SimulatedMerchant, now_ms: int, request_id: str
    ) -> Response:
        store, injector, stats = merchant.store, merchant.injector, merchant.stats
        query = parse_records(params, self.config.max_page_size)
        if isinstance(query, RecordsNext):
            cursor = self._decode(query.cursor, merchant, RecordsCursor)
            if now_ms - cursor.chain_started_ms > self.config.cursor_ttl_seconds * 1000:
                raise _expired("records cursors are valid 24 hours from the chain's first page")
            if merchant.take_records_expiry():
                raise _expired("the records cursor has expired")
            where = RecordFilter(cursor.from_ms, cursor.to_ms, cursor.player_id, cursor.game_id)
            watermark = cursor.watermark
            after: tuple[int, str] | None = (cursor.after_ms, cursor.after_id)
            started = cursor.chain_started_ms
        else:
            where = RecordFilter(query.from_ms, query.to_ms, query.player_id, query.game_id)
            watermark = store.watermark()
            after = None
            started = now_ms
        failure = self._transient_failure(merchant)
        if failure is not None:
            return failure
        page = store.records(where, watermark=watermark, after=after, limit=query.limit)
        next_cursor = None
        if page.has_more and page.last_key is not None:
            next_cursor = self.codec.encode(
                RecordsCursor(
                    merchant_id=merchant.merchant_id,
                    from_ms=where.from_ms,
                    to_ms=where.to_ms,
                    player_id=where.player_id,
                    game_id=where.game_id,
                    watermark=watermark,
                    after_ms=page.last_key[0],
                    after_id=page.last_key[1],
                    chain_started_ms=started,
                    epoch=merchant.cursor_epoch,
                )
            )
        items = page.items
        if injector.hit(BAD_RECORDS) and items:
            stats.fault(BAD_RECORDS)
            items = injector.bad_record(items, changes=False)
        extra = injector.hit(EXTRA_FIELDS)
        if extra:
            stats.fault(EXTRA_FIELDS)
            items = injector.extra_fields(items, changes=False)
        data = b"".join(
            (
                b'{"items":[',
                b",".join(items),
                b'],"next_cursor":',
                orjson.dumps(next_cursor),
                b',"has_more":',
                b"true" if page.has_more else b"false",
                b',"snapshot_watermark":"',
                watermark.encode(),
                b'","projection_as_of":"',
                format_ms(now_ms).encode(),
                b'"',
                DATA_EXTRA if extra else b"",
                b"}",
            )
        )
        return self._page(merchant, data, request_id, extra=extra)

    def _changes(
        self, params: dict[str, str], merchant: SimulatedMerchant, now_ms: int, request_id: str
    ) -> Response:
        store, injector, stats = merchant.store, merchant.injector, merchant.stats
        query = parse_changes(params, self.config.max_page_size)
        oldest_ms = now_ms - int(self.config.retention_seconds * 1000)
        if isinstance(query, ChangesNext):
            cursor = self._decode(query.cursor, merchant, ChangesCursor)
            position = cursor.position
            if position > store.change_count:
                raise _cursor_invalid("the cursor points past the change log")
            changed_ms = store.changed_ms_at(position)
            if changed_ms is not None and changed_ms < oldest_ms:
                raise _expired("the cursor is older than the change retention")
        elif isinstance(query, ChangesFromNow):
            position = store.change_count
        else:
            if query.since_ms < oldest_ms:
                raise _expired("since is older than the change retention")
            position = store.first_position_since(query.since_ms)
        failure = self._transient_failure(merchant)
        if failure is not None:
            return failure
        page = store.changes(position, query.limit)
        next_cursor = self.codec.encode(
            ChangesCursor(
                merchant_id=merchant.merchant_id, position=page.end, epoch=merchant.cursor_epoch
            )
        )
        items = page.items
        if injector.hit(DUPLICATES) and items:
            stats.fault(DUPLICATES)
            stale = injector.stale_positions(position, page.end, store.previous_position)
            items = injector.insert_stale(items, store.stale_changes(stale))
        if injector.hit(BAD_RECORDS) and items:
            stats.fault(BAD_RECORDS)
            items = injector.bad_record(items, changes=True)
        extra = injector.hit(EXTRA_FIELDS)
        if extra:
            stats.fault(EXTRA_FIELDS)
            items = injector.extra_fields(items, changes=True)
        data = b"".join(
            (
                b'{"items":[',
                b",".join(items),
                b'],"next_cursor":"',
                next_cursor.encode(),
                b'","has_more":',
                b"true" if page.has_more else b"false",
                b',"projection_as_of":"',
                format_ms(now_ms).encode(),
                b'"',
                DATA_EXTRA if extra else b"",
                b"}",
            )
        )
        return self._page(merchant, data, request_id, extra=extra)

    def _games(
        self, params: dict[str, str], merchant: SimulatedMerchant, now_ms: int, request_id: str
    ) -> Response:
        """One page of the catalogue (spec: Endpoints, Games): the cursor is bound to the
        merchant and the status filter and is valid 24 hours from the chain's first page."""
        query = parse_games(params, self.config.max_page_size)
        status, after, started = query.status, None, now_ms
        if query.cursor is not None:
            cursor = self._decode(query.cursor, merchant, GamesCursor)
            if "status" in params and cursor.status != status:
                raise _cursor_invalid("the cursor was issued for another status filter")
            if now_ms - cursor.chain_started_ms > self.config.cursor_ttl_seconds * 1000:
                raise _expired("games cursors are valid 24 hours from the chain's first page")
            status, after, started = cursor.status, cursor.after_game_id, cursor.chain_started_ms
        page = merchant.games.page(status=status, after=after, limit=query.limit)
        next_cursor = None
        if page.has_more and page.last_game_id is not None:
            next_cursor = self.codec.encode(
                GamesCursor(
                    merchant_id=merchant.merchant_id,
                    status=status,
                    after_game_id=page.last_game_id,
                    chain_started_ms=started,
                    epoch=merchant.cursor_epoch,
                )
            )
        data = b"".join(
            (
                b'{"items":[',
                b",".join(page.items),
                b'],"next_cursor":',
                orjson.dumps(next_cursor),
                b',"has_more":',
                b"true" if page.has_more else b"false",
                b"}",
            )
        )
        return Response(200, success_body(data, request_id))

    @staticmethod
    def _page(
        merchant: SimulatedMerchant, data: bytes, request_id: str, *, extra: bool
    ) -> Response:
        body = success_body(data, request_id, ENVELOPE_EXTRA if extra else b"")
        if not merchant.injector.hit(MALFORMED):
            return Response(200, body)
        merchant.stats.fault(MALFORMED)
        variant = merchant.injector.malformation()
        half = len(body) // 2
        if variant is Malformation.INVALID_JSON:
            # A NUL byte is invalid JSON wherever it lands, inside a string or not.
            return Response(200, body[:half] + b"\x00}{" + body[half:])
        if variant is Malformation.TRUNCATED:
            return Response(200, body[:half])
        if variant is Malformation.WRONG_CONTENT_TYPE:
            html = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
            return Response(200, html, content_type="text/html; charset=utf-8")
        return Response(200, body, action=Action.SHORT_BODY)
