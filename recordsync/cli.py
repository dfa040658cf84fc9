"""The ``recordsync`` command: parse, configure logging, build, call.  Nothing else lives here."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from recordsync import __version__
from recordsync.core import early_signals
from recordsync.core.errors import (
    CommandInterruptedError,
    ConfigurationError,
    RecordSyncError,
)
from recordsync.core.times import parse_time

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2
# verify only: it could not finish (the platform or warehouse failed, or it was stopped), so
# it concluded nothing; 1 stays "differences found", which a script must tell apart.
EXIT_INCOMPLETE = 3
# The reader of stdout went away (``recordsync report | head``): what a shell reports for a
# process SIGPIPE ended, quietly, as ``cat`` or ``grep`` end there.
EXIT_BROKEN_PIPE = 128 + 13
# Commands that stop gracefully on SIGTERM/SIGINT; the others end at once (``_Signalled``).
GRACEFUL_COMMANDS = frozenset({"run", "backfill", "verify", "demo", "resync", "reset", "promote"})


class _Signalled(BaseException):
    """SIGINT or SIGTERM in a command that has nothing to stop gracefully (``status``,
    ``report``, ``migrate``, the state and pause commands): raised where the command is, as
    Python raises KeyboardInterrupt, so that it ends with one line instead of a traceback
    (SIGINT) or no word at all (SIGTERM).  A BaseException, so no ``except Exception`` of a
    retry loop takes it for a failure to retry."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _ending_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise ``_Signalled`` meanwhile (in the main thread: the only one
    that may set handlers); the handlers before are put back after, for a caller that runs
    ``main`` in its own process (the tests)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise _Signalled(signum)

    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.signal(signum, handler) for signum in signals}
    try:
        yield
    finally:
        for signum, before in previous.items():
            signal.signal(signum, before)


def _time_arg(value: str) -> object:
    try:
        return parse_time(value, field="time")
    except RecordSyncError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not an RFC3339 time") from exc


def _database_arg(value: str) -> str:
    from recordsync.core.database_url import parse_database_url  # noqa: PLC0415 - see main()

    try:
        parse_database_url(value)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recordsync",
        description="Keep an exact, gap-free copy of the platform's game records in SQL.",
    )
    parser.add_argument("--version", action="version", version=f"recordsync {__version__}")
    _add_config(parser, default=None)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser("run", help="the daemon: anchor, snapshot, then tail the changes")
    backfill = commands.add_parser("backfill", help="one-shot snapshot of a creation range")
    backfill.add_argument("--from", dest="start", type=_time_arg, required=True)
    backfill.add_argument("--to", dest="end", type=_time_arg, required=True)
    backfill.add_argument(
        "--merchant", metavar="ID", help="the merchant to backfill (when several are configured)"
    )
    _add_dry_run(backfill)
    verify = commands.add_parser(
        "verify",
        help="compare a creation range with the platform's records (exit 0: complete and "
        "exact; 1: differences found; 3: could not finish)",
    )
    verify.add_argument("--from", dest="start", type=_time_arg, required=True)
    verify.add_argument("--to", dest="end", type=_time_arg, required=True)
    verify.add_argument(
        "--merchant", metavar="ID", help="the merchant to verify (when several are configured)"
    )
    verify.add_argument(
        "--repair",
        action="store_true",
        help="write the platform's records back where the warehouse is missing, behind or "
        "different (never lowering a revision, never deleting)",
    )
    verify.add_argument("--format", dest="fmt", choices=("table", "json", "csv"), default="table")
    _add_dry_run(verify)
    verify.add_argument(
        "--metrics-file",
        type=Path,
        metavar="FILE",
        help="write the run's metrics there (node_exporter textfile collector)",
    )
    migrate = commands.add_parser("migrate", help="apply the warehouse migrations")
    status = commands.add_parser("status", help="where the sync stands, for every merchant")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument(
        "--check",
        action="store_true",
        help="exit 0 when the warehouse answers and a page was committed recently, else 1",
    )
    report = commands.add_parser("report", help="daily totals from the warehouse's BI views")
    report.add_argument("--days", type=int, default=7, help="UTC days back from the newest data")
    report.add_argument("--by", choices=("game", "provider", "player", "currency"), default="game")
    report.add_argument("--format", dest="fmt", choices=("table", "csv", "json"), default="table")
    report.add_argument(
        "--merchant", metavar="ID", help="one merchant's report (default: every one, grouped)"
    )
    merchant = _add_merchant_commands(commands)
    _add_fields_commands(commands)
    for command in (run, backfill, verify, migrate, status, report, merchant):
        # After the command as well as before it; SUPPRESS keeps a value given before.
        _add_config(command, default=argparse.SUPPRESS)
    commands.add_parser(
        "sim", help="run the platform simulator (options: recordsync sim --help)", add_help=False
    )
    demo = commands.add_parser("demo", help="simulator + local SQLite, synced until caught up")
    demo.add_argument("--database", type=_database_arg, default="sqlite:///recordsync-demo.db")
    demo.add_argument("--history-days", type=int, default=3)
    demo.add_argument("--rounds-per-day", type=int, default=2000)
    demo.add_argument(
        "--merchants", type=int, default=1, help="merchants synced side by side (default 1)"
    )
    demo.add_argument(
        "--serve",
        action="store_true",
        help="keep the simulator up after the check, until Ctrl-C (for `recordsync verify`)",
    )
    demo.add_argument(
        "--drift",
        action="store_true",
        help="the platform adds fields to its records as the demo runs (kept in extra_fields)",
    )
    return parser


