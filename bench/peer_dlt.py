"""Benchmark 5, a peer side by side: dlt and recordsync load the same data into PostgreSQL.

One simulator process (rate limit lifted) serves the history; each tool runs as its own child
process into its own fresh PostgreSQL database, timed and measured the same way (wall time
of the process, peak RSS from ``wait4``):

- recordsync: ``python -m recordsync backfill --from ... --to ...``;
- dlt: a ``dlt.resource`` with an incremental cursor on ``created_at`` that walks the records
  endpoint window by window (cursor pages, at most 24 h a window, as the spec asks),
  ``write_disposition="merge"`` on ``record_id`` (highest revision first in a load), exact
  types as hints (decimal amounts, timestamps), requests signed by a ``requests`` auth class
  that reuses ``recordsync.platform.signing`` over the exact path and query sent.

dlt is a benchmark dependency only: ``pip install "dlt[postgres]"``.

    .venv/bin/python bench/peer_dlt.py [--size tiny|full]
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import harness
from sqlalchemy import create_engine, pool, text
from sqlalchemy.engine import make_url

SIZES: Final = {
    # history_days, rounds_per_day
    "tiny": (0.5, 4_000),
    "full": (3.0, 100_000),
}
TARGET_RATIO: Final = 3.0


# -- the dlt side, run in a child process (``--dlt-child``) ----------------------------------


def dlt_child(base_url: str, database_url: str, start: str, end: str) -> None:
    import dlt  # noqa: PLC0415 - a bench-only dependency, imported where it is used
    import requests  # noqa: PLC0415

    from recordsync.platform.signing import format_timestamp, sign  # noqa: PLC0415
    from recordsync.sim import DEMO_MERCHANT_ID, DEMO_SECRET  # noqa: PLC0415

    class PlatformAuth(requests.auth.AuthBase):
        """Signs the exact path and query requests sends (spec: Authentication)."""

        def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
            timestamp = format_timestamp(time.time())
            body = request.body if isinstance(request.body, bytes) else b""
            request.headers["X-Merchant-Id"] = DEMO_MERCHANT_ID
            request.headers["X-Timestamp"] = timestamp
            request.headers["X-Signature"] = sign(
                DEMO_SECRET,
                timestamp=timestamp,
                method=request.method or "GET",
                target=request.path_url,
                body=body,
            )
            return request

    money = {"data_type": "decimal", "precision": 30, "scale": 4}
    moment = {"data_type": "timestamp", "timezone": True}
    columns: dict[str, Any] = {
        "revision": {"data_type": "bigint", "dedup_sort": "desc"},
        **dict.fromkeys(("bet_amount", "refund_amount", "payout_amount"), money),
        "net_amount": money,
        **dict.fromkeys(("created_at", "settled_at", "updated_at"), moment),
    }

    @dlt.resource(
        name="records", write_disposition="merge", primary_key="record_id", columns=columns
    )
    def records(
        created_at: Any = dlt.sources.incremental(  # noqa: B008 - dlt's documented idiom
            "created_at", initial_value=start, end_value=end, range_end="open"
        ),
    ) -> Any:
        session = requests.Session()
        session.auth = PlatformAuth()
        window = datetime.fromisoformat(str(created_at.last_value))
        stop = datetime.fromisoformat(end)
        while window < stop:
            window_end = min(window + timedelta(hours=24), stop)
            params: dict[str, Any] = {
                "created_from": harness.iso_ms(window),
                "created_to": harness.iso_ms(window_end),
                "limit": 1000,
            }
            while True:
                response = session.get(f"{base_url}/v1/records", params=params, timeout=30)
                response.raise_for_status()
                data = response.json()["data"]
                yield data["items"]
                if not data["has_more"]:
                    break
                params = {"cursor": data["next_cursor"], "limit": 1000}
            window = window_end

    url = make_url(database_url)
    # dlt insists on a password; the test server's trust authentication ignores it.
    password = url.password or "unused"
    credentials = f"postgresql://{url.username}:{password}@{url.host}:{url.port}/{url.database}"
    with tempfile.TemporaryDirectory() as folder:
        pipeline = dlt.pipeline(
            pipeline_name="bench_peer",
            destination=dlt.destinations.postgres(credentials=credentials),
            dataset_name="platform",
            pipelines_dir=folder,
        )
        info = pipeline.run(records())
        info.raise_on_failed_jobs()


# -- the benchmark ---------------------------------------------------------------------------


def count_rows(database_url: str, table: str) -> int:
    engine = create_engine(database_url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())
    finally:
        engine.dispose()


def main() -> int:
    args = harness.arguments(__doc__.splitlines()[0])
    if importlib.util.find_spec("dlt") is None:
        print("dlt is not installed: pip install -e '.[bench]' (or 'dlt[postgres]')")
        return 2
    history_days, rounds_per_day = SIZES[args.size]
    report = harness.Report("side by side with dlt, into PostgreSQL", args.size)
    report.header()
    with harness.sim_process(history_days=history_days, rounds_per_day=rounds_per_day) as sim:
        end = datetime.now(UTC)
        start = end - timedelta(days=history_days, hours=1)
        report.note(f"{sim.records:,} records over {history_days} days, rate limit lifted")
        with harness.database("postgres") as url:
            env = harness.environment_for(sim.base_url, url, RECORDSYNC_PAGE_SIZE="1000")
            command = [
                sys.executable,
                "-m",
                "recordsync",
                "backfill",
                "--from",
                harness.iso_ms(start),
                "--to",
                harness.iso_ms(end),
            ]
            ours = harness.run_child(command, env, timeout=3600)
            our_rows = count_rows(url, "records")
        with harness.database("postgres") as url:
            env = {
                **os.environ,
                "RUNTIME__DLTHUB_TELEMETRY": "false",
                "RUNTIME__LOG_LEVEL": "WARNING",
            }
            command = [
                sys.executable,
                __file__,
                "--dlt-child",
                sim.base_url,
                url,
                start.isoformat(),
                end.isoformat(),
            ]
            peer = harness.run_child(command, env, timeout=3600)
            peer_rows = count_rows(url, "platform.records") if peer.returncode == 0 else 0
    for name, run, rows in (("recordsync", ours, our_rows), ("dlt", peer, peer_rows)):
        if run.returncode != 0:
            report.note(f"{name} exited {run.returncode}: {run.output[-1500:]}")
        if rows != sim.records:
            report.note(f"{name}: {rows:,} rows stored, expected {sim.records:,}")
    ours_rate = sim.records / ours.seconds
    peer_rate = sim.records / peer.seconds
    report.add("recordsync: records/s (whole process)", ours_rate, "rec/s")
    report.add("dlt: records/s (whole process)", peer_rate, "rec/s")
    ratio = ours_rate / peer_rate
    report.add(
        "speed ratio recordsync / dlt",
        ratio,
        "x",
        target=f">= {TARGET_RATIO:.0f}",
        met=ratio >= TARGET_RATIO and peer.returncode == 0,
    )
    report.add("recordsync: peak RSS", ours.peak_rss_mb, "MB")
    report.add("dlt: peak RSS", peer.peak_rss_mb, "MB")
    report.add("peak memory ratio dlt / recordsync", peer.peak_rss_mb / ours.peak_rss_mb, "x")
    report.add("recordsync: CPU per record", ours.cpu_seconds / sim.records * 1e6, "us")
    report.add("dlt: CPU per record", peer.cpu_seconds / sim.records * 1e6, "us")
    return report.finish(check=args.check)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--dlt-child"]:
        dlt_child(*sys.argv[2:6])
        raise SystemExit(0)
    raise SystemExit(main())
