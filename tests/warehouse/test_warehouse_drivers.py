"""The server databases are written through the drivers recordsync ships with, and only those."""

from __future__ import annotations

import pytest

from recordsync.core.errors import ConfigurationError
from recordsync.warehouse import Warehouse, create_warehouse_engine
from recordsync.warehouse.connection import warehouse_url


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("postgresql://u:pw@127.0.0.1:1/x", "psycopg"),
        ("mysql://u:pw@127.0.0.1:1/x", "pymysql"),
        ("mariadb://u:pw@127.0.0.1:1/x", "pymysql"),
        ("postgresql+psycopg://u:pw@127.0.0.1:1/x", "psycopg"),
        ("mysql+pymysql://u:pw@127.0.0.1:1/x", "pymysql"),
    ],
)
def test_a_url_without_a_driver_gets_the_one_recordsync_writes_through(url, driver):
    engine = create_warehouse_engine(url)
    try:
        assert engine.dialect.driver == driver
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("url", "advice"),
    [
        ("postgresql+psycopg2://u:s3cret@127.0.0.1:1/x", "postgresql+psycopg://"),
        ("postgresql+pg8000://u:s3cret@127.0.0.1:1/x", "postgresql+psycopg://"),
        ("mysql+mysqldb://u:s3cret@127.0.0.1:1/x", "mysql+pymysql://"),
        ("mariadb+mariadbconnector://u:s3cret@127.0.0.1:1/x", "mariadb+pymysql://"),
    ],
)
def test_another_driver_is_refused_saying_which_to_use(url, advice):
    for connect in (warehouse_url, create_warehouse_engine, Warehouse.connect):
        with pytest.raises(ConfigurationError) as caught:
            connect(url)
        message = str(caught.value)
        assert advice in message
        assert "s3cret" not in message


def test_sqlite_keeps_its_driver():
    assert warehouse_url("sqlite:///x.db").get_driver_name() == "pysqlite"