def _add_fields_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``recordsync fields list|promote``: the record fields the platform added."""
    fields = commands.add_parser(
        "fields", help="record fields: known, promoted, unknown; promote one to a column"
    )
    actions = fields.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="known, promoted and unknown record fields")
    listing.add_argument("--json", action="store_true")
    promote = actions.add_parser("promote", help="make an unknown field a typed column")
    promote.add_argument("name")
    promote.add_argument(
        "--type",
        dest="kind",
        required=True,
        choices=("decimal", "text", "integer", "timestamp", "boolean"),
    )
    promote.add_argument("--dry-run", action="store_true")
    promote.add_argument(
        "--unseen",
        action="store_true",
        help="promote a field no page has carried yet (refused without: a typo is for good)",
    )


def _fields(args: argparse.Namespace) -> int:
    from recordsync.core.settings import load_settings  # noqa: PLC0415 - see _dispatch
    from recordsync.logs import configure_logging  # noqa: PLC0415
    from recordsync.service.commands import fields as fields_command  # noqa: PLC0415

    # The fields are the warehouse's, not a merchant's: no merchant or platform setting is read.
    settings = load_settings(config_path=args.config, need_platform=False, need_merchant=False)
    # stdout is the listing (``--json`` read by scripts): the log goes to stderr.
    configure_logging(level=settings.log_level, log_format=settings.log_format, stream=sys.stderr)
    if args.action == "list":
        return fields_command.list_fields(settings, as_json=args.json)
    return fields_command.promote_field(
        settings, args.name, args.kind, dry_run=args.dry_run, unseen=args.unseen
    )


def _add_merchant_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """``recordsync merchant ACTION ID``: an operator's controls of one merchant."""
    merchant = commands.add_parser(
        "merchant", help="act on one merchant across the fleet: pause, resume, state, resync, reset"
    )
    actions = merchant.add_subparsers(dest="action", required=True, metavar="ACTION")
    pause = actions.add_parser(
        "pause",
        help="stop syncing a merchant on every replica until resumed (it stays held by none)",
    )
    pause.add_argument("merchant_id", metavar="ID")
    pause.add_argument("--reason", metavar="TEXT", help="why, as `status` shows it")
    resume = actions.add_parser("resume", help="sync a paused merchant again")
    resume.add_argument("merchant_id", metavar="ID")
    resume.add_argument(
        "--force", action="store_true", help="end the pause even if another operator owns it"
    )
    state = actions.add_parser(
        "state", help="a merchant's cursors, windows, epoch and phase as JSON: show, export, import"
    )
    state.add_argument("merchant_id", metavar="ID")
    state.add_argument("operation", choices=("show", "export", "import"))
    state.add_argument(
        "file", nargs="?", type=Path, help="export: where to write; import: what to read"
    )
    state.add_argument(
        "--accept-foreign",
        action="store_true",
        help="import: take a file exported from another warehouse (or by an earlier version); "
        "what it marks done is read again here, changes before its cursor are not",
    )
    state.add_argument(
        "--accept-ahead",
        action="store_true",
        help="import: take a file whose tail is ahead of this warehouse's; the changes in "
        "between are never read",
    )
    resync = actions.add_parser(
        "resync",
        help="read a creation range again from the platform, through the holder; nothing is "
        "emptied and the highest revision wins",
    )
    resync.add_argument("merchant_id", metavar="ID")
    resync.add_argument("--from", dest="start", type=_time_arg, required=True)
    resync.add_argument("--to", dest="end", type=_time_arg, required=True)
    _add_dry_run(resync)
    reset = actions.add_parser(
        "reset",
        help="re-anchor the change stream and read the history again from history_from, "
        "keeping the rows (the 410 recovery, on demand)",
    )
    reset.add_argument("merchant_id", metavar="ID")
    reset.add_argument("--yes", action="store_true", help="yes, reset it")
    _add_dry_run(reset)
    for action in (pause, resume, state, resync, reset):
        _add_config(action, default=argparse.SUPPRESS)
    return merchant


