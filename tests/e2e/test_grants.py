"""docs/operations.md, "Who may run what", as written: the four accounts
created with exactly the grants the docs give, in a fresh database of each server; each command
runs under each account, what it may do succeeds and what it may not ends with one plain line
(exit 2), no traceback."""

from __future__ import annotations

import contextlib
import io
import re
import secrets
import signal
import time
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path

import pytest
import structlog
from sqlalchemy import Engine, create_engine, pool, text
from sqlalchemy.engine import make_url
from support.dbfixtures import SERVER_PARAMS, fresh_database
from support.synccheck import start_daemon, stop_gracefully, wait_for_log

from recordsync import cli, logs
from recordsync.sim import SimConfig, Simulator

pytestmark = pytest.mark.slow

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
ROLES = ("recordsync_migrate", "recordsync_run", "recordsync_control", "recordsync_read")
PASSWORD = "change-me"


def documented_grants(backend: str, when: str) -> list[str]:
    """The statements of the docs' block ``<!-- grants: BACKEND, WHEN the first migrate -->``."""
    marker = f"<!-- grants: {backend}, {when} the first migrate -->"
    after = DOCS.read_text().split(marker, 1)[1]
    block = re.search(r"```sql\n(.*?)```", after, re.DOTALL)
    assert block is not None, marker
    return [line.rstrip(";") for line in block.group(1).splitlines() if line.strip()]


def documented(backend: str, when: str, names: dict[str, str], database: str) -> list[str]:
    """The docs' statements with this test's account names (roles are server-wide) and its
    database's name."""
    found = []
    for line in documented_grants(backend, when):
        statement = line
        for role, name in names.items():
            statement = statement.replace(role, name)
        found.append(statement.replace("recordsync", database))
    return found


def drop_accounts(admin: Engine, backend: str, names: Iterable[str]) -> None:
    with admin.connect() as conn:
        for name in names:
            if backend == "postgresql":
                conn.execute(text(f"DROP OWNED BY {name} CASCADE"))
                conn.execute(text(f"DROP ROLE {name}"))
            else:
                conn.execute(text(f"DROP USER '{name}'@'%'"))


def run(config: Path, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["--config", str(config), *args])
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        logs.reset_logging()
        structlog.reset_defaults()
    return code, out.getvalue(), err.getvalue()


def refused(done: tuple[int, str, str]) -> str:
    code, out, err = done
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("recordsync: configuration: the database account may not "), err
    assert "Traceback" not in err
    return lines[0]


def succeeded(done: tuple[int, str, str]) -> None:
    code, out, err = done
    assert code == 0, out + err[-3000:]


