"""The commands with several merchants configured: ``backfill --merchant`` syncs the
one named with its own secret file, ``report --merchant`` reports one and the default reports
every one, and ``run`` refuses several until the multi-merchant daemon exists."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from support.pages import commit_window_page
from support.warehouse_samples import make_record

from recordsync import cli
from recordsync.core.state import REBUILD_JOB, Window
from recordsync.core.times import format_time
from recordsync.sim import SimConfig, Simulator
from recordsync.warehouse import Warehouse

SECRET_A = "brand-a-secret-0123456789abcdefghijklmnopqr"
SECRET_B = "brand-b-secret-0123456789abcdefghijklmnopqr"
T0 = datetime(2026, 3, 2, tzinfo=UTC)


def fleet_config(tmp_path, *, base_url, database_url):
    """brand-a with an inline secret, brand-b with a secret file; shared defaults on top."""
    secret_b = tmp_path / "brand-b.secret"
    secret_b.write_text(SECRET_B + "\n", encoding="utf-8")
    secret_b.chmod(0o600)
    path = tmp_path / "fleet.toml"
    path.write_text(
        f'base_url = "{base_url}"\ndatabase_url = "{database_url}"\nhttp_port = 0\n'
        f'[[merchants]]\nmerchant_id = "brand-a"\nsecret = "{SECRET_A}"\n'
        f'[[merchants]]\nmerchant_id = "brand-b"\nsecret_file = "{secret_b}"\n',
        encoding="utf-8",
    )
    return str(path)


@pytest.fixture
def sim() -> Iterator[Simulator]:
    """The platform of brand-b only: a request signed for brand-a would be refused."""
    simulator = Simulator(
        SimConfig(
            merchant_id="brand-b",
            secret=SECRET_B,
            seed=5,
            history_days=0.5,
            rounds_per_day=300,
            record_requests=20,
        )
    )
    simulator.start()
    try:
        yield simulator
    finally:
        simulator.stop()


def test_backfill_syncs_the_merchant_named_with_its_secret_file(sim, tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    config = fleet_config(tmp_path, base_url=sim.base_url, database_url=url)
    end = sim.now()
    start = end - timedelta(hours=6)
    window = ["--from", format_time(start), "--to", format_time(end)]
    assert cli.main(["backfill", "--merchant", "brand-b", "--config", config, *window]) == 0
    store = Warehouse.connect(url)
    try:
        synced = store.records.fetch_records("brand-b")
        assert store.records.fetch_records("brand-a") == {}
    finally:
        store.close()
    expected = {
        record_id
        for record_id, record in sim.truth().items()
        if format_time(start) <= record["created_at"] < format_time(end)
    }
    assert expected
    assert set(synced) == expected
    assert sim.stats().auth_failures == 0
    assert SECRET_B not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["backfill"], "several merchants are configured (brand-a, brand-b): name one"),
        (["backfill", "--merchant", "brand-z"], "'brand-z' is not configured; configured: "),
    ],
    ids=["backfill-ambiguous", "backfill-unknown"],
)
def test_a_command_for_one_merchant_names_the_choices_with_exit_2(tmp_path, capsys, argv, expected):
    config = fleet_config(
        tmp_path, base_url="http://127.0.0.1:9", database_url=f"sqlite:///{tmp_path / 'x.db'}"
    )
    window = ["--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z"]
    extra = window if argv[0] == "backfill" else []
    assert cli.main(["--config", config, *argv, *extra]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert expected in line
    assert not (tmp_path / "x.db").exists()  # refused before touching anything


@pytest.fixture
def filled(tmp_path):
    """A warehouse with one snapshot page for each of brand-a and brand-b."""
    url = f"sqlite:///{tmp_path / 'report.db'}"
    store = Warehouse.connect(url)
    window = Window(T0 - timedelta(days=1), T0)
    try:
        store.migrate()
        for merchant_id in ("brand-a", "brand-b"):
            store.state.start_rebuild(
                merchant_id,
                change_cursor="c",
                anchor_at=T0,
                history_from=window.start,
                snapshot_to=window.end,
                windows=[window],
            )
            commit_window_page(
                store,
                merchant_id,
                REBUILD_JOB,
                window,
                records=[make_record(f"{merchant_id}-r", 1, created_at=T0 - timedelta(hours=3))],
                rejected=[],
                next_cursor=None,
                cursor_issued_at=T0,
                done=True,
                position="first",
            )
    finally:
        store.close()
    return fleet_config(tmp_path, base_url="http://127.0.0.1:9", database_url=url)


def test_report_defaults_to_every_merchant_grouped(filled, capsys):
    assert cli.main(["report", "--format", "json", "--config", filled]) == 0
    documents = json.loads(capsys.readouterr().out)["merchants"]
    assert [document["merchant_id"] for document in documents] == ["brand-a", "brand-b"]
    assert all(document["rows"][0]["rounds"] == 1 for document in documents)


def test_report_merchant_prints_that_merchant_s_report_alone(filled, capsys):
    assert (
        cli.main(["report", "--merchant", "brand-b", "--format", "json", "--config", filled]) == 0
    )
    document = json.loads(capsys.readouterr().out)
    assert document["merchant_id"] == "brand-b"
    assert cli.main(["report", "--merchant", "brand-z", "--config", filled]) == 2
    assert "'brand-z' is not configured; configured: brand-a, brand-b" in capsys.readouterr().err