def _add_dry_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the windows, the expected requests and the time at the merchant's limit; "
        "read no records and write nothing",
    )


def _add_config(parser: argparse.ArgumentParser, *, default: object) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        default=default,
        metavar="FILE",
        help="TOML file with the same keys as RECORDSYNC_* in lower case, and [[merchants]]",
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sim"]:
        from recordsync.sim.cli import main as sim_main  # noqa: PLC0415 - only for this command

        return sim_main(argv[1:])
    if GRACEFUL_COMMANDS & set(argv):
        early_signals.install()
        return _run(build_parser().parse_args(argv))
    with _ending_on_signals():
        return _run(build_parser().parse_args(argv))


def _run(args: argparse.Namespace) -> int:
    """The command, and its end as one line and an exit code, whatever ends it."""
    try:
        return _dispatch(args)
    except _Signalled as stop:
        name = signal.Signals(stop.signum).name
        # These commands read, or write in one transaction (migrate: a revision at a time,
        # which the same command goes on from): nothing of them is left half done.
        print(f"recordsync: interrupted by {name}: run the same command again", file=sys.stderr)  # noqa: T201
        return 128 + stop.signum
    except BrokenPipeError:
        # Python would report the failed flush of stdout at exit too: point it at nothing.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except CommandInterruptedError as exc:
        print(f"recordsync: {exc}", file=sys.stderr)  # noqa: T201
        return exc.exit_code
    except ConfigurationError as exc:
        for line in str(exc).splitlines():
            print(f"recordsync: configuration: {line}", file=sys.stderr)  # noqa: T201
        return EXIT_CONFIG
    except RecordSyncError as exc:
        # Our own errors carry their diagnosis (and never a secret): one line, no traceback.
        print(f"recordsync: error: {exc}", file=sys.stderr)  # noqa: T201
        return EXIT_INCOMPLETE if args.command == "verify" else EXIT_FAILURE


def _merchant(args: argparse.Namespace) -> int:
    """``recordsync merchant ACTION ID``: no platform settings needed; the log on stderr."""
    from recordsync import service  # noqa: PLC0415 - see _dispatch
    from recordsync.core.settings import load_settings  # noqa: PLC0415
    from recordsync.logs import configure_logging  # noqa: PLC0415

    if args.action in {"resync", "reset"}:  # they read the platform: its settings needed
        settings = load_settings(config_path=args.config)
        configure_logging(level=settings.log_level, log_format=settings.log_format)
        service.warn_settings(settings)
        return _rereading(service, settings, args)
    settings = load_settings(config_path=args.config, need_platform=False)
    configure_logging(level=settings.log_level, log_format=settings.log_format, stream=sys.stderr)
    if args.action == "pause":
        return service.pause_merchant(settings, args.merchant_id, reason=args.reason)
    if args.action == "resume":
        return service.resume_merchant(settings, args.merchant_id, force=args.force)
    return _state(service, settings, args)


