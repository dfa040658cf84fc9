"""Which driver errors are a lost lock conflict, and how a page transaction is run again."""

from __future__ import annotations

import random

import psycopg.errors
import pymysql.err
import pytest
from sqlalchemy import exc

from recordsync.core.errors import WarehouseUnavailableError
from recordsync.warehouse.pages.conflicts import ATTEMPTS, lost_lock_conflict, retry_lost_conflicts


def _unavailable(driver_error: BaseException) -> WarehouseUnavailableError:
    """As ``connection.translate_errors`` raises it: from SQLAlchemy's wrapper of the driver's."""
    error = WarehouseUnavailableError("warehouse unavailable")
    error.__cause__ = exc.OperationalError("COMMIT", {}, driver_error)
    return error


@pytest.mark.parametrize(
    ("driver_error", "conflict"),
    [
        (pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock"), True),
        (pymysql.err.OperationalError(1205, "Lock wait timeout exceeded"), True),
        (psycopg.errors.DeadlockDetected("deadlock detected"), True),
        (psycopg.errors.SerializationFailure("could not serialize access"), True),
        (pymysql.err.OperationalError(2013, "Lost connection to server during query"), False),
        (pymysql.err.OperationalError(1040, "Too many connections"), False),
        (psycopg.errors.AdminShutdown("terminating connection"), False),
        (psycopg.OperationalError("connection refused"), False),
        # An OS error number that happens to be a server's deadlock code.
        (ConnectionRefusedError(1213, "not a driver error"), False),
    ],
    ids=[
        "mariadb-deadlock",
        "mariadb-lock-wait-timeout",
        "postgres-deadlock",
        "postgres-serialization",
        "mariadb-lost-connection",
        "mariadb-too-many-connections",
        "postgres-shutdown",
        "postgres-refused",
        "not-a-driver-error",
    ],
)
def test_only_deadlocks_and_lock_timeouts_are_lost_conflicts(
    driver_error: BaseException, conflict: bool
) -> None:
    assert lost_lock_conflict(_unavailable(driver_error)) is conflict


class _Transaction:
    """Fails with the given errors, one per attempt, then returns the attempt number."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.attempts = 0

    def __call__(self) -> int:
        self.attempts += 1
        if self.failures:
            raise self.failures.pop(0)
        return self.attempts


DEADLOCK = pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock")


def test_a_transaction_that_lost_a_deadlock_runs_again_after_a_short_pause() -> None:
    pauses: list[float] = []
    retried: list[int] = []
    transaction = _Transaction(_unavailable(DEADLOCK), _unavailable(DEADLOCK))

    result = retry_lost_conflicts(
        transaction, sleep=pauses.append, rng=random.Random(1), on_retry=retried.append
    )

    assert result == 3
    assert retried == [1, 2]
    assert len(pauses) == 2
    assert all(0 <= pause <= 0.1 for pause in pauses)


def test_a_conflict_lost_every_time_is_raised_after_the_last_attempt() -> None:
    transaction = _Transaction(*(_unavailable(DEADLOCK) for _ in range(ATTEMPTS + 1)))

    with pytest.raises(WarehouseUnavailableError):
        retry_lost_conflicts(transaction, sleep=lambda _: None, rng=random.Random(1))

    assert transaction.attempts == ATTEMPTS


@pytest.mark.parametrize(
    "failure",
    [
        _unavailable(pymysql.err.OperationalError(2013, "Lost connection to server")),
        ValueError("a bug"),
    ],
    ids=["server-gone", "other-error"],
)
def test_other_failures_are_raised_at_once(failure: BaseException) -> None:
    transaction = _Transaction(failure)

    with pytest.raises(type(failure)):
        retry_lost_conflicts(transaction, sleep=lambda _: None, rng=random.Random(1))

    assert transaction.attempts == 1
