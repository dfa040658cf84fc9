"""Point reads beside the writes: the revisions the drift check compares, on every backend."""

from __future__ import annotations

import math

from sqlalchemy import event
from support.pages import commit_window_page
from support.warehouse_samples import MERCHANT, T0, WINDOW, make_record

from recordsync.core.state import REBUILD_JOB
from recordsync.warehouse.reads import IN_LIST_CHUNK


def test_stored_revisions_answers_for_existing_ids_only_across_chunks(rebuilding):
    stored = [make_record(f"r{i:04d}", revision=i % 7 + 1) for i in range(IN_LIST_CHUNK + 300)]
    commit_window_page(
        rebuilding,
        MERCHANT,
        REBUILD_JOB,
        WINDOW,
        records=stored,
        rejected=[],
        next_cursor="next",
        cursor_issued_at=T0,
        done=False,
        position="start",
    )
    # Unknown ids in between the stored ones, so every chunk holds some of each.
    asked = [
        record_id
        for record in stored
        for record_id in (record.record_id, f"unknown-{record.record_id}")
    ]
    queries: list[str] = []

    def count(_conn, _cursor, statement, *_rest):
        if "FROM records" in statement:
            queries.append(statement)

    event.listen(rebuilding.engine, "before_cursor_execute", count)
    try:
        found = rebuilding.records.stored_revisions(MERCHANT, asked)
    finally:
        event.remove(rebuilding.engine, "before_cursor_execute", count)
    assert found == {record.record_id: record.revision for record in stored}
    assert len(queries) == math.ceil(len(asked) / IN_LIST_CHUNK) > 1
    assert rebuilding.records.stored_revisions("merchant-2", asked) == {}
    assert rebuilding.records.stored_revisions(MERCHANT, []) == {}
