"""The shared database fixtures skip (or fail, when services are required) with a clear reason."""

from __future__ import annotations

import pytest
from dbfixtures import MARIADB_URL_ENV, POSTGRES_URL_ENV, REQUIRE_SERVICES_ENV, fresh_database
from sqlalchemy import create_engine, inspect

NOWHERE = {
    "postgres": (POSTGRES_URL_ENV, "postgresql+psycopg://postgres@127.0.0.1:1/test"),
    "mariadb": (MARIADB_URL_ENV, "mysql+pymysql://root@127.0.0.1:1/test"),
}


@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_an_absent_server_skips_with_how_to_start_it(kind, monkeypatch, tmp_path):
    monkeypatch.setenv(*NOWHERE[kind])
    monkeypatch.delenv(REQUIRE_SERVICES_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped, fresh_database(kind, tmp_path):
        pass
    reason = str(skipped.value)
    assert f"{kind} server not reachable at" in reason
    assert "127.0.0.1:1" in reason
    assert "docker run" in reason
    assert NOWHERE[kind][0] in reason


@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_an_absent_server_fails_when_services_are_required(kind, monkeypatch, tmp_path):
    monkeypatch.setenv(*NOWHERE[kind])
    monkeypatch.setenv(REQUIRE_SERVICES_ENV, "1")
    with (
        pytest.raises(pytest.fail.Exception, match="not reachable"),
        fresh_database(kind, tmp_path),
    ):
        pass


def test_each_test_gets_a_new_empty_database(warehouse_url, request):
    engine = create_engine(warehouse_url)
    try:
        assert inspect(engine).get_table_names() == []
    finally:
        engine.dispose()
    assert request.node.callspec.id in {"sqlite", "postgres", "mariadb"}