def _rereading(service: Any, settings: Any, args: argparse.Namespace) -> int:
    """``merchant resync`` and ``merchant reset``, or their dry runs."""
    if args.action == "resync" and args.dry_run:
        return int(
            service.dry_run_range(
                settings, "resync", args.start, args.end, merchant_id=args.merchant_id
            )
        )
    if args.action == "resync":
        return int(service.run_resync(settings, args.merchant_id, args.start, args.end))
    if args.dry_run:
        return int(service.dry_run_reset(settings, args.merchant_id))
    return int(service.run_reset(settings, args.merchant_id, yes=args.yes))


def _state(service: Any, settings: Any, args: argparse.Namespace) -> int:
    if args.operation == "show":
        return int(service.show_state(settings, args.merchant_id))
    if args.file is None:
        raise ConfigurationError(f"merchant state {args.operation}: name the FILE")
    if args.operation == "export":
        return int(service.export_state(settings, args.merchant_id, args.file))
    return int(
        service.import_state(
            settings,
            args.merchant_id,
            args.file,
            accept_foreign=args.accept_foreign,
            accept_ahead=args.accept_ahead,
        )
    )


def _dispatch(args: argparse.Namespace) -> int:  # noqa: PLR0911 - one return per command
    # Imported here, after main() remembered early signals: `recordsync --help` stays fast,
    # `sim` needs no database driver, and a SIGTERM during these imports is not lost.
    from recordsync import service  # noqa: PLC0415
    from recordsync.core.settings import load_settings  # noqa: PLC0415
    from recordsync.logs import configure_logging  # noqa: PLC0415

    if args.command == "demo":
        return service.run_demo(
            database_url=args.database,
            history_days=args.history_days,
            rounds_per_day=args.rounds_per_day,
            merchants=args.merchants,
            serve=args.serve,
            drift=args.drift,
        )
    if args.command == "migrate":
        settings = load_settings(config_path=args.config, need_platform=False, need_merchant=False)
        configure_logging(level=settings.log_level, log_format=settings.log_format)
        return service.migrate(settings)
    if args.command == "report":
        settings = load_settings(config_path=args.config, need_platform=False)
        return service.show_report(
            settings, days=args.days, by=args.by, fmt=args.fmt, merchant_id=args.merchant
        )
    if args.command == "status":
        settings = load_settings(config_path=args.config, need_platform=False)
        return service.show_status(settings, as_json=args.json, check=args.check)
    grouped = {"merchant": _merchant, "fields": _fields}.get(args.command)
    if grouped is not None:  # commands with actions of their own
        return grouped(args)
    settings = load_settings(config_path=args.config)
    # verify prints its findings on stdout (a table, json or csv): its log lines go to stderr.
    log_stream = sys.stderr if args.command == "verify" else None
    configure_logging(level=settings.log_level, log_format=settings.log_format, stream=log_stream)
    service.warn_settings(settings)
    if args.command == "run":
        return service.run_daemon(settings)
    if args.command in {"backfill", "verify"} and args.dry_run:
        what = "verify --repair" if getattr(args, "repair", False) else args.command
        return service.dry_run_range(
            settings, what, args.start, args.end, merchant_id=args.merchant
        )
    if args.command == "backfill":
        return service.run_backfill(settings, args.start, args.end, merchant_id=args.merchant)
    if args.command == "verify":
        return service.run_verify(
            settings,
            args.start,
            args.end,
            merchant_id=args.merchant,
            repair=args.repair,
            fmt=args.fmt,
            metrics_file=args.metrics_file,
        )
    raise AssertionError(args.command)  # pragma: no cover - argparse restricts the choices
