"""``recordsync demo``: the README's first command.  The bundled simulator and a local SQLite
file, synced until caught up, then checked against the simulator's truth.

The simulator lives in this process, so a demo warehouse outlives the platform it copied: its
cursors mean nothing to the next demo's simulator (``CURSOR_INVALID`` for ever).
So every demo starts a fresh warehouse, and says so when it replaces a previous demo's SQLite
file; it never empties a server database (it refuses one that holds a previous demo).  It
writes ``recordsync-demo.toml`` and ends with the commands that look at the data with
recordsync itself; ``--serve`` keeps the simulator up afterwards, until Ctrl-C, for
``verify``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from sqlalchemy.engine import make_url

from recordsync.core.database_url import check_sqlite_folder
from recordsync.core.errors import ConfigurationError, RecordSyncError
from recordsync.core.secret import Secret, SecretSource
from recordsync.core.settings import MerchantSettings, Settings
from recordsync.core.stopping import Stopper
from recordsync.core.times import format_time
from recordsync.logs import configure_logging
from recordsync.service.commands.merchant_command import MerchantCommand
from recordsync.service.commands.progress import RichProgress
from recordsync.service.signals import stop_on_signals
from recordsync.warehouse import Warehouse

if TYPE_CHECKING:
    from recordsync.sim import AddedField

CONFIG_NAME = "recordsync-demo.toml"


def run_demo(
    *,
    database_url: str,
    history_days: int,
    rounds_per_day: int,
    merchants: int = 1,
    serve: bool = False,
    drift: bool = False,
) -> int:
    """The README's first command: the simulator and a local SQLite file, synced until caught
    up; with ``merchants`` > 1, that many merchants side by side in one process.  Exit 0 when
    the warehouse equals the simulator's truth, 1 when it differs, 130/143 when interrupted."""
    from recordsync.sim import DEMO_MERCHANT_ID, DEMO_SECRET, SimConfig, Simulator  # noqa: PLC0415

    try:
        check_sqlite_folder(database_url)  # exit 2 naming the folder, before anything starts
    except ConfigurationError as exc:
        raise ConfigurationError(f"--database: {exc}") from None
    console = Console()
    configure_logging(level="warning", log_format=None, stream=sys.stderr)
    config = SimConfig(
        history_days=history_days,
        rounds_per_day=rounds_per_day,
        live_rate=20.0,
        added_fields=drift_fields(history_days) if drift else (),
    )
    if merchants > 1:
        config = config.with_merchants(merchants)
    ids = [DEMO_MERCHANT_ID] if merchants == 1 else [p.merchant_id for p in config.profiles]
    stopper = Stopper()
    with stop_on_signals(stopper) as signals, _demo_warehouse(database_url, ids) as replaced:
        if replaced:
            console.print(
                f"a previous demo's warehouse ({replaced}) was replaced: its simulator is "
                "gone, so this demo starts a fresh one"
            )
        else:
            console.print("a fresh demo warehouse")
        sim = Simulator(config)
        sim.start(host="127.0.0.1", port=0)
        try:
            console.print(
                f"simulator: {sim.base_url} (merchants {', '.join(ids)}, {history_days} days, "
                f"{rounds_per_day:,} rounds a day each, live traffic on)"
            )
            # The operator's choice of how much history to copy: everything the simulator
            # has, read off the platform's (the simulator's) clock.
            history_from = sim.now() - timedelta(days=history_days + 1)
            profiles = tuple(
                MerchantSettings(
                    merchant_id=profile.merchant_id,
                    secret=SecretSource.given(
                        Secret(DEMO_SECRET if merchants == 1 else profile.secret)
                    ),
                    base_url=sim.base_url,
                    history_from=history_from,
                )
                for profile in config.profiles
            )
            settings = Settings(merchants=profiles, database_url=database_url)
            config_file = _config_file(database_url)
            _write_config(config_file, settings, profiles)
            started = time.monotonic()
            sim.start_live()
            with RichProgress(console) as progress:
                caught_up = _sync_side_by_side(settings, stopper, progress)
            sim.stop_live()
            interrupted = signals.interrupted(
                "the demo stopped before it caught up; run it again (it starts afresh)"
            )
            if interrupted is not None:
                raise interrupted
            if not caught_up:
                raise RecordSyncError("the demo's sync stopped before it caught up")
            truths = {merchant_id: sim.truth(merchant_id) for merchant_id in ids}
            equal = _demo_summary(console, settings, truths, time.monotonic() - started)
            _how_to_look(console, settings, config_file, history_from, sim.now(), serve=serve)
            if drift:
                _drift_steps(console, config_file)
            if serve:
                console.print(
                    f"the simulator keeps serving at {sim.base_url} until Ctrl-C: run the "
                    "verify command above in another terminal"
                )
                while not stopper.wait(3600):
                    pass
        finally:
            sim.stop()
    return 0 if equal else 1


