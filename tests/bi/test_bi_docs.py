"""The example queries of docs/bi.md run as written on the databases they name."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

from sqlalchemy import text
from support.bi_data import MERCHANT, MIDNIGHT

DOC = Path(__file__).resolve().parents[2] / "docs" / "bi.md"
BACKENDS = ("sqlite", "postgresql", "mariadb")
MARKER = re.compile(r"-- ((?:all|postgresql|mariadb|sqlite)(?:, (?:postgresql|mariadb|sqlite))*)\n")


def examples() -> list[tuple[list[str], str]]:
    """(backends, SQL) of every ```sql block whose first line names where it runs."""
    found = []
    for block in re.findall(r"```sql\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL):
        marker = MARKER.match(block)
        if marker is not None:
            names = marker[1].split(", ")
            found.append((list(BACKENDS) if names == ["all"] else names, block[marker.end() :]))
    return found


def test_the_doc_has_examples_for_every_backend():
    runnable = examples()
    assert len(runnable) >= 8
    for backend in BACKENDS:
        assert sum(backend in where for where, _ in runnable) >= 5, backend


def test_every_documented_query_runs_where_it_says_and_finds_rows(loaded):
    backend = {"mysql": "mariadb"}.get(loaded.engine.dialect.name, loaded.engine.dialect.name)
    sqlite = backend == "sqlite"
    last = MIDNIGHT.date()
    first = last - timedelta(days=3)
    values = {
        "merchant_id": MERCHANT,
        "currency": "USDT",
        "player_id": "edge-player",
        "record_id": "edge-refund",
        "from_day": first.isoformat() if sqlite else first,
        "to_day": last.isoformat() if sqlite else last,
    }
    ran = 0
    with loaded.engine.connect() as conn:
        for where, sql in examples():
            if backend in where:
                assert conn.execute(text(sql), values).all(), sql
                ran += 1
    assert ran >= 5
