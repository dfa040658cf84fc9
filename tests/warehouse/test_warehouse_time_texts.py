"""A page's times rendered at once give the very text the one-value functions give."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recordsync.warehouse.types import (
    mysql_time_literals,
    mysql_time_text,
    sqlite_time_text,
    sqlite_time_texts,
)

zones = st.sampled_from(
    [UTC, timezone(timedelta(0)), timezone(timedelta(hours=2)), timezone(timedelta(hours=-9.5))]
)
aware = st.builds(
    lambda at, zone: at.replace(tzinfo=UTC).astimezone(zone),
    st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(9998, 1, 1))  # noqa: DTZ001
    | st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2024, 1, 2)).map(  # noqa: DTZ001
        lambda at: at.replace(microsecond=0)
    ),
    zones,
)
times = st.lists(st.none() | aware, max_size=20)


@given(values=times)
def test_sqlite_texts_of_a_page_are_the_one_value_texts(values: list[datetime | None]) -> None:
    assert sqlite_time_texts(values) == [
        None if value is None else sqlite_time_text(value) for value in values
    ]


@given(values=times)
def test_mysql_literals_of_a_page_are_the_one_value_literals(
    values: list[datetime | None],
) -> None:
    assert mysql_time_literals(values) == [
        "NULL" if value is None else f"'{mysql_time_text(value)}'" for value in values
    ]


@pytest.mark.parametrize(
    "naive",
    [datetime(2024, 3, 1), datetime(2024, 3, 1, 0, 0, 0, 123456)],  # noqa: DTZ001 - the case
    ids=["whole-second", "with-fraction"],
)
def test_a_naive_time_in_a_page_is_refused(naive: datetime) -> None:
    page = [datetime(2024, 3, 1, tzinfo=UTC), naive]
    with pytest.raises(ValueError, match="naive"):
        sqlite_time_texts(page)
    with pytest.raises(ValueError, match="naive"):
        mysql_time_literals(page)