def drift_fields(history_days: int) -> tuple[AddedField, ...]:
    """What ``--drift`` makes the platform add: a text member on every record, a 30-digit
    decimal from the middle of the history, a nested object from the live traffic on."""
    from recordsync.sim import AddedField  # noqa: PLC0415 - as run_demo imports the simulator

    now_ms = int(time.time() * 1000)  # the simulator's own clock: its records' times
    middle = now_ms - history_days * 43_200_000
    return (
        AddedField("channel", "string"),
        AddedField("tax_amount", "decimal", from_ms=middle),
        AddedField("jackpot", "object", from_ms=now_ms),
    )


def _drift_steps(console: Console, config_file: Path) -> None:
    base = f"recordsync --config {config_file}"
    lines = [
        "the platform added fields (--drift): status lists them; make one a column with",
        f"  {base} fields list",
        f"  {base} fields promote tax_amount --type decimal --dry-run",
        f"  {base} fields promote tax_amount --type decimal",
    ]
    console.print("\n".join(lines), soft_wrap=True, highlight=False, markup=False)


@contextlib.contextmanager
def _demo_warehouse(database_url: str, merchant_ids: list[str]) -> Iterator[str | None]:
    """A fresh demo warehouse for the demo's whole run; what it replaced, if anything.

    A SQLite file is the demo's alone while it runs (``<file>.demo.lock``, held to the end),
    and is not a daemon's (the fleet's lock file, tried once: a ``verify`` the demo prints
    takes that one while ``--serve`` runs), so a demo never deletes a warehouse another demo
    or a daemon is writing; then the file goes, journal and write-ahead log with it.  A
    server database is never emptied: one that holds the demo merchants' state is refused."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        _refuse_previous_demo(database_url, merchant_ids)
        yield None
        return
    path = Path(url.database)
    demo_lock = _lock_or_refuse(Path(f"{path}.demo.lock"), path)
    try:
        os.close(_lock_or_refuse(Path(f"{path}.fleet.lock"), path))  # no daemon on it
        replaced = str(path) if path.exists() else None
        for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")):
            leftover.unlink(missing_ok=True)
        yield replaced
    finally:
        os.close(demo_lock)  # closing the descriptor releases the flock


def _lock_or_refuse(lock_file: Path, database: Path) -> int:
    """The descriptor of ``lock_file`` locked by this process, or a ``ConfigurationError``
    when another process holds it."""
    descriptor = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise ConfigurationError(
            f"--database: {database} is in use by another process (a demo or a daemon): "
            "stop it first, or choose another --database"
        ) from None
    return descriptor


def _refuse_previous_demo(database_url: str, merchant_ids: list[str]) -> None:
    warehouse = Warehouse.connect(database_url)
    try:
        warehouse.migrate()
        held = [m for m in merchant_ids if warehouse.state.load_state(m) is not None]
    finally:
        warehouse.close()
    if held:
        raise ConfigurationError(
            f"--database holds a previous demo's sync of {', '.join(held)}, whose simulator is "
            "gone; the demo only ever replaces SQLite files: use an empty database"
        )


def _config_file(database_url: str) -> Path:
    """Beside the SQLite file (the current folder for any other database), named as the
    printed commands show it: relative when it is in the current folder."""
    url = make_url(database_url)
    folder = Path()
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        folder = Path(url.database).absolute().parent
    path = folder.absolute() / CONFIG_NAME
    return path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path


def _write_config(path: Path, settings: Settings, merchants: tuple[MerchantSettings, ...]) -> None:
    """The settings of this demo as a config file, for the commands ``_how_to_look`` prints.

    The demo secret is public (``sim.DEMO_SECRET``, and derived ones anyone can compute), so
    it may sit in the file."""
    url = make_url(settings.database_url)
    database_url = settings.database_url
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        database_url = f"sqlite:///{Path(url.database).absolute()}"
    lines = [
        "# Written by `recordsync demo`: the demo's warehouse and its simulator, which serves",
        "# only while a demo runs (`recordsync demo --serve` keeps it up until Ctrl-C).",
        f"database_url = {_toml(database_url)}",
    ]
    for merchant in merchants:
        value = merchant.secret.value if merchant.secret else None
        secret = value.reveal() if value is not None else ""
        lines += [
            "",
            "[[merchants]]",
            f"merchant_id = {_toml(merchant.merchant_id)}",
            f"base_url = {_toml(merchant.base_url or '')}",
            f"secret = {_toml(secret)}",
            f"history_from = {_toml(format_time(merchant.history_from))}"
            if merchant.history_from
            else "",
        ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _toml(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _how_to_look(
    console: Console,
    settings: Settings,
    config_file: Path,
    history_from: datetime,
    now: datetime,
    *,
    serve: bool,
) -> None:
    """The commands that look at the data with recordsync itself, exactly as they work."""
    base = f"recordsync --config {config_file}"
    merchant = (
        "" if len(settings.merchants) == 1 else f" --merchant {settings.merchants[0].merchant_id}"
    )
    start = format_time(history_from.replace(microsecond=0))
    end = format_time((now + timedelta(seconds=1)).replace(microsecond=0))
    verify = f"{base} verify{merchant} --from {start} --to {end}"
    url = make_url(settings.database_url)
    lines = [
        "look at it with recordsync itself:",
        f"  {base} status",
        f"  {base} report",
        f"  {verify}" + ("" if serve else "   (while `recordsync demo --serve` runs)"),
    ]
    if url.get_backend_name() == "sqlite":
        lines += ["or with SQL:", f'  sqlite3 {url.database} "{_DEMO_QUERY}"']
    console.print("\n".join(lines), soft_wrap=True, highlight=False, markup=False)


def _sync_side_by_side(settings: Settings, stopper: Stopper, progress: RichProgress) -> bool:
    """Every merchant synced until caught up, each in its own thread, in one display."""
    results: dict[str, bool] = {}
    failures: list[BaseException] = []

    def one(merchant_id: str) -> None:
        try:
            results[merchant_id] = sync(merchant_id)
        except BaseException as exc:  # noqa: BLE001 - raised again in the demo's thread
            failures.append(exc)
            stopper.stop()

    def sync(merchant_id: str) -> bool:
        observer = progress if len(settings.merchants) == 1 else progress.for_merchant(merchant_id)
        with MerchantCommand(
            settings,
            merchant_id,
            Stopper(parent=stopper),
            name="demo",
            observer=observer,
            stop_when_caught_up=True,
        ) as command:
            if len(settings.merchants) == 1:
                progress.show_budget(command.client.budget.requests, command.client.budget.seconds)
            return command.tail.run()

    threads = [
        threading.Thread(target=one, args=(merchant.merchant_id,), name=merchant.merchant_id)
        for merchant in settings.merchants
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        # The first failure, in the command's thread: one line from cli.main, no thread's
        # traceback on the terminal.
        raise failures[0]
    return bool(results) and all(results.values()) and len(results) == len(threads)


def _demo_summary(
    console: Console,
    settings: Settings,
    truths: dict[str, dict[str, dict[str, Any]]],
    seconds: float,
) -> bool:
    """One more pass with the live traffic stopped, then compare with the truth exactly:
    whether the warehouse equals it."""
    synced = differ = quarantined = 0
    for merchant_id, truth in truths.items():
        with MerchantCommand(
            settings, merchant_id, Stopper(), name="demo", stop_when_caught_up=True
        ) as command:
            command.tail.run()
            rows = command.warehouse.records.fetch_records(merchant_id)
            quarantined += command.warehouse.records.status(merchant_id).quarantined
        synced += len(rows)
        differ += len(rows.keys() ^ truth.keys()) + sum(
            1
            for record_id, record in truth.items()
            if record_id in rows and rows[record_id]["revision"] != record["revision"]
        )
    verdict = (
        "[green]equals the simulator's truth[/]"
        if not differ
        else f"[red]differs from the simulator's truth in {differ} records[/]"
    )
    merchants = f" of {len(truths)} merchants" if len(truths) > 1 else ""
    console.print(
        f"\n[bold]synced {synced:,} records{merchants} in {seconds:.1f} s[/]; the warehouse "
        f"{verdict}; {quarantined} quarantined."
    )
    return not differ


_DEMO_QUERY = (
    "SELECT status, currency, COUNT(*) AS rounds FROM records GROUP BY status, currency "
    "ORDER BY rounds DESC;"
)
