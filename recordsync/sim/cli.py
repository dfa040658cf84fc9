"""``recordsync sim`` / ``python -m recordsync.sim``: serve a simulator until SIGTERM or Ctrl-C.

Thin on purpose: parse, build the configuration, start, print where it listens, wait.
A secret given to it is never printed; the default is the public demo secret ``DEMO_SECRET``.
With ``--merchants N`` (N > 1) it serves ``{merchant-id}-1`` .. ``-N``, whose secrets are
derived from the seed and the id (``derived_secret``: public, they protect nothing), and prints
each id with its secret so that a person can try them.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from recordsync.core.errors import ConfigurationError
from recordsync.sim.added_fields import FIELD_KINDS, AddedField
from recordsync.sim.config import (
    DEFAULT_SEED,
    DEMO_MERCHANT_ID,
    DEMO_SECRET,
    OPTIONAL_ENDPOINTS,
    FaultRates,
    Refusal,
    SimConfig,
)
from recordsync.sim.simulator import Simulator

EXIT_OK = 0
EXIT_CANNOT_LISTEN = 1
EXIT_CONFIGURATION = 2

_FAULT_OPTIONS = (
    ("--fault-503", "projection_lag", "503 projection lag"),
    ("--fault-429", "rate_limited", "injected 429 with Retry-After"),
    ("--fault-500", "server_error", "500 internal error"),
    ("--fault-reset", "connection_reset", "connection reset with no response"),
    ("--fault-duplicates", "duplicates", "stale changes sent again"),
    ("--fault-extra-fields", "extra_fields", "unknown fields everywhere"),
    ("--fault-malformed", "malformed", "invalid JSON, truncated body, wrong content type"),
    ("--fault-bad-records", "bad_records", "an item with a bad amount or a missing field"),
    ("--fault-latency", "latency", "share of requests that get the added latency"),
)


def _say(message: str, *, error: bool = False) -> None:
    """The CLI speaks to a person (and to scripts reading ``base_url=``), one line at a time."""
    print(message, file=sys.stderr if error else sys.stdout, flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recordsync sim",
        description="Serve a simulated game platform (records and record-changes) over HTTP.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    parser.add_argument(
        "--merchant-id",
        default=DEMO_MERCHANT_ID,
        help="the merchant id; with --merchants N > 1, the prefix of the derived ids",
    )
    parser.add_argument(
        "--merchants",
        type=int,
        default=1,
        metavar="N",
        help="serve N merchants with derived ids and secrets, printed at start (default 1)",
    )
    secret = parser.add_mutually_exclusive_group()
    secret.add_argument(
        "--secret", help="the 43-character merchant secret (default: the public demo secret)"
    )
    secret.add_argument("--secret-file", type=Path, help="read the secret from this file")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--history-days", type=float, default=3.0)
    parser.add_argument("--rounds-per-day", type=int, default=2000)
    parser.add_argument(
        "--live-rate", type=float, default=1.0, help="live events per second (0: none)"
    )
    parser.add_argument("--record-requests", type=int, default=2)
    parser.add_argument("--record-seconds", type=int, default=1)
    # The query endpoints' own limit (GET /v1/games): capabilities.limits.query_*.
    parser.add_argument("--query-requests", type=int, default=10)
    parser.add_argument("--query-seconds", type=int, default=1)
    parser.add_argument("--max-page-size", type=int, default=1000)
    parser.add_argument("--cursor-ttl-seconds", type=float, default=86400.0)
    parser.add_argument("--retention-seconds", type=float, default=90 * 86400.0)
    parser.add_argument("--wallet-mode", choices=("TRANSFER", "SEAMLESS"), default="TRANSFER")
    parser.add_argument(
        "--events-url",
        metavar="URL",
        help="the merchant URL: each live round that ends is announced by a signed POST to "
        "URL/v1/round-events, for every merchant (X-Merchant-Id tells them apart); "
        "default: none sent",
    )
    parser.add_argument(
        "--add-field",
        action="append",
        default=[],
        metavar="NAME:KIND[:FROM_MS]",
        help="records carry a member recordsync does not know: KIND one of "
        + ", ".join(FIELD_KINDS)
        + "; from FROM_MS (platform ms since the epoch) on, default always; repeatable",
    )
    faults = parser.add_argument_group("faults (rates from 0 to 1)")
    for option, _, text in _FAULT_OPTIONS:
        faults.add_argument(option, type=float, default=None, metavar="RATE", help=text)
    faults.add_argument("--latency-ms", type=float, default=0.0)
    faults.add_argument("--latency-jitter-ms", type=float, default=0.0)
    faults.add_argument(
        "--records-latency-ms",
        type=float,
        default=0.0,
        help="added to every records request alone (a slow snapshot and drift check)",
    )
    faults.add_argument("--clock-skew-seconds", type=float, default=0.0)
    faults.add_argument(
        "--refuse",
        action="append",
        default=[],
        metavar="ENDPOINT=HOW[@MERCHANT]",
        help=f"refuse an optional endpoint ({', '.join(OPTIONAL_ENDPOINTS)}) to every merchant "
        "or to the one named: HOW is a status (404, 403, 500), a stall (stall:10) or both "
        "(stall:10,500); repeat for more",
    )
    return parser


def _refused(config: SimConfig, options: list[str]) -> SimConfig:
    """``config`` with every ``--refuse ENDPOINT=HOW[@MERCHANT]`` applied, in order."""
    for option in options:
        endpoint, equals, rest = option.partition("=")
        how, _, merchant_id = rest.partition("@")
        if not equals or not how:
            raise ConfigurationError(f"--refuse takes ENDPOINT=HOW[@MERCHANT], got {option!r}")
        config = config.refusing(endpoint, Refusal.parse(how), merchant_id=merchant_id or None)
    return config


def _secret(args: argparse.Namespace) -> str:
    if args.secret_file is not None:
        try:
            return str(args.secret_file.read_text(encoding="utf-8").strip())
        except OSError as exc:
            raise ConfigurationError(f"cannot read --secret-file: {exc.strerror}") from None
    return str(args.secret) if args.secret else DEMO_SECRET


def config_from(args: argparse.Namespace) -> SimConfig:
    rates = {
        name: getattr(args, option[2:].replace("-", "_")) for option, name, _ in _FAULT_OPTIONS
    }
    faults = FaultRates(
        **{name: value for name, value in rates.items() if value is not None},
        latency_ms=args.latency_ms,
        latency_jitter_ms=args.latency_jitter_ms,
        records_latency_ms=args.records_latency_ms,
        clock_skew_seconds=args.clock_skew_seconds,
    )
    merchants: int = args.merchants
    if merchants < 1:
        raise ConfigurationError(f"--merchants must be >= 1, got {merchants}")
    if merchants > 1 and (args.secret or args.secret_file is not None):
        raise ConfigurationError(
            "--secret and --secret-file are for one merchant; with --merchants N each "
            "merchant's secret is derived from --seed and its id"
        )
    config = SimConfig(
        merchant_id=args.merchant_id,
        secret=_secret(args),
        seed=args.seed,
        history_days=args.history_days,
        rounds_per_day=args.rounds_per_day,
        live_rate=args.live_rate,
        record_requests=args.record_requests,
        record_seconds=args.record_seconds,
        query_requests=args.query_requests,
        query_seconds=args.query_seconds,
        max_page_size=args.max_page_size,
        cursor_ttl_seconds=args.cursor_ttl_seconds,
        retention_seconds=args.retention_seconds,
        wallet_mode=args.wallet_mode,
        faults=faults,
        events_url=args.events_url,
        added_fields=tuple(_added_field(text) for text in args.add_field),
    )
    return _refused(config if merchants == 1 else config.with_merchants(merchants), args.refuse)


def _added_field(text: str) -> AddedField:
    name, _, rest = text.partition(":")
    kind, _, since = rest.partition(":")
    try:
        return AddedField(name, kind or "string", int(since) if since else 0)
    except ValueError:
        raise ConfigurationError(f"--add-field {text!r}: FROM_MS must be an integer") from None


def _announce(simulator: Simulator) -> None:
    """Where it listens and whom it serves: one line per merchant when it serves several."""
    config = simulator.config
    _say(f"base_url={simulator.base_url}")
    if config.events_url is not None:
        _say(f"events_url={config.events_url}")
    if not config.merchants:
        _say(f"merchant_id={config.merchant_id}")
        # The demo secret is public (its --help says so): printed, as the derived ones are, so
        # that a newcomer can point recordsync at the simulator.  A secret given
        # with --secret or --secret-file is the operator's own: never printed.
        _say(f"secret={config.secret}" if config.secret == DEMO_SECRET else "secret=(as given)")
        _say(f"records={simulator.store.record_count} watermark={simulator.watermark()}")
        return
    for profile in config.profiles:  # derived demo secrets: printing them is the point
        store = simulator.store_of(profile.merchant_id)
        _say(
            f"merchant_id={profile.merchant_id} secret={profile.secret} "
            f"records={store.record_count} watermark={store.watermark()}"
        )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = config_from(args)
    except ConfigurationError as exc:
        _say(f"error: {exc}", error=True)
        return EXIT_CONFIGURATION
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    simulator = Simulator(config)
    try:
        try:
            simulator.start(host=args.host, port=args.port)
        except OSError as exc:
            _say(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror}", error=True)
            return EXIT_CANNOT_LISTEN
        simulator.start_live()
        _announce(simulator)
        while not stop.wait(0.5):
            pass
    finally:
        simulator.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return EXIT_OK
