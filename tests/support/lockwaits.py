"""A connection's lock waits bounded on the server, for tests that hold one transaction open
while another runs beside it: a wait that should not happen fails in a second."""

from __future__ import annotations

from sqlalchemy import Connection


def bound_lock_waits(conn: Connection, *, seconds: int) -> None:
    """Row lock waits of ``conn`` end after ``seconds`` (PostgreSQL or MariaDB)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SET lock_timeout = '{seconds}s'")
    else:
        conn.exec_driver_sql(f"SET SESSION innodb_lock_wait_timeout = {seconds}")
    conn.commit()