@pytest.mark.parametrize("kind", [p.values[0] for p in SERVER_PARAMS], ids=str)
def test_each_account_may_run_exactly_its_commands(kind: str, tmp_path: Path):
    suffix = secrets.token_hex(3)
    names = {role: f"rs{suffix}_{role.split('_')[1]}" for role in ROLES}
    sim = Simulator(
        SimConfig(
            merchant_id="granted",
            secret="grants-secret-0123456789abcdefghijklmnopqrst",
            seed=81,
            history_days=0.05,
            rounds_per_day=2000,
            live_rate=4.0,
        )
    )
    sim.start()
    with fresh_database(kind, tmp_path) as admin_url:
        database = make_url(admin_url).database
        backend = "postgresql" if kind == "postgres" else "mariadb"

        admin = create_engine(admin_url, poolclass=pool.NullPool, isolation_level="AUTOCOMMIT")

        def apply(when: str) -> None:
            with admin.connect() as conn:
                for statement in documented(backend, when, names, database):
                    conn.execute(text(statement))

        def config(role: str) -> Path:
            url = make_url(admin_url).set(username=names[role], password=PASSWORD)
            path = tmp_path / f"{role}.toml"
            path.write_text(
                f'base_url = "{sim.base_url}"\nmerchant_id = "granted"\n'
                f'secret = "{sim.config.secret}"\nhttp_port = 0\n'
                f'database_url = "{url.render_as_string(hide_password=False)}"\n'
                f'history_from = "{(sim.now().replace(microsecond=0)).isoformat()}"\n'
            )
            return path

        end = sim.now().replace(microsecond=0)
        window = ("--from", (end - timedelta(hours=1)).isoformat(), "--to", end.isoformat())
        try:
            apply("before")
            for role in ("recordsync_run", "recordsync_control", "recordsync_read"):
                assert "migrate" in refused(run(config(role), "migrate"))
            succeeded(run(config("recordsync_migrate"), "migrate"))
            apply("after")

            read = config("recordsync_read")
            succeeded(run(read, "status"))
            succeeded(run(read, "report", "--days", "1"))
            assert "pause merchant" in refused(run(read, "merchant", "pause", "granted"))

            control = config("recordsync_control")
            succeeded(run(control, "merchant", "pause", "granted", "--reason", "grants"))
            succeeded(run(control, "merchant", "resume", "granted"))
            refused(run(control, "backfill", *window))

            runner = config("recordsync_run")
            succeeded(run(runner, "backfill", *window))
            assert stored_rows(admin) > 0
            if backend == "postgresql":  # MariaDB cannot take one table out of a db-wide grant
                assert "pause merchant" in refused(run(runner, "merchant", "pause", "granted"))
            the_run_account_runs_the_rest(runner, window, tmp_path, sim, admin)
            the_read_accounts_run_every_read_command([read, control], window)
        finally:
            drop_accounts(admin, backend, names.values())
            admin.dispose()
            sim.stop()


def the_run_account_runs_the_rest(
    config: Path, window: tuple[str, ...], tmp_path: Path, sim: Simulator, admin: Engine
) -> None:
    """``recordsync_run``: the other commands of its row, the daemon among them (its tail
    commits live rounds under these grants)."""
    succeeded(run(config, "verify", *window))
    succeeded(run(config, "verify", *window, "--repair"))
    succeeded(run(config, "merchant", "resync", "granted", *window))
    succeeded(run(config, "merchant", "state", "granted", "show"))
    succeeded(run(config, "merchant", "state", "granted", "export", str(tmp_path / "state.json")))
    log = tmp_path / "run.log"
    daemon = start_daemon({}, log, "--config", str(config), "run")
    try:
        wait_for_log(log, "merchant_sync_started", timeout=60)
        before = stored_rows(admin)
        sim.start_live()
        deadline = time.monotonic() + 30
        while stored_rows(admin) <= before:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        sim.stop_live()
    finally:
        code, _took = stop_gracefully(daemon)
    said = log.read_text()
    assert code == 0, said[-3000:]
    assert "may not" not in said, said[-3000:]
    assert "Traceback" not in said, said[-3000:]
    succeeded(run(config, "merchant", "reset", "granted", "--yes"))


def the_read_accounts_run_every_read_command(configs: list[Path], window: tuple[str, ...]) -> None:
    """``recordsync_control`` and ``recordsync_read``: every read command and dry run; a
    ``verify``, which takes the merchant's lease, is refused."""
    for config in configs:
        code, out, err = run(config, "status", "--check")
        assert code in (0, 1), out + err  # ready or not: it answered, under its grants
        assert out.startswith(("ready", "not ready")), out + err
        assert "may not" not in out + err
        succeeded(run(config, "status", "--json"))
        succeeded(run(config, "backfill", *window, "--dry-run"))
        succeeded(run(config, "verify", *window, "--dry-run"))
        succeeded(run(config, "merchant", "resync", "granted", *window, "--dry-run"))
        succeeded(run(config, "merchant", "reset", "granted", "--yes", "--dry-run"))
        assert "may not" in refused(run(config, "verify", *window))


def stored_rows(admin: Engine) -> int:
    with admin.connect() as conn:
        return int(conn.execute(text("SELECT COUNT(*) FROM records")).scalar_one())
